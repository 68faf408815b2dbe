package tracestore

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
)

// maxViewSpans bounds the spans the loaded traces hold together (about
// 200 bytes each with their index): a timeline's pans and zooms, and the
// statistics, read the trace they show from memory, not from its file on
// each request. The newest is kept whatever its size.
const maxViewSpans = 4_000_000

// views keeps the traces last read, newest first.
type views struct {
	mu      sync.Mutex
	entries []*view
}

type view struct {
	id    string
	size  int64
	mod   time.Time
	ready chan struct{} // closed once t or err is set
	t     *trace.Trace
	err   error
	spans int

	index sync.Once // makes x, on the first View
	x     *trace.Index
}

// View returns the trace's index for drawing windows of it, loading the
// trace as Load does and indexing it once.
func (s *Store) View(id string) (*trace.Index, error) {
	v, err := s.load(id)
	if err != nil {
		return nil, err
	}
	v.index.Do(func() { v.x = trace.NewIndex(v.t) })
	return v.x, nil
}

// Load returns the trace, loading it when it is not in memory or its file
// changed; concurrent calls for one trace load it once. The trace must not
// be changed.
func (s *Store) Load(id string) (*trace.Trace, error) {
	v, err := s.load(id)
	if err != nil {
		return nil, err
	}
	return v.t, nil
}

func (s *Store) load(id string) (*view, error) {
	f, _, err := s.OpenTrace(id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat trace %s: %w", id, err)
	}
	v, load := s.views.get(id, fi.Size(), fi.ModTime())
	if load {
		t, err := trace.ReadChrome(f)
		if err != nil {
			v.err = fmt.Errorf("load trace %s: %w", id, err)
		} else {
			v.t, v.spans = t, len(t.Spans)
		}
		close(v.ready)
		s.views.trim(v)
	}
	<-v.ready
	if v.err != nil {
		return nil, v.err
	}
	return v, nil
}

// get returns the entry for the file, and whether the caller must load it.
func (vs *views) get(id string, size int64, mod time.Time) (*view, bool) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for i, v := range vs.entries {
		if v.id != id {
			continue
		}
		if v.size == size && v.mod.Equal(mod) {
			copy(vs.entries[1:i+1], vs.entries[:i])
			vs.entries[0] = v
			return v, false
		}
		vs.entries = append(vs.entries[:i], vs.entries[i+1:]...)
		break
	}
	v := &view{id: id, size: size, mod: mod, ready: make(chan struct{})}
	vs.entries = append([]*view{v}, vs.entries...)
	return v, true
}

// drop forgets a trace (deleted).
func (vs *views) drop(id string) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.entries = slices.DeleteFunc(vs.entries, func(v *view) bool { return v.id == id })
}

// trim drops failed loads and the oldest indexes past maxViewSpans, always
// keeping the one just loaded.
func (vs *views) trim(loaded *view) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	kept, spans := vs.entries[:0], 0
	for _, v := range vs.entries {
		select {
		case <-v.ready:
		default: // still loading
			kept = append(kept, v)
			continue
		}
		if v.err != nil || v != loaded && spans+v.spans > maxViewSpans {
			continue
		}
		spans += v.spans
		kept = append(kept, v)
	}
	clear(vs.entries[len(kept):])
	vs.entries = kept
}
