package auth

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"
)

// Key is the cluster key: every node of a cluster holds the same one.
type Key [32]byte

// ErrInvalidKey is matched (errors.Is) by every error ParseKey returns.
var ErrInvalidKey = errors.New("invalid cluster key")

// fingerprintPrefix separates the fingerprint hash from any other use of
// the key.
const fingerprintPrefix = "orrery/cluster-key-fingerprint/v1"

// GenerateKey returns a new random key.
func GenerateKey() Key {
	var k Key
	rand.Read(k[:]) // never fails: crypto/rand crashes the program instead
	return k
}

// parseError carries a precise message while matching ErrInvalidKey.
type parseError struct{ msg string }

func (e *parseError) Error() string        { return "cluster key: " + e.msg }
func (e *parseError) Is(target error) bool { return target == ErrInvalidKey }

// ParseKey parses 64 hex characters (either case), ignoring surrounding
// whitespace such as the newline at the end of a key file.
func ParseKey(s string) (Key, error) {
	var k Key
	s = strings.TrimSpace(s)
	if n := utf8.RuneCountInString(s); n != 2*len(k) {
		return k, &parseError{fmt.Sprintf("want %d hex characters, got %d", 2*len(k), n)}
	}
	for i, r := range s {
		if !isHex(r) {
			return k, &parseError{fmt.Sprintf("invalid character %q at position %d: want 0-9, a-f", r, i+1)}
		}
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, &parseError{err.Error()} // unreachable after the checks above
	}
	return k, nil
}

func isHex(r rune) bool {
	return '0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F'
}

// String returns the key as 64 lowercase hex characters: it is the secret
// itself, so only print it where the user asked for it.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// LogValue makes slog print the fingerprint, so that logging a Key by
// mistake does not leak it.
func (k Key) LogValue() slog.Value { return slog.StringValue("fingerprint:" + k.Fingerprint()) }

// Fingerprint returns 16 hex characters that identify the key without
// revealing it, safe to publish (mDNS TXT records, logs).
func (k Key) Fingerprint() string {
	h := sha256.New()
	h.Write([]byte(fingerprintPrefix))
	h.Write(k[:])
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Derive returns a 32-byte secret for purpose info, derived from the key
// with HKDF: what a node hands a child process (a runner's direct rank
// links) instead of the key itself. Every node with the key derives the
// same secret; the secret does not reveal the key.
func (k Key) Derive(info string) []byte {
	b, err := hkdf.Key(sha256.New, k[:], nil, "orrery/derive/"+info, 32)
	if err != nil {
		panic(err) // only for lengths HKDF cannot give; 32 bytes of SHA-256 it can
	}
	return b
}
