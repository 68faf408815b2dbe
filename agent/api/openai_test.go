package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// fakeInference is a unit-test double: it routes every model to node and
// answers completions from a script.
type fakeInference struct {
	node      string
	pieces    []string
	failAfter int   // fail after this many pieces (-1: never)
	err       error // the failure
	peer      *http.Client
	gotTrace  chan string
	gotReq    chan runnerapi.Request // when set, gets each completion's request
	// loading: Progress reports the instance loading this many times
	// (layer 1 of 4, then 2…), then loadErr or ready.
	loading int
	loadErr error
	// hang: after its pieces, Complete waits for its context to end.
	hang bool
	// held counts the Holds not released; gotKeepAlive, when set, gets
	// the keep-alive each Route and Hold was given.
	held         atomic.Int32
	gotKeepAlive chan *KeepAlive
	holdErr      error
	// existed: Place answers with a live instance, as for the same nodes.
	existed bool
	// gotEmbed, when set, gets each embedding request.
	gotEmbed chan runnerapi.EmbedRequest
}

// Embed answers each input with a unit vector of 4 whose first value is
// the input's index: [i, 1, 0, 0] normalised.
func (f *fakeInference) Embed(ctx context.Context, instanceID, traceID string, req runnerapi.EmbedRequest) (*runnerapi.EmbedResponse, error) {
	if f.gotEmbed != nil {
		f.gotEmbed <- req
	}
	if f.err != nil {
		return nil, f.err
	}
	res := &runnerapi.EmbedResponse{}
	for i, in := range req.Inputs {
		n := float32(math.Sqrt(float64(i*i + 1)))
		res.Embeddings = append(res.Embeddings, runnerapi.Vector{float32(i) / n, 1 / n, 0, 0})
		res.PromptTokens += len(in.Text) + len(in.Tokens)
	}
	return res, nil
}

func (f *fakeInference) Route(ctx context.Context, model string, keepAlive *KeepAlive) (string, string, error) {
	if model == "missing" {
		return "", "", ErrModelNotRunning
	}
	if f.gotKeepAlive != nil {
		f.gotKeepAlive <- keepAlive
	}
	return "inst-1", f.node, nil
}
func (f *fakeInference) Hold(instanceID string, keepAlive *KeepAlive) (func(), error) {
	if f.holdErr != nil {
		return nil, f.holdErr
	}
	if f.gotKeepAlive != nil {
		f.gotKeepAlive <- keepAlive
	}
	f.held.Add(1)
	return func() { f.held.Add(-1) }, nil
}
func (f *fakeInference) PickNode(string) (string, error) { return f.node, nil }
func (f *fakeInference) Progress(string) (LoadProgress, error) {
	if f.loading > 0 {
		f.loading--
		return LoadProgress{Loaded: 3 - f.loading, Total: 4}, nil
	}
	if f.loadErr != nil {
		return LoadProgress{}, f.loadErr
	}
	return LoadProgress{Loaded: 4, Total: 4, Ready: true}, nil
}
func (f *fakeInference) Place(ctx context.Context, req PlaceRequest) (state.Instance, bool, error) {
	return state.Instance{InstanceID: "inst-1", ModelID: req.Model, NodeID: testNode, Ranks: []state.ShardRange{{NodeID: testNode}}, GPULayers: req.GPULayers}, f.existed, nil
}
func (f *fakeInference) Previews(model string, gpuLayers *runnerapi.GPULayers) (PreviewsResponse, error) {
	return PreviewsResponse{Model: model, Layers: 4, GPULayers: gpuLayers}, nil
}
func (f *fakeInference) Delete(context.Context, string) error { return nil }
func (f *fakeInference) Peer() *http.Client                   { return f.peer }
func (f *fakeInference) Vocab(model string) (Vocab, error) {
	if model == "missing" {
		return nil, ErrModelNotFound
	}
	return byteVocab{}, nil
}
func (f *fakeInference) Complete(ctx context.Context, instanceID, traceID string, req runnerapi.Request, onPiece func(runnerapi.Piece) error) (*runnerapi.Done, error) {
	if f.gotTrace != nil {
		f.gotTrace <- traceID
	}
	if f.gotReq != nil {
		f.gotReq <- req
	}
	if req.Echo {
		if err := onPiece(runnerapi.Piece{Index: -1, Token: -1, Text: req.Prompt, Echo: true}); err != nil {
			return nil, err
		}
	}
	for i, p := range f.pieces {
		if i == f.failAfter {
			return nil, f.err
		}
		piece := runnerapi.Piece{Index: i, Token: int32(i), Text: p}
		if req.Logprobs {
			// The token's text is its piece; the top alternatives are
			// the piece and "alt".
			piece.Logprobs = &runnerapi.Logprobs{TokenLogprob: runnerapi.TokenLogprob{Token: int32(i), Logprob: -0.5, Text: p}}
			for k := range req.TopLogprobs {
				t := runnerapi.TokenLogprob{Token: int32(i), Logprob: -0.5, Text: p}
				if k > 0 {
					t = runnerapi.TokenLogprob{Token: 99, Logprob: -2, Text: fmt.Sprintf("alt%d", k)}
				}
				piece.Logprobs.Top = append(piece.Logprobs.Top, t)
			}
		}
		if err := onPiece(piece); err != nil {
			return nil, err
		}
	}
	if f.failAfter == len(f.pieces) {
		return nil, f.err
	}
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &runnerapi.Done{Result: runnerapi.Result{FinishReason: "length", PromptTokens: 7, CachedTokens: 2, CompletionTokens: len(f.pieces),
		PrefillNs: 1e6, DecodeNs: 2e6, FirstTokenNs: 1e6}}, nil
}

