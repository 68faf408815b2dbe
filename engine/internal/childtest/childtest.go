// Package childtest runs a piece of a test in a process of its own: the
// test binary run again, given a job as JSON, its result handed back in a
// file. Loading GPU backends one after another in one process has
// corrupted lavapipe's heap (docs/conformance.md), and a runner loads one
// model a process, so each GPU load of a test gets a process, as it would
// in production.
//
// A test package declares one Process, calls its Main first in TestMain,
// and calls Run from its tests.
package childtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// Process is a kind of child of a test package, which gets a job of type
// J. Its fields are set once, where it is declared.
type Process[J any] struct {
	// Env names the environment variable that makes the test binary a
	// child (one per test package).
	Env string
	// Timeout bounds a child's run.
	Timeout time.Duration
	// Work is what a child does with its job; what it returns is handed
	// back to Run.
	Work func(ctx context.Context, job J) ([]byte, error)
}

type spec[J any] struct {
	Out string
	Job J
}

// Main, called first in TestMain, runs this process as a child when Run
// started it, and exits; otherwise it returns and the tests run.
func (p Process[J]) Main() {
	s := os.Getenv(p.Env)
	if s == "" {
		return
	}
	if err := p.serve(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func (p Process[J]) serve(s string) error {
	var sp spec[J]
	if err := json.Unmarshal([]byte(s), &sp); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.Timeout)
	defer cancel()
	out, err := p.Work(ctx, sp.Job)
	if err != nil {
		return err
	}
	return os.WriteFile(sp.Out, out, 0o600)
}

// Run runs job in a child and returns its result; a child that fails
// fails the test with the end of its output.
func (p Process[J]) Run(t testing.TB, job J) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "result")
	s, err := json.Marshal(spec[J]{Out: out, Job: job})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), p.Env+"="+string(s))
	var log testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s", err, tail(log.String()))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("child's result: %v\n%s", err, tail(log.String()))
	}
	return b
}

func tail(s string) string {
	const n = 4000
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
