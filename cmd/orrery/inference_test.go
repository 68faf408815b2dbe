package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// genModel writes a generated model into an agent's data dir through the
// CLI, and returns its id.
func genModel(t *testing.T, bin, dataDir, name string, flags ...string) string {
	t.Helper()
	args := append([]string{"gen-model", "--data-dir", dataDir, "--name", name}, flags...)
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("gen-model: %v\n%s", err, out)
	}
	return name
}

type runnerState struct {
	RunnerID     string `json:"runnerId"`
	InstanceID   string `json:"instanceId"`
	NodeID       string `json:"nodeId"`
	Status       string `json:"status"`
	LayersLoaded int    `json:"layersLoaded"`
	TotalLayers  int    `json:"totalLayers"`
	Error        string `json:"error"`
	Pid          int    `json:"pid"`
	// What rank 0 measured in its last request.
	DecodeTokPerSec float64 `json:"decodeTokPerSec"`
	ReduceMicros    float64 `json:"reduceMicros"`
}

func runnerOf(t *testing.T, p *agentProc, id string) (runnerState, bool) {
	var r runnerState
	code, b, err := p.get("/state/runners/" + id)
	if err != nil || code != http.StatusOK {
		return r, false
	}
	return r, json.Unmarshal(b, &r) == nil
}

func waitRunner(t *testing.T, p *agentProc, id, status string, limit time.Duration) runnerState {
	t.Helper()
	var r runnerState
	poll(t, p, limit, "runner "+id+" "+status, func() (bool, string) {
		var ok bool
		r, ok = runnerOf(t, p, id)
		return ok && r.Status == status, fmt.Sprintf("%+v", r)
	})
	return r
}

type chatAnswer struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Orrery struct {
		TraceID       string  `json:"traceId"`
		Node          string  `json:"node"`
		DecodeTokPerS float64 `json:"decodeTokPerSec"`
		// Speculative decoding's drafts.
		DraftTokens         int `json:"draftTokens"`
		AcceptedDraftTokens int `json:"acceptedDraftTokens"`
	} `json:"orrery"`
	Error *struct {
		Message string `json:"message"`
		Code    string `json:"code"`
	} `json:"error"`
}

func chat(t *testing.T, p *agentProc, body string) (int, http.Header, chatAnswer) {
	t.Helper()
	resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	defer resp.Body.Close()
	var a chatAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("chat answer: %v", err)
	}
	return resp.StatusCode, resp.Header, a
}

