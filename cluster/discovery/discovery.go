package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/mdns"
)

// Peer sources.
const (
	SourceMDNS     = "mdns"
	SourceStatic   = "static"
	SourceLoopback = "loopback"
)

// ErrRunning is returned by Run when the Discovery is already running.
var ErrRunning = errors.New("discovery: already running")

// Peer is an agent we could connect to.
type Peer struct {
	NodeID   string           `json:"nodeId"` // empty for static peers
	Addrs    []netip.AddrPort `json:"addrs"`  // peer-port addresses to dial, best first
	Version  string           `json:"version"`
	KeyFP    string           `json:"keyFp"` // fingerprint the peer advertises; empty when unknown
	Source   string           `json:"source"`
	LastSeen time.Time        `json:"lastSeen"`
}

func (p Peer) clone() Peer {
	p.Addrs = slices.Clone(p.Addrs)
	return p
}

// dialResult is the last dial outcome the cluster layer reported for one
// address.
type dialResult struct {
	nodeID      string
	err         string // empty: reachable
	keyMismatch bool
	at          time.Time
}

// hooks are the seams tests replace. They are set by New and may be
// changed only before Run.
type hooks struct {
	interfaces func() ([]net.Interface, error)
	query      func(context.Context, *mdns.QueryParam) error
	serve      func(*mdns.Config) (shutdowner, error)
	lookup     func(ctx context.Context, host string) ([]netip.Addr, error)
}

type shutdowner interface{ Shutdown() error }

// Discovery finds peers. Its methods are safe for concurrent use; Run
// blocks, the others do not.
type Discovery struct {
	cfg        Config // validated; read-only after New
	log        *slog.Logger
	static     []staticTarget
	staleAfter time.Duration
	hooks      hooks

	running atomic.Bool

	mu          sync.Mutex            // guards the fields below
	mdnsPeers   map[string]Peer       // by node id, every fingerprint
	loopPeers   map[string]Peer       // by node id, every fingerprint; replaced each round
	staticPeers map[string]Peer       // by configured entry
	staticErrs  map[string]error      // by configured entry: last resolution error
	dials       map[string]dialResult // by address (netip.AddrPort form when it parses)
	queryErr    error                 // last mDNS query outcome; nil after a success
	advertErr   error                 // last mDNS advertise outcome; nil after a success
	rounds      map[string]int        // completed rounds by source
}

