package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

type scriptedSampler struct {
	mu    sync.Mutex
	calls int
	errs  []error // error for call i; nil past the end
}

func (*scriptedSampler) Name() string { return "scripted" }

func (s *scriptedSampler) Sample(context.Context) (state.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.calls
	s.calls++
	if i < len(s.errs) && s.errs[i] != nil {
		return nil, s.errs[i]
	}
	return state.NodeMemoryMeasured{NodeID: "n"}, nil
}

type chanPublisher chan state.Event

func (c chanPublisher) Publish(ev state.Event) error { c <- ev; return nil }

func TestRunSamplesLogsAndStops(t *testing.T) {
	boom := errors.New("sensor gone")
	s := &scriptedSampler{errs: []error{boom, boom, boom, nil}}
	pub := make(chanPublisher, 16)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s, 5*time.Millisecond, pub, log) }()
	select {
	case <-pub: // the fourth call succeeds and publishes
	case <-time.After(10 * time.Second):
		t.Fatal("no event published")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v on cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop on cancel")
	}
	out := logs.String()
	if n := strings.Count(out, "sensor gone"); n != 1 {
		t.Errorf("the same error was logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "sampling recovered") {
		t.Errorf("recovery not logged:\n%s", out)
	}
}

type syncBuffer = testutil.SyncBuffer
