package trace

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestRecorderNesting(t *testing.T) {
	r := NewRecorder(2, "node-a", Options{NodeName: "Mac A"})
	step := r.Start("decode 7", "decode")
	comp := step.Child("joint_blocks", "compute")
	inner := comp.Child("matmul", "kernel")
	inner.End(Args{})
	comp.End(Args{}.WithToken(7))
	send := step.Child("send 3", "comms")
	send.End(Send(3, 4096, 99))
	step.End(Args{})

	got := r.Drain(0)
	want := []struct{ name, cat string }{
		{"matmul", "decode/compute/kernel"},
		{"joint_blocks", "decode/compute"},
		{"send 3", "decode/comms"},
		{"decode 7", "decode"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d spans, want %d", len(got), len(want))
	}
	for i, w := range want {
		s := got[i]
		if s.Name != w.name || s.Cat != w.cat || s.Rank != 2 || s.Node != "node-a" {
			t.Errorf("span %d = %+v, want %s %s", i, s, w.name, w.cat)
		}
	}
	outer, first := got[3], got[1]
	if first.StartNs < outer.StartNs || first.EndNs() > outer.EndNs() {
		t.Errorf("child %v not within parent %v", first, outer)
	}
	if got[2].Args != (Args{Bytes: 4096, Peer: 3, Flow: 99, Has: ArgBytes | ArgPeer | ArgFlowOut}) {
		t.Errorf("send args = %+v", got[2].Args)
	}
	if got[1].Args.Has != ArgToken || got[1].Args.Token != 7 {
		t.Errorf("token args = %+v", got[1].Args)
	}
	if now := time.Now().UnixNano(); outer.StartNs > now || outer.StartNs < now-int64(time.Minute) {
		t.Errorf("start %d is not a Unix time near now (%d)", outer.StartNs, now)
	}
	if r.Buffered() != 0 || r.Drain(0) != nil {
		t.Error("drained recorder still holds spans")
	}
	// The joined category is built once and shared.
	step = r.Start("decode 8", "decode")
	x, y := step.Child("x", "compute"), step.Child("y", "compute")
	a, b := x.Category(), y.Category()
	if a != "decode/compute" || b != a {
		t.Errorf("categories %q %q", a, b)
	}
	// A second End records nothing, and an ended span has no children.
	x.End(Args{})
	x.End(Args{})
	if z := x.Child("z", "k"); z.Category() != "" {
		t.Errorf("child of an ended span: %q", z.Category())
	}
	if n := len(r.Drain(0)); n != 1 {
		t.Errorf("double End recorded %d spans, want 1", n)
	}
}

func TestBeginContext(t *testing.T) {
	r := NewRecorder(0, "n", Options{})
	ctx := WithRecorder(context.Background(), r)
	if FromContext(ctx) != r {
		t.Fatal("FromContext lost the recorder")
	}
	ctx1, sync1 := Begin(ctx, "sync 1", "sync")
	ctx2, comp := Begin(ctx1, "joint", "compute")
	_, comm := Begin(ctx2, "send", "comms")
	comm.End(Args{})
	comp.End(Args{})
	_, sib := Begin(ctx1, "recv", "comms")
	sib.End(Args{})
	sync1.End(Args{})
	_, top := Begin(ctx, "other", "compute")
	top.End(Args{})

	var cats []string
	for _, s := range r.Drain(0) {
		cats = append(cats, s.Cat)
	}
	want := []string{"sync/compute/comms", "sync/compute", "sync/comms", "sync", "compute"}
	if len(cats) != len(want) {
		t.Fatalf("categories %q, want %q", cats, want)
	}
	for i := range want {
		if cats[i] != want[i] {
			t.Fatalf("categories %q, want %q", cats, want)
		}
	}
}

func TestDisabledAndNil(t *testing.T) {
	var nilRec *Recorder
	off := NewRecorder(1, "n", Options{Disabled: true})
	for _, r := range []*Recorder{nilRec, off} {
		tok := r.Start("a", "b")
		c := tok.Child("c", "d")
		c.End(Args{})
		tok.End(Args{}.WithBytes(1))
		r.Counter("memory", "bytes", 1)
		if r.Enabled() || r.Buffered() != 0 || r.Drain(0) != nil || r.DrainCounters() != nil {
			t.Errorf("%v recorded something", r)
		}
	}
	ctx := context.Background()
	if FromContext(ctx) != nil {
		t.Error("FromContext of a bare context is not nil")
	}
	if c, tok := Begin(ctx, "a", "b"); c != ctx || tok != (Token{}) {
		t.Error("Begin without a recorder changed the context")
	}
	ctx = WithRecorder(ctx, off)
	if c, _ := Begin(ctx, "a", "b"); c != ctx {
		t.Error("Begin with a disabled recorder changed the context")
	}
	if tr := nilRec.DrainTrace("x"); tr.TaskID != "x" || len(tr.Spans) != 0 {
		t.Errorf("nil DrainTrace = %+v", tr)
	}
}

func TestDrainChunks(t *testing.T) {
	r := NewRecorder(0, "n", Options{})
	const n = 3*chunkSpans + 17
	for i := range n {
		record(r, "s", "c", Args{}.WithToken(i))
	}
	var got []Span
	for {
		part := r.Drain(300)
		if part == nil {
			break
		}
		if len(part) > 300 {
			t.Fatalf("Drain(300) gave %d spans", len(part))
		}
		got = append(got, part...)
	}
	if len(got) != n {
		t.Fatalf("drained %d spans, want %d", len(got), n)
	}
	for i, s := range got {
		if int(s.Args.Token) != i {
			t.Fatalf("span %d has token %d: order lost", i, s.Args.Token)
		}
	}
	// Interleaved recording and draining keeps the order too.
	next := 0
	var buf []Span
	for i := range 5000 {
		record(r, "s", "c", Args{}.WithToken(i))
		if i%700 == 0 {
			buf = r.AppendDrain(buf[:0], 0)
			for _, s := range buf {
				if int(s.Args.Token) != next {
					t.Fatalf("got token %d, want %d", s.Args.Token, next)
				}
				next++
			}
		}
	}
	for _, s := range r.Drain(0) {
		if int(s.Args.Token) != next {
			t.Fatalf("got token %d, want %d", s.Args.Token, next)
		}
		next++
	}
	if next != 5000 {
		t.Fatalf("saw %d spans, want 5000", next)
	}
}

func TestMaxBuffered(t *testing.T) {
	r := NewRecorder(0, "n", Options{MaxBuffered: 10})
	for range 15 {
		record(r, "s", "c", Args{})
	}
	if r.Buffered() != 10 || r.Dropped() != 5 {
		t.Fatalf("buffered %d dropped %d, want 10 and 5", r.Buffered(), r.Dropped())
	}
	r.Drain(4)
	record(r, "s", "c", Args{})
	if r.Buffered() != 7 {
		t.Fatalf("buffered %d after drain, want 7", r.Buffered())
	}
}

func TestConcurrentRecording(t *testing.T) {
	r := NewRecorder(0, "n", Options{MaxBuffered: -1})
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	var drained []Span
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			part := r.Drain(100)
			mu.Lock()
			drained = append(drained, part...)
			mu.Unlock()
		}
	}()
	var work sync.WaitGroup
	shared := r.Start("task", "task") // children opened from every goroutine
	ctx, ctxTok := Begin(WithRecorder(context.Background(), r), "ctx", "phase")
	for w := range workers {
		work.Add(1)
		go func() {
			defer work.Done()
			parent := r.Start("step", "decode")
			for i := range each {
				c := parent.Child("op", []string{"compute", "comms", "io"}[i%3])
				c.End(Args{}.WithPeer(w))
				r.Counter("memory", "bytes", float64(i))
			}
			parent.End(Args{})
			s := shared.Child("w", "worker")
			s.End(Args{})
			_, b := Begin(ctx, "b", "sub")
			b.End(Args{})
		}()
	}
	work.Wait()
	shared.End(Args{})
	ctxTok.End(Args{})
	close(stop)
	wg.Wait()
	drained = append(drained, r.Drain(0)...)
	if want := workers*(each+3) + 2; len(drained) != want {
		t.Fatalf("got %d spans, want %d", len(drained), want)
	}
	cats := map[string]int{}
	for _, s := range drained {
		cats[s.Cat]++
	}
	if cats["task/worker"] != workers || cats["phase/sub"] != workers || cats["decode/io"] == 0 {
		t.Fatalf("categories %v", cats)
	}
	if n := len(r.DrainCounters()); n != workers*each {
		t.Fatalf("got %d counter samples, want %d", n, workers*each)
	}
}

