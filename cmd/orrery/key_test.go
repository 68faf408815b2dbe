package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/cluster/auth"
)

type keyRun struct {
	code           int
	stdout, stderr string
}

// runKeyT runs "orrery key args…" with the given stdin and environment.
func runKeyT(t *testing.T, stdin string, env map[string]string, args ...string) keyRun {
	t.Helper()
	var out, errb bytes.Buffer
	code := runKey(args, strings.NewReader(stdin), &out, &errb, func(k string) string { return env[k] })
	return keyRun{code, out.String(), errb.String()}
}

func readKeyFile(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, auth.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestKeyShowCreatesThenLoads(t *testing.T) {
	dir := t.TempDir()
	r := runKeyT(t, "", nil, "show", "--data-dir", dir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	k, err := auth.ParseKey(r.stdout)
	if err != nil || r.stdout != k.String()+"\n" {
		t.Fatalf("stdout %q: want the key and a newline (%v)", r.stdout, err)
	}
	if !strings.Contains(r.stderr, "generated") || !strings.Contains(r.stderr, k.Fingerprint()) {
		t.Fatalf("stderr %q should say a key was generated and give its fingerprint", r.stderr)
	}
	if got := readKeyFile(t, dir); got != r.stdout {
		t.Fatalf("key file holds %q, show printed %q", got, r.stdout)
	}

	r2 := runKeyT(t, "", nil, "show", "--data-dir", dir)
	if r2.code != 0 || r2.stdout != r.stdout {
		t.Fatalf("second show: exit %d, %q; want %q", r2.code, r2.stdout, r.stdout)
	}
	if strings.Contains(r2.stderr, "generated") || !strings.Contains(r2.stderr, filepath.Join(dir, auth.KeyFileName)) {
		t.Fatalf("second show stderr %q should name the key file, not generate", r2.stderr)
	}

	fp := runKeyT(t, "", nil, "fingerprint", "--data-dir", dir)
	if fp.code != 0 || fp.stdout != k.Fingerprint()+"\n" {
		t.Fatalf("fingerprint: exit %d, %q; want %q", fp.code, fp.stdout, k.Fingerprint())
	}
	if strings.Contains(fp.stdout+fp.stderr, k.String()) {
		t.Fatal("fingerprint printed the key itself")
	}
}

func TestKeySetThenShow(t *testing.T) {
	for name, set := range map[string]func(t *testing.T, dir string, k auth.Key) keyRun{
		"arg": func(t *testing.T, dir string, k auth.Key) keyRun {
			return runKeyT(t, "", nil, "set", "--data-dir", dir, k.String())
		},
		"flag after arg": func(t *testing.T, dir string, k auth.Key) keyRun {
			return runKeyT(t, "", nil, "set", k.String(), "--data-dir", dir)
		},
		"stdin": func(t *testing.T, dir string, k auth.Key) keyRun {
			return runKeyT(t, k.String()+"\n", nil, "set", "--data-dir", dir, "-")
		},
		"stdin uppercase": func(t *testing.T, dir string, k auth.Key) keyRun {
			return runKeyT(t, strings.ToUpper(k.String())+"\r\n", nil, "set", "-", "--data-dir", dir)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			old := runKeyT(t, "", nil, "show", "--data-dir", dir) // an existing key to replace
			k := auth.GenerateKey()
			r := set(t, dir, k)
			if r.code != 0 {
				t.Fatalf("set: exit %d: %s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, k.Fingerprint()) || r.stdout != "" {
				t.Fatalf("set: stdout %q, stderr %q; want the fingerprint on stderr only", r.stdout, r.stderr)
			}
			show := runKeyT(t, "", nil, "show", "--data-dir", dir)
			if show.code != 0 || show.stdout != k.String()+"\n" || show.stdout == old.stdout {
				t.Fatalf("show after set: exit %d, %q; want %s", show.code, show.stdout, k)
			}
			st, err := os.Stat(filepath.Join(dir, auth.KeyFileName))
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("key file mode %v (%v), want 0600", st.Mode(), err)
			}
		})
	}
}

func TestKeySetBadKeyLeavesOldFile(t *testing.T) {
	dir := t.TempDir()
	k := auth.GenerateKey()
	if r := runKeyT(t, "", nil, "set", "--data-dir", dir, k.String()); r.code != 0 {
		t.Fatalf("set: exit %d: %s", r.code, r.stderr)
	}
	for _, tc := range []struct {
		stdin, arg, want string
	}{
		{"", "abcde", "want 64 hex characters, got 5"},
		{"", strings.Repeat("g", 64), "invalid character 'g' at position 1"},
		{"not a key\n", "-", "stdin: cluster key: want 64 hex characters, got 9"},
		{"", "", "want 64 hex characters, got 0"},
	} {
		r := runKeyT(t, tc.stdin, nil, "set", "--data-dir", dir, tc.arg)
		if r.code != 2 {
			t.Errorf("set %q: exit %d, want 2", tc.arg, r.code)
		}
		if !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "nothing changed") {
			t.Errorf("set %q: stderr %q, want %q and that nothing changed", tc.arg, r.stderr, tc.want)
		}
		if got := readKeyFile(t, dir); got != k.String()+"\n" {
			t.Fatalf("set %q changed the key file to %q", tc.arg, got)
		}
	}
}

