package state

import (
	"math"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Memory is a byte count in exo's shape: {"inBytes": n}.
type Memory struct {
	InBytes uint64 `json:"inBytes"`
}

// Bytes returns a *Memory, for the nullable fields below.
func Bytes(n uint64) *Memory { return &Memory{InBytes: n} }

// Float returns a *float64, for the nullable fields below. NaN and ±Inf
// (which JSON cannot carry) become nil: a reading that is not a number is
// not known.
func Float(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// Int returns a *int, for the nullable fields below.
func Int(v int) *int { return &v }

// NodeIdentity is what a node says about itself. Empty strings and nil
// pointers are values the OS did not report.
type NodeIdentity struct {
	NodeID       string    `json:"nodeId"`
	FriendlyName string    `json:"friendlyName"`
	ModelID      string    `json:"modelId"`
	ChipID       string    `json:"chipId"`
	OSName       string    `json:"osName"`
	OSVersion    string    `json:"osVersion"`
	OSBuild      string    `json:"osBuild"`
	Arch         string    `json:"arch"`
	CPUCount     int       `json:"cpuCount"`
	PerfCores    *int      `json:"perfCores,omitempty"`
	EffCores     *int      `json:"effCores,omitempty"`
	RAMTotal     *Memory   `json:"ramTotal,omitempty"`
	AgentVersion string    `json:"agentVersion"`
	StartedAt    time.Time `json:"startedAt"`
	// Speed is the node's measured compute (orrery speed), once known:
	// what placement's cost model predicts from.
	Speed *runnerapi.Speed `json:"speed,omitempty"`
	// GPUs are the GPUs the node's runners may compute on, as ggml listed
	// them when the speed was measured (their free memory then): a
	// software device only where the node allows one (--gpu-software).
	// None on a node without, or before its speed is known.
	GPUs []runnerapi.Device `json:"gpus,omitempty"`
}

// NodeMemory is one memory sample, in exo's nodeMemory shape.
type NodeMemory struct {
	RAMTotal      *Memory   `json:"ramTotal,omitempty"`
	RAMAvailable  *Memory   `json:"ramAvailable,omitempty"`
	SwapTotal     *Memory   `json:"swapTotal,omitempty"`
	SwapAvailable *Memory   `json:"swapAvailable,omitempty"`
	SampledAt     time.Time `json:"sampledAt"`
}

// NodeSystem is one system sample, in exo's nodeSystem shape plus overall CPU
// and load. Usages are fractions 0..1, temperatures °C, power watts.
type NodeSystem struct {
	CPUUsage    *float64  `json:"cpuUsage,omitempty"`
	PCPUUsage   *float64  `json:"pcpuUsage,omitempty"`
	ECPUUsage   *float64  `json:"ecpuUsage,omitempty"`
	GPUUsage    *float64  `json:"gpuUsage,omitempty"`
	Temp        *float64  `json:"temp,omitempty"`
	TempSource  string    `json:"tempSource,omitempty"`
	SysPower    *float64  `json:"sysPower,omitempty"`
	PowerSource string    `json:"powerSource,omitempty"`
	Load1       *float64  `json:"load1,omitempty"`
	Load5       *float64  `json:"load5,omitempty"`
	Load15      *float64  `json:"load15,omitempty"`
	SampledAt   time.Time `json:"sampledAt"`
}

// NodeDisk is the usage of the file system that holds the models directory.
type NodeDisk struct {
	Path      string    `json:"path"`
	Total     *Memory   `json:"total,omitempty"`
	Available *Memory   `json:"available,omitempty"`
	SampledAt time.Time `json:"sampledAt"`
}

// NetworkInterface is one interface of a node, with its cumulative counters.
// Rates are derived by readers from two samples.
type NetworkInterface struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Addresses   []string `json:"addresses"`
	MTU         int      `json:"mtu"`
	Up          bool     `json:"up"`
	SpeedMbps   *int64   `json:"speedMbps,omitempty"`
	BytesSent   uint64   `json:"bytesSent"`
	BytesRecv   uint64   `json:"bytesRecv"`
	PacketsSent uint64   `json:"packetsSent"`
	PacketsRecv uint64   `json:"packetsRecv"`
	// SendMBps and RecvMBps are the rates over the last sampling interval
	// (10^6 bytes/s); nil on the first sample.
	SendMBps *float64 `json:"sendMBps,omitempty"`
	RecvMBps *float64 `json:"recvMBps,omitempty"`
}

// NodeNetwork is one sample of all of a node's interfaces.
type NodeNetwork struct {
	Interfaces []NetworkInterface `json:"interfaces"`
	SampledAt  time.Time          `json:"sampledAt"`
}

// TopologyNode is a node in the topology.
type TopologyNode struct {
	NodeID string `json:"nodeId"`
}

// Connection is a directed edge: source node and interface → sink node and
// address. It exists while the source's probes over that path succeed.
type Connection struct {
	Source          string   `json:"source"`
	SourceInterface string   `json:"sourceInterface"`
	Sink            string   `json:"sink"`
	SinkAddress     string   `json:"sinkAddress"`
	ConnectionType  string   `json:"connectionType"`
	RTTMs           float64  `json:"rttMs"`
	LossPct         float64  `json:"lossPct"`
	CapacityMbps    *float64 `json:"capacityMbps,omitempty"`
	// SendMBps is Orrery's own traffic over this edge, from the source's
	// per-peer counters (the source interface's when those are unknown);
	// InterfaceSendMBps is all of the source interface's traffic, which
	// other peers and programs share.
	SendMBps          *float64 `json:"sendMBps,omitempty"`
	InterfaceSendMBps *float64 `json:"interfaceSendMBps,omitempty"`
}

// Topology is the cluster graph, nodes and edges sorted.
type Topology struct {
	Nodes       []TopologyNode `json:"nodes"`
	Connections []Connection   `json:"connections"`
}

// LinkTelemetry is one node's measurement of its link to a peer.
type LinkTelemetry struct {
	Peer            string `json:"peer"`
	SourceInterface string `json:"sourceInterface"`
	SourceKind      string `json:"sourceKind"`
	LocalAddress    string `json:"localAddress"`
	SinkAddress     string `json:"sinkAddress"`
	SinkInterface   string `json:"sinkInterface"`
	SinkKind        string `json:"sinkKind"`
	// ConnectionType is the kind both ends agree on, or "a/b" when the
	// two ends' interfaces are classified differently.
	ConnectionType string `json:"connectionType"`
	// RTT in milliseconds: last probe, EWMA (alpha 0.2), minimum; jitter
	// is an EWMA of successive RTT differences.
	RTTMs     float64 `json:"rttMs"`
	RTTEwmaMs float64 `json:"rttEwmaMs"`
	RTTMinMs  float64 `json:"rttMinMs"`
	JitterMs  float64 `json:"jitterMs"`
	LossPct   float64 `json:"lossPct"`
	Probes    int     `json:"probes"`
	// ClockOffsetMs is the peer's clock minus ours, ± the uncertainty.
	ClockOffsetMs            float64 `json:"clockOffsetMs"`
	ClockOffsetUncertaintyMs float64 `json:"clockOffsetUncertaintyMs"`
	// CapacityMbps is the source interface's OS-reported speed ("os"), or
	// a default for its kind ("estimated").
	CapacityMbps   *float64 `json:"capacityMbps,omitempty"`
	CapacitySource string   `json:"capacitySource"`
	// InterfaceSendMBps/RecvMBps are the source interface's counters (all
	// traffic); PeerSendMBps/RecvMBps are Orrery's own bytes with this
	// peer, exact even when peers share an interface.
	InterfaceSendMBps *float64 `json:"interfaceSendMBps,omitempty"`
	InterfaceRecvMBps *float64 `json:"interfaceRecvMBps,omitempty"`
	PeerSendMBps      *float64 `json:"peerSendMBps,omitempty"`
	PeerRecvMBps      *float64 `json:"peerRecvMBps,omitempty"`
	BytesSent         uint64   `json:"bytesSent"`
	BytesRecv         uint64   `json:"bytesRecv"`
}

// NodeLinks is one sample of all of a node's links.
type NodeLinks struct {
	Links     []LinkTelemetry `json:"links"`
	SampledAt time.Time       `json:"sampledAt"`
}

// State is the whole replicated state. A State value is immutable once
// published: Apply returns a new value sharing unchanged maps.
type State struct {
	LastEventAppliedIdx int64                   `json:"lastEventAppliedIdx"`
	NodeIdentities      map[string]NodeIdentity `json:"nodeIdentities"`
	NodeMemory          map[string]NodeMemory   `json:"nodeMemory"`
	NodeSystem          map[string]NodeSystem   `json:"nodeSystem"`
	NodeDisk            map[string]NodeDisk     `json:"nodeDisk"`
	NodeNetwork         map[string]NodeNetwork  `json:"nodeNetwork"`
	NodeLinkTelemetry   map[string]NodeLinks    `json:"nodeLinkTelemetry"`
	NodeModels          map[string]NodeModels   `json:"nodeModels"`
	Instances           map[string]Instance     `json:"instances"`
	Runners             map[string]Runner       `json:"runners"`
	Topology            Topology                `json:"topology"`
	// Downloads are model pulls, running and recent, by id.
	Downloads map[string]Download `json:"downloads"`
}

// New returns the empty state, before any event: index -1 so that the first
// event (index 0) is the next one.
func New() State {
	return State{
		LastEventAppliedIdx: -1,
		NodeIdentities:      map[string]NodeIdentity{},
		NodeMemory:          map[string]NodeMemory{},
		NodeSystem:          map[string]NodeSystem{},
		NodeDisk:            map[string]NodeDisk{},
		Downloads:           map[string]Download{},
		NodeNetwork:         map[string]NodeNetwork{},
		NodeLinkTelemetry:   map[string]NodeLinks{},
		NodeModels:          map[string]NodeModels{},
		Instances:           map[string]Instance{},
		Runners:             map[string]Runner{},
		Topology:            Topology{Nodes: []TopologyNode{}, Connections: []Connection{}},
	}
}

// ModelInfo is one model a node has on disk (see engine/modelstore.Entry).
type ModelInfo struct {
	ID           string  `json:"id"`
	Source       string  `json:"source"`
	Path         string  `json:"path"`
	Size         *Memory `json:"size,omitempty"`
	Arch         string  `json:"arch,omitempty"`
	Layers       int     `json:"layers,omitempty"`
	Quantization string  `json:"quantization,omitempty"`
	Params       uint64  `json:"params,omitempty"`
	ContextLen   int     `json:"contextLength,omitempty"`
	// Pooling is set for an embedding model: how it pools ("mean", "cls",
	// "last"; "rank" for a reranker, which serves no embeddings).
	Pooling string `json:"pooling,omitempty"`
	// Error says why the node cannot serve the model.
	Error string `json:"error,omitempty"`
	// Defaults are the model's own generation settings (an Ollama
	// model's params layer), for requests that do not set them.
	Defaults *ModelDefaults `json:"defaults,omitempty"`
}

// ModelDefaults are generation settings a model comes with.
type ModelDefaults struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"topP,omitempty"`
	TopK        *int     `json:"topK,omitempty"`
	// NumPredict caps the completion's tokens.
	NumPredict *int     `json:"numPredict,omitempty"`
	Stop       []string `json:"stop,omitempty"`
}

// NodeModels is a node's model list, from its last scan.
type NodeModels struct {
	Models    []ModelInfo `json:"models"`
	SampledAt time.Time   `json:"sampledAt"`
}

// ShardRange is the blocks [FirstLayer, LastLayer) one rank of an
// instance holds, on NodeID.
type ShardRange struct {
	Rank       int    `json:"rank"`
	NodeID     string `json:"nodeId"`
	FirstLayer int    `json:"firstLayer"`
	LastLayer  int    `json:"lastLayer"`
	// NeedBytes is the memory placement expected the rank to use; Slice,
	// for a tensor-parallel rank, what it holds of each block (heads, MLP
	// columns or experts). Both are for display.
	NeedBytes uint64 `json:"needBytes,omitempty"`
	Slice     string `json:"slice,omitempty"`
}

// Instance is a model placed on the cluster: the ranks that serve it.
type Instance struct {
	InstanceID string       `json:"instanceId"`
	ModelID    string       `json:"modelId"`
	NodeID     string       `json:"nodeId"` // the node that owns (placed) it
	Ranks      []ShardRange `json:"ranks"`
	// Source is where ranks fetch their tensors from when no node has
	// the model (nil: from a node that has it).
	Source    *ModelSource `json:"source,omitempty"`
	CreatedAt time.Time    `json:"createdAt"`
	// Status is "Active", or "Failed" once a rank failed (Error names
	// it); a failed instance's runners are stopped and the next request
	// for its model places a new one.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Parallel is how many requests every rank serves at once (its KV
	// cache's sequences); 0 reads as 1.
	Parallel int `json:"parallel,omitempty"`
	// Tensor is how the event log writes the instance's Shape (read it
	// with Shape, set it with SetShape): the size of each stage's
	// tensor-parallel group, 0 for a pipeline; the stages are the ranks
	// over it.
	Tensor int `json:"tensor,omitempty"`
	// DraftModel is a model on rank 0's node that drafts for speculative
	// decoding (its id; "": none), loaded beside rank 0.
	DraftModel string `json:"draftModel,omitempty"`
	// Speculative is the speculation of the requests that name none (nil:
	// none), by the draft model or by prompt lookup.
	Speculative *runnerapi.Speculation `json:"speculative,omitempty"`
	// Prediction is the cost model's prediction for the plan it was placed
	// on (nil when no node's speed was known).
	Prediction *runnerapi.Prediction `json:"prediction,omitempty"`
	// GPULayers is how many blocks of each rank go on its node's GPU
	// (runnerapi.GPUAuto, written "auto": as many as fit; 0: none; nil:
	// each node's default, its agent's --gpu-layers). A node whose agent
	// runs with --gpu off keeps its ranks on the CPU whatever this says.
	GPULayers *runnerapi.GPULayers `json:"gpuLayers,omitempty"`
	// Keep-alive, like Ollama's: Pinned instances stay until deleted;
	// the others are unloaded KeepAliveMs after their last request ends,
	// at ExpiresAt (nil while a request runs). Active counts the requests
	// running on it, as its rank 0's node reports them.
	Pinned      bool       `json:"pinned,omitempty"`
	KeepAliveMs int64      `json:"keepAliveMs,omitempty"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	Active      int        `json:"active,omitempty"`
}

