package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden files")

// sampleTrace is a small trace with every feature WriteChrome knows.
func sampleTrace() *Trace {
	base := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC).UnixNano()
	flow := FlowKey(0, 1, 0)
	return &Trace{
		TaskID:       "task-42",
		CreatedAt:    time.Date(2026, 12, 2, 10, 0, 1, 123456789, time.UTC),
		Processes:    map[string]string{"node-a": "Mac \"Studio\" A"},
		MissingRanks: []int{3},
		Spans: []Span{
			{Name: "decode 0", Cat: "decode", Node: "node-a", Rank: 0, StartNs: base, DurNs: 1_500_000, Args: Args{}.WithToken(0)},
			{Name: "joint_blocks", Cat: "decode/compute", Node: "node-a", Rank: 0, StartNs: base + 1000, DurNs: 1_200_250},
			{Name: "send 1", Cat: "decode/comms", Node: "node-a", Rank: 0, StartNs: base + 1_201_250, DurNs: 250_001, Args: Send(1, 8192, flow)},
			{Name: "read weights", Cat: "io", Node: "node-a", Lane: "io", Rank: 0, StartNs: base - 5, DurNs: 999},
			{Name: "recv 0", Cat: "decode/comms", Node: "node-b", Rank: 1, StartNs: base + 1_300_000, DurNs: 200_000, Args: Recv(0, 8192, flow)},
			{Name: "naïve \"quoted\"\n\t\x01 🙂", Cat: "decode/compute", Node: "node-b", Rank: 1, StartNs: base + 1_500_000, DurNs: 1_000_000, Args: Args{}.WithBytes(-1).WithPeer(0)},
		},
		Counters: []CounterSample{
			MemorySample("node-a", time.Unix(0, base), 8.5e9),
			LinkSample("node-a", "node-b", time.Unix(0, base+100_000), 123.25),
			{Node: "node-b", Name: "load", TsNs: base, Value: 0.5},
		},
		Flows: []Flow{
			{ID: 7, Phase: FlowStart, Node: "node-b", Rank: 1, TsNs: base + 1_600_000, Name: "handoff", Cat: "sched"},
			{ID: 7, Phase: FlowFinish, Node: "node-a", Rank: 0, Lane: "io", TsNs: base + 2_000_000, Name: "handoff", Cat: "sched"},
		},
	}
}

func writeChrome(t testing.TB, tr *Trace) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteChrome(&buf, tr); err != nil {
		t.Fatalf("WriteChrome: %v", err)
	}
	return buf.Bytes()
}

func TestChromeGolden(t *testing.T) {
	got := writeChrome(t, sampleTrace())
	path := filepath.Join("testdata", "sample.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("WriteChrome output differs from %s (run with -update if intended):\n%s", path, got)
	}
}

// chromeDoc is the generic shape of a Chrome trace, for checking the output
// with encoding/json.
type chromeDoc struct {
	OtherData   map[string]any   `json:"otherData"`
	TraceEvents []map[string]any `json:"traceEvents"`
}

