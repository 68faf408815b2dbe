package vocab

import (
	"container/heap"
	"fmt"
	"time"
	"unicode/utf8"
)

// symbol is a span of the text being merged, in a linked list.
type symbol struct {
	start, n   int // bytes
	prev, next int
}

// bigram is a candidate merge of two neighbouring symbols.
type bigram struct {
	left, right int
	score       float32 // SPM: the merged token's score, higher first
	rank        int     // BPE: the merge's rank, lower first
	size        int
	text        string
}

// queue orders bigrams: SPM by score (ties: leftmost), BPE by rank (ties:
// leftmost), as llama.cpp's priority queues do.
type queue struct {
	items []bigram
	bpe   bool
}

func (q *queue) Len() int { return len(q.items) }
func (q *queue) Less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	if q.bpe {
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.left < b.left
	}
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}
func (q *queue) Swap(i, j int) { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *queue) Push(x any)    { q.items = append(q.items, x.(bigram)) }
func (q *queue) Pop() any {
	x := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return x
}

// chars splits text into one symbol per UTF-8 character (a stray byte is a
// character of its own).
func chars(text string) []symbol {
	var syms []symbol
	for off := 0; off < len(text); {
		n := utf8LenAt(text, off)
		syms = append(syms, symbol{start: off, n: n, prev: len(syms) - 1, next: len(syms) + 1})
		off += n
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	return syms
}

// join merges symbol r into its left neighbour l and unlinks r.
func join(syms []symbol, l, r int) {
	syms[l].n += syms[r].n
	syms[r].n = 0
	syms[l].next = syms[r].next
	if syms[r].next >= 0 {
		syms[syms[r].next].prev = l
	}
}

// utf8LenAt is llama.cpp's unicode_len_utf8: the length the lead byte's
// high nibble announces (so 0xF8–0xFF count as 4, and a stray
// continuation byte as 1), cut at the end of the text.
func utf8LenAt(s string, off int) int {
	n := [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}[s[off]>>4]
	return min(n, len(s)-off)
}

// spm is SentencePiece's tokenization of one fragment (spaces already
// escaped): merge the best-scoring adjacent pair whose concatenation is a
// token until none is left, then resegment each symbol into tokens.
func (v *Vocab) spm(text string, out []int32) []int32 {
	syms := chars(text)
	if len(syms) == 0 {
		return out
	}
	q := &queue{}
	revMerge := map[string][2]int{}
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].start : syms[r].start+syms[r].n]
		id, ok := v.toID[s]
		if !ok {
			return
		}
		heap.Push(q, bigram{left: l, right: r, score: v.scores[id], size: len(s)})
		revMerge[s] = [2]int{l, r}
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		bg := heap.Pop(q).(bigram)
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue
		}
		join(syms, bg.left, bg.right)
		try(l.prev, bg.left)
		try(bg.left, l.next)
	}
	var reseg func(i int)
	reseg = func(i int) {
		s := text[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := v.toID[s]; ok {
			out = append(out, id)
			return
		}
		if p, ok := revMerge[s]; ok {
			reseg(p[0])
			reseg(p[1])
			return
		}
		for j := 0; j < len(s); j++ {
			if id := v.byteToken(s[j]); id >= 0 {
				out = append(out, id)
			}
		}
	}
	for i := 0; i != -1; i = syms[i].next {
		reseg(i)
	}
	return out
}

// matchTimeout bounds one regex match; the pre-tokenizer patterns are
// linear, so only a pathological input reaches it.
const matchTimeout = 10 * time.Second

