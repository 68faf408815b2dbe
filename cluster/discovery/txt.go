package discovery

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// Limits on what a peer may advertise. TXT strings are capped at 255 bytes
// by DNS itself; the field count bounds the work a hostile responder can
// cause per entry.
const (
	MaxTXTFields   = 16
	MaxTXTFieldLen = 255
	MaxNodeIDLen   = 64
	MaxVersionLen  = 64
	KeyFPLen       = 16 // hex characters of the cluster-key fingerprint
)

// TXT is what an agent advertises in its mDNS TXT record.
type TXT struct {
	NodeID  string
	Port    int    // peer (TLS) port
	Version string // may be empty
	KeyFP   string // KeyFPLen lower-case hex characters
}

// ParseTXT parses and validates TXT fields ("key=value"). Keys are matched
// exactly. Unknown keys, including RFC 6763 §6.4 boolean attributes, are
// ignored so that later versions can add fields; id, port, v and kfp must
// each appear exactly once, with a value. The fingerprint comes back
// lower-case.
func ParseTXT(fields []string) (TXT, error) {
	if len(fields) > MaxTXTFields {
		return TXT{}, fmt.Errorf("txt: %d fields, at most %d", len(fields), MaxTXTFields)
	}
	var t TXT
	seen := map[string]bool{}
	for i, f := range fields {
		if len(f) > MaxTXTFieldLen {
			return TXT{}, fmt.Errorf("txt: field %d is %d bytes, at most %d", i, len(f), MaxTXTFieldLen)
		}
		k, v, ok := strings.Cut(f, "=")
		switch k {
		case "id", "port", "v", "kfp":
		default:
			continue
		}
		if !ok {
			return TXT{}, fmt.Errorf("txt: field %q has no value", k)
		}
		if seen[k] {
			return TXT{}, fmt.Errorf("txt: field %q appears twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "id":
			err = ident.ValidNodeID(v)
			t.NodeID = v
		case "port":
			t.Port, err = parsePort(v)
		case "v":
			err = validVersion(v)
			t.Version = v
		case "kfp":
			t.KeyFP, err = parseKeyFP(v)
		}
		if err != nil {
			return TXT{}, fmt.Errorf("txt: %w", err)
		}
	}
	for _, k := range []string{"id", "port", "v", "kfp"} {
		if !seen[k] {
			return TXT{}, fmt.Errorf("txt: field %q missing", k)
		}
	}
	return t, nil
}

// Fields returns the TXT fields in the order agents advertise them.
func (t TXT) Fields() []string {
	return []string{
		"id=" + t.NodeID,
		"port=" + strconv.Itoa(t.Port),
		"v=" + t.Version,
		"kfp=" + t.KeyFP,
	}
}

func validVersion(v string) error {
	if len(v) > MaxVersionLen {
		return fmt.Errorf("version is %d bytes, at most %d", len(v), MaxVersionLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return fmt.Errorf("version %q: byte %d is not printable ASCII", v, i)
		}
	}
	return nil
}

// parsePort accepts only canonical decimal (no sign, no leading zero), so
// that what is parsed prints back the same.
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, fmt.Errorf("port %q: want 1..65535", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("port %q: want 1..65535", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > 65535 {
		return 0, fmt.Errorf("port %q: want 1..65535", s)
	}
	return n, nil
}

var errKeyFP = errors.New("want 16 hex characters")

// parseKeyFP validates a fingerprint and lower-cases it, so that two agents
// printing the same key differently still compare equal.
func parseKeyFP(s string) (string, error) {
	if len(s) != KeyFPLen {
		return "", fmt.Errorf("key fingerprint %q: %w", s, errKeyFP)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return "", fmt.Errorf("key fingerprint %q: %w", s, errKeyFP)
		}
	}
	return strings.ToLower(s), nil
}
