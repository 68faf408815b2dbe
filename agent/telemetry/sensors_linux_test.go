package telemetry

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

func sensorsAt(root string, now *time.Time) *linuxSensors {
	return &linuxSensors{root: root, now: func() time.Time { return *now }, log: slog.New(slog.DiscardHandler)}
}

func TestHwmonPicksPackageTemp(t *testing.T) {
	now := time.Unix(0, 0)
	for name, tc := range map[string]struct {
		files   map[string]string
		want    *float64
		wantSrc string
	}{
		"coretemp package": {map[string]string{
			"sys/class/hwmon/hwmon0/name": "nvme", "sys/class/hwmon/hwmon0/temp1_input": "80000",
			"sys/class/hwmon/hwmon1/name": "coretemp", "sys/class/hwmon/hwmon1/temp1_label": "Package id 0",
			"sys/class/hwmon/hwmon1/temp1_input": "55000", "sys/class/hwmon/hwmon1/temp2_label": "Core 0",
			"sys/class/hwmon/hwmon1/temp2_input": "61000",
		}, f(55), "hwmon:coretemp"},
		"k10temp tctl": {map[string]string{
			"sys/class/hwmon/hwmon3/name": "k10temp", "sys/class/hwmon/hwmon3/temp1_label": "Tctl",
			"sys/class/hwmon/hwmon3/temp1_input": "47250",
		}, f(47.25), "hwmon:k10temp"},
		"cpu chip without package label": {map[string]string{
			"sys/class/hwmon/hwmon0/name": "cpu_thermal", "sys/class/hwmon/hwmon0/temp1_input": "42000",
			"sys/class/hwmon/hwmon0/temp2_input": "44000",
		}, f(44), "hwmon:cpu_thermal"},
		"only other sensors: hottest": {map[string]string{
			"sys/class/hwmon/hwmon0/name": "nvme", "sys/class/hwmon/hwmon0/temp1_input": "38000",
			"sys/class/hwmon/hwmon1/name": "acpitz", "sys/class/hwmon/hwmon1/temp1_input": "27800",
			"sys/class/hwmon/hwmon1/temp2_input": "-273000", // bogus: ignored
		}, f(38), "hwmon:nvme"},
		"no hwmon": {map[string]string{"etc/x": ""}, nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := sensorsAt(testutil.WriteTree(t, tc.files), &now).Read()
			if err != nil {
				t.Fatal(err)
			}
			if !sameFloat(r.Temp, tc.want) || r.TempSource != tc.wantSrc {
				t.Errorf("temp = %v from %q, want %v from %q", ptr(r.Temp), r.TempSource, ptr(tc.want), tc.wantSrc)
			}
			if r.GPUUsage != nil {
				t.Error("gpuUsage made up on Linux")
			}
		})
	}
}

func TestRAPLPower(t *testing.T) {
	root := testutil.WriteTree(t, map[string]string{
		"sys/class/powercap/intel-rapl:0/name":                "package-0",
		"sys/class/powercap/intel-rapl:0/energy_uj":           "1000000",
		"sys/class/powercap/intel-rapl:0/max_energy_range_uj": "30000000",
		"sys/class/powercap/intel-rapl:0:0/name":              "core", // subzone: not summed
		"sys/class/powercap/intel-rapl:0:0/energy_uj":         "5",
		"sys/class/powercap/intel-rapl:1/name":                "package-1",
		"sys/class/powercap/intel-rapl:1/energy_uj":           "0",
		"sys/class/powercap/intel-rapl:1/max_energy_range_uj": "10000000",
		"sys/class/powercap/intel-rapl:2/name":                "psys", // not a package
		"sys/class/powercap/intel-rapl:2/energy_uj":           "0",
	})
	now := time.Unix(100, 0)
	s := sensorsAt(root, &now)
	set := func(dom, v string) {
		os.WriteFile(filepath.Join(root, "sys/class/powercap", dom, "energy_uj"), []byte(v), 0o644)
	}
	r, _ := s.Read()
	if r.SysPower != nil {
		t.Fatalf("first read has power %v without a previous sample", *r.SysPower)
	}
	now = now.Add(2 * time.Second)
	set("intel-rapl:0", "21000000")                                                // +20 J
	set("intel-rapl:1", "10000000")                                                // +10 J
	if r, _ = s.Read(); !sameFloat(r.SysPower, f(15)) || r.PowerSource != "rapl" { // 30 J / 2 s
		t.Errorf("power = %v (%q), want 15 W from rapl", ptr(r.SysPower), r.PowerSource)
	}
	now = now.Add(time.Second)
	set("intel-rapl:0", "1000000")  // wrapped at 30e6: +10 J
	set("intel-rapl:1", "11000000") // +1 J
	if r, _ = s.Read(); !sameFloat(r.SysPower, f(11)) {
		t.Errorf("power after wrap = %v, want 11 W", ptr(r.SysPower))
	}
	now = now.Add(time.Second)
	set("intel-rapl:1", "0") // reset beyond range: no number this time
	if r, _ = s.Read(); r.SysPower != nil {
		t.Errorf("power after a counter reset = %v, want null", *r.SysPower)
	}
	now = now.Add(time.Second)
	set("intel-rapl:0", "3000000") // +2 J
	set("intel-rapl:1", "1000000") // +1 J
	if r, _ = s.Read(); !sameFloat(r.SysPower, f(3)) {
		t.Errorf("power after recovery = %v, want 3 W", ptr(r.SysPower))
	}
}

func TestRAPLUnreadableIsNull(t *testing.T) {
	root := testutil.WriteTree(t, map[string]string{
		"sys/class/powercap/intel-rapl:0/name": "package-0",
		// energy_uj missing, as when the kernel hides it from non-root
	})
	now := time.Unix(100, 0)
	s := sensorsAt(root, &now)
	for i := 0; i < 3; i++ {
		now = now.Add(time.Second)
		if r, _ := s.Read(); r.SysPower != nil || r.PowerSource != "" {
			t.Fatalf("read %d: power = %v (%q), want null", i, *r.SysPower, r.PowerSource)
		}
	}
}

func f(v float64) *float64 { return &v }

func sameFloat(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	d := *a - *b
	return d < 1e-9 && d > -1e-9
}
