package pull

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/split"
)

// Shard-only pulls. When no node has a model, its placement reads the
// GGUF's header from the hub (Resolve, Header), and each rank's node
// fetches only its own tensors' byte ranges (Shard), resumably, into a
// sparse part file, and writes its shard from them. A rank that holds
// the whole model pulls the whole file instead (Whole), which checks its
// sha256. Only hf.co references are placed this way: a registry name is
// also what a misspelt local model looks like.

// Header reads: the first asks for headerFirst bytes, each next one for
// as many more as there are, until the header parses (a 150k-token
// vocabulary makes a header of about 10 MB), or maxHeader.
const (
	headerFirst = 256 << 10
	maxHeader   = 256 << 20
)

// ShardStats says what a shard-only pull fetched.
type ShardStats struct {
	// Header is the bytes read for the GGUF header; Want the bytes of
	// the ranges the shard needs; Fetched those received this run and
	// Resumed those already there from an earlier, interrupted one.
	Header, Want, Fetched, Resumed int64
}

// IsSource says whether a model id names a source a placement can pull
// shards from (an hf.co reference).
func (p *Puller) IsSource(id string) bool {
	_, ok, err := ParseHFRef(id)
	return ok && err == nil
}

// Resolve names the one GGUF file an hf.co reference pulls.
func (p *Puller) Resolve(ctx context.Context, ref string) (state.ModelSource, error) {
	r, ok, err := ParseHFRef(ref)
	if !ok || err != nil {
		return state.ModelSource{}, fmt.Errorf("%w: %q: want hf.co/{org}/{repo}[:{quant}] (%v)", ErrBadRef, ref, err)
	}
	if p.cfg.Offline {
		return state.ModelSource{}, ErrOffline
	}
	files, err := p.cfg.HF.Files(ctx, r)
	if err != nil {
		return state.ModelSource{}, err
	}
	norm := "hf.co/" + r.Repo + ":" + r.Quant
	if len(files) != 1 {
		return state.ModelSource{}, fmt.Errorf("%s is a GGUF split in %d files, which ranks cannot fetch their parts of: pull it whole (orrery pull %s), then place it", norm, len(files), norm)
	}
	f := files[0]
	return state.ModelSource{Ref: norm, File: f.Path, Size: f.Size, SHA256: f.SHA256,
		Model: r.Repo + "/" + strings.TrimSuffix(f.Path, path.Ext(f.Path))}, nil
}

// target is src's file on the hub as this node reaches it, with a
// Fetcher that sends this node's hub token.
func (p *Puller) target(src state.ModelSource) (Target, *Fetcher, error) {
	r, ok, err := ParseHFRef(src.Ref)
	if !ok || err != nil {
		return Target{}, nil, fmt.Errorf("%w: source %q", ErrBadRef, src.Ref)
	}
	if p.cfg.Offline {
		return Target{}, nil, ErrOffline
	}
	if err := safeRel(src.File); err != nil || !strings.HasSuffix(src.File, ".gguf") {
		return Target{}, nil, fmt.Errorf("source %s: file %q refused", src.Ref, src.File)
	}
	if src.Size <= 0 || src.Size > MaxFileSize || !hexDigest(src.SHA256) {
		return Target{}, nil, fmt.Errorf("source %s: size %d, sha256 %q refused", src.Ref, src.Size, src.SHA256)
	}
	f := *p.cfg.Fetcher
	f.defaults()
	f.Header = p.cfg.HF.Header()
	f.OnRetry = func(r Retry) {
		if r.Stalled {
			p.log.Warn("shard pull stalled; resuming on a new connection", "ref", src.Ref, "host", r.Host, "err", r.Err)
		} else {
			p.log.Info("shard pull attempt failed; retrying", "ref", src.Ref, "host", r.Host, "err", r.Err)
		}
	}
	return Target{URL: p.cfg.HF.ResolveURL(r.Repo, src.File), Size: src.Size, SHA256: src.SHA256}, &f, nil
}

func hexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Header reads src's GGUF header with ranged requests from its start:
// 256 KiB, then twice as much (only the bytes not yet read) until it
// parses. It also returns the bytes it read.
func (p *Puller) Header(ctx context.Context, src state.ModelSource) (*gguf.File, int64, error) {
	t, f, err := p.target(src)
	if err != nil {
		return nil, 0, err
	}
	var buf []byte
	for n := min(int64(headerFirst), src.Size); ; n = min(2*n, src.Size) {
		err := f.retry(ctx, &Stats{}, func() error {
			b, err := f.span(ctx, t, int64(len(buf)), n-int64(len(buf)))
			buf = append(buf, b...) // a retry asks for the rest
			return err
		})
		if err != nil {
			return nil, int64(len(buf)), fmt.Errorf("header of %s: %w", src.Ref, err)
		}
		hdr, err := gguf.Read(bytes.NewReader(buf), src.Size, gguf.Limits{})
		if err == nil {
			return hdr, int64(len(buf)), nil
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) || n >= src.Size || n >= maxHeader {
			return nil, int64(len(buf)), fmt.Errorf("header of %s (%d bytes read): %w", src.Ref, n, err)
		}
	}
}

