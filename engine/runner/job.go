package runner

import (
	"context"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Job is a request submitted to a Scheduler: its pieces as they come, then
// its result.
type Job struct {
	ctx     context.Context
	cancel  context.CancelFunc
	req     *runnerapi.Request
	prompt  []int32
	traceID string
	rec     *trace.Recorder
	queued  time.Time
	start   time.Time
	queueNs int64
	res     runnerapi.Result // owned by the scheduler until done

	mu     sync.Mutex // guards pieces, ended, final, err
	pieces []runnerapi.Piece
	ended  bool
	final  runnerapi.Result
	err    error
	notify chan struct{}
	done   chan struct{}
}

func (j *Job) push(p runnerapi.Piece) {
	j.mu.Lock()
	j.pieces = append(j.pieces, p)
	j.mu.Unlock()
	j.wake()
}

func (j *Job) wake() {
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

func (j *Job) finish(res runnerapi.Result, err error) {
	j.mu.Lock()
	if j.ended {
		j.mu.Unlock()
		return
	}
	j.ended, j.final, j.err = true, res, err
	j.mu.Unlock()
	j.cancel()
	close(j.done)
	j.wake()
}

// Wait calls emit with every piece as it comes, and returns the result
// once the job ends. An error from emit cancels the job and is returned.
func (j *Job) Wait(emit func(runnerapi.Piece) error) (runnerapi.Result, error) {
	for {
		j.mu.Lock()
		ps, ended := j.pieces, j.ended
		j.pieces = nil
		j.mu.Unlock()
		for _, p := range ps {
			if err := emit(p); err != nil {
				j.cancel()
				<-j.done
				return j.final, err
			}
		}
		if ended {
			return j.final, j.err
		}
		<-j.notify
	}
}

// QueueNs is how long the job waited for a free slot.
func (j *Job) QueueNs() int64 {
	<-j.done
	return j.queueNs
}