func TestWriteChromeShape(t *testing.T) {
	tr := sampleTrace()
	out := writeChrome(t, tr)
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON:\n%s", out)
	}
	var doc chromeDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OtherData["taskId"] != "task-42" || doc.OtherData["createdAt"] != "2026-12-02T10:00:01.123456789Z" {
		t.Errorf("otherData = %v", doc.OtherData)
	}
	byPh := map[string][]map[string]any{}
	for _, e := range doc.TraceEvents {
		ph, _ := e["ph"].(string)
		byPh[ph] = append(byPh[ph], e)
	}
	if n := len(byPh["X"]); n != len(tr.Spans) {
		t.Errorf("%d X events, want %d", n, len(tr.Spans))
	}
	if n := len(byPh["C"]); n != len(tr.Counters) {
		t.Errorf("%d C events, want %d", n, len(tr.Counters))
	}
	procs := map[float64]string{}
	threads := map[string]bool{}
	for _, m := range byPh["M"] {
		args := m["args"].(map[string]any)
		switch m["name"] {
		case "process_name":
			procs[m["pid"].(float64)] = args["name"].(string) + "|" + args["nodeId"].(string)
		case "thread_name":
			threads[args["name"].(string)] = true
		}
	}
	wantProcs := map[float64]string{0: "Mac \"Studio\" A|node-a", 1: "node-b|node-b"}
	if !reflect.DeepEqual(procs, wantProcs) {
		t.Errorf("process names %v, want %v", procs, wantProcs)
	}
	for _, name := range []string{"rank 0", "rank 0 io", "rank 1"} {
		if !threads[name] {
			t.Errorf("no thread named %q in %v", name, threads)
		}
	}
	// Every flow start has its finish, bound to the enclosing slice.
	starts := map[float64]int{}
	for _, e := range byPh["s"] {
		starts[e["id"].(float64)]++
	}
	for _, e := range byPh["f"] {
		if e["bp"] != "e" {
			t.Errorf("flow finish without bp e: %v", e)
		}
		starts[e["id"].(float64)]--
	}
	if len(starts) != 2 {
		t.Errorf("flow ids %v, want 2 distinct", starts)
	}
	for id, n := range starts {
		if n != 0 {
			t.Errorf("flow %v: %d unmatched starts", id, n)
		}
	}
	// The send's flow start lies inside the send span, on its track.
	for _, e := range byPh["s"] {
		if e["name"] != "flow" {
			continue
		}
		send := byPh["X"][2]
		ts, sts, sdur := e["ts"].(float64), send["ts"].(float64), send["dur"].(float64)
		if ts < sts || ts > sts+sdur || e["tid"] != send["tid"] || e["pid"] != send["pid"] {
			t.Errorf("flow start %v not within send span %v", e, send)
		}
	}
	x := byPh["X"][1]
	if x["ts"].(float64) != 1796205600000001 || x["dur"].(float64) != 1200.25 {
		t.Errorf("span times %v %v, want µs with sub-µs decimals", x["ts"], x["dur"])
	}
}

func TestChromeRoundTrip(t *testing.T) {
	tr := sampleTrace()
	out := writeChrome(t, tr)
	readers := map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(out) },
		"one-byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(out)) },
		"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(out)) },
		"data-err": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(out)) },
	}
	for name, r := range readers {
		t.Run(name, func(t *testing.T) {
			got, err := ReadChrome(r())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Spans, tr.Spans) {
				t.Errorf("spans:\n got %+v\nwant %+v", got.Spans, tr.Spans)
			}
			if !reflect.DeepEqual(got.Counters, tr.Counters) {
				t.Errorf("counters:\n got %+v\nwant %+v", got.Counters, tr.Counters)
			}
			if !reflect.DeepEqual(got.Flows, tr.Flows) {
				t.Errorf("flows:\n got %+v\nwant %+v", got.Flows, tr.Flows)
			}
			if got.TaskID != tr.TaskID || !got.CreatedAt.Equal(tr.CreatedAt) || !reflect.DeepEqual(got.MissingRanks, tr.MissingRanks) {
				t.Errorf("header %q %v %v", got.TaskID, got.CreatedAt, got.MissingRanks)
			}
			wantProcs := map[string]string{"node-a": "Mac \"Studio\" A", "node-b": "node-b"}
			if !reflect.DeepEqual(got.Processes, wantProcs) {
				t.Errorf("processes %v, want %v", got.Processes, wantProcs)
			}
		})
	}
}

