// Package shard provides the model file each rank of an instance loads:
// the whole model when a rank holds all of it, else a shard (a GGUF of the
// rank's blocks) from the cache, cut here from a local copy, or fetched
// from a node that has the model. It also serves shards to other nodes.
package shard

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/engine/model"
)

// Config wires a Cache. Every field is required but Logger.
type Config struct {
	// Dir holds cut and received shards: <hash prefix>-<first>-<last>.gguf.
	Dir string
	// Self is this node's id.
	Self string
	// Models finds the models on this node's disk.
	Models *model.Scanner
	// Peer reaches other nodes' peer APIs as http://<node id>/….
	Peer *http.Client
	// State is the node's replicated state (members, instances).
	State func() state.State
	// Holder names a node that has the model (this one first).
	Holder func(modelID string) (string, error)
	Logger *slog.Logger
}

// Cache is the shard cache of one node. Safe for concurrent use.
type Cache struct {
	cfg    Config
	log    *slog.Logger
	hashes hashCache
	cutMu  sync.Mutex // serialises cutting shards
}

// New returns a cache over cfg.Dir (created when the first shard is).
func New(cfg Config) *Cache {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{cfg: cfg, log: log.With("component", "shard")}
}

// ModelFile is supervisor.Config.ModelFile: the whole model for a
// one-rank instance on a node that has it; otherwise the rank's shard,
// from the shard cache, cut here, or fetched from a node with the model.
func (c *Cache) ModelFile(ctx context.Context, in state.Instance, rank int, progress func(supervisor.Progress)) (string, supervisor.ShardInfo, error) {
	rg := in.Ranks[rank]
	e, local := c.cfg.Models.Find(in.ModelID)
	if local && e.Error == "" && rg.FirstLayer == 0 && rg.LastLayer == e.Layers {
		return e.Path, supervisor.ShardInfo{How: "model"}, nil
	}
	if local && e.Error == "" {
		hash, err := c.hashes.get(e.Path)
		if err != nil {
			return "", supervisor.ShardInfo{}, err
		}
		path, n, err := c.cut(e.Path, hash, rg.FirstLayer, rg.LastLayer)
		return path, supervisor.ShardInfo{How: "built", Bytes: n}, err
	}
	return c.fetch(ctx, in, rg, progress)
}

func shardName(hash string, first, last int) string {
	return fmt.Sprintf("%.16s-%d-%d.gguf", hash, first, last)
}

// cut returns the cached shard of the model at path, cutting it first if
// needed.
func (c *Cache) cut(path, hash string, first, last int) (string, int64, error) {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	dst := filepath.Join(c.cfg.Dir, shardName(hash, first, last))
	if st, err := os.Stat(dst); err == nil {
		return dst, st.Size(), nil
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return "", 0, err
	}
	if err := model.WriteShard(path, dst, first, last, hash); err != nil {
		return "", 0, fmt.Errorf("cut shard [%d, %d): %w", first, last, err)
	}
	st, err := os.Stat(dst)
	if err != nil {
		return "", 0, err
	}
	c.log.Info("shard cut", "model", path, "first", first, "last", last, "bytes", st.Size())
	return dst, st.Size(), nil
}

// hashCache remembers model files' sha256 by path, size and mtime.
type hashCache struct {
	mu sync.Mutex // guards m
	m  map[string]string
}

func (h *hashCache) get(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.m[key]; ok {
		return v, nil
	}
	v, err := model.FileHash(path)
	if err != nil {
		return "", err
	}
	if h.m == nil {
		h.m = map[string]string{}
	}
	h.m[key] = v
	return v, nil
}
