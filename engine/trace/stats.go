package trace

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// CategoryStats aggregates the durations of a set of spans, in whole
// microseconds as exo computes them (each span's duration truncated to µs).
type CategoryStats struct {
	TotalUs int64   `json:"totalUs"`
	Count   int64   `json:"count"`
	MinUs   int64   `json:"minUs"`
	MaxUs   int64   `json:"maxUs"`
	AvgUs   float64 `json:"avgUs"`
}

// RankStats is one rank's share of the statistics.
type RankStats struct {
	ByCategory map[string]CategoryStats `json:"byCategory"`
}

// PhaseStats groups a top-level category ("decode") with the categories
// nested in it. The embedded stats cover the spans of exactly the top-level
// category; Sub maps each nested category, without the "decode/" prefix, to
// its own stats (nested spans overlap their parents, so Sub is not a
// breakdown that sums to the total).
type PhaseStats struct {
	CategoryStats
	// WallUs is the wall time the phase's own spans cover, overlaps
	// counted once (TotalUs sums them over ranks and slots).
	WallUs int64                    `json:"wallUs"`
	Sub    map[string]CategoryStats `json:"sub"`
}

// StepStats describes the steps of one step category. A step is a span whose
// category's last segment is "step" ("step", "decode/step"), or an outermost
// span of category "decode" or "prefill". The embedded stats cover the step
// spans; PerStepUs maps each category nested in the step category (without
// its prefix) to its total time divided by the number of steps: the average
// time a step spends there. Steps of every rank count, so with N ranks each
// token adds N steps.
type StepStats struct {
	CategoryStats
	PerStepUs map[string]float64 `json:"perStepUs"`
}

// ShareStats splits one rank's working time into compute and comms. A span
// counts as compute when its category's last segment is "compute", as comms
// when it is "comms", "comm", "send" or "recv" — unless an enclosing segment
// of its category is already one of those, whose span holds its time. The
// shares are of computeUs + commsUs (0 when both are 0).
type ShareStats struct {
	ComputeUs    int64   `json:"computeUs"`
	CommsUs      int64   `json:"commsUs"`
	ComputeShare float64 `json:"computeShare"`
	CommsShare   float64 `json:"commsShare"`
}

// Stats is the JSON served at /v1/traces/{id}/stats. The first four fields are
// exo's, with exo's semantics; the last three are Orrery's.
type Stats struct {
	TaskID string `json:"taskId,omitempty"`
	// TotalWallTimeUs is the latest span end minus the earliest span start.
	TotalWallTimeUs int64                    `json:"totalWallTimeUs"`
	ByCategory      map[string]CategoryStats `json:"byCategory"`
	// ByRank is keyed by the rank in decimal.
	ByRank      map[string]RankStats  `json:"byRank"`
	Phases      map[string]PhaseStats `json:"phases"`
	PerStep     map[string]StepStats  `json:"perStep"`
	ByRankShare map[string]ShareStats `json:"byRankShare"`
}

// acc accumulates durations like exo's CategoryStats.add.
type acc struct{ total, count, min, max int64 }

func (a *acc) add(d int64) {
	if a.count == 0 {
		a.min, a.max = d, d
	} else {
		a.min = min(a.min, d)
		a.max = max(a.max, d)
	}
	a.total += d
	a.count++
}

func (a *acc) merge(b acc) {
	if b.count == 0 {
		return
	}
	if a.count == 0 {
		*a = b
		return
	}
	a.min = min(a.min, b.min)
	a.max = max(a.max, b.max)
	a.total += b.total
	a.count += b.count
}

func (a acc) stats() CategoryStats {
	s := CategoryStats{TotalUs: a.total, Count: a.count, MinUs: a.min, MaxUs: a.max}
	if a.count > 0 {
		s.AvgUs = float64(a.total) / float64(a.count)
	}
	return s
}

// denseRanks is the range of ranks indexed without a map.
const denseRanks = 1024