func TestChromeRoundTripRecorder(t *testing.T) {
	r := NewRecorder(2, "n1", Options{NodeName: "Mac"})
	for i := range 1000 {
		step := r.Start("decode", "decode")
		c := step.Child("compute", "compute")
		c.End(Args{}.WithToken(i))
		step.End(Args{})
	}
	tr := r.DrainTrace("t")
	got, err := ReadChrome(bytes.NewReader(writeChrome(t, tr)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spans, tr.Spans) {
		t.Fatal("recorded spans do not survive a round trip")
	}
	if got.Processes["n1"] != "Mac" {
		t.Errorf("processes %v", got.Processes)
	}
}

// exoTrace is a trace in the shape exo's export writes (indent 2, pid 0,
// tid = rank, args.rank, thread names "Rank N").
const exoTrace = `{
  "traceEvents": [
    {
      "name": "sync 0",
      "cat": "sync",
      "ph": "X",
      "ts": 1769800000000000,
      "dur": 500,
      "pid": 0,
      "tid": 0,
      "args": {
        "rank": 0
      }
    },
    {
      "name": "joint_blocks",
      "cat": "sync/compute",
      "ph": "X",
      "ts": 1769800000000010,
      "dur": 400,
      "pid": 0,
      "tid": 0,
      "args": {
        "rank": 0
      }
    },
    {
      "name": "send 1",
      "cat": "sync/comms",
      "ph": "X",
      "ts": 1769800000000420,
      "dur": 70,
      "pid": 0,
      "tid": 1,
      "args": {
        "rank": 1
      }
    },
    {
      "name": "thread_name",
      "ph": "M",
      "pid": 0,
      "tid": 0,
      "args": {
        "name": "Rank 0"
      }
    }
  ]
}`

func TestReadExoTrace(t *testing.T) {
	tr, err := ReadChrome(strings.NewReader(exoTrace))
	if err != nil {
		t.Fatal(err)
	}
	want := []Span{
		{Name: "sync 0", Cat: "sync", Node: "0", Rank: 0, StartNs: 1769800000000000_000, DurNs: 500_000},
		{Name: "joint_blocks", Cat: "sync/compute", Node: "0", Rank: 0, StartNs: 1769800000000010_000, DurNs: 400_000},
		{Name: "send 1", Cat: "sync/comms", Node: "0", Rank: 1, StartNs: 1769800000000420_000, DurNs: 70_000},
	}
	if !reflect.DeepEqual(tr.Spans, want) {
		t.Fatalf("spans:\n got %+v\nwant %+v", tr.Spans, want)
	}
	st := ComputeStats(tr.Spans)
	// Wall: latest end max(0+500, 10+400, 420+70) = 500 minus earliest start 0.
	if st.TotalWallTimeUs != 500 || st.ByCategory["sync"].TotalUs != 500 || st.ByRank["1"].ByCategory["sync/comms"].Count != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestReadTolerant(t *testing.T) {
	cases := []struct {
		name, in string
		want     []Span
	}{
		{"bare array", `[{"name":"a","ph":"X","ts":1,"dur":2}]`,
			[]Span{{Name: "a", Node: "0", StartNs: 1000, DurNs: 2000}}},
		{"cut short", `[{"name":"a","ts":1},{"name":"b","ts":2}`,
			[]Span{{Name: "a", Node: "0", StartNs: 1000}, {Name: "b", Node: "0", StartNs: 2000}}},
		{"trailing comma", "[{\"name\":\"a\"},\n",
			[]Span{{Name: "a", Node: "0"}}},
		{"object cut at an event", `{"otherData":{},"traceEvents":[{"name":"a"},`,
			[]Span{{Name: "a", Node: "0"}}},
		{"object cut in an event", `{"traceEvents":[{"name":"a"},{"name":"b","ts":1`,
			[]Span{{Name: "a", Node: "0"}}},
		{"object without its brace", `{"traceEvents":[{"name":"a"}]`, []Span{{Name: "a", Node: "0"}}},
		{"cut in a string", `[{"name":"a"},{"name":"ab`, []Span{{Name: "a", Node: "0"}}},
		{"cut in an escape", `[{"name":"a"},{"name":"\u00`, []Span{{Name: "a", Node: "0"}}},
		{"just a brace", `{`, nil},
		{"trailing comma closed", `{"traceEvents":[{"name":"a"},]}`,
			[]Span{{Name: "a", Node: "0"}}},
		{"empty event", `{"traceEvents":[{}]}`, []Span{{Node: "0"}}},
		{"no events", `{"traceEvents":[]}`, nil},
		{"no traceEvents", `{"displayTimeUnit":"ns"}`, nil},
		{"traceEvents not an array", `{"traceEvents":{"a":1}}`, nil},
		{"loose numbers", `[{"ts":"12.5","dur":" 3 ","tid":"2","pid":"x"}]`,
			[]Span{{Node: "0", Rank: 2, StartNs: 12500, DurNs: 3000}}},
		{"rank from args", `[{"tid":2,"args":{"rank":"4"}},{"tid":2,"args":{"rank":null}},{"tid":2,"args":{"rank":1.9}}]`,
			[]Span{{Node: "0", Rank: 4}, {Node: "0", Rank: 2}, {Node: "0", Rank: 1}}},
		{"booleans and null", `[{"name":null,"cat":true,"ts":true,"dur":false}]`,
			[]Span{{Name: "None", Cat: "True", Node: "0", StartNs: 1000}}},
		{"number name", `[{"name":5,"cat":1.50}]`, []Span{{Name: "5", Cat: "1.50", Node: "0"}}},
		{"non-object events", `[1,"x",null,[{"name":"no"}],{"name":"a"}]`, []Span{{Name: "a", Node: "0"}}},
		{"other phases", `[{"ph":"B"},{"ph":"E"},{"ph":"i"},{"ph":"XX"},{"ph":"X","name":"a"}]`,
			[]Span{{Name: "a", Node: "0"}}},
		{"unknown fields", `{"foo":{"bar":[1,2,{"x":null}]},"traceEvents":[{"name":"a","extra":{"deep":[[]]},"args":{"k":{"v":[1]},"bytes":"9"}}],"tail":true}`,
			[]Span{{Name: "a", Node: "0", Args: Args{}.WithBytes(9)}}},
		{"metadata after spans", `[{"name":"a","pid":3},{"name":"process_name","ph":"M","pid":3,"args":{"name":"Mac","nodeId":"n3"}}]`,
			[]Span{{Name: "a", Node: "n3"}}},
		{"exponent", `[{"ts":1.5e3,"dur":2E-3}]`, []Span{{Node: "0", StartNs: 1_500_000, DurNs: 2}}},
		{"negative", `[{"ts":-1.5,"dur":-0.0004}]`, []Span{{Node: "0", StartNs: -1500}}},
		{"saturate", `[{"ts":1e30,"dur":-99999999999999999999999}]`,
			[]Span{{Node: "0", StartNs: math.MaxInt64, DurNs: math.MinInt64}}},
		{"escapes", `[{"name":"\u00e9\ud83d\ude42\ud800x\/\"\\\n","cat":"\udc00"}]`,
			[]Span{{Name: "é🙂\ufffdx/\"\\\n", Cat: "\ufffd", Node: "0"}}},
		{"invalid utf8", "[{\"name\":\"a\xffb\xc3\"}]", []Span{{Name: "a\ufffdb\ufffd", Node: "0"}}},
		{"both flow directions", `[{"args":{"flowOut":5,"flowIn":7,"peer":"x"}}]`,
			[]Span{{Node: "0", Args: Args{Flow: 7, Has: ArgFlowOut | ArgFlowIn}}}},
		{"lanes and args", `[{"args":{"lane":"io","peer":2,"token":3,"flowOut":5,"flowIn":-1}}]`,
			[]Span{{Node: "0", Lane: "io", Args: Args{Peer: 2, Token: 3, Flow: 5, Has: ArgPeer | ArgToken | ArgFlowOut}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := ReadChrome(strings.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tr.Spans, c.want) {
				t.Errorf("spans:\n got %+v\nwant %+v", tr.Spans, c.want)
			}
		})
	}
}

func TestReadCountersAndFlows(t *testing.T) {
	in := `{"traceEvents":[
		{"name":"mem","ph":"C","ts":1,"pid":1,"args":{"value":5,"swap":"7","note":"x"}},
		{"name":"f","cat":"c","ph":"s","id":"0x10","ts":2,"pid":1,"tid":4},
		{"name":"f","cat":"c","ph":"f","bp":"e","id":"abc","ts":3,"pid":1,"tid":4,"args":{"rank":2,"lane":"io"}},
		{"name":"flow","cat":"flow","ph":"s","id":9,"ts":3,"pid":1,"tid":0},
		{"name":"send","ph":"X","ts":3,"dur":1,"pid":1,"tid":0,"args":{"flowOut":9}},
		{"name":"process_name","ph":"M","pid":1,"args":{"name":"Mac B"}}],
		"otherData":{"taskId":"t1","createdAt":"2026-12-02T10:00:00+01:00","missingRanks":[2,"5",null]}}`
	tr, err := ReadChrome(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	wantC := []CounterSample{{Node: "1", Name: "mem", TsNs: 1000, Value: 5}}
	if !reflect.DeepEqual(tr.Counters, wantC) {
		t.Errorf("counters %+v, want %+v", tr.Counters, wantC)
	}
	if len(tr.Flows) != 2 || tr.Flows[0].ID != 16 || tr.Flows[0].Rank != 4 || tr.Flows[1].Phase != FlowFinish ||
		tr.Flows[1].Rank != 2 || tr.Flows[1].Lane != "io" || tr.Flows[1].ID == 0 {
		t.Errorf("flows %+v (the span's own flow 9 must be dropped)", tr.Flows)
	}
	if tr.TaskID != "t1" || !tr.CreatedAt.Equal(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)) ||
		!reflect.DeepEqual(tr.MissingRanks, []int{2, 5}) || tr.Processes["1"] != "Mac B" {
		t.Errorf("header %+v", tr)
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestReadErrors(t *testing.T) {
	malformed := []string{
		"", "   ", "nul", "x", `{"traceEvents":[{"name":}]}`, `{"traceEvents":[{"a":1}}`,
		`[1 2]`, `[{"ts":01}]`, `[{"ts":1.}]`, `[{"ts":-}]`, "[{\"name\":\"a\x01\"}]", `[{"name":"\q"}]`,
		`[{"name":"\u12"}]`, `{"traceEvents":[],}`, `{"a" 1}`, `[{"a":1,}]`, `[{"name":"abc"}}`, `[tru]`,
		`[{"name":"\u12x"}]`,
	}
	for _, in := range malformed {
		if _, err := ReadChrome(strings.NewReader(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ReadChrome(%q) = %v, want ErrMalformed", in, err)
		}
	}
	limits := []struct {
		in  string
		lim ReadLimits
	}{
		{`[{},{},{}]`, ReadLimits{MaxEvents: 2}},
		{`[{"args":{"a":{"b":{"c":1}}}}]`, ReadLimits{MaxDepth: 3}},
		{`[{"name":"0123456789abc"}]`, ReadLimits{MaxString: 10}},
		{`[{"name":"0123456789\nabc"}]`, ReadLimits{MaxString: 10}},
	}
	for _, c := range limits {
		if _, err := ReadChromeLimits(strings.NewReader(c.in), c.lim); !errors.Is(err, ErrLimit) {
			t.Errorf("ReadChromeLimits(%q, %+v) = %v, want ErrLimit", c.in, c.lim, err)
		}
	}
	boom := errors.New("boom")
	if _, err := ReadChrome(failingReader{boom}); !errors.Is(err, boom) {
		t.Errorf("reader error lost: %v", err)
	}
	if _, err := ReadChrome(io.MultiReader(strings.NewReader(`{"traceEvents":[{"name":"x`), failingReader{boom})); !errors.Is(err, boom) {
		t.Errorf("reader error mid-stream lost: %v", err)
	}
}

func TestMicrosExact(t *testing.T) {
	cases := map[int64]string{
		0: "0", 1: "0.001", 999: "0.999", 1000: "1", 1500: "1.5", 1230: "1.23", -1: "-0.001", -1500: "-1.5",
		math.MaxInt64: "9223372036854775.807", math.MinInt64: "-9223372036854775.808",
	}
	for ns, want := range cases {
		if got := string(appendMicros(nil, ns)); got != want {
			t.Errorf("appendMicros(%d) = %q, want %q", ns, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ns := int64(rng.Uint64())
		if rng.IntN(2) == 0 {
			ns >>= rng.IntN(63)
		}
		text := appendMicros(nil, ns)
		if got, ok := decimalToFixed(text, 3); !ok || got != ns {
			t.Fatalf("%d → %s → %d", ns, text, got)
		}
	}
}

func TestDecimalToFixed(t *testing.T) {
	cases := []struct {
		in    string
		scale int
		want  int64
	}{
		{"0", 0, 0}, {"-0", 3, 0}, {"12", 0, 12}, {"12.9", 0, 12}, {"-12.9", 0, -12}, {"0.0019", 3, 1},
		{"1e3", 0, 1000}, {"1.5E+2", 3, 150000}, {"25e-1", 0, 2}, {"1e-400", 3, 0}, {"1e400", 0, math.MaxInt64},
		{"-1e400", 0, math.MinInt64}, {"9223372036854775807", 0, math.MaxInt64}, {"9223372036854775808", 0, math.MaxInt64},
		{"-9223372036854775808", 0, math.MinInt64}, {"1764633600123456.789", 3, 1764633600123456789},
		{"0.000000000000000000000000000000000001e40", 0, 10000}, {"100000000000000000000e-20", 0, 1},
	}
	for _, c := range cases {
		if got, ok := decimalToFixed([]byte(c.in), c.scale); !ok || got != c.want {
			t.Errorf("decimalToFixed(%s, %d) = %d, want %d", c.in, c.scale, got, c.want)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\x00\x1f\x7f", "é🙂", "a\xffb", "\u2028", "</script>"} {
		enc := appendString(nil, s)
		var back string
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("appendString(%q) = %s: %v", s, enc, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if back != want {
			t.Errorf("appendString(%q) decodes to %q", s, back)
		}
	}
}

type errWriter struct{ n int }

func (w *errWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestWriteChromeError(t *testing.T) {
	tr := &Trace{Spans: make([]Span, 10000)}
	if err := WriteChrome(&errWriter{n: 100000}, tr); err == nil {
		t.Fatal("write error not reported")
	}
}
