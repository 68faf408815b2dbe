package state

import (
	"math"
	"time"
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
	PerfCores    *int      `json:"perfCores"`
	EffCores     *int      `json:"effCores"`
	RAMTotal     *Memory   `json:"ramTotal"`
	AgentVersion string    `json:"agentVersion"`
	StartedAt    time.Time `json:"startedAt"`
}

// NodeMemory is one memory sample, in exo's nodeMemory shape.
type NodeMemory struct {
	RAMTotal      *Memory   `json:"ramTotal"`
	RAMAvailable  *Memory   `json:"ramAvailable"`
	SwapTotal     *Memory   `json:"swapTotal"`
	SwapAvailable *Memory   `json:"swapAvailable"`
	SampledAt     time.Time `json:"sampledAt"`
}

// NodeSystem is one system sample, in exo's nodeSystem shape plus overall CPU
// and load. Usages are fractions 0..1, temperatures °C, power watts.
type NodeSystem struct {
	CPUUsage    *float64  `json:"cpuUsage"`
	PCPUUsage   *float64  `json:"pcpuUsage"`
	ECPUUsage   *float64  `json:"ecpuUsage"`
	GPUUsage    *float64  `json:"gpuUsage"`
	Temp        *float64  `json:"temp"`
	TempSource  string    `json:"tempSource,omitempty"`
	SysPower    *float64  `json:"sysPower"`
	PowerSource string    `json:"powerSource,omitempty"`
	Load1       *float64  `json:"load1"`
	Load5       *float64  `json:"load5"`
	Load15      *float64  `json:"load15"`
	SampledAt   time.Time `json:"sampledAt"`
}

// NodeDisk is the usage of the file system that holds the models directory.
type NodeDisk struct {
	Path      string    `json:"path"`
	Total     *Memory   `json:"total"`
	Available *Memory   `json:"available"`
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
	SpeedMbps   *int64   `json:"speedMbps"`
	BytesSent   uint64   `json:"bytesSent"`
	BytesRecv   uint64   `json:"bytesRecv"`
	PacketsSent uint64   `json:"packetsSent"`
	PacketsRecv uint64   `json:"packetsRecv"`
	// SendMBps and RecvMBps are the rates over the last sampling interval
	// (10^6 bytes/s); nil on the first sample.
	SendMBps *float64 `json:"sendMBps"`
	RecvMBps *float64 `json:"recvMBps"`
}

// NodeNetwork is one sample of all of a node's interfaces.
type NodeNetwork struct {
	Interfaces []NetworkInterface `json:"interfaces"`
	SampledAt  time.Time          `json:"sampledAt"`
}

// TopologyNode is a node in the topology. Edges come with the cluster.
type TopologyNode struct {
	NodeID string `json:"nodeId"`
}

// Topology is the cluster graph. With one node it has no connections.
type Topology struct {
	Nodes       []TopologyNode `json:"nodes"`
	Connections []any          `json:"connections"`
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
	Topology            Topology                `json:"topology"`
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
		NodeNetwork:         map[string]NodeNetwork{},
		Topology:            Topology{Nodes: []TopologyNode{}, Connections: []any{}},
	}
}