// catCache is a small direct-mapped cache in front of the category map:
// consecutive spans cycle through a few categories, and the strings of one
// category usually share their bytes, which makes the comparison cheap.
type catCache [32]struct {
	s  string
	id int32
	ok bool
}

func catSlot(s string) int {
	h := len(s)
	if h > 0 {
		h += int(s[h-1]) * 7
	}
	return h & 31
}

// ComputeStats aggregates spans the way exo's compute_stats does and adds
// phases, per-step averages and the per-rank compute/comms share. Durations
// and start times are truncated to whole microseconds first, as exo's files
// hold them. It runs in one pass over spans plus work proportional to the
// number of distinct (rank, category) pairs.
func ComputeStats(spans []Span) Stats {
	st := Stats{
		ByCategory:  map[string]CategoryStats{},
		ByRank:      map[string]RankStats{},
		Phases:      map[string]PhaseStats{},
		PerStep:     map[string]StepStats{},
		ByRankShare: map[string]ShareStats{},
	}
	if len(spans) == 0 {
		return st
	}

	t := tally{catID: map[string]int32{}, lastRnk: spans[0].Rank, lastRi: -1}
	minUs := spans[0].StartNs / 1000
	maxUs := minUs + spans[0].DurNs/1000
	top := map[int32][][2]int64{} // a phase's spans: [start, end) µs
	for i := range spans {
		s := &spans[i]
		start, dur := s.StartNs/1000, s.DurNs/1000
		minUs = min(minUs, start)
		maxUs = max(maxUs, start+dur)
		c := t.category(s.Cat)
		t.add(c, t.rank(s.Rank), dur)
		if strings.IndexByte(s.Cat, '/') < 0 {
			top[c] = append(top[c], [2]int64{start, start + dur})
		}
	}
	st.TotalWallTimeUs = maxUs - minUs

	// Everything below works on (rank, category) aggregates only.
	all := t.byCategory()
	for c, name := range t.cats {
		st.ByCategory[name] = all[c].stats()
	}
	t.rankStats(&st)
	phaseStats(&st, t.cats, all)
	for c, iv := range top {
		if p, ok := st.Phases[t.cats[c]]; ok {
			p.WallUs = unionUs(iv)
			st.Phases[t.cats[c]] = p
		}
	}
	stepStats(&st, t.cats, all)
	return st
}

