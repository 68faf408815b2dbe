package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// embedAnswer is OpenAI's embeddings answer.
type embedAnswer struct {
	Object string `json:"object"`
	Data   []struct {
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
	Orrery struct {
		InstanceID string `json:"instanceId"`
		TraceID    string `json:"traceId"`
	} `json:"orrery"`
}

// embedVectors posts an OpenAI embeddings request and returns its
// vectors (float or base64 as asked).
func embedVectors(t *testing.T, p *agentProc, body string) ([][]float32, embedAnswer) {
	t.Helper()
	code, b, err := p.post("/v1/embeddings", body)
	if err != nil || code != http.StatusOK {
		t.Fatalf("POST /v1/embeddings %.200s = %d %s %v", body, code, b, err)
	}
	var a embedAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, len(a.Data))
	for i, d := range a.Data {
		if d.Index != i {
			t.Fatalf("item %d has index %d", i, d.Index)
		}
		var s string
		if json.Unmarshal(d.Embedding, &s) == nil {
			raw, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; k+4 <= len(raw); k += 4 {
				out[i] = append(out[i], math.Float32frombits(binary.LittleEndian.Uint32(raw[k:])))
			}
		} else if err := json.Unmarshal(d.Embedding, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out, a
}

func cos32(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

func norm32(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// Embeddings through two real agents: an embedding model loaded on
// demand where its file is (the request made on the other node), every
// route's shape giving the same vectors, the bad inputs refused with 400s
// (a chat model without loading it), and the same vectors from a pipeline
// over both nodes and from a tensor-parallel group.
func TestEmbeddings(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (embeddings through two agents, a pipeline and a group): runs in make test")
	}
	bin := buildBinary(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	emb := genModel(t, bin, dirs[1], "emb", "--preset", "small", "--arch", "qwen3", "--pooling", "last", "--layers", "4")
	chatModel := genModel(t, bin, dirs[1], "chatty", "--preset", "tiny")
	ps, ids := loopbackCluster(t, bin, dirs, nil)
	a := ps[0]
	poll(t, a, 20*time.Second, "B's models in A's /v1/models", func() (bool, string) {
		_, body, _ := a.get("/v1/models")
		return strings.Contains(string(body), emb) && strings.Contains(string(body), chatModel), string(body)
	})
	texts := `["the first text", "a second, longer text about something else entirely", "x"]`
	base, ans := embedVectors(t, a, `{"model":"`+emb+`","input":`+texts+`}`)
	if len(base) != 3 || ans.Object != "list" || ans.Usage.PromptTokens < 6 {
		t.Fatalf("answer %+v", ans)
	}
	for i, v := range base {
		if len(v) != 512 || math.Abs(norm32(v)-1) > 1e-5 {
			t.Errorf("vector %d: %d values of norm %.7f, want 512 of norm 1", i, len(v), norm32(v))
		}
	}
	if c := cos32(base[0], base[1]); c > 0.9999 {
		t.Errorf("two different texts have cosine %.6f", c)
	}
	t.Logf("on-demand instance %s; cosine(text 0, text 1) = %.4f", ans.Orrery.InstanceID, cos32(base[0], base[1]))
	// The request left a trace: rank 0's prefill of each input.
	if ans.Orrery.TraceID == "" {
		t.Fatal("the answer names no trace")
	}
	poll(t, a, 15*time.Second, "the embedding trace", func() (bool, string) {
		code, b, err := a.get("/v1/traces/" + ans.Orrery.TraceID + "/raw")
		return err == nil && code == 200 && strings.Count(string(b), `"name":"prefill"`) >= 3, fmt.Sprintf("%d %.300s %v", code, b, err)
	})

	same := func(what string, got []float32, want []float32) {
		t.Helper()
		if c := cos32(got, want); len(got) != len(want) || c < 0.99999 {
			t.Errorf("%s: %d values, cosine %.7f to /v1/embeddings's", what, len(got), c)
		}
	}
	b64, _ := embedVectors(t, a, `{"model":"`+emb+`","input":"the first text","encoding_format":"base64"}`)
	same("base64", b64[0], base[0])
	short, _ := embedVectors(t, a, `{"model":"`+emb+`","input":"the first text","dimensions":64}`)
	if len(short[0]) != 64 || math.Abs(norm32(short[0])-1) > 1e-5 {
		t.Errorf("dimensions 64: %d values of norm %.6f", len(short[0]), norm32(short[0]))
	}
	same("dimensions 64", short[0], base[0][:64])
	code, b, _ := a.post("/api/embed", `{"model":"`+emb+`","input":`+texts+`}`)
	var oe struct{ Embeddings [][]float32 }
	if json.Unmarshal(b, &oe); code != 200 || len(oe.Embeddings) != 3 {
		t.Fatalf("/api/embed: %d %s", code, b)
	}
	for i := range base {
		same(fmt.Sprintf("/api/embed %d", i), oe.Embeddings[i], base[i])
	}
	code, b, _ = a.post("/api/embeddings", `{"model":"`+emb+`","prompt":"x"}`)
	var ol struct{ Embedding []float32 }
	if json.Unmarshal(b, &ol); code != 200 {
		t.Fatalf("/api/embeddings: %d %s", code, b)
	}
	same("/api/embeddings", ol.Embedding, base[2])

	many := `"` + strings.Repeat(`x","`, 9999) + `x"`
	for _, c := range []struct{ path, body, says string }{
		{"/v1/embeddings", `{"model":"` + chatModel + `","input":"hi"}`, "not an embedding model"},
		{"/api/embed", `{"model":"` + chatModel + `","input":"hi"}`, "not an embedding model"},
		{"/v1/embeddings", `{"model":"` + emb + `","input":[1,2,99999]}`, "token 2 is 99999"},
		{"/v1/embeddings", `{"model":"` + emb + `","input":[]}`, "empty array"},
		{"/v1/embeddings", `{"model":"` + emb + `","input":[` + many + `]}`, "at most 2048"},
		{"/v1/embeddings", `{"model":"` + emb + `","input":"a","dimensions":100000}`, "dimensions 100000"},
	} {
		code, b, _ := a.post(c.path, c.body)
		if code != http.StatusBadRequest || !strings.Contains(string(b), c.says) {
			t.Errorf("%s %.80s: %d %.300s, want 400 saying %q", c.path, c.body, code, b, c.says)
		}
	}
	if n := len(instancesOf(t, a)); n != 1 {
		t.Errorf("%d instances after the refusals, want only the embedding model's: the chat model must not load", n)
	}

	// The same vectors from a pipeline over both nodes, and from one
	// tensor-parallel group of both.
	deleteInstance(t, a, ans.Orrery.InstanceID)
	for _, par := range []string{"pipeline", "tensor"} {
		in := placeJSON(t, a, fmt.Sprintf(`{"model":"%s","nodes":["%s","%s"],"parallelism":"%s"}`, emb, ids[0], ids[1], par))
		waitReadyRanks(t, a, in)
		got, ans := embedVectors(t, a, `{"model":"`+emb+`","input":`+texts+`}`)
		if ans.Orrery.InstanceID != in.InstanceID {
			t.Fatalf("%s: served by %s, want %s", par, ans.Orrery.InstanceID, in.InstanceID)
		}
		for i := range base {
			c := cos32(got[i], base[i])
			t.Logf("%s over 2 nodes: text %d cosine %.9f to one rank", par, i, c)
			if c < 0.99999 {
				t.Errorf("%s: text %d cosine %.7f to one rank, want ≥ 0.99999", par, i, c)
			}
		}
		deleteInstance(t, a, in.InstanceID)
	}
}

// The clients people point at an embedding server work unchanged, given
// only the base URL, and agree: the openai SDK (base64 on the wire),
// LangChain JS's OpenAIEmbeddings and OllamaEmbeddings, the ollama client.
func TestEmbeddingClients(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed for the client tests: %v", err)
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "@langchain/openai", "package.json")); err != nil {
		t.Fatalf("the clients are not installed (run make deps, or npm ci in test/sdk): %v", err)
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	modelID := genModel(t, bin, dir, "tiny-emb", "--preset", "tiny", "--arch", "qwen3", "--pooling", "mean")
	p := startAgentEnv(t, bin, testutil.FreeAddr(t), dir, []string{"HOME=" + dir}, "--loopback-dir", t.TempDir())
	waitHealthy(t, p)
	poll(t, p, 20*time.Second, "the model listed", func() (bool, string) {
		_, body, _ := p.get("/v1/models")
		return strings.Contains(string(body), modelID), string(body)
	})
	want, _ := embedVectors(t, p, `{"model":"`+modelID+`","input":["the first text","a second text"]}`)
	out := runNode(t, node, "embeddings.mjs", "http://"+p.addr, modelID)
	var got struct {
		OpenAI               [][]float32 `json:"openai"`
		OpenAIUsage          int         `json:"openaiUsage"`
		LangChainOpenAI      [][]float32 `json:"langchainOpenAI"`
		LangChainOpenAIQuery []float32   `json:"langchainOpenAIQuery"`
		LangChainOllama      [][]float32 `json:"langchainOllama"`
		Ollama               [][]float32 `json:"ollama"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %.500s: %v", out, err)
	}
	if got.OpenAIUsage <= 0 {
		t.Errorf("openai SDK: usage.prompt_tokens %d", got.OpenAIUsage)
	}
	for name, vs := range map[string][][]float32{"openai": got.OpenAI, "langchain OpenAIEmbeddings": got.LangChainOpenAI,
		"langchain OllamaEmbeddings": got.LangChainOllama, "ollama": got.Ollama,
		"langchain embedQuery": {got.LangChainOpenAIQuery, want[1]}} {
		if len(vs) != 2 {
			t.Errorf("%s: %d vectors, want 2", name, len(vs))
			continue
		}
		for i := range vs {
			if c := cos32(vs[i], want[i]); len(vs[i]) != len(want[i]) || c < 0.99999 {
				t.Errorf("%s: vector %d has %d values, cosine %.7f to /v1/embeddings's", name, i, len(vs[i]), c)
			}
		}
		t.Logf("%s: 2 vectors of %d, each as /v1/embeddings gives it", name, len(vs[0]))
	}
}
