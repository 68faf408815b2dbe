package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

const recordExt = ".json"

func (d *Discovery) ownRecordPath() string {
	return filepath.Join(d.cfg.LoopbackDir, d.cfg.NodeID+recordExt)
}

// loopbackRound refreshes our record and lists the others'.
func (d *Discovery) loopbackRound(context.Context) {
	if err := d.writeOwnRecord(); err != nil {
		d.log.Warn("loopback record not written", "err", err)
	}
	peers, err := d.listRecords(time.Now())
	if err != nil {
		d.log.Warn("loopback dir not listed", "err", err)
		return // keep what we had: one failed listing says nothing about peers
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range peers {
		if _, ok := d.loopPeers[id]; !ok {
			d.log.Info("peer found", "node", id, "addrs", peers[id].Addrs, "source", SourceLoopback)
		}
	}
	for id := range d.loopPeers {
		if _, ok := peers[id]; !ok {
			d.log.Info("peer gone", "node", id, "source", SourceLoopback)
		}
	}
	d.loopPeers = peers
}

// writeOwnRecord rewrites our record by rename, so that a reader never sees
// a partial file; rewriting also refreshes its mtime, which is what tells
// the others that we are alive.
func (d *Discovery) writeOwnRecord() error {
	rec := LoopbackRecord{NodeID: d.cfg.NodeID, Port: d.cfg.PeerPort, Version: d.cfg.Version, KeyFP: d.cfg.KeyFP, PID: os.Getpid()}
	data, err := rec.Marshal()
	if err != nil {
		return fmt.Errorf("discovery: loopback record: %w", err)
	}
	// atomicfile's temporary name starts with a dot and does not end in
	// .json, so listings skip it.
	if err := atomicfile.Write(d.ownRecordPath(), data, 0o644); err != nil {
		return fmt.Errorf("discovery: loopback record: %w", err)
	}
	return nil
}

func (d *Discovery) removeOwnRecord() {
	if err := os.Remove(d.ownRecordPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.log.Warn("loopback record not removed", "err", err)
	}
}

// listRecords reads the other agents' records. A record whose process is
// gone, or which has not been refreshed for staleAfter, is removed: its
// agent crashed or was killed without cleaning up.
func (d *Discovery) listRecords(now time.Time) (map[string]Peer, error) {
	entries, err := os.ReadDir(d.cfg.LoopbackDir)
	if err != nil {
		return nil, fmt.Errorf("discovery: loopback dir: %w", err)
	}
	own := d.cfg.NodeID + recordExt
	peers := map[string]Peer{}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, recordExt) || name == own {
			continue
		}
		path := filepath.Join(d.cfg.LoopbackDir, name)
		rec, mtime, err := readRecord(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		}
		stale := now.Sub(mtime) > d.staleAfter
		if err == nil && rec.NodeID+recordExt != name {
			err = fmt.Errorf("record for node %q in file %s", rec.NodeID, name)
		}
		if err != nil {
			// Possibly a newer version's format: leave it until it is stale.
			d.log.Debug("ignoring loopback record", "file", name, "err", err)
			if stale {
				d.removeStale(path, mtime, "unreadable and not refreshed")
			}
			continue
		}
		if !pidAlive(rec.PID) {
			d.removeStale(path, mtime, fmt.Sprintf("process %d is gone", rec.PID))
			continue
		}
		if stale {
			d.removeStale(path, mtime, fmt.Sprintf("not refreshed for %v", now.Sub(mtime).Round(time.Millisecond)))
			continue
		}
		peers[rec.NodeID] = Peer{
			NodeID:   rec.NodeID,
			Addrs:    []netip.AddrPort{netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(rec.Port))},
			Version:  rec.Version,
			KeyFP:    rec.KeyFP,
			Source:   SourceLoopback,
			LastSeen: mtime, // when its agent last refreshed it
		}
	}
	return peers, nil
}

// removeStale removes path unless it was rewritten since we read it: its
// owner may have come back between our read and now.
func (d *Discovery) removeStale(path string, mtime time.Time, why string) {
	fi, err := os.Stat(path)
	if err != nil || !fi.ModTime().Equal(mtime) {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.log.Warn("stale loopback record not removed", "file", path, "err", err)
		return
	}
	d.log.Info("removed stale loopback record", "file", path, "why", why)
}

func readRecord(path string) (LoopbackRecord, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return LoopbackRecord{}, time.Time{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return LoopbackRecord{}, time.Time{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxLoopbackRecord+1))
	if err != nil {
		return LoopbackRecord{}, fi.ModTime(), err
	}
	rec, err := ParseLoopbackRecord(data)
	return rec, fi.ModTime(), err
}
