package telemetry

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sysfsLinks classifies interfaces from /sys/class/net.
type sysfsLinks struct {
	root string // "/sys/class/net" in production
}

func newLinkProber() linkProber { return sysfsLinks{root: "/sys/class/net"} }

func (s sysfsLinks) Probe(name string) linkInfo {
	dir := filepath.Join(s.root, name)
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(dir, p)); return err == nil }
	li := linkInfo{Kind: KindUnknown}
	driver := ""
	if t, err := os.Readlink(filepath.Join(dir, "device", "driver")); err == nil {
		driver = filepath.Base(t)
	}
	switch {
	case exists("wireless") || exists("phy80211"):
		li.Kind = KindWiFi
	case exists("bridge"):
		li.Kind = KindBridge
	case exists("tun_flags") || hasPrefix(name, "wg", "tun", "tap", "tailscale", "ppp", "ipsec", "zt"):
		li.Kind = KindVPN
	case driver == "thunderbolt-net" || driver == "thunderbolt_net" || hasPrefix(name, "thunderbolt"):
		li.Kind = KindThunderbolt
	case !exists("device"):
		// No backing device: veth, dummy, docker, ifb and friends.
		li.Kind = KindVirtual
	default:
		li.Kind = KindEthernet
	}
	// speed is -1 or unreadable (EINVAL) when the link is down or virtual.
	if b, err := os.ReadFile(filepath.Join(dir, "speed")); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
			li.SpeedMbps = &v
		}
	}
	return li
}

func hasPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
