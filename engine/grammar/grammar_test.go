package grammar

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// byteVocab is every single byte, some multi-byte tokens (so that tokens
// cross JSON's structure, as real ones do) and an end-of-generation token.
func byteVocab() (*Vocab, []string) {
	toks := []string{"<eos>"}
	for c := range 256 {
		toks = append(toks, string([]byte{byte(c)}))
	}
	toks = append(toks, `{"`, `":`, `",`, `"}`, ` "`, "true", "null", "12", "é", "ab", `\u00`, `"]`, "},{", "\n  ", "Z\"")
	v := NewVocab(len(toks), func(id int32) Token {
		if id == 0 {
			return Token{EOG: true}
		}
		return Token{Bytes: []byte(toks[id])}
	})
	return v, toks
}

func mustCompile(t *testing.T, schema string) *Grammar {
	t.Helper()
	g, err := Compile(Spec{Alts: []Alt{{Schema: json.RawMessage(schema)}}})
	if err != nil {
		t.Fatalf("compile %s: %v", schema, err)
	}
	return g
}

func matches(g *Grammar, v *Vocab, s string) bool {
	m := NewMatcher(g, v)
	return m.AcceptText(s) == nil && m.Accepting()
}

func TestSchemaAcceptsAndRejects(t *testing.T) {
	v, _ := byteVocab()
	person := `{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"},
		"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2},"nick":{"type":["string","null"]}},
		"required":["name","age"],"additionalProperties":false}`
	tests := []struct {
		schema string
		ok     []string
		bad    []string
	}{
		{person,
			[]string{`{"name":"x","age":3}`, `{ "name": "é", "age": -12, "tags": ["a","b"] }`, `{"name":"","age":0,"nick":null}`,
				"{\n  \"name\":\"a\",\"age\":1,\"tags\":[],\"nick\":\"z\"}"},
			[]string{`{"age":3,"name":"x"}`, `{"name":"x"}`, `{"name":"123456789","age":1}`, `{"name":"x","age":01}`,
				`{"name":"x","age":1,"tags":["c"]}`, `{"name":"x","age":1,"tags":["a","a","a"]}`, `{"name":"x","age":1,"zz":1}`,
				`{"name":"x","age":1}  `, `{"name":"a` + "\x01" + `","age":1}`, `{"name":"` + "\xff" + `","age":1}`}},
		{`{"type":"object"}`, []string{`{}`, `{"a":[1,{"b":null}],"c":"d"}`}, []string{`[]`, `{"a"}`, `{"a":1,}`}},
		{`{"type":"object","properties":{}}`, []string{`{}`, `{ }`}, []string{`{"a":1}`}},
		{`{"type":"object","properties":{},"additionalProperties":{"type":"integer"}}`, []string{`{}`, `{"a":1}`}, []string{`{"a":"x"}`}},
		{`{"type":"number"}`, []string{`0`, `-1.5e+10`, `3.25E2`}, []string{`.5`, `1.`, `+1`, `01`, `1e`}},
		{`{"const":{"k":[1,"x"]}}`, []string{`{"k":[1,"x"]}`}, []string{`{"k":[1,"y"]}`}},
		{`{"anyOf":[{"type":"boolean"},{"$ref":"#/$defs/n"}],"$defs":{"n":{"type":"null"}}}`, []string{`true`, `null`}, []string{`1`}},
		{`{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}}`,
			[]string{`{}`, `{"kids":[{},{"kids":[{}]}]}`}, []string{`{"kids":[1]}`}},
		{`{"type":"string","format":"date-time"}`, []string{`"2026-12-04T13:22:31Z"`, `"2026-12-04T13:22:31.5+01:00"`}, []string{`"2026-12-04"`}},
		{`{"type":"string","format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123e4567"`}},
		{`{"type":"string","minLength":2,"maxLength":3}`, []string{`"ab"`, `"a\"c"`, `"éé"`}, []string{`"a"`, `"abcd"`}},
		{`{"type":"array","minItems":1,"maxItems":2}`, []string{`[1]`, `[1,"a"]`}, []string{`[]`, `[1,2,3]`}},
		{`{"type":"integer","minimum":-12,"maximum":305}`, []string{`-12`, `-1`, `0`, `7`, `99`, `100`, `299`, `305`}, []string{`-13`, `306`, `400`, `1000`, `-0`, `007`}},
		{`{"type":"integer","exclusiveMinimum":0}`, []string{`1`, `9999999999999999`}, []string{`0`, `-1`}},
		{`{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991}`, []string{`9007199254740991`, `-42`, `0`}, []string{`9007199254740992`}},
	}
	for _, tc := range tests {
		g := mustCompile(t, tc.schema)
		for _, s := range tc.ok {
			if !matches(g, v, s) {
				t.Errorf("schema %s rejects %q", tc.schema, s)
			}
		}
		for _, s := range tc.bad {
			if matches(g, v, s) {
				t.Errorf("schema %s accepts %q", tc.schema, s)
			}
		}
	}
}

