package trace_test

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"

	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/engine/trace/tracetest"
)

// drainEvery is how often the span benchmarks ship their spans, as a long
// task would: the chunks are then reused and the path allocates nothing.
const drainEvery = 4096

// The span benchmarks loop over b.N rather than b.Loop: b.Loop keeps the calls
// in its body from being inlined, and the disabled path and Start rely on
// inlining as they would in real code.

// BenchmarkSpan is one top-level span with args: Start, End. One op = one span.
func BenchmarkSpan(b *testing.B) {
	r := trace.NewRecorder(0, "node-a", trace.Options{})
	buf := make([]trace.Span, 0, drainEvery)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tok := r.Start("joint_blocks", "compute")
		tok.End(trace.Args{}.WithBytes(4096).WithToken(i))
		if i%drainEvery == drainEvery-1 {
			buf = r.AppendDrain(buf[:0], 0)
		}
	}
}

// BenchmarkNestedSpan is one span nested in an open one (category
// "decode/compute", looked up in the intern cache).
func BenchmarkNestedSpan(b *testing.B) {
	r := trace.NewRecorder(0, "node-a", trace.Options{})
	parent := r.Start("decode 1", "decode")
	buf := make([]trace.Span, 0, drainEvery)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c := parent.Child("joint_blocks", "compute")
		c.End(trace.Send(1, 8192, 42))
		if i%drainEvery == drainEvery-1 {
			buf = r.AppendDrain(buf[:0], 0)
		}
	}
}

// BenchmarkSpanParallel records from every P at once on one recorder.
func BenchmarkSpanParallel(b *testing.B) {
	r := trace.NewRecorder(0, "node-a", trace.Options{MaxBuffered: drainEvery * 4})
	var mu sync.Mutex
	buf := make([]trace.Span, 0, drainEvery*4)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tok := r.Start("joint_blocks", "compute")
			tok.End(trace.Args{})
			if i++; i%1024 == 0 {
				mu.Lock()
				buf = r.AppendDrain(buf[:0], 0)
				mu.Unlock()
			}
		}
	})
}

// BenchmarkSpanDisabled is the cost of tracing when it is off.
func BenchmarkSpanDisabled(b *testing.B) {
	for _, bc := range []struct {
		name string
		r    *trace.Recorder
	}{
		{"nil", nil},
		{"disabled", trace.NewRecorder(0, "node-a", trace.Options{Disabled: true})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				tok := bc.r.Start("joint_blocks", "compute")
				c := tok.Child("matmul", "kernel")
				c.End(trace.Args{})
				tok.End(trace.Args{}.WithBytes(4096).WithToken(i))
			}
		})
	}
}

// BenchmarkBeginContext is the context-carrying path (it allocates the
// derived context).
func BenchmarkBeginContext(b *testing.B) {
	r := trace.NewRecorder(0, "node-a", trace.Options{})
	ctx, parent := trace.Begin(trace.WithRecorder(context.Background(), r), "decode 1", "decode")
	defer parent.End(trace.Args{})
	buf := make([]trace.Span, 0, drainEvery)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, sp := trace.Begin(ctx, "joint_blocks", "compute")
		sp.End(trace.Args{})
		if i%drainEvery == drainEvery-1 {
			buf = r.AppendDrain(buf[:0], 0)
		}
	}
}

var (
	fixturesOnce sync.Once
	spans1M      []trace.Span
	trace100k    *trace.Trace
	chrome100k   []byte
)

func fixtures(b *testing.B) {
	fixturesOnce.Do(func() {
		spans1M = tracetest.Pipeline(tracetest.PipelineConfig{Spans: 1_000_000, Ranks: 4}).Spans
		trace100k = tracetest.Pipeline(tracetest.PipelineConfig{Spans: 100_000, Ranks: 4, Flows: true, Counters: true})
		var buf bytes.Buffer
		if err := trace.WriteChrome(&buf, trace100k); err != nil {
			panic(err)
		}
		chrome100k = buf.Bytes()
	})
	b.ResetTimer()
}

// BenchmarkStats1M computes the statistics of one million spans.
func BenchmarkStats1M(b *testing.B) {
	fixtures(b)
	b.ReportAllocs()
	for b.Loop() {
		st := trace.ComputeStats(spans1M)
		if st.ByCategory["decode"].Count == 0 {
			b.Fatal("no decode spans")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/op")
}

// BenchmarkWriteChrome exports 100k spans (with flows and counters).
func BenchmarkWriteChrome(b *testing.B) {
	fixtures(b)
	b.SetBytes(int64(len(chrome100k)))
	b.ReportAllocs()
	for b.Loop() {
		if err := trace.WriteChrome(io.Discard, trace100k); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(chrome100k)), "file-bytes")
}

// BenchmarkReadChrome loads the 100k-span file back.
func BenchmarkReadChrome(b *testing.B) {
	fixtures(b)
	b.SetBytes(int64(len(chrome100k)))
	b.ReportAllocs()
	for b.Loop() {
		t, err := trace.ReadChrome(bytes.NewReader(chrome100k))
		if err != nil {
			b.Fatal(err)
		}
		if len(t.Spans) != 100_000 {
			b.Fatalf("read %d spans", len(t.Spans))
		}
	}
}
