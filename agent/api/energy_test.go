package api

import (
	"encoding/json"
	"io"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
)

// The request's energy: the system power of the instance's nodes,
// integrated over the request; null, never 0, while a node's power is
// unknown.
func TestChatEnergy(t *testing.T) {
	st, seq := newStore(64)
	s := newAPI(st)
	s.Inference = &fakeInference{node: testNode, pieces: []string{"a", "b"}, failAfter: -1}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	publish(t, seq, state.InstanceCreated{NodeID: testNode, Instance: state.Instance{InstanceID: "inst-1", ModelID: "m",
		NodeID: testNode, Ranks: []state.ShardRange{{Rank: 0, NodeID: testNode}, {Rank: 1, NodeID: "n2"}}}})
	watts := func(w float64) *float64 { return &w }
	power := func(node string, w *float64) {
		publish(t, seq, state.NodeSystemMeasured{NodeID: node, System: state.NodeSystem{SysPower: w, SampledAt: time.Now().Add(-time.Second)}})
	}
	type ext struct {
		Orrery struct {
			EnergyJ   *float64 `json:"energyJ"`
			AvgPowerW *float64 `json:"avgPowerW"`
			DurationS *float64 `json:"durationS"`
			TraceID   string   `json:"traceId"`
		} `json:"orrery"`
	}
	ask := func(stream bool) (ext, string) {
		body := hello + `}`
		if stream {
			body = hello + `,"stream":true}`
		}
		resp := postChat(t, srv.URL, "application/json", body)
		var e ext
		raw := ""
		if stream {
			data := sseData(t, resp.Body)
			raw = data[len(data)-2] // the final chunk, before [DONE]
		} else {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			raw = string(b)
		}
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			t.Fatalf("decode %q: %v", raw, err)
		}
		return e, raw
	}

	// n2's power is unknown: null.
	power(testNode, watts(30))
	// The Node page's history: the sample, unknown values absent.
	h := get(t, srv.URL+"/history/system/"+testNode)
	if h.code != 200 || !strings.Contains(string(h.body), `"sysPower":30`) || strings.Contains(string(h.body), `gpuUsage`) {
		t.Errorf("/history/system: %d %s", h.code, h.body)
	}
	for _, stream := range []bool{false, true} {
		e, raw := ask(stream)
		if e.Orrery.EnergyJ != nil || e.Orrery.AvgPowerW != nil || !strings.Contains(raw, `"energyJ":null`) || e.Orrery.DurationS == nil || e.Orrery.TraceID == "" {
			t.Errorf("stream %v, power of n2 unknown: %s", stream, raw)
		}
	}
	// Both known and constant: 30 W + 12 W held over the request.
	power("n2", watts(12))
	for _, stream := range []bool{false, true} {
		e, raw := ask(stream)
		if e.Orrery.EnergyJ == nil || e.Orrery.AvgPowerW == nil || math.Abs(*e.Orrery.AvgPowerW-42) > 0.01 ||
			math.Abs(*e.Orrery.EnergyJ-42**e.Orrery.DurationS) > 0.01+42*0.002 {
			t.Errorf("stream %v, 42 W: %s", stream, raw)
		}
	}
}
