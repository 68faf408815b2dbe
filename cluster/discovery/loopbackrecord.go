package discovery

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// MaxLoopbackRecord caps the size of a loopback record file: anything
// bigger is not ours, and a reader never allocates more than this.
const MaxLoopbackRecord = 4096

// LoopbackRecord is the content of <LoopbackDir>/<nodeId>.json.
type LoopbackRecord struct {
	NodeID  string `json:"nodeId"`
	Port    int    `json:"port"`
	Version string `json:"version"`
	KeyFP   string `json:"keyFp"`
	PID     int    `json:"pid"`
}

// ParseLoopbackRecord decodes and validates a record with the same limits
// as ParseTXT. Unknown JSON fields are ignored so that later versions can
// add some; the fingerprint comes back lower-case.
func ParseLoopbackRecord(data []byte) (LoopbackRecord, error) {
	if len(data) > MaxLoopbackRecord {
		return LoopbackRecord{}, fmt.Errorf("loopback record: %d bytes, at most %d", len(data), MaxLoopbackRecord)
	}
	var r LoopbackRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return LoopbackRecord{}, fmt.Errorf("loopback record: %w", err)
	}
	if err := r.normalize(); err != nil {
		return LoopbackRecord{}, fmt.Errorf("loopback record: %w", err)
	}
	return r, nil
}

// Marshal validates the record and encodes it as JSON.
func (r LoopbackRecord) Marshal() ([]byte, error) {
	if err := r.normalize(); err != nil {
		return nil, fmt.Errorf("loopback record: %w", err)
	}
	return json.Marshal(r)
}

func (r *LoopbackRecord) normalize() error {
	if err := ident.ValidNodeID(r.NodeID); err != nil {
		return err
	}
	if r.Port < 1 || r.Port > 65535 {
		return fmt.Errorf("port %d: want 1..65535", r.Port)
	}
	if err := validVersion(r.Version); err != nil {
		return err
	}
	fp, err := parseKeyFP(r.KeyFP)
	if err != nil {
		return err
	}
	r.KeyFP = fp
	// pid 0 and negative pids mean process groups to kill(2): never probe them.
	if r.PID < 1 || r.PID > math.MaxInt32 {
		return fmt.Errorf("pid %d: want 1..%d", r.PID, math.MaxInt32)
	}
	return nil
}