func TestSchemaErrorsNamePointer(t *testing.T) {
	tests := []struct{ schema, pointer, says string }{
		{`{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}`, "/properties/a/pattern", "pattern"},
		{`{"type":"object","properties":{"a~b/c":{"type":"number","minimum":3}}}`, "/properties/a~0b~1c/minimum", "not on numbers"},
		{`{"type":"integer","minimum":3,"maximum":2.5}`, "", "no integer"},
		{`{"type":"array","items":{"$ref":"#/$defs/missing"}}`, "/items/$ref", "points to nothing"},
		{`{"$ref":"https://example.org/s.json"}`, "/$ref", "within the document"},
		{`{"type":"object","properties":{"a":{}},"additionalProperties":true}`, "/additionalProperties", "other keys"},
		{`{"type":"string","format":"email"}`, "/format", "email"},
		{`{"type":"bignum"}`, "/type", "unknown type"},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, "/required/0", "not one of"},
		{`{"type":"string","maxLength":1000000}`, "/maxLength", "0..1000"},
		{`{"anyOf":[]}`, "/anyOf", "non-empty"},
		{`false`, "", "no value"},
		{`{"type":`, "", "not JSON"},
	}
	for _, tc := range tests {
		_, err := Compile(Spec{Alts: []Alt{{Schema: json.RawMessage(tc.schema)}}})
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%s: err = %v, want a SchemaError", tc.schema, err)
			continue
		}
		if se.Pointer != tc.pointer || !strings.Contains(se.Error(), tc.says) {
			t.Errorf("%s: %q at %q, want %q at %q", tc.schema, se.Error(), se.Pointer, tc.says, tc.pointer)
		}
	}
}

// sampleRandom plays a model with random logits: each step masks the
// vocabulary and picks uniformly among what is left, as a random-weight
// model does, until end of generation.
func sampleRandom(t *testing.T, g *Grammar, v *Vocab, toks []string, rng *rand.Rand, limit int) (string, bool) {
	t.Helper()
	m := NewMatcher(g, v)
	logits := make([]float32, v.Len())
	var out strings.Builder
	for range limit {
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		if err := m.Mask(logits); err != nil {
			t.Fatalf("mask after %q: %v", out.String(), err)
		}
		best := int32(-1)
		for i, l := range logits {
			if !math.IsInf(float64(l), -1) && (best < 0 || l > logits[best]) {
				best = int32(i)
			}
		}
		if !m.Allowed(best) {
			t.Fatalf("Mask left token %d (%q), which Allowed refuses, after %q", best, toks[best], out.String())
		}
		if err := m.Accept(best); err != nil {
			t.Fatal(err)
		}
		if v.eog(best) {
			return out.String(), true
		}
		out.WriteString(toks[best])
	}
	return out.String(), false
}

