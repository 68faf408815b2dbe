package delayproxy

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// sleepUntil returns at t, give or take the kernel's wakeup. time.Sleep
// can wake up to a millisecond late (the runtime's poller waits in whole
// milliseconds), a 10 % error on a 5 ms delay, and spinning until t (as
// this did before) took a core from the processes behind the proxy: on a
// 2-core machine a tensor-parallel group's 33 all-reduces a token each
// spun two goroutines for the whole delay. So it blocks its thread in
// nanosleep with the thread's timer slack at 1 µs (Linux's default of 50
// µs would be the error otherwise).
func sleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The slack is per thread; an error leaves the default's 50 µs.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
