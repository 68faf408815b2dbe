package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// Type is a message type, the frame's first byte.
type Type byte

// Message types. Numbers are part of the protocol: never reuse one.
const (
	TypeHello     Type = 1 // first frame on a connection, both ways
	TypeHeartbeat Type = 2 // every heartbeat interval, with a probe stamp
	TypeProbeAck  Type = 3 // answer to a heartbeat: the four NTP stamps
	TypeSubmit    Type = 4 // worker → master: local events to index
	TypeEvents    Type = 5 // master → all: indexed events
	TypeFetch     Type = 6 // node → master: resend events since N
	TypeSnapshot  Type = 7 // master → node: whole state at an index
	// The rest travel on streams (cluster.Node.DialStream), not on the
	// control link: ring messages on the ring benchmark's control stream,
	// trace messages on a trace stream to the master.
	TypeRingStart  Type = 8  // coordinator → members: run a ring benchmark
	TypeRingReport Type = 9  // member → coordinator: its hop timings
	TypeTraceTask  Type = 10 // task owner → master: a traced task ended; its ranks
	TypeTraceChunk Type = 11 // rank → master: a chunk of its spans
)

var typeNames = map[Type]string{
	TypeHello: "hello", TypeHeartbeat: "heartbeat", TypeProbeAck: "probe-ack", TypeSubmit: "submit",
	TypeEvents: "events", TypeFetch: "fetch", TypeSnapshot: "snapshot",
	TypeRingStart: "ring-start", TypeRingReport: "ring-report",
	TypeTraceTask: "trace-task", TypeTraceChunk: "trace-chunk",
}

func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type-%d", byte(t))
}

// Limits on decoded messages.
const (
	MaxNodeIDLen     = ident.MaxLen
	MaxEventsPerMsg  = 4096
	MaxMembersPerMsg = 256
	MaxVersionLen    = 64
)

// Hello opens a connection. The TLS certificate already proves the node
// id; Hello must repeat it, and a mismatch closes the connection.
type Hello struct {
	NodeID    string    `json:"nodeId"`
	StartedAt time.Time `json:"startedAt"`
	Version   string    `json:"version"`
	PeerPort  int       `json:"peerPort"`
	// Purpose is "" for the control link, "probe" for the link-probe echo
	// link, else the purpose of a stream (see ValidPurpose), whose
	// StreamID (may be empty) tells the acceptor what it is for.
	Purpose  string `json:"purpose,omitempty"`
	StreamID string `json:"bench,omitempty"` // "bench": its name before streams were general
}

// MaxPurposeLen bounds a stream purpose.
const MaxPurposeLen = 32

// ValidPurpose checks a link purpose: "" (the control link) or 1..32 bytes
// of [a-z0-9-].
func ValidPurpose(p string) error {
	if len(p) > MaxPurposeLen {
		return fmt.Errorf("link purpose is %d bytes, limit %d", len(p), MaxPurposeLen)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("link purpose %q: byte %d is not [a-z0-9-]", p, i)
		}
	}
	return nil
}

// Ring benchmark limits.
const (
	MaxRingPayload = 64 << 20
	MaxRingRounds  = 100
)

// RingStart asks a member to take part in ring benchmark Bench: open a rank
// link to its successor in Order, and pass Size bytes around Rounds times.
type RingStart struct {
	Bench  string   `json:"bench"`
	Order  []string `json:"order"`
	Size   int      `json:"size"`
	Rounds int      `json:"rounds"`
	// NoTrace asks the ranks not to trace this run.
	NoTrace bool `json:"noTrace,omitempty"`
}

// RingHop is one timed hop: Size bytes from one rank to the next, from the
// first byte sent until the receiver's ack came back.
type RingHop struct {
	Round     int   `json:"round"`
	LatencyNs int64 `json:"latencyNs"`
	// Wall-clock times (Unix ns, the reporting node's clock) of this
	// round: our send until its ack, and the receive from our predecessor.
	SendStartNs int64 `json:"sendStartNs,omitempty"`
	AckNs       int64 `json:"ackNs,omitempty"`
	RecvStartNs int64 `json:"recvStartNs,omitempty"`
	RecvEndNs   int64 `json:"recvEndNs,omitempty"`
}

// RingReport is a member's timings of its outgoing hop, or its error.
type RingReport struct {
	Bench string    `json:"bench"`
	From  string    `json:"from"`
	To    string    `json:"to"`
	Hops  []RingHop `json:"hops"`
	Error string    `json:"error,omitempty"`
}

// Trace collection limits. A chunk's payload is bounded by MaxTraceChunk so
// that one chunk never holds the trace stream for long (other ranks of the
// node share it).
const (
	MaxTraceChunk = 1 << 20
	MaxTraceRanks = 1024
	maxKindLen    = 32
)