func chatServer(t *testing.T, inf *fakeInference) *httptest.Server {
	t.Helper()
	st, _ := newStore(64)
	s := newAPI(st)
	s.Inference = inf
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func postChat(t *testing.T, url, contentType, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseData returns the data lines of an SSE body.
func sseData(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

const hello = `{"model":"m","messages":[{"role":"user","content":"hi"}]`

func TestChatCompletion(t *testing.T) {
	inf := &fakeInference{node: testNode, pieces: []string{"he", "", "llo"}, failAfter: -1, gotTrace: make(chan string, 1)}
	srv := chatServer(t, inf)
	resp := postChat(t, srv.URL, "application/json", hello+`}`)
	var a struct {
		Object  string `json:"object"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
		} `json:"choices"`
		Usage  usage     `json:"usage"`
		Orrery orreryExt `json:"orrery"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	tid := resp.Header.Get(TraceIDHeader)
	if a.Object != "chat.completion" || a.Choices[0].Message.Content != "hello" || a.Choices[0].Message.Role != "assistant" ||
		a.Choices[0].FinishReason != "length" || a.Usage != (usage{7, 3, 10, promptDetails{2}}) || a.Orrery.CachedTokens != 2 || a.Orrery.TraceID != tid || !strings.HasPrefix(tid, "chat-") ||
		<-inf.gotTrace != tid || resp.Header.Get(NodeHeader) != testNode || a.Orrery.DecodeTokPerS != 1000 {
		t.Fatalf("answer %+v, headers %v", a, resp.Header)
	}
	// Untraced on request: no trace id anywhere.
	resp = postChat(t, srv.URL, "application/json", hello+`}`, TraceHeader, "off")
	if resp.Header.Get(TraceIDHeader) != "" || <-inf.gotTrace != "" {
		t.Fatal("X-Orrery-Trace: off still traced")
	}
}

// keep_alive reaches Route (an on-demand placement's) and Hold (the
// instance's from then on); every request's Hold is released when it
// ends, streamed or not, failed or not.
func TestChatKeepAlive(t *testing.T) {
	inf := &fakeInference{node: testNode, pieces: []string{"a"}, failAfter: -1, gotKeepAlive: make(chan *KeepAlive, 2)}
	srv := chatServer(t, inf)
	for _, c := range []struct {
		body string
		want time.Duration
	}{{`,"keep_alive":"10m"}`, 10 * time.Minute}, {`,"keep_alive":-1,"stream":true}`, -1}, {`,"keep_alive":0}`, 0}} {
		resp := postChat(t, srv.URL, "application/json", hello+c.body)
		io.ReadAll(resp.Body)
		route, hold := <-inf.gotKeepAlive, <-inf.gotKeepAlive
		if resp.StatusCode != 200 || route == nil || hold == nil || route.D != c.want || hold.D != c.want {
			t.Fatalf("%s: %d, route %v, hold %v", c.body, resp.StatusCode, route, hold)
		}
		if n := inf.held.Load(); n != 0 {
			t.Fatalf("%s: %d holds left after the answer", c.body, n)
		}
	}
	resp := postChat(t, srv.URL, "application/json", hello+`}`)
	io.ReadAll(resp.Body)
	if route, hold := <-inf.gotKeepAlive, <-inf.gotKeepAlive; route != nil || hold != nil {
		t.Fatalf("no keep_alive, yet route %v hold %v", route, hold)
	}
	resp = postChat(t, srv.URL, "application/json", hello+`,"keep_alive":"soon"}`)
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 400 || !strings.Contains(string(body), "keep_alive") {
		t.Fatalf("bad keep_alive: %d %s", resp.StatusCode, body)
	}
	inf.failAfter, inf.err = 0, errors.New("runner failed")
	resp = postChat(t, srv.URL, "application/json", hello+`,"stream":true}`)
	io.ReadAll(resp.Body)
	<-inf.gotKeepAlive
	<-inf.gotKeepAlive
	if n := inf.held.Load(); n != 0 {
		t.Fatalf("a failed request left %d holds", n)
	}
	// An instance being unloaded as the request comes: 503, retry.
	srv = chatServer(t, &fakeInference{node: testNode, holdErr: fmt.Errorf("%w: inst-1 expired", ErrUnloading)})
	resp = postChat(t, srv.URL, "application/json", hello+`}`)
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 503 || !strings.Contains(string(body), "expired") {
		t.Fatalf("unloading: %d %s", resp.StatusCode, body)
	}
}

func TestChatStream(t *testing.T) {
	srv := chatServer(t, &fakeInference{node: testNode, pieces: []string{"a", "b"}, failAfter: -1})
	resp := postChat(t, srv.URL, "application/json", hello+`,"stream":true}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	data := sseData(t, resp.Body)
	if len(data) != 5 || data[4] != "[DONE]" {
		t.Fatalf("events %q", data)
	}
	var first, last struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta        map[string]string `json:"delta"`
			FinishReason *string           `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	json.Unmarshal([]byte(data[0]), &first)
	json.Unmarshal([]byte(data[3]), &last)
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta["role"] != "assistant" || first.Choices[0].FinishReason != nil {
		t.Errorf("first chunk %s", data[0])
	}
	if !strings.Contains(data[1], `"content":"a"`) || !strings.Contains(data[2], `"content":"b"`) {
		t.Errorf("content chunks %q", data[1:3])
	}
	if last.Choices[0].FinishReason == nil || *last.Choices[0].FinishReason != "length" || last.Usage == nil || last.Usage.CompletionTokens != 2 {
		t.Errorf("last chunk %s", data[3])
	}
}

// A stream whose instance is still loading gets SSE comments saying how
// far, then its events; a load that fails gets a 503 naming the rank, or
// an error event once comments went out.
func TestChatStreamWhileLoading(t *testing.T) {
	srv := chatServer(t, &fakeInference{node: testNode, pieces: []string{"a"}, failAfter: -1, loading: 2})
	resp := postChat(t, srv.URL, "application/json", hello+`,"stream":true}`)
	body, _ := io.ReadAll(resp.Body)
	s := string(body)
	i1, i2, id := strings.Index(s, ": loading 2/4 layers\n\n"), strings.Index(s, ": loading 3/4 layers\n\n"), strings.Index(s, "data: ")
	if resp.StatusCode != 200 || i1 != 0 || i2 < i1 || id < i2 || !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("%d %q", resp.StatusCode, s)
	}
	failed := fmt.Errorf("%w: rank 1 of inst-1 on node n2: out of memory", ErrLoadFailed)
	srv = chatServer(t, &fakeInference{node: testNode, loadErr: failed})
	resp = postChat(t, srv.URL, "application/json", hello+`,"stream":true}`)
	var e struct {
		Error struct{ Message, Code string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 503 || e.Error.Code != "load_failed" || !strings.Contains(e.Error.Message, "rank 1 of inst-1 on node n2") {
		t.Errorf("load failed at once: %d %+v", resp.StatusCode, e)
	}
	srv = chatServer(t, &fakeInference{node: testNode, loading: 1, loadErr: failed})
	resp = postChat(t, srv.URL, "application/json", hello+`}`)
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 503 || e.Error.Code != "load_failed" {
		t.Errorf("load failed, not streamed: %d %+v", resp.StatusCode, e)
	}
	srv = chatServer(t, &fakeInference{node: testNode, loading: 1, loadErr: failed})
	resp = postChat(t, srv.URL, "application/json", hello+`,"stream":true}`)
	data := sseData(t, resp.Body)
	if resp.StatusCode != 200 || len(data) != 1 || !strings.Contains(data[0], `"code":"load_failed"`) {
		t.Errorf("load failed while streaming: %d %q", resp.StatusCode, data)
	}
}

// POST /v1/cancel/{id} stops a running completion: its stream ends with
// an error event of code "cancelled"; an id that runs nowhere is 404, a
// malformed one 400.
func TestCancel(t *testing.T) {
	srv := chatServer(t, &fakeInference{node: testNode, pieces: []string{"a"}, failAfter: -1, hang: true})
	resp := postChat(t, srv.URL, "application/json", hello+`,"stream":true}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var first struct{ ID string }
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			json.Unmarshal([]byte(d), &first)
			break
		}
	}
	if !strings.HasPrefix(first.ID, "chatcmpl-") {
		t.Fatalf("first chunk's id %q", first.ID)
	}
	cancel := func(id string) (int, string) {
		r, err := http.Post(srv.URL+"/v1/cancel/"+id, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, body := cancel(first.ID); code != 200 || !strings.Contains(body, `"cancelled":true`) {
		t.Fatalf("cancel: %d %s", code, body)
	}
	var rest []string
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			rest = append(rest, d)
		}
	}
	if len(rest) == 0 || !strings.Contains(rest[len(rest)-1], `"code":"cancelled"`) || slices.Contains(rest, "[DONE]") {
		t.Errorf("the stream after cancel: %q", rest)
	}
	if code, _ := cancel(first.ID); code != 404 {
		t.Errorf("cancelling a finished completion: %d, want 404", code)
	}
	if code, _ := cancel("chatcmpl-..%2F"); code != 400 {
		t.Errorf("a malformed id: %d, want 400", code)
	}
}

func TestChatErrors(t *testing.T) {
	tooLong := &runnerapi.RequestError{Status: 400, ErrorBody: runnerapi.ErrorBody{Error: "the prompt is 900 tokens and the context holds 512", Kind: "prompt_too_long"}}
	// Refused before any token: a real status in OpenAI's shape, even
	// when streaming.
	srv := chatServer(t, &fakeInference{node: testNode, pieces: []string{"a"}, failAfter: 0, err: tooLong})
	for _, stream := range []string{"false", "true"} {
		resp := postChat(t, srv.URL, "application/json", hello+`,"stream":`+stream+`}`)
		var e struct {
			Error struct{ Message, Type, Code string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != 400 || e.Error.Code != "context_length_exceeded" || !strings.Contains(e.Error.Message, "context holds 512") {
			t.Errorf("stream %s: %d %+v", stream, resp.StatusCode, e)
		}
	}
	// Failing mid-stream: an error event, no [DONE].
	srv = chatServer(t, &fakeInference{node: testNode, pieces: []string{"a", "b", "c"}, failAfter: 2, err: errors.New("runner failed: killed")})
	data := sseData(t, postChat(t, srv.URL, "application/json", hello+`,"stream":true}`).Body)
	if len(data) != 4 || !strings.Contains(data[3], `"error"`) || !strings.Contains(data[3], "killed") {
		t.Fatalf("events %q", data)
	}
	for _, c := range []struct {
		ct, body string
		status   int
		code     string
	}{
		{"text/plain", hello + `}`, 415, "invalid_content_type"},
		{"application/json", `{"model":"m"`, 400, "invalid_json"},
		{"application/json", `{"model":"m","messages":[]}`, 400, "invalid_value"},
		{"application/json", hello + `,"n":2}`, 400, "invalid_value"},
		{"application/json", `{"model":"m","messages":[{"role":"wizard","content":"x"}]}`, 400, "invalid_value"},
		{"application/json", `{"model":"missing","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found"},
	} {
		resp := postChat(t, srv.URL, c.ct, c.body)
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != c.status || e.Error.Code != c.code {
			t.Errorf("%s %s: %d %q, want %d %q", c.ct, c.body, resp.StatusCode, e.Error.Code, c.status, c.code)
		}
	}
}

// A request for an instance on another node goes to that node's peer API
// and comes back as it is, streamed; the peer never forwards again.
func TestChatForwarded(t *testing.T) {
	st, _ := newStore(64)
	other := &Server{NodeID: "other-node", Store: st, Logger: newAPI(st).Logger,
		Inference: &fakeInference{node: "other-node", pieces: []string{"x", "y"}, failAfter: -1}}
	peer := httptest.NewServer(other.PeerHandler())
	t.Cleanup(peer.Close)
	toPeer := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		if !strings.HasPrefix(addr, "other-node:") {
			t.Errorf("dialled %s", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", strings.TrimPrefix(peer.URL, "http://"))
	}}}
	srv := chatServer(t, &fakeInference{node: "other-node", peer: toPeer})
	resp := postChat(t, srv.URL, "application/json", hello+`,"stream":true}`)
	data := sseData(t, resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get(NodeHeader) != "other-node" || resp.Header.Get(TraceIDHeader) == "" ||
		len(data) != 5 || data[4] != "[DONE]" || !strings.Contains(data[1], `"x"`) {
		t.Fatalf("%d %v %q", resp.StatusCode, resp.Header, data)
	}
	// The peer API refuses what is not its own rather than forwarding.
	misrouted := &Server{NodeID: "third", Store: st, Logger: other.Logger, Inference: &fakeInference{node: "other-node"}}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(hello+`}`))
	req.Header.Set("Content-Type", "application/json")
	misrouted.PeerHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusMisdirectedRequest {
		t.Fatalf("misrouted peer request: %d %s", rec.Code, rec.Body)
	}
	// An unreachable node: 502 in OpenAI's shape.
	dead := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no stream link")
	}}, Timeout: 5 * time.Second}
	srv = chatServer(t, &fakeInference{node: "other-node", peer: dead})
	if resp := postChat(t, srv.URL, "application/json", hello+`}`); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("unreachable node: %d", resp.StatusCode)
	}
}

