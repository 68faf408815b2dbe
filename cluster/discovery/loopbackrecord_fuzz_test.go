package discovery

import "testing"

// FuzzParseLoopbackRecord feeds arbitrary bytes to ParseLoopbackRecord: it
// must fail cleanly or return a record that survives Marshal →
// ParseLoopbackRecord unchanged.
func FuzzParseLoopbackRecord(f *testing.F) {
	f.Add([]byte(`{"nodeId":"a","port":7001,"version":"1.0","keyFp":"0123456789abcdef","pid":42}`))
	f.Add([]byte(`{"nodeId":"A_b-9","port":65535,"version":"","keyFp":"FFFFFFFFFFFFFFFF","pid":2147483647,"x":[1,{}]}`))
	f.Add([]byte(`{"nodeId":"a","nodeId":"b","port":1,"keyFp":"0123456789abcdef","pid":1}`))
	f.Add([]byte(`{"version":"<&>\u00e9"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := ParseLoopbackRecord(data)
		if err != nil {
			return
		}
		out, err := rec.Marshal()
		if err != nil {
			t.Fatalf("Marshal of parsed %+v: %v", rec, err)
		}
		if len(out) > MaxLoopbackRecord {
			t.Fatalf("Marshal gave %d bytes", len(out))
		}
		back, err := ParseLoopbackRecord(out)
		if err != nil {
			t.Fatalf("ParseLoopbackRecord(%s) of a marshalled record: %v", out, err)
		}
		if back != rec {
			t.Fatalf("round trip changed %+v into %+v", rec, back)
		}
	})
}
