//go:build !linux

package delayproxy

import (
	"runtime"
	"time"
)

// sleepUntil returns at t, give or take the scheduler: time.Sleep until 1
// ms before t (the runtime's poller waits in whole milliseconds), then it
// yields until t. Linux blocks in nanosleep instead (sleep_linux.go).
func sleepUntil(t time.Time) {
	if d := time.Until(t) - time.Millisecond; d > 0 {
		time.Sleep(d)
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}
