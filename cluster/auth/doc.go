// Package auth holds the cluster key and authenticates peer links with it.
//
// The cluster key is 32 random bytes shared by every node of a cluster
// (environment variable ORRERY_CLUSTER_KEY or <data-dir>/cluster.key). Each
// node derives the same certificate authority from it with HKDF and signs a
// fresh per-process leaf certificate whose common name is its node id. Peer
// links are TLS 1.3 with mutual authentication against that CA, so a node
// with another key can neither connect nor accept, and the key itself never
// crosses the wire. Fingerprint is the only form of the key safe to publish.
//
// It imports nothing from the rest of Orrery.
package auth
