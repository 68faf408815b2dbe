package trace

// Span is one finished, timed operation on one rank.
type Span struct {
	Name string `json:"name"`
	// Cat is the full hierarchical category, segments joined by '/'
	// ("decode/comms").
	Cat string `json:"cat"`
	// Node is the id of the node the rank ran on; Trace.Processes maps it to a
	// friendly name.
	Node string `json:"node"`
	// Lane names a concurrent sub-track of the rank (e.g. "io"); "" is the
	// rank's main lane.
	Lane string `json:"lane,omitempty"`
	Rank int    `json:"rank"`
	// StartNs is the start in nanoseconds since the Unix epoch (wall clock of
	// the recording node; see Trace.Shift for clock offsets).
	StartNs int64 `json:"startNs"`
	DurNs   int64 `json:"durNs"`
	Args    Args  `json:"args"`
}

// EndNs is the span's end in nanoseconds since the Unix epoch.
func (s *Span) EndNs() int64 { return s.StartNs + s.DurNs }

// ArgMask says which of the optional Args are set.
type ArgMask uint8

const (
	ArgBytes ArgMask = 1 << iota
	ArgPeer
	ArgToken
	ArgFlowOut // Flow starts in this span (the send side)
	ArgFlowIn  // Flow ends in this span (the receive side)
)

// Args are the few typed arguments a span can carry. It is a small value
// (32 bytes), not a map, so that ending a span allocates nothing. Build it
// with the With methods, which also set the mask:
//
//	tok.End(trace.Args{}.WithBytes(n).WithPeer(1).WithFlowOut(id))
type Args struct {
	Bytes int64 `json:"bytes,omitempty"`
	// Flow is the id of the flow this span starts or ends (see Has); flow ids
	// are never 0.
	Flow  uint64 `json:"flow,omitempty"`
	Peer  int32  `json:"peer,omitempty"`
	Token int32  `json:"token,omitempty"`
	// Has says which fields are meaningful (0 is a valid peer rank and token
	// index) and which way Flow goes.
	Has ArgMask `json:"has,omitempty"`
}

// WithBytes returns a with the byte count set.
func (a Args) WithBytes(n int64) Args { a.Bytes = n; a.Has |= ArgBytes; return a }

// WithPeer returns a with the peer rank set.
func (a Args) WithPeer(rank int) Args { a.Peer = int32(rank); a.Has |= ArgPeer; return a }

// WithToken returns a with the token index set.
func (a Args) WithToken(i int) Args { a.Token = int32(i); a.Has |= ArgToken; return a }

// WithFlowOut returns a marking the span as the start (send side) of flow id;
// id 0 means no flow.
func (a Args) WithFlowOut(id uint64) Args { return a.withFlow(id, ArgFlowOut) }

// WithFlowIn returns a marking the span as the end (receive side) of flow id;
// id 0 means no flow.
func (a Args) WithFlowIn(id uint64) Args { return a.withFlow(id, ArgFlowIn) }

func (a Args) withFlow(id uint64, dir ArgMask) Args {
	if id != 0 {
		a.Flow = id
		a.Has |= dir
	}
	return a
}

// FlowOut is the id of the flow the span starts, or 0.
func (a *Args) FlowOut() uint64 {
	if a.Has&ArgFlowOut == 0 {
		return 0
	}
	return a.Flow
}

// FlowIn is the id of the flow the span ends, or 0.
func (a *Args) FlowIn() uint64 {
	if a.Has&ArgFlowIn == 0 {
		return 0
	}
	return a.Flow
}

// Send is the Args of a send of n bytes to peer, starting flow id (0: none).
func Send(peer int, n int64, flow uint64) Args {
	return Args{}.WithPeer(peer).WithBytes(n).WithFlowOut(flow)
}

// Recv is the Args of a receive of n bytes from peer, ending flow id (0: none).
func Recv(peer int, n int64, flow uint64) Args {
	return Args{}.WithPeer(peer).WithBytes(n).WithFlowIn(flow)
}

// maxFlowID keeps flow ids exact as JSON numbers in JavaScript viewers (2^53).
const maxFlowID = 1<<53 - 1

// FlowKey is the flow id of the seq-th message from rank from to rank to. The
// sender and the receiver compute it independently, so the two ends of a
// message pair up without exchanging ids. It is never 0 and below 2^53.
func FlowKey(from, to int, seq uint64) uint64 {
	x := uint64(uint32(from))<<32 | uint64(uint32(to))
	x ^= seq*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	// splitmix64 finaliser
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	x &= maxFlowID
	if x == 0 {
		x = 1
	}
	return x
}
