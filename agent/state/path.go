package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Limits on state paths taken from URLs.
const (
	MaxPathLen      = 512
	MaxPathSegments = 8
)

// ErrBadPath and ErrNotFound classify Lookup failures (400 and 404).
var (
	ErrBadPath  = errors.New("bad state path")
	ErrNotFound = errors.New("no such state path")
)

// ParsePath splits a state path such as "nodeMemory/abc" into segments. A
// leading or trailing slash is ignored; empty segments, "." and "..", and
// bytes outside [A-Za-z0-9_.:-] are refused.
func ParsePath(p string) ([]string, error) {
	if len(p) > MaxPathLen {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBadPath, len(p), MaxPathLen)
	}
	p = strings.TrimSuffix(strings.TrimPrefix(p, "/"), "/")
	if p == "" {
		return nil, nil
	}
	segs := strings.Split(p, "/")
	if len(segs) > MaxPathSegments {
		return nil, fmt.Errorf("%w: %d segments, limit %d", ErrBadPath, len(segs), MaxPathSegments)
	}
	for i, s := range segs {
		if s == "" || s == "." || s == ".." {
			return nil, fmt.Errorf("%w: segment %d is %q", ErrBadPath, i+1, s)
		}
		for j := 0; j < len(s); j++ {
			c := s[j]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
				c == '-' || c == '_' || c == '.' || c == ':') {
				return nil, fmt.Errorf("%w: segment %d has byte %q", ErrBadPath, i+1, c)
			}
		}
	}
	return segs, nil
}

// Lookup returns the JSON of the part of s that segs names, walking object
// keys and array indices of State's JSON form, so that every path mirrors
// GET /state exactly.
func Lookup(s State, segs []string) (json.RawMessage, error) {
	full, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("marshal state: %w", err)
	}
	if len(segs) == 0 {
		return full, nil
	}
	dec := json.NewDecoder(bytes.NewReader(full))
	dec.UseNumber() // keep uint64 byte counts exact
	var node any
	if err := dec.Decode(&node); err != nil {
		return nil, fmt.Errorf("decode state: %w", err)
	}
	for i, seg := range segs {
		switch v := node.(type) {
		case map[string]any:
			next, ok := v[seg]
			if !ok {
				return nil, fmt.Errorf("%w: %q", ErrNotFound, strings.Join(segs[:i+1], "/"))
			}
			node = next
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(v) {
				return nil, fmt.Errorf("%w: %q", ErrNotFound, strings.Join(segs[:i+1], "/"))
			}
			node = v[n]
		default:
			return nil, fmt.Errorf("%w: %q", ErrNotFound, strings.Join(segs[:i+1], "/"))
		}
	}
	out, err := json.Marshal(node)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", strings.Join(segs, "/"), err)
	}
	return out, nil
}
