// Package ownership keeps this node's record of what it owns (its
// identity and measurements, the instances it placed, the runners it runs)
// and reconciles the replicated state with it: whatever a master change,
// a partition or a snapshot dropped or kept stale, the node asserts again
// (state.NodeStateAsserted). Its instances are kept on disk too, so that
// a restart restores the pinned ones. Every local event goes through
// Ledger.Publish, which records it and hands it on for sequencing.
package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// Defaults.
const (
	// DefaultEvery is how often the state is compared with the record. A
	// difference seen twice in a row (events in flight are not one) is
	// asserted, so a loss is repaired within two periods.
	DefaultEvery = time.Second
	// DefaultRejoinWait is how long a restored instance waits for the
	// nodes of its ranks before it is marked Failed.
	DefaultRejoinWait = 30 * time.Second
	// maxFile bounds the instances file read at start.
	maxFile = 16 << 20
)

// FileName is the instances file in the data dir.
const FileName = "instances.json"

// Config wires a Ledger.
type Config struct {
	Self string
	// Path is the instances file ("" keeps nothing on disk).
	Path string
	// Store is this node's replicated state.
	Store *state.Store
	// Sequence hands an event to the cluster (the master indexes it).
	Sequence func(state.Event) error
	// Every and RejoinWait default to DefaultEvery and DefaultRejoinWait.
	Every, RejoinWait time.Duration
	Logger            *slog.Logger
}

// Ledger is this node's record and its reconciler. Safe for concurrent
// use.
type Ledger struct {
	cfg Config
	log *slog.Logger

	kick chan string // Kick's reasons, for Run

	mu      sync.Mutex // guards own and asserts; orders Sequence calls
	own     *state.Owned
	asserts int
	// restored are the instances restored from disk, and since when:
	// touched only by New and then Run.
	restored map[string]time.Time
}

// New returns the ledger, with the pinned instances of the instances file
// restored (the others, placed on demand, are dropped and logged).
func New(cfg Config) (*Ledger, error) {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.RejoinWait <= 0 {
		cfg.RejoinWait = DefaultRejoinWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{cfg: cfg, log: cfg.Logger.With("component", "ownership"), own: state.NewOwned(cfg.Self),
		restored: map[string]time.Time{}, kick: make(chan string, 1)}
	ins, err := l.load()
	if err != nil {
		return nil, err
	}
	var keep []state.Instance
	for _, in := range ins {
		if in.Pinned && in.Status != state.InstanceStatusFailed {
			in.Active, in.ExpiresAt = 0, nil
			keep = append(keep, in)
			l.restored[in.InstanceID] = time.Now()
			l.log.Info("instance restored after restart", "instance", in.InstanceID, "model", in.ModelID, "ranks", len(in.Ranks))
		} else {
			l.log.Info("instance not restored (on demand or failed)", "instance", in.InstanceID, "model", in.ModelID, "status", in.Status)
		}
	}
	if err := l.own.Restore(keep); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Path, err)
	}
	return l, nil
}

// load reads the instances file; a missing one is empty, an unreadable
// one is set aside (…corrupt-<unix time>) with a warning.
func (l *Ledger) load() ([]state.Instance, error) {
	if l.cfg.Path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(l.cfg.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", l.cfg.Path, err)
	}
	var f state.OwnedInstancesFile
	err = json.Unmarshal(b, &f)
	if err == nil && len(b) > maxFile {
		err = fmt.Errorf("%d bytes, over the %d limit", len(b), maxFile)
	}
	if err == nil && f.NodeID != l.cfg.Self {
		err = fmt.Errorf("written by node %s, this is %s", f.NodeID, l.cfg.Self)
	}
	if err == nil {
		err = checkInstances(f.Instances, l.cfg.Self)
	}
	if err != nil {
		aside := fmt.Sprintf("%s.corrupt-%d", l.cfg.Path, time.Now().Unix())
		l.log.Warn("instances file unreadable; set aside, no instance restored", "path", l.cfg.Path, "aside", aside, "err", err)
		if rerr := os.Rename(l.cfg.Path, aside); rerr != nil {
			return nil, fmt.Errorf("set aside %s: %w", l.cfg.Path, rerr)
		}
		return nil, nil
	}
	return f.Instances, nil
}

// checkInstances validates instances read from disk.
func checkInstances(ins []state.Instance, self string) error {
	for _, in := range ins {
		ev := state.InstanceCreated{NodeID: self, Instance: in}
		if err := state.Validate(ev); err != nil {
			return err
		}
		if in.InstanceID == "" || in.NodeID != self || len(in.Ranks) == 0 {
			return fmt.Errorf("instance %q: no id, another owner (%q) or no ranks", in.InstanceID, in.NodeID)
		}
	}
	return nil
}

