package discovery

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitTimeout bounds how long a stopped Discovery may take to return.
const waitTimeout = 5 * time.Second

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// testConfig is a loopback-free, mDNS-free base config.
func testConfig(t *testing.T, id string) Config {
	return Config{
		NodeID: id, Version: "test", KeyFP: "0123456789abcdef", PeerPort: 7000,
		BrowseInterval: 100 * time.Millisecond, Logger: testLogger(t).With("node", id),
	}
}

func mustNew(t *testing.T, cfg Config) *Discovery {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

// start runs d until the returned stop is called (or the test ends); stop
// waits for Run to return.
func start(t *testing.T, d *Discovery) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Errorf("Run did not return within %v of cancel", waitTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func nodeIDs(ps []Peer) []string {
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.NodeID)
	}
	return ids
}

func problem(r Report, code string) (Problem, bool) {
	i := slices.IndexFunc(r.Problems, func(p Problem) bool { return p.Code == code })
	if i < 0 {
		return Problem{}, false
	}
	return r.Problems[i], true
}
