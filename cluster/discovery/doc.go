// Package discovery is how Orrery agents find each other. Three sources
// feed one peer list, each enabled by Config:
//
//   - mDNS: advertise _orrery._tcp (instance = node id) with the TXT
//     records id, port, v and kfp, and browse for it every BrowseInterval
//     (github.com/hashicorp/mdns).
//   - static: host:port entries (--peer) for VPNs and VLANs that drop
//     multicast, re-resolved every round. Their node id is unknown until
//     the cluster layer connects.
//   - loopback: several agents on one machine, no multicast: each writes
//     <dir>/<nodeid>.json and lists the directory every round.
//
// Peers are returned only when they advertise our cluster-key fingerprint;
// the others are kept apart (Mismatched) so that Diagnose can explain why a
// cluster does not form. Diagnose never guesses: every problem it reports
// comes from something observed (an interface list, a failed send, a
// dial result the cluster layer reported through ReportDial).
//
// The package imports nothing from the rest of Orrery.
package discovery
