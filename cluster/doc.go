// Package cluster joins agents into one cluster: membership with failure
// detection, a stable master election and (with the node layer) event
// replication over authenticated peer links. Subpackages: auth (cluster key,
// TLS 1.3), discovery (mDNS, static, loopback) and wire (framing).
//
// It imports nothing from the rest of Orrery: events travel as opaque JSON.
package cluster
