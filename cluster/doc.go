// Package cluster joins agents into one cluster: membership with failure
// detection, a stable master election and event replication over
// authenticated peer links. A Node keeps those; other protocols ride on its
// typed streams (Node.HandleStream registers a Purpose's handler,
// Node.DialStream opens one), e.g. the ring benchmark (cluster/ringbench)
// and the agent's trace shipping. Links run over a Transport: TCP for real
// nodes, in memory in tests (cluster/clustertest).
//
// Files by concern: node.go (Config, Node, Run, status), election.go
// (sweep, elect, heartbeats), replication.go (sequencing, fetch,
// snapshots), control.go (dial, accept, handshake, the control link),
// stream.go (streams), probe.go and links.go (link telemetry),
// membership.go (the member table and the election rule).
//
// Subpackages: auth (cluster key, TLS 1.3), discovery (mDNS, static,
// loopback), wire (framing and messages), ringbench, clustertest.
//
// It imports nothing from the rest of Orrery but internal/ident: events
// travel as opaque JSON.
package cluster
