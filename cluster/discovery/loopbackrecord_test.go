package discovery

import (
	"strings"
	"testing"
)

func TestParseLoopbackRecord(t *testing.T) {
	got, err := ParseLoopbackRecord([]byte(`{"nodeId":"a","port":7001,"version":"1.0","keyFp":"0123456789ABCDEF","pid":42,"future":true}`))
	want := LoopbackRecord{NodeID: "a", Port: 7001, Version: "1.0", KeyFP: "0123456789abcdef", PID: 42}
	if err != nil || got != want {
		t.Fatalf("ParseLoopbackRecord = %+v, %v; want %+v", got, err, want)
	}
	data, err := got.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(data); s != `{"nodeId":"a","port":7001,"version":"1.0","keyFp":"0123456789abcdef","pid":42}` {
		t.Fatalf("Marshal = %s", s)
	}

	for _, tc := range []struct{ name, in, wantErr string }{
		{"not json", `nope`, "invalid character"},
		{"trailing data", `{"nodeId":"a","port":1,"keyFp":"0123456789abcdef","pid":1} x`, "invalid character"},
		{"missing node id", `{"port":1,"keyFp":"0123456789abcdef","pid":1}`, "empty node id"},
		{"bad node id", `{"nodeId":"../x","port":1,"keyFp":"0123456789abcdef","pid":1}`, "not [A-Za-z0-9_-]"},
		{"port 0", `{"nodeId":"a","port":0,"keyFp":"0123456789abcdef","pid":1}`, "want 1..65535"},
		{"port 70000", `{"nodeId":"a","port":70000,"keyFp":"0123456789abcdef","pid":1}`, "want 1..65535"},
		{"fractional port", `{"nodeId":"a","port":1.5,"keyFp":"0123456789abcdef","pid":1}`, "cannot unmarshal"},
		{"bad fingerprint", `{"nodeId":"a","port":1,"keyFp":"xyz","pid":1}`, "16 hex"},
		{"pid 0", `{"nodeId":"a","port":1,"keyFp":"0123456789abcdef","pid":0}`, "pid 0"},
		{"negative pid", `{"nodeId":"a","port":1,"keyFp":"0123456789abcdef","pid":-1}`, "pid -1"},
		{"bad version", `{"nodeId":"a","port":1,"version":"\u0007","keyFp":"0123456789abcdef","pid":1}`, "printable"},
		{"too big", `{"nodeId":"a","version":"` + strings.Repeat(" ", MaxLoopbackRecord) + `"}`, "at most 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseLoopbackRecord([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseLoopbackRecord(%s) = %+v, %v; want an error mentioning %q", tc.in, r, err, tc.wantErr)
			}
		})
	}
}
