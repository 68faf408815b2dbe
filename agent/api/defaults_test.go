package api

import (
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A model's defaults (its Ollama params) fill what a request leaves
// unset, in each protocol; what a request sets wins; defaults that would
// make the request invalid are not used.
func TestModelDefaults(t *testing.T) {
	st, seq := newStore(64)
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	publish(t, seq, state.NodeModelsMeasured{NodeID: "other", Models: state.NodeModels{Models: []state.ModelInfo{
		{ID: "m", Defaults: &state.ModelDefaults{Temperature: f(0.25), TopK: i(7), NumPredict: i(5), Stop: []string{"<end>"}}},
		{ID: "bad", Defaults: &state.ModelDefaults{Temperature: f(99)}},
	}}})
	s := newAPI(st)
	inf := &fakeInference{node: testNode, pieces: []string{"ok"}, failAfter: -1, gotReq: make(chan runnerapi.Request, 1)}
	s.Inference = inf
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		path, body string
		temp       float64
		topK, max  int
		stop       []string
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 0.25, 7, 5, []string{"<end>"}},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":1.5,"max_tokens":9,"stop":"x"}`, 1.5, 7, 9, []string{"x"}},
		{"/v1/completions", `{"model":"m","prompt":"hi","top_k":3}`, 0.25, 3, 5, []string{"<end>"}},
		{"/api/generate", `{"model":"m","prompt":"hi","stream":false}`, 0.25, 7, 5, []string{"<end>"}},
		{"/api/chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"temperature":0,"num_predict":2}}`, 0, 7, 2, []string{"<end>"}},
		{"/v1/messages", `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, 0.25, 7, 4, []string{"<end>"}},
		{"/v1/chat/completions", `{"model":"bad","messages":[{"role":"user","content":"hi"}]}`, 1, 0, 0, nil},
	} {
		post(t, srv.URL, c.path, c.body)
		got := <-inf.gotReq
		if got.Sample.Temperature != c.temp || got.Sample.TopK != c.topK || got.MaxTokens != c.max || !slices.Equal(got.Stop, c.stop) {
			t.Errorf("%s %s: temperature %v top_k %d max %d stop %q", c.path, c.body, got.Sample.Temperature, got.Sample.TopK, got.MaxTokens, got.Stop)
		}
	}
}
