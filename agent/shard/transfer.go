package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/internal/transfer"
)

// Shard transfer between nodes, over the peer API: GET /internal/shard
// answers the shard file (or the Range asked for) with the model's hash in
// HashHeader.

// Path is the peer API path shards are served under.
const Path = "/internal/shard"

// HashHeader carries the sha256 of the whole model a shard was cut from;
// it names the shard in the receiver's cache.
const HashHeader = "X-Orrery-Model-Hash"

// Shard transfers resume: an attempt that breaks, or whose connection
// stalls (transfer.Watch), is followed by one that asks for the bytes not
// in yet (Range), after a backoff.
const (
	fetchAttempts = 8
	maxBackoff    = 10 * time.Second
	// headerWait bounds the wait for the answer's headers: the far side
	// cuts the shard from its model before it answers (once; it is cached
	// for the next asker), which takes a while for a model of many GB.
	headerWait = 5 * time.Minute
)

// fetch receives the shard from a node that has the model, over the peer
// API, into the shard cache (atomically), reporting progress.
func (c *Cache) fetch(ctx context.Context, in state.Instance, modelID string, pc piece, progress func(supervisor.Progress)) (string, supervisor.ShardInfo, error) {
	src, err := c.source(in, modelID)
	if err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	q := url.Values{"model": {modelID}, "first": {strconv.Itoa(pc.first)}, "last": {strconv.Itoa(pc.last)}}
	if pc.tpRanks > 1 {
		q.Set("tp", strconv.Itoa(pc.tpRank))
		q.Set("of", strconv.Itoa(pc.tpRanks))
	}
	f := &shardFetch{c: c, src: src, url: "http://" + src + Path + "?" + q.Encode(), pc: pc, size: -1, progress: progress}
	defer f.discard()
	backoff := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cached, err := f.attempt(ctx)
		switch {
		case err == nil && cached:
			return f.dst, supervisor.ShardInfo{How: "model", From: src}, nil // from an earlier transfer
		case err == nil:
			if err := f.commit(); err != nil {
				return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: %w", src, err)
			}
			c.log.Info("shard received", "from", src, "model", modelID, "first", pc.first, "last", pc.last, "tpRank", pc.tpRank, "tpRanks", pc.tpRanks, "bytes", f.done, "attempts", attempt)
			return f.dst, supervisor.ShardInfo{How: "transfer", From: src, Bytes: f.done}, nil
		}
		var r retryable
		if !errors.As(err, &r) || ctx.Err() != nil || attempt == fetchAttempts {
			return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s (attempt %d): %w", src, attempt, err)
		}
		if errors.Is(err, transfer.ErrStalled) {
			c.log.Warn("shard transfer stalled; resuming on a new connection", "from", src, "model", modelID, "at", f.done, "of", f.size, "err", err)
		} else {
			c.log.Info("shard transfer broke off; resuming", "from", src, "model", modelID, "at", f.done, "of", f.size, "err", err)
		}
		select {
		case <-ctx.Done():
			return "", supervisor.ShardInfo{}, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// retryable marks an attempt's failure as worth another attempt.
type retryable struct{ error }

func (r retryable) Unwrap() error { return r.error }

// shardFetch is one shard transfer, over as many attempts as it takes.
type shardFetch struct {
	c        *Cache
	src, url string
	pc       piece
	progress func(supervisor.Progress)

	hash string   // the model's, from the first answer
	dst  string   // the shard's place in the cache
	size int64    // the shard's bytes (-1: not known yet)
	done int64    // bytes in part
	part *os.File // where they are (nil before the first byte)
}

// attempt asks for the bytes not in yet and appends them to the part
// file. cached: the shard was in the cache already.
func (f *shardFetch) attempt(ctx context.Context) (cached bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return false, err
	}
	if f.done > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", f.done))
	}
	late := time.AfterFunc(headerWait, cancel)
	resp, err := f.c.cfg.Peer.Do(req)
	headersIn := late.Stop()
	if err != nil {
		if !headersIn {
			err = fmt.Errorf("no answer within %v: %w", headerWait, err)
		}
		return false, retryable{err}
	}
	defer resp.Body.Close()
	switch {
	case f.done == 0 && resp.StatusCode == http.StatusOK:
	case f.done > 0 && resp.StatusCode == http.StatusPartialContent:
		if cr := resp.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes %d-%d/%d", f.done, f.size-1, f.size) {
			return false, fmt.Errorf("resumed at byte %d of %d, the answer is %q", f.done, f.size, cr)
		}
	case resp.StatusCode >= 500:
		return false, retryable{fmt.Errorf("%s", resp.Status)}
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return false, fmt.Errorf("%s %s", resp.Status, b)
	}
	hash := resp.Header.Get(HashHeader)
	if len(hash) < 16 || strings.ContainsAny(hash, `/\.`) {
		return false, fmt.Errorf("model hash %q", hash)
	}
	if f.hash == "" {
		f.hash, f.size = hash, resp.ContentLength
		f.dst = filepath.Join(f.c.cfg.Dir, f.pc.name(hash))
		if st, err := os.Stat(f.dst); err == nil && st.Size() == f.size {
			return true, nil
		}
		if f.size < 0 {
			return false, errors.New("the answer has no length")
		}
		if err := os.MkdirAll(f.c.cfg.Dir, 0o700); err != nil {
			return false, err
		}
		if f.part, err = os.CreateTemp(f.c.cfg.Dir, filepath.Base(f.dst)+".part-*"); err != nil {
			return false, err
		}
	} else if hash != f.hash {
		return false, fmt.Errorf("the model changed on %s while its shard came (hash %s, then %s)", f.src, f.hash, hash)
	}
	body := transfer.Watch(resp.Body, f.c.cfg.Stall, f.src)
	defer body.Close()
	buf := make([]byte, 1<<20)
	for f.done < f.size {
		n, err := body.Read(buf[:min(int64(len(buf)), f.size-f.done)])
		if n > 0 {
			if _, werr := f.part.WriteAt(buf[:n], f.done); werr != nil {
				return false, werr
			}
			f.done += int64(n)
			if f.progress != nil {
				f.progress(supervisor.Progress{From: f.src, Done: f.done, Size: f.size})
			}
		}
		if err == io.EOF && f.done < f.size {
			err = io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return false, retryable{fmt.Errorf("after %d of %d bytes: %w", f.done, f.size, err)}
		}
	}
	return false, nil
}

