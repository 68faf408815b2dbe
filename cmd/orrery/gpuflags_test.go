package main

import (
	"strings"
	"testing"
)

func TestMemSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		str  string
	}{
		{"512", 512 << 20, "512MiB"},
		{"512MiB", 512 << 20, "512MiB"},
		{"6GiB", 6 << 30, "6GiB"},
		{"6GB", 6 << 30, "6GiB"},
		{"1.5GiB", 3 << 29, "1536MiB"},
		{"2 GiB", 2 << 30, "2GiB"},
		{"1TiB", 1 << 40, "1024GiB"},
		{"1024KiB", 1 << 20, "1MiB"},
	} {
		var m memSize
		if err := m.Set(c.in); err != nil || uint64(m) != c.want || m.String() != c.str {
			t.Errorf("Set(%q): %d (%s), %v; want %d (%s)", c.in, uint64(m), m.String(), err, c.want, c.str)
		}
	}
	for _, c := range []struct{ in, err string }{
		{"", "want a size"},
		{"GiB", "want a size"},
		{"6 apples", `unit "apples"`},
		{"-1GiB", `unit "-1GiB"`},
		{"1.2.3GiB", "want a size"},
		{"0", "1MiB to 1024TiB"},
		{"100KiB", "1MiB to 1024TiB"},
		{"2048TiB", "1MiB to 1024TiB"},
		{"1e400", `unit "e400"`},
	} {
		var m memSize
		if err := m.Set(c.in); err == nil || !strings.Contains(err.Error(), c.err) || m != 0 {
			t.Errorf("Set(%q): %d, %v; want an error saying %q and no value", c.in, uint64(m), err, c.err)
		}
	}
}

// Any input either sets a size within the bounds or leaves the value
// alone with an error.
func FuzzMemSize(f *testing.F) {
	for _, s := range []string{"512", "6GiB", "1.5 GB", "0", "x", "99999999999999999999TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m := memSize(7)
		err := m.Set(s)
		switch {
		case err != nil && m != 7:
			t.Fatalf("Set(%q) failed (%v) but changed the value to %d", s, err, uint64(m))
		case err == nil && (m < 1<<20 || m > maxMemSize):
			t.Fatalf("Set(%q) = %d, outside 1MiB..1024TiB", s, uint64(m))
		}
	})
}
