package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// benchVocab is 32 k tokens shaped like a BPE vocabulary: every byte, then
// words of 2..8 letters, some with a leading space or JSON punctuation.
func benchVocab() *Vocab {
	rng := rand.New(rand.NewPCG(5, 6))
	toks := [][]byte{nil}
	for c := range 256 {
		toks = append(toks, []byte{byte(c)})
	}
	const letters = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ0123456789\",:{}[]"
	for len(toks) < 32000 {
		n := 2 + rng.IntN(7)
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		toks = append(toks, b)
	}
	return NewVocab(len(toks), func(id int32) Token {
		if id == 0 {
			return Token{EOG: true}
		}
		return Token{Bytes: toks[id]}
	})
}

// BenchmarkMask masks a 32 k vocabulary at a structural point (after
// '{') and inside a string, where almost every token is allowed.
func BenchmarkMask(b *testing.B) {
	v := benchVocab()
	g, err := Compile(Spec{Alts: []Alt{{Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city","days"]}`)}}})
	if err != nil {
		b.Fatal(err)
	}
	logits := make([]float32, v.Len())
	for _, at := range []struct{ name, text string }{{"structure", `{`}, {"string", `{"city":"Os`}} {
		b.Run(at.name, func(b *testing.B) {
			m := NewMatcher(g, v)
			if err := m.AcceptText(at.text); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := m.Mask(logits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
