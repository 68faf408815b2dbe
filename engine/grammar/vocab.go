package grammar

import "slices"

// Vocab is a model's tokens as the grammar sees them: each token's bytes
// in a trie, so that masking walks shared prefixes once, and the
// end-of-generation tokens. Build it once per model; it is immutable.
type Vocab struct {
	n     int
	toks  [][]byte
	eogs  []int32
	isEOG []bool
	nodes []trieNode
}

type trieNode struct {
	// children sorted by byte
	keys []byte
	kids []int32
	// ends: the tokens whose bytes end here
	ends []int32
}

// Token is what NewVocab needs of a token.
type Token struct {
	// Bytes are the token's text; empty for tokens that never appear in
	// output (control tokens), which the grammar never allows.
	Bytes []byte
	// EOG marks an end-of-generation token.
	EOG bool
}

// NewVocab indexes n tokens; tok(i) describes token i.
func NewVocab(n int, tok func(id int32) Token) *Vocab {
	v := &Vocab{n: n, toks: make([][]byte, n), isEOG: make([]bool, n), nodes: []trieNode{{}}}
	for i := range n {
		id := int32(i)
		t := tok(id)
		if t.EOG {
			v.isEOG[i] = true
			v.eogs = append(v.eogs, id)
			continue
		}
		if len(t.Bytes) == 0 {
			continue
		}
		v.toks[i] = t.Bytes
		v.insert(t.Bytes, id)
	}
	return v
}

func (v *Vocab) insert(b []byte, id int32) {
	at := int32(0)
	for _, c := range b {
		nd := &v.nodes[at]
		k, found := slices.BinarySearch(nd.keys, c)
		if !found {
			v.nodes = append(v.nodes, trieNode{})
			nd = &v.nodes[at] // the append may have moved it
			nd.keys = slices.Insert(nd.keys, k, c)
			nd.kids = slices.Insert(nd.kids, k, int32(len(v.nodes)-1))
		}
		at = nd.kids[k]
	}
	v.nodes[at].ends = append(v.nodes[at].ends, id)
}

// Len is the number of tokens.
func (v *Vocab) Len() int { return v.n }

func (v *Vocab) eog(id int32) bool { return id >= 0 && int(id) < v.n && v.isEOG[id] }

func (v *Vocab) bytes(id int32) []byte {
	if id < 0 || int(id) >= v.n {
		return nil
	}
	return v.toks[id]
}
