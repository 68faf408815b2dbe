package tptest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/collective"
)

// job is what each rank of the test group gets.
type job struct {
	Value float32
	Fail  bool // fail once the group has formed
	Block bool // wait until the rank's Timeout
}

var group = Group[job]{Env: "ORRERY_TPTEST_TEST_RANK", Timeout: time.Minute,
	Work: func(ctx context.Context, rank int, mesh *collective.Mesh, j job) ([]byte, error) {
		if j.Fail {
			return nil, errors.New("asked to fail")
		}
		if j.Block {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		v := []float32{j.Value}
		if err := mesh.AllReduce(v); err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "rank %d of %d: %g", rank, mesh.Size(), v[0]), nil
	}}

// slow is group with a timeout past go test's own: a rank blocked in it
// ends only when Run stops it.
var slow = Group[job]{Env: "ORRERY_TPTEST_TEST_SLOW_RANK", Timeout: time.Hour, Work: group.Work}

func TestMain(m *testing.M) {
	group.Main()
	slow.Main()
	m.Run()
}

// Three ranks form a group and all-reduce their values: each returns the
// sum, and Run hands back each rank's result in rank order.
func TestRun(t *testing.T) {
	res := group.Run(t, []job{{Value: 1}, {Value: 2}, {Value: 4}})
	for r, b := range res {
		if want := fmt.Sprintf("rank %d of 3: 7", r); string(b) != want {
			t.Errorf("rank %d returned %q, want %q", r, b, want)
		}
	}
}

// fatalTB records a Fatal and ends the goroutine, as testing's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// A rank that fails fails the test with its error, and a rank still
// working is stopped: here it would wait for an hour, past go test's
// timeout, so Run returning at all shows it was.
func TestRunFailingRank(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		slow.Run(f, []job{{Block: true}, {Fail: true}})
	}()
	<-done
	if !strings.Contains(f.msg, "tensor-parallel rank 1 of 2") || !strings.Contains(f.msg, "asked to fail") {
		t.Fatalf("Run failed with %q, want rank 1's error", f.msg)
	}
}
