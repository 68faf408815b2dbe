package discovery

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// PeersFile, in the data dir, lists static peers (host:port, one a line;
// # comments) that the agent dials at start beside its --peer flags:
// `orrery join` writes the addresses of an invite there.
const PeersFile = "peers"

// maxPeersFile bounds what LoadPeers reads.
const maxPeersFile = 64 << 10

// LoadPeers reads dataDir's peers file: nil when there is none, an error
// naming the line of a malformed one.
func LoadPeers(dataDir string) ([]string, error) {
	path := filepath.Join(dataDir, PeersFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxPeersFile {
		return nil, fmt.Errorf("%s: %d bytes, at most %d", path, st.Size(), maxPeersFile)
	}
	var out []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(line); err != nil {
			return nil, fmt.Errorf("%s:%d: %q is not host:port: %v", path, n, line, err)
		}
		out = append(out, line)
	}
	return out, sc.Err()
}

// SavePeers writes addrs as dataDir's peers file, atomically.
func SavePeers(dataDir string, addrs []string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	body := "# Static peers (host:port), dialed at start beside --peer; written by orrery join.\n" + strings.Join(addrs, "\n") + "\n"
	return atomicfile.Write(filepath.Join(dataDir, PeersFile), []byte(body), 0o600)
}
