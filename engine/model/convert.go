package model

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/safetensors"
)

// ContinueTemplate is the chat template of a base model (the trained KJV
// models): the turns' text, joined by a space, for the model to continue.
const ContinueTemplate = `{%- for message in messages %}{{- message['content'] }}{%- if not loop.last %}{{- ' ' }}{%- endif %}{%- endfor %}`

// Convert writes the llama-architecture weights of a safetensors file, as
// models/kjv/train.py saves them (GGUF tensor names and layout, F32, and
// the shape and SentencePiece vocabulary in its metadata), as a GGUF model
// of type typ (F32, F16, BF16, Q8_0 or Q4_0) at dst, atomically. It
// writes the metadata gen-model writes for the same shape, with the file's
// vocabulary, name and ContinueTemplate.
func Convert(src, dst, typ string) error {
	fh, err := os.Open(src)
	if err != nil {
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	st, err := safetensors.Parse(fh, fi.Size())
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	o, voc, err := convertOptions(st.Metadata, typ)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	kvs, err := genMetadata(o)
	if err != nil {
		return err
	}
	name := st.Metadata["name"]
	for i := range kvs {
		switch kvs[i].Key {
		case "tokenizer.ggml.tokens":
			kvs[i].Value = voc.Tokens
		case "tokenizer.ggml.scores":
			kvs[i].Value = voc.Scores
		case "tokenizer.ggml.token_type":
			kvs[i].Value = voc.Types
		case "tokenizer.ggml.eos_token_id":
			kvs[i].Value = uint32(voc.EOS)
		case "general.name":
			kvs[i].Value = name + "-" + o.Type
		case "general.description":
			kvs[i].Value = "trained weights (" + name + ", models/kjv/train.py); held-out loss " + st.Metadata["heldout_loss"]
		}
	}
	ts := genTensors(o)
	used := map[string]bool{}
	for i, t := range ts {
		src, ok := st.Tensor(t.Name)
		if !ok {
			return fmt.Errorf("%s: no tensor %q", fi.Name(), t.Name)
		}
		shape := make([]uint64, len(src.Shape))
		for j, d := range src.Shape {
			shape[len(shape)-1-j] = uint64(d)
		}
		if !slices.Equal(shape, t.Dims) {
			return fmt.Errorf("%s: tensor %q has shape %v, want %v (row-major)", fi.Name(), t.Name, src.Shape, reversed(t.Dims))
		}
		used[t.Name] = true
		ts[i].Data = convertData(st, src, t.Type, int(t.Dims[0]))
	}
	for _, t := range st.Tensors {
		if !used[t.Name] {
			return fmt.Errorf("%s: tensor %q is not part of a %s model", fi.Name(), t.Name, o.Arch)
		}
	}
	return gguf.WriteFile(dst, kvs, ts)
}

func reversed(d []uint64) []uint64 {
	r := slices.Clone(d)
	slices.Reverse(r)
	return r
}

// convertData writes t's values as typ, a row of row values at a time.
func convertData(st *safetensors.File, t safetensors.Tensor, typ gguf.TensorType, row int) func(io.Writer) error {
	return func(w io.Writer) error {
		vals, err := st.Floats(t)
		if err != nil {
			return err
		}
		var buf []byte
		for r := 0; r+row <= len(vals); r += row {
			if buf, err = appendRow(buf[:0], typ, vals[r:r+row]); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
}

// trainedVocab is a SentencePiece vocabulary from the training metadata.
type trainedVocab struct {
	Tokens []string
	Scores []float32
	Types  []int32
	EOS    int
}

// convertOptions reads the model's shape and vocabulary from the training
// script's metadata (every value a string).
func convertOptions(meta map[string]string, typ string) (GenOptions, trainedVocab, error) {
	var v trainedVocab
	if a := meta["arch"]; a != "llama" {
		return GenOptions{}, v, fmt.Errorf("metadata arch %q: only llama converts", a)
	}
	num := func(k string) (int, error) {
		n, err := strconv.Atoi(meta[k])
		if err != nil || n < 1 || n > 1<<20 {
			return 0, fmt.Errorf("metadata %q = %q: want a count 1..%d", k, meta[k], 1<<20)
		}
		return n, nil
	}
	o := GenOptions{Arch: "llama", Type: typ, ChatTemplate: ContinueTemplate}
	for k, dst := range map[string]*int{"layers": &o.Layers, "dim": &o.Dim, "heads": &o.Heads, "ff": &o.FFDim, "context_length": &o.ContextLen} {
		n, err := num(k)
		if err != nil {
			return o, v, err
		}
		*dst = n
	}
	for k, dst := range map[string]any{"tokens": &v.Tokens, "scores": &v.Scores, "token_types": &v.Types} {
		if err := json.Unmarshal([]byte(meta[k]), dst); err != nil {
			return o, v, fmt.Errorf("metadata %q: want a JSON array: %w", k, err)
		}
	}
	if len(v.Scores) != len(v.Tokens) || len(v.Types) != len(v.Tokens) {
		return o, v, fmt.Errorf("metadata: %d tokens, %d scores and %d types: want as many of each", len(v.Tokens), len(v.Scores), len(v.Types))
	}
	// genMetadata's special ids: unknown 0, BOS 1 (SentencePiece's
	// defaults, as the script trains it); EOS is "</s>".
	v.EOS = slices.Index(v.Tokens, "</s>")
	if len(v.Tokens) < 3 || v.Tokens[0] != "<unk>" || v.Tokens[1] != "<s>" || v.EOS < 0 {
		return o, v, fmt.Errorf("metadata tokens: want <unk> and <s> first and a </s>")
	}
	o.Vocab = len(v.Tokens)
	if err := o.fill(); err != nil {
		return o, v, err
	}
	return o, v, nil
}
