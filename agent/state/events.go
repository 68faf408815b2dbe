package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// Event is a typed change to State. Every event names the node it is about,
// so that the master can check that a worker only speaks for itself.
type Event interface {
	// Type is the event's wire name, e.g. "NodeMemoryMeasured".
	Type() string
	// Node is the id of the node the event is about.
	Node() string
}

// NodeIdentityMeasured says who a node is; sent at start-up.
type NodeIdentityMeasured struct {
	NodeID   string       `json:"nodeId"`
	Identity NodeIdentity `json:"identity"`
}

// NodeMemoryMeasured is one memory sample (every 0.5 s by default).
type NodeMemoryMeasured struct {
	NodeID string     `json:"nodeId"`
	Memory NodeMemory `json:"memory"`
}

// NodeSystemMeasured is one system sample (every 1 s by default).
type NodeSystemMeasured struct {
	NodeID string     `json:"nodeId"`
	System NodeSystem `json:"system"`
}

// NodeDiskMeasured is one disk sample of the models directory (every 10 s).
type NodeDiskMeasured struct {
	NodeID string   `json:"nodeId"`
	Disk   NodeDisk `json:"disk"`
}

// NodeNetworkMeasured is one sample of the node's interfaces (every 5 s).
type NodeNetworkMeasured struct {
	NodeID  string      `json:"nodeId"`
	Network NodeNetwork `json:"network"`
}

// NodeLinksMeasured is one sample of a node's links to its peers (every
// 2 s when something changed, at least every 10 s).
type NodeLinksMeasured struct {
	NodeID string    `json:"nodeId"`
	Links  NodeLinks `json:"links"`
}

func (NodeLinksMeasured) Type() string   { return "NodeLinksMeasured" }
func (e NodeLinksMeasured) Node() string { return e.NodeID }

// NodeGone says a node stopped answering and leaves the state; the master
// publishes it when failure detection sweeps the node.
type NodeGone struct {
	NodeID string `json:"nodeId"`
}

func (NodeGone) Type() string             { return "NodeGone" }
func (e NodeGone) Node() string           { return e.NodeID }
func (NodeIdentityMeasured) Type() string { return "NodeIdentityMeasured" }
func (NodeMemoryMeasured) Type() string   { return "NodeMemoryMeasured" }
func (NodeSystemMeasured) Type() string   { return "NodeSystemMeasured" }
func (NodeDiskMeasured) Type() string     { return "NodeDiskMeasured" }
func (NodeNetworkMeasured) Type() string  { return "NodeNetworkMeasured" }

func (e NodeIdentityMeasured) Node() string { return e.NodeID }
func (e NodeMemoryMeasured) Node() string   { return e.NodeID }
func (e NodeSystemMeasured) Node() string   { return e.NodeID }
func (e NodeDiskMeasured) Node() string     { return e.NodeID }
func (e NodeNetworkMeasured) Node() string  { return e.NodeID }

// NodeModelsMeasured is a node's model list (at start, then when it
// changes; scanned every 10 s).
type NodeModelsMeasured struct {
	NodeID string     `json:"nodeId"`
	Models NodeModels `json:"models"`
}

// InstanceCreated places a model; NodeID is the owning node, which
// publishes it.
type InstanceCreated struct {
	NodeID   string   `json:"nodeId"`
	Instance Instance `json:"instance"`
}

// InstanceDeleted removes an instance and its runners.
type InstanceDeleted struct {
	NodeID     string `json:"nodeId"`
	InstanceID string `json:"instanceId"`
}

// InstanceFailed marks an instance Failed (published by its owner when a
// rank failed); Error names the rank and why.
type InstanceFailed struct {
	NodeID     string `json:"nodeId"`
	InstanceID string `json:"instanceId"`
	Error      string `json:"error"`
}

