// Package chatfmt knows a model family's chat conventions beyond its
// template: how it writes tool calls and reasoning. It tells the format
// from the template's source, builds the grammar that forces a tool call
// in that format (tool_choice "required"), and parses output as it
// streams into content, reasoning and tool calls.
//
// Formats (llama.cpp's common/chat.cpp parses the same ones):
//   - Hermes: <tool_call>{"name": …, "arguments": {…}}</tool_call>, as Qwen
//     2.5 and 3, Hermes 2 Pro and many fine-tunes write;
//   - Llama3: the whole answer a {"name": …, "parameters": {…}} object, as
//     Llama 3.1–3.3 write (<|python_tag|> is a control token, not text);
//   - Mistral: [TOOL_CALLS] then a JSON array of calls (Nemo, Small 3.1),
//     or name[ARGS]{…} (Small 3.2, Magistral, Devstral);
//   - DeepSeek: <｜tool▁calls▁begin｜> … <｜tool▁call▁begin｜>function<｜tool▁sep｜>name
//     and a fenced JSON block (V3, R1), or name<｜tool▁sep｜>{…} (V3.1);
//   - Harmony (gpt-oss): <|channel|>analysis is reasoning, final is the
//     answer, commentary to=functions.name is a call;
//   - Kimi (K2, K2 Thinking): <|tool_calls_section_begin|> then
//     <|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{…}<|tool_call_end|>
//     for each call, then <|tool_calls_section_end|>;
//   - reasoning between <think> and </think> (Qwen 3, DeepSeek R1, QwQ),
//     including answers whose prompt already opened the block.
//
// Mistral's, DeepSeek's, Harmony's and Kimi's markers are control tokens, whose
// text the runner passes to the parser (Format.Specials) but never
// outputs.
package chatfmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Format is how a family writes tool calls.
type Format string

const (
	// Plain: no tool-call syntax known; output is content.
	Plain    Format = ""
	Hermes   Format = "hermes"
	Llama3   Format = "llama3"
	Mistral  Format = "mistral"
	DeepSeek Format = "deepseek"
	Harmony  Format = "harmony"
	Kimi     Format = "kimi"
)

// Specials reports whether the format's markers are control tokens, whose
// text the parser must be given.
func (f Format) Specials() bool { return f == Mistral || f == DeepSeek || f == Harmony || f == Kimi }

// Detect tells from a chat template's source how its family writes tool
// calls, and whether it writes reasoning in <think> blocks.
func Detect(template string) (f Format, thinks bool) {
	thinks = strings.Contains(template, "<think>")
	switch {
	case strings.Contains(template, "<|channel|>"):
		f = Harmony
	case strings.Contains(template, "tool▁calls▁begin"):
		f = DeepSeek
	case strings.Contains(template, kimiSectionBegin):
		f = Kimi
	case strings.Contains(template, "[TOOL_CALLS]"):
		f = Mistral
	case strings.Contains(template, "<tool_call>"):
		f = Hermes
	case strings.Contains(template, "<|start_header_id|>") && strings.Contains(template, "tools"):
		f = Llama3
	}
	return f, thinks
}

// Tool is what the grammar of a forced call needs of a tool.
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// ErrNoCallSyntax is returned when a forced call is asked of a model whose
// tool-call format is not known.
var ErrNoCallSyntax = errors.New("tool_choice cannot force a call with this model: forcing needs a tool-call format written in text (Hermes <tool_call> or Llama 3 JSON); this model's is unknown or marked by control tokens")

// CallGrammar is the grammar of one call of one of tools (or, with
// parallel, one or more calls), in f's syntax, with each tool's
// parameters enforced as a JSON Schema. A schema the grammar cannot
// enforce is an error naming the tool and the JSON pointer.
func (f Format) CallGrammar(tools []Tool, parallel bool) (*grammar.Spec, error) {
	if len(tools) == 0 {
		return nil, errors.New("no tools to call")
	}
	spec := &grammar.Spec{}
	for i, t := range tools {
		name, _ := json.Marshal(t.Name)
		params := t.Parameters
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		var a grammar.Alt
		switch f {
		case Hermes:
			a = grammar.Alt{Prefix: "<tool_call>\n{\"name\": " + string(name) + ", \"arguments\": ", Schema: params, Suffix: "}\n</tool_call>"}
			spec.Repeat, spec.Sep = parallel, "\n"
		case Llama3:
			// Llama 3 writes one call per answer.
			a = grammar.Alt{Prefix: "{\"name\": " + string(name) + ", \"parameters\": ", Schema: params, Suffix: "}"}
		default:
			return nil, ErrNoCallSyntax
		}
		if _, err := grammar.Compile(grammar.Spec{Alts: []grammar.Alt{a}}); err != nil {
			return nil, fmt.Errorf("tools[%d] (%s) parameters: %w", i, t.Name, err)
		}
		spec.Alts = append(spec.Alts, a)
	}
	return spec, nil
}

// Options say what a Parser looks for.
type Options struct {
	Format Format
	// Tools: the request has tools, so calls are parsed out.
	Tools bool
	// Think: the family writes <think> blocks; InThink: the prompt opened
	// one, so the output starts inside it.
	Think, InThink bool
}

// OptionsFor are the options for an answer to prompt.
func OptionsFor(f Format, thinks, tools bool, prompt string) Options {
	o := Options{Format: f, Tools: tools && f != Plain, Think: thinks}
	if thinks {
		open, close := strings.LastIndex(prompt, "<think>"), strings.LastIndex(prompt, "</think>")
		o.InThink = open >= 0 && open > close
	}
	return o
}

// Active reports whether a Parser would change anything (Harmony's
// channels are always parsed: their markup is never content).
func (o Options) Active() bool { return o.Tools || o.Think || o.Format == Harmony }

// Delta is what a piece of output turned out to be.
type Delta struct {
	Content   string
	Reasoning string
	Calls     []runnerapi.Call
}

func (d *Delta) add(o Delta) {
	d.Content += o.Content
	d.Reasoning += o.Reasoning
	d.Calls = append(d.Calls, o.Calls...)
}

// parseCall reads a call object: {"name", "arguments"} (or Llama's
// "parameters"), the arguments an object or a string holding one.
func parseCall(body string, index int) (runnerapi.Call, bool) {
	var c struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &c); err != nil || c.Name == "" {
		return runnerapi.Call{}, false
	}
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = json.RawMessage(s)
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil {
		return runnerapi.Call{}, false
	}
	compact, err := json.Marshal(json.RawMessage(args))
	if err != nil {
		return runnerapi.Call{}, false
	}
	return runnerapi.Call{Index: index, Name: c.Name, Arguments: string(compact)}, true
}
