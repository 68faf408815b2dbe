package ident

import (
	"errors"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	good := []string{"a", "node-1", "A_b-9", strings.Repeat("x", MaxLen)}
	bad := []string{"", "../etc", "a/b", "a b", "é", "a.b", strings.Repeat("x", MaxLen+1), "%2e%2e"}
	for _, id := range good {
		for _, err := range []error{ValidNodeID(id), ValidTraceID(id), ValidInstanceID(id)} {
			if err != nil {
				t.Errorf("%q: %v", id, err)
			}
		}
	}
	for _, id := range bad {
		for _, err := range []error{ValidNodeID(id), ValidTraceID(id), ValidInstanceID(id)} {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%q: got %v, want ErrInvalid", id, err)
			}
		}
	}
	if err := TraceID("a/b").Valid(); err == nil || !strings.Contains(err.Error(), "trace id") {
		t.Errorf("error should name the kind of id: %v", err)
	}
}

func FuzzValid(f *testing.F) {
	f.Add("node-1")
	f.Add("../x")
	f.Fuzz(func(t *testing.T, id string) {
		if ValidTraceID(id) != nil {
			return
		}
		if strings.ContainsAny(id, "/\\.%: ") || len(id) == 0 || len(id) > MaxLen {
			t.Fatalf("accepted %q", id)
		}
	})
}
