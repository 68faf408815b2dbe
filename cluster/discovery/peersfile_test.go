package discovery

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPeersFile(t *testing.T) {
	dir := t.TempDir()
	if got, err := LoadPeers(dir); err != nil || got != nil {
		t.Fatalf("no file: %v %v, want nothing", got, err)
	}
	want := []string{"10.0.0.2:52400", "[fd00::2]:52400"}
	if err := SavePeers(dir, want); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadPeers(dir); err != nil || !slices.Equal(got, want) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	st, err := os.Stat(filepath.Join(dir, PeersFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v %v, want 0600", st.Mode().Perm(), err)
	}
	os.WriteFile(filepath.Join(dir, PeersFile), []byte("# c\n\n  a:1  # x\nnoport\n"), 0o600)
	if _, err := LoadPeers(dir); err == nil || !strings.Contains(err.Error(), ":4:") || !strings.Contains(err.Error(), `"noport"`) {
		t.Errorf("a malformed line: %v, want an error naming line 4", err)
	}
}
