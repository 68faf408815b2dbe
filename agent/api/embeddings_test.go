package api

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

func embedServer(t *testing.T, inf *fakeInference) *httptest.Server {
	t.Helper()
	st, seq := newStore(64)
	publish(t, seq, state.NodeModelsMeasured{NodeID: testNode, Models: state.NodeModels{Models: []state.ModelInfo{
		{ID: "emb", Arch: "qwen3", Pooling: "last"}, {ID: "chat", Arch: "llama"}, {ID: "rerank", Arch: "qwen3", Pooling: "rank"},
		{ID: "bert", Error: `unsupported architecture "bert"; supported: llama, qwen2`}}}})
	s := newAPI(st)
	s.Inference = inf
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// OpenAI's shapes: a string, strings, token ids and arrays of them; float
// and base64 encodings; the request reaches the runner as read.
func TestOpenAIEmbeddings(t *testing.T) {
	inf := &fakeInference{node: testNode, gotEmbed: make(chan runnerapi.EmbedRequest, 1)}
	srv := embedServer(t, inf)
	for _, tc := range []struct {
		body string
		want []runnerapi.EmbedInput
		dims int
	}{
		{`{"model":"emb","input":"hello"}`, []runnerapi.EmbedInput{{Text: "hello"}}, 0},
		{`{"model":"emb","input":["a","b c"],"dimensions":2}`, []runnerapi.EmbedInput{{Text: "a"}, {Text: "b c"}}, 2},
		{`{"model":"emb","input":[5,6,7]}`, []runnerapi.EmbedInput{{Tokens: []int32{5, 6, 7}}}, 0},
		{`{"model":"emb","input":[[1],[2,3]],"encoding_format":"float"}`, []runnerapi.EmbedInput{{Tokens: []int32{1}}, {Tokens: []int32{2, 3}}}, 0},
	} {
		resp, v := post(t, srv.URL, "/v1/embeddings", tc.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", tc.body, resp.StatusCode, v)
		}
		got := <-inf.gotEmbed
		if jsonOf(got.Inputs) != jsonOf(tc.want) || got.Dimensions != tc.dims {
			t.Errorf("%s: runner got %s dims %d, want %s dims %d", tc.body, jsonOf(got.Inputs), got.Dimensions, jsonOf(tc.want), tc.dims)
		}
		data, _ := v["data"].([]any)
		if v["object"] != "list" || v["model"] != "emb" || len(data) != len(tc.want) {
			t.Fatalf("%s: answer %v", tc.body, v)
		}
		for i, d := range data {
			m := d.(map[string]any)
			emb, _ := m["embedding"].([]any)
			if m["object"] != "embedding" || m["index"] != float64(i) || len(emb) != 4 {
				t.Errorf("%s: item %d is %v", tc.body, i, m)
			}
		}
		if u, _ := v["usage"].(map[string]any); u["prompt_tokens"] == nil || u["prompt_tokens"] != u["total_tokens"] {
			t.Errorf("%s: usage %v", tc.body, v["usage"])
		}
	}
	// base64: the little-endian float32s of the same vector.
	resp, v := post(t, srv.URL, "/v1/embeddings", `{"model":"emb","input":["a","b"],"encoding_format":"base64"}`)
	<-inf.gotEmbed
	if resp.StatusCode != 200 {
		t.Fatalf("base64: %d %v", resp.StatusCode, v)
	}
	s, _ := v["data"].([]any)[1].(map[string]any)["embedding"].(string)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		t.Fatalf("base64 embedding %q: %v", s, err)
	}
	if x := math.Float32frombits(binary.LittleEndian.Uint32(b)); math.Abs(float64(x)-1/math.Sqrt2) > 1e-6 {
		t.Errorf("base64 embedding's first value %v, want 1/√2", x)
	}
}

// Ollama's /api/embed (input, truncate on by default) and the older
// /api/embeddings (prompt, one vector).
func TestOllamaEmbed(t *testing.T) {
	inf := &fakeInference{node: testNode, gotEmbed: make(chan runnerapi.EmbedRequest, 1)}
	srv := embedServer(t, inf)
	resp, v := post(t, srv.URL, "/api/embed", `{"model":"emb","input":["a","b"]}`)
	got := <-inf.gotEmbed
	if resp.StatusCode != 200 || !got.Truncate || len(got.Inputs) != 2 {
		t.Fatalf("/api/embed: %d %v; runner got %+v", resp.StatusCode, v, got)
	}
	if embs, _ := v["embeddings"].([]any); len(embs) != 2 || v["model"] != "emb" || v["prompt_eval_count"] == nil {
		t.Errorf("/api/embed answer %v", v)
	}
	resp, v = post(t, srv.URL, "/api/embed", `{"model":"emb","input":"a","truncate":false}`)
	if got := <-inf.gotEmbed; resp.StatusCode != 200 || got.Truncate {
		t.Errorf("truncate false: %d, runner got truncate %v", resp.StatusCode, got.Truncate)
	}
	resp, v = post(t, srv.URL, "/api/embeddings", `{"model":"emb","prompt":"hello"}`)
	<-inf.gotEmbed
	if emb, _ := v["embedding"].([]any); resp.StatusCode != 200 || len(emb) != 4 {
		t.Errorf("/api/embeddings: %d %v", resp.StatusCode, v)
	}
}

