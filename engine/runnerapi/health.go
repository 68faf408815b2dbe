package runnerapi

// Runner statuses, as /health reports them.
const (
	StatusLoading    = "loading"
	StatusConnecting = "connecting" // loaded; rank links being set up
	StatusReady      = "ready"
	StatusFailed     = "failed"
)

// Health is GET /health.
type Health struct {
	Status       string `json:"status"`
	LayersLoaded int    `json:"layersLoaded"`
	TotalLayers  int    `json:"totalLayers"`
	Error        string `json:"error,omitempty"`
	// Vocab is the model's vocabulary size, once loading began.
	Vocab int `json:"vocab,omitempty"`
	// ContextLen is the KV cache's capacity in tokens, once loaded.
	ContextLen int `json:"contextLength,omitempty"`
	// Offload is where the rank's blocks went, GPU or CPU, once loaded;
	// DraftOffload the same of rank 0's draft model, once loaded.
	Offload      *Offload `json:"offload,omitempty"`
	DraftOffload *Offload `json:"draftOffload,omitempty"`
	Pid          int      `json:"pid"`
	// Rank of Ranks; RankAddr is where the previous rank's link is
	// accepted (loopback; the agent connects to it).
	Rank     int    `json:"rank"`
	Ranks    int    `json:"ranks"`
	RankAddr string `json:"rankAddr,omitempty"`
	// MeshAddr is where a tensor-parallel rank accepts its group's links
	// from higher ranks (loopback; the agent connects to it).
	MeshAddr string `json:"meshAddr,omitempty"`
	// LinkBytesSent and LinkBytesRecv count the rank links' frames.
	LinkBytesSent uint64 `json:"linkBytesSent"`
	LinkBytesRecv uint64 `json:"linkBytesRecv"`
	// Mesh is a tensor-parallel rank's group links' traffic, by group
	// rank: the agent counts the direct ones in its per-peer figures.
	Mesh []MeshLink `json:"mesh,omitempty"`
}

// MeshLink is one of a tensor-parallel rank's group links: the other
// end's rank, whether it is direct (not through the agents), and the
// bytes it carried so far.
type MeshLink struct {
	Rank   int    `json:"rank"`
	Direct bool   `json:"direct,omitempty"`
	Sent   uint64 `json:"sent"`
	Recv   uint64 `json:"recv"`
}

// ListenLine is what a runner process prints on stdout once it listens:
// ListenPrefix and the address.
const ListenPrefix = "ORRERY_RUNNER_LISTEN "
