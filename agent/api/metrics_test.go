package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/orrery-cluster/orrery/agent/state"
)

func TestMetrics(t *testing.T) {
	st, seq := newStore(64)
	s := newAPI(st)
	s.Metrics = NewMetrics(st, nil)
	s.Inference = &fakeInference{node: testNode, pieces: []string{"a", "b"}, failAfter: -1}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	f := func(x float64) *float64 { return &x }
	now := time.Now()
	publish(t, seq,
		state.NodeMemoryMeasured{NodeID: "n1", Memory: state.NodeMemory{RAMTotal: &state.Memory{InBytes: 16 << 30}, RAMAvailable: &state.Memory{InBytes: 6 << 30}, SampledAt: now}},
		state.NodeSystemMeasured{NodeID: "n1", System: state.NodeSystem{CPUUsage: f(0.25), GPUUsage: nil, SysPower: f(20), SampledAt: now}},
		state.NodeLinksMeasured{NodeID: "n1", Links: state.NodeLinks{SampledAt: now, Links: []state.LinkTelemetry{{
			Peer: "n2", SourceInterface: "en0", ConnectionType: "thunderbolt", RTTEwmaMs: 0.5, LossPct: 2,
			CapacityMbps: f(40000), CapacitySource: "os", PeerSendMBps: f(3)}}}},
	)
	postChat(t, srv.URL, "application/json", hello+`}`).Body.Close()

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %v %v", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	var tp expfmt.TextParser
	fams, err := tp.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	one := func(name string) float64 {
		t.Helper()
		f := fams[name]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("%s: %v", name, f)
		}
		m := f.Metric[0]
		if m.Gauge != nil {
			return m.Gauge.GetValue()
		}
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		return float64(m.Histogram.GetSampleCount())
	}
	for name, want := range map[string]float64{
		"orrery_node_memory_total_bytes":       16 << 30,
		"orrery_node_memory_available_bytes":   6 << 30,
		"orrery_node_cpu_usage_ratio":          0.25,
		"orrery_node_power_watts":              20,
		"orrery_link_rtt_seconds":              0.0005,
		"orrery_link_loss_ratio":               0.02,
		"orrery_link_capacity_bits_per_second": 40e9,
		"orrery_link_send_bytes_per_second":    3e6,
		"orrery_request_duration_seconds":      1, // one request served
		"orrery_decode_tokens_per_second":      1,
		"orrery_prompt_tokens_total":           7, // the fake's prompt: 7 tokens, 2 of them cached
		"orrery_prompt_cached_tokens_total":    2,
		"orrery_prompt_cache_hit_ratio":        2.0 / 7,
	} {
		if got := one(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if fams["orrery_node_gpu_usage_ratio"] != nil {
		t.Error("an unknown GPU usage is exported (want no series, never 0)")
	}
	if !strings.Contains(string(body), `orrery_link_rtt_seconds{interface="en0",sink="n2",source="n1",type="thunderbolt"}`) {
		t.Errorf("link labels:\n%s", body)
	}
}
