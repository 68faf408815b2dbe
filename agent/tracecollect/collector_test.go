package tracecollect

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// saved records what a Collector saves.
type saved struct {
	mu    sync.Mutex
	tr    []*trace.Trace
	infos []Info
}

func (s *saved) save(m *Merged, info Info) error {
	tr, err := materialize(m)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tr = append(s.tr, tr)
	s.infos = append(s.infos, info)
	return nil
}

func (s *saved) get() ([]*trace.Trace, []Info) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tr), slices.Clone(s.infos)
}

// materialize is m's trace with every span in Trace.Spans (a streamed
// one's read through its Seq), and checks its count and time range.
func materialize(m *Merged) (*trace.Trace, error) {
	tr := m.Trace
	if m.Seq != nil {
		cp := *m.Trace
		tr = &cp
		for s, err := range m.Seq {
			if err != nil {
				return nil, err
			}
			tr.Spans = append(tr.Spans, *s)
		}
	}
	if len(tr.Spans) != m.Count {
		return nil, fmt.Errorf("merged %d spans, says %d", len(tr.Spans), m.Count)
	}
	var first, last int64
	for i, s := range tr.Spans {
		if i > 0 && s.StartNs < tr.Spans[i-1].StartNs {
			return nil, fmt.Errorf("span %d starts before span %d", i, i-1)
		}
		if first == 0 || s.StartNs < first {
			first = s.StartNs
		}
		last = max(last, s.EndNs())
	}
	if first != m.FirstNs || last != m.LastNs {
		return nil, fmt.Errorf("time range [%d, %d], says [%d, %d]", first, last, m.FirstNs, m.LastNs)
	}
	return tr, nil
}

func chunk(t *testing.T, task string, rank, seq int, final bool, spans ...trace.Span) *wire.TraceChunk {
	t.Helper()
	cs, _, err := Chunks(task, rank, seq, spans, nil, 0, final)
	if err != nil || len(cs) != 1 {
		t.Fatalf("Chunks: %d, %v", len(cs), err)
	}
	return cs[0]
}

func span(name string, start, dur int64) trace.Span {
	return trace.Span{Name: name, Cat: "x", StartNs: start, DurNs: dur}
}

func task(id string, nodes ...string) *wire.TraceTask {
	m := &wire.TraceTask{Task: id, Kind: "test"}
	for i, n := range nodes {
		m.Ranks = append(m.Ranks, wire.TraceRank{Rank: i, Node: n})
	}
	return m
}

func wait(t *testing.T, c *Collector, id string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestMergeAllRanks(t *testing.T) {
	var s saved
	c := New(Config{Timeout: time.Hour, Save: s.save})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Chunks may come before the announcement, and a rank in several.
	must(c.Chunk("b", chunk(t, "t1", 1, 0, false, span("b0", 10, 5))))
	must(c.Chunk("b", chunk(t, "t1", 1, 1, true, span("b1", 30, 5))))
	must(c.Task("a", task("t1", "a", "b")))
	if trs, _ := s.get(); len(trs) != 0 {
		t.Fatal("merged before rank 0 delivered")
	}
	// A span claiming another node or rank is taken as the sender's.
	lie := span("a0", 20, 5)
	lie.Node, lie.Rank = "b", 7
	must(c.Chunk("a", chunk(t, "t1", 0, 0, true, lie)))
	res := wait(t, c, "t1")
	if res.Spans != 3 || len(res.Missing) != 0 || res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	trs, infos := s.get()
	if len(trs) != 1 || infos[0].Kind != "test" || !infos[0].Announced || len(infos[0].Missing) != 0 {
		t.Fatalf("saved %d traces, info %+v", len(trs), infos)
	}
	var got []string
	for _, sp := range trs[0].Spans {
		got = append(got, fmt.Sprintf("%s@%s/%d", sp.Name, sp.Node, sp.Rank))
	}
	if want := []string{"b0@b/1", "a0@a/0", "b1@b/1"}; !slices.Equal(got, want) {
		t.Errorf("spans %v, want %v (sorted by start, sender's node and rank)", got, want)
	}
	// Late data is refused; the merge is not repeated.
	if err := c.Chunk("b", chunk(t, "t1", 1, 2, true)); err == nil || !strings.Contains(err.Error(), "already merged") {
		t.Errorf("late chunk: %v", err)
	}
	if trs, _ := s.get(); len(trs) != 1 {
		t.Errorf("%d saves", len(trs))
	}
}

// A rank that never reports: after the timeout the trace is saved as
// partial, with the others' spans and the missing rank named.
func TestMergeMissingRank(t *testing.T) {
	var s saved
	c := New(Config{Timeout: 100 * time.Millisecond, Save: s.save})
	if err := c.Chunk("a", chunk(t, "t2", 0, 0, true, span("a", 1, 1))); err != nil {
		t.Fatal(err)
	}
	// Rank 2 sent a chunk but not its last one.
	if err := c.Chunk("c", chunk(t, "t2", 2, 0, false, span("c", 2, 1))); err != nil {
		t.Fatal(err)
	}
	m := task("t2", "a", "b", "c")
	m.Error = "rank 1 died"
	start := time.Now()
	if err := c.Task("a", m); err != nil {
		t.Fatal(err)
	}
	res := wait(t, c, "t2")
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("merged after %v, before the timeout", waited)
	}
	if !slices.Equal(res.Missing, []int{1, 2}) || res.Spans != 2 {
		t.Fatalf("result %+v, want ranks 1 and 2 missing, 2 spans", res)
	}
	trs, infos := s.get()
	if !slices.Equal(trs[0].MissingRanks, []int{1, 2}) || infos[0].Error != "rank 1 died" {
		t.Errorf("trace missing %v, info %+v", trs[0].MissingRanks, infos[0])
	}
}