// Every bad input gets a 400 in the protocol's own error shape, before
// the runner sees it; a chat model is refused before it loads.
func TestEmbeddingsRefused(t *testing.T) {
	inf := &fakeInference{node: testNode, gotEmbed: make(chan runnerapi.EmbedRequest, 1)}
	srv := embedServer(t, inf)
	many := make([]string, 10000)
	for i := range many {
		many[i] = "x"
	}
	manyJSON, _ := json.Marshal(many)
	cases := []struct{ path, body, want string }{
		{"/v1/embeddings", `{"model":"emb","input":[]}`, "empty array"},
		{"/v1/embeddings", `{"model":"emb","input":""}`, "empty string"},
		{"/v1/embeddings", `{"model":"emb"}`, "input is missing"},
		{"/v1/embeddings", fmt.Sprintf(`{"model":"emb","input":%s}`, manyJSON), "10000 items, at most 2048"},
		{"/v1/embeddings", `{"model":"emb","input":[[1],[-4]]}`, "token 0 is -4"},
		{"/v1/embeddings", `{"model":"emb","input":[{"a":1}]}`, "want a string"},
		{"/v1/embeddings", `{"model":"emb","input":"a","encoding_format":"int8"}`, "encoding_format"},
		{"/v1/embeddings", `{"model":"emb","input":"a","dimensions":0}`, "dimensions 0"},
		{"/v1/embeddings", `{"model":"chat","input":"a"}`, "not an embedding model"},
		{"/v1/embeddings", `{"model":"rerank","input":"a"}`, "reranker"},
		{"/v1/embeddings", `{"input":"a"}`, "model is required"},
		{"/v1/embeddings", `{"model":"bert","input":"a"}`, `unsupported architecture "bert"`},
		{"/api/embed", `{"model":"emb","input":[]}`, "empty array"},
		{"/api/embed", `{"model":"emb","input":[1,2]}`, "want a string"},
		{"/api/embed", `{"model":"chat","input":"a"}`, "not an embedding model"},
		{"/api/embed", fmt.Sprintf(`{"model":"emb","input":%s}`, manyJSON), "at most 2048"},
		{"/api/embeddings", `{"model":"emb"}`, "prompt is required"},
	}
	for _, tc := range cases {
		resp, v := post(t, srv.URL, tc.path, tc.body)
		msg := ""
		if strings.HasPrefix(tc.path, "/v1/") { // OpenAI: {"error": {"message", "type", "code"}}
			e, _ := v["error"].(map[string]any)
			msg, _ = e["message"].(string)
			if e["type"] != "invalid_request_error" {
				t.Errorf("%s %.60s: error %v, want OpenAI's shape", tc.path, tc.body, v)
			}
		} else { // Ollama: {"error": "…"}
			msg, _ = v["error"].(string)
		}
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("%s %.60s: %d %q, want 400 saying %q", tc.path, tc.body, resp.StatusCode, msg, tc.want)
		}
	}
	select {
	case got := <-inf.gotEmbed:
		t.Errorf("a refused request reached the runner: %+v", got)
	default:
	}
	// The runner's own refusals (a token past the vocabulary, known only
	// there) come back as 400s too.
	inf.err = &runnerapi.RequestError{Status: 400, ErrorBody: runnerapi.ErrorBody{Error: "input 0: token 0 is 99999: want 0..4095", Kind: "bad_request"}}
	resp, v := post(t, srv.URL, "/v1/embeddings", `{"model":"emb","input":[99999]}`)
	<-inf.gotEmbed
	if resp.StatusCode != 400 {
		t.Errorf("runner refusal: %d %v, want 400", resp.StatusCode, v)
	}
}

// Ollama's /api/show lists an embedding model's capability as Ollama
// does: "embedding" (and a chat model's "completion").
func TestOllamaShowEmbedding(t *testing.T) {
	srv := embedServer(t, &fakeInference{node: testNode})
	for model, want := range map[string]string{"emb": "embedding", "chat": "completion"} {
		resp, v := post(t, srv.URL, "/api/show", `{"model":"`+model+`"}`)
		caps, _ := v["capabilities"].([]any)
		if resp.StatusCode != 200 || len(caps) != 1 || caps[0] != want {
			t.Errorf("/api/show %s: %d capabilities %v, want [%s]", model, resp.StatusCode, v["capabilities"], want)
		}
	}
}

// Whatever body arrives, both protocols' embedding requests parse into 1
// to 2048 non-empty inputs with token ids ≥ 0, or fail with an error;
// never a panic.
func FuzzEmbedRequest(f *testing.F) {
	for _, s := range []string{`{"model":"m","input":"a"}`, `{"model":"m","input":["a","b"],"dimensions":3}`, `{"model":"m","input":[1,2]}`,
		`{"model":"m","input":[[1],[2,3]],"encoding_format":"base64"}`, `{"model":"m","prompt":"p"}`, `{"model":"m","input":[]}`,
		`{"model":"m","input":[[]]}`, `{"model":"m","input":[-1]}`, `{"model":"m","input":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		check := func(proto string, req runnerapi.EmbedRequest, err error) {
			if err != nil {
				return
			}
			if len(req.Inputs) == 0 || len(req.Inputs) > runnerapi.MaxEmbedInputs || req.Dimensions < 0 {
				t.Fatalf("%s %q: %d inputs, dimensions %d", proto, body, len(req.Inputs), req.Dimensions)
			}
			for i, in := range req.Inputs {
				if in.Text == "" && len(in.Tokens) == 0 {
					t.Fatalf("%s %q: input %d is empty", proto, body, i)
				}
				for _, id := range in.Tokens {
					if id < 0 {
						t.Fatalf("%s %q: input %d has token %d", proto, body, i, id)
					}
				}
			}
		}
		var o openAIEmbedRequest
		if json.Unmarshal([]byte(body), &o) == nil {
			req, err := o.toRunner()
			check("openai", req, err)
		}
		var ol ollamaEmbedRequest
		if json.Unmarshal([]byte(body), &ol) == nil {
			req, err := ol.toRunner()
			check("ollama", req, err)
		}
	})
}
