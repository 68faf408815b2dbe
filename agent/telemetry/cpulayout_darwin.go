package telemetry

import "golang.org/x/sys/unix"

// cpuLayout maps Apple silicon's clusters onto logical CPU numbers. macOS
// numbers the efficiency cores first (hw.perflevel1 is the E level), so the
// first E CPUs are efficiency and the next P are performance. Unverified
// until run on a Mac; Intel Macs have no perflevels and get an empty layout.
func cpuLayout() CPULayout {
	p, perr := unix.SysctlUint32("hw.perflevel0.logicalcpu")
	e, eerr := unix.SysctlUint32("hw.perflevel1.logicalcpu")
	if perr != nil || eerr != nil || p == 0 {
		return CPULayout{}
	}
	var l CPULayout
	for i := 0; i < int(e); i++ {
		l.Eff = append(l.Eff, i)
	}
	for i := int(e); i < int(e+p); i++ {
		l.Perf = append(l.Perf, i)
	}
	return l
}
