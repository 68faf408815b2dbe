package split

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

// Cutting a slice file out of a model: which rows, columns or matrices of
// each tensor a rank keeps (tpCut), the byte ranges that makes in the
// model's file (TPRanges, for pulls from a source), and the slice's GGUF.

// tpCut is how one tensor is cut for a slice: rows and columns are
// [from, to) ranges, concatenated in order (a fused matrix takes ranges of
// each of its parts), of a matrix or of each matrix of a 3-dimensional
// tensor (the experts). nil ranges keep the dimension whole. planes, set,
// keeps matrices [from, to) of a 3-dimensional tensor; zero writes zeros
// in the tensor's shape (a bias that only rank 0 adds).
type tpCut struct {
	rows, cols [][2]uint64
	planes     *[2]uint64
	zero       bool
}

// tpCutFor is the cut of tensor name (with its blk.N. prefix) for slice s
// of a model shaped cfg; drop is true for a tensor the rank does not hold.
func tpCutFor(name string, cfg model.Config, s model.TPSlice) (cut tpCut, drop bool) {
	hd := uint64(cfg.HeadDim)
	q := [2]uint64{uint64(s.Head) * hd, uint64(s.Head+s.Heads) * hd}
	kv := [2]uint64{uint64(s.KVHead) * hd, uint64(s.KVHead+s.KVHeads) * hd}
	ff := [2]uint64{uint64(s.FF), uint64(s.FF + s.FFDim)}
	if name == "output.weight" {
		if s.VocabRows > 0 { // the rank's rows of the head
			return tpCut{rows: [][2]uint64{{uint64(s.VocabFirst), uint64(s.VocabFirst + s.VocabRows)}}}, false
		}
		return tpCut{}, s.Rank != 0
	}
	i := strings.Index(name, ".")
	j := -1
	if i >= 0 {
		j = strings.Index(name[i+1:], ".")
	}
	if !strings.HasPrefix(name, "blk.") || j < 0 {
		return tpCut{}, false
	}
	suffix := name[i+1+j+1:]
	if cfg.MLA {
		if cut, ok := latentCut(suffix, cfg, s); ok {
			return cut, false
		}
	}
	switch suffix {
	case "attn_q.weight":
		return tpCut{rows: [][2]uint64{q}}, false
	case "attn_k.weight", "attn_v.weight":
		return tpCut{rows: [][2]uint64{kv}}, false
	case "attn_q.bias":
		return tpCut{cols: [][2]uint64{q}}, false
	case "attn_k.bias", "attn_v.bias":
		return tpCut{cols: [][2]uint64{kv}}, false
	case "attn_qkv.weight":
		qd, kd := uint64(s.FullHeads)*hd, uint64(s.FullKVHeads)*hd
		return tpCut{rows: [][2]uint64{q, {qd + kv[0], qd + kv[1]}, {qd + kd + kv[0], qd + kd + kv[1]}}}, false
	case "attn_output.weight":
		return tpCut{cols: [][2]uint64{q}}, false
	case "attn_sinks.weight":
		return tpCut{cols: [][2]uint64{{uint64(s.Head), uint64(s.Head + s.Heads)}}}, false
	case "ffn_gate.weight":
		return tpCut{rows: [][2]uint64{ff}}, false
	case "ffn_up.weight":
		if cfg.FusedGateUp { // gate's rows, then up's
			full := uint64(s.FullFF)
			return tpCut{rows: [][2]uint64{ff, {full + ff[0], full + ff[1]}}}, false
		}
		return tpCut{rows: [][2]uint64{ff}}, false
	case "ffn_down.weight":
		return tpCut{cols: [][2]uint64{ff}}, false
	case "ffn_gate_shexp.weight", "ffn_up_shexp.weight":
		return tpCut{rows: [][2]uint64{{uint64(s.Shared), uint64(s.Shared + s.SharedFF)}}}, false
	case "ffn_down_shexp.weight":
		return tpCut{cols: [][2]uint64{{uint64(s.Shared), uint64(s.Shared + s.SharedFF)}}}, false
	}
	if s.ExpertColumns {
		switch name[i+1+j+1:] {
		case "ffn_gate_exps.weight", "ffn_up_exps.weight":
			return tpCut{rows: [][2]uint64{ff}}, false
		case "ffn_down_exps.weight", "ffn_gate_exps.bias", "ffn_up_exps.bias":
			return tpCut{cols: [][2]uint64{ff}}, false
		case "ffn_down_exps.bias": // added after the experts' sum: once
			return tpCut{zero: s.Rank != 0}, false
		}
	}
	if s.FullExperts > 0 && !s.ExpertColumns {
		e := [2]uint64{uint64(s.Expert), uint64(s.Expert + s.Experts)}
		switch name[i+1+j+1:] {
		case "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight":
			return tpCut{planes: &e}, false
		case "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias":
			return tpCut{rows: [][2]uint64{e}}, false
		}
	}
	return tpCut{}, false
}

