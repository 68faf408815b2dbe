package auth

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseKey checks that ParseKey fails cleanly with ErrInvalidKey and
// that whatever it accepts survives a String → ParseKey round trip.
func FuzzParseKey(f *testing.F) {
	f.Add(seqKey().String())
	f.Add(strings.ToUpper(seqKey().String()) + "\n")
	f.Add("0123456789ab")
	f.Add("")
	f.Add(strings.Repeat("é", 64))
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseKey(%q): error %v does not match ErrInvalidKey", s, err)
			}
			return
		}
		out := k.String()
		if !strings.EqualFold(out, strings.TrimSpace(s)) {
			t.Fatalf("ParseKey(%q).String() = %q", s, out)
		}
		back, err := ParseKey(out)
		if err != nil {
			t.Fatalf("ParseKey(%q) (from %q): %v", out, s, err)
		}
		if back != k {
			t.Fatalf("round trip of %q: %s became %s", s, k, back)
		}
	})
}
