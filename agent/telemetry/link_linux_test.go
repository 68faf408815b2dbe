package telemetry

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSysfsLinkKinds(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, files map[string]string, driver string) {
		dir := filepath.Join(root, name)
		os.MkdirAll(dir, 0o755)
		for p, c := range files {
			os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
			os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644)
		}
		if driver != "" {
			drv := filepath.Join(root, "drivers", driver)
			os.MkdirAll(drv, 0o755)
			os.MkdirAll(filepath.Join(dir, "device"), 0o755)
			os.Symlink(drv, filepath.Join(dir, "device", "driver"))
		}
	}
	mk("eth0", map[string]string{"device/vendor": "0x8086", "speed": "1000\n"}, "e1000e")
	mk("eth1", map[string]string{"device/vendor": "x", "speed": "-1\n"}, "igb")
	mk("wlan0", map[string]string{"device/x": "", "phy80211/name": "phy0"}, "")
	mk("br0", map[string]string{"bridge/stp_state": "0"}, "")
	mk("tun0", map[string]string{"tun_flags": "0x1001"}, "")
	mk("wg0", nil, "")
	mk("thunderbolt0", map[string]string{"speed": "20000"}, "thunderbolt-net")
	mk("veth1", nil, "")

	p := sysfsLinks{root: root}
	for name, want := range map[string]struct {
		kind  string
		speed int64
	}{
		"eth0": {KindEthernet, 1000}, "eth1": {KindEthernet, 0}, "wlan0": {KindWiFi, 0},
		"br0": {KindBridge, 0}, "tun0": {KindVPN, 0}, "wg0": {KindVPN, 0},
		"thunderbolt0": {KindThunderbolt, 20000}, "veth1": {KindVirtual, 0},
	} {
		li := p.Probe(name)
		if li.Kind != want.kind {
			t.Errorf("%s: kind %s, want %s", name, li.Kind, want.kind)
		}
		switch {
		case want.speed == 0 && li.SpeedMbps != nil:
			t.Errorf("%s: speed %d, want null", name, *li.SpeedMbps)
		case want.speed != 0 && (li.SpeedMbps == nil || *li.SpeedMbps != want.speed):
			t.Errorf("%s: speed %v, want %d", name, li.SpeedMbps, want.speed)
		}
	}
}
