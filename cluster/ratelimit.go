package cluster

import "time"

// A member that sends valid frames too fast (a bug, or a peer with the
// key gone bad) must not starve the others: each control link's inbound
// frames are paced by a token bucket. The reader sleeps while the bucket
// is empty, so TCP's flow control slows the sender and nothing queues up.
// Legitimate control traffic is a heartbeat a second and batches of
// events, far below the rate.
//
// Events submitted to the master get a bucket of their own: the master
// sends each to every follower, so a member submitting too many would
// load them all. A node publishes a few events a second (and a queue of
// at most 256 after a gap), so 200/s with a burst of 1000 holds back only
// a runaway.
const (
	linkFramesPerSec   = 1000
	linkFrameBurst     = 2000
	submitEventsPerSec = 200
	submitEventBurst   = 1000
)

// frameLimiter is a token bucket; not safe for concurrent use (one per
// link reader).
type frameLimiter struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

func newFrameLimiter(rate, burst float64, now time.Time) *frameLimiter {
	return &frameLimiter{rate: rate, burst: burst, tokens: burst, last: now}
}

// take spends a token for a frame read at now and returns how long the
// reader must wait before the next read (0: none).
func (l *frameLimiter) take(now time.Time) time.Duration { return l.takeN(now, 1) }

// takeN spends n tokens.
func (l *frameLimiter) takeN(now time.Time, n float64) time.Duration {
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	l.tokens -= n
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens / l.rate * float64(time.Second))
}