// Chunks of a task nobody announces are kept until the orphan timeout,
// then saved, not lost.
func TestOrphanChunksAreSaved(t *testing.T) {
	var s saved
	c := New(Config{Timeout: time.Hour, OrphanTimeout: 50 * time.Millisecond, Save: s.save})
	if err := c.Chunk("b", chunk(t, "t3", 1, 0, true, span("b", 1, 1))); err != nil {
		t.Fatal(err)
	}
	res := wait(t, c, "t3")
	_, infos := s.get()
	if res.Spans != 1 || infos[0].Announced || infos[0].Ranks[1] != "b" || len(res.Missing) != 0 {
		t.Errorf("result %+v, info %+v", res, infos[0])
	}
}

func TestChunkChecks(t *testing.T) {
	var s saved
	c := New(Config{Timeout: time.Hour, MaxTasks: 2, MaxSpans: 3, Save: s.save})
	if err := c.Task("a", task("t4", "a", "b")); err != nil {
		t.Fatal(err)
	}
	// Rank 1 is b's: a cannot send for it.
	if err := c.Chunk("a", chunk(t, "t4", 1, 0, true)); err == nil || !strings.Contains(err.Error(), "rank 1 is b's") {
		t.Errorf("chunk for another node's rank: %v", err)
	}
	// A gap in a rank's sequence makes it incomplete.
	if err := c.Chunk("b", chunk(t, "t4", 1, 1, true, span("b", 1, 1))); err != nil {
		t.Fatal(err)
	}
	// Past MaxSpans spans are dropped and counted.
	if err := c.Chunk("a", chunk(t, "t4", 0, 0, true, span("1", 1, 1), span("2", 2, 1), span("3", 3, 1))); err != nil {
		t.Fatal(err)
	}
	res := wait(t, c, "t4")
	_, infos := s.get()
	if !slices.Equal(res.Missing, []int{1}) || res.Spans != 3 || infos[0].Dropped != 1 {
		t.Errorf("result %+v, dropped %d; want rank 1 incomplete, 3 spans kept, 1 dropped", res, infos[0].Dropped)
	}
	// Malformed and negative data.
	bad := &wire.TraceChunk{Task: "t5", Rank: 0, Data: json.RawMessage(`{"spans":[{"durNs":-1}]}`)}
	if err := c.Chunk("a", bad); err == nil || !strings.Contains(err.Error(), "duration -1") {
		t.Errorf("negative duration: %v", err)
	}
	bad.Data = json.RawMessage(`{"spans":{}}`)
	if err := c.Chunk("a", bad); err == nil {
		t.Error("malformed chunk accepted")
	}
	// MaxTasks bounds the traces collected at once.
	// (t4's spans are no longer held: t6 may hold up to 3 again.)
	for _, id := range []string{"t6", "t7"} {
		if err := c.Chunk("a", chunk(t, id, 0, 0, false, span("1", 1, 1), span("2", 2, 1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Chunk("a", chunk(t, "t8", 0, 0, false)); err == nil || !strings.Contains(err.Error(), "2 traces already") {
		t.Errorf("third task: %v", err)
	}
	if err := c.Task("a", task("t6", "a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Task("a", task("t6", "a")); err == nil {
		t.Error("a task announced twice was accepted")
	}
	// Close saves what is pending (t6 waits for its last chunk, t7 was
	// never announced) and refuses more.
	c.Close()
	trs, infos := s.get()
	if len(trs) != 3 {
		t.Fatalf("%d traces saved after Close, want 3", len(trs))
	}
	kept := map[string]int{}
	var dropped uint64
	for i, tr := range trs {
		kept[tr.TaskID] = len(tr.Spans)
		dropped += infos[i].Dropped
	}
	// 3 spans at most held at once: t6 got 2, t7 the 1 left.
	if kept["t6"] != 2 || kept["t7"] != 1 || dropped != 2 {
		t.Errorf("spans kept %v, dropped %d; want t6 2, t7 1, 2 dropped in all", kept, dropped)
	}
	if err := c.Chunk("a", chunk(t, "t9", 0, 0, false)); err == nil {
		t.Error("chunk accepted after Close")
	}
}

// Node b's clock runs 50 ms ahead of a's (the master). Uncorrected, b's
// receive would end before a sent; corrected by the offset, every flow goes
// forward in time.
func TestMergeCorrectsClockSkew(t *testing.T) {
	var s saved
	skew := 50 * time.Millisecond
	c := New(Config{Timeout: time.Hour, Save: s.save,
		ClockOffsets: func() map[string]time.Duration { return map[string]time.Duration{"b": skew} }})
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC).UnixNano()
	ms := int64(time.Millisecond)
	f1, f2 := trace.FlowKey(0, 1, 0), trace.FlowKey(1, 0, 0)
	// a sends 0..3 ms, receives b's reply 5..6 ms; b (clock +50 ms)
	// receives 1..2 ms and replies 2..6 ms, in true time.
	a := []trace.Span{
		{Name: "send", Cat: "ring/send", StartNs: t0, DurNs: 3 * ms, Args: trace.Send(1, 10, f1)},
		{Name: "recv", Cat: "ring/recv", StartNs: t0 + 5*ms, DurNs: ms, Args: trace.Recv(1, 10, f2)},
	}
	b := []trace.Span{
		{Name: "recv", Cat: "ring/recv", StartNs: t0 + ms + int64(skew), DurNs: ms, Args: trace.Recv(0, 10, f1)},
		{Name: "send", Cat: "ring/send", StartNs: t0 + 2*ms + int64(skew), DurNs: 4 * ms, Args: trace.Send(0, 10, f2)},
	}
	if err := c.Task("a", task("t10", "a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := c.Chunk("a", chunk(t, "t10", 0, 0, true, a...)); err != nil {
		t.Fatal(err)
	}
	if err := c.Chunk("b", chunk(t, "t10", 1, 0, true, b...)); err != nil {
		t.Fatal(err)
	}
	wait(t, c, "t10")
	trs, _ := s.get()
	var buf strings.Builder
	if err := trace.WriteChrome(&buf, trs[0]); err != nil {
		t.Fatal(err)
	}
	back, err := trace.ReadChrome(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	sends := map[uint64]int64{}
	for _, sp := range back.Spans {
		if sp.StartNs < t0 || sp.EndNs() > t0+6*ms {
			t.Errorf("span %s on %s at %d..%d ns after t0: not on a's clock", sp.Name, sp.Node, sp.StartNs-t0, sp.EndNs()-t0)
		}
		if id := sp.Args.FlowOut(); id != 0 {
			sends[id] = sp.StartNs
		}
	}
	flows := 0
	for _, sp := range back.Spans {
		if id := sp.Args.FlowIn(); id != 0 {
			flows++
			if start, ok := sends[id]; !ok || sp.EndNs() < start {
				t.Errorf("flow %d: receive ends at %d, send started at %d (found %v)", id, sp.EndNs()-t0, start-t0, ok)
			}
		}
	}
	if flows != 2 {
		t.Errorf("%d flows, want 2", flows)
	}
}