// Model serving with real processes: two agents, the model on one; the
// other places it and chats through it (forwarded over the peer link);
// requests are traced on the master; kill -9 of the runner mid-stream
// gives the client an error event within 5 s, the runner shows Failed,
// both agents stay up and the next request works; DELETE shuts it down.
func TestInferenceProcesses(t *testing.T) {
	bin := buildBinary(t)
	env := []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}
	lb := t.TempDir()
	extra := []string{"--loopback-dir", lb, "--trace-merge-timeout", "2s", "--runner-threads", "1"}
	dirA, dirB := t.TempDir(), t.TempDir()
	// "small" (8 layers, dim 512) decodes slowly enough on one thread to
	// be killed mid-stream.
	modelID := genModel(t, bin, dirA, "small-test", "--preset", "small")
	demandID := genModel(t, bin, dirA, "demand-test", "--preset", "tiny")
	a := startAgentEnv(t, bin, testutil.FreeAddr(t), dirA, append(env, "HOME="+dirA), extra...)
	b := startAgentEnv(t, bin, testutil.FreeAddr(t), dirB, append(env, "HOME="+dirB), extra...)
	ps := []*agentProc{a, b}
	for _, p := range ps {
		waitHealthy(t, p)
	}
	pollAll(t, ps, 10*time.Second, "one master and 2 members", func() (bool, string) { return agreed(t, ps, 2) })
	var aID string
	a.mustGet(t, "/node_id", &aID)

	// B sees A's model, and a placement asked of B lands on A.
	poll(t, b, 10*time.Second, "the model in B's /v1/models", func() (bool, string) {
		_, body, _ := b.get("/v1/models")
		return strings.Contains(string(body), `"`+modelID+`"`) && strings.Contains(string(body), aID), string(body)
	})
	code, body, err := b.post("/instance", `{"model":"`+modelID+`"}`)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("POST /instance = %d %s %v", code, body, err)
	}
	var placed struct {
		Instance struct {
			InstanceID, NodeID string
		} `json:"instance"`
		RunnerIDs []string `json:"runnerIds"`
	}
	if err := json.Unmarshal(body, &placed); err != nil || placed.Instance.NodeID != aID || len(placed.RunnerIDs) != 1 {
		t.Fatalf("placement %s (%v), want on %s", body, err, aID)
	}
	rid := placed.RunnerIDs[0]
	r := waitRunner(t, b, rid, "Ready", 60*time.Second)
	if r.LayersLoaded != 8 || r.TotalLayers != 8 || r.Pid == 0 {
		t.Fatalf("ready runner %+v", r)
	}
	// The same model on the same node again is that instance, loaded once.
	if code, body, _ := b.post("/instance", `{"model":"`+modelID+`"}`); code != http.StatusOK ||
		!strings.Contains(string(body), `"existed":true`) || !strings.Contains(string(body), `"instanceId":"`+placed.Instance.InstanceID+`"`) {
		t.Errorf("a second placement of the model on the same node: %d %s, want 200 with the live instance", code, body)
	}
	if code, _, _ := b.post("/instance", `{"model":"no-such-model"}`); code != http.StatusNotFound {
		t.Errorf("placing an unknown model: %d, want 404", code)
	}

	// A completion through B runs on A; greedy output is deterministic.
	req := `{"model":"` + modelID + `","messages":[{"role":"user","content":"hello orrery"}],"max_tokens":12,"temperature":0}`
	code, hdr, ans := chat(t, b, req)
	if code != http.StatusOK || len(ans.Choices) != 1 || ans.Usage.CompletionTokens == 0 || ans.Usage.PromptTokens == 0 ||
		ans.Usage.TotalTokens != ans.Usage.PromptTokens+ans.Usage.CompletionTokens {
		t.Fatalf("chat = %d %+v", code, ans)
	}
	traceID := hdr.Get("X-Orrery-Trace-Id")
	if traceID == "" || traceID != ans.Orrery.TraceID || hdr.Get("X-Orrery-Node") != aID {
		t.Fatalf("headers %v, answer %+v", hdr, ans.Orrery)
	}
	_, _, again := chat(t, a, req)
	if again.Choices[0].Message.Content != ans.Choices[0].Message.Content {
		t.Errorf("greedy runs differ: %q vs %q", ans.Choices[0].Message.Content, again.Choices[0].Message.Content)
	}
	// The trace is on the master, with prefill and decode phases.
	st, _ := status(t, a)
	master := a
	if st.MasterID != aID {
		master = b
	}
	poll(t, master, 10*time.Second, "the request's trace on the master", func() (bool, string) {
		code, body, _ := master.get("/v1/traces/" + traceID + "/stats")
		s := string(body)
		return code == 200 && strings.Contains(s, `"prefill/compute"`) && strings.Contains(s, `"decode/sample"`), s
	})

	// Tokenize, detokenize and legacy completions with logprobs, through
	// B (which has no file: tokenize is forwarded to A).
	checkBlackBox(t, bin, a, b, modelID)
	loadOnDemand(t, a, b, demandID)
	cancelMidStream(t, b, modelID)

	// A prompt longer than the context: 400 saying so.
	long := strings.Repeat("the cluster model ", 1500)
	code, _, ans = chat(t, b, `{"model":"`+modelID+`","messages":[{"role":"user","content":"`+long+`"}]}`)
	if code != http.StatusBadRequest || ans.Error == nil || ans.Error.Code != "context_length_exceeded" || !strings.Contains(ans.Error.Message, "context holds 2048") {
		t.Errorf("long prompt: %d %+v", code, ans.Error)
	}
	if code, _, ans = chat(t, b, `{"model":"nope","messages":[{"role":"user","content":"x"}]}`); code != http.StatusNotFound || ans.Error.Code != "model_not_found" {
		t.Errorf("unknown model: %d %+v", code, ans.Error)
	}

	// kill -9 of the runner mid-stream, streaming through B.
	var idx struct {
		LastEventAppliedIdx int64 `json:"lastEventAppliedIdx"`
	}
	b.mustGet(t, "/healthz", &idx)
	r, _ = runnerOf(t, b, rid)
	killMidStream(t, b, `{"model":"`+modelID+`","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":1900,"ignore_eos":true}`, r.Pid)
	// The runner went through Failed (in the replicated event log), the
	// instance is Failed naming rank 0, both agents are up, and the next
	// request places a new instance and works.
	poll(t, b, 10*time.Second, "a Failed status for the runner in B's events", func() (bool, string) {
		_, body, _ := b.get(fmt.Sprintf("/events?since=%d&limit=10000", idx.LastEventAppliedIdx))
		return strings.Contains(string(body), `"status":"Failed"`) && strings.Contains(string(body), "exited"), ""
	})
	poll(t, b, 10*time.Second, "the instance Failed, naming rank 0", func() (bool, string) {
		var in struct{ Status, Error string }
		b.mustGet(t, "/state/instances/"+placed.Instance.InstanceID, &in)
		return in.Status == "Failed" && strings.Contains(in.Error, "rank 0") && strings.Contains(in.Error, "killed"), in.Status + " " + in.Error
	})
	for _, p := range ps {
		if p.exited() {
			t.Fatalf("agent %s exited after the runner was killed", p.addr)
		}
	}
	if code, hdr, ans = chat(t, b, req); code != http.StatusOK || ans.Usage.CompletionTokens == 0 || hdr.Get("X-Orrery-Node") != aID {
		t.Fatalf("request after the crash: %d %+v", code, ans)
	}
	var instances map[string]struct {
		InstanceID, Status string
		Ranks              []struct{ NodeID string }
	}
	b.mustGet(t, "/state/instances", &instances)
	if len(instances) != 1 {
		t.Fatalf("instances after the replacement: %+v", instances)
	}
	for id, in := range instances {
		if id == placed.Instance.InstanceID || in.Status != "Active" || len(in.Ranks) != 1 || in.Ranks[0].NodeID != aID {
			t.Fatalf("replacement %s: %+v", id, in)
		}
		placed.Instance.InstanceID, rid = id, id+"-0"
	}
	after := waitRunner(t, b, rid, "Ready", 60*time.Second)
	if after.Pid == r.Pid {
		t.Errorf("the replacement runs in the killed pid %d", r.Pid)
	}

	// DELETE through B: Shutdown, gone from the state, the process ends.
	deleteInstance(t, b, placed.Instance.InstanceID)
	poll(t, b, 10*time.Second, "the instance gone from B's state", func() (bool, string) {
		code, body, _ := b.get("/state/instances/" + placed.Instance.InstanceID)
		return code == http.StatusNotFound, string(body)
	})
	if err := syscall.Kill(after.Pid, 0); err == nil {
		t.Errorf("runner pid %d still alive after DELETE", after.Pid)
	}
	for _, p := range ps {
		stop(t, p)
	}
}

