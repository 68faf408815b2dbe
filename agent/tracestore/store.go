// Package tracestore keeps finished traces on disk: one Chrome-trace JSON
// file per task under <data-dir>/traces/, written atomically, an index for
// fast listing, and retention by total size and by age.
package tracestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
	"github.com/orrery-cluster/orrery/internal/ident"
)

// Defaults for Config.
const (
	DefaultMaxBytes = 2 << 30 // 2 GiB
	DefaultMaxAge   = 30 * 24 * time.Hour
	indexFile       = "index.json"
	traceExt        = ".json"
)

// Errors callers map to HTTP statuses.
var (
	ErrBadID    = errors.New("bad trace id")
	ErrNotFound = errors.New("no such trace")
)

// Meta describes one stored trace; the index holds one per trace.
type Meta struct {
	TaskID    string    `json:"taskId"`
	CreatedAt time.Time `json:"createdAt"`
	FileSize  int64     `json:"fileSize"`
	// Kind says what made the trace, e.g. "ring-bench" or "generate".
	Kind string `json:"kind,omitempty"`
	// Partial is set when some ranks never reported; MissingRanks names them.
	Partial      bool  `json:"partial"`
	MissingRanks []int `json:"missingRanks,omitempty"`
	Spans        int   `json:"spans"`
	Nodes        int   `json:"nodes"`
	// Error is the task's failure, when it failed.
	Error string `json:"error,omitempty"`
}

// Config tunes a Store. Zero values take the defaults.
type Config struct {
	Dir      string
	MaxBytes int64
	MaxAge   time.Duration
	Logger   *slog.Logger
	Now      func() time.Time
}

// Store is safe for concurrent use.
type Store struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex // guards index and the files
	index map[string]Meta

	views views // loaded for drawing (View)
}

// Open opens (creating) the store in cfg.Dir and loads its index. A
// missing or unreadable index is rebuilt from the files, so a crash between
// writing a trace and its index entry loses nothing.
func Open(cfg Config) (*Store, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("trace store: %w", err)
	}
	s := &Store{cfg: cfg, log: cfg.Logger.With("component", "tracestore"), index: map[string]Meta{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadIndexLocked(); err != nil {
		s.log.Warn("trace index unreadable; rebuilding from files", "err", err)
	}
	s.reconcileLocked()
	return s, nil
}

// checkID reports whether id may name a trace: ident.ValidTraceID's rule.
// Nothing else ever becomes a path. Its errors wrap both ErrBadID and
// ident.ErrInvalid.
func checkID(id string) error {
	if err := ident.ValidTraceID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrBadID, err)
	}
	return nil
}

func (s *Store) path(id string) string { return filepath.Join(s.cfg.Dir, id+traceExt) }

// Save writes a trace with write, atomically: readers see the whole file or
// none. meta.TaskID names it; FileSize and (if zero) CreatedAt are filled.
func (s *Store) Save(meta Meta, write func(io.Writer) error) (Meta, error) {
	if err := checkID(meta.TaskID); err != nil {
		return Meta{}, err
	}
	if meta.CreatedAt.IsZero() {
		meta.CreatedAt = s.cfg.Now().UTC()
	}
	// Written outside the lock (traces can be large); the rename inside
	// atomicfile makes it visible whole.
	var size int64
	err := atomicfile.WriteFunc(s.path(meta.TaskID), 0o600, func(w io.Writer) error {
		cw := &countWriter{w: w}
		err := write(cw)
		size = cw.n
		return err
	})
	if err != nil {
		return Meta{}, fmt.Errorf("save trace %s: %w", meta.TaskID, err)
	}
	meta.FileSize = size
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index[meta.TaskID] = meta
	s.enforceLocked(meta.TaskID)
	if err := s.writeIndexLocked(); err != nil {
		s.log.Warn("write trace index", "err", err)
	}
	return meta, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// List returns every trace's metadata, newest first.
func (s *Store) List() []Meta {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Meta, 0, len(s.index))
	for _, m := range s.index {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Meta) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.TaskID, b.TaskID)
	})
	return out
}

