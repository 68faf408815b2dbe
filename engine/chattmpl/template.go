// Package chattmpl renders Hugging Face chat templates: a Jinja2
// interpreter for the subset chat templates use, matching Python's jinja2
// in the environment transformers' apply_chat_template builds
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop
// controls, the {% generation %} tag, a tojson that keeps non-ASCII text,
// raise_exception and strftime_now).
//
// Constructs the engine does not support fail at Compile with a
// *SyntaxError naming them; Render never panics and bounds output size,
// loop iterations and macro recursion.
package chattmpl

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	body []node
}

// maxNesting bounds how deeply a template's blocks and expressions nest.
const maxNesting = 500

// Compile parses a Jinja2 template.
func Compile(src string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("internal error compiling: %v\n%s", r, debug.Stack())
		}
	}()
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	if depth := nesting(toks); depth > maxNesting {
		return nil, &SyntaxError{Line: 1, Construct: "nesting", Msg: fmt.Sprintf("unsupported construct nesting deeper than %d", maxNesting)}
	}
	p := &parser{toks: toks}
	body, _, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	if err := checkLoopControls(body, false); err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// nesting estimates the parse depth: brackets and block tags.
func nesting(toks []token) int {
	depth, most, unary := 0, 0, 0
	for i, t := range toks {
		switch {
		case t.kind == tkOp && (t.val == "(" || t.val == "[" || t.val == "{"):
			depth++
		case t.kind == tkOp && (t.val == ")" || t.val == "]" || t.val == "}"):
			depth--
		case t.kind == tkBlockBegin && i+1 < len(toks) && toks[i+1].kind == tkName:
			switch n := toks[i+1].val; {
			case n == "if" || n == "for" || n == "macro" || n == "call" || n == "filter" || n == "generation":
				depth++
			case n == "set" && !hasAssign(toks[i+1:]):
				depth++
			case strings.HasPrefix(n, "end"):
				depth--
			}
		case t.kind == tkOp && (t.val == "-" || t.val == "+") || t.kind == tkName && t.val == "not":
			// Unary chains recurse too (binary operators over-count, harmlessly).
			depth++
			unary++
		case t.kind == tkVarEnd || t.kind == tkBlockEnd:
			depth -= unary // a tag's operators end with it
			unary = 0
		}
		most = max(most, depth)
	}
	return most
}

func hasAssign(toks []token) bool {
	for _, t := range toks {
		if t.kind == tkBlockEnd {
			return false
		}
		if t.kind == tkOp && t.val == "=" {
			return true
		}
	}
	return false
}

// checkLoopControls rejects break/continue outside a loop, as jinja2 does.
func checkLoopControls(nodes []node, inLoop bool) error {
	for _, n := range nodes {
		switch n := n.(type) {
		case *breakNode, *continueNode:
			if !inLoop {
				return &SyntaxError{Msg: "break or continue outside a loop"}
			}
		case *ifNode:
			for _, b := range n.bodies {
				if err := checkLoopControls(b, inLoop); err != nil {
					return err
				}
			}
		case *forNode:
			if err := checkLoopControls(n.body, true); err != nil {
				return err
			}
			if err := checkLoopControls(n.elseBody, inLoop); err != nil {
				return err
			}
		case *setBlockNode:
			if err := checkLoopControls(n.body, inLoop); err != nil {
				return err
			}
		case *filterBlockNode:
			if err := checkLoopControls(n.body, inLoop); err != nil {
				return err
			}
		case *macroNode:
			if err := checkLoopControls(n.m.body, false); err != nil {
				return err
			}
		case *callBlockNode:
			if err := checkLoopControls(n.m.body, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// Render renders the template with vars (see Context). Values may be Go
// maps, slices, strings, numbers, bools and nil, or a Func; a
// "strftime_now" Func in vars replaces the default, which formats the
// current local time.
func (t *Template) Render(vars map[string]any) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("internal error rendering: %v\n%s", r, debug.Stack())
		}
	}()
	root := newScope(nil)
	for k, v := range globals(time.Now) {
		root.vars[k] = v
	}
	s := newScope(root)
	for k, v := range vars {
		s.vars[k] = FromGo(v)
	}
	var b strings.Builder
	r := &renderer{out: &b}
	if err := r.exec(t.body, s); err != nil {
		if err == errBreak || err == errContinue {
			err = fmt.Errorf("break or continue outside a loop")
		}
		return "", err
	}
	return b.String(), nil
}
