package api

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orrery-cluster/orrery/agent/state"
)

// Metrics is the node's Prometheus registry: gauges read from the
// replicated state at scrape time (so every node exports the whole
// cluster's nodes and links, labelled by node id), and histograms of the
// requests this node served. One per Server; nothing is global.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.HistogramVec
	prefill  prometheus.Histogram
	decode   prometheus.Histogram
	// prompt and cached count prompt tokens, and those of them found in
	// a slot's cache (the prefix cache's hits).
	prompt, cached atomic.Uint64
	// drafts and accepted count speculative decoding's drafted tokens,
	// and those the target accepted.
	drafts, accepted atomic.Uint64
}

// NewMetrics registers the collectors over store and traces (nil: no
// trace series).
func NewMetrics(store *state.Store, traces TraceStore) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "orrery_request_duration_seconds", Help: "Chat completions served by this node, by duration.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}, nil),
		prefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "orrery_prefill_tokens_per_second", Help: "Prompt processing speed of the requests this node served.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		decode: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "orrery_decode_tokens_per_second", Help: "Generation speed of the requests this node served.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
	}
	prompt := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "orrery_prompt_tokens_total",
		Help: "Prompt tokens of the completions this node served."}, func() float64 { return float64(m.prompt.Load()) })
	cached := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "orrery_prompt_cached_tokens_total",
		Help: "Prompt tokens found in the prefix cache (not computed again)."}, func() float64 { return float64(m.cached.Load()) })
	ratio := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "orrery_prompt_cache_hit_ratio",
		Help: "Cached prompt tokens over all prompt tokens this node served (0 before any)."}, func() float64 {
		if p := m.prompt.Load(); p > 0 {
			return float64(m.cached.Load()) / float64(p)
		}
		return 0
	})
	drafts := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "orrery_draft_tokens_total",
		Help: "Tokens drafted by speculative decoding in the completions this node served."}, func() float64 { return float64(m.drafts.Load()) })
	accepted := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "orrery_draft_tokens_accepted_total",
		Help: "Drafted tokens the target model accepted."}, func() float64 { return float64(m.accepted.Load()) })
	m.reg.MustRegister(m.requests, m.prefill, m.decode, prompt, cached, ratio, drafts, accepted, stateCollector{store: store, traces: traces},
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// ObserveRequest records one served completion: its prompt tokens and how
// many of them were cached; speeds of 0 (no prompt, no decode steps) are
// left out.
func (m *Metrics) ObserveRequest(d time.Duration, prompt, cached int, prefillTokPerS, decodeTokPerS float64) {
	m.requests.WithLabelValues().Observe(d.Seconds())
	m.prompt.Add(uint64(max(prompt, 0)))
	m.cached.Add(uint64(max(cached, 0)))
	if prefillTokPerS > 0 {
		m.prefill.Observe(prefillTokPerS)
	}
	if decodeTokPerS > 0 {
		m.decode.Observe(decodeTokPerS)
	}
}

// ObserveDrafts counts a completion's drafted and accepted tokens.
func (m *Metrics) ObserveDrafts(drafted, accepted int) {
	m.drafts.Add(uint64(max(drafted, 0)))
	m.accepted.Add(uint64(max(accepted, 0)))
}

// Handler serves the text exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

var (
	nodeLabels  = []string{"node", "name"}
	descMemTot  = prometheus.NewDesc("orrery_node_memory_total_bytes", "RAM of the node.", nodeLabels, nil)
	descMemAv   = prometheus.NewDesc("orrery_node_memory_available_bytes", "RAM available on the node.", nodeLabels, nil)
	descSwapTot = prometheus.NewDesc("orrery_node_swap_total_bytes", "Swap of the node.", nodeLabels, nil)
	descSwapAv  = prometheus.NewDesc("orrery_node_swap_available_bytes", "Swap free on the node.", nodeLabels, nil)
	descCPU     = prometheus.NewDesc("orrery_node_cpu_usage_ratio", "CPU usage, 0..1.", nodeLabels, nil)
	descGPU     = prometheus.NewDesc("orrery_node_gpu_usage_ratio", "GPU usage, 0..1 (absent where not measured).", nodeLabels, nil)
	descTemp    = prometheus.NewDesc("orrery_node_temperature_celsius", "Temperature (absent where not measured).", nodeLabels, nil)
	descPower   = prometheus.NewDesc("orrery_node_power_watts", "System power (absent where not measured).", nodeLabels, nil)

	linkLabels  = []string{"source", "sink", "interface", "type"}
	descRTT     = prometheus.NewDesc("orrery_link_rtt_seconds", "Round-trip time of the link (EWMA).", linkLabels, nil)
	descJitter  = prometheus.NewDesc("orrery_link_jitter_seconds", "RTT jitter of the link.", linkLabels, nil)
	descLoss    = prometheus.NewDesc("orrery_link_loss_ratio", "Probe loss over the last probes, 0..1.", linkLabels, nil)
	descLinkMB  = prometheus.NewDesc("orrery_link_send_bytes_per_second", "Orrery's own traffic to the peer.", linkLabels, nil)
	descIfaceMB = prometheus.NewDesc("orrery_link_interface_send_bytes_per_second", "The source interface's send rate (all traffic).", linkLabels, nil)
	descCap     = prometheus.NewDesc("orrery_link_capacity_bits_per_second", "Link capacity (label source: os or estimated).",
		append(append([]string{}, linkLabels...), "source_kind"), nil)

	descRunner  = prometheus.NewDesc("orrery_runner_state", "1 for each runner in its current state.", []string{"runner", "instance", "node", "rank", "state"}, nil)
	descTraces  = prometheus.NewDesc("orrery_traces", "Traces in this node's store.", nil, nil)
	descTraceSz = prometheus.NewDesc("orrery_trace_store_bytes", "Bytes of trace files in this node's store.", nil, nil)
)

// stateCollector turns the current state into gauges at scrape time.
type stateCollector struct {
	store  *state.Store
	traces TraceStore
}

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMemTot, descMemAv, descSwapTot, descSwapAv, descCPU, descGPU, descTemp, descPower,
		descRTT, descJitter, descLoss, descLinkMB, descIfaceMB, descCap, descRunner, descTraces, descTraceSz} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.State()
	name := func(id string) string { return st.NodeIdentities[id].FriendlyName }
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	bytes := func(d *prometheus.Desc, m *state.Memory, id string) {
		if m != nil {
			gauge(d, float64(m.InBytes), id, name(id))
		}
	}
	// Unknown values are left out: a missing series, never a 0.
	opt := func(d *prometheus.Desc, v *float64, labels ...string) {
		if v != nil {
			gauge(d, *v, labels...)
		}
	}
	for id, m := range st.NodeMemory {
		bytes(descMemTot, m.RAMTotal, id)
		bytes(descMemAv, m.RAMAvailable, id)
		bytes(descSwapTot, m.SwapTotal, id)
		bytes(descSwapAv, m.SwapAvailable, id)
	}
	for id, s := range st.NodeSystem {
		opt(descCPU, s.CPUUsage, id, name(id))
		opt(descGPU, s.GPUUsage, id, name(id))
		opt(descTemp, s.Temp, id, name(id))
		opt(descPower, s.SysPower, id, name(id))
	}
	for src, nl := range st.NodeLinkTelemetry {
		for _, l := range nl.Links {
			lv := []string{src, l.Peer, l.SourceInterface, l.ConnectionType}
			gauge(descRTT, l.RTTEwmaMs/1e3, lv...)
			gauge(descJitter, l.JitterMs/1e3, lv...)
			gauge(descLoss, l.LossPct/100, lv...)
			if l.PeerSendMBps != nil {
				gauge(descLinkMB, *l.PeerSendMBps*1e6, lv...)
			}
			if l.InterfaceSendMBps != nil {
				gauge(descIfaceMB, *l.InterfaceSendMBps*1e6, lv...)
			}
			if l.CapacityMbps != nil {
				gauge(descCap, *l.CapacityMbps*1e6, append(lv, l.CapacitySource)...)
			}
		}
	}
	for _, r := range st.Runners {
		gauge(descRunner, 1, r.RunnerID, r.InstanceID, r.NodeID, strconv.Itoa(r.Rank), r.Status)
	}
	if c.traces != nil {
		metas := c.traces.List()
		gauge(descTraces, float64(len(metas)))
		var total int64
		for _, m := range metas {
			total += m.FileSize
		}
		gauge(descTraceSz, float64(total))
	}
}
