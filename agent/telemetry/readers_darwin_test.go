package telemetry

// The darwin readers against a real Mac (macos.yml runs them; no Mac has
// yet: docs/development.md). Each asserts what every Apple Silicon Mac has.

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestDarwinSensorsRead(t *testing.T) {
	if runtime.GOARCH != "arm64" {
		t.Skip("IOReport's GPU and energy channels are Apple Silicon's")
	}
	s := newSensorSource(nil)
	defer s.Close()
	// The GPU's residency and the energy counters are deltas: the first
	// read primes them.
	if _, err := s.Read(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	r, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUUsage == nil || *r.GPUUsage < 0 || *r.GPUUsage > 1 {
		t.Errorf("GPU usage %v, want a residency in 0..1 (IOReport %q)", r.GPUUsage, gpuStatsGroup)
	}
	if r.Temp == nil || *r.Temp < 5 || *r.Temp > 115 {
		t.Errorf("temperature %v °C from %q, want a chip's (5..115)", r.Temp, r.TempSource)
	}
	if r.SysPower == nil || *r.SysPower <= 0 || *r.SysPower > 500 {
		t.Errorf("power %v W from %q, want a Mac's draw (0..500 W)", r.SysPower, r.PowerSource)
	}
	if !strings.HasPrefix(r.PowerSource, "smc:") && !strings.HasPrefix(r.PowerSource, "ioreport") {
		t.Errorf("power source %q, want the SMC or IOReport", r.PowerSource)
	}
}

func TestDarwinLinks(t *testing.T) {
	p := newLinkProber()
	// Every Mac has en0, its built-in Ethernet or Wi-Fi, which
	// SystemConfiguration names.
	if k := p.Probe("en0").Kind; k != KindEthernet && k != KindWiFi {
		t.Errorf("en0 is of kind %q, want %q or %q", k, KindEthernet, KindWiFi)
	}
	// A VPN's tunnel is known by its name alone.
	if k := p.Probe("utun9").Kind; k != KindVPN {
		t.Errorf("utun9 is of kind %q, want %q", k, KindVPN)
	}
}

func TestDarwinCPULayout(t *testing.T) {
	if runtime.GOARCH != "arm64" {
		t.Skip("Intel Macs have no performance levels")
	}
	l := cpuLayout()
	if n := len(l.Perf) + len(l.Eff); n != runtime.NumCPU() {
		t.Errorf("%d performance and %d efficiency cores, but %d CPUs", len(l.Perf), len(l.Eff), runtime.NumCPU())
	}
	if len(l.Perf) == 0 || len(l.Eff) == 0 {
		t.Errorf("Apple Silicon has both kinds of cores: %+v", l)
	}
}