func TestModelsList(t *testing.T) {
	st, seq := newStore(64)
	expiry := time.Unix(400, 0).UTC()
	publish(t, seq,
		state.NodeModelsMeasured{NodeID: "n1", Models: state.NodeModels{Models: []state.ModelInfo{
			{ID: "a", Arch: "llama", Layers: 4, Size: state.Bytes(10)}, {ID: "broken", Error: "bad"}}}},
		state.NodeModelsMeasured{NodeID: "n2", Models: state.NodeModels{Models: []state.ModelInfo{{ID: "a"}}}},
		state.InstanceCreated{NodeID: "n2", Instance: state.Instance{InstanceID: "inst-9", ModelID: "a", NodeID: "n2", CreatedAt: time.Unix(100, 0),
			KeepAliveMs: 300000, ExpiresAt: &expiry, Ranks: []state.ShardRange{{NodeID: "n2"}}}},
	)
	srv := serve(t, st)
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Object string       `json:"object"`
		Data   []ModelEntry `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&l)
	if l.Object != "list" || len(l.Data) != 1 {
		t.Fatalf("%+v", l)
	}
	m := l.Data[0]
	if m.ID != "a" || m.Object != "model" || m.Created != 100 || !m.Orrery.Running || len(m.Orrery.Nodes) != 2 || m.Orrery.Instances[0] != "inst-9" ||
		m.Orrery.ExpiresAt == nil || !m.Orrery.ExpiresAt.Equal(expiry) || m.Orrery.Pinned || m.Orrery.Active != 0 {
		t.Fatalf("%+v", m)
	}
	// A request running: no expiry while it does.
	publish(t, seq, state.InstanceUsed{NodeID: "n2", InstanceID: "inst-9", Active: 1})
	resp, err = http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	l.Data = nil
	json.NewDecoder(resp.Body).Decode(&l)
	if m := l.Data[0]; m.Orrery.ExpiresAt != nil || m.Orrery.Active != 1 {
		t.Fatalf("busy: %+v", m)
	}
}

func TestPlaceInstance(t *testing.T) {
	srv := chatServer(t, &fakeInference{node: testNode})
	post := func(ct, body string) (int, string) {
		resp, err := http.Post(srv.URL+"/instance", ct, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("application/json", `{"model":"m"}`); code != 201 || !strings.Contains(body, `"runnerIds":["inst-1-0"]`) || !strings.Contains(body, `"existed":false`) {
		t.Fatalf("place: %d %s", code, body)
	}
	for _, c := range []struct {
		ct, body string
		code     int
	}{
		{"text/plain", `{"model":"m"}`, 415},
		{"application/json", `{}`, 400},
		{"application/json", `{"model":"m","node":"../x"}`, 400},
		{"application/json", `{"model":"m","node":"not-a-member"}`, 404},
	} {
		if code, body := post(c.ct, c.body); code != c.code {
			t.Errorf("%s %s: %d %s, want %d", c.ct, c.body, code, body, c.code)
		}
	}
	// "gpuLayers": "auto" or a number, carried into the instance; other
	// values refused.
	for body, want := range map[string]string{`{"model":"m","gpuLayers":"auto"}`: `"gpuLayers":"auto"`, `{"model":"m","gpuLayers":5}`: `"gpuLayers":5`,
		`{"model":"m"}`: ""} {
		code, got := post("application/json", body)
		if code != 201 || want != "" && !strings.Contains(got, want) || want == "" && strings.Contains(got, "gpuLayers") {
			t.Errorf("%s: %d %s, want 201 with %q", body, code, got, want)
		}
	}
	for _, body := range []string{`{"model":"m","gpuLayers":"most"}`, `{"model":"m","gpuLayers":-1}`, `{"model":"m","gpuLayers":""}`} {
		if code, got := post("application/json", body); code != 400 || !strings.Contains(got, "gpu layers") {
			t.Errorf("%s: %d %s, want 400 naming gpu layers", body, code, got)
		}
	}
	for q, want := range map[string]int{"&gpuLayers=2": 200, "&gpuLayers=auto": 200, "&gpuLayers=many": 400} {
		resp, err := http.Get(srv.URL + "/instance/previews?model=m" + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || want == 200 && !strings.Contains(string(b), `"gpuLayers":`+map[string]string{"&gpuLayers=2": "2", "&gpuLayers=auto": `"auto"`}[q]) {
			t.Errorf("previews%s: %d %s, want %d carrying it", q, resp.StatusCode, b, want)
		}
	}
	// The model already runs on those nodes: 200 and that instance.
	existing := chatServer(t, &fakeInference{node: testNode, existed: true})
	resp, err := http.Post(existing.URL+"/instance", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"existed":true`) || !strings.Contains(string(b), `"instanceId":"inst-1"`) {
		t.Fatalf("place where it runs: %d %s, want 200 with existed", resp.StatusCode, b)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/instance/inst-404", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 404 {
		t.Fatalf("delete unknown: %v %v", resp, err)
	}
	resp.Body.Close()
}