// split is llama.cpp's unicode_regex_split: the hand-written splitter if
// the pre-tokenizer has one (llama.cpp's unicode_regex_split_custom), then
// each regex in turn cuts every current piece into its matches and the text
// between them.
func (v *Vocab) split(text string) ([]string, error) {
	runes := []rune(text)
	pieces := [][2]int{{0, len(runes)}} // rune offsets
	if v.custom != nil {
		pieces = v.custom(runes, 0, len(runes), nil)
	}
	for _, re := range v.regexes {
		var out [][2]int
		for _, p := range pieces {
			sub := string(runes[p[0]:p[1]])
			pos := 0
			m, err := re.FindStringMatch(sub)
			for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
				if m.Index > pos {
					out = append(out, [2]int{p[0] + pos, p[0] + m.Index})
				}
				if m.Length > 0 {
					out = append(out, [2]int{p[0] + m.Index, p[0] + m.Index + m.Length})
				}
				pos = m.Index + m.Length
			}
			if err != nil {
				return nil, fmt.Errorf("pre-tokenize: %w", err)
			}
			if pos < p[1]-p[0] {
				out = append(out, [2]int{p[0] + pos, p[1]})
			}
		}
		pieces = out
	}
	words := make([]string, len(pieces))
	for i, p := range pieces {
		words[i] = string(runes[p[0]:p[1]])
	}
	return words, nil
}

// bpe is byte-level BPE over one fragment: pre-tokenize, map bytes to
// GPT-2's printable characters, merge by rank within each word.
func (v *Vocab) bpe(text string, out []int32) ([]int32, error) {
	words, err := v.split(text)
	if err != nil {
		return nil, err
	}
	for _, w := range words {
		if v.byteEncode {
			w = encodeBytes(w)
		}
		if v.ignoreMerges {
			if id, ok := v.toID[w]; ok {
				out = append(out, id)
				continue
			}
		}
		if v.pre == "gemma4" && onlyNewlines(w) {
			if id, ok := v.toID[w]; ok {
				out = append(out, id)
				continue
			}
		}
		out = v.bpeWord(w, out)
	}
	return out, nil
}

func onlyNewlines(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '\n' {
			return false
		}
	}
	return true
}

func (v *Vocab) bpeWord(w string, out []int32) []int32 {
	syms := chars(w)
	if len(syms) == 0 {
		return out
	}
	q := &queue{bpe: true}
	add := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		left, right := w[syms[l].start:syms[l].start+syms[l].n], w[syms[r].start:syms[r].start+syms[r].n]
		rank, ok := v.ranks[left+" "+right]
		if !ok {
			return
		}
		heap.Push(q, bigram{left: l, right: r, rank: rank, text: left + right, size: len(left) + len(right)})
	}
	for i := 1; i < len(syms); i++ {
		add(i-1, i)
	}
	for q.Len() > 0 {
		bg := heap.Pop(q).(bigram)
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 {
			continue
		}
		if w[l.start:l.start+l.n]+w[r.start:r.start+r.n] != bg.text {
			continue
		}
		join(syms, bg.left, bg.right)
		add(l.prev, bg.left)
		add(bg.left, l.next)
	}
	for _, s := range syms {
		if s.n == 0 {
			continue
		}
		str := w[s.start : s.start+s.n]
		if id, ok := v.toID[str]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(str); j++ {
			var id int32
			var ok bool
			if v.byteEncode {
				id, ok = v.toID[string([]byte{str[j]})]
			} else {
				id, ok = v.toID[fmt.Sprintf("<0x%02X>", str[j])]
			}
			if ok {
				out = append(out, id)
			}
		}
	}
	return out
}

// GPT-2's byte-to-unicode table: printable bytes stand for themselves, the
// others for the code points from 256 on.
var byteRune, runeByte = func() ([256]rune, map[rune]byte) {
	var br [256]rune
	rb := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			br[b] = rune(b)
		} else {
			br[b] = rune(256 + n)
			n++
		}
		rb[br[b]] = byte(b)
	}
	return br, rb
}()

func encodeBytes(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = byteRune[s[i]]
	}
	return string(r)
}

// decodeBytes is llama.cpp's llama_decode_text: each character back to its
// byte; one outside the table is written as [UNK_BYTE_0x…] as llama.cpp
// does.
func decodeBytes(s string) []byte {
	var out []byte
	for _, r := range s {
		if b, ok := runeByte[r]; ok {
			out = append(out, b)
			continue
		}
		var u [4]byte
		n := utf8.EncodeRune(u[:], r)
		out = append(out, "[UNK_BYTE_0x"...)
		for _, c := range u[:n] {
			out = append(out, fmt.Sprintf("%02x", c)...)
		}
		out = append(out, s...)
		out = append(out, ']')
	}
	return out
}