// latentCut is the cut of a deepseek2 block's attention tensor (by its
// name after blk.N.) for slice s: its heads' rows of the queries, their
// matrices of attn_k_b and attn_v_b, their values' columns of
// attn_output; the compressions whole (see splitLatentHeads). false: not
// an attention tensor.
func latentCut(suffix string, cfg model.Config, s model.TPSlice) (tpCut, bool) {
	h := [2]uint64{uint64(s.Head), uint64(s.Head + s.Heads)}
	switch kd, vd := uint64(cfg.KeyDimMLA), uint64(cfg.ValueDimMLA); suffix {
	case "attn_q.weight", "attn_q_b.weight":
		return tpCut{rows: [][2]uint64{{h[0] * kd, h[1] * kd}}}, true
	case "attn_k_b.weight", "attn_v_b.weight":
		return tpCut{planes: &h}, true
	case "attn_output.weight":
		return tpCut{cols: [][2]uint64{{h[0] * vd, h[1] * vd}}}, true
	}
	return tpCut{}, strings.HasPrefix(suffix, "attn_")
}

// span is a range of a file's bytes: offset, length.
type span struct{ off, n int64 }

// spans returns the cut tensor's dims and the byte ranges of the file
// (the tensor's data at off) that make its data, in order.
func (cut tpCut) spans(t gguf.TensorInfo, off int64) ([]uint64, []span, error) {
	switch {
	case cut.zero:
		return t.Dims, nil, nil
	case cut.planes != nil:
		return cut.planeSpans(t, off)
	case len(t.Dims) == 3 && (cut.rows != nil || cut.cols != nil):
		// The same cut of each matrix.
		m := gguf.TensorInfo{Name: t.Name, Type: t.Type, Dims: t.Dims[:2]}
		rowBytes, ok := t.Type.RowBytes(t.Dims[0])
		if !ok {
			return nil, nil, fmt.Errorf("tensor %s: %d values of %s", t.Name, t.Dims[0], t.Type)
		}
		plane := int64(rowBytes * t.Dims[1])
		var out []span
		var dims []uint64
		for p := range int64(t.Dims[2]) {
			d, sp, err := tpCut{rows: cut.rows, cols: cut.cols}.spans(m, off+p*plane)
			if err != nil {
				return nil, nil, err
			}
			dims, out = d, append(out, sp...)
		}
		return append(dims, t.Dims[2]), out, nil
	case len(t.Dims) == 0 || len(t.Dims) > 2:
		if cut.rows != nil || cut.cols != nil {
			return nil, nil, fmt.Errorf("tensor %s of %d dims cannot be cut", t.Name, len(t.Dims))
		}
		return t.Dims, []span{{off, int64(t.Size)}}, nil
	}
	ne0, ne1 := t.Dims[0], uint64(1)
	if len(t.Dims) == 2 {
		ne1 = t.Dims[1]
	}
	rowBytes, ok := t.Type.RowBytes(ne0)
	if !ok {
		return nil, nil, fmt.Errorf("tensor %s: %d values of %s", t.Name, ne0, t.Type)
	}
	rows := cut.rows
	if rows == nil {
		rows = [][2]uint64{{0, ne1}}
	}
	cols := cut.cols
	if cols == nil {
		cols = [][2]uint64{{0, ne0}}
	}
	var spans []span
	var outRows, outCols uint64
	for _, c := range cols {
		if c[0] >= c[1] || c[1] > ne0 {
			return nil, nil, fmt.Errorf("tensor %s: columns [%d, %d) of %d", t.Name, c[0], c[1], ne0)
		}
		outCols += c[1] - c[0]
	}
	for _, rr := range rows {
		if rr[0] >= rr[1] || rr[1] > ne1 {
			return nil, nil, fmt.Errorf("tensor %s: rows [%d, %d) of %d", t.Name, rr[0], rr[1], ne1)
		}
		outRows += rr[1] - rr[0]
		if cut.cols == nil { // whole rows: one range
			spans = append(spans, span{off + int64(rr[0]*rowBytes), int64((rr[1] - rr[0]) * rowBytes)})
			continue
		}
		for row := rr[0]; row < rr[1]; row++ {
			for _, c := range cols {
				at, ok1 := t.Type.RowBytes(c[0])
				n, ok2 := t.Type.RowBytes(c[1] - c[0])
				if !ok1 || !ok2 {
					return nil, nil, fmt.Errorf("tensor %s: columns [%d, %d) do not fall on %s blocks", t.Name, c[0], c[1], t.Type)
				}
				spans = append(spans, span{off + int64(row*rowBytes+at), int64(n)})
			}
		}
	}
	dims := []uint64{outCols}
	if len(t.Dims) == 2 {
		dims = append(dims, outRows)
	}
	return dims, spans, nil
}

