package auth

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// seqKey is 00 01 02 … 1f, the key of the known-answer tests.
func seqKey() Key {
	var k Key
	for i := range k {
		k[i] = byte(i)
	}
	return k
}

func TestKeyRoundTrip(t *testing.T) {
	for range 10 {
		k := GenerateKey()
		s := k.String()
		if len(s) != 64 || strings.ToLower(s) != s {
			t.Fatalf("String() = %q: want 64 lowercase hex characters", s)
		}
		for _, in := range []string{s, strings.ToUpper(s), "  " + s + "\n", s + "\r\n"} {
			got, err := ParseKey(in)
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", in, err)
			}
			if got != k {
				t.Fatalf("ParseKey(%q) = %s, want %s", in, got, k)
			}
		}
	}
	if GenerateKey() == GenerateKey() {
		t.Fatal("GenerateKey returned the same key twice")
	}
	if got, want := seqKey().String(), "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"; got != want {
		t.Fatalf("String() = %s, want %s", got, want)
	}
}

func TestParseKeyErrors(t *testing.T) {
	valid := seqKey().String()
	for _, tc := range []struct{ in, want string }{
		{"", "cluster key: want 64 hex characters, got 0"},
		{"   \n", "cluster key: want 64 hex characters, got 0"},
		{"0123456789ab", "cluster key: want 64 hex characters, got 12"},
		{valid[:63], "cluster key: want 64 hex characters, got 63"},
		{valid + "0", "cluster key: want 64 hex characters, got 65"},
		{valid[:62] + " 0", "cluster key: invalid character ' ' at position 63: want 0-9, a-f"},
		{"g" + valid[1:], "cluster key: invalid character 'g' at position 1: want 0-9, a-f"},
		{valid[:10] + "é" + valid[11:], "cluster key: invalid character 'é' at position 11: want 0-9, a-f"},
		{"0x" + valid[2:], "cluster key: invalid character 'x' at position 2: want 0-9, a-f"},
	} {
		k, err := ParseKey(tc.in)
		if err == nil {
			t.Errorf("ParseKey(%q) = %s, want error %q", tc.in, k, tc.want)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("ParseKey(%q) error %q, want %q", tc.in, err, tc.want)
		}
		if !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseKey(%q) error %v does not match ErrInvalidKey", tc.in, err)
		}
		if k != (Key{}) {
			t.Errorf("ParseKey(%q) returned non-zero key %s with an error", tc.in, k)
		}
	}
}

func TestFingerprint(t *testing.T) {
	// Known answer: the fingerprint is published, so it must not change.
	if got, want := seqKey().Fingerprint(), "359684bf1f583e2e"; got != want {
		t.Fatalf("Fingerprint() = %s, want %s", got, want)
	}
	seen := map[string]Key{}
	for range 50 {
		k := GenerateKey()
		fp := k.Fingerprint()
		if fp != k.Fingerprint() {
			t.Fatal("Fingerprint is not stable")
		}
		if len(fp) != 16 || strings.Trim(fp, "0123456789abcdef") != "" {
			t.Fatalf("Fingerprint() = %q: want 16 lowercase hex characters", fp)
		}
		if strings.Contains(k.String(), fp) {
			t.Fatalf("fingerprint %s is part of key %s", fp, k)
		}
		if prev, ok := seen[fp]; ok {
			t.Fatalf("keys %s and %s share fingerprint %s", prev, k, fp)
		}
		seen[fp] = k
	}
	// Neighbouring keys differ in every sense.
	a, b := seqKey(), seqKey()
	b[31] ^= 1
	if a.Fingerprint() == b.Fingerprint() {
		t.Fatal("keys one bit apart share a fingerprint")
	}
}

func TestKeyLogValueHidesKey(t *testing.T) {
	k := GenerateKey()
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("loaded", "key", k)
	if strings.Contains(buf.String(), k.String()) || !strings.Contains(buf.String(), k.Fingerprint()) {
		t.Fatalf("log line %q: want the fingerprint, not the key", buf.String())
	}
}
