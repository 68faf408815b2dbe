package discovery

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/mdns"
)

const (
	mdnsService = "_orrery._tcp"
	mdnsDomain  = "local"
	// mdnsSuffix ends the instance names of our service. The library's
	// client hands over any complete entry it overhears, whatever the
	// service (its TODO: "Check that response corresponds to
	// serviceAddr?"), so entries are filtered on it.
	mdnsSuffix = "." + mdnsService + "." + mdnsDomain + "."
	// maxQueryTimeout bounds one browse: the library's responder answers
	// at once, and the query cannot end early (it waits out its timeout
	// even after its context is cancelled).
	maxQueryTimeout = time.Second
)

// mdnsState is owned by the mDNS goroutine.
type mdnsState struct {
	server  shutdowner
	advKey  string // the advertised address set, to restart on change
	ipv6Off bool   // IPv6 multicast failed once; browse on IPv4 only
}

func (d *Discovery) runMDNS(ctx context.Context) {
	var st mdnsState
	defer func() {
		if st.server != nil {
			st.server.Shutdown()
		}
	}()
	d.every(ctx, SourceMDNS, func(ctx context.Context) {
		d.advertise(&st)
		d.browse(ctx, &st)
	})
}

// advertise (re)starts the responder when the addresses to advertise
// changed, e.g. after a Wi-Fi join, since the library's service holds a
// fixed address list.
func (d *Discovery) advertise(st *mdnsState) {
	ips := d.advertiseIPs()
	key := fmt.Sprint(ips)
	if st.server != nil && key == st.advKey {
		return
	}
	if st.server != nil {
		st.server.Shutdown()
		st.server, st.advKey = nil, ""
	}
	if len(ips) == 0 {
		d.setAdvertErr(fmt.Errorf("discovery: mdns advertise: no address on an up, multicast interface"))
		return
	}
	d.startResponder(st, ips, key)
}

func (d *Discovery) startResponder(st *mdnsState, ips []net.IP, key string) {
	txt := TXT{NodeID: d.cfg.NodeID, Port: d.cfg.PeerPort, Version: d.cfg.Version, KeyFP: d.cfg.KeyFP}
	instance := instanceName(d.cfg.NodeID)
	// Our own host name, not the machine's: Bonjour/avahi own
	// <hostname>.local and the library's responder does no conflict probing.
	host := instance + ".orrery." + mdnsDomain + "."
	svc, err := mdns.NewMDNSService(instance, mdnsService, mdnsDomain+".", host, d.cfg.PeerPort, ips, txt.Fields())
	if err != nil {
		d.setAdvertErr(fmt.Errorf("discovery: mdns service: %w", err))
		return
	}
	srv, err := d.hooks.serve(&mdns.Config{Zone: svc, Logger: newLibLog(d.log, "responder").logger()})
	if err != nil {
		d.setAdvertErr(fmt.Errorf("discovery: mdns advertise: %w", err))
		return
	}
	st.server, st.advKey = srv, key
	d.setAdvertErr(nil)
	d.log.Info("advertising", "service", mdnsService, "instance", instance, "port", d.cfg.PeerPort, "ips", key)
}

