package pull

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
	"github.com/orrery-cluster/orrery/internal/transfer"
)

// Downloads: a file is fetched in ranged chunks by several workers into
// <dest>.part, with the bytes each chunk has in recorded in
// <dest>.part.json (every MiB, and at each chunk's end), so that a
// download cut off (a dropped connection, kill -9 of the agent) resumes
// where it was. When every chunk is in, the part's
// sha256 is checked against the source's digest and the part is renamed
// to dest: a model is never visible half written, nor unverified.

// Fetcher defaults.
const (
	DefaultChunk       = 8 << 20
	DefaultWorkers     = 4
	DefaultMaxAttempts = 8
	// maxBackoff bounds the wait between attempts, Retry-After included.
	maxBackoff = 60 * time.Second
	// MaxFileSize refuses absurd sizes from a source.
	MaxFileSize = 10 << 40
	partSuffix  = ".part"
	stateSuffix = ".part.json"
)

// Target is one file to fetch.
type Target struct {
	URL  string
	Size int64
	// SHA256 is the file's digest, lowercase hex.
	SHA256 string
	// Dest is where the verified file goes.
	Dest string
	// Ranges, when set, are the only bytes wanted: {offset, length}
	// pairs, sorted and disjoint. Fetch then leaves them in the sparse
	// <Dest>.part for the caller to read and remove (PartPath): no
	// digest covers part of a file, so each range is checked against
	// the Content-Range it came with instead.
	Ranges [][2]int64
}

// PartPath is where Fetch leaves a Target's bytes while (and, with
// Ranges, after) it fetches them; StatePath records which are in.
func PartPath(dest string) string  { return dest + partSuffix }
func StatePath(dest string) string { return dest + stateSuffix }

// Stats says what a Fetch did.
type Stats struct {
	// Resumed is how many bytes were already there from an earlier run;
	// Fetched how many this run received (refetched chunks included).
	Resumed, Fetched int64
	// Attempts counts the requests, retries included; Retries those that
	// followed a failed one, and Stalls the connections given up because
	// they stalled (each then resumed on a new one).
	Attempts, Retries, Stalls int64
	// Ranged is false when the server ignored Range and the file came in
	// one stream.
	Ranged bool
}

// Fetcher downloads files. The zero value is usable.
type Fetcher struct {
	Client *http.Client
	// Header goes on every request (e.g. Authorization); Go drops it on
	// a redirect to another host.
	Header      http.Header
	Chunk       int64
	Workers     int
	MaxAttempts int
	// Sleep waits between attempts (nil: a timer, ended by ctx).
	Sleep func(ctx context.Context, d time.Duration) error
	// FreeBytes reports the free space of a directory (nil: statfs).
	FreeBytes func(dir string) (uint64, error)
	// Stall gives up on a connection that brings less than
	// transfer.StallBytes in that long; its chunk resumes from its last
	// byte on a new one (0: transfer.DefaultStall; negative: never).
	Stall time.Duration
	// OnRetry, when set, is told of every failed attempt that will be
	// retried, and whether its connection stalled (from several
	// goroutines).
	OnRetry func(Retry)
}

