// Package testutil is the one kit of test helpers every package uses: poll
// for a condition instead of sleeping, check that a test leaves no
// goroutines behind, pick free ports, advance a clock. Of the project it
// imports only internal/freeport, the port picker it shares with the
// benchmarks.
package testutil

import (
	"bytes"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultTimeout is how long WaitFor polls before failing: long enough for a
// loaded CI machine under -race, short enough to fail a hung test quickly.
const DefaultTimeout = 20 * time.Second

// pollEvery is the polling period: short, since conditions are cheap reads.
const pollEvery = 10 * time.Millisecond

// WaitFor polls cond until it holds, failing the test after DefaultTimeout.
// what names the condition in the failure message.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	WaitForTimeout(tb, DefaultTimeout, what, cond)
}

// WaitForTimeout is WaitFor with its own timeout, for conditions that are
// known to take long (a model load) or that must happen fast.
func WaitForTimeout(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Eventually(d, cond) {
		tb.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Eventually polls cond for up to d and reports whether it came to hold, for
// callers that want to fail with their own message.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
	return true
}

// Never checks that cond stays false for d: the one honest way to assert
// that something does not happen. It polls, so a violation fails early.
func Never(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			tb.Fatalf("%s happened, and must not", what)
		}
		time.Sleep(pollEvery)
	}
}

// CheckLeaks records the goroutines running now and, when the test ends,
// fails it if new ones are still running after a grace period in which
// they may finish. Call it first in a test, before starting anything.
func CheckLeaks(tb testing.TB) {
	tb.Helper()
	checkLeaks(tb, 5*time.Second)
}

func checkLeaks(tb testing.TB, grace time.Duration) {
	before := goroutineSet()
	tb.Cleanup(func() {
		var leaked []string
		ok := Eventually(grace, func() bool {
			leaked = leaked[:0]
			for id, stack := range goroutines() {
				if !before[id] && !ignored(stack) {
					leaked = append(leaked, stack)
				}
			}
			return len(leaked) == 0
		})
		if !ok {
			slices.Sort(leaked)
			tb.Errorf("%d goroutine(s) leaked:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

// ignored reports goroutines that belong to the runtime, the testing
// framework or the shared HTTP connection pool, not to the code under test.
func ignored(stack string) bool {
	for _, s := range []string{
		"testing.(*T).Run(", "testing.RunTests", "testing.(*M).", "testing.tRunner(",
		"os/signal.signal_recv", "runtime.ensureSigM", "testutil.goroutines",
		// Idle keep-alive connections of a shared http.Transport.
		"net/http.(*persistConn).readLoop", "net/http.(*persistConn).writeLoop",
	} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

func goroutineSet() map[string]bool {
	m := map[string]bool{}
	for id := range goroutines() {
		m[id] = true
	}
	return m
}

// goroutines maps each goroutine's header ("goroutine 12") to its stack.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, " [")
		if strings.HasPrefix(head, "goroutine ") {
			out[head] = g
		}
	}
	return out
}

// SyncBuffer is a bytes.Buffer safe to read while another goroutine or a
// process writes to it: a log sink, or a child's stderr.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