func (a chatAnswer) orreryDecode() float64 { return a.Orrery.DecodeTokPerS }

// killMidStream streams a completion from p, kills pid (a runner) with
// SIGKILL once 20 events came, and checks that an error event follows
// within 5 s. It returns the stream's trace id.
func killMidStream(t *testing.T, p *agentProc, body string, pid int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	events := make(chan string, 4096)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
	}()
	var early []string
	for range 20 { // the stream is under way
		d, ok := <-events
		if !ok {
			t.Fatalf("stream ended before the kill, after %q", early)
		}
		early = append(early, d)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 runner %d: %v", pid, err)
	}
	killed := time.Now()
	var errEvent string
	for d := range events {
		if strings.Contains(d, `"error"`) {
			errEvent = d
			break
		}
		if d == "[DONE]" {
			t.Fatal("the stream finished normally after kill -9")
		}
	}
	took := time.Since(killed)
	t.Logf("error event %v after kill -9 of pid %d: %s", took, pid, errEvent)
	if errEvent == "" || took > 5*time.Second {
		t.Fatalf("error event %q after %v, want one within 5 s", errEvent, took)
	}
	return resp.Header.Get("X-Orrery-Trace-Id")
}

// loadOnDemand: ten chats at once through B for a model on A that no
// instance serves place it once; the streaming one hears ": loading"
// comments before its tokens, all get the same greedy answer. The
// instance is then deleted.
func loadOnDemand(t *testing.T, a, b *agentProc, modelID string) {
	t.Helper()
	req := `{"model":"` + modelID + `","messages":[{"role":"user","content":"hello"}],"max_tokens":6,"temperature":0`
	var wg sync.WaitGroup
	start := time.Now()
	answers := make([]string, 9)
	var stream []byte
	var streamCode int
	wg.Add(10)
	go func() {
		defer wg.Done()
		streamCode, stream, _ = b.post("/v1/chat/completions", req+`,"stream":true}`)
	}()
	for i := range answers {
		go func() {
			defer wg.Done()
			code, _, ans := chat(t, b, req+"}")
			if code != http.StatusOK || len(ans.Choices) != 1 {
				t.Errorf("on-demand chat %d: %d %+v", i, code, ans.Error)
				return
			}
			answers[i] = ans.Choices[0].Message.Content
		}()
	}
	wg.Wait()
	t.Logf("load on demand: 10 requests at once answered in %v", time.Since(start))
	for _, s := range answers[1:] {
		if s != answers[0] {
			t.Errorf("greedy answers differ: %q", answers)
			break
		}
	}
	if streamCode != http.StatusOK || !strings.HasPrefix(string(stream), ": loading ") || !strings.Contains(string(stream), "data: [DONE]") {
		t.Errorf("streaming on-demand chat: %d %q", streamCode, stream)
	}
	var instances map[string]struct {
		InstanceID string `json:"instanceId"`
		ModelID    string `json:"modelId"`
	}
	a.mustGet(t, "/state/instances", &instances)
	var ids []string
	for id, in := range instances {
		if in.ModelID == modelID {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("instances of %s after 10 requests at once: %v, want one", modelID, ids)
	}
	keepAlive(t, a, b, modelID, ids[0])
}

// keepAlive: the on-demand instance has the default keep-alive's expiry
// (5 minutes) in /v1/models, where the explicit one is pinned; a request
// with keep_alive 0 unloads it right after: gone from the state, its
// runner process ended.
func keepAlive(t *testing.T, a, b *agentProc, modelID, instanceID string) {
	t.Helper()
	// The expiry is published when the last request on the instance ends,
	// and reaches B through the state; so it is polled for, not read once.
	poll(t, b, 10*time.Second, "the on-demand instance's expiry 5 minutes ahead and one pinned model in /v1/models", func() (bool, string) {
		var models struct {
			Data []struct {
				ID     string
				Orrery struct {
					Running   bool
					Pinned    bool
					ExpiresAt *time.Time
				}
			}
		}
		code, body, _ := b.get("/v1/models")
		if code != http.StatusOK || json.Unmarshal(body, &models) != nil {
			return false, fmt.Sprintf("%d %s", code, body)
		}
		onDemand, pinned := false, 0
		for _, m := range models.Data {
			switch {
			case m.ID == modelID:
				if e := m.Orrery.ExpiresAt; e != nil && !m.Orrery.Pinned {
					left := time.Until(*e)
					onDemand = left >= 4*time.Minute && left <= 5*time.Minute
				}
			case m.Orrery.Running && m.Orrery.Pinned && m.Orrery.ExpiresAt == nil:
				pinned++
			}
		}
		return onDemand && pinned == 1, string(body)
	})
	var runners map[string]struct {
		InstanceID string `json:"instanceId"`
		Pid        int    `json:"pid"`
	}
	a.mustGet(t, "/state/runners", &runners)
	pid := runners[supervisor.RunnerID(instanceID, 0)].Pid
	start := time.Now()
	req := `{"model":"` + modelID + `","messages":[{"role":"user","content":"bye"}],"max_tokens":2,"keep_alive":0}`
	if code, _, ans := chat(t, b, req); code != http.StatusOK {
		t.Fatalf("chat with keep_alive 0: %d %+v", code, ans.Error)
	}
	poll(t, a, 10*time.Second, "the instance unloaded after keep_alive 0", func() (bool, string) {
		_, body, _ := a.get("/state/instances")
		return !strings.Contains(string(body), instanceID) && (pid == 0 || syscall.Kill(pid, 0) != nil), string(body)
	})
	t.Logf("keep_alive 0: instance %s unloaded and runner pid %d gone %v after the request was sent", instanceID, pid, time.Since(start))
}

// cancelMidStream: a long stream through B (it runs on A), cancelled with
// POST /v1/cancel/{id} through B (which asks A) after its first chunk,
// ends within 5 s with a "cancelled" error event, and the runner serves
// the next request.
func cancelMidStream(t *testing.T, b *agentProc, modelID string) {
	t.Helper()
	body := `{"model":"` + modelID + `","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":1900,"ignore_eos":true}`
	resp, err := http.Post("http://"+b.addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var first struct{ ID string }
	for first.ID == "" && sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			json.Unmarshal([]byte(d), &first)
		}
	}
	start := time.Now()
	if code, out, err := b.post("/v1/cancel/"+first.ID, ""); code != http.StatusOK || !strings.Contains(string(out), `"cancelled":true`) {
		t.Fatalf("POST /v1/cancel/%s: %d %s %v", first.ID, code, out, err)
	}
	last := ""
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = d
		}
	}
	took := time.Since(start)
	if !strings.Contains(last, `"code":"cancelled"`) || took > 5*time.Second {
		t.Errorf("the stream after cancel ended with %q after %v", last, took)
	}
	t.Logf("cancel: the stream ended %v after POST /v1/cancel", took)
	if code, _, ans := chat(t, b, `{"model":"`+modelID+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); code != http.StatusOK {
		t.Errorf("the next request after a cancel: %d %+v", code, ans.Error)
	}
	// A client that goes away after the first chunk cancels it too: the
	// one-slot runner answers the next request within seconds, not after
	// 1900 tokens.
	resp2, err := http.Post("http://"+b.addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp2.Body).ReadString('\n')
	resp2.Body.Close()
	start = time.Now()
	if code, _, ans := chat(t, b, `{"model":"`+modelID+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); code != http.StatusOK || time.Since(start) > 5*time.Second {
		t.Errorf("the next request after a client went away: %d %+v after %v", code, ans.Error, time.Since(start))
	}
}
