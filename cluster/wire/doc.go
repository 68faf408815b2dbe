// Package wire is the peer protocol's framing and messages. A frame is a
// 4-byte big-endian length, a 1-byte message type and a JSON payload; the
// length counts type and payload and is capped, so a bad or hostile peer
// can make a reader allocate at most MaxFrame bytes.
//
// Frames travel inside TLS 1.3 connections authenticated by the cluster
// key (package cluster/auth); this package does no authentication itself.
package wire
