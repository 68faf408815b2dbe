package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// env returns a getenv backed by m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func noEnv(string) string { return "" }

// writeKeyFile writes content to dir/cluster.key with the given mode.
func writeKeyFile(t *testing.T, dir, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, KeyFileName)
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile is subject to umask
		t.Fatal(err)
	}
	return path
}

// assertKeyFile checks the file holds exactly want's hex and a newline,
// with mode 0600.
func assertKeyFile(t *testing.T, dir string, want Key) {
	t.Helper()
	path := filepath.Join(dir, KeyFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != want.String()+"\n" {
		t.Fatalf("%s holds %q, want %q", path, got, want.String()+"\n")
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Fatalf("%s has mode %#o, want 0600", path, perm)
	}
	tmps, err := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if err != nil || len(tmps) != 0 {
		t.Fatalf("temp files left behind: %v %v", tmps, err)
	}
}

func TestLoadOrCreateKeyGeneratesThenLoads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "data") // created on demand
	k1, src, err := LoadOrCreateKey(dir, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if src != "generated" {
		t.Fatalf("source %q, want generated", src)
	}
	if k1 == (Key{}) {
		t.Fatal("generated the zero key")
	}
	assertKeyFile(t, dir, k1)

	k2, src, err := LoadOrCreateKey(dir, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if src != "file" {
		t.Fatalf("source %q, want file", src)
	}
	if k2 != k1 {
		t.Fatalf("second load got %s, want %s", k2, k1)
	}
	assertKeyFile(t, dir, k1)
}

func TestLoadOrCreateKeyEnvOverridesFile(t *testing.T) {
	dir := t.TempDir()
	fileKey, envKey := GenerateKey(), GenerateKey()
	if err := SaveKey(dir, fileKey); err != nil {
		t.Fatal(err)
	}
	got, src, err := LoadOrCreateKey(dir, env(map[string]string{EnvKey: " " + strings.ToUpper(envKey.String()) + "\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if src != "env" {
		t.Fatalf("source %q, want env", src)
	}
	if got != envKey {
		t.Fatalf("got %s, want the env key %s", got, envKey)
	}
	assertKeyFile(t, dir, fileKey)

	// The env var also works with no data dir and no file at all.
	if got, _, err := LoadOrCreateKey("", env(map[string]string{EnvKey: envKey.String()})); err != nil || got != envKey {
		t.Fatalf("env key without data dir: %s, %v", got, err)
	}
}

func TestLoadOrCreateKeyBadEnv(t *testing.T) {
	dir := t.TempDir()
	_, _, err := LoadOrCreateKey(dir, env(map[string]string{EnvKey: "0123456789ab"}))
	if err == nil {
		t.Fatal("bad env key accepted")
	}
	if !strings.Contains(err.Error(), EnvKey) || !strings.Contains(err.Error(), "got 12") {
		t.Fatalf("error %q should name %s and the problem", err, EnvKey)
	}
	if !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("error %v does not match ErrInvalidKey", err)
	}
	// A bad env key must not fall back to generating a file either.
	if _, err := os.Stat(filepath.Join(dir, KeyFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("key file created despite a bad env key: %v", err)
	}
}

func TestLoadOrCreateKeyMalformedFileUntouched(t *testing.T) {
	for name, content := range map[string]string{
		"short":    "abc\n",
		"empty":    "",
		"not hex":  strings.Repeat("z", 64) + "\n",
		"two keys": GenerateKey().String() + "\n" + GenerateKey().String() + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeKeyFile(t, dir, content, 0o600)
			_, _, err := LoadOrCreateKey(dir, noEnv)
			if err == nil {
				t.Fatal("malformed key file accepted")
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q should name %s", err, path)
			}
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not match ErrInvalidKey", err)
			}
			b, rerr := os.ReadFile(path)
			if rerr != nil || string(b) != content {
				t.Fatalf("key file changed to %q (%v), want %q", b, rerr, content)
			}
		})
	}
}

func TestLoadOrCreateKeyOpenPermissions(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		dir := t.TempDir()
		k := GenerateKey()
		path := writeKeyFile(t, dir, k.String()+"\n", mode)
		_, _, err := LoadOrCreateKey(dir, noEnv)
		if err == nil {
			t.Fatalf("mode %#o: key file accepted", mode)
		}
		if !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Fatalf("mode %#o: error %q should tell the user to chmod 600 %s", mode, err, path)
		}
		st, serr := os.Stat(path)
		if serr != nil || st.Mode().Perm() != mode {
			t.Fatalf("mode changed behind the user's back: %v %v", st.Mode(), serr)
		}
	}
	// Tighter than 0600 is fine.
	dir := t.TempDir()
	k := GenerateKey()
	writeKeyFile(t, dir, k.String()+"\n", 0o400)
	if got, src, err := LoadOrCreateKey(dir, noEnv); err != nil || got != k || src != SourceFile {
		t.Fatalf("mode 0400: %s %s %v", got, src, err)
	}
}

func TestLoadOrCreateKeyNotAFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, KeyFileName), 0o700); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadOrCreateKey(dir, noEnv)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("got %v, want a not-a-regular-file error", err)
	}
}

func TestLoadOrCreateKeyNoDataDir(t *testing.T) {
	if _, _, err := LoadOrCreateKey("", noEnv); err == nil {
		t.Fatal("empty data dir accepted")
	}
	if err := SaveKey("", GenerateKey()); err == nil {
		t.Fatal("SaveKey accepted an empty data dir")
	}
}

// Processes starting together on a fresh data dir must agree on one key.
func TestLoadOrCreateKeyConcurrent(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	keys := make([]Key, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], _, errs[i] = LoadOrCreateKey(dir, noEnv)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if keys[i] != keys[0] {
			t.Fatalf("caller %d got %s, caller 0 got %s", i, keys[i], keys[0])
		}
	}
	assertKeyFile(t, dir, keys[0])
}

func TestSaveKeyReplaces(t *testing.T) {
	dir := t.TempDir()
	writeKeyFile(t, dir, GenerateKey().String()+"\n", 0o644)
	k := GenerateKey()
	if err := SaveKey(dir, k); err != nil {
		t.Fatal(err)
	}
	assertKeyFile(t, dir, k) // also checks the loose 0644 became 0600
	got, src, err := LoadOrCreateKey(dir, noEnv)
	if err != nil || got != k || src != SourceFile {
		t.Fatalf("after SaveKey: %s %s %v, want %s from file", got, src, err, k)
	}
}
