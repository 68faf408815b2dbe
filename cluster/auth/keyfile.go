package auth

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

const (
	// KeyFileName is the key file's name inside the data directory.
	KeyFileName = "cluster.key"
	// EnvKey names the environment variable that overrides the key file.
	EnvKey = "ORRERY_CLUSTER_KEY"
)

// Source says where LoadOrCreateKey found the key.
type Source string

const (
	SourceEnv       Source = "env"       // the EnvKey environment variable
	SourceFile      Source = "file"      // an existing key file
	SourceGenerated Source = "generated" // a new key, now stored in the key file
)

// maxKeyFile bounds what is read from a key file: a valid one is 65 bytes.
const maxKeyFile = 4096

// LoadOrCreateKey returns the cluster key from the EnvKey variable (read
// through getenv; nil means os.Getenv), else from <dataDir>/cluster.key,
// else a new key that it stores there. A malformed or group/other-readable
// key file is an error, never overwritten: a node that silently picked
// another key would split the cluster.
func LoadOrCreateKey(dataDir string, getenv func(string) string) (Key, Source, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := getenv(EnvKey); v != "" {
		k, err := ParseKey(v)
		if err != nil {
			return Key{}, "", fmt.Errorf("environment variable %s: %w", EnvKey, err)
		}
		return k, SourceEnv, nil
	}
	if dataDir == "" {
		return Key{}, "", errors.New("cluster key: data dir is empty")
	}
	path := filepath.Join(dataDir, KeyFileName)
	k, err := readKeyFile(path)
	if err == nil {
		return k, SourceFile, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return Key{}, "", err
	}
	k = GenerateKey()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return Key{}, "", fmt.Errorf("cluster key: %w", err)
	}
	// Without clobbering: if another process (an agent and "orrery key show"
	// started together) created the file meanwhile, both must use its key.
	err = writeFileAtomic(path, []byte(k.String()+"\n"), 0o600, false)
	if errors.Is(err, fs.ErrExist) {
		k, err = readKeyFile(path)
		return k, SourceFile, err
	}
	if err != nil {
		return Key{}, "", fmt.Errorf("cluster key: %w", err)
	}
	return k, SourceGenerated, nil
}

// SaveKey stores k in <dataDir>/cluster.key (mode 0600), replacing any
// previous key atomically.
func SaveKey(dataDir string, k Key) error {
	if dataDir == "" {
		return errors.New("cluster key: data dir is empty")
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("cluster key: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dataDir, KeyFileName), []byte(k.String()+"\n"), 0o600, true); err != nil {
		return fmt.Errorf("cluster key: %w", err)
	}
	return nil
}

// readKeyFile reads and checks a key file; a missing file gives an error
// matching fs.ErrNotExist.
func readKeyFile(path string) (Key, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Key{}, err
		}
		return Key{}, fmt.Errorf("cluster key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Key{}, fmt.Errorf("cluster key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return Key{}, fmt.Errorf("cluster key file %s: not a regular file", path)
	}
	// Like ssh with private keys: refuse a key others may have read. Windows
	// has no such mode bits.
	if perm := st.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return Key{}, fmt.Errorf("cluster key file %s: permissions %#o are too open, the key must be private to its owner: run chmod 600 %s", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return Key{}, fmt.Errorf("cluster key file %s: %w", path, err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return Key{}, fmt.Errorf("cluster key file %s: %w (fix or remove the file; it is not overwritten)", path, err)
	}
	return k, nil
}

// writeFileAtomic writes data to path so that readers see the old content
// or the new, never a mix; unless replace, it fails with fs.ErrExist if
// path exists.
func writeFileAtomic(path string, data []byte, mode os.FileMode, replace bool) error {
	if replace {
		return atomicfile.Write(path, data, mode)
	}
	return atomicfile.Create(path, data, mode)
}
