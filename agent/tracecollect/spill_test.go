package tracecollect

import (
	"cmp"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// randomSpans is n spans of a rank, roughly in time order as a recorder
// ends them (a parent after its children), with lanes, args and flows.
func randomSpans(rng *rand.Rand, n int) []trace.Span {
	var out []trace.Span
	t := int64(1_700_000_000_000_000_000)
	for len(out) < n {
		t += int64(rng.Intn(5000))
		lane := []string{"", "", "io", "comm"}[rng.Intn(4)]
		a := trace.Args{}.WithToken(rng.Intn(1 << 20))
		switch rng.Intn(4) {
		case 0:
			a = a.WithBytes(int64(rng.Intn(1 << 30))).WithPeer(rng.Intn(8))
		case 1:
			a = a.WithFlowOut(uint64(rng.Int63()) + 1)
		}
		out = append(out, trace.Span{Name: []string{"attn", "ffn", "send → rank 1", "décodé"}[rng.Intn(4)], Cat: "decode/compute",
			Lane: lane, StartNs: t + int64(rng.Intn(3000)), DurNs: int64(rng.Intn(100_000)), Args: a})
	}
	return out
}

// A task larger than the collector's memory budgets goes to a spill file
// and comes out whole: every span of every rank, shifted onto the
// master's clock, in time order, with its lane and args; the spill file
// is gone after the merge, and the memory held never passes the budget.
func TestSpilledTaskMergesWhole(t *testing.T) {
	dir := t.TempDir()
	var s saved
	offsets := map[string]time.Duration{"b": 3 * time.Millisecond, "c": -2 * time.Millisecond}
	c := New(Config{Timeout: time.Hour, TaskSpans: 1000, MaxSpans: 1500, SpillDir: dir, Save: s.save,
		ClockOffsets: func() map[string]time.Duration { return offsets }})
	rng := rand.New(rand.NewSource(7))
	nodes := []string{"a", "b", "c"}
	var want []trace.Span
	maxHeld, chunks := 0, 0
	for r, node := range nodes {
		spans := randomSpans(rng, 4000+r*777)
		for i, seq := 0, 0; i < len(spans); seq++ {
			n := min(len(spans)-i, 1+rng.Intn(600))
			final := i+n == len(spans)
			cs, _, err := Chunks("big", r, seq, spans[i:i+n], []trace.CounterSample{{Name: "link", TsNs: spans[i].StartNs, Value: 1}}, 0, final)
			if err != nil || len(cs) != 1 {
				t.Fatal(err, len(cs))
			}
			if err := c.Chunk(node, cs[0]); err != nil {
				t.Fatal(err)
			}
			chunks++
			c.mu.Lock()
			maxHeld = max(maxHeld, c.held)
			c.mu.Unlock()
			i += n
		}
		for _, sp := range spans {
			sp.Node, sp.Rank = node, r
			sp.StartNs -= int64(offsets[node])
			want = append(want, sp)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("spill dir holds %d files during the collection, want the task's one", len(ents))
	}
	if err := c.Task("a", task("big", nodes...)); err != nil {
		t.Fatal(err)
	}
	res := wait(t, c, "big")
	trs, infos := s.get()
	if res.Err != nil || len(trs) != 1 {
		t.Fatalf("merge: %+v, %d saved", res, len(trs))
	}
	got := trs[0].Spans
	if res.Spans != len(want) || len(got) != len(want) || infos[0].Dropped != 0 || len(res.Missing) != 0 {
		t.Fatalf("merged %d spans (saved %d), dropped %d, missing %v; want %d", res.Spans, len(got), infos[0].Dropped, res.Missing, len(want))
	}
	key := func(a, b trace.Span) int {
		return cmp.Or(cmp.Compare(a.StartNs, b.StartNs), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Lane, b.Lane), cmp.Compare(a.DurNs, b.DurNs), cmp.Compare(a.Args.Token, b.Args.Token), cmp.Compare(a.Args.Flow, b.Args.Flow))
	}
	slices.SortFunc(want, key)
	sorted := slices.Clone(got)
	slices.SortFunc(sorted, key)
	for i := range want {
		if sorted[i] != want[i] {
			t.Fatalf("span %d: got %+v, want %+v", i, sorted[i], want[i])
		}
	}
	if len(trs[0].Counters) != chunks {
		t.Errorf("%d counter samples, want one per chunk (%d)", len(trs[0].Counters), chunks)
	}
	if maxHeld > 1500 {
		t.Errorf("the collector held %d spans at once, over its budget of 1500", maxHeld)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("spill dir after the merge: %v", ents)
	}
	t.Logf("%d spans of 3 ranks merged through the spill file; at most %d held in memory", len(got), maxHeld)
}

// The merge waits Timeout from the last chunk of an announced task, not
// from the announcement: a rank whose chunks come slowly, but come, is
// not missing.
func TestMergeTimeoutCountsFromProgress(t *testing.T) {
	var s saved
	c := New(Config{Timeout: 300 * time.Millisecond, Save: s.save})
	if err := c.Task("a", task("slow", "a")); err != nil {
		t.Fatal(err)
	}
	for seq := range 6 {
		time.Sleep(150 * time.Millisecond)
		if err := c.Chunk("a", chunk(t, "slow", 0, seq, seq == 5, span("s", int64(seq+1), 1))); err != nil {
			t.Fatalf("chunk %d: %v", seq, err)
		}
	}
	res := wait(t, c, "slow")
	if len(res.Missing) != 0 || res.Spans != 6 {
		t.Fatalf("result %+v: a rank sending every 150 ms was cut off by a 300 ms timeout", res)
	}
}

// A spill file that cannot be created loses the spans that had to go
// there, counted and logged, not silently; what fit in memory stays.
func TestSpillFailureIsCounted(t *testing.T) {
	var s saved
	c := New(Config{Timeout: time.Hour, TaskSpans: 10, MaxSpans: 10, SpillDir: "/proc/orrery-no-such-dir", Save: s.save})
	var spans []trace.Span
	for i := range 25 {
		spans = append(spans, span("x", int64(i+1), 1))
	}
	for i := 0; i < 25; i += 5 {
		cs, _, _ := Chunks("nodisk", 0, i/5, spans[i:i+5], nil, 0, i+5 == 25)
		if err := c.Chunk("a", cs[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Task("a", &wire.TraceTask{Task: "nodisk", Kind: "t", Ranks: []wire.TraceRank{{Rank: 0, Node: "a"}}}); err != nil {
		t.Fatal(err)
	}
	res := wait(t, c, "nodisk")
	_, infos := s.get()
	if res.Spans+int(infos[0].Dropped) != 25 || infos[0].Dropped == 0 {
		t.Fatalf("%d spans merged, %d dropped; want all 25 accounted for, some dropped", res.Spans, infos[0].Dropped)
	}
}

// A damaged spill file is read back with an error, never a panic, a
// string past its limit or more spans than the run holds; a valid run
// reads back as it was written.
func FuzzSpillRun(f *testing.F) {
	dir := f.TempDir()
	good := func(spans []trace.Span) []byte {
		sp, err := newSpill(dir)
		if err != nil {
			f.Fatal(err)
		}
		defer sp.close()
		if err := sp.write(0, "n", spans); err != nil {
			f.Fatal(err)
		}
		b, _ := os.ReadFile(sp.f.Name())
		return b
	}
	f.Add(good(randomSpans(rand.New(rand.NewSource(1)), 20)), 20)
	f.Add([]byte{0, 4, 'a', 'b', 'c', 'd'}, 3)
	f.Add([]byte{5}, 1)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = min(max(n, 0), 1000)
		path := filepath.Join(t.TempDir(), "run")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		sp := &spill{f: fh, size: int64(len(data))}
		rr := sp.reader(run{rank: 1, node: "n", n: int64(len(data)), spans: n}, 0)
		got := 0
		for {
			ok, err := rr.next()
			if err != nil || !ok {
				break
			}
			got++
			if len(rr.cur.Name) > maxSpillString || rr.cur.Node != "n" || rr.cur.Rank != 1 {
				t.Fatalf("span %+v", rr.cur)
			}
		}
		if got > n {
			t.Fatalf("%d spans read from a run of %d", got, n)
		}
	})
}
