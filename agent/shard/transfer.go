package shard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// Shard transfer between nodes, over the peer API: GET /internal/shard
// answers the shard file with the model's hash in HashHeader.

// Path is the peer API path shards are served under.
const Path = "/internal/shard"

// HashHeader carries the sha256 of the whole model a shard was cut from;
// it names the shard in the receiver's cache.
const HashHeader = "X-Orrery-Model-Hash"

// fetch receives the shard from a node that has the model, over the peer
// API, into the shard cache (atomically), reporting progress.
func (c *Cache) fetch(ctx context.Context, in state.Instance, modelID string, rg state.ShardRange, progress func(supervisor.Progress)) (string, supervisor.ShardInfo, error) {
	src, err := c.source(in, modelID)
	if err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	q := url.Values{"model": {modelID}, "first": {strconv.Itoa(rg.FirstLayer)}, "last": {strconv.Itoa(rg.LastLayer)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+src+Path+"?"+q.Encode(), nil)
	if err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	resp, err := c.cfg.Peer.Do(req)
	if err != nil {
		return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: %w", src, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: %s %s", src, resp.Status, b)
	}
	hash := resp.Header.Get(HashHeader)
	if len(hash) < 16 || strings.ContainsAny(hash, `/\.`) {
		return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: model hash %q", src, hash)
	}
	dst := filepath.Join(c.cfg.Dir, shardName(hash, rg.FirstLayer, rg.LastLayer))
	if st, err := os.Stat(dst); err == nil && st.Size() == resp.ContentLength {
		return dst, supervisor.ShardInfo{How: "model", From: src}, nil // cached from an earlier transfer
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	size := resp.ContentLength
	var done int64
	err = atomicfile.WriteFunc(dst, 0o600, func(w io.Writer) error {
		pw := &progressWriter{w: w, report: func(n int64) {
			done = n
			progress(supervisor.Progress{From: src, Done: n, Size: size})
		}}
		if _, err := io.CopyBuffer(pw, resp.Body, make([]byte, 1<<20)); err != nil {
			return fmt.Errorf("after %d of %d bytes: %w", done, size, err)
		}
		if size >= 0 && done != size {
			return fmt.Errorf("%d of %d bytes", done, size)
		}
		return nil
	})
	if err != nil {
		return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: %w", src, err)
	}
	c.log.Info("shard received", "from", src, "model", modelID, "first", rg.FirstLayer, "last", rg.LastLayer, "bytes", done)
	return dst, supervisor.ShardInfo{How: "transfer", From: src, Bytes: done}, nil
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
	hash, err := c.hashes.get(e.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	path, _, err := c.cut(e.Path, hash, first, last)
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
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	io.Copy(w, f)
}