// TraceRank is one rank of a traced task and the node it ran on.
type TraceRank struct {
	Rank int    `json:"rank"`
	Node string `json:"node"`
}

// TraceTask tells the master that traced task Task (a trace id) has ended
// and which ranks took part, so that it merges as soon as all of them have
// delivered their spans, or after its timeout with the rest missing.
type TraceTask struct {
	Task  string      `json:"task"`
	Kind  string      `json:"kind"`
	Ranks []TraceRank `json:"ranks"`
	// Error is the task's failure, if it failed; the trace keeps it.
	Error string `json:"error,omitempty"`
}

// TraceChunk is a bounded part of one rank's spans. Seq counts from 0;
// Final marks the rank's last chunk. Data is opaque here (the agent's span
// encoding).
type TraceChunk struct {
	Task  string          `json:"task"`
	Rank  int             `json:"rank"`
	Seq   int             `json:"seq"`
	Final bool            `json:"final,omitempty"`
	Data  json.RawMessage `json:"data"`
}

// Heartbeat says "I am alive". T1 is the sender's clock (Unix ns) when it
// was built; link RTT and clock offset are measured on the separate probe
// link, where nothing queues ahead of a probe.
type Heartbeat struct {
	NodeID    string    `json:"nodeId"`
	StartedAt time.Time `json:"startedAt"`
	Seq       uint64    `json:"seq"`
	T1        int64     `json:"t1"`
	MasterID  string    `json:"masterId"`
	// Term is the election term of the master the sender follows
	// (cluster.Elect): a master in a higher term outranks it.
	Term      uint64   `json:"term,omitempty"`
	LastIdx   int64    `json:"lastIdx"`
	StateHash string   `json:"stateHash"`
	Members   []string `json:"members"`
	// Peers are addresses the sender reaches other members at, so that a
	// node given one static peer finds the rest of the cluster.
	Peers []PeerInfo `json:"peers,omitempty"`
}

// PeerInfo is a member's peer address as another member dials it.
type PeerInfo struct {
	NodeID string `json:"nodeId"`
	Addr   string `json:"addr"`
}

// ProbeAck answers a heartbeat, so that the sender hears from the peer on
// its own link: T1 echoed, T2 when the heartbeat was read (the receiver's
// clock, Unix ns); T3 is unused and kept for compatibility.
type ProbeAck struct {
	NodeID string `json:"nodeId"`
	Seq    uint64 `json:"seq"`
	T1     int64  `json:"t1"`
	T2     int64  `json:"t2"`
	T3     int64  `json:"t3"`
}

// RawEvent is an event not yet indexed: the cluster layer carries it as
// opaque JSON; the agent decodes it.
type RawEvent struct {
	Type  string          `json:"type"`
	Event json.RawMessage `json:"event"`
}

// IndexedEvent is an event with its global index.
type IndexedEvent struct {
	Idx   int64           `json:"idx"`
	Type  string          `json:"type"`
	Event json.RawMessage `json:"event"`
}

// Submit carries a worker's local events to the master.
type Submit struct {
	Events []RawEvent `json:"events"`
}

// Events carries consecutive indexed events from the master, and the
// master's identity, so a node notices a change of master.
type Events struct {
	MasterID string         `json:"masterId"`
	Events   []IndexedEvent `json:"events"`
}

// Fetch asks the master for its events from Since on, or, with Snapshot,
// for its whole state (after a change of master).
type Fetch struct {
	Since    int64 `json:"since"`
	Snapshot bool  `json:"snapshot,omitempty"`
}

// Snapshot is the master's whole state at LastIdx, sent when a node is too
// far behind for Fetch or has followed another master.
type Snapshot struct {
	MasterID string          `json:"masterId"`
	LastIdx  int64           `json:"lastIdx"`
	State    json.RawMessage `json:"state"`
}

// Message is one of this package's messages (a pointer to its struct).
// The set is closed: only the types below implement it.
type Message interface {
	// MsgType is the frame type the message travels as.
	MsgType() Type
	validate() error
}

func (*Hello) MsgType() Type      { return TypeHello }
func (*Heartbeat) MsgType() Type  { return TypeHeartbeat }
func (*ProbeAck) MsgType() Type   { return TypeProbeAck }
func (*Submit) MsgType() Type     { return TypeSubmit }
func (*Events) MsgType() Type     { return TypeEvents }
func (*Fetch) MsgType() Type      { return TypeFetch }
func (*Snapshot) MsgType() Type   { return TypeSnapshot }
func (*RingStart) MsgType() Type  { return TypeRingStart }
func (*RingReport) MsgType() Type { return TypeRingReport }
func (*TraceTask) MsgType() Type  { return TypeTraceTask }
func (*TraceChunk) MsgType() Type { return TypeTraceChunk }

