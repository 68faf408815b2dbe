package discovery

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// DefaultBrowseInterval is how often each source looks for peers. mDNS
// queries are cheap, and 2 s makes a new Mac show up before a user wonders.
const DefaultBrowseInterval = 2 * time.Second

// minBrowseInterval keeps a typo from turning the loops into busy loops.
const minBrowseInterval = 10 * time.Millisecond

// Config configures a Discovery. New validates it.
type Config struct {
	// NodeID is our node id: 1..64 bytes of [A-Za-z0-9_-].
	NodeID string
	// Version is advertised as is: at most 64 printable ASCII bytes.
	Version string
	// KeyFP is the cluster-key fingerprint, 16 hex characters. Peers that
	// advertise another one are not returned by Peers but by Mismatched.
	KeyFP string
	// PeerPort is our peer (TLS) port, advertised to others and used to
	// recognise ourselves among static peers.
	PeerPort int
	// BrowseInterval is how often each source runs a round; 0 means
	// DefaultBrowseInterval. A peer not seen for 3 intervals is dropped.
	BrowseInterval time.Duration
	// MDNS advertises and browses _orrery._tcp on the local link.
	MDNS bool
	// Static lists host:port peers (VPN/VLAN) resolved every round. Their
	// identity is unknown until the cluster layer connects, so they come
	// back as Peer{NodeID: "", Source: "static"}.
	Static []string
	// LoopbackDir, when set, enables loopback mode: agents on one machine
	// publish <dir>/<nodeid>.json and list the directory every round.
	LoopbackDir string
	// Logger receives the package's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultLANConfig is for agents on a LAN: mDNS, a 2 s browse interval.
// The caller fills in identity, ports and static peers.
func DefaultLANConfig() Config {
	return Config{BrowseInterval: DefaultBrowseInterval, MDNS: true}
}

// DefaultLocalConfig is for several agents on one machine. It takes the
// shared directory because no default fits every user: a world-shared
// /tmp path would mix users' agents.
func DefaultLocalConfig(loopbackDir string) Config {
	return Config{BrowseInterval: 500 * time.Millisecond, LoopbackDir: loopbackDir}
}

// staticTarget is one validated Config.Static entry.
type staticTarget struct {
	entry string     // as configured, for messages
	host  string     // name or address literal
	port  uint16     //
	ip    netip.Addr // valid when host is an address literal
}

// validate checks cfg and fills in defaults.
func (c *Config) validate() ([]staticTarget, error) {
	if err := ident.ValidNodeID(c.NodeID); err != nil {
		return nil, fmt.Errorf("discovery: config: %w", err)
	}
	if err := validVersion(c.Version); err != nil {
		return nil, fmt.Errorf("discovery: config: %w", err)
	}
	fp, err := parseKeyFP(c.KeyFP)
	if err != nil {
		return nil, fmt.Errorf("discovery: config: %w", err)
	}
	c.KeyFP = fp
	if c.PeerPort < 1 || c.PeerPort > 65535 {
		return nil, fmt.Errorf("discovery: config: peer port %d: want 1..65535", c.PeerPort)
	}
	switch {
	case c.BrowseInterval == 0:
		c.BrowseInterval = DefaultBrowseInterval
	case c.BrowseInterval < minBrowseInterval:
		return nil, fmt.Errorf("discovery: config: browse interval %v: want at least %v", c.BrowseInterval, minBrowseInterval)
	}
	var targets []staticTarget
	seen := map[string]bool{}
	for _, e := range c.Static {
		t, err := parseStatic(e)
		if err != nil {
			return nil, fmt.Errorf("discovery: config: %w", err)
		}
		if !seen[e] {
			seen[e] = true
			targets = append(targets, t)
		}
	}
	return targets, nil
}

// parseStatic validates a host:port entry without resolving it: names are
// resolved every round, so a peer whose address changes is still found.
func parseStatic(entry string) (staticTarget, error) {
	host, portStr, err := net.SplitHostPort(entry)
	if err != nil {
		return staticTarget{}, fmt.Errorf("static peer %q: want host:port: %w", entry, err)
	}
	if host == "" {
		return staticTarget{}, fmt.Errorf("static peer %q: empty host, want host:port", entry)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return staticTarget{}, fmt.Errorf("static peer %q: port %q: want 1..65535", entry, portStr)
	}
	t := staticTarget{entry: entry, host: host, port: uint16(port)}
	if ip, err := netip.ParseAddr(host); err == nil {
		t.ip = ip.Unmap()
	}
	return t, nil
}
