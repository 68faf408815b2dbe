package discovery

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const waitTimeout = 5 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

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

// checkGoroutines fails the test if goroutines started during it are still
// running once its other cleanups ran. Call it first in a test.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(waitTimeout)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
