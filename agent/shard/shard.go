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
	"regexp"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/pull"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/engine/modelstore"
	"github.com/orrery-cluster/orrery/engine/split"
	"github.com/orrery-cluster/orrery/internal/transfer"
)

// Config wires a Cache. Every field is required but Logger.
type Config struct {
	// Dir holds cut and received shards: <hash prefix>-<first>-<last>.gguf.
	Dir string
	// Self is this node's id.
	Self string
	// Models finds the models on this node's disk.
	Models *modelstore.Scanner
	// Peer reaches other nodes' peer APIs as http://<node id>/….
	Peer *http.Client
	// State is the node's replicated state (members, instances).
	State func() state.State
	// Holder names a node that has the model (this one first).
	Holder func(modelID string) (string, error)
	// Puller pulls the shards of an instance placed from its source
	// (nil: shards come from peers only).
	Puller *pull.Puller
	// Stall gives up on a shard transfer's connection that brings less
	// than transfer.StallBytes in that long; the next attempt resumes
	// where it stopped (0: transfer.DefaultStall).
	Stall  time.Duration
	Logger *slog.Logger
}

// Cache is the shard cache of one node. Safe for concurrent use.
type Cache struct {
	cfg    Config
	log    *slog.Logger
	hashes hashCache
	cutMu  sync.Mutex // serialises cutting shards
	pullMu sync.Mutex // serialises shard pulls (two ranks of one shard)
}

// New returns a cache over cfg.Dir (created when the first shard is).
func New(cfg Config) *Cache {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Stall <= 0 {
		cfg.Stall = transfer.DefaultStall
	}
	return &Cache{cfg: cfg, log: log.With("component", "shard")}
}

// ModelFile is supervisor.Config.ModelFile: the whole model for a
// one-rank instance on a node that has it; otherwise the rank's shard,
// from the shard cache, cut here, pulled from the model's source (only
// the rank's tensors), or fetched from a node with the model.
func (c *Cache) ModelFile(ctx context.Context, in state.Instance, rank int, progress func(supervisor.Progress)) (string, supervisor.ShardInfo, error) {
	pc := pieceOf(in, rank)
	id := in.ModelID
	if in.Source != nil {
		id = in.Source.Model // as a node that pulled it whole lists it
	}
	e, local := c.cfg.Models.Find(id)
	if local && e.Error == "" && pc.whole(e.Layers) {
		return e.Path, supervisor.ShardInfo{How: "model"}, nil
	}
	if local && e.Error == "" {
		hash, err := c.hashes.get(e.Path)
		if err != nil {
			return "", supervisor.ShardInfo{}, err
		}
		path, n, err := c.cut(e.Path, hash, pc)
		return path, supervisor.ShardInfo{How: "built", Bytes: n}, err
	}
	if in.Source != nil && c.cfg.Puller != nil {
		path, info, err := c.pull(ctx, in, rank, pc, progress)
		if err == nil || ctx.Err() != nil {
			return path, info, err
		}
		// The peer link, if a node has the model whole.
		if _, herr := c.cfg.Holder(id); herr != nil {
			return "", supervisor.ShardInfo{}, err
		}
		c.log.Warn("shard pull failed; fetching from a node with the model", "ref", in.Source.Ref, "err", err)
	}
	return c.fetch(ctx, in, id, pc, progress)
}

// piece is what a rank loads of a model: blocks [first, last), and of a
// tensor-parallel instance, slice tpRank of tpRanks of them.
type piece struct {
	first, last     int
	tpRank, tpRanks int
}

func pieceOf(in state.Instance, rank int) piece {
	rg := in.Ranks[rank]
	pc := piece{first: rg.FirstLayer, last: rg.LastLayer}
	if sh := in.Shape(); sh.TensorParallel() {
		_, pc.tpRank = sh.Stage(rank)
		pc.tpRanks = sh.Tensor
	}
	return pc
}

// whole reports whether the piece is the whole model of layers blocks.
func (pc piece) whole(layers int) bool { return pc.first == 0 && pc.last == layers && pc.tpRanks < 2 }

// tpPlanVersion names how split.PlanTP splits: a slice cut by another
// version is not reused (the runners also check that their slices tile
// the model).
const tpPlanVersion = 5 // 5: the output head split by vocabulary; 4: mixtures split (by expert columns or whole); 3: the MLP split evenly

