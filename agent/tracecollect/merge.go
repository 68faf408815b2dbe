package tracecollect

import (
	"cmp"
	"io"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
)

// Merged is a merged trace: its header, counters and flows in Trace, and
// its spans either in Trace.Spans or, for a task that spilled to disk,
// streamed in time order by Seq (Trace.Spans then nil). Seq may be
// iterated once, and only during Save.
type Merged struct {
	*trace.Trace
	// Threads lists every (node, rank, lane) of Seq's spans.
	Threads []trace.Thread
	Seq     iter.Seq2[*trace.Span, error]
	// Count is the number of spans; FirstNs and LastNs the earliest start
	// and latest end among them (0: none), on the master's clock.
	Count           int
	FirstNs, LastNs int64
}

// WriteChrome writes the trace as Chrome JSON (trace.WriteChrome, or
// trace.WriteChromeSeq for a streamed one).
func (m *Merged) WriteChrome(w io.Writer) error {
	if m.Seq == nil {
		return trace.WriteChrome(w, m.Trace)
	}
	return trace.WriteChromeSeq(w, m.Trace, m.Threads, m.Seq)
}

// mergeInfo is what the merge of p says besides its spans. p.io is held.
func (c *Collector) mergeInfo(p *pending) Info {
	info := Info{Kind: p.kind, Ranks: maps.Clone(p.ranks), Dropped: p.dropped + p.spillDropped, Error: p.errText, Announced: p.announced}
	if !p.announced {
		for r, d := range p.got {
			info.Ranks[r] = d.node
		}
	}
	for r := range info.Ranks {
		if d := p.got[r]; d == nil || !d.final || d.gap {
			info.Missing = append(info.Missing, r)
		}
	}
	slices.Sort(info.Missing)
	return info
}

// shifts moves every node onto our clock: its offset is its clock minus
// ours.
func (c *Collector) shifts(task string, ranks map[int]string) map[string]time.Duration {
	shift := map[string]time.Duration{}
	offsets := c.cfg.ClockOffsets()
	for node, off := range offsets {
		shift[node] = -off
	}
	for _, node := range ranks {
		if _, ok := offsets[node]; !ok && node != c.cfg.Self {
			c.log.Warn("no clock offset measured for a node yet: its times are uncorrected", "task", task, "node", node)
		}
	}
	return shift
}

// mergeInMemory merges a task held wholly in memory.
func mergeInMemory(p *pending, info Info, shift map[string]time.Duration) *Merged {
	tr := &trace.Trace{TaskID: p.task, CreatedAt: time.Now().UTC(), MissingRanks: info.Missing}
	tr.Spans = make([]trace.Span, 0, p.spans)
	for _, r := range slices.Sorted(maps.Keys(p.got)) {
		d := p.got[r]
		if info.Ranks[r] != d.node {
			continue // never announced as this node's rank
		}
		for _, sp := range d.spans { // chunk by chunk: each copy is short
			tr.Spans = append(tr.Spans, sp...)
		}
		tr.Counters = append(tr.Counters, d.counters...)
	}
	tr.ShiftAll(shift)
	slices.SortStableFunc(tr.Spans, func(a, b trace.Span) int { return cmp.Compare(a.StartNs, b.StartNs) })
	slices.SortStableFunc(tr.Counters, func(a, b trace.CounterSample) int { return cmp.Compare(a.TsNs, b.TsNs) })
	m := &Merged{Trace: tr, Count: len(tr.Spans)}
	for i := range tr.Spans {
		m.span(tr.Spans[i].StartNs, tr.Spans[i].EndNs())
	}
	return m
}

// mergeStreamed merges a task that spilled: what each rank still has in
// memory, sorted, and every run of its spill file, read as Save writes.
// p.io is held.
func mergeStreamed(p *pending, info Info, shift map[string]time.Duration) *Merged {
	tr := &trace.Trace{TaskID: p.task, CreatedAt: time.Now().UTC(), MissingRanks: info.Missing}
	m := &Merged{Trace: tr}
	threads := map[trace.Thread]bool{}
	var srcs []*source
	for _, r := range slices.Sorted(maps.Keys(p.got)) {
		d := p.got[r]
		if info.Ranks[r] != d.node {
			continue
		}
		var mem []trace.Span
		for _, sp := range d.spans {
			mem = append(mem, sp...)
		}
		off := int64(shift[d.node])
		for i := range mem {
			mem[i].StartNs += off
			threads[trace.Thread{Node: d.node, Rank: r, Lane: mem[i].Lane}] = true
			m.span(mem[i].StartNs, mem[i].EndNs())
		}
		slices.SortStableFunc(mem, func(a, b trace.Span) int { return cmp.Compare(a.StartNs, b.StartNs) })
		srcs = append(srcs, &source{mem: mem})
		m.Count += len(mem)
		tr.Counters = append(tr.Counters, d.counters...)
	}
	for _, r := range p.spill.runs {
		if info.Ranks[r.rank] != r.node {
			continue
		}
		off := shift[r.node]
		srcs = append(srcs, &source{rr: p.spill.reader(r, off)})
		m.Count += r.spans
		if r.spans > 0 {
			m.span(r.first+int64(off), r.last+int64(off))
		}
	}
	for th := range p.threads {
		if info.Ranks[th.Rank] == th.Node {
			threads[th] = true
		}
	}
	tr.ShiftAll(shift) // the counters
	slices.SortStableFunc(tr.Counters, func(a, b trace.CounterSample) int { return cmp.Compare(a.TsNs, b.TsNs) })
	m.Threads = slices.SortedFunc(maps.Keys(threads), func(a, b trace.Thread) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), cmp.Compare(a.Rank, b.Rank), strings.Compare(a.Lane, b.Lane))
	})
	m.Seq = mergeSources(srcs)
	return m
}

// span widens m's time range to hold [start, end].
func (m *Merged) span(start, end int64) {
	if m.FirstNs == 0 || start < m.FirstNs {
		m.FirstNs = start
	}
	m.LastNs = max(m.LastNs, end)
}
