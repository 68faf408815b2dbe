package discovery

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
)

// Problem codes. Each is reported only from an observed fact.
const (
	// CodeNoMulticastInterface: mDNS is on and no interface is up, not
	// loopback and multicast-capable.
	CodeNoMulticastInterface = "no-multicast-interface"
	// CodeMulticastSendRefused: the last mDNS query failed with a
	// permission or no-route error.
	CodeMulticastSendRefused = "multicast-send-refused"
	// CodeKeyMismatch: a peer advertises (or its dial proved) another
	// cluster key.
	CodeKeyMismatch = "key-mismatch"
	// CodePeerUnreachable: a peer was found but every dial the cluster
	// layer reported failed.
	CodePeerUnreachable = "peer-unreachable"
	// CodeNothingFound: every enabled source ran, nothing was found, and
	// none of the above explains it.
	CodeNothingFound = "nothing-found"
)

// Report is what GET /state/discovery and `orrery doctor` show.
type Report struct {
	Mode                Mode      `json:"mode"`
	PeersFound          int       `json:"peersFound"`
	MulticastInterfaces []string  `json:"multicastInterfaces"`
	Problems            []Problem `json:"problems"`
}

// Mode says which sources are enabled.
type Mode struct {
	MDNS     bool `json:"mdns"`
	Loopback bool `json:"loopback"`
	Static   bool `json:"static"`
}

// Problem is one reason peers may be missing, with what to do about it.
type Problem struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

