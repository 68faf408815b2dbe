package tracestore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func open(t *testing.T, dir string, now *time.Time, maxBytes int64) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, MaxBytes: maxBytes, MaxAge: 24 * time.Hour, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func body(n int) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, `{"traceEvents":[`+strings.Repeat(" ", n)+`]}`)
		return err
	}
}

func TestSaveListOpenDelete(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s := open(t, dir, &now, 0)
	for i, id := range []string{"t1", "t2", "t3"} {
		now = now.Add(time.Minute)
		m, err := s.Save(Meta{TaskID: id, Kind: "ring-bench", Spans: i}, body(10))
		if err != nil {
			t.Fatal(err)
		}
		if m.FileSize != int64(len(`{"traceEvents":[]}`)+10) || !m.CreatedAt.Equal(now) {
			t.Errorf("meta = %+v", m)
		}
	}
	list := s.List()
	if len(list) != 3 || list[0].TaskID != "t3" || list[2].TaskID != "t1" {
		t.Fatalf("list (want newest first) = %+v", list)
	}
	f, m, err := s.OpenTrace("t2")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if int64(len(b)) != m.FileSize || !strings.HasPrefix(string(b), `{"traceEvents"`) {
		t.Errorf("t2 content %q", b)
	}
	if err := s.Delete("t2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("t2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted trace: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "t2.json")); !os.IsNotExist(err) {
		t.Error("deleted trace's file is still there")
	}
	if err := s.Delete("t2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	// A reopened store lists the same traces, from its index.
	s2 := open(t, dir, &now, 0)
	if got := s2.List(); len(got) != 2 || got[0].Kind != "ring-bench" {
		t.Errorf("after reopen: %+v", got)
	}
}

func TestIDsNeverEscape(t *testing.T) {
	now := time.Now()
	s := open(t, t.TempDir(), &now, 0)
	for _, id := range []string{"", "..", "../x", "..%2Fx", "/etc/passwd", "a/b", `a\b`, "a.json", "é", "a\u200bb", "x\x00", strings.Repeat("a", 65)} {
		if _, err := s.Get(id); !errors.Is(err, ErrBadID) {
			t.Errorf("Get(%q): %v, want ErrBadID", id, err)
		}
		if _, err := s.Save(Meta{TaskID: id}, body(1)); !errors.Is(err, ErrBadID) {
			t.Errorf("Save(%q): %v, want ErrBadID", id, err)
		}
		if err := s.Delete(id); !errors.Is(err, ErrBadID) {
			t.Errorf("Delete(%q): %v, want ErrBadID", id, err)
		}
	}
}

func TestFailedWriteLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	s := open(t, dir, &now, 0)
	_, err := s.Save(Meta{TaskID: "half"}, func(w io.Writer) error {
		io.WriteString(w, `{"traceEvents":[{"ph":"X"`)
		return errors.New("rank died")
	})
	if err == nil || !strings.Contains(err.Error(), "rank died") {
		t.Fatalf("Save error = %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != indexFile {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	if len(s.List()) != 0 {
		t.Error("a failed trace is listed")
	}
}

// A writer process killed mid-write leaves only a temp file, which no
// listing shows and the next Open removes.
func TestKilledWriterLeavesNoVisibleFile(t *testing.T) {
	if os.Getenv("TRACESTORE_CHILD_DIR") != "" {
		s, err := Open(Config{Dir: os.Getenv("TRACESTORE_CHILD_DIR")})
		if err != nil {
			os.Exit(3)
		}
		s.Save(Meta{TaskID: "killed"}, func(w io.Writer) error {
			io.WriteString(w, `{"traceEvents":[`)
			fmt.Println("writing")
			time.Sleep(time.Minute) // killed here
			return nil
		})
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriterLeavesNoVisibleFile$")
	cmd.Env = append(os.Environ(), "TRACESTORE_CHILD_DIR="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "writing" {
		t.Fatalf("child: %q %v", buf, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	tmps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	if len(tmps) != 1 {
		t.Fatalf("want the child's temp file, found %v", tmps)
	}
	now := time.Now()
	s := open(t, dir, &now, 0)
	if len(s.List()) != 0 {
		t.Errorf("a half-written trace is listed: %+v", s.List())
	}
	if _, err := os.Stat(filepath.Join(dir, "killed.json")); !os.IsNotExist(err) {
		t.Error("a killed writer left a visible trace file")
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(tmps) != 0 {
		t.Errorf("Open did not clean up %v", tmps)
	}
}

func TestRetentionBySizeAndAge(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s := open(t, dir, &now, 100) // each trace is 18+30 = 48 bytes
	for _, id := range []string{"a", "b", "c"} {
		now = now.Add(time.Minute)
		if _, err := s.Save(Meta{TaskID: id}, body(30)); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() (out []string) {
		for _, m := range s.List() {
			out = append(out, m.TaskID)
		}
		return out
	}
	if got := ids(); strings.Join(got, ",") != "c,b" || s.TotalBytes() != 96 {
		t.Errorf("after size cap: %v (%d bytes), want c,b", got, s.TotalBytes())
	}
	if _, err := os.Stat(filepath.Join(dir, "a.json")); !os.IsNotExist(err) {
		t.Error("the oldest trace's file survived the size cap")
	}
	// A day later, both are too old; the next save sweeps them.
	now = now.Add(25 * time.Hour)
	s.Save(Meta{TaskID: "d"}, body(1))
	if got := ids(); strings.Join(got, ",") != "d" {
		t.Errorf("after age cap: %v, want d", got)
	}
	// One trace larger than the cap is still kept: the newest always is.
	s.Save(Meta{TaskID: "huge"}, body(500))
	if got := ids(); strings.Join(got, ",") != "huge" {
		t.Errorf("after a huge trace: %v, want huge only", got)
	}
}

func TestIndexRebuiltFromFiles(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	s := open(t, dir, &now, 0)
	s.Save(Meta{TaskID: "keep", Spans: 5}, body(1))
	s.Save(Meta{TaskID: "gone"}, body(1))
	os.Remove(filepath.Join(dir, "gone.json"))                            // file lost behind the index's back
	os.WriteFile(filepath.Join(dir, "stray.json"), []byte(`{}`), 0o600)   // file without an entry
	os.WriteFile(filepath.Join(dir, "bad id!.json"), []byte(`{}`), 0o600) // never listed
	s2 := open(t, dir, &now, 0)
	var ids []string
	for _, m := range s2.List() {
		ids = append(ids, m.TaskID)
	}
	if strings.Join(ids, ",") != "keep,stray" && strings.Join(ids, ",") != "stray,keep" {
		t.Errorf("after reconcile: %v", ids)
	}
	// A corrupt index is rebuilt from the files.
	os.WriteFile(filepath.Join(dir, indexFile), []byte("{garbage"), 0o600)
	s3 := open(t, dir, &now, 0)
	if len(s3.List()) != 2 {
		t.Errorf("after a corrupt index: %+v", s3.List())
	}
}
