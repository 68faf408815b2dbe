// Package identity gives a node its persistent id and describes the machine
// it runs on.
//
// The id lives in <data-dir>/node.json beside a hash of the machine's
// fingerprint (IOPlatformUUID on macOS, /etc/machine-id on Linux). A data
// dir copied to another machine therefore does not clone the id (exo
// #1599): the fingerprints differ, and a new id is minted.
package identity

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/orrery-cluster/orrery/internal/ident"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// FileName is the identity file inside the data dir.
const FileName = "node.json"

// record is the on-disk form of node.json.
type record struct {
	NodeID string `json:"nodeId"`
	// FingerprintHash is sha256 of the machine fingerprint, hex; the raw
	// fingerprint is not stored (machine-id is meant to stay private).
	FingerprintHash string    `json:"fingerprintHash"`
	CreatedAt       time.Time `json:"createdAt"`
}

// Options tunes Load. The zero value of the optional fields uses the real
// machine; tests replace them.
type Options struct {
	DataDir      string
	AgentVersion string
	Logger       *slog.Logger
	// Probe describes the machine; nil means the OS probe.
	Probe func() (hostInfo, error)
	// RAMTotal returns total memory in bytes; nil means gopsutil.
	RAMTotal func() (uint64, error)
	Now      func() time.Time
}

// Load returns this node's identity, creating or re-minting the id in
// opts.DataDir as needed.
func Load(opts Options) (state.NodeIdentity, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Probe == nil {
		opts.Probe = probeHost
	}
	if opts.RAMTotal == nil {
		opts.RAMTotal = ramTotal
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger.With("component", "identity")

	host, err := opts.Probe()
	if err != nil {
		// Not fatal: the node still gets an id, only described less.
		log.Warn("host probe failed", "err", err)
	}
	id, err := loadID(opts.DataDir, hashFingerprint(host.Fingerprint), opts.Now, log)
	if err != nil {
		return state.NodeIdentity{}, err
	}
	ni := state.NodeIdentity{
		NodeID:       id,
		FriendlyName: host.FriendlyName,
		ModelID:      host.ModelID,
		ChipID:       host.Chip,
		OSName:       host.OSName,
		OSVersion:    host.OSVersion,
		OSBuild:      host.OSBuild,
		Arch:         runtime.GOARCH,
		CPUCount:     runtime.NumCPU(),
		PerfCores:    host.PerfCores,
		EffCores:     host.EffCores,
		AgentVersion: opts.AgentVersion,
		StartedAt:    opts.Now().UTC(),
	}
	if total, err := opts.RAMTotal(); err != nil {
		log.Warn("total memory unknown", "err", err)
	} else {
		ni.RAMTotal = state.Bytes(total)
	}
	return ni, nil
}

func hashFingerprint(fp string) string {
	if fp == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("orrery-machine:" + fp))
	return hex.EncodeToString(sum[:16])
}

// loadID reads node.json, or mints a new id when there is none, when it is
// unreadable (the bad file is kept aside), or when it was made on another
// machine.
func loadID(dir, fpHash string, now func() time.Time, log *slog.Logger) (string, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		log.Info("no node id yet; minting one", "path", path)
		return mint(path, fpHash, now)
	case err != nil:
		return "", fmt.Errorf("read identity: %w", err)
	}
	var rec record
	if err := decodeRecord(b, &rec); err != nil {
		aside := fmt.Sprintf("%s.corrupt-%d", path, now().Unix())
		if rerr := os.Rename(path, aside); rerr != nil {
			return "", fmt.Errorf("identity file %s is unreadable (%v) and could not be moved aside: %w", path, err, rerr)
		}
		log.Warn("identity file unreadable; kept it aside and minted a new id", "path", path, "kept", aside, "err", err)
		return mint(path, fpHash, now)
	}
	switch {
	case fpHash == "":
		log.Warn("machine fingerprint unknown; cannot tell whether this data dir was copied from another machine", "nodeId", rec.NodeID)
	case rec.FingerprintHash == "":
		// Written where no fingerprint was known: adopt this machine's.
		rec.FingerprintHash = fpHash
		if err := write(path, rec); err != nil {
			return "", err
		}
	case rec.FingerprintHash != fpHash:
		log.Warn("data dir was created on another machine (fingerprint differs); minting a new node id so the two nodes do not share one",
			"oldNodeId", rec.NodeID, "path", path)
		return mint(path, fpHash, now)
	}
	return rec.NodeID, nil
}

func decodeRecord(b []byte, rec *record) error {
	if err := json.Unmarshal(b, rec); err != nil {
		return fmt.Errorf("decode %s: %w", FileName, err)
	}
	if err := ident.ValidNodeID(rec.NodeID); err != nil {
		return fmt.Errorf("decode %s: %w", FileName, err)
	}
	return nil
}

func mint(path, fpHash string, now func() time.Time) (string, error) {
	rec := record{NodeID: NewID(), FingerprintHash: fpHash, CreatedAt: now().UTC()}
	if err := write(path, rec); err != nil {
		return "", err
	}
	return rec.NodeID, nil
}

func write(path string, rec record) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write identity: %w", err)
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("write identity: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write identity: %w", err)
	}
	return nil
}

// NewID returns a random node id in UUID form (version 4).
func NewID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go ≥ 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
