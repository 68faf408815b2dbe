package cluster

import "time"

// A member that sends valid frames too fast (a bug, or a peer with the
// key gone bad) must not starve the others: each control link's inbound
// frames are paced by a token bucket. The reader sleeps while the bucket
// is empty, so TCP's flow control slows the sender and nothing queues up.
// Legitimate control traffic is a heartbeat a second and batches of
// events, far below the rate.
const (
	linkFramesPerSec = 1000
	linkFrameBurst   = 2000
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
func (l *frameLimiter) take(now time.Time) time.Duration {
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	l.tokens--
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens / l.rate * float64(time.Second))
}