// Encode marshals a message for WriteFrame.
func Encode(m Message) (Type, []byte, error) {
	t := m.MsgType()
	b, err := json.Marshal(m)
	if err != nil {
		return 0, nil, fmt.Errorf("encode %s: %w", t, err)
	}
	return t, b, nil
}

// Decode parses and validates one message payload. It returns a pointer to
// the message struct for the type.
func Decode(t Type, payload []byte) (Message, error) {
	var v Message
	switch t {
	case TypeHello:
		v = new(Hello)
	case TypeHeartbeat:
		v = new(Heartbeat)
	case TypeProbeAck:
		v = new(ProbeAck)
	case TypeSubmit:
		v = new(Submit)
	case TypeEvents:
		v = new(Events)
	case TypeFetch:
		v = new(Fetch)
	case TypeSnapshot:
		v = new(Snapshot)
	case TypeRingStart:
		v = new(RingStart)
	case TypeRingReport:
		v = new(RingReport)
	case TypeTraceTask:
		v = new(TraceTask)
	case TypeTraceChunk:
		v = new(TraceChunk)
	default:
		return nil, fmt.Errorf("decode: unknown message %s", t)
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", t, err)
	}
	if err := v.validate(); err != nil {
		return nil, fmt.Errorf("decode %s: %w", t, err)
	}
	return v, nil
}

func optionalNodeID(id string) error {
	if id == "" {
		return nil
	}
	return ident.ValidNodeID(id)
}

func (m *Hello) validate() error {
	if err := ident.ValidNodeID(m.NodeID); err != nil {
		return err
	}
	if m.PeerPort < 0 || m.PeerPort > 65535 {
		return fmt.Errorf("peer port %d", m.PeerPort)
	}
	if len(m.Version) > MaxVersionLen {
		return fmt.Errorf("version is %d bytes, limit %d", len(m.Version), MaxVersionLen)
	}
	if err := ValidPurpose(m.Purpose); err != nil {
		return err
	}
	if m.StreamID != "" {
		if m.Purpose == "" {
			return errors.New("a stream id on the control link")
		}
		if err := ident.ValidInstanceID(m.StreamID); err != nil {
			return fmt.Errorf("stream id: %w", err)
		}
	}
	return nil
}

// validBench checks a ring benchmark's id: it names the run's trace.
func validBench(id string) error {
	if err := ident.ValidTraceID(id); err != nil {
		return fmt.Errorf("bench id: %w", err)
	}
	return nil
}

// Validate checks a RingStart before it is sent.
func (m *RingStart) Validate() error { return m.validate() }

func (m *RingStart) validate() error {
	if err := validBench(m.Bench); err != nil {
		return err
	}
	if len(m.Order) < 2 || len(m.Order) > MaxMembersPerMsg {
		return fmt.Errorf("ring of %d nodes, want 2..%d", len(m.Order), MaxMembersPerMsg)
	}
	seen := map[string]bool{}
	for _, id := range m.Order {
		if err := ident.ValidNodeID(id); err != nil {
			return fmt.Errorf("ring member: %w", err)
		}
		if seen[id] {
			return fmt.Errorf("ring member %s twice", id)
		}
		seen[id] = true
	}
	if m.Size < 1 || m.Size > MaxRingPayload {
		return fmt.Errorf("payload %d bytes, want 1..%d", m.Size, MaxRingPayload)
	}
	if m.Rounds < 1 || m.Rounds > MaxRingRounds {
		return fmt.Errorf("%d rounds, want 1..%d", m.Rounds, MaxRingRounds)
	}
	return nil
}

func (m *RingReport) validate() error {
	if err := validBench(m.Bench); err != nil {
		return err
	}
	if err := ident.ValidNodeID(m.From); err != nil {
		return fmt.Errorf("from: %w", err)
	}
	if err := optionalNodeID(m.To); err != nil {
		return fmt.Errorf("to: %w", err)
	}
	if len(m.Hops) > MaxRingRounds {
		return fmt.Errorf("%d hops, limit %d", len(m.Hops), MaxRingRounds)
	}
	if len(m.Error) > 1024 {
		return errors.New("error text too long")
	}
	return nil
}

// Validate checks a TraceTask before it is sent.
func (m *TraceTask) Validate() error { return m.validate() }

