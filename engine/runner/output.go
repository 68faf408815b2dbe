package runner

import (
	"strings"
	"unicode/utf8"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// output turns tokens into text: it holds back bytes of a character split
// across tokens, and any tail that could be the start of a stop string, so
// that a stop string never reaches the client.
type output struct {
	stop      []string
	pending   []byte // decoded, not yet released
	done      bool
	ignoreEOS bool
}

func newOutput(stop []string) *output { return &output{stop: stop} }

// add appends token id's text and returns what can be released, and
// whether generation is over (end-of-generation token or stop string).
func (o *output) add(tok *tokenizer.Tokenizer, id int32) (runnerapi.Piece, bool) {
	if o.done {
		return runnerapi.Piece{}, true
	}
	if tok.EndsGeneration(id) && !o.ignoreEOS {
		o.done = true
		return runnerapi.Piece{Text: o.flush()}, true
	}
	special := ""
	if !tok.Special(id) {
		s, err := tok.Decode([]int32{id})
		if err == nil {
			o.pending = append(o.pending, s...)
		}
	} else if s, err := tok.Decode([]int32{id}); err == nil {
		special = s // for the formats that mark calls with control tokens
	}
	text := string(o.pending)
	for _, st := range o.stop {
		if i := strings.Index(text, st); i >= 0 {
			o.done = true
			o.pending = o.pending[:0]
			return runnerapi.Piece{Text: validPrefix(text[:i])}, true
		}
	}
	// Release all but a possible stop-string start and an incomplete rune.
	keep := 0
	for _, st := range o.stop {
		for k := min(len(st)-1, len(text)); k > keep; k-- {
			if strings.HasSuffix(text, st[:k]) {
				keep = k
				break
			}
		}
	}
	cut := len(text) - keep
	for cut > 0 && !utf8.FullRuneInString(text[lastRuneStart(text[:cut]):cut]) {
		cut = lastRuneStart(text[:cut])
	}
	o.pending = append(o.pending[:0], text[cut:]...)
	return runnerapi.Piece{Text: validPrefix(text[:cut]), Special: special}, false
}

// flush releases what is held back (invalid bytes become U+FFFD).
func (o *output) flush() string {
	s := validPrefix(string(o.pending))
	o.pending = o.pending[:0]
	return s
}

func validPrefix(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