// browse runs one query and records what it found.
func (d *Discovery) browse(ctx context.Context, st *mdnsState) {
	// The library sends on Entries without blocking and keeps mutating an
	// entry after sending it, so a goroutine only collects the pointers and
	// their fields are read once the query has returned.
	entries := make(chan *mdns.ServiceEntry, 64)
	var got []*mdns.ServiceEntry
	var wg sync.WaitGroup
	wg.Go(func() {
		for e := range entries {
			got = append(got, e)
		}
	})
	lib := newLibLog(d.log, "query")
	params := &mdns.QueryParam{
		Service:     mdnsService,
		Domain:      mdnsDomain,
		Timeout:     d.queryTimeout(),
		Entries:     entries,
		DisableIPv6: st.ipv6Off,
		Logger:      lib.logger(),
	}
	err := d.hooks.query(ctx, params)
	if err != nil && !st.ipv6Off && ctx.Err() == nil {
		// The library returns the first failed send, IPv4 or IPv6. Many
		// networks have IPv4 multicast and no IPv6 route: retry on IPv4
		// alone, and stay there if that works.
		params.DisableIPv6 = true
		if err2 := d.hooks.query(ctx, params); err2 == nil {
			st.ipv6Off = true
			d.log.Info("mdns over IPv6 failed, browsing over IPv4 only", "err", err)
			err = nil
		} else {
			err = fmt.Errorf("%w; over IPv4 alone: %w", err, err2)
		}
	}
	close(entries)
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: a query cut short says nothing about the network
	}
	if err != nil {
		err = fmt.Errorf("discovery: mdns query: %w%s", err, lib.detail())
	}
	d.setQueryErr(err)

	now := time.Now()
	var peers []Peer
	for _, e := range got {
		if p, ok := d.peerFromEntry(e, now); ok {
			peers = append(peers, p)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range peers {
		if old, ok := d.mdnsPeers[p.NodeID]; ok && old.LastSeen.Equal(now) {
			p = mergePeers(old, p) // answered over IPv4 and IPv6 alike
		} else if !ok {
			d.log.Info("peer found", "node", p.NodeID, "addrs", p.Addrs, "source", SourceMDNS, "keyMatch", p.KeyFP == d.cfg.KeyFP)
		}
		d.mdnsPeers[p.NodeID] = p
	}
}

func (d *Discovery) queryTimeout() time.Duration {
	return min(d.cfg.BrowseInterval/2, maxQueryTimeout)
}

// peerFromEntry turns a complete library entry into a Peer, or reports
// false for entries that are not another valid Orrery agent.
func (d *Discovery) peerFromEntry(e *mdns.ServiceEntry, now time.Time) (Peer, bool) {
	if !strings.HasSuffix(e.Name, mdnsSuffix) {
		return Peer{}, false
	}
	txt, err := ParseTXT(e.InfoFields)
	if err != nil {
		d.log.Debug("ignoring mdns entry", "name", e.Name, "err", err)
		return Peer{}, false
	}
	if txt.NodeID == d.cfg.NodeID {
		return Peer{}, false
	}
	port := uint16(txt.Port)
	var addrs []netip.AddrPort
	if ip, ok := netip.AddrFromSlice(e.AddrV4.To4()); ok && !ip.IsUnspecified() {
		addrs = append(addrs, netip.AddrPortFrom(ip, port))
	}
	if e.AddrV6IPAddr != nil {
		if ip, ok := netip.AddrFromSlice(e.AddrV6IPAddr.IP.To16()); ok && !ip.IsUnspecified() {
			ip = ip.Unmap()
			if ip.Is6() && e.AddrV6IPAddr.Zone != "" {
				ip = ip.WithZone(e.AddrV6IPAddr.Zone)
			}
			// A link-local address without a zone cannot be dialled: the
			// library knows the zone only when the answer came over IPv6.
			if !(ip.IsLinkLocalUnicast() && ip.Zone() == "") {
				addrs = append(addrs, netip.AddrPortFrom(ip, port))
			}
		}
	}
	if len(addrs) == 0 {
		d.log.Debug("ignoring mdns entry without a usable address", "name", e.Name)
		return Peer{}, false
	}
	return Peer{
		NodeID: txt.NodeID, Addrs: addrs, Version: txt.Version, KeyFP: txt.KeyFP,
		Source: SourceMDNS, LastSeen: now,
	}, true
}

// instanceName is the DNS label for our instance: the node id, unless it
// is 64 bytes, one more than a DNS label holds. The TXT id carries the
// full id either way.
func instanceName(nodeID string) string {
	if len(nodeID) <= 63 {
		return nodeID
	}
	return nodeID[:63]
}

// advertiseIPs lists the addresses to put in A/AAAA records: those of the
// interface the kernel sends mDNS through, which is where the library's
// responder listens (it joins the group on the default interface).
func (d *Discovery) advertiseIPs() []net.IP {
	ifs, err := d.hooks.interfaces()
	if err != nil {
		return nil
	}
	ifs = multicastInterfaces(ifs)
	primary := primaryMulticastV4()
	var chosen []netip.Addr
	for _, ifi := range ifs {
		addrs := interfaceAddrs(ifi)
		if len(addrs) == 0 {
			continue
		}
		if chosen == nil || (primary.IsValid() && slices.Contains(addrs, primary)) {
			chosen = addrs
		}
	}
	// The library's client keeps only the last A and the last AAAA record
	// of an answer. So: the primary IPv4 last, and a global IPv6 after
	// link-local ones (a link-local one is unusable when the answer came
	// over IPv4, which is what carries its zone).
	rank := func(a netip.Addr) int {
		switch {
		case a.Is4() && a == primary:
			return 1
		case a.Is4():
			return 0
		case a.IsLinkLocalUnicast():
			return 2
		default:
			return 3
		}
	}
	slices.SortStableFunc(chosen, func(a, b netip.Addr) int { return rank(a) - rank(b) })
	var ips []net.IP
	for _, a := range chosen {
		ips = append(ips, net.IP(a.AsSlice()))
	}
	return ips
}

// primaryMulticastV4 is the source address the kernel would use to send
// to the mDNS group. Connecting a UDP socket sends nothing.
func primaryMulticastV4() netip.Addr {
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251), Port: 5353})
	if err != nil {
		return netip.Addr{}
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
}

