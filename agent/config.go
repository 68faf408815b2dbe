package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/telemetry"
	"github.com/orrery-cluster/orrery/agent/tracecollect"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/modelstore"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/transfer"
)

// Config is one agent's configuration. DefaultConfig fills every field.
type Config struct {
	// APIAddr is where the local HTTP API listens. Keep it on loopback:
	// the API is not authenticated.
	APIAddr string
	// DataDir holds node.json, models/ and (later) traces/.
	DataDir string
	// MemoryInterval, SystemInterval, DiskInterval and NetworkInterval are
	// the sampling periods.
	MemoryInterval  time.Duration
	SystemInterval  time.Duration
	DiskInterval    time.Duration
	NetworkInterval time.Duration
	// RAMLimit, when not 0, caps the RAM this node reports (total and
	// available) and so offers to placement: a stand-in for a smaller
	// machine in tests and demos.
	RAMLimit uint64
	// LinkInterval is how often the link telemetry (RTT, per-peer MB/s)
	// is sampled.
	LinkInterval time.Duration
	// APIToken is what requests from beyond this machine must present
	// (Authorization: Bearer); see apitoken.go for when one is made.
	APIToken string
	// DownloadIdle gives up on a download connection (pulls, shard pulls,
	// shards from peers) that brings less than transfer.StallBytes in that
	// long; the transfer resumes from its last byte on a new one.
	DownloadIdle time.Duration
	// PeerAddr is where peer (TLS, cluster-key authenticated) links are
	// accepted. Port 0 picks a free port, which discovery advertises.
	PeerAddr string
	// Peers are static peers (host:port), for VPNs and VLANs where mDNS
	// does not reach.
	Peers []string
	// MDNS advertises and browses _orrery._tcp on the local network.
	MDNS bool
	// LoopbackDir, when set, lets agents on one machine find each other
	// through records in this directory, without multicast.
	LoopbackDir string
	// Registry is the OCI registry `orrery pull name:tag` pulls from
	// ("": Ollama's).
	Registry string
	// Heartbeat and FailAfter tune failure detection: a peer silent for
	// FailAfter is gone.
	Heartbeat, FailAfter time.Duration
	// Getenv reads ORRERY_CLUSTER_KEY; nil means os.Getenv.
	Getenv func(string) string
	// TraceMergeTimeout is how long the master waits, after a traced task
	// ended, for ranks that have not delivered their spans; the trace is
	// then saved as partial, naming them.
	TraceMergeTimeout time.Duration
	// RunnerExe is the orrery binary that model runners are started with
	// (`RunnerExe runner …`); empty means this very executable.
	RunnerExe string
	// Speed is where this node's compute speed for placement's cost model
	// comes from: "auto" (the cached benchmark, or `orrery speed` run at
	// start), a JSON file of `orrery speed --json`, or "" / "off" (none:
	// other nodes' figures stand in for it).
	Speed string
	// RunnerThreads and ContextLen are passed to runners (0: all CPUs,
	// and the model's context length).
	RunnerThreads, ContextLen int
	// RunnerDraftThreads are a draft model's threads (0: the runner's
	// default, runner.SmallDraftBytes).
	RunnerDraftThreads int
	// ContextShift lets generations on this node's rank-0 runners run
	// past the context (llama.cpp's context shift).
	ContextShift bool
	// GPULayers is how many blocks of each rank of this node's runners go
	// on its GPU when an instance does not say (runnerapi.GPUAuto, the
	// default: as many as fit; 0: none). NoGPU keeps them all on the CPU
	// whatever an instance says (--gpu off), and its speed measures and
	// publishes no GPU. GPUSoftware lets a software device (Mesa's
	// lavapipe, computing on the CPU) take blocks, and `orrery speed`
	// measure it and the node publish it (tests).
	GPULayers          runnerapi.GPULayers
	NoGPU, GPUSoftware bool
	// GPUMemory caps the GPU memory each of this node's runners takes
	// (bytes; 0: all the device has free), and the free memory the node
	// publishes for placement (--gpu-memory).
	GPUMemory uint64
	// DirectLinks lets a tensor-parallel group's ranks link to each other
	// directly (TLS under a secret derived from the cluster key, on a
	// listener on the peer address's host granted to each runner), not
	// through the agents.
	DirectLinks bool
	// DirectPorts bound the ports of those listeners, first to last
	// ({0, 0}: any free port), for a firewall that opens a range.
	DirectPorts [2]int
	// Parallel is how many requests an instance placed here serves at
	// once: the runners' slots, sharing one KV cache of ContextLen
	// positions.
	Parallel int
	// KeepAlive is how long an instance placed on demand stays loaded
	// after its last request, unless the request says (Ollama's
	// keep_alive; negative: until deleted).
	KeepAlive api.KeepAlive
	// ModelDirs are where models are looked for; nil means
	// modelstore.DefaultDirs (the data dir, Ollama, LM Studio, the HF cache).
	ModelDirs *modelstore.Dirs
	// Version is reported in the identity and /healthz.
	Version string
	Logger  *slog.Logger
}

