package model

import (
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// A model file's metadata is what the agent reads of every file it scans
// (modelstore's describe: FromGGUF, then tokenizer.New), in its own
// process: a file pulled from a hub must not be able to crash it.
// FuzzModelMetadata takes every family's generated metadata and changes
// one key (another value or type, an array cut short or with an element
// replaced, the key gone) or adds one: FromGGUF and tokenizer.New must
// refuse it or take it without a panic, and a tokenizer they take
// encodes, decodes and renders a chat.
func FuzzModelMetadata(f *testing.F) {
	files := familyFiles(f)
	f.Add(uint8(0), uint16(3), uint8(0), uint32(7), "x", 1.5)
	f.Add(uint8(1), uint16(20), uint8(5), uint32(3), "<s>", 0.0)
	f.Add(uint8(2), uint16(9), uint8(4), uint32(0), "", 0.0)
	f.Add(uint8(3), uint16(1), uint8(6), uint32(1), "tokenizer.ggml.bos_token_id", 0.0)
	f.Fuzz(func(t *testing.T, famIdx uint8, keyIdx uint16, op uint8, n uint32, s string, x float64) {
		fam := Families[int(famIdx)%len(Families)]
		src := files[fam]
		kv := slices.Clone(src.KV)
		i := int(keyIdx) % len(kv)
		switch op % 8 {
		case 0:
			kv[i].Value = n
		case 1:
			kv[i].Value = s
		case 2:
			kv[i].Value = float32(x)
		case 3:
			kv[i].Value = n%2 == 0
		case 4:
			kv = slices.Delete(kv, i, i+1)
		case 5: // an array cut short
			switch a := kv[i].Value.(type) {
			case []string:
				kv[i].Value = a[:int(n)%(len(a)+1)]
			case []int32:
				kv[i].Value = a[:int(n)%(len(a)+1)]
			case []float32:
				kv[i].Value = a[:int(n)%(len(a)+1)]
			}
		case 6: // an element replaced
			switch a := kv[i].Value.(type) {
			case []string:
				if len(a) > 0 {
					a = slices.Clone(a)
					a[int(n)%len(a)] = s
					kv[i].Value = a
				}
			case []int32:
				if len(a) > 0 {
					a = slices.Clone(a)
					a[int(n)%len(a)] = int32(x)
					kv[i].Value = a
				}
			case []float32:
				if len(a) > 0 {
					a = slices.Clone(a)
					a[int(n)%len(a)] = float32(x)
					kv[i].Value = a
				}
			}
		case 7: // a key added (or set twice)
			kv = append(kv, gguf.KV{Key: s, Value: n})
		}
		g := &gguf.File{KV: kv, Tensors: src.Tensors}
		if _, err := FromGGUF(g); err != nil {
			return
		}
		tok, err := tokenizer.New(g)
		if err != nil {
			return
		}
		ids, err := tok.Encode("Hello, world! 123 <s> ünï", true)
		if err != nil {
			return
		}
		tok.Decode(ids)
		tok.Chat([]runnerapi.Message{{Role: "user", Content: s}}, tokenizer.ChatOptions{Kwargs: map[string]any{"enable_thinking": n%2 == 0}})
	})
}
