package api

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// byteVocab is a unit-test double for a model's vocabulary: token i < 256
// is byte i, token 256 is the special "<s>" that add_special prepends.
type byteVocab struct{}

func (byteVocab) Encode(s string, addSpecial bool) ([]int32, error) {
	var ids []int32
	if addSpecial {
		ids = append(ids, 256)
	}
	for i := range len(s) {
		ids = append(ids, int32(s[i]))
	}
	return ids, nil
}

func (byteVocab) Decode(ids []int32) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		if id == 256 {
			b.WriteString("<s>")
		} else {
			b.WriteByte(byte(id))
		}
	}
	return b.String(), nil
}

func (byteVocab) VocabSize() int { return 257 }

func post(t *testing.T, url, path, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	return resp, v
}

func jsonOf(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// errCode is the code of an OpenAI error body ("" for another shape).
func errCode(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestTokenize(t *testing.T) {
	srv := chatServer(t, &fakeInference{node: testNode})
	for _, c := range []struct{ path, body, want string }{
		{"/tokenize", `{"model":"m","content":"hi"}`, `{"tokens":[104,105]}`},
		{"/tokenize", `{"model":"m","content":"hi","add_special":true}`, `{"tokens":[256,104,105]}`},
		{"/tokenize", `{"model":"m","content":""}`, `{"tokens":[]}`},
		// Pieces: a string when valid UTF-8, else the bytes (é is two
		// byte tokens here).
		{"/tokenize", `{"model":"m","content":"aé","add_special":true,"with_pieces":true}`,
			`{"tokens":[{"id":256,"piece":"<s>"},{"id":97,"piece":"a"},{"id":195,"piece":[195]},{"id":169,"piece":[169]}]}`},
		{"/detokenize", `{"model":"m","tokens":[256,104,195,169]}`, `{"content":"<s>hé"}`},
		{"/detokenize", `{"model":"m","tokens":[]}`, `{"content":""}`},
	} {
		resp, v := post(t, srv.URL, c.path, c.body)
		if resp.StatusCode != 200 || jsonOf(v) != c.want {
			t.Errorf("%s %s = %d %s, want %s", c.path, c.body, resp.StatusCode, jsonOf(v), c.want)
		}
	}
	for _, c := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/tokenize", `{"model":"m","content":`, 400, "invalid_json"},
		{"/tokenize", `{"model":"m","content":"x","bogus":1}`, 400, "invalid_json"},
		{"/tokenize", `{"content":"x"}`, 400, "invalid_value"},
		{"/tokenize", `{"model":"m","content":5}`, 400, "invalid_json"},
		{"/tokenize", `{"model":"missing","content":"x"}`, 404, "model_not_found"},
		{"/detokenize", `{"model":"m","tokens":[257]}`, 400, "invalid_value"},
		{"/detokenize", `{"model":"m","tokens":[-1]}`, 400, "invalid_value"},
		{"/detokenize", `{"model":"m","tokens":["a"]}`, 400, "invalid_json"},
		{"/detokenize", `{"model":"missing","tokens":[1]}`, 404, "model_not_found"},
		{"/tokenize", `{"model":"m","content":"` + strings.Repeat("x", MaxBodyBytes) + `"}`, 413, ""},
	} {
		resp, v := post(t, srv.URL, c.path, c.body)
		code := errCode(v)
		if resp.StatusCode != c.status || code != c.code {
			t.Errorf("%s %.80s = %d %s, want %d %s", c.path, c.body, resp.StatusCode, jsonOf(v), c.status, c.code)
		}
	}
	if resp, err := http.Get(srv.URL + "/tokenize"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /tokenize: %v %v", resp, err)
	}
}

// A node without the model's file forwards /tokenize to one that has it.
func TestTokenizeForwarded(t *testing.T) {
	st, _ := newStore(64)
	other := &Server{NodeID: "other-node", Store: st, Logger: newAPI(st).Logger, Inference: &fakeInference{node: "other-node"}}
	peer := httptest.NewServer(other.PeerHandler())
	t.Cleanup(peer.Close)
	dialled := false
	toPeer := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		dialled = strings.HasPrefix(addr, "other-node:")
		return (&net.Dialer{}).DialContext(ctx, "tcp", strings.TrimPrefix(peer.URL, "http://"))
	}}}
	srv := chatServer(t, &fakeInference{node: "other-node", peer: toPeer})
	resp, v := post(t, srv.URL, "/tokenize", `{"model":"m","content":"ok"}`)
	if resp.StatusCode != 200 || jsonOf(v) != `{"tokens":[111,107]}` || !dialled {
		t.Fatalf("%d %s (dialled %v)", resp.StatusCode, jsonOf(v), dialled)
	}
	resp, v = post(t, srv.URL, "/detokenize", `{"model":"m","tokens":[111,107]}`)
	if resp.StatusCode != 200 || jsonOf(v) != `{"content":"ok"}` {
		t.Fatalf("%d %s", resp.StatusCode, jsonOf(v))
	}
}

