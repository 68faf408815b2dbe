package discovery

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// maxResolveTime bounds one static entry's name lookup, so that a dead DNS
// server delays only the static source, and only for a while.
const maxResolveTime = 5 * time.Second

// staticRound resolves every static entry. An entry that fails to resolve
// keeps its last addresses until they are staleAfter old: a DNS hiccup
// must not drop a peer the cluster is talking to.
func (d *Discovery) staticRound(ctx context.Context) {
	self := d.selfAddrs()
	for _, t := range d.static {
		addrs, err := d.resolve(ctx, t)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		d.mu.Lock()
		if err != nil {
			if d.staticErrs[t.entry] == nil {
				d.log.Warn("static peer does not resolve", "peer", t.entry, "err", err)
			}
			d.staticErrs[t.entry] = err
			if p, ok := d.staticPeers[t.entry]; ok && now.Sub(p.LastSeen) > d.staleAfter {
				delete(d.staticPeers, t.entry)
			}
			d.mu.Unlock()
			continue
		}
		delete(d.staticErrs, t.entry)
		// The same --peer list is often given to every agent, us included.
		addrs = slices.DeleteFunc(addrs, func(a netip.AddrPort) bool {
			return int(a.Port()) == d.cfg.PeerPort && (a.Addr().IsLoopback() || a.Addr().IsUnspecified() || self[a.Addr()])
		})
		if len(addrs) == 0 {
			delete(d.staticPeers, t.entry)
		} else {
			if _, ok := d.staticPeers[t.entry]; !ok {
				d.log.Info("peer found", "peer", t.entry, "addrs", addrs, "source", SourceStatic)
			}
			d.staticPeers[t.entry] = Peer{Addrs: addrs, Source: SourceStatic, LastSeen: now}
		}
		d.mu.Unlock()
	}
}

// resolve returns a static entry's addresses, IPv4 first.
func (d *Discovery) resolve(ctx context.Context, t staticTarget) ([]netip.AddrPort, error) {
	if t.ip.IsValid() {
		return []netip.AddrPort{netip.AddrPortFrom(t.ip, t.port)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, maxResolveTime)
	defer cancel()
	ips, err := d.hooks.lookup(ctx, t.host)
	if err != nil {
		return nil, fmt.Errorf("discovery: static peer %q: %w", t.entry, err)
	}
	var out []netip.AddrPort
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip.Unmap(), t.port)
		if !slices.Contains(out, ap) {
			out = append(out, ap)
		}
	}
	slices.SortStableFunc(out, func(a, b netip.AddrPort) int {
		return boolInt(a.Addr().Is6()) - boolInt(b.Addr().Is6())
	})
	return out, nil
}

// selfAddrs is every address of this machine's interfaces.
func (d *Discovery) selfAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	as, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range as {
		if pfx, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(pfx.IP); ok {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
