package state

import (
	"slices"
	"time"
)

// Download is one model pull on a node (agent/pull): its files, bytes
// and speed, while it runs and for a while after.
type Download struct {
	ID     string `json:"id"`
	NodeID string `json:"nodeId"`
	// Ref is what was asked for, e.g. hf.co/org/repo:Q4_K_M; Model the
	// model id it gives once done.
	Ref   string `json:"ref"`
	Model string `json:"model,omitempty"`
	// Status is Running, Done, Failed or Canceled (Error says why).
	Status string         `json:"status"`
	Error  string         `json:"error,omitempty"`
	Files  []DownloadFile `json:"files"`
	// Bytes of Size are in place; MBps is the recent rate (10^6 B/s) and
	// EtaSeconds what remains at that rate (absent when unknown).
	Bytes      int64    `json:"bytes"`
	Size       int64    `json:"size"`
	MBps       *float64 `json:"mbps,omitempty"`
	EtaSeconds *float64 `json:"etaSeconds,omitempty"`
	// Resumed bytes were there from an earlier, interrupted run.
	Resumed int64 `json:"resumed,omitempty"`
	// Retries counts the requests tried again after one failed; Stalls
	// the connections given up because they stalled (each chunk then
	// resumed from its last byte on a new connection).
	Retries   int       `json:"retries,omitempty"`
	Stalls    int       `json:"stalls,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// DownloadFile is one file of a download.
type DownloadFile struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	Size  int64  `json:"size"`
	// Digest is the file's sha256:<hex> where the source names it (every
	// registry layer; hub files stored in LFS), for Ollama's pull lines.
	Digest string `json:"digest,omitempty"`
}

// Download statuses.
const (
	DownloadRunning  = "Running"
	DownloadDone     = "Done"
	DownloadFailed   = "Failed"
	DownloadCanceled = "Canceled"
)

// MaxFinishedDownloads bounds the finished downloads kept per node (the
// oldest go first).
const MaxFinishedDownloads = 16

// DownloadProgress is a download's state, published by its node every
// second while it runs and when it ends.
type DownloadProgress struct {
	NodeID   string   `json:"nodeId"`
	Download Download `json:"download"`
}

func (DownloadProgress) Type() string   { return "DownloadProgress" }
func (e DownloadProgress) Node() string { return e.NodeID }

// withDownload puts d (its node's) and drops that node's oldest finished
// downloads over MaxFinishedDownloads.
func withDownload(m map[string]Download, node string, d Download) map[string]Download {
	d.NodeID = node
	m = with(m, d.ID, d)
	var finished []Download
	for _, x := range m {
		if x.NodeID == node && x.Status != DownloadRunning {
			finished = append(finished, x)
		}
	}
	if len(finished) <= MaxFinishedDownloads {
		return m
	}
	slices.SortFunc(finished, func(a, b Download) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	drop := map[string]bool{}
	for _, x := range finished[:len(finished)-MaxFinishedDownloads] {
		drop[x.ID] = true
	}
	return withoutWhere(m, func(x Download) bool { return drop[x.ID] })
}

// ModelSource is the file an instance's ranks fetch their own tensors
// from when no node has the model: a shard-only pull.
type ModelSource struct {
	// Ref is the reference placed, e.g. hf.co/org/repo:Q4_K_M.
	Ref string `json:"ref"`
	// File is the GGUF's path in the repo; Size and SHA256 pin it.
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Model is the id the model has on a node that pulled it whole,
	// which can then serve shards over the peer link.
	Model string `json:"model"`
}