// New validates cfg and returns a Discovery that does nothing until Run.
// In loopback mode it creates LoopbackDir, so that a bad path fails here.
func New(cfg Config) (*Discovery, error) {
	targets, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.LoopbackDir != "" {
		if err := os.MkdirAll(cfg.LoopbackDir, 0o700); err != nil {
			return nil, fmt.Errorf("discovery: loopback dir: %w", err)
		}
		if err := ownDir(cfg.LoopbackDir); err != nil {
			return nil, fmt.Errorf("discovery: loopback dir: %w", err)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Discovery{
		cfg:        cfg,
		log:        logger.With("component", "discovery"),
		static:     targets,
		staleAfter: 3 * cfg.BrowseInterval,
		hooks: hooks{
			interfaces: net.Interfaces,
			query:      mdns.QueryContext,
			serve:      func(c *mdns.Config) (shutdowner, error) { return mdns.NewServer(c) },
			lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			},
		},
		mdnsPeers:   map[string]Peer{},
		loopPeers:   map[string]Peer{},
		staticPeers: map[string]Peer{},
		staticErrs:  map[string]error{},
		dials:       map[string]dialResult{},
		rounds:      map[string]int{},
	}
	return d, nil
}

// Run advertises and browses with every configured source until ctx ends,
// then withdraws (stops the mDNS responder, removes our loopback record)
// and returns nil. It returns ErrRunning if called while already running.
func (d *Discovery) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer d.running.Store(false)
	var wg sync.WaitGroup
	if d.cfg.MDNS {
		wg.Go(func() { d.runMDNS(ctx) })
	}
	if len(d.static) > 0 {
		wg.Go(func() { d.every(ctx, SourceStatic, d.staticRound) })
	}
	if d.cfg.LoopbackDir != "" {
		wg.Go(func() {
			defer d.removeOwnRecord()
			d.every(ctx, SourceLoopback, d.loopbackRound)
		})
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// every runs round now and then every BrowseInterval until ctx ends.
func (d *Discovery) every(ctx context.Context, source string, round func(context.Context)) {
	t := time.NewTicker(d.cfg.BrowseInterval)
	defer t.Stop()
	for {
		round(ctx)
		if ctx.Err() != nil {
			return
		}
		d.mu.Lock()
		d.rounds[source]++
		d.pruneLocked(time.Now())
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Peers returns the peers that advertise our key fingerprint, excluding
// ourselves: one entry per node id (addresses from every source merged,
// freshest first), then static peers whose addresses no identified peer
// already has. Sorted by node id, static ones by address.
func (d *Discovery) Peers() []Peer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peersLocked()
}

func (d *Discovery) peersLocked() []Peer {
	var out []Peer
	known := map[netip.AddrPort]bool{}
	for _, p := range d.identifiedLocked() {
		if p.KeyFP != d.cfg.KeyFP {
			continue
		}
		out = append(out, p)
		for _, a := range p.Addrs {
			known[a] = true
		}
	}
	var static []Peer
	for _, p := range d.staticPeers {
		p = p.clone()
		// A static address that mDNS or loopback already identified is the
		// same agent: listing it twice would make the cluster dial twice.
		p.Addrs = slices.DeleteFunc(p.Addrs, func(a netip.AddrPort) bool { return known[a] })
		if len(p.Addrs) == 0 {
			continue
		}
		for _, a := range p.Addrs {
			known[a] = true
		}
		static = append(static, p)
	}
	slices.SortFunc(static, func(a, b Peer) int { return a.Addrs[0].Compare(b.Addrs[0]) })
	return append(out, static...)
}

// Mismatched returns the peers seen advertising another key fingerprint,
// and those whose dial the cluster layer reported as a key mismatch.
func (d *Discovery) Mismatched() []Peer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mismatchedLocked()
}

func (d *Discovery) mismatchedLocked() []Peer {
	var out []Peer
	known := map[string]bool{}
	for _, p := range d.identifiedLocked() {
		if p.KeyFP == d.cfg.KeyFP {
			continue
		}
		out = append(out, p)
		for _, a := range p.Addrs {
			known[a.String()] = true
		}
	}
	current := d.currentAddrsLocked()
	for _, addr := range sortedKeys(d.dials) {
		r := d.dials[addr]
		if !r.keyMismatch || known[addr] || !current[addr] {
			continue
		}
		p := Peer{NodeID: r.nodeID, Source: d.sourceOfLocked(addr), LastSeen: r.at}
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			p.Addrs = []netip.AddrPort{ap}
		}
		out = append(out, p)
	}
	return out
}

// identifiedLocked merges the peers whose node id we know, from every
// source, leaving out ourselves. Sorted by node id.
func (d *Discovery) identifiedLocked() []Peer {
	byID := map[string]Peer{}
	for _, src := range []map[string]Peer{d.mdnsPeers, d.loopPeers} {
		for id, p := range src {
			if id == d.cfg.NodeID {
				continue
			}
			if old, ok := byID[id]; ok {
				p = mergePeers(old, p)
			} else {
				p = p.clone()
			}
			byID[id] = p
		}
	}
	out := make([]Peer, 0, len(byID))
	for _, id := range sortedKeys(byID) {
		out = append(out, byID[id])
	}
	return out
}

// mergePeers combines two sightings of one node: the fresher one's
// details win and its addresses come first.
func mergePeers(a, b Peer) Peer {
	if b.LastSeen.After(a.LastSeen) {
		a, b = b, a
	}
	out := a.clone()
	for _, addr := range b.Addrs {
		if !slices.Contains(out.Addrs, addr) {
			out.Addrs = append(out.Addrs, addr)
		}
	}
	return out
}

// currentAddrsLocked is every address of every peer we currently know,
// whatever its fingerprint, as strings.
func (d *Discovery) currentAddrsLocked() map[string]bool {
	out := map[string]bool{}
	for _, src := range []map[string]Peer{d.mdnsPeers, d.loopPeers, d.staticPeers} {
		for _, p := range src {
			for _, a := range p.Addrs {
				out[a.String()] = true
			}
		}
	}
	return out
}

func (d *Discovery) sourceOfLocked(addr string) string {
	for _, src := range []map[string]Peer{d.mdnsPeers, d.loopPeers, d.staticPeers} {
		for _, p := range src {
			for _, a := range p.Addrs {
				if a.String() == addr {
					return p.Source
				}
			}
		}
	}
	return ""
}

// ReportDial is how the cluster layer tells whether dialing addr (the
// address string it dialed, as Peers gave it) worked: err == nil means the
// peer's port answered and the handshake passed. keyMismatch marks an err
// that is the peer rejecting our cluster key (or we its). nodeID may be
// empty (static peers). Results for addresses no current peer has are
// forgotten at the end of the next round.
func (d *Discovery) ReportDial(nodeID, addr string, err error, keyMismatch bool) {
	addr = normalizeAddr(addr)
	r := dialResult{nodeID: nodeID, keyMismatch: err != nil && keyMismatch, at: time.Now()}
	if err != nil {
		r.err = err.Error()
	}
	d.mu.Lock()
	old, had := d.dials[addr]
	d.dials[addr] = r
	d.mu.Unlock()
	if !had || old.err != r.err {
		d.log.Debug("dial result", "node", nodeID, "addr", addr, "err", r.err, "keyMismatch", r.keyMismatch)
	}
}

func normalizeAddr(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return addr
}

// pruneLocked forgets mDNS peers not seen for staleAfter (mDNS is lossy,
// so one missed round must not drop a peer) and dial results for
// addresses no peer has any more.
func (d *Discovery) pruneLocked(now time.Time) {
	for id, p := range d.mdnsPeers {
		if now.Sub(p.LastSeen) > d.staleAfter {
			delete(d.mdnsPeers, id)
			d.log.Info("peer gone", "node", id, "source", SourceMDNS)
		}
	}
	current := d.currentAddrsLocked()
	for addr := range d.dials {
		if !current[addr] {
			delete(d.dials, addr)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// describe names a peer for messages.
func describe(p Peer) string {
	var addrs []string
	for _, a := range p.Addrs {
		addrs = append(addrs, a.String())
	}
	where := strings.Join(addrs, ", ")
	if p.NodeID == "" {
		return fmt.Sprintf("%s peer at %s", p.Source, where)
	}
	return fmt.Sprintf("node %q at %s", p.NodeID, where)
}
