package identity

import (
	"testing"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

func TestProbeLinuxFixture(t *testing.T) {
	root := testutil.WriteTree(t, map[string]string{
		"etc/machine-id":                "abc123\n",
		"etc/hostname":                  "rack-7\n",
		"etc/os-release":                "NAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\n# comment\n",
		"proc/sys/kernel/osrelease":     "6.1.0-18-amd64\n",
		"sys/class/dmi/id/product_name": "ThinkStation P620\n",
		"proc/cpuinfo":                  "processor\t: 0\nmodel name\t: 12th Gen Intel(R) Core(TM) i9-12900K\n",
		"sys/devices/cpu_core/cpus":     "0-15\n",
		"sys/devices/cpu_atom/cpus":     "16-23\n",
	})
	h, err := probeLinux(root)
	if err != nil {
		t.Fatal(err)
	}
	want := hostInfo{Fingerprint: "abc123", FriendlyName: "rack-7", ModelID: "ThinkStation P620",
		Chip: "12th Gen Intel(R) Core(TM) i9-12900K", OSName: "Debian GNU/Linux", OSVersion: "12", OSBuild: "6.1.0-18-amd64"}
	got := h
	got.PerfCores, got.EffCores = nil, nil
	if got != want {
		t.Errorf("probe =\n%+v\nwant\n%+v", got, want)
	}
	if h.PerfCores == nil || *h.PerfCores != 16 || h.EffCores == nil || *h.EffCores != 8 {
		t.Errorf("cores = %v/%v, want 16/8", h.PerfCores, h.EffCores)
	}
}

func TestProbeLinuxMissingFieldsStayEmpty(t *testing.T) {
	root := testutil.WriteTree(t, map[string]string{"var/lib/dbus/machine-id": "dbus-id\n"})
	h, err := probeLinux(root)
	if err != nil {
		t.Fatal(err)
	}
	if h.Fingerprint != "dbus-id" {
		t.Errorf("fingerprint fallback = %q", h.Fingerprint)
	}
	if h.PerfCores != nil || h.EffCores != nil || h.ModelID != "" || h.Chip != "" {
		t.Errorf("made-up values: %+v", h)
	}
	if _, err := probeLinux(t.TempDir()); err == nil {
		t.Error("an empty tree probed without error")
	}
}

func TestCPUListLen(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-7": 8, "0-3,8,10-11": 7} {
		if got, ok := cpuListLen(in); !ok || got != want {
			t.Errorf("cpuListLen(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "x", "3-1", "1-"} {
		if _, ok := cpuListLen(bad); ok {
			t.Errorf("cpuListLen(%q) accepted", bad)
		}
	}
}