// unionUs is the length of the union of intervals (sorted here).
func unionUs(iv [][2]int64) int64 {
	slices.SortFunc(iv, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var total, end int64
	for i, v := range iv {
		switch {
		case i == 0 || v[0] >= end:
			total += v[1] - v[0]
			end = v[1]
		case v[1] > end:
			total += v[1] - end
			end = v[1]
		}
	}
	return total
}

// tally is ComputeStats' pass over the spans: it sums durations by rank and
// category, both numbered in order of appearance.
type tally struct {
	catID   map[string]int32
	cats    []string
	cache   catCache
	dense   [denseRanks]int32 // rank → index+1
	sparse  map[int]int32     // other ranks → index
	ranks   []int
	accs    [][]acc // [rank index][category id]
	lastRnk int
	lastRi  int32
}

// category returns the id of cat, numbering it if it is new.
func (t *tally) category(cat string) int32 {
	slot := &t.cache[catSlot(cat)]
	cid := slot.id
	if !slot.ok || slot.s != cat {
		var ok bool
		if cid, ok = t.catID[cat]; !ok {
			cid = int32(len(t.cats))
			t.catID[cat] = cid
			t.cats = append(t.cats, cat)
		}
		slot.s, slot.id, slot.ok = cat, cid, true
	}
	return cid
}

// rank returns the index of rank r, numbering it if it is new.
func (t *tally) rank(r int) int32 {
	ri := t.lastRi
	if ri >= 0 && r == t.lastRnk {
		return ri
	}
	if r >= 0 && r < denseRanks {
		ri = t.dense[r] - 1
		if ri < 0 {
			ri = int32(len(t.ranks))
			t.dense[r] = ri + 1
			t.ranks = append(t.ranks, r)
			t.accs = append(t.accs, nil)
		}
	} else {
		if t.sparse == nil {
			t.sparse = map[int]int32{}
		}
		var ok bool
		if ri, ok = t.sparse[r]; !ok {
			ri = int32(len(t.ranks))
			t.sparse[r] = ri
			t.ranks = append(t.ranks, r)
			t.accs = append(t.accs, nil)
		}
	}
	t.lastRnk, t.lastRi = r, ri
	return ri
}

// add counts a span of dur µs in category cid on rank index ri.
func (t *tally) add(cid, ri int32, dur int64) {
	row := t.accs[ri]
	if int(cid) >= len(row) {
		row = append(row, make([]acc, len(t.cats)-len(row))...)
		t.accs[ri] = row
	}
	row[cid].add(dur)
}

// byCategory merges the ranks: the aggregate of each category id.
func (t *tally) byCategory() []acc {
	all := make([]acc, len(t.cats))
	for _, row := range t.accs {
		for c, a := range row {
			all[c].merge(a)
		}
	}
	return all
}

// rankStats fills ByRank and ByRankShare.
func (t *tally) rankStats(st *Stats) {
	class := make([]int8, len(t.cats))
	for c, name := range t.cats {
		class[c] = shareClass(name)
	}
	for ri, row := range t.accs {
		key := strconv.Itoa(t.ranks[ri])
		rs := RankStats{ByCategory: map[string]CategoryStats{}}
		var sh ShareStats
		for c, a := range row {
			if a.count == 0 {
				continue
			}
			rs.ByCategory[t.cats[c]] = a.stats()
			switch class[c] {
			case classCompute:
				sh.ComputeUs += a.total
			case classComms:
				sh.CommsUs += a.total
			}
		}
		if sum := sh.ComputeUs + sh.CommsUs; sum != 0 {
			sh.ComputeShare = float64(sh.ComputeUs) / float64(sum)
			sh.CommsShare = float64(sh.CommsUs) / float64(sum)
		}
		st.ByRank[key] = rs
		st.ByRankShare[key] = sh
	}
}

// phaseStats fills Phases from the aggregate of each category.
func phaseStats(st *Stats, cats []string, all []acc) {
	for c, name := range cats {
		outer, sub, nested := strings.Cut(name, "/")
		p, ok := st.Phases[outer]
		if !ok {
			p.Sub = map[string]CategoryStats{}
		}
		if nested {
			p.Sub[sub] = all[c].stats()
		} else {
			p.CategoryStats = all[c].stats()
		}
		st.Phases[outer] = p
	}
}

// stepStats fills PerStep from the aggregate of each category.
func stepStats(st *Stats, cats []string, all []acc) {
	for c, name := range cats {
		if !isStepCategory(name) {
			continue
		}
		ss := StepStats{CategoryStats: all[c].stats(), PerStepUs: map[string]float64{}}
		prefix := name + "/"
		for k, inner := range cats {
			if rest, ok := strings.CutPrefix(inner, prefix); ok {
				ss.PerStepUs[rest] = float64(all[k].total) / float64(all[c].count)
			}
		}
		st.PerStep[name] = ss
	}
}

const (
	classNone int8 = iota
	classCompute
	classComms
)

func segmentClass(seg string) int8 {
	switch seg {
	case "compute":
		return classCompute
	case "comms", "comm", "send", "recv":
		return classComms
	}
	return classNone
}

// shareClass classifies a category for ShareStats: by its last segment, and
// only if no enclosing segment is classified.
func shareClass(cat string) int8 {
	for {
		seg, rest, more := strings.Cut(cat, "/")
		c := segmentClass(seg)
		if !more {
			return c
		}
		if c != classNone {
			return classNone
		}
		cat = rest
	}
}

// isStepCategory reports whether spans of cat are steps (see StepStats).
func isStepCategory(cat string) bool {
	if cat == "decode" || cat == "prefill" {
		return true
	}
	i := strings.LastIndexByte(cat, '/')
	return cat[i+1:] == "step"
}