// planeSpans keeps a range of a 3-dimensional tensor's matrices: one
// contiguous range of bytes.
func (cut tpCut) planeSpans(t gguf.TensorInfo, off int64) ([]uint64, []span, error) {
	p := *cut.planes
	if len(t.Dims) != 3 || p[0] >= p[1] || p[1] > t.Dims[2] {
		return nil, nil, fmt.Errorf("tensor %s of dims %v: matrices [%d, %d)", t.Name, t.Dims, p[0], p[1])
	}
	rowBytes, ok := t.Type.RowBytes(t.Dims[0])
	if !ok {
		return nil, nil, fmt.Errorf("tensor %s: %d values of %s", t.Name, t.Dims[0], t.Type)
	}
	plane := int64(rowBytes * t.Dims[1])
	return []uint64{t.Dims[0], t.Dims[1], p[1] - p[0]}, []span{{off + int64(p[0])*plane, int64(p[1]-p[0]) * plane}}, nil
}

// apply returns the cut tensor's dims and a writer of its bytes, read
// from r at the tensor's offset off.
func (cut tpCut) apply(t gguf.TensorInfo, r io.ReaderAt, off int64) ([]uint64, func(io.Writer) error, error) {
	dims, spans, err := cut.spans(t, off)
	if err != nil {
		return nil, nil, err
	}
	if cut.zero {
		return dims, func(w io.Writer) error {
			_, err := io.CopyN(w, zeros{}, int64(t.Size))
			return err
		}, nil
	}
	write := func(w io.Writer) error {
		var buf []byte
		for _, s := range spans {
			if int64(cap(buf)) < s.n {
				buf = make([]byte, min(s.n, 4<<20))
			}
			for done := int64(0); done < s.n; {
				b := buf[:min(s.n-done, int64(cap(buf)))]
				if _, err := r.ReadAt(b, s.off+done); err != nil {
					return fmt.Errorf("tensor %s: %w", t.Name, err)
				}
				if _, err := w.Write(b); err != nil {
					return err
				}
				done += int64(len(b))
			}
		}
		return nil
	}
	return dims, write, nil
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TPRanges are the byte ranges {offset, length} of the model file f that
// slice s of blocks [first, last) is cut from, sorted and merged as
// ShardRanges merges: what a node fetches to build its slice without the
// rest of the model. Experts and rows cut whole are one range each; a
// matrix cut by columns (attn_output, ffn_down) needs a piece of every
// row, and pieces closer than rangeGap merge, so it costs about the
// whole matrix unless its rows are long.
func TPRanges(f *gguf.File, first, last int, s model.TPSlice) ([][2]int64, error) {
	return pieceRanges(f, first, last, func(cfg model.Config, t gguf.TensorInfo, off int64) ([]span, error) {
		cut, drop := tpCutFor(t.Name, cfg, s)
		if drop {
			return nil, nil
		}
		_, spans, err := cut.spans(t, off)
		return spans, err
	})
}

// WriteTPSlice writes rank s.Rank's slice of blocks [first, last) of the
// model at src to dst, atomically (see engine/model's slice.go for
// what a slice holds). sourceHash names the model it came from.
func WriteTPSlice(src, dst string, first, last int, s model.TPSlice, sourceHash string) error {
	return fromFile(src, func(f *gguf.File, r io.ReaderAt) error {
		return WriteTPSliceFrom(f, r, dst, first, last, s, sourceHash)
	})
}

// WriteTPSliceFrom is WriteTPSlice from a model's header f and data r.
func WriteTPSliceFrom(f *gguf.File, r io.ReaderAt, dst string, first, last int, s model.TPSlice, sourceHash string) error {
	cfg, err := model.FromGGUF(f)
	if err != nil {
		return err
	}
	if cfg.ShardLast != 0 || cfg.TP != nil {
		return errors.New("the model is itself a shard")
	}
	split := ExpertsWhole
	if s.ExpertColumns {
		split = ExpertsColumns
	}
	plan, err := PlanTPExperts(f, cfg, s.Ranks, split)
	if err != nil {
		return err
	}
	if s.Rank < 0 || s.Rank >= s.Ranks || plan[s.Rank] != s {
		return fmt.Errorf("%w: slice %+v is not rank %d of the plan", ErrTPSplit, s, s.Rank)
	}
	ts, err := ShardTensors(f, cfg, first, last)
	if err != nil {
		return err
	}
	kvs := make([]gguf.KV, 0, len(f.KV)+16)
	for _, kv := range f.KV {
		if !strings.HasPrefix(kv.Key, "orrery.shard.") && !strings.HasPrefix(kv.Key, "orrery.tp.") {
			kvs = append(kvs, kv)
		}
	}
	u := func(k string, v int) gguf.KV { return gguf.KV{Key: k, Value: uint32(v)} }
	kvs = append(kvs, u(model.KeyShardFirst, first), u(model.KeyShardLast, last),
		gguf.KV{Key: model.KeyShardTied, Value: cfg.TiedOutput}, gguf.KV{Key: model.KeyShardSource, Value: sourceHash},
		u(model.KeyTPRank, s.Rank), u(model.KeyTPRanks, s.Ranks), u(model.KeyTPHead, s.Head), u(model.KeyTPHeads, s.Heads), u(model.KeyTPKVHead, s.KVHead),
		u(model.KeyTPKVHeads, s.KVHeads), u(model.KeyTPFF, s.FF), u(model.KeyTPFFDim, s.FFDim), u(model.KeyTPFullHeads, s.FullHeads),
		u(model.KeyTPFullKVHeads, s.FullKVHeads), u(model.KeyTPFullFF, s.FullFF))
	if s.FullExperts > 0 {
		kvs = append(kvs, u(model.KeyTPExpert, s.Expert), u(model.KeyTPExperts, s.Experts), u(model.KeyTPFullExperts, s.FullExperts),
			gguf.KV{Key: model.KeyTPExpertColumns, Value: s.ExpertColumns})
	}
	if s.VocabRows > 0 {
		kvs = append(kvs, u(model.KeyTPVocabFirst, s.VocabFirst), u(model.KeyTPVocabRows, s.VocabRows))
	}
	if s.FullSharedFF > 0 {
		kvs = append(kvs, u(model.KeyTPSharedFirst, s.Shared), u(model.KeyTPSharedFF, s.SharedFF), u(model.KeyTPFullSharedFF, s.FullSharedFF))
	}
	var wts []gguf.WriteTensor
	for _, t := range ts {
		cut, drop := tpCutFor(t.Name, cfg, s)
		if drop {
			continue
		}
		off, _ := TensorRange(f, t)
		dims, write, err := cut.apply(t, r, off)
		if err != nil {
			return err
		}
		wts = append(wts, gguf.WriteTensor{Name: t.Name, Type: t.Type, Dims: dims, Data: write})
	}
	return gguf.WriteFile(dst, kvs, wts)
}
