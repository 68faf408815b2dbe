package vocab

import "unicode"

// splitKimiK2 is Kimi K2's pre-tokenizer (tokenizer.ggml.pre "kimi-k2"):
// a port of llama.cpp's unicode_regex_split_custom_kimi_k2 (src/unicode.cpp),
// which llama.cpp runs in place of the regex list for this vocabulary. It
// cuts runes[lo:hi] into pieces (rune offsets appended to out) by, at each
// position, the first rule that applies:
//
//  1. a run of Han characters (isHan: CJK ideographs by block);
//  2. an optional leading character that is not \r, \n, a letter or a
//     number, then a run of letters that are not Han, then optionally one
//     of 's 't 're 've 'm 'll 'd in either case;
//  3. one to three numbers (\p{N});
//  4. an optional space, a run of characters that are not whitespace,
//     letters or numbers, then any \r and \n;
//  5. whitespace up to its last \r or \n;
//  6. whitespace but its last character when more text follows;
//  7. whitespace.
//
// It is what llama.cpp does, not what Kimi's tokenization_kimi.py regex
// says: llama.cpp's handler has no case rule (a camel-case word is one
// piece, not split before each capital as the \p{Lu}…\p{Ll} classes of the
// original would) and takes no marks (\p{M}) into words (a combining mark
// starts a punctuation run or leads the next word). Letters, numbers and
// whitespace are Go's unicode.IsLetter, IsNumber and IsSpace, which are the
// same classes as llama.cpp's flags (is_letter, is_number, is_whitespace).
func splitKimiK2(runes []rune, lo, hi int, out [][2]int) [][2]int {
	at := func(i int) (rune, bool) {
		if i >= lo && i < hi {
			return runes[i], true
		}
		return 0, false
	}
	letter := func(i int) bool { // a letter that is not Han
		r, ok := at(i)
		return ok && unicode.IsLetter(r) && !isHan(r)
	}
	number := func(i int) bool { r, ok := at(i); return ok && unicode.IsNumber(r) }
	// other: in the text and neither whitespace, a letter (Han included)
	// nor a number: llama.cpp's !(is_whitespace|is_letter|is_number) on
	// flags that are non-zero.
	other := func(i int) bool {
		r, ok := at(i)
		return ok && !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
	}
	start := lo
	emit := func(end int) {
		if end > start {
			out = append(out, [2]int{start, end})
		}
		start = end
	}
	for pos := lo; pos < hi; {
		r := runes[pos]
		// 1: Han.
		if isHan(r) {
			for pos < hi && isHan(runes[pos]) {
				pos++
			}
			emit(pos)
			continue
		}
		// 2: a word, with an optional leading character and contraction.
		lead := r != '\r' && r != '\n' && !unicode.IsLetter(r) && !unicode.IsNumber(r)
		if letter(pos) || lead && letter(pos+1) {
			if lead {
				pos++
			}
			for letter(pos) {
				pos++
			}
			emit(kimiContraction(runes, pos, hi))
			continue
		}
		// 3: numbers, three at a time.
		if unicode.IsNumber(r) {
			n := 0
			for number(pos) {
				pos++
				if n++; n == 3 {
					emit(pos)
					n = 0
				}
			}
			emit(pos)
			continue
		}
		// 4: punctuation and symbols, with an optional space before and
		// newlines after.
		p := pos
		if r == ' ' {
			p++
		}
		if other(p) {
			pos = p
			for other(pos) {
				pos++
			}
			for c, _ := at(pos); c == '\r' || c == '\n'; c, _ = at(pos) {
				pos++
			}
			emit(pos)
			continue
		}
		// 5–7: whitespace.
		pos = kimiSpace(runes, pos, hi)
		emit(pos)
	}
	return out
}

// kimiContraction is where a word ending at pos ends with its
// contraction ('s, 't, 'm, 'd, 're, 've, 'll in either case), if one
// follows.
func kimiContraction(runes []rune, pos, hi int) int {
	if pos+1 >= hi || runes[pos] != '\'' {
		return pos
	}
	c1 := unicode.ToLower(runes[pos+1])
	switch {
	case c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd':
		return pos + 2
	case pos+2 < hi:
		c2 := unicode.ToLower(runes[pos+2])
		if c1 == 'r' && c2 == 'e' || c1 == 'v' && c2 == 'e' || c1 == 'l' && c2 == 'l' {
			return pos + 3
		}
	}
	return pos
}

// kimiSpace is where the whitespace at pos ends as a piece: through its
// last newline; else, before a word, all but the last space (which goes
// with the word); else all of it.
func kimiSpace(runes []rune, pos, hi int) int {
	n, lastNL := 0, 0
	for pos+n < hi && unicode.IsSpace(runes[pos+n]) {
		if c := runes[pos+n]; c == '\r' || c == '\n' {
			lastNL = pos + n + 1
		}
		n++
	}
	switch {
	case lastNL > 0:
		return lastNL
	case n > 1 && pos+n < hi:
		return pos + n - 1
	case n > 0:
		return pos + n
	}
	return pos + 1 // unreachable: every character matches a rule above
}

// isHan is llama.cpp's unicode_cpt_is_han: the CJK Unified Ideographs
// blocks (extensions A to F), the CJK Compatibility Ideographs and their
// supplement. (Not Unicode's Han script: 々, 〇 and the radicals are
// ordinary letters or symbols here.)
func isHan(r rune) bool {
	switch {
	case r >= 0x4E00 && r <= 0x9FFF, // CJK Unified Ideographs
		r >= 0x3400 && r <= 0x4DBF,   // extension A
		r >= 0x20000 && r <= 0x2A6DF, // extension B
		r >= 0x2A700 && r <= 0x2B73F, // extension C
		r >= 0x2B740 && r <= 0x2B81F, // extension D
		r >= 0x2B820 && r <= 0x2CEAF, // extension E
		r >= 0x2CEB0 && r <= 0x2EBEF, // extension F
		r >= 0xF900 && r <= 0xFAFF,   // CJK Compatibility Ideographs
		r >= 0x2F800 && r <= 0x2FA1F: // their supplement
		return true
	}
	return false
}