// commit puts the complete part file in the cache, atomically.
func (f *shardFetch) commit() error {
	if err := f.part.Sync(); err != nil {
		return err
	}
	if err := f.part.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.part.Name(), f.dst); err != nil {
		return err
	}
	f.part = nil
	return nil
}

// discard removes the part file of a transfer that did not complete.
func (f *shardFetch) discard() {
	if f.part != nil {
		f.part.Close()
		os.Remove(f.part.Name())
	}
}

// source is the node to fetch from: the instance's owner placed it from
// its own copy of the model (unless it placed it from its source); if it
// is gone, any node that has the model.
func (c *Cache) source(in state.Instance, modelID string) (string, error) {
	src := in.NodeID
	if _, member := c.cfg.State().NodeIdentities[src]; member && src != c.cfg.Self && in.Source == nil {
		return src, nil
	}
	src, err := c.cfg.Holder(modelID)
	if err != nil {
		return "", err
	}
	if src == c.cfg.Self {
		return "", fmt.Errorf("model %s is listed here but not found", modelID)
	}
	return src, nil
}

// progressWriter reports the bytes written so far after each write.
type progressWriter struct {
	w      io.Writer
	n      int64
	report func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.report(p.n)
	return n, err
}

// ServeHTTP answers a peer's GET /internal/shard: the shard file, cut
// here if needed, with the model's hash.
func (c *Cache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	e, ok := c.cfg.Models.Find(q.Get("model"))
	if !ok || e.Error != "" {
		http.Error(w, fmt.Sprintf("model %q is not on node %s", q.Get("model"), c.cfg.Self), http.StatusNotFound)
		return
	}
	first, err1 := strconv.Atoi(q.Get("first"))
	last, err2 := strconv.Atoi(q.Get("last"))
	if err1 != nil || err2 != nil || first < 0 || last > e.Layers || first >= last {
		http.Error(w, fmt.Sprintf("layers [%s, %s) of a %d-layer model", q.Get("first"), q.Get("last"), e.Layers), http.StatusBadRequest)
		return
	}
	pc := piece{first: first, last: last}
	if q.Has("of") {
		tp, err3 := strconv.Atoi(q.Get("tp"))
		of, err4 := strconv.Atoi(q.Get("of"))
		if err3 != nil || err4 != nil || of < 2 || of > model.MaxTPRanks || tp < 0 || tp >= of {
			http.Error(w, fmt.Sprintf("tensor-parallel slice %s of %s", q.Get("tp"), q.Get("of")), http.StatusBadRequest)
			return
		}
		pc.tpRank, pc.tpRanks = tp, of
	}
	hash, err := c.hashes.get(e.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	path, _, err := c.cut(e.Path, hash, pc)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set(HashHeader, hash)
	w.Header().Set("Content-Type", "application/octet-stream")
	// Ranges too: a receiver whose transfer broke off asks for the rest.
	http.ServeContent(w, r, "", st.ModTime(), f)
}
