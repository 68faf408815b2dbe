package telemetry

import (
	"context"
	"log/slog"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
)

// Sampler takes one reading and turns it into an event. Sample is called from
// one goroutine at a time.
type Sampler interface {
	// Name is a short label for logs, e.g. "memory".
	Name() string
	// Sample returns the event to publish, or nil when there is nothing
	// new worth publishing this time.
	Sample(ctx context.Context) (state.Event, error)
}

// Publisher takes the events a sampler makes; state.Sequencer satisfies it.
type Publisher interface {
	Publish(ev state.Event) error
}

// Run samples s at once and then every interval until ctx ends; it returns
// nil on cancellation. A failing sample is logged (once per distinct error,
// so a missing sensor does not flood the log) and retried on the next tick;
// the agent keeps running.
func Run(ctx context.Context, s Sampler, interval time.Duration, pub Publisher, log *slog.Logger) error {
	log = log.With("component", "sampler", "sampler", s.Name())
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		ev, err := s.Sample(ctx)
		if err == nil && ev != nil {
			err = pub.Publish(ev)
		}
		switch {
		case err != nil && err.Error() != lastErr:
			if ctx.Err() == nil {
				log.Warn("sample failed", "err", err)
			}
			lastErr = err.Error()
		case err == nil && lastErr != "":
			log.Info("sampling recovered")
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