// TestRandomModelEmitsValidJSON: whatever the logits, the masked output
// parses and has the schema's shape; and it ends, since every value is
// bounded.
func TestRandomModelEmitsValidJSON(t *testing.T) {
	v, toks := byteVocab()
	g := mustCompile(t, `{"type":"object","properties":{
		"city":{"type":"string","maxLength":6},
		"unit":{"enum":["c","f"]},
		"days":{"type":"integer"},
		"hourly":{"type":"array","maxItems":3,"items":{"type":"number"}},
		"ok":{"type":"boolean"}},"required":["city","unit"],"additionalProperties":false}`)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 40 {
		s, ended := sampleRandom(t, g, v, toks, rng, 400)
		if !ended {
			t.Fatalf("run %d did not end in 400 tokens: %q", i, s)
		}
		var got struct {
			City   *string
			Unit   *string
			Days   *float64
			Hourly []float64
			OK     *bool
		}
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("run %d: %q does not parse: %v", i, s, err)
		}
		if got.City == nil || utf8.RuneCountInString(*got.City) > 6 || got.Unit == nil || (*got.Unit != "c" && *got.Unit != "f") || len(got.Hourly) > 3 {
			t.Fatalf("run %d: %q breaks the schema", i, s)
		}
		if got.Days != nil && *got.Days != math.Trunc(*got.Days) {
			t.Fatalf("run %d: days %v is not an integer", i, *got.Days)
		}
	}
}

// A memo that fills up and starts again changes no answer.
func TestMemoReset(t *testing.T) {
	v, toks := byteVocab()
	g := mustCompile(t, `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":4},"b":{"type":"integer","minimum":-50,"maximum":5000}},"required":["a","b"]}`)
	for seed := range uint64(8) {
		small := NewMatcher(g, v)
		small.memoStates = 3
		big := NewMatcher(g, v)
		rng := rand.New(rand.NewPCG(seed, 9))
		logits := make([]float32, v.Len())
		masked := make([]float32, v.Len())
		for range 300 {
			for i := range logits {
				logits[i] = float32(rng.NormFloat64())
			}
			copy(masked, logits)
			if err := small.Mask(logits); err != nil {
				t.Fatal(err)
			}
			if err := big.Mask(masked); err != nil {
				t.Fatal(err)
			}
			best := int32(0)
			for i := range logits {
				if math.IsInf(float64(logits[i]), -1) != math.IsInf(float64(masked[i]), -1) {
					t.Fatalf("seed %d: masks differ at token %d (%q)", seed, i, toks[i])
				}
				if logits[i] > logits[best] {
					best = int32(i)
				}
			}
			if small.Accept(best) != nil || big.Accept(best) != nil {
				t.Fatalf("seed %d: accept %q", seed, toks[best])
			}
			if v.eog(best) {
				break
			}
		}
	}
}

