package testutil

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when the test moves it (tailscale's
// tstest.Clock): the code under test takes its Now (a Config's
// `Now func() time.Time`), and the test Advances it past a grace period
// or an age limit instead of sleeping through it. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// NewClock is a clock that reads start until advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
