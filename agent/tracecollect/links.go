package tracecollect

import (
	"cmp"
	"slices"
	"strings"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Link tracks of a rank's part of a task: the MB/s of each link it sent
// on, and the bytes it sent so far.

// linkTracks turns a rank's counter samples and spans into its link
// tracks, keeping its other counters. A runner samples the bytes its
// outbound link has sent (runner.LinkCounter) when the task starts on the
// rank, every runner.LinkSampleEvery, and when it ends there: each
// interval between two samples becomes an exact MB/s value, and the last
// sample a 0 (the task ended). Send spans with bytes and a peer give the
// bytes sent so far at each send's end, from 0 at the rank's first span,
// so that a 10 ms token shows its traffic between samples. nodeOf names
// the node of a rank ("": unknown, no track).
func linkTracks(self string, counters []trace.CounterSample, spans []trace.Span, nodeOf func(rank int) string) []trace.CounterSample {
	var out []trace.CounterSample
	byPeer := map[string][]trace.CounterSample{}
	for _, c := range counters {
		n, ok := runnerapi.ParseLinkCounter(c.Name)
		if !ok {
			out = append(out, c)
			continue
		}
		if peer := nodeOf(n); peer != "" {
			byPeer[peer] = append(byPeer[peer], c)
		}
	}
	for peer, cs := range byPeer {
		slices.SortFunc(cs, func(a, b trace.CounterSample) int { return cmp.Compare(a.TsNs, b.TsNs) })
		out = append(out, trace.RateTrack(self, "link "+self+"→"+peer, cs)...)
	}
	return append(out, sentTracks(self, spans, nodeOf)...)
}

// sentTracks are the bytes each peer was sent so far, from send spans.
func sentTracks(self string, spans []trace.Span, nodeOf func(rank int) string) []trace.CounterSample {
	var sends []trace.Span
	first := int64(0)
	for _, s := range spans {
		if first == 0 || s.StartNs < first {
			first = s.StartNs
		}
		if (s.Cat == "send" || strings.HasSuffix(s.Cat, "/send")) && s.Args.Has&trace.ArgBytes != 0 && s.Args.Has&trace.ArgPeer != 0 {
			sends = append(sends, s)
		}
	}
	slices.SortFunc(sends, func(a, b trace.Span) int { return cmp.Compare(a.EndNs(), b.EndNs()) })
	var out []trace.CounterSample
	sum := map[string]float64{}
	for _, s := range sends {
		peer := nodeOf(int(s.Args.Peer))
		if peer == "" {
			continue
		}
		name := "link " + self + "→" + peer
		if _, ok := sum[peer]; !ok {
			out = append(out, trace.CounterSample{Node: self, Name: name, Unit: SentUnit, TsNs: first, Value: 0})
		}
		sum[peer] += float64(s.Args.Bytes)
		out = append(out, trace.CounterSample{Node: self, Name: name, Unit: SentUnit, TsNs: s.EndNs(), Value: sum[peer]})
	}
	return out
}

// SentUnit labels a link's bytes-sent-so-far series.
const SentUnit = "bytes sent"