func TestRecorderAllocs(t *testing.T) {
	r := NewRecorder(0, "n", Options{})
	parent := r.Start("decode", "decode")
	warm := parent.Child("warm", "compute") // intern once
	warm.End(Args{})
	buf := make([]Span, 0, 64)
	allocs := testing.AllocsPerRun(1000, func() {
		tok := r.Start("joint_blocks", "compute")
		c := parent.Child("matmul", "compute")
		c.End(Args{}.WithBytes(10))
		tok.End(Args{})
		buf = r.AppendDrain(buf[:0], 0)
	})
	if allocs != 0 {
		t.Fatalf("steady-state span path allocates %v times", allocs)
	}
}

func TestDrainTrace(t *testing.T) {
	r := NewRecorder(1, "node-b", Options{NodeName: "Mac B", Lane: "io"})
	record(r, "read", "io", Args{})
	r.Counter("memory", "bytes", 42)
	tr := r.DrainTrace("task-1")
	if tr.TaskID != "task-1" || tr.Processes["node-b"] != "Mac B" || len(tr.Spans) != 1 || len(tr.Counters) != 1 {
		t.Fatalf("DrainTrace = %+v", tr)
	}
	if tr.Spans[0].Lane != "io" || tr.Counters[0].Node != "node-b" || tr.Counters[0].Value != 42 {
		t.Fatalf("DrainTrace content = %+v %+v", tr.Spans[0], tr.Counters[0])
	}
}

