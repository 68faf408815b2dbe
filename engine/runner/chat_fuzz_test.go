package runner

import (
	"encoding/json"
	"testing"

	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// A chat request's messages, tools, template keyword arguments and
// tool_choice go through every family's real chat template and, for a
// forced call, its tool-call grammar, in rank 0's runner: whatever they
// are, the request is refused with an error or rendered, and a grammar it
// gets compiles against the model's vocabulary. A panic here would end
// the runner, and with it every request on the instance.
func FuzzChatTemplates(f *testing.F) {
	var toks []*tokenizer.Tokenizer
	for _, fam := range model.Families {
		o, err := model.ApplyFamily(model.Presets["tiny"], fam)
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, genTokenizer(f, o))
	}
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":"weather in Paris?"},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},` +
		`{"role":"tool","tool_call_id":"c1","name":"get_weather","content":"sunny"}]`
	f.Add(uint8(0), []byte(msgs), []byte(tools), []byte(`{"enable_thinking":false}`), "required", true)
	f.Add(uint8(3), []byte(`[{"role":"user","content":"hi"}]`), []byte(tools), []byte(`{}`), "get_weather", false)
	f.Add(uint8(5), []byte(`[{"role":"assistant","content":"x","reasoning_content":"y"}]`), []byte(`null`), []byte(`{"tools":1,"x":[1,{"a":null}]}`), "auto", false)
	f.Add(uint8(7), []byte(`[]`), []byte(`[{"type":"function","function":{"name":"f","parameters":{"$ref":"#"}}}]`), []byte(`null`), "f", true)
	f.Fuzz(func(t *testing.T, famIdx uint8, rawMsgs, rawTools, rawKwargs []byte, choice string, parallel bool) {
		tok := toks[int(famIdx)%len(toks)]
		req := runnerapi.Request{Tools: rawTools, ToolChoice: choice, ParallelToolCalls: parallel}
		if json.Unmarshal(rawMsgs, &req.Messages) != nil || json.Unmarshal(rawKwargs, &req.ChatKwargs) != nil || !json.Valid(rawTools) {
			return // the API decodes these before they reach a runner
		}
		g := &Generator{Tok: tok}
		if _, _, err := g.chat(&req); err != nil || req.Grammar == nil {
			return
		}
		gr, err := grammar.Compile(*req.Grammar)
		if err != nil {
			return // refused when the sampler is made, as a bad request
		}
		grammar.NewMatcher(gr, tok.GrammarVocab())
	})
}