// Get returns one trace's metadata.
func (s *Store) Get(id string) (Meta, error) {
	if err := checkID(id); err != nil {
		return Meta{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.index[id]
	if !ok {
		return Meta{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return m, nil
}

// OpenTrace opens a trace's file for reading.
func (s *Store) OpenTrace(id string) (*os.File, Meta, error) {
	m, err := s.Get(id)
	if err != nil {
		return nil, Meta{}, err
	}
	f, err := os.Open(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Meta{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, Meta{}, fmt.Errorf("open trace %s: %w", id, err)
	}
	return f, m, nil
}

// Delete removes a trace.
func (s *Store) Delete(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.index[id]; !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete trace %s: %w", id, err)
	}
	delete(s.index, id)
	s.views.drop(id)
	return s.writeIndexLocked()
}

// TotalBytes is the size of every stored trace.
func (s *Store) TotalBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, m := range s.index {
		n += m.FileSize
	}
	return n
}

// enforceLocked drops traces older than MaxAge, then the oldest until the
// total fits MaxBytes. keep (the trace just saved, or "") is never dropped,
// even when it alone is over the cap.
func (s *Store) enforceLocked(keep string) {
	now := s.cfg.Now()
	metas := make([]Meta, 0, len(s.index))
	var total int64
	for _, m := range s.index {
		metas = append(metas, m)
		total += m.FileSize
	}
	slices.SortFunc(metas, func(a, b Meta) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.TaskID, b.TaskID)
	})
	for i, m := range metas {
		tooOld := now.Sub(m.CreatedAt) > s.cfg.MaxAge
		tooBig := total > s.cfg.MaxBytes && i < len(metas)-1
		if m.TaskID == keep || !tooOld && !tooBig {
			continue
		}
		if err := os.Remove(s.path(m.TaskID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("retention: remove trace", "trace", m.TaskID, "err", err)
			continue
		}
		delete(s.index, m.TaskID)
		total -= m.FileSize
		s.log.Info("retention: removed trace", "trace", m.TaskID, "tooOld", tooOld, "size", m.FileSize)
	}
}

func (s *Store) loadIndexLocked() error {
	b, err := os.ReadFile(filepath.Join(s.cfg.Dir, indexFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var metas []Meta
	if err := json.Unmarshal(b, &metas); err != nil {
		return fmt.Errorf("decode %s: %w", indexFile, err)
	}
	for _, m := range metas {
		if checkID(m.TaskID) == nil {
			s.index[m.TaskID] = m
		}
	}
	return nil
}

// reconcileLocked makes the index match the files: entries whose file is
// gone are dropped; files without an entry get one from their stat;
// temp files left by a crash are removed.
func (s *Store) reconcileLocked() {
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		s.log.Warn("list traces", "err", err)
		return
	}
	onDisk := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if atomicfile.IsTemp(name) {
			os.Remove(filepath.Join(s.cfg.Dir, name))
			continue
		}
		id, ok := strings.CutSuffix(name, traceExt)
		if !ok || name == indexFile || checkID(id) != nil || !e.Type().IsRegular() {
			continue
		}
		onDisk[id] = true
		if _, ok := s.index[id]; !ok {
			if fi, err := e.Info(); err == nil {
				s.index[id] = Meta{TaskID: id, CreatedAt: fi.ModTime().UTC(), FileSize: fi.Size()}
			}
		}
	}
	for id := range s.index {
		if !onDisk[id] {
			delete(s.index, id)
		}
	}
	s.enforceLocked("")
	if err := s.writeIndexLocked(); err != nil {
		s.log.Warn("write trace index", "err", err)
	}
}

func (s *Store) writeIndexLocked() error {
	metas := make([]Meta, 0, len(s.index))
	for _, m := range s.index {
		metas = append(metas, m)
	}
	slices.SortFunc(metas, func(a, b Meta) int { return strings.Compare(a.TaskID, b.TaskID) })
	b, err := json.Marshal(metas)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.cfg.Dir, indexFile), b, 0o600)
}
