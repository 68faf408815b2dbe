package tracecollect

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// A rank's spans reach a collector in bounded chunks: some while the task
// runs (the periodic flush), the rest with Finish, and they merge whole.
func TestShipperFlushesInChunks(t *testing.T) {
	var s saved
	c := New(Config{Timeout: time.Hour, Save: s.save})
	var chunks, maxSpans atomic.Int64
	var sent atomic.Uint64
	send := func(_ context.Context, m *wire.TraceChunk) error {
		chunks.Add(1)
		var d chunkData
		if err := json.Unmarshal(m.Data, &d); err != nil {
			return err
		}
		if n := int64(len(d.Spans)); n > maxSpans.Load() {
			maxSpans.Store(n)
		}
		return c.Chunk("n1", m)
	}
	var samples atomic.Int64
	sh := NewShipper(ShipperConfig{Task: "long", Rank: 0, Node: "n1", Send: send,
		LinkBytes: func() map[string]uint64 {
			samples.Add(1)
			return map[string]uint64{"n2": sent.Add(1 << 20)}
		},
		FlushEvery: 20 * time.Millisecond, SampleEvery: 10 * time.Millisecond})
	rec := sh.Recorder()
	const total = 3*chunkSpans + 100
	for i := range total {
		tok := rec.Start("step", "decode")
		tok.End(trace.Args{}.WithToken(i))
		if i == chunkSpans {
			testutil.WaitFor(t, "a flush while the task runs", func() bool { return chunks.Load() > 0 })
		}
	}
	sh.Add(trace.Span{Name: "extra", Cat: "x", StartNs: time.Now().UnixNano(), DurNs: 1})
	// The first sample is taken at start; two more give two rates.
	testutil.WaitFor(t, "a few link samples", func() bool { return samples.Load() >= 3 })
	if err := sh.Finish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := sh.Finish(context.Background()); err == nil {
		t.Error("second Finish did not complain")
	}
	if err := c.Task("n1", task("long", "n1")); err != nil {
		t.Fatal(err)
	}
	res := wait(t, c, "long")
	if res.Spans != total+1 || len(res.Missing) != 0 {
		t.Fatalf("merged %+v, want %d spans and no missing rank", res, total+1)
	}
	if n := chunks.Load(); n < 4 || maxSpans.Load() > chunkSpans {
		t.Errorf("%d chunks of at most %d spans; want ≥ 4 of ≤ %d", n, maxSpans.Load(), chunkSpans)
	}
	trs, _ := s.get()
	var link int
	for _, cs := range trs[0].Counters {
		if cs.Name == "link n1→n2" && cs.Unit == "MB/s" && cs.Value > 0 {
			link++
		}
	}
	if link < 2 {
		t.Errorf("%d link MB/s samples, want ≥ 2: %v", link, trs[0].Counters)
	}
}

// A failing send is tried again, then reported by Finish; the rank then
// counts as missing on the master, which is the collector's business.
func TestShipperReportsSendErrors(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	sh := NewShipper(ShipperConfig{Task: "t", Rank: 1, Node: "n", RetryWait: time.Millisecond, Send: func(context.Context, *wire.TraceChunk) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return context.DeadlineExceeded
	}})
	tok := sh.Recorder().Start("a", "b")
	tok.End(trace.Args{})
	if err := sh.Finish(context.Background()); err == nil || !strings.Contains(err.Error(), "after 5 attempts") {
		t.Errorf("Finish: %v, want the send error after 5 attempts", err)
	}
	if calls != sendAttempts {
		t.Errorf("%d sends, want %d (the final chunk, tried again)", calls, sendAttempts)
	}
}

// A master that reads slowly slows the shipping, never the recording: the
// recorder is drained every flush into the outbox, whose chunks go to disk
// past its memory, and every span arrives, in order, once the master
// takes them.
func TestShipperOutboxSpillsWhileTheMasterIsSlow(t *testing.T) {
	var s saved
	c := New(Config{Timeout: time.Hour, Save: s.save})
	gate := make(chan struct{})
	var sent atomic.Int64
	// A few chunks in memory, the rest on disk.
	sh := NewShipper(ShipperConfig{Task: "slow", Rank: 0, Node: "n1", FlushEvery: 5 * time.Millisecond, SpillDir: t.TempDir(), OutboxMemory: 64 << 10,
		Send: func(ctx context.Context, m *wire.TraceChunk) error {
			select {
			case <-gate: // the master is busy until the gate opens
			case <-ctx.Done():
				return ctx.Err()
			}
			sent.Add(1)
			return c.Chunk("n1", m)
		}})
	rec := sh.Recorder()
	const total = 20 * chunkSpans
	for i := range total {
		tok := rec.Start("step", "decode")
		tok.End(trace.Args{}.WithToken(i))
		if i%chunkSpans == 0 {
			testutil.WaitFor(t, "the flush to drain the recorder", func() bool { return rec.Buffered() == 0 })
		}
	}
	testutil.WaitFor(t, "chunks waiting on disk", func() bool {
		sh.box.mu.Lock()
		defer sh.box.mu.Unlock()
		return sh.box.fileN > 0
	})
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d chunks sent through a closed gate", n)
	}
	close(gate)
	if err := sh.Finish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := rec.Dropped(); d != 0 {
		t.Errorf("the recorder dropped %d spans while the master was busy", d)
	}
	if err := c.Task("n1", task("slow", "n1")); err != nil {
		t.Fatal(err)
	}
	res := wait(t, c, "slow")
	if res.Spans != total || len(res.Missing) != 0 {
		t.Fatalf("merged %+v, want all %d spans and no missing rank", res, total)
	}
}

func TestChunksStayUnderTheLimit(t *testing.T) {
	long := strings.Repeat("n", 1000)
	spans := make([]trace.Span, 3000) // ~3.4 MB encoded
	for i := range spans {
		spans[i] = trace.Span{Name: long, Cat: "c", DurNs: 1}
	}
	cs, next, err := Chunks("t", 0, 5, spans, []trace.CounterSample{{Name: "m"}}, 7, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) < 4 || next != 5+len(cs) {
		t.Fatalf("%d chunks, next seq %d", len(cs), next)
	}
	n := 0
	var dropped uint64
	for i, c := range cs {
		if err := c.Validate(); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if c.Seq != 5+i || c.Final != (i == len(cs)-1) {
			t.Errorf("chunk %d: seq %d final %v", i, c.Seq, c.Final)
		}
		var d chunkData
		if err := json.Unmarshal(c.Data, &d); err != nil {
			t.Fatal(err)
		}
		n += len(d.Spans)
		dropped += d.Dropped
	}
	if n != len(spans) || dropped != 7 {
		t.Errorf("%d spans, %d dropped across chunks; want %d, 7", n, dropped, len(spans))
	}
	huge := []trace.Span{{Name: strings.Repeat("x", wire.MaxTraceChunk), DurNs: 1}}
	if _, _, err := Chunks("t", 0, 0, huge, nil, 0, true); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Errorf("oversized span: %v", err)
	}
	// An empty final chunk still goes out.
	if cs, _, err := Chunks("t", 0, 0, nil, nil, 0, true); err != nil || len(cs) != 1 || !cs[0].Final {
		t.Errorf("empty final: %v %v", cs, err)
	}
}