// Diagnose explains the current state. It does not block on the network:
// it lists interfaces and reads what the sources recorded.
func (d *Discovery) Diagnose() Report {
	r := Report{
		Mode:                Mode{MDNS: d.cfg.MDNS, Loopback: d.cfg.LoopbackDir != "", Static: len(d.static) > 0},
		MulticastInterfaces: []string{},
		Problems:            []Problem{},
	}
	ifs, ifErr := d.hooks.interfaces()
	for _, ifi := range multicastInterfaces(ifs) {
		r.MulticastInterfaces = append(r.MulticastInterfaces, ifi.Name)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	peers := d.peersLocked()
	r.PeersFound = len(peers)
	add := func(code, msg, hint string) {
		r.Problems = append(r.Problems, Problem{Code: code, Message: msg, Hint: hint})
	}

	// An interface list that could not be read proves nothing.
	if d.cfg.MDNS && ifErr == nil && len(r.MulticastInterfaces) == 0 {
		add(CodeNoMulticastInterface,
			"mDNS is on but no network interface is up with multicast (only loopback or none)",
			"Connect this machine to the network the other agents are on (Wi-Fi or Ethernet), or add --peer host:port for each of them.")
	}
	if d.cfg.MDNS && d.queryErr != nil && sendRefused(d.queryErr) {
		add(CodeMulticastSendRefused,
			fmt.Sprintf("the system refused to send the mDNS query or join the mDNS group: %v", d.queryErr),
			"On macOS, allow Orrery in System Settings → Privacy & Security → Local Network, then restart it. "+
				"Elsewhere, check that a firewall lets UDP 5353 to 224.0.0.251 out and that a route covers multicast (a default route does).")
	}
	for _, p := range d.mismatchedLocked() {
		var msg string
		if p.KeyFP != "" {
			msg = fmt.Sprintf("%s advertises cluster-key fingerprint %s, ours is %s", describe(p), p.KeyFP, d.cfg.KeyFP)
		} else {
			msg = fmt.Sprintf("%s failed the cluster-key check when dialled: %s", describe(p), d.dialErrLocked(p.Addrs))
		}
		add(CodeKeyMismatch, msg,
			"The machines hold different cluster keys: run `orrery key show` on one Mac and `orrery key set <key>` with that key on the other.")
	}
	for _, p := range peers {
		var failed []string
		reachable := false
		for _, a := range p.Addrs {
			res, ok := d.dials[a.String()]
			switch {
			case !ok || res.keyMismatch:
			case res.err == "":
				reachable = true
			default:
				failed = append(failed, fmt.Sprintf("%s: %s", a, res.err))
			}
		}
		if reachable || len(failed) == 0 {
			continue
		}
		add(CodePeerUnreachable,
			fmt.Sprintf("%s was found but does not answer: %s", describe(p), strings.Join(failed, "; ")),
			fmt.Sprintf("Check that the agent there is running and that its firewall (macOS: System Settings → Network → Firewall) "+
				"and any VPN/VLAN rules allow incoming TCP on port %d.", p.Addrs[0].Port()))
	}
	if len(peers) == 0 && len(r.Problems) == 0 && d.allRanLocked() {
		add(CodeNothingFound, d.nothingFoundLocked(), d.nothingFoundHint())
	}
	return r
}

// allRanLocked reports whether every enabled source finished a round:
// before that, "nothing found" would be a guess.
func (d *Discovery) allRanLocked() bool {
	return (!d.cfg.MDNS || d.rounds[SourceMDNS] > 0) &&
		(len(d.static) == 0 || d.rounds[SourceStatic] > 0) &&
		(d.cfg.LoopbackDir == "" || d.rounds[SourceLoopback] > 0)
}

func (d *Discovery) nothingFoundLocked() string {
	var facts []string
	if d.cfg.MDNS {
		f := fmt.Sprintf("mDNS browsing for %s found no other agent", mdnsService)
		if d.queryErr != nil {
			f += fmt.Sprintf(" (last query failed: %v)", d.queryErr)
		}
		if d.advertErr != nil {
			f += fmt.Sprintf(" (advertising failed: %v)", d.advertErr)
		}
		facts = append(facts, f)
	}
	for _, t := range d.static {
		if err := d.staticErrs[t.entry]; err != nil {
			facts = append(facts, fmt.Sprintf("static peer %s does not resolve: %v", t.entry, err))
		} else {
			facts = append(facts, fmt.Sprintf("static peer %s is this agent itself", t.entry))
		}
	}
	if d.cfg.LoopbackDir != "" {
		facts = append(facts, fmt.Sprintf("no other agent's record in loopback dir %s", d.cfg.LoopbackDir))
	}
	if len(facts) == 0 {
		return "no discovery source is enabled (mDNS, static peers, loopback)"
	}
	return "no peers found: " + strings.Join(facts, "; ")
}

func (d *Discovery) nothingFoundHint() string {
	hint := "Start an agent on another machine, or add --peer host:port for each other agent."
	if d.cfg.MDNS {
		hint += " If agents run on different VLANs or over a VPN, multicast (mDNS, UDP 5353) usually does not cross: use --peer there."
	}
	if d.cfg.LoopbackDir != "" {
		hint += fmt.Sprintf(" For agents on this machine, start them with the same loopback dir (%s).", d.cfg.LoopbackDir)
	}
	return hint
}

// dialErrLocked returns the recorded dial error of the first address that
// has one.
func (d *Discovery) dialErrLocked(addrs []netip.AddrPort) string {
	for _, a := range addrs {
		if r, ok := d.dials[a.String()]; ok && r.err != "" {
			return r.err
		}
	}
	return "(no error recorded)"
}

// sendRefused reports whether an mDNS query failed for lack of permission
// or route. macOS without the Local Network permission fails sends to the
// group with EHOSTUNREACH ("no route to host"); Linux without a multicast
// route gives ENETUNREACH on send and ENODEV ("no such device") when the
// library joins the group (checked in network namespaces); firewalls give
// EPERM/EACCES. Text is matched too because the library flattens its bind
// errors to strings (their cause is in the log lines libLog appends).
func sendRefused(err error) bool {
	for _, e := range []error{syscall.EPERM, syscall.EACCES, syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENODEV} {
		if errors.Is(err, e) {
			return true
		}
	}
	msg := strings.ToLower(err.Error())
	return slices.ContainsFunc([]string{"permission denied", "operation not permitted", "no route to host",
		"network is unreachable", "no such device"},
		func(s string) bool { return strings.Contains(msg, s) })
}
