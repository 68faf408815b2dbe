package client

import (
	"context"
	"net/http"
	"strconv"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/discovery"
	"github.com/orrery-cluster/orrery/engine/gpulib"
)

// Health returns GET /healthz.
func (c *Client) Health(ctx context.Context) (api.HealthResponse, error) {
	var h api.HealthResponse
	err := c.get(ctx, "/healthz", &h)
	return h, err
}

// NodeID returns GET /node_id: the node's id.
func (c *Client) NodeID(ctx context.Context) (string, error) {
	var id string
	err := c.get(ctx, "/node_id", &id)
	return id, err
}

// State returns GET /state: the node's copy of the cluster state.
func (c *Client) State(ctx context.Context) (state.State, error) {
	var st state.State
	err := c.get(ctx, "/state", &st)
	return st, err
}

// NodeMemory returns GET /state/nodeMemory, by node id.
func (c *Client) NodeMemory(ctx context.Context) (map[string]state.NodeMemory, error) {
	var m map[string]state.NodeMemory
	err := c.get(ctx, "/state/nodeMemory", &m)
	return m, err
}

// NodeSystem returns GET /state/nodeSystem, by node id.
func (c *Client) NodeSystem(ctx context.Context) (map[string]state.NodeSystem, error) {
	var m map[string]state.NodeSystem
	err := c.get(ctx, "/state/nodeSystem", &m)
	return m, err
}

// Runner returns GET /state/runners/{id}.
func (c *Client) Runner(ctx context.Context, id string) (state.Runner, error) {
	var r state.Runner
	err := c.get(ctx, path("/state/runners/", id), &r)
	return r, err
}

// Cluster returns GET /cluster: the node's view of membership and links.
func (c *Client) Cluster(ctx context.Context) (cluster.Status, error) {
	var st cluster.Status
	err := c.get(ctx, "/cluster", &st)
	return st, err
}

// Discovery returns GET /state/discovery: what discovery found, and why
// not.
func (c *Client) Discovery(ctx context.Context) (discovery.Report, error) {
	var r discovery.Report
	err := c.get(ctx, "/state/discovery", &r)
	return r, err
}

// GPU returns GET /state/gpu: what the node has for computing on a GPU,
// and what keeps it from doing so.
func (c *Client) GPU(ctx context.Context) (gpulib.Report, error) {
	var r gpulib.Report
	err := c.get(ctx, "/state/gpu", &r)
	return r, err
}

// RingBench runs POST /v1/cluster/ring-bench.
func (c *Client) RingBench(ctx context.Context, req api.RingBenchRequest) (api.RingBenchResult, error) {
	var res api.RingBenchResult
	err := c.do(ctx, http.MethodPost, "/v1/cluster/ring-bench", req, &res)
	return res, err
}

// RingBenchJSON is RingBench's answer as the agent wrote it.
func (c *Client) RingBenchJSON(ctx context.Context, req api.RingBenchRequest) ([]byte, error) {
	return c.raw(ctx, http.MethodPost, "/v1/cluster/ring-bench", req)
}

// ClusterHash returns GET /cluster/hash/{idx}: the state hash the node had
// at event idx, while it still keeps it.
func (c *Client) ClusterHash(ctx context.Context, idx int64) (api.ClusterHash, error) {
	var h api.ClusterHash
	err := c.get(ctx, "/cluster/hash/"+strconv.FormatInt(idx, 10), &h)
	return h, err
}
