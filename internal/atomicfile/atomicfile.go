// Package atomicfile writes files so that readers see the old content or the
// new, never a torn mix: write a temp file beside the target, fsync, rename.
// Every file Orrery writes for others to read goes through it.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TempPrefix starts the name of every temp file this package creates
// (".<target name>.tmp-…"), so that directory scanners can skip them.
const TempPrefix = "."

// Write replaces path with data, with the given mode.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteFunc(path, mode, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(data))
		return err
	})
}

// WriteFunc replaces path with what write writes, with the given mode. When
// write fails, the target is untouched and the temp file removed; the error
// is returned wrapped with the path.
func WriteFunc(path string, mode os.FileMode, write func(io.Writer) error) error {
	return writeWith(path, mode, write, os.Rename)
}

// Create writes data to path only if nothing is there yet: of two racing
// creators exactly one wins, and the other gets an error wrapping
// fs.ErrExist. It never replaces a file.
func Create(path string, data []byte, mode os.FileMode) error {
	return writeWith(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, func(tmp, path string) error {
		err := os.Link(tmp, path)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			// Some file systems have no hard links: fall back to a
			// rename, atomic but able to replace a file created since.
			if _, serr := os.Lstat(path); serr == nil {
				return fs.ErrExist
			}
			err = os.Rename(tmp, path)
		}
		return err
	})
}

// writeWith writes a temp file beside path, syncs it and commits it with
// commit (a rename, or a link that refuses to replace).
func writeWith(path string, mode os.FileMode, write func(io.Writer) error, commit func(tmp, path string) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomic write %s: %w", path, err)
	}
	tmp := f.Name()
	// The temp file goes in every case: after a rename it no longer
	// exists, after a link path holds the content.
	defer os.Remove(tmp)
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("atomic write %s: chmod: %w", path, err)
	}
	if err = write(f); err != nil {
		return fmt.Errorf("atomic write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("atomic write %s: sync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("atomic write %s: close: %w", path, err)
	}
	if err = commit(tmp, path); err != nil {
		return fmt.Errorf("atomic write %s: %w", path, err)
	}
	// Make the rename durable; a failure here leaves valid content, so it
	// is not reported.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// IsTemp reports whether name (a base name) is one of this package's
// temp files, for scanners that must never show a half-written file.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, TempPrefix) && strings.Contains(name, ".tmp-")
}
