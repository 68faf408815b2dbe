package agent

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// The API's token: requests from beyond this machine need it (see
// api.RequireToken). An agent whose API listens only on loopback needs
// none unless given one; one listening beyond it uses --api-token (or
// $ORRERY_API_TOKEN), else the token in <data-dir>/api-token, made at its
// first start.

// EnvAPIToken is the environment variable of the API token.
const EnvAPIToken = "ORRERY_API_TOKEN"

// APITokenFile is the token's file in the data dir (mode 0600).
const APITokenFile = "api-token"

// minTokenLen bounds a token given by hand from below: the guard delays
// wrong guesses, but a short token is still a weak one.
const minTokenLen = 16

// apiToken is the token the API asks for ("" none), and whether it was made
// now (then it is shown once).
func apiToken(cfg Config) (token string, made bool, err error) {
	t := cfg.APIToken
	if t == "" {
		t = cfg.Getenv(EnvAPIToken)
	}
	if t != "" {
		if err := checkToken(t); err != nil {
			return "", false, fmt.Errorf("API token (--api-token or $%s): %w", EnvAPIToken, err)
		}
		return t, false, nil
	}
	if loopbackAddr(cfg.APIAddr) {
		return "", false, nil
	}
	path := filepath.Join(cfg.DataDir, APITokenFile)
	if t, err := readToken(path); err == nil {
		return t, false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	var b [32]byte
	rand.Read(b[:])
	t = base64.RawURLEncoding.EncodeToString(b[:])
	// Never replace: an agent started at the same moment keeps one token.
	if err := atomicfile.Create(path, []byte(t+"\n"), 0o600); errors.Is(err, fs.ErrExist) {
		t, err = readToken(path)
		return t, false, err
	} else if err != nil {
		return "", false, fmt.Errorf("API token: %w", err)
	}
	return t, true, nil
}

// readToken reads a token file that only its owner can read.
func readToken(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("API token: %s is readable by others (mode %v): chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("API token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if err := checkToken(t); err != nil {
		return "", fmt.Errorf("API token in %s: %w", path, err)
	}
	return t, nil
}

func checkToken(t string) error {
	if len(t) < minTokenLen || len(t) > 512 {
		return fmt.Errorf("%d characters, want %d..512", len(t), minTokenLen)
	}
	for _, c := range t {
		if c <= ' ' || c > '~' {
			return errors.New("only printable ASCII, no spaces")
		}
	}
	return nil
}

// loopbackAddr reports whether a listen address is on loopback only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// APIToken is the token the API asks of other machines ("" when it
// listens on loopback only and was given none); made says it was made at
// this start, in path, and has not been shown yet.
func (a *Agent) APIToken() (token string, made bool, path string) {
	return a.apiToken, a.tokenMade, filepath.Join(a.cfg.DataDir, APITokenFile)
}

// loopbackOf is where a process of this machine reaches a listener: its
// address, or 127.0.0.1 at its port when it listens on every address.
func loopbackOf(addr net.Addr) string {
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(ta.Port))
	}
	return addr.String()
}