// span reads bytes [off, off+n) of t's file with one ranged request,
// returning what came even when the connection broke.
func (f *Fetcher) span(ctx context.Context, t Target, off, n int64) ([]byte, error) {
	resp, err := f.get(ctx, t, fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := checkRange(resp, t, off, n); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, n))
	if err == nil && int64(len(b)) < n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return b, &retryable{err: fmt.Errorf("GET %s bytes %d-%d: %w", t.URL, off, off+n-1, err), host: resp.Request.URL.Host}
	}
	return b, nil
}

// Shard fetches only the tensors that blocks [first, last) need from
// src's file, and writes their shard to dst (atomically). A run cut off
// resumes: the ranges in are kept in dst's part file until the shard is
// written. progress gets the bytes of the ranges in, of those wanted.
func (p *Puller) Shard(ctx context.Context, src state.ModelSource, first, last int, dst string, progress func(done, size int64)) (ShardStats, error) {
	what := fmt.Sprintf("shard [%d, %d) of %s", first, last, src.Ref)
	return p.piece(ctx, src, what, dst, progress, func(hdr *gguf.File) ([][2]int64, func(io.ReaderAt) error, error) {
		ranges, err := split.ShardRanges(hdr, first, last)
		return ranges, func(part io.ReaderAt) error { return split.WriteShardFrom(hdr, part, dst, first, last, src.SHA256) }, err
	})
}

// Slice is Shard for rank of a tensor-parallel group of ranks: it fetches
// only the byte ranges the rank's slice of blocks [first, last) is cut
// from (split.TPRanges: its experts, its heads' rows, and the column-cut
// matrices about whole) and writes the slice to dst.
func (p *Puller) Slice(ctx context.Context, src state.ModelSource, first, last, rank, ranks int, dst string, progress func(done, size int64)) (ShardStats, error) {
	what := fmt.Sprintf("slice %d of %d of blocks [%d, %d) of %s", rank, ranks, first, last, src.Ref)
	return p.piece(ctx, src, what, dst, progress, func(hdr *gguf.File) ([][2]int64, func(io.ReaderAt) error, error) {
		cfg, err := model.FromGGUF(hdr)
		if err != nil {
			return nil, nil, err
		}
		plan, err := split.PlanTP(hdr, cfg, ranks)
		if err != nil {
			return nil, nil, err
		}
		if rank < 0 || rank >= len(plan) {
			return nil, nil, fmt.Errorf("rank %d of a group of %d", rank, ranks)
		}
		ranges, err := split.TPRanges(hdr, first, last, plan[rank])
		return ranges, func(part io.ReaderAt) error {
			return split.WriteTPSliceFrom(hdr, part, dst, first, last, plan[rank], src.SHA256)
		}, err
	})
}

// piece fetches the byte ranges of src's file that cut gives for its
// header into dst's part file (at their offsets in the file), then has
// cut's writer build dst from it.
func (p *Puller) piece(ctx context.Context, src state.ModelSource, what, dst string, progress func(done, size int64),
	cut func(*gguf.File) ([][2]int64, func(io.ReaderAt) error, error)) (ShardStats, error) {
	var st ShardStats
	hdr, n, err := p.Header(ctx, src)
	st.Header = n
	if err != nil {
		return st, err
	}
	ranges, write, err := cut(hdr)
	if err != nil {
		return st, fmt.Errorf("%s: %w", what, err)
	}
	for _, r := range ranges {
		st.Want += r[1]
	}
	t, f, err := p.target(src)
	if err != nil {
		return st, err
	}
	t.Dest, t.Ranges = dst, ranges
	fs, err := f.Fetch(ctx, t, progress)
	st.Fetched, st.Resumed = fs.Fetched, fs.Resumed
	if err != nil {
		return st, fmt.Errorf("%s: %w", what, err)
	}
	part, err := os.Open(PartPath(dst))
	if err != nil {
		return st, err
	}
	defer part.Close()
	if err := write(part); err != nil {
		return st, fmt.Errorf("write %s: %w", what, err)
	}
	os.Remove(PartPath(dst))
	os.Remove(StatePath(dst))
	p.log.Info("piece pulled", "what", what, "header", st.Header, "fetched", st.Fetched, "resumed", st.Resumed, "model", src.Size)
	return st, nil
}

// Whole pulls src's whole file as orrery pull does (a download in the
// state, its sha256 checked) and waits for it to end, reporting its
// progress.
func (p *Puller) Whole(ctx context.Context, src state.ModelSource, progress func(done, size int64)) (state.Download, error) {
	j, _, err := p.start(src.Ref)
	if err != nil {
		return state.Download{}, err
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// The pull goes on (a user may be waiting for it too).
			return j.snapshot(), ctx.Err()
		case <-j.done:
			d := j.snapshot()
			if d.Status != state.DownloadDone {
				return d, fmt.Errorf("pull %s: %s", src.Ref, d.Error)
			}
			return d, nil
		case <-tick.C:
			d := j.snapshot()
			progress(d.Bytes, d.Size)
		}
	}
}
