package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// chromeEvent is what checkLinkTracks reads of a Chrome trace event.
type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"` // µs
	Dur  float64        `json:"dur"`
	Pid  int            `json:"pid"`
	Args map[string]any `json:"args"`
}

// linkFrameSlack bounds what a rank's link carries besides its send
// spans' frames during a request: the begin and end frames (JSON).
const linkFrameSlack = 2048

// checkLinkTracks checks a traced chat over several ranks: on each rank's
// process, the bytes its link MB/s track adds up to (each value times its
// interval) equal the bytes of its send spans, within linkFrameSlack; the
// MB/s is not 0 during decode; and the bytes-sent track ends at the send
// spans' sum. It returns the figures per process.
func checkLinkTracks(t *testing.T, raw []byte, ranks int) map[int][3]float64 {
	t.Helper()
	var tr struct {
		TraceEvents []chromeEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatalf("trace: %v", err)
	}
	type proc struct {
		sent                 float64
		decodeFrom, decodeTo float64
		mbps                 []chromeEvent
		sentTrack            []chromeEvent
		linkNames            []string
	}
	procs := map[int]*proc{}
	at := func(pid int) *proc {
		if procs[pid] == nil {
			procs[pid] = &proc{}
		}
		return procs[pid]
	}
	num := func(e chromeEvent, k string) (float64, bool) { v, ok := e.Args[k].(float64); return v, ok }
	for _, e := range tr.TraceEvents {
		p := at(e.Pid)
		switch {
		case e.Ph == "X" && strings.HasPrefix(e.Name, "send → rank"):
			b, _ := num(e, "bytes")
			p.sent += b
		case e.Ph == "X" && strings.Contains(e.Cat, "decode"):
			if p.decodeFrom == 0 || e.Ts < p.decodeFrom {
				p.decodeFrom = e.Ts
			}
			p.decodeTo = max(p.decodeTo, e.Ts+e.Dur)
		case e.Ph == "C" && strings.HasPrefix(e.Name, "link → "):
			if _, ok := num(e, "MB/s"); ok {
				p.mbps = append(p.mbps, e)
			} else if _, ok := num(e, "bytes sent"); ok {
				p.sentTrack = append(p.sentTrack, e)
			}
			if !slices.Contains(p.linkNames, e.Name) {
				p.linkNames = append(p.linkNames, e.Name)
			}
		}
	}
	out := map[int][3]float64{}
	for pid, p := range procs {
		if p.sent == 0 {
			continue
		}
		slices.SortFunc(p.mbps, func(a, b chromeEvent) int { return int(a.Ts - b.Ts) })
		var measured float64
		busyInDecode := false
		for i, e := range p.mbps {
			v, _ := num(e, "MB/s")
			if i+1 < len(p.mbps) {
				dt := p.mbps[i+1].Ts - e.Ts // µs; MB/s × µs = bytes
				measured += v * dt
				if v > 0 && e.Ts < p.decodeTo && p.mbps[i+1].Ts > p.decodeFrom {
					busyInDecode = true
				}
			}
		}
		slices.SortFunc(p.sentTrack, func(a, b chromeEvent) int { return int(a.Ts - b.Ts) })
		var sentEnd float64
		if n := len(p.sentTrack); n > 0 {
			sentEnd, _ = num(p.sentTrack[n-1], "bytes sent")
		}
		out[pid] = [3]float64{p.sent, measured, float64(len(p.mbps))}
		t.Logf("process %d (%v): send spans %.0f B, link track %.0f B over %d samples, bytes-sent track ends at %.0f",
			pid, p.linkNames, p.sent, measured, len(p.mbps), sentEnd)
		if len(p.linkNames) != 1 || len(p.mbps) < 2 || measured < p.sent-1 || measured > p.sent+linkFrameSlack {
			t.Errorf("process %d: link %v carried %.0f B by its MB/s track, its send spans %.0f B", pid, p.linkNames, measured, p.sent)
		}
		if !busyInDecode {
			t.Errorf("process %d: the MB/s track is 0 throughout decode (%.0f–%.0f µs): %v", pid, p.decodeFrom, p.decodeTo, p.mbps)
		}
		if sentEnd != p.sent {
			t.Errorf("process %d: the bytes-sent track ends at %.0f, the send spans sum to %.0f", pid, sentEnd, p.sent)
		}
	}
	if len(out) != ranks {
		t.Errorf("%d processes sent on a link, want %d", len(out), ranks)
	}
	return out
}