type legacyAnswer struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Index        int             `json:"index"`
		Text         string          `json:"text"`
		Logprobs     *legacyLogprobs `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage  *usage     `json:"usage"`
	Orrery *orreryExt `json:"orrery"`
}

func TestCompletions(t *testing.T) {
	inf := &fakeInference{node: testNode, pieces: []string{"he", "", "llo"}, failAfter: -1, gotReq: make(chan runnerapi.Request, 1)}
	srv := chatServer(t, inf)

	// A string prompt, logprobs with 2 alternatives.
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":3,"temperature":0,"seed":4,"stop":"x","logprobs":2}`))
	if err != nil {
		t.Fatal(err)
	}
	var a legacyAnswer
	json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	got := <-inf.gotReq
	if resp.StatusCode != 200 || a.Object != "text_completion" || !strings.HasPrefix(a.ID, "cmpl-") || len(a.Choices) != 1 ||
		a.Choices[0].Text != "hello" || *a.Choices[0].FinishReason != "length" || *a.Usage != (usage{7, 3, 10, promptDetails{2}}) ||
		a.Orrery.TraceID != resp.Header.Get(TraceIDHeader) || a.Orrery.TraceID == "" {
		t.Fatalf("%d %+v", resp.StatusCode, a)
	}
	if got.Prompt != "hi" || got.MaxTokens != 3 || got.Sample.Temperature != 0 || got.Sample.Seed != 4 ||
		!slices.Equal(got.Stop, []string{"x"}) || !got.Logprobs || got.TopLogprobs != 2 || got.Echo {
		t.Fatalf("runner request %+v", got)
	}
	lp := a.Choices[0].Logprobs
	if lp == nil || !slices.Equal(lp.Tokens, []string{"he", "", "llo"}) || !slices.Equal(lp.TokenLogprobs, []float32{-0.5, -0.5, -0.5}) ||
		!slices.Equal(lp.TextOffset, []int{0, 2, 2}) || len(lp.TopLogprobs) != 3 || jsonOf(lp.TopLogprobs[0]) != `{"alt1":-2,"he":-0.5}` {
		t.Fatalf("logprobs %s", jsonOf(lp))
	}

	// Token ids, echo, no logprobs: logprobs is null.
	resp, err = http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":[[1,2,3]],"echo":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	json.NewDecoder(resp.Body).Decode(&raw)
	resp.Body.Close()
	got = <-inf.gotReq
	if c := raw["choices"].([]any)[0].(map[string]any); resp.StatusCode != 200 || c["logprobs"] != nil || c["text"] != "hello" ||
		!slices.Equal(got.PromptTokens, []int32{1, 2, 3}) || !got.Echo || got.Logprobs || got.Sample.Temperature != 1 {
		t.Fatalf("%d %s; runner request %+v", resp.StatusCode, jsonOf(raw), got)
	}
	// Echo of a string prompt (the fake runner echoes it as the runner does).
	_, raw = post(t, srv.URL, "/v1/completions", `{"model":"m","prompt":["say "],"echo":true}`)
	<-inf.gotReq
	if c := raw["choices"].([]any)[0].(map[string]any); c["text"] != "say hello" {
		t.Fatalf("echo: %s", jsonOf(raw))
	}

	// Streaming with logprobs: a chunk per token (empty text included),
	// then the finish with usage, then [DONE].
	resp, err = http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi","stream":true,"logprobs":0}`))
	if err != nil {
		t.Fatal(err)
	}
	data := sseData(t, resp.Body)
	resp.Body.Close()
	<-inf.gotReq
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || len(data) != 5 || data[4] != "[DONE]" {
		t.Fatalf("%d %q", resp.StatusCode, data)
	}
	var text strings.Builder
	var offsets []int
	for _, d := range data[:3] {
		var c legacyAnswer
		if err := json.Unmarshal([]byte(d), &c); err != nil || c.Object != "text_completion" || c.Choices[0].FinishReason != nil ||
			c.Choices[0].Logprobs == nil || len(c.Choices[0].Logprobs.Tokens) != 1 || c.Usage != nil {
			t.Fatalf("chunk %s", d)
		}
		text.WriteString(c.Choices[0].Text)
		offsets = append(offsets, c.Choices[0].Logprobs.TextOffset[0])
	}
	var last legacyAnswer
	json.Unmarshal([]byte(data[3]), &last)
	if text.String() != "hello" || !slices.Equal(offsets, []int{0, 2, 2}) || *last.Choices[0].FinishReason != "length" ||
		last.Usage == nil || last.Orrery == nil {
		t.Fatalf("stream %q", data)
	}

	// Streaming without logprobs skips empty pieces.
	resp, _ = http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`))
	data = sseData(t, resp.Body)
	resp.Body.Close()
	<-inf.gotReq
	if len(data) != 4 || !strings.Contains(data[0], `"text":"he"`) || !strings.Contains(data[0], `"logprobs":null`) {
		t.Fatalf("stream without logprobs %q", data)
	}
}

func TestCompletionsErrors(t *testing.T) {
	srv := chatServer(t, &fakeInference{node: testNode, pieces: []string{"a"}, failAfter: -1})
	for _, c := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"model":"m","prompt":"hi"`, 400, "invalid_json"},
		{`{"prompt":"hi"}`, 400, "invalid_value"},
		{`{"model":"m"}`, 400, "invalid_value"},
		{`{"model":"m","prompt":""}`, 400, "invalid_value"},
		{`{"model":"m","prompt":[]}`, 400, "invalid_value"},
		{`{"model":"m","prompt":["a","b"]}`, 400, "invalid_value"},
		{`{"model":"m","prompt":[1.5]}`, 400, "invalid_value"},
		{`{"model":"m","prompt":{"a":1}}`, 400, "invalid_value"},
		{`{"model":"m","prompt":"hi","n":2}`, 400, "invalid_value"},
		{`{"model":"m","prompt":"hi","logprobs":21}`, 400, "invalid_value"},
		{`{"model":"m","prompt":"hi","logprobs":-1}`, 400, "invalid_value"},
		{`{"model":"m","prompt":"hi","logprobs":1,"echo":true}`, 400, "invalid_value"},
		{`{"model":"m","prompt":"hi","temperature":11}`, 400, "invalid_value"},
		{`{"model":"m","prompt":"hi","max_tokens":-1}`, 400, "invalid_value"},
		{`{"model":"m","prompt":"hi","stop":5}`, 400, "invalid_value"},
		{`{"model":"missing","prompt":"hi"}`, 404, "model_not_found"},
	} {
		resp, v := post(t, srv.URL, "/v1/completions", c.body)
		code := errCode(v)
		if resp.StatusCode != c.status || code != c.code {
			t.Errorf("%s = %d %s, want %d %s", c.body, resp.StatusCode, jsonOf(v), c.status, c.code)
		}
	}
	resp, _ := http.Post(srv.URL+"/v1/completions", "text/plain", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d", resp.StatusCode)
	}
}

