// Package clustertest runs cluster nodes in tests without sockets or
// sleeps: an in-memory Transport (Network), a test CA for the nodes' mutual
// TLS, an in-memory Application, StartCluster, which runs a few nodes
// that all know each other, and Frames, messages framed as a stream
// carries them (fuzz seeds).
package clustertest
