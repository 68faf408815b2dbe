package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// FuzzReadChrome checks that ReadChrome never panics and that whatever it
// loads survives WriteChrome → ReadChrome unchanged, as valid JSON, with the
// second export byte-for-byte equal to the first.
func FuzzReadChrome(f *testing.F) {
	var golden bytes.Buffer
	if err := WriteChrome(&golden, sampleTrace()); err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		golden.String(),
		exoTrace,
		`[{"name":"a","ph":"X","ts":1,"dur":2}]`,
		`[{"name":"a","ts":"12.5"},{"ph":"C","name":"m","args":{"value":1,"x":2}}`,
		`{"traceEvents":[{"ph":"s","id":"0x1f","tid":3},{"ph":"f","bp":"e","id":"k","args":{"rank":2,"lane":"io"}}],"otherData":{"taskId":"t","createdAt":"2026-12-02T10:00:00Z","missingRanks":[1]}}`,
		`[{"name":"\ud83d\ude42\u00e9\ud800","cat":null,"ts":1e300,"dur":-1.5e-3,"args":{"rank":true,"bytes":"7","flowOut":3}}]`,
		`[{"name":"process_name","ph":"M","pid":2,"args":{"name":"Mac","nodeId":""}},{"pid":2,"tid":9}]`,
	} {
		f.Add([]byte(seed))
	}
	lim := ReadLimits{MaxEvents: 10000, MaxDepth: 32, MaxString: 1 << 16}
	f.Fuzz(func(t *testing.T, data []byte) {
		first, err := ReadChromeLimits(bytes.NewReader(data), lim)
		// Read by two goroutines (forced, however small the input), or
		// without the fast path, the result and the error are those of a
		// sequential read by the general reader.
		general, _, generalErr := readChrome(bytes.NewReader(data), lim, readOptions{splitMin: -1, noFast: true})
		for _, opt := range []readOptions{{splitMin: 0}, {splitMin: -1}, {splitMin: 0, noFast: true}} {
			got, _, gotErr := readChrome(bytes.NewReader(data), lim, opt)
			if fmt.Sprint(gotErr) != fmt.Sprint(generalErr) || !reflect.DeepEqual(got, general) {
				t.Fatalf("read %+v: %v\n%+v\ngeneral reader: %v\n%+v", opt, gotErr, got, generalErr, general)
			}
		}
		if err != nil {
			return
		}
		var out1 bytes.Buffer
		if err := WriteChrome(&out1, first); err != nil {
			t.Fatalf("WriteChrome: %v", err)
		}
		if !json.Valid(out1.Bytes()) {
			t.Fatalf("WriteChrome wrote invalid JSON:\n%s", out1.Bytes())
		}
		second, err := ReadChromeLimits(bytes.NewReader(out1.Bytes()), ReadLimits{MaxEvents: 1 << 20, MaxString: 1 << 20})
		if err != nil {
			t.Fatalf("re-reading our own output: %v\n%s", err, out1.Bytes())
		}
		if !reflect.DeepEqual(first.Spans, second.Spans) {
			t.Fatalf("spans changed:\n%+v\n%+v", first.Spans, second.Spans)
		}
		if !reflect.DeepEqual(first.Counters, second.Counters) {
			t.Fatalf("counters changed:\n%+v\n%+v", first.Counters, second.Counters)
		}
		if !reflect.DeepEqual(first.Flows, second.Flows) {
			t.Fatalf("flows changed:\n%+v\n%+v", first.Flows, second.Flows)
		}
		if first.TaskID != second.TaskID || !first.CreatedAt.Equal(second.CreatedAt) ||
			!reflect.DeepEqual(first.MissingRanks, second.MissingRanks) {
			t.Fatalf("header changed: %q %v %v / %q %v %v", first.TaskID, first.CreatedAt, first.MissingRanks,
				second.TaskID, second.CreatedAt, second.MissingRanks)
		}
		var out2 bytes.Buffer
		if err := WriteChrome(&out2, second); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out1.Bytes(), out2.Bytes()) {
			t.Fatalf("export not stable:\n%s\n%s", out1.Bytes(), out2.Bytes())
		}
		ComputeStats(first.Spans) // must not panic either
	})
}