// Chat completions take OpenAI's logprobs and top_logprobs.
func TestChatLogprobs(t *testing.T) {
	inf := &fakeInference{node: testNode, pieces: []string{"he", "", "llo"}, failAfter: -1, gotReq: make(chan runnerapi.Request, 1)}
	srv := chatServer(t, inf)
	resp := postChat(t, srv.URL, "application/json", hello+`,"logprobs":true,"top_logprobs":2}`)
	var a struct {
		Choices []struct {
			Logprobs struct {
				Content []chatLogprob `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	json.NewDecoder(resp.Body).Decode(&a)
	if got := <-inf.gotReq; resp.StatusCode != 200 || !got.Logprobs || got.TopLogprobs != 2 {
		t.Fatalf("%d %+v", resp.StatusCode, got)
	}
	c := a.Choices[0].Logprobs.Content
	if len(c) != 3 || c[0].Token != "he" || c[0].Logprob != -0.5 || !slices.Equal(c[0].Bytes, []int{'h', 'e'}) ||
		len(c[0].TopLogprobs) != 2 || c[0].TopLogprobs[1].Token != "alt1" {
		t.Fatalf("logprobs %s", jsonOf(a))
	}
	// Streamed: a chunk per token, empty text included.
	resp = postChat(t, srv.URL, "application/json", hello+`,"logprobs":true,"stream":true}`)
	data := sseData(t, resp.Body)
	<-inf.gotReq
	n := 0
	for _, d := range data {
		if strings.Contains(d, `"logprobs":{"content":[{`) {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d chunks with logprobs: %q", n, data)
	}
	// Without logprobs: no logprobs key in chunks (the shape is unchanged).
	resp = postChat(t, srv.URL, "application/json", hello+`,"stream":true}`)
	data = sseData(t, resp.Body)
	<-inf.gotReq
	if strings.Contains(strings.Join(data, "\n"), "logprobs") {
		t.Fatalf("logprobs unasked: %q", data)
	}
	for _, bad := range []string{`,"top_logprobs":2}`, `,"logprobs":true,"top_logprobs":21}`} {
		if resp := postChat(t, srv.URL, "application/json", hello+bad); resp.StatusCode != 400 {
			t.Errorf("%s: %d", bad, resp.StatusCode)
		}
	}
}
