package discovery

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzParseTXT feeds arbitrary TXT fields (newline-separated in the fuzz
// input) to ParseTXT: it must fail cleanly or return a record that
// survives Fields → ParseTXT unchanged and within the limits.
func FuzzParseTXT(f *testing.F) {
	f.Add("id=node-1\nport=7000\nv=0.1.0\nkfp=0123456789abcdef")
	f.Add("kfp=0123456789ABCDEF\nv=\nport=65535\nid=a\nextra=1\nflag")
	f.Add("id=a\nid=b\nport=1\nv=x\nkfp=0123456789abcdef")
	f.Add("id=" + strings.Repeat("z", 64) + "\nport=1\nv=" + strings.Repeat("~", 64) + "\nkfp=ffffffffffffffff")
	f.Add("")
	f.Fuzz(func(t *testing.T, in string) {
		txt, err := ParseTXT(strings.Split(in, "\n"))
		if err != nil {
			return
		}
		fields := txt.Fields()
		if len(fields) > MaxTXTFields {
			t.Fatalf("Fields() has %d fields", len(fields))
		}
		for _, f := range fields {
			if len(f) > MaxTXTFieldLen {
				t.Fatalf("Fields() has a %d-byte field", len(f))
			}
		}
		back, err := ParseTXT(fields)
		if err != nil {
			t.Fatalf("ParseTXT(%q) of a parsed record: %v", fields, err)
		}
		if back != txt {
			t.Fatalf("round trip changed %+v into %+v", txt, back)
		}
		if again := back.Fields(); !reflect.DeepEqual(again, fields) {
			t.Fatalf("Fields() not stable: %q then %q", fields, again)
		}
	})
}
