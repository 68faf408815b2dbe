package trace

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// bigChrome is a Chrome trace of n spans on 3 nodes, one event per line,
// with the process names at the end (after any split point).
func bigChrome(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"otherData":{"taskId":"big"},"traceEvents":[` + "\n")
	for i := range n {
		fmt.Fprintf(&b, `{"name":"compute %d","cat":"decode/compute","ph":"X","ts":%d.5,"dur":3,"pid":%d,"tid":%d,"args":{"rank":%d,"bytes":%d}},`+"\n", i%7, i*10, i%3, i%3, i%3, i)
		if i%1000 == 0 {
			fmt.Fprintf(&b, `{"name":"memory","ph":"C","ts":%d,"pid":%d,"args":{"bytes":%d}},`+"\n", i*10, i%3, i)
		}
	}
	for p := range 3 {
		fmt.Fprintf(&b, `{"name":"process_name","ph":"M","pid":%d,"args":{"name":"node %d","nodeId":"n%d"}}`, p, p, p)
		if p < 2 {
			b.WriteString(",\n")
		}
	}
	b.WriteString("\n]}\n")
	return b.Bytes()
}

// A trace read by two goroutines is the trace read by one, whatever
// happens after the split point: a clean end, a cut, a syntax error, the
// event limit, or a split point that is not an event.
func TestSplitReadSameAsSequential(t *testing.T) {
	whole := bigChrome(50_000)
	mid := len(whole) / 2
	type tc struct {
		data   []byte
		joined bool // the second goroutine's events are used
	}
	cases := map[string]tc{
		"whole":              {whole, true},
		"cut after the mid":  {whole[:mid+len(whole)/4], false},
		"cut before the mid": {whole[:mid-1000], false},
		"syntax error late":  {bytes.Replace(whole, []byte(`"ts":400000.5`), []byte(`"ts":40:0000.5`), 1), false},
		"syntax error early": {bytes.Replace(whole, []byte(`"ts":100.5`), []byte(`"ts":1:00.5`), 1), false},
		// Pretty-printed args put "\n{" inside events: no split point is an
		// event's start.
		"args on their own line": {bytes.ReplaceAll(whole, []byte(`"args":{`), []byte("\"args\":\n{")), false},
		"bare array":             {whole[bytes.IndexByte(whole, '[') : bytes.LastIndexByte(whole, ']')+1], true},
	}
	for name, c := range cases {
		for _, lim := range []ReadLimits{{}, {MaxEvents: 40_000}} {
			seq, _, seqErr := readChrome(bytes.NewReader(c.data), lim, readOptions{splitMin: -1, noFast: true})
			split, rs, splitErr := readChrome(bytes.NewReader(c.data), lim, readOptions{})
			if want := c.joined && lim.MaxEvents == 0; rs.joined != want {
				t.Errorf("%s %+v: joined %v, want %v", name, lim, rs.joined, want)
			}
			if fmt.Sprint(splitErr) != fmt.Sprint(seqErr) {
				t.Errorf("%s %+v: split read error %v, sequential %v", name, lim, splitErr, seqErr)
				continue
			}
			if !reflect.DeepEqual(split, seq) {
				t.Errorf("%s %+v: split read differs from the sequential one (%d/%d spans)", name, lim, len(split.Spans), len(seq.Spans))
			}
		}
	}
	tr, _, err := readChrome(bytes.NewReader(whole), ReadLimits{}, readOptions{})
	if err != nil || len(tr.Spans) != 50_000 || tr.Processes["n2"] != "node 2" || tr.Spans[49_999].Node != "n1" || tr.TaskID != "big" {
		t.Fatalf("split read of the whole: %v, %d spans, processes %v", err, len(tr.Spans), tr.Processes)
	}
	if !strings.Contains(string(whole[len(whole)/2:]), "\n{") {
		t.Fatal("the test trace has no split point")
	}
}

// The fast path reads WriteChrome's spans to what the general reader
// makes of them, and leaves it the ones it does not take (escapes,
// non-ASCII names) and everything that is not an X span.
func TestFastPathSameAsGeneral(t *testing.T) {
	tr := sampleTrace()
	tr.Spans = append(tr.Spans,
		Span{Name: "negative", Cat: "c", Node: "node-a", Rank: -2, StartNs: -1_500, DurNs: 7, Args: Args{}.WithToken(-3).WithFlowIn(9)},
		Span{Name: "big", Cat: "c", Node: "node-a", Rank: 1 << 40, StartNs: 1<<62 - 1, DurNs: 1, Args: Args{}.WithBytes(1 << 62).WithPeer(-1 << 31)},
		Span{Name: "", Cat: "", Node: "node-b", StartNs: 0, DurNs: 0})
	for i := range 20_000 { // enough for a split read
		tr.Spans = append(tr.Spans, Span{Name: fmt.Sprintf("token %d", i%50), Cat: "decode/compute", Node: fmt.Sprintf("n%d", i%3),
			Rank: i % 3, Lane: []string{"", "io"}[i%2], StartNs: int64(i) * 1_234_567, DurNs: int64(i % 1001), Args: Send(i%3, int64(i), uint64(i+1))})
	}
	data := writeChrome(t, tr)
	general, _, gerr := readChrome(bytes.NewReader(data), ReadLimits{}, readOptions{splitMin: -1, noFast: true})
	if gerr != nil {
		t.Fatal(gerr)
	}
	for _, opt := range []readOptions{{splitMin: -1}, {splitMin: 0}} {
		got, rs, err := readChrome(bytes.NewReader(data), ReadLimits{}, opt)
		if err != nil || !reflect.DeepEqual(got, general) {
			t.Fatalf("%+v: %v: the read differs from the general reader's", opt, err)
		}
		// Every span but the one with escapes and non-ASCII in its name and
		// the one with a 19-digit byte count; streamed, also those a buffer
		// refill cuts.
		want, cut := len(tr.Spans)-2, 0
		if opt.splitMin < 0 {
			cut = len(data)/(64<<10) + 1
		}
		if rs.fast > want || rs.fast < want-cut || rs.joined != (opt.splitMin == 0) {
			t.Errorf("%+v: the fast path read %d of %d spans (joined %v)", opt, rs.fast, len(tr.Spans), rs.joined)
		}
	}
}