func (m *TraceTask) validate() error {
	if err := ident.ValidTraceID(m.Task); err != nil {
		return err
	}
	if len(m.Kind) > maxKindLen {
		return fmt.Errorf("kind is %d bytes, limit %d", len(m.Kind), maxKindLen)
	}
	if len(m.Ranks) == 0 || len(m.Ranks) > MaxTraceRanks {
		return fmt.Errorf("%d ranks, want 1..%d", len(m.Ranks), MaxTraceRanks)
	}
	seen := map[int]bool{}
	for _, r := range m.Ranks {
		if r.Rank < 0 || r.Rank >= MaxTraceRanks {
			return fmt.Errorf("rank %d, want 0..%d", r.Rank, MaxTraceRanks-1)
		}
		if seen[r.Rank] {
			return fmt.Errorf("rank %d twice", r.Rank)
		}
		seen[r.Rank] = true
		if err := ident.ValidNodeID(r.Node); err != nil {
			return fmt.Errorf("rank %d node: %w", r.Rank, err)
		}
	}
	if len(m.Error) > 1024 {
		return errors.New("error text too long")
	}
	return nil
}

// Validate checks a TraceChunk before it is sent.
func (m *TraceChunk) Validate() error { return m.validate() }

func (m *TraceChunk) validate() error {
	if err := ident.ValidTraceID(m.Task); err != nil {
		return err
	}
	if m.Rank < 0 || m.Rank >= MaxTraceRanks {
		return fmt.Errorf("rank %d, want 0..%d", m.Rank, MaxTraceRanks-1)
	}
	if m.Seq < 0 {
		return fmt.Errorf("seq %d", m.Seq)
	}
	if len(m.Data) > MaxTraceChunk {
		return fmt.Errorf("chunk data is %d bytes, limit %d", len(m.Data), MaxTraceChunk)
	}
	if len(m.Data) == 0 || m.Data[0] != '{' {
		return errors.New("chunk data is not a JSON object")
	}
	return nil
}

func (m *Heartbeat) validate() error {
	if err := ident.ValidNodeID(m.NodeID); err != nil {
		return err
	}
	if err := optionalNodeID(m.MasterID); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	if len(m.Members) > MaxMembersPerMsg {
		return fmt.Errorf("%d members, limit %d", len(m.Members), MaxMembersPerMsg)
	}
	for _, id := range m.Members {
		if err := ident.ValidNodeID(id); err != nil {
			return fmt.Errorf("member: %w", err)
		}
	}
	if m.LastIdx < -1 {
		return fmt.Errorf("lastIdx %d", m.LastIdx)
	}
	if len(m.Peers) > MaxMembersPerMsg {
		return fmt.Errorf("%d peers, limit %d", len(m.Peers), MaxMembersPerMsg)
	}
	for _, p := range m.Peers {
		if err := ident.ValidNodeID(p.NodeID); err != nil {
			return fmt.Errorf("peer: %w", err)
		}
		if len(p.Addr) == 0 || len(p.Addr) > 262 {
			return fmt.Errorf("peer %s: address length %d", p.NodeID, len(p.Addr))
		}
	}
	if len(m.StateHash) > 128 {
		return errors.New("state hash too long")
	}
	return nil
}

func (m *ProbeAck) validate() error { return ident.ValidNodeID(m.NodeID) }

func validType(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("event type length %d, want 1..64", len(s))
	}
	return nil
}

func (m *Submit) validate() error {
	if len(m.Events) == 0 || len(m.Events) > MaxEventsPerMsg {
		return fmt.Errorf("%d events, want 1..%d", len(m.Events), MaxEventsPerMsg)
	}
	for i, e := range m.Events {
		if err := validType(e.Type); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if len(e.Event) == 0 {
			return fmt.Errorf("event %d: no payload", i)
		}
	}
	return nil
}

func (m *Events) validate() error {
	if err := ident.ValidNodeID(m.MasterID); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	if len(m.Events) > MaxEventsPerMsg {
		return fmt.Errorf("%d events, limit %d", len(m.Events), MaxEventsPerMsg)
	}
	for i, e := range m.Events {
		if err := validType(e.Type); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if len(e.Event) == 0 {
			return fmt.Errorf("event %d: no payload", i)
		}
		if e.Idx < 0 || i > 0 && e.Idx != m.Events[i-1].Idx+1 {
			return fmt.Errorf("event %d: idx %d breaks the run", i, e.Idx)
		}
	}
	return nil
}

func (m *Fetch) validate() error {
	if m.Since < 0 {
		return fmt.Errorf("since %d", m.Since)
	}
	return nil
}

func (m *Snapshot) validate() error {
	if err := ident.ValidNodeID(m.MasterID); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	if m.LastIdx < -1 {
		return fmt.Errorf("lastIdx %d", m.LastIdx)
	}
	if len(m.State) == 0 || m.State[0] != '{' {
		return errors.New("state is not a JSON object")
	}
	return nil
}