// InstanceUsed reports the requests running on an instance, published by
// its rank 0's node when one starts or ends: Active of them, and the
// expiry that follows (nil: none, while busy or pinned). KeepAliveMs, when
// set, is a request's keep_alive becoming the instance's (-1 pins it).
type InstanceUsed struct {
	NodeID      string     `json:"nodeId"`
	InstanceID  string     `json:"instanceId"`
	Active      int        `json:"active"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	KeepAliveMs *int64     `json:"keepAliveMs,omitempty"`
}

func (InstanceUsed) Type() string   { return "InstanceUsed" }
func (e InstanceUsed) Node() string { return e.NodeID }

func (InstanceFailed) Type() string   { return "InstanceFailed" }
func (e InstanceFailed) Node() string { return e.NodeID }

// RunnerStatusChanged is a runner's new lifecycle state, published by
// the node it runs on.
type RunnerStatusChanged struct {
	NodeID string `json:"nodeId"`
	Runner Runner `json:"runner"`
}

func (NodeModelsMeasured) Type() string    { return "NodeModelsMeasured" }
func (e NodeModelsMeasured) Node() string  { return e.NodeID }
func (InstanceCreated) Type() string       { return "InstanceCreated" }
func (e InstanceCreated) Node() string     { return e.NodeID }
func (InstanceDeleted) Type() string       { return "InstanceDeleted" }
func (e InstanceDeleted) Node() string     { return e.NodeID }
func (RunnerStatusChanged) Type() string   { return "RunnerStatusChanged" }
func (e RunnerStatusChanged) Node() string { return e.NodeID }

// decoders maps a wire type name to a function decoding its payload. It is
// written only here, at init, and read-only afterwards.
var decoders = map[string]func([]byte) (Event, error){
	"NodeIdentityMeasured": decodeAs[NodeIdentityMeasured],
	"NodeMemoryMeasured":   decodeAs[NodeMemoryMeasured],
	"NodeSystemMeasured":   decodeAs[NodeSystemMeasured],
	"NodeDiskMeasured":     decodeAs[NodeDiskMeasured],
	"NodeNetworkMeasured":  decodeAs[NodeNetworkMeasured],
	"NodeGone":             decodeAs[NodeGone],
	"NodeLinksMeasured":    decodeAs[NodeLinksMeasured],
	"NodeModelsMeasured":   decodeAs[NodeModelsMeasured],
	"InstanceCreated":      decodeAs[InstanceCreated],
	"InstanceDeleted":      decodeAs[InstanceDeleted],
	"InstanceFailed":       decodeAs[InstanceFailed],
	"InstanceUsed":         decodeAs[InstanceUsed],
	"RunnerStatusChanged":  decodeAs[RunnerStatusChanged],
	"NodeStateAsserted":    decodeAs[NodeStateAsserted],
	"DownloadProgress":     decodeAs[DownloadProgress],
}

func decodeAs[T Event](b []byte) (Event, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// EventTypes lists the known event type names, sorted.
func EventTypes() []string {
	names := make([]string, 0, len(decoders))
	for n := range decoders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrUnknownEventType is returned by DecodeEvent for a type it does not know.
var ErrUnknownEventType = errors.New("unknown event type")

// MaxNodeIDLen bounds node ids taken from the wire.
const MaxNodeIDLen = ident.MaxLen

// DecodeEvent decodes an event payload of the named type and checks that it
// names a valid node, and that the instances, ranks and runners it names
// have valid ids.
func DecodeEvent(typ string, payload []byte) (Event, error) {
	dec, ok := decoders[typ]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownEventType, typ)
	}
	ev, err := dec(payload)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", typ, err)
	}
	if err := ident.ValidNodeID(ev.Node()); err != nil {
		return nil, fmt.Errorf("decode %s: %w", typ, err)
	}
	if err := checkIDs(ev); err != nil {
		return nil, fmt.Errorf("decode %s: %w", typ, err)
	}
	return ev, nil
}

// Indexed is an event with the global index the master gave it.
type Indexed struct {
	Idx   int64
	Event Event
}

type indexedWire struct {
	Idx   int64           `json:"idx"`
	Type  string          `json:"type"`
	Event json.RawMessage `json:"event"`
}

// MarshalJSON writes {"idx":N,"type":"…","event":{…}}.
func (ie Indexed) MarshalJSON() ([]byte, error) {
	if ie.Event == nil {
		return nil, errors.New("indexed event has no event")
	}
	payload, err := json.Marshal(ie.Event)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", ie.Event.Type(), err)
	}
	return json.Marshal(indexedWire{Idx: ie.Idx, Type: ie.Event.Type(), Event: payload})
}

// UnmarshalJSON reads what MarshalJSON writes, refusing unknown types and
// negative indices.
func (ie *Indexed) UnmarshalJSON(b []byte) error {
	var w indexedWire
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("indexed event: %w", err)
	}
	if w.Idx < 0 {
		return fmt.Errorf("indexed event: negative idx %d", w.Idx)
	}
	if len(w.Event) == 0 {
		return errors.New("indexed event: missing \"event\"")
	}
	ev, err := DecodeEvent(w.Type, w.Event)
	if err != nil {
		return fmt.Errorf("indexed event %d: %w", w.Idx, err)
	}
	ie.Idx, ie.Event = w.Idx, ev
	return nil
}