// Shape is how the instance's ranks split the model: its pipeline stages
// and their tensor-parallel groups.
func (in Instance) Shape() runnerapi.Shape { return runnerapi.ShapeOf(len(in.Ranks), in.Tensor) }

// SetShape records s, as the event log has always written it: the group
// size, or nothing for a pipeline. The ranks are set apart (Validate
// checks that there are s.Ranks() of them).
func (in *Instance) SetShape(s runnerapi.Shape) {
	in.Tensor = 0
	if s.TensorParallel() {
		in.Tensor = s.Tensor
	}
}

// Instance statuses.
const (
	InstanceStatusActive = "Active"
	InstanceStatusFailed = "Failed"
)

// Runner lifecycle statuses.
const (
	RunnerIdle       = "Idle"
	RunnerLoading    = "Loading"
	RunnerConnecting = "Connecting"
	RunnerReady      = "Ready"
	RunnerRunning    = "Running"
	RunnerFailed     = "Failed"
	RunnerShutdown   = "Shutdown"
)

// Runner is the state of one rank's runner process.
type Runner struct {
	RunnerID   string `json:"runnerId"`
	InstanceID string `json:"instanceId"`
	NodeID     string `json:"nodeId"`
	Rank       int    `json:"rank"`
	Status     string `json:"status"`
	// LayersLoaded of TotalLayers while Loading.
	LayersLoaded int    `json:"layersLoaded"`
	TotalLayers  int    `json:"totalLayers"`
	Error        string `json:"error,omitempty"`
	Pid          int    `json:"pid,omitempty"`
	// Transfer is the shard transfer in progress while Loading, if any.
	Transfer *Transfer `json:"transfer,omitempty"`
	Since    time.Time `json:"since"`
	// DecodeTokPerSec is rank 0's decode in the last request it finished
	// (of 8 tokens or more), and ReduceMicros a tensor-parallel leader's
	// mean all-reduce in that decode: what the cost model's prediction is
	// held against, and calibrates its next ones with.
	DecodeTokPerSec float64 `json:"decodeTokPerSec,omitempty"`
	ReduceMicros    float64 `json:"reduceMicros,omitempty"`
	// LinkPort is where a tensor-parallel rank accepts direct links from
	// its group's higher ranks (TLS under a secret derived from the
	// cluster key), on its node's peer address; 0: through the agents.
	LinkPort int `json:"linkPort,omitempty"`
	// Offload is where the rank's blocks went once loaded, as its runner
	// reports it: how many on which GPU, the rest on the CPU (nil: not
	// loaded yet).
	Offload *runnerapi.Offload `json:"offload,omitempty"`
}

// Transfer is a shard coming from another node.
type Transfer struct {
	From       string   `json:"from"`
	Bytes      *Memory  `json:"bytes,omitempty"`
	Total      *Memory  `json:"total,omitempty"`
	MBps       *float64 `json:"mbps,omitempty"`
	EtaSeconds *float64 `json:"etaSeconds,omitempty"`
}