// Publish records a local event and hands it on for sequencing. It is
// the node's state.Sequencer.
func (l *Ledger) Publish(ev state.Event) error {
	if err := state.Validate(ev); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	l.mu.Lock()
	changed := l.own.Record(ev)
	var ins []state.Instance
	if changed {
		ins = l.own.Instances()
	}
	// Sequenced under the lock, so that the record and the cluster see
	// one node's events in the same order.
	err := l.cfg.Sequence(ev)
	l.mu.Unlock()
	if changed {
		l.save(ins)
	}
	return err
}

// save writes the instances file, atomically. A failure is logged: the
// cluster keeps working, only a restart would not restore the instances.
func (l *Ledger) save(ins []state.Instance) {
	if l.cfg.Path == "" {
		return
	}
	b, err := json.Marshal(state.OwnedInstancesFile{NodeID: l.cfg.Self, Instances: ins})
	if err == nil {
		err = atomicfile.Write(l.cfg.Path, b, 0o600)
	}
	if err != nil {
		l.log.Warn("save instances", "path", l.cfg.Path, "err", err)
	}
}

// Assert publishes everything this node owns, now (after a master change,
// say); why goes to the log.
func (l *Ledger) Assert(why string) {
	l.mu.Lock()
	ev := l.own.Assertion()
	l.asserts++
	err := l.cfg.Sequence(ev)
	l.mu.Unlock()
	if err != nil {
		l.log.Warn("assert owned state", "why", why, "err", err)
		return
	}
	l.log.Info("owned state asserted", "why", why, "instances", len(ev.Instances), "runners", len(ev.Runners))
}

// Kick has Run assert now (a master change, a snapshot restored: this
// node's part may be stale). It never blocks, so it may be called with
// the cluster's locks held.
func (l *Ledger) Kick(why string) {
	select {
	case l.kick <- why:
	default: // one is pending already
	}
}

// Instances returns the instances this node owns by its own record: those
// restored from disk included, before the state has them again.
func (l *Ledger) Instances() []state.Instance {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.own.Instances()
}

// Owns reports whether this node's record holds the instance.
func (l *Ledger) Owns(instanceID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.own.Has(instanceID)
}

// Asserts counts the assertions published so far.
func (l *Ledger) Asserts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asserts
}

// Run compares the state with the record every period, asserting a
// difference seen twice in a row, and fails restored instances whose
// ranks' nodes do not come back, until ctx ends.
func (l *Ledger) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.Every)
	defer t.Stop()
	prev := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case why := <-l.kick:
			l.Assert(why)
			prev = ""
			continue
		case <-t.C:
		}
		st := l.cfg.Store.State()
		l.mu.Lock()
		l.own.Prune(st)
		d := l.own.Diff(st)
		l.mu.Unlock()
		if d != "" && prev != "" {
			l.Assert("state differs: " + truncate(d, 300))
			d = "" // give the assertion a full period to come back
		}
		prev = d
		l.checkRestored(st, time.Now())
	}
}

// checkRestored forgets restored instances whose ranks' nodes are all in
// the state, and marks Failed those still missing one after RejoinWait.
func (l *Ledger) checkRestored(st state.State, now time.Time) {
	l.mu.Lock()
	owned := l.own.Instances()
	l.mu.Unlock()
	for _, in := range owned {
		since, ok := l.restored[in.InstanceID]
		if !ok {
			continue
		}
		missing := ""
		for _, r := range in.Ranks {
			if _, ok := st.NodeIdentities[r.NodeID]; !ok && missing == "" {
				missing = r.NodeID
			}
		}
		switch {
		case missing == "" || in.Status == state.InstanceStatusFailed:
			delete(l.restored, in.InstanceID)
		case now.Sub(since) > l.cfg.RejoinWait:
			delete(l.restored, in.InstanceID)
			msg := fmt.Sprintf("restored after a restart, but node %s (rank %d) did not rejoin within %v", missing,
				slices.IndexFunc(in.Ranks, func(r state.ShardRange) bool { return r.NodeID == missing }), l.cfg.RejoinWait)
			if err := l.Publish(state.InstanceFailed{NodeID: l.cfg.Self, InstanceID: in.InstanceID, Error: msg}); err != nil {
				l.log.Warn("fail restored instance", "instance", in.InstanceID, "err", err)
			} else {
				l.log.Warn("restored instance failed", "instance", in.InstanceID, "err", msg)
			}
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