// interfaceAddrs lists an interface's unicast addresses, loopback excluded.
func interfaceAddrs(ifi net.Interface) []netip.Addr {
	as, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		pfx, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(pfx.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsUnspecified() || ip.IsMulticast() {
			continue
		}
		out = append(out, ip)
	}
	return out
}

// multicastInterfaces keeps the up, non-loopback interfaces with the
// MULTICAST flag: the ones mDNS can use.
func multicastInterfaces(ifs []net.Interface) []net.Interface {
	var out []net.Interface
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagLoopback == 0 && ifi.Flags&net.FlagMulticast != 0 {
			out = append(out, ifi)
		}
	}
	return out
}

func (d *Discovery) setQueryErr(err error) {
	d.mu.Lock()
	changed := fmt.Sprint(err) != fmt.Sprint(d.queryErr)
	d.queryErr = err
	d.mu.Unlock()
	if changed && err != nil {
		d.log.Warn("mdns query failed", "err", err)
	} else if changed {
		d.log.Info("mdns query works again")
	}
}

func (d *Discovery) setAdvertErr(err error) {
	d.mu.Lock()
	changed := fmt.Sprint(err) != fmt.Sprint(d.advertErr)
	d.advertErr = err
	d.mu.Unlock()
	if changed && err != nil {
		d.log.Warn("mdns advertise failed", "err", err)
	}
}

// libLog adapts the library's *log.Logger to slog at debug level (it logs
// every unreadable packet it overhears) and keeps the first error lines:
// some library errors, such as "failed to bind to any multicast udp
// port", carry their cause only in a log line.
type libLog struct {
	log *slog.Logger
	mu  sync.Mutex // guards errs
	// errs holds the first few distinct "[ERR]" lines.
	errs []string
}

func newLibLog(l *slog.Logger, part string) *libLog {
	return &libLog{log: l.With("lib", "hashicorp/mdns", "part", part)}
}

func (l *libLog) logger() *log.Logger { return log.New(l, "", 0) }

func (l *libLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	l.log.Debug("mdns library", "line", line)
	if strings.Contains(line, "[ERR]") {
		l.mu.Lock()
		if len(l.errs) < 4 && !slices.Contains(l.errs, line) {
			l.errs = append(l.errs, line)
		}
		l.mu.Unlock()
	}
	return len(p), nil
}

// detail returns the error lines logged so far, ready to append to an
// error message.
func (l *libLog) detail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) == 0 {
		return ""
	}
	return " (" + strings.Join(l.errs, "; ") + ")"
}
