package trace

import (
	"sync"
	"time"
)

// Periodic calls read now, every period, and once more when stop is
// called (which waits for a call in progress): the shape of counter
// sampling over a task, whose start and end need samples of their own.
func Periodic(period time.Duration, read func()) (stop func()) {
	read()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(done)
		wg.Wait()
		read()
	})
}