func TestFlowKey(t *testing.T) {
	seen := map[uint64]bool{}
	for from := range 4 {
		for to := range 4 {
			for seq := range uint64(500) {
				k := FlowKey(from, to, seq)
				if k == 0 || k > maxFlowID {
					t.Fatalf("FlowKey(%d,%d,%d) = %d out of range", from, to, seq, k)
				}
				if k != FlowKey(from, to, seq) {
					t.Fatal("FlowKey is not deterministic")
				}
				if seen[k] {
					t.Fatalf("FlowKey(%d,%d,%d) collides", from, to, seq)
				}
				seen[k] = true
			}
		}
	}
}

func TestShift(t *testing.T) {
	tr := &Trace{
		Spans:    []Span{{Node: "a", StartNs: 100}, {Node: "b", StartNs: 100}},
		Counters: []CounterSample{{Node: "a", TsNs: 5}, {Node: "b", TsNs: 5}},
		Flows:    []Flow{{Node: "a", TsNs: 7}},
	}
	tr.Shift("a", -50)
	if tr.Spans[0].StartNs != 50 || tr.Spans[1].StartNs != 100 || tr.Counters[0].TsNs != -45 || tr.Counters[1].TsNs != 5 || tr.Flows[0].TsNs != -43 {
		t.Fatalf("Shift: %+v", tr)
	}
	tr.ShiftAll(map[string]time.Duration{"a": 50, "b": 1})
	if tr.Spans[0].StartNs != 100 || tr.Spans[1].StartNs != 101 || tr.Counters[1].TsNs != 6 || tr.Flows[0].TsNs != 7 {
		t.Fatalf("ShiftAll: %+v", tr)
	}
}

// record records a zero-length span.
func record(r *Recorder, name, cat string, a Args) {
	tok := r.Start(name, cat)
	tok.End(a)
}

// StartAt and ChildAt date a span back to when its operation began.
func TestStartAt(t *testing.T) {
	r := NewRecorder(0, "n", Options{})
	at := time.Now().Add(-50 * time.Millisecond)
	p := r.StartAt("step", "decode", at)
	c := p.ChildAt("recv", "recv", at.Add(10*time.Millisecond))
	c.End(Args{})
	p.End(Args{})
	spans := r.Drain(0)
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	child, parent := spans[0], spans[1]
	if parent.Cat != "decode" || child.Cat != "decode/recv" {
		t.Fatalf("categories %q, %q", parent.Cat, child.Cat)
	}
	if d := time.Duration(parent.DurNs); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("parent lasted %v, want ≥ 50ms", d)
	}
	if off := time.Duration(child.StartNs - parent.StartNs); off < 9*time.Millisecond || off > 11*time.Millisecond {
		t.Errorf("child starts %v after the parent, want 10ms", off)
	}
	var nilRec *Recorder
	z := nilRec.StartAt("x", "y", at)
	zc := z.ChildAt("a", "b", at)
	zc.End(Args{})
	z.End(Args{})
}

// A span recorded as ending before it began (EndAt with an earlier time,
// as a preemption between ChildAt's or EndAt's two clock reads can make
// it) has duration 0, never a negative one the collector would refuse.
func TestEndAtNeverNegative(t *testing.T) {
	r := NewRecorder(0, "n", Options{})
	tok := r.Start("step", "decode")
	tok.EndAt(Args{}, time.Now().Add(-time.Second))
	spans := r.Drain(0)
	if len(spans) != 1 || spans[0].DurNs != 0 {
		t.Fatalf("spans %+v, want one of duration 0", spans)
	}
}