func TestToolCallSpec(t *testing.T) {
	v, toks := byteVocab()
	g, err := Compile(Spec{Alts: []Alt{
		{Prefix: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":4}},"required":["city"]}`), Suffix: "}\n</tool_call>"},
		{Prefix: "<tool_call>\n{\"name\": \"now\", \"arguments\": ", Schema: json.RawMessage(`{"type":"object","properties":{}}`), Suffix: "}\n</tool_call>"},
	}, Repeat: true, Sep: "\n"})
	if err != nil {
		t.Fatal(err)
	}
	if !matches(g, v, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>") {
		t.Error("two calls rejected")
	}
	if matches(g, v, "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>") {
		t.Error("an unknown tool accepted")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10 {
		s, ended := sampleRandom(t, g, v, toks, rng, 2000)
		if !ended || !strings.HasPrefix(s, "<tool_call>\n{\"name\": \"") || !strings.HasSuffix(s, "}\n</tool_call>") {
			t.Fatalf("random tool call %q (ended %v)", s, ended)
		}
	}
}

func TestMatcherRefusesEOGEarlyAndUnknownTokens(t *testing.T) {
	v, _ := byteVocab()
	m := NewMatcher(mustCompile(t, `{"type":"boolean"}`), v)
	if m.Allowed(0) || m.Accept(0) == nil {
		t.Error("end of generation allowed before any output")
	}
	if m.Allowed(-1) || m.Allowed(int32(v.Len())) {
		t.Error("a token outside the vocabulary allowed")
	}
	if err := m.AcceptText("true"); err != nil || !m.Done() {
		t.Errorf("after true: %v, done %v", err, m.Done())
	}
	if !m.Allowed(0) {
		t.Error("end of generation refused after a whole value")
	}
}

func FuzzCompile(f *testing.F) {
	for _, s := range []string{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
		`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`, `{"type":"array","items":{"enum":[1,"x",null]},"maxItems":3}`,
		`{"type":"string","minLength":1000,"maxLength":1000}`, `true`} {
		f.Add([]byte(s), []byte(`{"a":"b"}`))
	}
	v, _ := byteVocab()
	f.Fuzz(func(t *testing.T, schema, text []byte) {
		g, err := Compile(Spec{Alts: []Alt{{Schema: schema}}})
		if err != nil {
			return
		}
		m := NewMatcher(g, v)
		logits := make([]float32, v.Len())
		_ = m.Mask(logits)
		if m.AcceptText(string(text)) == nil && m.Accepting() && !json.Valid(text) {
			t.Fatalf("schema %s accepted invalid JSON %q", schema, text)
		}
	})
}

// Integer ranges accept exactly the integers inside them.
func TestIntRangeExact(t *testing.T) {
	v, _ := byteVocab()
	rng := rand.New(rand.NewPCG(7, 8))
	for range 60 {
		lo := rng.Int64N(4000) - 2000
		hi := lo + rng.Int64N(3000)
		g := mustCompile(t, `{"type":"integer","minimum":`+strconv.FormatInt(lo, 10)+`,"maximum":`+strconv.FormatInt(hi, 10)+`}`)
		for x := lo - 30; x <= hi+30; x += 1 + rng.Int64N(7) {
			if got, want := matches(g, v, strconv.FormatInt(x, 10)), x >= lo && x <= hi; got != want {
				t.Fatalf("[%d, %d]: %d accepted %v", lo, hi, x, got)
			}
		}
	}
}

// FuzzCompileSpec compiles whole specs (several alternatives with their
// prefixes and suffixes, repeated with a separator: what a request's tools
// become) and runs text through them: no panic, and a text accepted whole
// starts with one alternative's prefix.
func FuzzCompileSpec(f *testing.F) {
	f.Add([]byte(`{"alts":[{"prefix":"<tool_call>\n{\"name\":\"f\",\"arguments\":","schema":{"type":"object"},"suffix":"}\n</tool_call>"}]}`),
		[]byte("<tool_call>\n{\"name\":\"f\",\"arguments\":{}}\n</tool_call>"))
	f.Add([]byte(`{"alts":[{"prefix":"[A]","noValue":true},{"prefix":"[B]","schema":{"enum":[1,2]}}],"repeat":true,"sep":","}`), []byte("[B]2,[A]"))
	f.Add([]byte(`{"alts":[{"schema":{"type":"string","maxLength":3}}]}`), []byte(`"ab"`))
	f.Add([]byte(`{"alts":[]}`), []byte(``))
	v, _ := byteVocab()
	f.Fuzz(func(t *testing.T, spec, text []byte) {
		var s Spec
		if json.Unmarshal(spec, &s) != nil {
			return
		}
		g, err := Compile(s)
		if err != nil {
			return
		}
		m := NewMatcher(g, v)
		logits := make([]float32, v.Len())
		_ = m.Mask(logits)
		if m.AcceptText(string(text)) != nil || !m.Accepting() {
			return
		}
		for _, a := range s.Alts {
			if strings.HasPrefix(string(text), a.Prefix) {
				return
			}
		}
		t.Fatalf("spec %s accepted %q, which starts with no alternative's prefix", spec, text)
	})
}