// DefaultParallel is how many requests an instance serves at once unless
// --parallel says.
const DefaultParallel = 4

// DefaultConfig returns the defaults: API on 127.0.0.1:52416, data in
// ~/.orrery, memory every 0.5 s, system every 1 s, disk every 10 s, network
// every 5 s.
func DefaultConfig() Config {
	dir := ".orrery"
	if home, err := os.UserHomeDir(); err == nil {
		dir = filepath.Join(home, ".orrery")
	}
	return Config{
		APIAddr:           "127.0.0.1:52416",
		DataDir:           dir,
		MemoryInterval:    500 * time.Millisecond,
		KeepAlive:         api.KeepAlive{D: api.DefaultKeepAlive},
		Parallel:          DefaultParallel,
		SystemInterval:    time.Second,
		DiskInterval:      10 * time.Second,
		NetworkInterval:   5 * time.Second,
		LinkInterval:      telemetry.LinkInterval,
		DownloadIdle:      transfer.DefaultStall,
		PeerAddr:          "0.0.0.0:52400",
		DirectLinks:       true,
		GPULayers:         runnerapi.GPUAuto,
		MDNS:              true,
		Heartbeat:         time.Second,
		FailAfter:         cluster.DefaultFailAfter,
		TraceMergeTimeout: tracecollect.DefaultTimeout,
		Version:           "dev",
	}
}

func (c Config) validate() error {
	for name, d := range map[string]time.Duration{
		"memory interval": c.MemoryInterval, "system interval": c.SystemInterval,
		"disk interval": c.DiskInterval, "network interval": c.NetworkInterval, "link interval": c.LinkInterval,
	} {
		if d < 50*time.Millisecond || d > time.Hour {
			return fmt.Errorf("%s %v: want 50ms..1h", name, d)
		}
	}
	if c.DownloadIdle < time.Second || c.DownloadIdle > time.Hour {
		return fmt.Errorf("download idle timeout %v: want 1s..1h", c.DownloadIdle)
	}
	if c.Parallel < 0 || c.Parallel > backend.MaxParallel {
		return fmt.Errorf("parallel %d: want 1..%d", c.Parallel, backend.MaxParallel)
	}
	if c.Registry != "" {
		if u, err := url.Parse(c.Registry); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			return fmt.Errorf("registry %q: want http(s)://host[:port]", c.Registry)
		}
	}
	if c.DataDir == "" {
		return errors.New("data dir is empty")
	}
	if _, _, err := net.SplitHostPort(c.APIAddr); err != nil {
		return fmt.Errorf("api addr %q: %w", c.APIAddr, err)
	}
	if _, _, err := net.SplitHostPort(c.PeerAddr); err != nil {
		return fmt.Errorf("peer addr %q: %w", c.PeerAddr, err)
	}
	if c.Heartbeat < 10*time.Millisecond || c.FailAfter < 2*c.Heartbeat {
		return fmt.Errorf("heartbeat %v / fail-after %v: want heartbeat ≥ 10ms and fail-after ≥ 2 heartbeats", c.Heartbeat, c.FailAfter)
	}
	if p := c.DirectPorts; p != [2]int{} && (p[0] < 1 || p[0] > p[1] || p[1] > 65535) {
		return fmt.Errorf("direct ports %d-%d: want 1 ≤ first ≤ last ≤ 65535", p[0], p[1])
	}
	if c.TraceMergeTimeout < 100*time.Millisecond || c.TraceMergeTimeout > 10*time.Minute {
		return fmt.Errorf("trace merge timeout %v: want 100ms..10m", c.TraceMergeTimeout)
	}
	return nil
}

// modelDirs are where models are looked for.
func (c Config) modelDirs() modelstore.Dirs {
	if c.ModelDirs != nil {
		return *c.ModelDirs
	}
	home, _ := os.UserHomeDir()
	return modelstore.DefaultDirs(c.DataDir, home, c.Getenv)
}

// ParsePortRange parses "FIRST-LAST" (or one port, "P") into DirectPorts.
func ParsePortRange(v string) ([2]int, error) {
	first, last, ok := strings.Cut(v, "-")
	if !ok {
		last = first
	}
	a, erra := strconv.Atoi(strings.TrimSpace(first))
	b, errb := strconv.Atoi(strings.TrimSpace(last))
	if erra != nil || errb != nil || a < 1 || a > b || b > 65535 {
		return [2]int{}, fmt.Errorf("port range %q: want FIRST-LAST with 1 ≤ FIRST ≤ LAST ≤ 65535", v)
	}
	return [2]int{a, b}, nil
}
