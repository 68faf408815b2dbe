package identity

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/ident"
)

func opts(dir, fingerprint string, logBuf *bytes.Buffer) Options {
	return Options{
		DataDir:      dir,
		AgentVersion: "test",
		Logger:       slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Probe: func() (hostInfo, error) {
			return hostInfo{Fingerprint: fingerprint, FriendlyName: "box", Chip: "TestChip", PerfCores: state.Int(4)}, nil
		},
		RAMTotal: func() (uint64, error) { return 64 << 30, nil },
		Now:      func() time.Time { return time.Unix(1_800_000_000, 0) },
	}
}

func TestIDPersistsAcrossLoads(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	a, err := Load(opts(dir, "machine-A", &logs))
	if err != nil {
		t.Fatal(err)
	}
	if err := ident.ValidNodeID(a.NodeID); err != nil {
		t.Fatalf("minted id %q is invalid: %v", a.NodeID, err)
	}
	b, err := Load(opts(dir, "machine-A", &logs))
	if err != nil {
		t.Fatal(err)
	}
	if a.NodeID != b.NodeID {
		t.Errorf("id changed across loads: %s then %s", a.NodeID, b.NodeID)
	}
	if b.FriendlyName != "box" || b.ChipID != "TestChip" || *b.PerfCores != 4 || b.EffCores != nil || b.RAMTotal.InBytes != 64<<30 {
		t.Errorf("identity fields = %+v", b)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("node.json mode = %v, want 0600", fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(filepath.Join(dir, FileName))
	if bytes.Contains(raw, []byte("machine-A")) {
		t.Error("node.json stores the raw machine fingerprint")
	}
}

// A data dir copied to another machine must not clone the node id (exo #1599).
func TestCopiedDataDirGetsNewID(t *testing.T) {
	dirA := t.TempDir()
	var logs bytes.Buffer
	a, err := Load(opts(dirA, "machine-A", &logs))
	if err != nil {
		t.Fatal(err)
	}
	dirB := t.TempDir()
	raw, _ := os.ReadFile(filepath.Join(dirA, FileName))
	os.WriteFile(filepath.Join(dirB, FileName), raw, 0o600)

	logs.Reset()
	b, err := Load(opts(dirB, "machine-B", &logs))
	if err != nil {
		t.Fatal(err)
	}
	if b.NodeID == a.NodeID {
		t.Fatal("copied data dir kept the other machine's node id")
	}
	if !strings.Contains(logs.String(), "another machine") || !strings.Contains(logs.String(), a.NodeID) {
		t.Errorf("log does not say why the id changed:\n%s", logs.String())
	}
	// The new id sticks on machine B.
	b2, _ := Load(opts(dirB, "machine-B", &logs))
	if b2.NodeID != b.NodeID {
		t.Errorf("re-minted id did not persist: %s then %s", b.NodeID, b2.NodeID)
	}
	// And machine A is unaffected.
	a2, _ := Load(opts(dirA, "machine-A", &logs))
	if a2.NodeID != a.NodeID {
		t.Errorf("machine A's id changed: %s then %s", a.NodeID, a2.NodeID)
	}
}

func TestUnknownFingerprintKeepsID(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	a, _ := Load(opts(dir, "", &logs))
	b, err := Load(opts(dir, "", &logs))
	if err != nil || a.NodeID != b.NodeID {
		t.Fatalf("ids %s, %s, err %v", a.NodeID, b.NodeID, err)
	}
	if !strings.Contains(logs.String(), "fingerprint unknown") {
		t.Errorf("no warning about the unknown fingerprint:\n%s", logs.String())
	}
	// Once the fingerprint becomes known it is adopted, not treated as a copy.
	c, _ := Load(opts(dir, "machine-A", &logs))
	if c.NodeID != a.NodeID {
		t.Errorf("adopting a fingerprint changed the id")
	}
	d, _ := Load(opts(dir, "machine-B", &logs))
	if d.NodeID == a.NodeID {
		t.Errorf("after adoption, a different machine still kept the id")
	}
}

func TestCorruptFileIsKeptAsideAndReplaced(t *testing.T) {
	for name, content := range map[string]string{
		"not json":   "{garbage",
		"bad id":     `{"nodeId":"../../etc","fingerprintHash":""}`,
		"empty file": "",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			os.WriteFile(path, []byte(content), 0o600)
			var logs bytes.Buffer
			id, err := Load(opts(dir, "m", &logs))
			if err != nil {
				t.Fatal(err)
			}
			if ident.ValidNodeID(id.NodeID) != nil {
				t.Fatalf("bad id %q", id.NodeID)
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) != 1 {
				t.Fatalf("corrupt file not kept aside: %v", aside)
			}
			if kept, _ := os.ReadFile(aside[0]); string(kept) != content {
				t.Errorf("kept-aside content = %q", kept)
			}
			if !strings.Contains(logs.String(), "unreadable") {
				t.Errorf("log does not explain:\n%s", logs.String())
			}
		})
	}
}

func TestNewIDIsUniqueAndValid(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewID()
		if err := ident.ValidNodeID(id); err != nil || len(id) != 36 {
			t.Fatalf("id %q: %v", id, err)
		}
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
}

// The real probe on this machine: the fields Linux always has are filled.
func TestProbeHostRealMachine(t *testing.T) {
	h, err := probeHost()
	if err != nil {
		t.Fatal(err)
	}
	if h.FriendlyName == "" {
		t.Error("no friendly name")
	}
	if h.OSName == "" {
		t.Error("no OS name")
	}
}
