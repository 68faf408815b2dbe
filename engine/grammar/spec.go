package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Spec is what a request's output must be, as it travels from the API to
// the rank that samples: one of Alts (or, with Repeat, one or more of
// them, each followed by Sep). It is compiled where it is used.
type Spec struct {
	Alts   []Alt  `json:"alts"`
	Repeat bool   `json:"repeat,omitempty"`
	Sep    string `json:"sep,omitempty"`
}

// Alt is a literal Prefix, a JSON value that Schema admits (any JSON value
// when Schema is empty), and a literal Suffix: a bare JSON answer, or a
// tool call in its family's wrapping.
type Alt struct {
	Prefix string          `json:"prefix,omitempty"`
	Schema json.RawMessage `json:"schema,omitempty"`
	Suffix string          `json:"suffix,omitempty"`
	// NoValue leaves the JSON value out: the alternative is Prefix +
	// Suffix alone (free text after a forced prefix is not supported).
	NoValue bool `json:"noValue,omitempty"`
}

// maxAlts bounds a spec (one per tool).
const maxAlts = 256

// Compile builds the grammar of s. A schema it cannot enforce is a
// *SchemaError naming the part by JSON pointer; the pointer is relative
// to that alternative's schema.
func Compile(s Spec) (*Grammar, error) {
	if len(s.Alts) == 0 || len(s.Alts) > maxAlts {
		return nil, fmt.Errorf("grammar: want 1..%d alternatives, got %d", maxAlts, len(s.Alts))
	}
	b := newBuilder()
	alts := make([]seq, len(s.Alts))
	for i, a := range s.Alts {
		val, err := compileSchema(b, a)
		if err != nil {
			return nil, err
		}
		alts[i] = cat(b.lit(a.Prefix), val, b.lit(a.Suffix))
	}
	root, err := b.alt(alts...)
	if err != nil {
		return nil, err
	}
	if s.Repeat {
		more, err := b.star(cat(b.lit(s.Sep), root))
		if err != nil {
			return nil, err
		}
		root = cat(root, more)
	}
	return b.build(root)
}

func compileSchema(b *builder, a Alt) (seq, error) {
	if a.NoValue {
		return nil, nil
	}
	c := &schemaCompiler{b: b, refs: map[string]int32{}}
	if len(a.Schema) == 0 {
		return c.anyValue()
	}
	doc, err := decodeJSON(a.Schema)
	if err != nil {
		var se *SchemaError
		if errors.As(err, &se) {
			return nil, err
		}
		return nil, &SchemaError{Msg: fmt.Sprintf("not JSON: %v", err)}
	}
	c.doc = doc
	return c.compile(doc, "")
}