func TestKeyEnvOverride(t *testing.T) {
	dir := t.TempDir()
	fileKey, envKey := auth.GenerateKey(), auth.GenerateKey()
	if err := auth.SaveKey(dir, fileKey); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{auth.EnvKey: envKey.String()}
	r := runKeyT(t, "", env, "show", "--data-dir", dir)
	if r.code != 0 || r.stdout != envKey.String()+"\n" || !strings.Contains(r.stderr, auth.EnvKey) {
		t.Fatalf("show with $%s: exit %d, stdout %q, stderr %q", auth.EnvKey, r.code, r.stdout, r.stderr)
	}
	r = runKeyT(t, "", env, "set", "--data-dir", dir, auth.GenerateKey().String())
	if r.code != 0 || !strings.Contains(r.stderr, "overrides") {
		t.Fatalf("set with $%s: exit %d, stderr %q; want a note that the env var wins", auth.EnvKey, r.code, r.stderr)
	}
	bad := runKeyT(t, "", map[string]string{auth.EnvKey: "xyz"}, "show", "--data-dir", dir)
	if bad.code != 1 || !strings.Contains(bad.stderr, auth.EnvKey) || bad.stdout != "" {
		t.Fatalf("show with a bad $%s: exit %d, stdout %q, stderr %q", auth.EnvKey, bad.code, bad.stdout, bad.stderr)
	}
}

func TestKeyShowMalformedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, auth.KeyFileName)
	if err := os.WriteFile(path, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"show", "fingerprint"} {
		r := runKeyT(t, "", nil, sub, "--data-dir", dir)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, path) {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want exit 1 naming %s", sub, r.code, r.stdout, r.stderr, path)
		}
	}
	if got := readKeyFile(t, dir); got != "garbage\n" {
		t.Fatalf("malformed key file rewritten to %q", got)
	}
}

func TestKeyUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{"rotate"},
		{"show", "extra", "--data-dir", dir},
		{"fingerprint", "--data-dir", dir, "extra"},
		{"set", "--data-dir", dir},
		{"set", "--data-dir", dir, "a", "b"},
		{"show", "--no-such-flag"},
	} {
		r := runKeyT(t, "", nil, args...)
		if r.code != 2 || r.stdout != "" || r.stderr == "" {
			t.Errorf("key %q: exit %d, stdout %q, stderr %q; want exit 2 and a message", args, r.code, r.stdout, r.stderr)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("usage errors wrote to the data dir: %v %v", entries, err)
	}
	if r := runKeyT(t, "", nil, "help"); r.code != 0 || !strings.Contains(r.stdout, "orrery key set") {
		t.Errorf("help: exit %d, stdout %q", r.code, r.stdout)
	}
}