// partState is <dest>.part.json: what a resumed download must match.
type partState struct {
	URL    string `json:"url"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Chunk  int64  `json:"chunk"`
	// Spans are the chunks {offset, length} of a Target with Ranges
	// (nil: the file cut every Chunk bytes).
	Spans [][2]int64 `json:"spans,omitempty"`
	// Have is, per chunk, how many of its bytes (from its start) are in.
	Have []int64 `json:"have"`
}

// span is chunk i's offset and length.
func (ps *partState) span(i int) (off, n int64) {
	if ps.Spans != nil {
		return ps.Spans[i][0], ps.Spans[i][1]
	}
	return int64(i) * ps.Chunk, min(ps.Chunk, ps.Size-int64(i)*ps.Chunk)
}

func (ps *partState) chunks() int {
	if ps.Spans != nil {
		return len(ps.Spans)
	}
	return int((ps.Size + ps.Chunk - 1) / ps.Chunk)
}

// spansOf cuts ranges into chunks of at most chunk bytes, checking that
// they lie in a file of size bytes, sorted and disjoint.
func spansOf(ranges [][2]int64, chunk, size int64) ([][2]int64, error) {
	var out [][2]int64
	end := int64(0)
	for _, r := range ranges {
		if r[0] < end || r[1] <= 0 || r[1] > size-r[0] {
			return nil, fmt.Errorf("range {%d, %d} of a %d-byte file: out of order, empty or past its end", r[0], r[1], size)
		}
		for off := r[0]; off < r[0]+r[1]; off += chunk {
			out = append(out, [2]int64{off, min(chunk, r[0]+r[1]-off)})
		}
		end = r[0] + r[1]
	}
	return out, nil
}

func (ps *partState) spanLen(i int) int64 { _, n := ps.span(i); return n }

// saveEvery is how often (in bytes of a chunk) the state file is written.
const saveEvery = 1 << 20

func (f *Fetcher) defaults() {
	if f.Client == nil {
		f.Client = transfer.Client()
	}
	if f.Stall == 0 {
		f.Stall = transfer.DefaultStall
	}
	if f.Chunk <= 0 {
		f.Chunk = DefaultChunk
	}
	if f.Workers <= 0 {
		f.Workers = DefaultWorkers
	}
	if f.MaxAttempts <= 0 {
		f.MaxAttempts = DefaultMaxAttempts
	}
	if f.Sleep == nil {
		f.Sleep = sleepCtx
	}
	if f.FreeBytes == nil {
		f.FreeBytes = freeBytes
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Fetch downloads t, resuming a part left by an earlier run, and calls
// progress (done of size bytes) as bytes arrive, from several goroutines
// one at a time.
func (f *Fetcher) Fetch(ctx context.Context, t Target, progress func(done, size int64)) (Stats, error) {
	f.defaults()
	var st Stats
	if t.Size < 0 || t.Size > MaxFileSize {
		return st, fmt.Errorf("%s: size %d bytes is absurd (limit %d)", t.URL, t.Size, int64(MaxFileSize))
	}
	if len(t.SHA256) != 64 {
		return st, fmt.Errorf("%s: no sha256 digest to verify against", t.URL)
	}
	if fi, err := os.Stat(t.Dest); err == nil && fi.Size() == t.Size && t.Ranges == nil {
		return st, nil // already there (verified when it was written)
	}
	if err := os.MkdirAll(filepath.Dir(t.Dest), 0o755); err != nil {
		return st, err
	}
	ps, err := f.loadState(t)
	if err != nil {
		return st, err
	}
	want := int64(0)
	for i := range ps.chunks() {
		_, n := ps.span(i)
		want += n
		st.Resumed += ps.Have[i]
	}
	if need := want - st.Resumed; need > 0 {
		free, err := f.FreeBytes(filepath.Dir(t.Dest))
		if err == nil && uint64(need) > free {
			return st, fmt.Errorf("%s needs %d more bytes, but %s has %d free", filepath.Base(t.Dest), need, filepath.Dir(t.Dest), free)
		}
	}
	part, err := os.OpenFile(t.Dest+partSuffix, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return st, err
	}
	defer part.Close()
	if err := part.Truncate(t.Size); err != nil {
		return st, err
	}
	m := &meter{size: want, fn: progress}
	m.set(st.Resumed)
	ranged, err := f.fetchChunks(ctx, t, part, ps, m, &st)
	st.Ranged = ranged
	if err != nil {
		return st, err
	}
	if err := part.Sync(); err != nil {
		return st, err
	}
	if t.Ranges != nil {
		return st, nil
	}
	if err := verify(part, t.SHA256); err != nil {
		os.Remove(t.Dest + partSuffix)
		os.Remove(t.Dest + stateSuffix)
		return st, fmt.Errorf("%s: %w; the download was deleted", filepath.Base(t.Dest), err)
	}
	if err := os.Rename(t.Dest+partSuffix, t.Dest); err != nil {
		return st, err
	}
	os.Remove(t.Dest + stateSuffix)
	return st, nil
}

// loadState reads the part's state, or starts afresh when there is none
// or it belongs to another file.
func (f *Fetcher) loadState(t Target) (*partState, error) {
	fresh := &partState{URL: t.URL, Size: t.Size, SHA256: t.SHA256, Chunk: f.Chunk}
	if t.Ranges != nil {
		spans, err := spansOf(t.Ranges, f.Chunk, t.Size)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.URL, err)
		}
		fresh.Spans = spans
	}
	fresh.Have = make([]int64, fresh.chunks())
	b, err := os.ReadFile(t.Dest + stateSuffix)
	if err != nil {
		return fresh, nil
	}
	var ps partState
	if json.Unmarshal(b, &ps) != nil || ps.Size != t.Size || ps.SHA256 != t.SHA256 || ps.Chunk <= 0 ||
		(ps.Spans == nil) != (fresh.Spans == nil) || ps.Spans != nil && !slices.Equal(ps.Spans, fresh.Spans) ||
		len(ps.Have) != ps.chunks() {
		return fresh, nil
	}
	for i, h := range ps.Have {
		if _, n := ps.span(i); h < 0 || h > n {
			return fresh, nil
		}
	}
	if fi, err := os.Stat(t.Dest + partSuffix); err != nil || fi.Size() != t.Size {
		return fresh, nil
	}
	ps.URL = t.URL // a signed URL may change between runs
	return &ps, nil
}

// meter counts the bytes in place and reports them.
type meter struct {
	mu   sync.Mutex
	done int64
	size int64
	fn   func(done, size int64)
}

func (m *meter) add(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done += n
	if m.fn != nil {
		m.fn(m.done, m.size)
	}
}

func (m *meter) set(v int64) {
	m.mu.Lock()
	m.done = 0
	m.mu.Unlock()
	m.add(v)
}

// fetchChunks fetches the chunks not done yet with f.Workers workers. It
// reports false when the server ignored Range (the file was then fetched
// in one stream).
func (f *Fetcher) fetchChunks(ctx context.Context, t Target, part *os.File, ps *partState, m *meter, st *Stats) (bool, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex // guards ps.Have, next and the state file
		next    int
		noRange atomic.Bool
		wg      sync.WaitGroup
	)
	take := func() int {
		mu.Lock()
		defer mu.Unlock()
		for next < len(ps.Have) && ps.Have[next] == ps.spanLen(next) {
			next++
		}
		if next == len(ps.Have) {
			return -1
		}
		next++
		return next - 1
	}
	save := func() error {
		b, _ := json.Marshal(ps)
		return atomicfile.Write(t.Dest+stateSuffix, b, 0o644)
	}
	// have records n more bytes of chunk i, saving the state every
	// saveEvery bytes and at the chunk's end; it returns where the chunk
	// stands.
	have := func(i int, n int64) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		before := ps.Have[i]
		ps.Have[i] += n
		if ps.Have[i] == ps.spanLen(i) || ps.Have[i]/saveEvery != before/saveEvery {
			return ps.Have[i], save()
		}
		return ps.Have[i], nil
	}
	for range min(f.Workers, max(len(ps.Have), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := take(); i >= 0 && ctx.Err() == nil; i = take() {
				err := f.retry(ctx, st, func() error {
					mu.Lock()
					from := ps.Have[i]
					mu.Unlock()
					off, n := ps.span(i)
					return f.getRange(ctx, t, part, off+from, n-from, func(k int64) error {
						m.add(k)
						_, err := have(i, k)
						return err
					}, st)
				})
				if errors.Is(err, errNoRange) {
					noRange.Store(true)
					cancel(err)
					return
				}
				if err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if !noRange.Load() {
		mu.Lock()
		save() // what came since the last save, for a resume
		mu.Unlock()
		return true, context.Cause(ctx)
	}
	if t.Ranges != nil {
		return false, fmt.Errorf("%s: the server ignores Range, so only the whole file could come", t.URL)
	}
	// The whole file in one stream, from its start: nothing is kept.
	os.Remove(t.Dest + stateSuffix)
	pctx := context.WithoutCancel(ctx)
	if parent := context.Cause(ctx); !errors.Is(parent, errNoRange) {
		return false, parent
	}
	return false, f.retry(pctx, st, func() error {
		m.set(0)
		return f.getAll(pctx, t, part, m.add, st)
	})
}

// errNoRange says the server answered a ranged request with the whole
// file.
var errNoRange = errors.New("the server ignores Range")

// get sends a GET for t's URL with an optional Range, and sorts the
// answer's status into success, retryable and fatal.
func (f *Fetcher) get(ctx context.Context, t Target, rng string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range f.Header {
		req.Header[k] = v
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := f.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &retryable{err: err, host: req.URL.Host}
	}
	host := resp.Request.URL.Host // after redirects: the CDN's
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent:
		resp.Body = transfer.Watch(resp.Body, f.Stall, host)
		return resp, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		resp.Body.Close()
		return nil, &retryable{err: fmt.Errorf("GET %s: %s", t.URL, resp.Status), wait: retryAfter(resp.Header.Get("Retry-After")), host: host}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s (a gated or private model needs HF_TOKEN)", t.URL, resp.Status)
	}
	resp.Body.Close()
	return nil, fmt.Errorf("GET %s: %s", t.URL, resp.Status)
}

// getRange fetches bytes [off, off+n) into part, calling got for every
// write; a cut mid-way keeps what came, and the retry asks for the rest.
func (f *Fetcher) getRange(ctx context.Context, t Target, part *os.File, off, n int64, got func(int64) error, st *Stats) error {
	resp, err := f.get(ctx, t, fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkRange(resp, t, off, n); err != nil {
		return err
	}
	var werr error
	k, err := copyAt(part, io.LimitReader(resp.Body, n), off, func(k int64) {
		atomic.AddInt64(&st.Fetched, k)
		if e := got(k); e != nil && werr == nil {
			werr = e
		}
	})
	if werr != nil {
		return werr
	}
	if err == nil && k < n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return &retryable{err: fmt.Errorf("GET %s bytes %d-%d: %w", t.URL, off, off+n-1, err), host: resp.Request.URL.Host}
	}
	return nil
}

// checkRange checks the answer to a GET of bytes [off, off+n) of t: a
// 206 must name exactly that range of a file of t's size; a 200 is the
// whole file, right only when the whole file was asked for (else
// errNoRange).
func checkRange(resp *http.Response, t Target, off, n int64) error {
	if resp.StatusCode != http.StatusPartialContent {
		if off != 0 || resp.ContentLength != t.Size || t.Size != n {
			return errNoRange
		}
		return nil
	}
	if cr := resp.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, t.Size) {
		return fmt.Errorf("GET %s: Content-Range %q for bytes %d-%d of %d", t.URL, cr, off, off+n-1, t.Size)
	}
	return nil
}

// getAll fetches the whole file in one stream, from its start.
func (f *Fetcher) getAll(ctx context.Context, t Target, part *os.File, report func(int64), st *Stats) error {
	resp, err := f.get(ctx, t, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := copyAt(part, io.LimitReader(resp.Body, t.Size), 0, func(k int64) {
		atomic.AddInt64(&st.Fetched, k)
		report(k)
	})
	if err == nil && got < t.Size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return &retryable{err: fmt.Errorf("GET %s: %w", t.URL, err), host: resp.Request.URL.Host}
	}
	return nil
}

// copyAt copies r into w from off, reporting every write.
func copyAt(w io.WriterAt, r io.Reader, off int64, report func(int64)) (int64, error) {
	buf := make([]byte, 256<<10)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.WriteAt(buf[:n], off+total); werr != nil {
				return total, werr
			}
			total += int64(n)
			report(int64(n))
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// verify checks the file's sha256.
func verify(f *os.File, want string) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("sha256 mismatch: got %s, want %s", got, want)
	}
	return nil
}
