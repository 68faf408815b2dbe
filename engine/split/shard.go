package split

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

// ShardTensors lists the tensors rank [first, last) of a model needs:
// its blocks, token_embd on the first rank, output_norm and the output
// head (token_embd when tied) on the last, and the tensors every block
// uses (rope_freqs) on all.
func ShardTensors(f *gguf.File, cfg model.Config, first, last int) ([]gguf.TensorInfo, error) {
	if first < 0 || last > cfg.Layers || first >= last {
		return nil, fmt.Errorf("shard [%d, %d) of a %d-layer model", first, last, cfg.Layers)
	}
	want := func(name string) bool {
		switch {
		case name == "rope_freqs.weight": // every block's RoPE uses it
			return true
		case name == "token_embd.weight":
			return first == 0 || last == cfg.Layers && cfg.TiedOutput
		case name == "output_norm.weight" || strings.HasPrefix(name, "output."):
			return last == cfg.Layers
		case strings.HasPrefix(name, "blk."):
			var n int
			if _, err := fmt.Sscanf(name, "blk.%d.", &n); err != nil {
				return false
			}
			return n >= first && n < last
		}
		return false
	}
	var out []gguf.TensorInfo
	for _, t := range f.Tensors {
		if want(t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// ShardSize is the number of tensor bytes rank [first, last) holds.
func ShardSize(f *gguf.File, cfg model.Config, first, last int) (uint64, error) {
	ts, err := ShardTensors(f, cfg, first, last)
	var n uint64
	for _, t := range ts {
		n += t.Size
	}
	return n, err
}

// WriteShard writes the shard of blocks [first, last) of the model at src
// to dst, atomically: the model's metadata plus the orrery.shard keys, and
// the tensors ShardTensors lists, copied byte for byte. sourceHash names
// the model the shard came from.
func WriteShard(src, dst string, first, last int, sourceHash string) error {
	return fromFile(src, func(f *gguf.File, r io.ReaderAt) error {
		return WriteShardFrom(f, r, dst, first, last, sourceHash)
	})
}

// fromFile runs write on the model file at src (its header and its data),
// naming src in write's error.
func fromFile(src string, write func(*gguf.File, io.ReaderAt) error) error {
	f, err := gguf.ReadFile(src)
	if err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := write(f, in); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}

// WriteShardFrom is WriteShard from a model's header f and data r, which
// need hold only the shard's tensors (a sparse file of their ranges).
func WriteShardFrom(f *gguf.File, r io.ReaderAt, dst string, first, last int, sourceHash string) error {
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return err
	}
	if cfg.ShardLast != 0 {
		return errors.New("the model is itself a shard")
	}
	ts, err := ShardTensors(f, cfg, first, last)
	if err != nil {
		return err
	}
	kvs := make([]gguf.KV, 0, len(f.KV)+4)
	for _, kv := range f.KV {
		if !strings.HasPrefix(kv.Key, "orrery.shard.") {
			kvs = append(kvs, kv)
		}
	}
	kvs = append(kvs, gguf.KV{Key: model.KeyShardFirst, Value: uint32(first)}, gguf.KV{Key: model.KeyShardLast, Value: uint32(last)},
		gguf.KV{Key: model.KeyShardTied, Value: cfg.TiedOutput}, gguf.KV{Key: model.KeyShardSource, Value: sourceHash})
	wts := make([]gguf.WriteTensor, len(ts))
	for i, t := range ts {
		off, size := TensorRange(f, t)
		wts[i] = gguf.WriteTensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Data: func(w io.Writer) error {
			n, err := io.Copy(w, io.NewSectionReader(r, off, size))
			if err == nil && n != size {
				err = fmt.Errorf("tensor %s: copied %d of %d bytes", t.Name, n, size)
			}
			return err
		}}
	}
	return gguf.WriteFile(dst, kvs, wts)
}

// TensorRange is where a tensor's data lies in its file: offset, length.
func TensorRange(f *gguf.File, t gguf.TensorInfo) (int64, int64) {
	return f.DataOffset + int64(t.Offset), int64(t.Size)
}

// rangeGap is the most bytes between two wanted tensors that ShardRanges
// fetches rather than split the range: a request costs more.
const rangeGap = 64 << 10

// ShardRanges are the byte ranges {offset, length} of the file that rank
// [first, last) needs, sorted, with adjacent tensors merged: what a node
// fetches to build its shard without the rest of the model.
func ShardRanges(f *gguf.File, first, last int) ([][2]int64, error) {
	return pieceRanges(f, first, last, func(_ model.Config, t gguf.TensorInfo, off int64) ([]span, error) {
		return []span{{off, int64(t.Size)}}, nil
	})
}

// pieceRanges are the byte ranges that the tensors of blocks [first, last)
// need, each tensor's from spansOf (given its offset in the file), sorted
// and merged.
func pieceRanges(f *gguf.File, first, last int, spansOf func(cfg model.Config, t gguf.TensorInfo, off int64) ([]span, error)) ([][2]int64, error) {
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	ts, err := ShardTensors(f, cfg, first, last)
	if err != nil {
		return nil, err
	}
	var rs [][2]int64
	for _, t := range ts {
		off, _ := TensorRange(f, t)
		spans, err := spansOf(cfg, t, off)
		if err != nil {
			return nil, err
		}
		for _, sp := range spans {
			if sp.n > 0 {
				rs = append(rs, [2]int64{sp.off, sp.n})
			}
		}
	}
	return mergeRanges(rs), nil
}

// mergeRanges sorts ranges {offset, length} and merges those less than
// rangeGap apart.
func mergeRanges(rs [][2]int64) [][2]int64 {
	slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int64
	for _, r := range rs {
		if k := len(out) - 1; k >= 0 && r[0] <= out[k][0]+out[k][1]+rangeGap {
			// Adjacent but for alignment padding (or, in a malformed
			// file, overlapping): one range.
			out[k][1] = max(out[k][1], r[0]+r[1]-out[k][0])
			continue
		}
		out = append(out, r)
	}
	return out
}

// FileHash is the sha256 of a file, hex: a model's identity across nodes.
func FileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
