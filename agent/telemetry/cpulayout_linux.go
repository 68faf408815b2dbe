package telemetry

import (
	"os"
	"strconv"
	"strings"
)

// cpuLayout reads hybrid Intel CPUs' P/E split from sysfs; empty elsewhere.
func cpuLayout() CPULayout { return cpuLayoutAt("/sys/devices") }

func cpuLayoutAt(dir string) CPULayout {
	read := func(p string) []int {
		b, err := os.ReadFile(dir + "/" + p)
		if err != nil {
			return nil
		}
		return parseCPUList(strings.TrimSpace(string(b)))
	}
	return CPULayout{Perf: read("cpu_core/cpus"), Eff: read("cpu_atom/cpus")}
}

// parseCPUList expands a kernel cpulist ("0-3,8,10-11"); nil if malformed.
func parseCPUList(s string) []int {
	if s == "" {
		return nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 4096 {
				return nil
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out
}
