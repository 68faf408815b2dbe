package api

import (
	"encoding/json"
	"testing"
	"time"
)

func TestKeepAliveForms(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{`"5m"`, 5 * time.Minute}, {`"1h30m"`, 90 * time.Minute}, {`"0"`, 0}, {`0`, 0}, {`300`, 300 * time.Second},
		{`"300"`, 300 * time.Second}, {`1.5`, 1500 * time.Millisecond}, {`-1`, -1}, {`"-1"`, -1}, {`"-5m"`, -1}, {`-30`, -1},
	} {
		var k KeepAlive
		if err := json.Unmarshal([]byte(c.in), &k); err != nil || k.D != c.want {
			t.Errorf("%s: %v, %v; want %v", c.in, k.D, err, c.want)
		}
		if c.want < 0 && (!k.Pinned() || k.Ms() != -1 || k.String() != "-1") {
			t.Errorf("%s: not pinned: %v %d %q", c.in, k.Pinned(), k.Ms(), k)
		}
	}
	for _, bad := range []string{`"soon"`, `true`, `{}`, `1e300`, `"1e300"`, `""`} {
		var k KeepAlive
		if err := json.Unmarshal([]byte(bad), &k); err == nil {
			t.Errorf("%s: accepted as %v", bad, k.D)
		}
	}
	b, _ := json.Marshal(KeepAlive{D: 90 * time.Second})
	var back KeepAlive
	if err := json.Unmarshal(b, &back); err != nil || back.D != 90*time.Second {
		t.Errorf("round trip of %s: %v %v", b, back.D, err)
	}
}

func FuzzKeepAlive(f *testing.F) {
	for _, s := range []string{`"5m"`, `-1`, `300`, `"0"`, `"1h"`, `1e9`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var k KeepAlive
		if json.Unmarshal([]byte(s), &k) != nil {
			return
		}
		if k.D < -1 || k.Pinned() != (k.Ms() == -1) {
			t.Fatalf("%q: %v", s, k.D)
		}
	})
}