// name is the piece's file in the cache: <hash prefix>-<first>-<last>,
// and -tp<rank>of<ranks>-v<plan version> for a slice.
func (pc piece) name(hash string) string {
	if pc.tpRanks > 1 {
		return fmt.Sprintf("%.16s-%d-%d-tp%dof%d-v%d.gguf", hash, pc.first, pc.last, pc.tpRank, pc.tpRanks, tpPlanVersion)
	}
	return shardName(hash, pc.first, pc.last)
}

// write cuts the piece of the model at path into dst.
func (pc piece) write(path, dst, hash string) error {
	if pc.tpRanks < 2 {
		return split.WriteShard(path, dst, pc.first, pc.last, hash)
	}
	plan, err := split.PlanTPFile(path, pc.tpRanks)
	if err != nil {
		return err
	}
	return split.WriteTPSlice(path, dst, pc.first, pc.last, plan[pc.tpRank], hash)
}

// pull gets the rank's part of an instance placed from its source: the
// whole file when it has one rank (its sha256 checked), else only the
// bytes of the rank's tensors (of a tensor-parallel rank, of its slice).
func (c *Cache) pull(ctx context.Context, in state.Instance, rank int, pc piece, progress func(supervisor.Progress)) (string, supervisor.ShardInfo, error) {
	src, rg := *in.Source, in.Ranks[rank]
	report := func(done, size int64) { progress(supervisor.Progress{From: src.Ref, Done: done, Size: size}) }
	if len(in.Ranks) == 1 {
		d, err := c.cfg.Puller.Whole(ctx, src, report)
		if err != nil {
			return "", supervisor.ShardInfo{}, err
		}
		e, ok := c.cfg.Models.Find(src.Model)
		if !ok || e.Error != "" {
			return "", supervisor.ShardInfo{}, fmt.Errorf("pulled %s, but no model %s is listed here: %s", src.Ref, src.Model, e.Error)
		}
		return e.Path, supervisor.ShardInfo{How: "pull", From: src.Ref, Bytes: d.Bytes - d.Resumed}, nil
	}
	if !sha256Hex.MatchString(src.SHA256) { // it names the shard's file
		return "", supervisor.ShardInfo{}, fmt.Errorf("source %s: sha256 %q refused", src.Ref, src.SHA256)
	}
	dst := filepath.Join(c.cfg.Dir, pc.name(src.SHA256))
	c.pullMu.Lock()
	defer c.pullMu.Unlock()
	if _, err := os.Stat(dst); err == nil {
		return dst, supervisor.ShardInfo{How: "model"}, nil // pulled or cut before
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	var st pull.ShardStats
	var err error
	if pc.tpRanks > 1 {
		st, err = c.cfg.Puller.Slice(ctx, src, rg.FirstLayer, rg.LastLayer, pc.tpRank, pc.tpRanks, dst, report)
	} else {
		st, err = c.cfg.Puller.Shard(ctx, src, rg.FirstLayer, rg.LastLayer, dst, report)
	}
	if err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	return dst, supervisor.ShardInfo{How: "pull", From: src.Ref, Bytes: st.Header + st.Fetched}, nil
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func shardName(hash string, first, last int) string {
	return fmt.Sprintf("%.16s-%d-%d.gguf", hash, first, last)
}

// cut returns the cached piece of the model at path, cutting it first if
// needed.
func (c *Cache) cut(path, hash string, pc piece) (string, int64, error) {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	dst := filepath.Join(c.cfg.Dir, pc.name(hash))
	if st, err := os.Stat(dst); err == nil {
		return dst, st.Size(), nil
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return "", 0, err
	}
	if err := pc.write(path, dst, hash); err != nil {
		return "", 0, fmt.Errorf("cut shard %+v: %w", pc, err)
	}
	st, err := os.Stat(dst)
	if err != nil {
		return "", 0, err
	}
	c.log.Info("shard cut", "model", path, "first", pc.first, "last", pc.last, "tpRank", pc.tpRank, "tpRanks", pc.tpRanks, "bytes", st.Size())
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
	v, err := split.FileHash(path)
	if err != nil {
		return "", err
	}
	if h.m == nil {
		h.m = map[string]string{}
	}
	h.m[key] = v
	return v, nil
}
