package chatfmt

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// run feeds s to a parser in the given pieces and sums what comes out.
func run(o Options, pieces []string) Delta {
	p := NewParser(o)
	var d Delta
	for _, s := range pieces {
		d.add(p.Add(s))
	}
	d.add(p.Flush())
	return d
}

// splits are s whole, byte by byte, and cut at random points.
func splits(s string, rng *rand.Rand) [][]string {
	out := [][]string{{s}}
	var bytes []string
	for i := range len(s) {
		bytes = append(bytes, s[i:i+1])
	}
	out = append(out, bytes)
	for range 5 {
		var ps []string
		rest := s
		for rest != "" {
			n := 1 + rng.IntN(min(len(rest), 7))
			ps = append(ps, rest[:n])
			rest = rest[n:]
		}
		out = append(out, ps)
	}
	return out
}

func TestParser(t *testing.T) {
	hermes := Options{Format: Hermes, Tools: true}
	llama := Options{Format: Llama3, Tools: true}
	think := Options{Think: true}
	mistral := Options{Format: Mistral, Tools: true}
	deepseek := Options{Format: DeepSeek, Tools: true, Think: true}
	harmony := Options{Format: Harmony, Tools: true}
	kimi := Options{Format: Kimi, Tools: true, Think: true}
	tests := []struct {
		name string
		o    Options
		out  string
		want Delta
	}{
		{"hermes call after text", hermes, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n</tool_call>",
			Delta{Content: "Let me check.\n", Calls: []runnerapi.Call{{Index: 0, Name: "get_weather", Arguments: `{"city":"Oslo","days":2}`}}}},
		{"hermes two calls", hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": [1]}\"}\n</tool_call>",
			Delta{Calls: []runnerapi.Call{{Index: 0, Name: "a", Arguments: `{}`}, {Index: 1, Name: "b", Arguments: `{"x":[1]}`}}}},
		{"hermes malformed stays text", hermes, "a <tool_call>{\"name\": oops}</tool_call> b",
			Delta{Content: "a <tool_call>{\"name\": oops}</tool_call> b"}},
		{"hermes unclosed but whole", hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"<\"}}",
			Delta{Calls: []runnerapi.Call{{Index: 0, Name: "f", Arguments: `{"q":"\u003c"}`}}}},
		{"hermes unclosed and cut", hermes, "<tool_call>\n{\"name\": \"f\", \"argu",
			Delta{Content: "<tool_call>\n{\"name\": \"f\", \"argu"}},
		{"hermes marker lookalike", hermes, "x <tool y <tool_cal z", Delta{Content: "x <tool y <tool_cal z"}},
		{"no tools: calls are text", Options{Format: Hermes}, "<tool_call>{\"name\": \"f\"}</tool_call>",
			Delta{Content: "<tool_call>{\"name\": \"f\"}</tool_call>"}},
		{"think", think, "<think>\nhmm, 2 < 3\n</think>\n\nThe answer.", Delta{Reasoning: "\nhmm, 2 < 3\n", Content: "The answer."}},
		{"think opened by the prompt", Options{Think: true, InThink: true}, "hmm</think>Yes", Delta{Reasoning: "hmm", Content: "Yes"}},
		{"think never closed", think, "<think>still going", Delta{Reasoning: "still going"}},
		{"think then call", Options{Format: Hermes, Tools: true, Think: true}, "<think>call f</think>\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
			Delta{Reasoning: "call f", Calls: []runnerapi.Call{{Index: 0, Name: "f", Arguments: `{}`}}}},
		{"llama3 call", llama, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
			Delta{Calls: []runnerapi.Call{{Index: 0, Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}},
		{"llama3 two calls", llama, "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": 1}}",
			Delta{Calls: []runnerapi.Call{{Index: 0, Name: "a", Arguments: `{}`}, {Index: 1, Name: "b", Arguments: `{"k":1}`}}}},
		{"llama3 text", llama, "Hello {there}", Delta{Content: "Hello {there}"}},
		{"llama3 json that is no call", llama, "{\"answer\": 42}", Delta{Content: "{\"answer\": 42}"}},
		{"mistral array", mistral, "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
			Delta{Content: "Sure.", Calls: []runnerapi.Call{{Index: 0, Name: "a", Arguments: `{"x":1}`}, {Index: 1, Name: "b", Arguments: `{}`}}}},
		{"mistral args", mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]now[CALL_ID]c1[ARGS]{}",
			Delta{Calls: []runnerapi.Call{{Index: 0, Name: "get_weather", Arguments: `{"city":"Oslo"}`}, {Index: 1, Name: "now", Arguments: `{}`}}}},
		{"mistral empty list", mistral, "[TOOL_CALLS][]0", Delta{Content: "[TOOL_CALLS][]0"}},
		{"mistral broken", mistral, "[TOOL_CALLS][{\"name\": 3}]", Delta{Content: "[TOOL_CALLS][{\"name\": 3}]"}},
		{"deepseek v3", deepseek, "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			Delta{Content: "Checking.", Calls: []runnerapi.Call{{Index: 0, Name: "get_weather", Arguments: `{"city":"Oslo"}`}, {Index: 1, Name: "now", Arguments: `{}`}}}},
		{"deepseek v3.1", deepseek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			Delta{Calls: []runnerapi.Call{{Index: 0, Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}},
		{"deepseek cut", deepseek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{",
			Delta{Content: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"}},
		{"harmony answer", harmony, "<|channel|>analysis<|message|>Think 2+2.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
			Delta{Reasoning: "Think 2+2.", Content: "4"}},
		{"harmony call", harmony, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>",
			Delta{Reasoning: "Need weather.", Calls: []runnerapi.Call{{Index: 0, Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}},
		{"harmony recipient first", harmony, "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>",
			Delta{Calls: []runnerapi.Call{{Index: 0, Name: "now", Arguments: `{}`}}}},
		{"harmony no tools", Options{Format: Harmony}, "<|channel|>commentary to=functions.x<|message|>{}<|call|>", Delta{Content: "{}"}},
		{"harmony bare text", harmony, "just words", Delta{Content: "just words"}},
		{"kimi calls", kimi, "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"北京\"}<|tool_call_end|>" +
			"<|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
			Delta{Content: "Checking.", Calls: []runnerapi.Call{{Index: 0, Name: "get_weather", Arguments: `{"city":"北京"}`}, {Index: 1, Name: "now", Arguments: `{}`}}}},
		{"kimi thinking then call", kimi, "<think>Need the weather.</think>\n<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|>\n<|tool_calls_section_end|>",
			Delta{Reasoning: "Need the weather.", Calls: []runnerapi.Call{{Index: 0, Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}},
		// As llama.cpp takes them: reasoning a call ends, a call with no
		// section, the last call's end missing.
		{"kimi call ends reasoning", kimi, "<think>call it<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": 1}",
			Delta{Reasoning: "call it", Calls: []runnerapi.Call{{Index: 0, Name: "f", Arguments: `{"a":1}`}}}},
		{"kimi text after calls", kimi, "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|> done",
			Delta{Calls: []runnerapi.Call{{Index: 0, Name: "f", Arguments: `{}`}}, Content: "done"}},
		{"kimi broken", kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{oops}<|tool_call_end|>",
			Delta{Content: "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{oops}<|tool_call_end|>"}},
		{"kimi no tools", Options{Format: Kimi, Think: true}, "<think>a</think>b<|tool_call_begin|>", Delta{Reasoning: "a", Content: "b<|tool_call_begin|>"}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range tests {
		for _, ps := range splits(tc.out, rng) {
			got := run(tc.o, ps)
			if got.Content != tc.want.Content || got.Reasoning != tc.want.Reasoning || !reflect.DeepEqual(got.Calls, tc.want.Calls) {
				t.Errorf("%s, in %d pieces: %+v, want %+v", tc.name, len(ps), got, tc.want)
				break
			}
		}
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		src    string
		f      Format
		thinks bool
	}{
		{"{% if tools %}<tool_call>{% endif %}<think>", Hermes, true},
		{"<|start_header_id|>{% if tools %}ipython{% endif %}", Llama3, false},
		{"{{'[TOOL_CALLS]'}}", Mistral, false},
		{"<｜tool▁calls▁begin｜><think>", DeepSeek, true},
		{"<|start|>{{ '<|channel|>' }}", Harmony, false},
		{"{{'<|tool_calls_section_begin|>'}}<|tool_call_begin|>{{'<think>'}}", Kimi, true},
		{"<|im_start|>", Plain, false},
	} {
		if f, th := Detect(tc.src); f != tc.f || th != tc.thinks {
			t.Errorf("%q: %q %v", tc.src, f, th)
		}
	}
	o := OptionsFor(Hermes, true, true, "<|im_start|>assistant\n<think>\n")
	if !o.InThink || !o.Tools {
		t.Errorf("a prompt ending in <think>: %+v", o)
	}
	if o := OptionsFor(Hermes, true, false, "<think>\n\n</think>\n\n"); o.InThink || o.Tools {
		t.Errorf("a closed think block: %+v", o)
	}
}

func TestCallGrammar(t *testing.T) {
	tools := []Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
		{Name: `q"x`}}
	for _, f := range []Format{Hermes, Llama3} {
		spec, err := f.CallGrammar(tools, true)
		if err != nil || len(spec.Alts) != 2 || !strings.Contains(spec.Alts[1].Prefix, `"q\"x"`) {
			t.Errorf("%s: %+v %v", f, spec, err)
		}
	}
	if _, err := Plain.CallGrammar(tools, false); err != ErrNoCallSyntax {
		t.Errorf("plain: %v", err)
	}
	bad := []Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"x"}}}`)}}
	if _, err := Hermes.CallGrammar(bad, false); err == nil || !strings.Contains(err.Error(), "tools[0] (f) parameters: json schema at /properties/a/pattern") {
		t.Errorf("pattern: %v", err)
	}
}

// Whatever the output and however it is cut, streaming gives what one
// piece gives, nothing is lost (content, reasoning and call text account
// for every non-space byte), and nothing panics.
func FuzzParser(f *testing.F) {
	f.Add("a<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call><think>x</think>y", uint8(3), uint8(0))
	f.Add(" {\"name\": \"f\", \"parameters\": {}}; {", uint8(2), uint8(1))
	f.Add("<think><tool_call></think>", uint8(1), uint8(2))
	f.Add("[TOOL_CALLS]f[ARGS]{\"a\":[1]}", uint8(2), uint8(3))
	f.Add("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>", uint8(4), uint8(4))
	f.Add("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b", uint8(5), uint8(5))
	f.Add("<think>a<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>x<|tool_calls_section_begin|><|tool_call_begin|>", uint8(6), uint8(6))
	f.Fuzz(func(t *testing.T, s string, cut, kind uint8) {
		opts := []Options{{Format: Hermes, Tools: true, Think: true}, {Format: Llama3, Tools: true}, {Think: true, InThink: true},
			{Format: Mistral, Tools: true}, {Format: DeepSeek, Tools: true}, {Format: Harmony, Tools: true}, {Format: Kimi, Tools: true, Think: true}}
		o := opts[int(kind)%len(opts)]
		whole := run(o, []string{s})
		var ps []string
		step := 1 + int(cut)%9
		for i := 0; i < len(s); i += step {
			ps = append(ps, s[i:min(i+step, len(s))])
		}
		got := run(o, ps)
		if got.Content != whole.Content || got.Reasoning != whole.Reasoning || !reflect.DeepEqual(got.Calls, whole.Calls) {
			t.Fatalf("%q in pieces of %d: %+v, whole: %+v", s, step, got, whole)
		}
		if len(whole.Calls) == 0 && !strings.Contains(s, thinkOpen) && !strings.Contains(s, thinkClose) && !o.InThink && o.Format != Harmony {
			if strings.Join(strings.Fields(whole.Content), "") != strings.Join(strings.Fields(s), "") {
				t.Fatalf("%q: content %q lost text", s, whole.Content)
			}
		}
	})
}

// Kimi K2's real templates (llama.cpp's models/templates) are told apart:
// its tool-call markers, and <think> for K2 Thinking.
func TestDetectKimiTemplates(t *testing.T) {
	dir := llamaref.Require(t, "llama.cpp/models/templates")
	for name, thinks := range map[string]bool{"Kimi-K2-Instruct": false, "Kimi-K2-Thinking": true, "moonshotai-Kimi-K2": false} {
		src, err := os.ReadFile(filepath.Join(dir, "llama.cpp/models/templates", name+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		if f, th := Detect(string(src)); f != Kimi || th != thinks {
			t.Errorf("%s: %q thinks %v, want %q %v", name, f, th, Kimi, thinks)
		}
	}
}
