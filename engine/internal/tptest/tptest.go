// Package tptest runs a tensor-parallel group in a test: one process of the
// test binary per rank (ollama's ggml has one CPU backend per process,
// which two ranks computing at once would share), linked over loopback TCP
// as runners link, each doing the test's work once its group has formed.
//
// A test package declares one Group, calls its Main first in TestMain, and
// calls Run from its tests. Each rank's listener is bound by Run and passed
// to the rank open: a port closed to be bound again in the child could be
// taken meanwhile, by another rank's dial from that ephemeral port or by a
// dial to it that connects to itself (which failed tests now and then).
package tptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// token authenticates the group's links: every rank is this binary.
const token = "tptest"

// outputTail bounds how much of a failed rank's output goes into the
// failure.
const outputTail = 4000

// Group is a test package's tensor-parallel group, whose ranks each get a
// job of type J (passed to the rank as JSON). Its fields are set once,
// where it is declared.
type Group[J any] struct {
	// Env names the environment variable that makes the test binary a
	// rank (one per test package, so that a rank never mistakes another
	// package's variable for its own).
	Env string
	// Timeout bounds a rank's run, forming the group included.
	Timeout time.Duration
	// Work is what a rank does once its group has formed: job is what Run
	// was given for this rank, and what it returns is the rank's result.
	Work func(ctx context.Context, rank int, mesh *collective.Mesh, job J) ([]byte, error)
}

// spec is what a rank process gets in Env.
type spec[J any] struct {
	Rank  int
	Addrs []string
	Out   string // the rank's result goes here
	Job   J
}

// Main, called first in TestMain, runs this process as a rank when Run
// started it, and exits; otherwise it returns and the tests run.
func (g Group[J]) Main() {
	s := os.Getenv(g.Env)
	if s == "" {
		return
	}
	if err := g.serve(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func (g Group[J]) serve(s string) error {
	var sp spec[J]
	if err := json.Unmarshal([]byte(s), &sp); err != nil {
		return err
	}
	ln, err := net.FileListener(os.NewFile(3, "listener")) // Run's ExtraFiles[0]
	if err != nil {
		return fmt.Errorf("rank %d's listener: %w", sp.Rank, err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout)
	defer cancel()
	mesh, err := collective.Connect(ctx, sp.Rank, len(sp.Addrs), sp.Addrs, ln, token)
	if err != nil {
		return fmt.Errorf("rank %d: %w", sp.Rank, err)
	}
	defer mesh.Close()
	out, err := g.Work(ctx, sp.Rank, mesh, sp.Job)
	if err != nil {
		return fmt.Errorf("rank %d: %w", sp.Rank, err)
	}
	return os.WriteFile(sp.Out, out, 0o600)
}

// Run starts one rank per job, rank r with jobs[r], waits for all of them
// and returns each rank's result. A rank that fails fails the test with
// its output, after the others are stopped.
func (g Group[J]) Run(t testing.TB, jobs []J) [][]byte {
	t.Helper()
	n := len(jobs)
	dir := t.TempDir()
	addrs := make([]string, n)
	lns := make([]*os.File, n)
	defer func() {
		for _, f := range lns {
			if f != nil {
				f.Close()
			}
		}
	}()
	for r := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[r] = ln.Addr().String()
		f, err := ln.(*net.TCPListener).File()
		ln.Close() // f keeps the socket
		if err != nil {
			t.Fatal(err)
		}
		lns[r] = f
	}
	cmds := make([]*exec.Cmd, n)
	outs := make([]*testutil.SyncBuffer, n)
	outPath := func(r int) string { return filepath.Join(dir, fmt.Sprintf("rank-%d", r)) }
	for r, job := range jobs {
		s, err := json.Marshal(spec[J]{Rank: r, Addrs: addrs, Out: outPath(r), Job: job})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), g.Env+"="+string(s))
		outs[r] = &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		cmd.ExtraFiles = []*os.File{lns[r]}
		if err := cmd.Start(); err != nil {
			stopAll(cmds)
			waitAll(cmds)
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	if r, err := waitAll(cmds); err != nil {
		t.Fatalf("tensor-parallel rank %d of %d: %v\n%s", r, n, err, tail(outs[r].String()))
	}
	res := make([][]byte, n)
	for r := range n {
		b, err := os.ReadFile(outPath(r))
		if err != nil {
			t.Fatalf("tensor-parallel rank %d of %d: %v", r, n, err)
		}
		res[r] = b
	}
	return res
}

// waitAll waits for every rank. When one fails, the others are killed (a
// group missing a rank waits for it until its Timeout), and the first to
// fail is returned.
func waitAll(cmds []*exec.Cmd) (int, error) {
	type exit struct {
		rank int
		err  error
	}
	done := make(chan exit, len(cmds))
	started := 0
	for r, c := range cmds {
		if c != nil {
			started++
			go func() { done <- exit{r, c.Wait()} }()
		}
	}
	first := exit{rank: -1}
	for range started {
		e := <-done
		if e.err != nil && first.err == nil {
			first = e
			stopAll(cmds)
		}
	}
	return first.rank, first.err
}

func stopAll(cmds []*exec.Cmd) {
	for _, c := range cmds {
		if c != nil && c.Process != nil {
			c.Process.Kill()
		}
	}
}

func tail(s string) string {
	if len(s) > outputTail {
		s = "…" + s[len(s)-outputTail:]
	}
	return s
}
