// Package ident holds the identifiers that travel between nodes, processes
// and URLs (node, trace and instance ids) and the one rule that each must
// pass. These ids end up in file names and URL paths, so a value taken from
// the wire or a URL is checked here before it is used for anything.
package ident

import (
	"errors"
	"fmt"
)

// MaxLen bounds every id: node, trace and instance ids are all 1..64 bytes.
const MaxLen = 64

// ErrInvalid is wrapped by every validation error, so callers can map it to
// a 400 with errors.Is.
var ErrInvalid = errors.New("invalid id")

// NodeID is a node's stable identity (its key fingerprint or a chosen name).
type NodeID string

// TraceID names one recorded distributed task; it is the trace file's stem.
type TraceID string

// InstanceID names one placed model instance.
type InstanceID string

// CompletionID names one running completion (chatcmpl-…, cmpl-…), for
// POST /v1/cancel/{id}.
type CompletionID string

// Valid reports whether id is a valid node id.
func (id NodeID) Valid() error { return check("node id", string(id)) }

// Valid reports whether id is a valid trace id.
func (id TraceID) Valid() error { return check("trace id", string(id)) }

// Valid reports whether id is a valid instance id.
func (id InstanceID) Valid() error { return check("instance id", string(id)) }

// Valid reports whether id is a valid completion id.
func (id CompletionID) Valid() error { return check("completion id", string(id)) }

// ValidNodeID, ValidTraceID and ValidInstanceID check plain strings, for the
// many places that carry ids as strings in JSON structs.
func ValidNodeID(id string) error     { return NodeID(id).Valid() }
func ValidTraceID(id string) error    { return TraceID(id).Valid() }
func ValidInstanceID(id string) error { return InstanceID(id).Valid() }

// check is the single rule: 1..MaxLen bytes of [A-Za-z0-9_-]. Nothing that
// could climb out of a directory or break a URL path passes.
func check(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	}
	if len(id) > MaxLen {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalid, what, len(id), MaxLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: %s %q: byte %d is not [A-Za-z0-9_-]", ErrInvalid, what, id, i)
		}
	}
	return nil
}
