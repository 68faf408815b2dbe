package trace

import (
	"time"
)

// Trace is everything known about one task: the unit that WriteChrome
// exports, ReadChrome loads, and a master merges from its nodes.
type Trace struct {
	TaskID    string
	CreatedAt time.Time // zero when unknown
	// Processes maps a node id to its friendly name. Nodes that appear in
	// spans but not here are named by their id. May be nil.
	Processes map[string]string
	Spans     []Span
	Counters  []CounterSample
	// Flows are flow endpoints that are not tied to a span's flow
	// (e.g. loaded from a foreign file). Spans' own flows are drawn from their
	// Args and are not repeated here.
	Flows []Flow
	// MissingRanks lists the ranks that never delivered their spans.
	MissingRanks []int
}

// CounterSample is one sample of a counter track on a node: a node's memory,
// or a link's throughput during the task.
type CounterSample struct {
	Node string `json:"node"`
	// Name is the track name (e.g. "memory", "link a→b").
	Name string `json:"name"`
	// Unit labels the series within the track (e.g. "bytes", "MB/s"); Perfetto
	// shows the track as "Name Unit". "" is written as "value".
	Unit  string  `json:"unit,omitempty"`
	TsNs  int64   `json:"tsNs"`
	Value float64 `json:"value"`
}

// MemorySample is the memory-use sample (bytes) of node at t, as the state
// samplers report it.
func MemorySample(node string, t time.Time, usedBytes float64) CounterSample {
	return CounterSample{Node: node, Name: "memory", Unit: "bytes", TsNs: t.UnixNano(), Value: usedBytes}
}

// LinkSample is the throughput sample (MB/s) of the link from → to at t. It is
// drawn on the sending node's track list.
func LinkSample(from, to string, t time.Time, mbps float64) CounterSample {
	return CounterSample{Node: from, Name: "link " + from + "→" + to, Unit: "MB/s", TsNs: t.UnixNano(), Value: mbps}
}

// RateTrack turns samples of a cumulative byte count (Value at TsNs, in
// time order) into the MB/s track name on node: each interval between two
// samples an exact value, held from its start, and 0 at the last sample
// (the count stopped there). An interval whose count went down is 0.
func RateTrack(node, name string, cum []CounterSample) []CounterSample {
	out := make([]CounterSample, 0, len(cum))
	for i, c := range cum {
		v := 0.0
		if i+1 < len(cum) {
			if dt := cum[i+1].TsNs - c.TsNs; dt > 0 && cum[i+1].Value >= c.Value {
				v = (cum[i+1].Value - c.Value) / 1e6 / (float64(dt) / 1e9)
			}
		}
		out = append(out, CounterSample{Node: node, Name: name, Unit: "MB/s", TsNs: c.TsNs, Value: v})
	}
	return out
}

// FlowPhase is the end of a flow an event marks.
type FlowPhase byte

const (
	FlowStart  FlowPhase = 's'
	FlowFinish FlowPhase = 'f'
)

// Flow is one endpoint of a flow arrow, bound to the slice that encloses TsNs
// on its rank's track.
type Flow struct {
	ID    uint64    `json:"id"`
	Phase FlowPhase `json:"phase"`
	Node  string    `json:"node"`
	Rank  int       `json:"rank"`
	Lane  string    `json:"lane,omitempty"`
	TsNs  int64     `json:"tsNs"`
	Name  string    `json:"name"`
	Cat   string    `json:"cat"`
}

// Shift moves every timestamp of node's spans, counter samples and flows by
// d. A master merging traces calls it with each node's clock offset (its
// clock minus the master's, negated) to put all nodes on one timeline.
func (t *Trace) Shift(node string, d time.Duration) {
	ns := int64(d)
	if ns == 0 {
		return
	}
	for i := range t.Spans {
		if t.Spans[i].Node == node {
			t.Spans[i].StartNs += ns
		}
	}
	for i := range t.Counters {
		if t.Counters[i].Node == node {
			t.Counters[i].TsNs += ns
		}
	}
	for i := range t.Flows {
		if t.Flows[i].Node == node {
			t.Flows[i].TsNs += ns
		}
	}
}

// ShiftAll applies Shift for every node in offsets in one pass over the trace.
func (t *Trace) ShiftAll(offsets map[string]time.Duration) {
	if len(offsets) == 0 {
		return
	}
	for i := range t.Spans {
		t.Spans[i].StartNs += int64(offsets[t.Spans[i].Node])
	}
	for i := range t.Counters {
		t.Counters[i].TsNs += int64(offsets[t.Counters[i].Node])
	}
	for i := range t.Flows {
		t.Flows[i].TsNs += int64(offsets[t.Flows[i].Node])
	}
}

// Stats computes the trace's statistics, tagged with its task id.
func (t *Trace) Stats() Stats {
	s := ComputeStats(t.Spans)
	s.TaskID = t.TaskID
	return s
}
