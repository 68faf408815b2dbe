package tracestore

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/engine/trace/tracetest"
)

// View loads a trace once, reloads it when its file changes, and drops a
// malformed one with an error naming it (the next View tries again).
func TestView(t *testing.T) {
	now := time.Now()
	s := open(t, t.TempDir(), &now, 0)
	save := func(spans int) {
		t.Helper()
		tr := tracetest.Pipeline(tracetest.PipelineConfig{Spans: spans, Ranks: 2})
		if _, err := s.Save(Meta{TaskID: "a", CreatedAt: now}, func(w io.Writer) error { return trace.WriteChrome(w, tr) }); err != nil {
			t.Fatal(err)
		}
	}
	save(100)
	x, err := s.View("a")
	if err != nil {
		t.Fatal(err)
	}
	if x2, _ := s.View("a"); x2 != x {
		t.Error("a second View loaded the trace again")
	}
	n := x.Window(0, 0, 100).Spans
	save(400)
	x3, err := s.View("a")
	if err != nil || x3 == x || x3.Window(0, 0, 100).Spans <= n {
		t.Fatalf("after the file changed: %v, spans %d (were %d)", err, x3.Window(0, 0, 100).Spans, n)
	}
	if _, err := s.Save(Meta{TaskID: "bad", CreatedAt: now}, func(w io.Writer) error { _, err := io.WriteString(w, "{]"); return err }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.View("bad"); err == nil || !strings.Contains(err.Error(), "load trace bad") {
		t.Fatalf("View of a malformed file: %v", err)
	}
	s.views.mu.Lock()
	for _, v := range s.views.entries {
		if v.id == "bad" {
			t.Error("the failed load stays cached")
		}
	}
	s.views.mu.Unlock()
	if _, err := s.View("nope"); err == nil {
		t.Error("View of a missing trace")
	}
	if err := s.Delete("a"); err != nil {
		t.Fatal(err)
	}
	s.views.mu.Lock()
	held := len(s.views.entries)
	s.views.mu.Unlock()
	if _, err := s.Load("a"); err == nil || held != 0 {
		t.Errorf("after Delete: Load %v, %d traces still held", err, held)
	}
}
