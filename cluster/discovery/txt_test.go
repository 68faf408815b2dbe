package discovery

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTXT(t *testing.T) {
	valid := []string{"id=node-1", "port=7000", "v=0.1.0", "kfp=0123456789abcdef"}
	with := func(extra ...string) []string { return append(append([]string{}, valid...), extra...) }
	replace := func(i int, f string) []string { s := with(); s[i] = f; return s }
	want := TXT{NodeID: "node-1", Port: 7000, Version: "0.1.0", KeyFP: "0123456789abcdef"}

	ok := []struct {
		name   string
		fields []string
		want   TXT
	}{
		{"canonical", valid, want},
		{"other order", []string{"kfp=0123456789abcdef", "v=0.1.0", "port=7000", "id=node-1"}, want},
		{"upper-case fingerprint is lowered", replace(3, "kfp=0123456789ABCDEF"), want},
		{"unknown keys and boolean attributes ignored", with("future=1", "flag", "=x"), want},
		{"empty version", replace(2, "v="), TXT{NodeID: "node-1", Port: 7000, KeyFP: "0123456789abcdef"}},
		{"version with '=' and spaces", replace(2, "v=a=b c"), TXT{NodeID: "node-1", Port: 7000, Version: "a=b c", KeyFP: "0123456789abcdef"}},
		{"64-byte node id", replace(0, "id="+strings.Repeat("a", 64)), TXT{NodeID: strings.Repeat("a", 64), Port: 7000, Version: "0.1.0", KeyFP: "0123456789abcdef"}},
		{"port bounds", replace(1, "port=65535"), TXT{NodeID: "node-1", Port: 65535, Version: "0.1.0", KeyFP: "0123456789abcdef"}},
		{"16 fields", with("a=1", "b=2", "c=3", "d=4", "e=5", "f=6", "g=7", "h=8", "i=9", "j=10", "k=11", "l=12"), want},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTXT(tc.fields)
			if err != nil {
				t.Fatalf("ParseTXT(%q): %v", tc.fields, err)
			}
			if got != tc.want {
				t.Fatalf("ParseTXT(%q) = %+v, want %+v", tc.fields, got, tc.want)
			}
		})
	}

	bad := []struct {
		name, wantErr string
		fields        []string
	}{
		{"nil", `"id" missing`, nil},
		{"missing id", `"id" missing`, valid[1:]},
		{"missing port", `"port" missing`, []string{valid[0], valid[2], valid[3]}},
		{"missing v", `"v" missing`, []string{valid[0], valid[1], valid[3]}},
		{"missing kfp", `"kfp" missing`, valid[:3]},
		{"id without value", `no value`, replace(0, "id")},
		{"duplicate", "twice", with("port=7001")},
		{"17 fields", "17 fields", with("a=1", "b=2", "c=3", "d=4", "e=5", "f=6", "g=7", "h=8", "i=9", "j=10", "k=11", "l=12", "m=13")},
		{"256-byte field", "256 bytes", with("x=" + strings.Repeat("y", 254))},
		{"empty node id", "empty node id", replace(0, "id=")},
		{"65-byte node id", "node id is 65 bytes", replace(0, "id="+strings.Repeat("a", 65))},
		{"node id with dot", "not [A-Za-z0-9_-]", replace(0, "id=a.b")},
		{"node id with space", "not [A-Za-z0-9_-]", replace(0, "id=a b")},
		{"port 0", "want 1..65535", replace(1, "port=0")},
		{"port 65536", "want 1..65535", replace(1, "port=65536")},
		{"port leading zero", "want 1..65535", replace(1, "port=07000")},
		{"port sign", "want 1..65535", replace(1, "port=+7000")},
		{"port not a number", "want 1..65535", replace(1, "port=http")},
		{"short fingerprint", "16 hex", replace(3, "kfp=0123456789abcde")},
		{"long fingerprint", "16 hex", replace(3, "kfp=0123456789abcdef0")},
		{"non-hex fingerprint", "16 hex", replace(3, "kfp=0123456789abcdeg")},
		{"65-byte version", "at most 64", replace(2, "v="+strings.Repeat("1", 65))},
		{"control byte in version", "printable", replace(2, "v=1\n2")},
		{"non-ASCII version", "printable", replace(2, "v=1.0-é")},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTXT(tc.fields)
			if err == nil {
				t.Fatalf("ParseTXT(%q) = %+v, want an error", tc.fields, got)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseTXT(%q) error %q, want it to mention %q", tc.fields, err, tc.wantErr)
			}
		})
	}
}

func TestTXTFields(t *testing.T) {
	txt := TXT{NodeID: "n", Port: 1, Version: "v1", KeyFP: "00000000000000ff"}
	want := []string{"id=n", "port=1", "v=v1", "kfp=00000000000000ff"}
	if got := txt.Fields(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Fields() = %q, want exactly %q", got, want)
	}
	back, err := ParseTXT(txt.Fields())
	if err != nil || back != txt {
		t.Fatalf("ParseTXT(Fields()) = %+v, %v; want %+v", back, err, txt)
	}
}
