// Package atomicfile writes files so that readers see the old content or the
// new, never a torn mix: write a temp file beside the target, fsync, rename.
// Every file Orrery writes for others to read goes through it.
package atomicfile

import (
	"bytes"
	"fmt"
	"io"
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
func WriteFunc(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomic write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
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
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("atomic write %s: rename: %w", path, err)
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
