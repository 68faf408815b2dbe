package identity

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/orrery-cluster/orrery/agent/internal/macos"
)

// probeHost reads the machine description from IOKit, SystemConfiguration
// and sysctl. Each source is independent: one failing leaves its fields
// empty and the rest are still reported.
func probeHost() (hostInfo, error) {
	var h hostInfo
	var errs []error

	if uuid, err := macos.RegistryString("IOPlatformExpertDevice", "IOPlatformUUID"); err == nil {
		h.Fingerprint = uuid
	} else {
		errs = append(errs, err)
	}

	if name, err := macos.ComputerName(); err == nil {
		h.FriendlyName = name
	} else if name, herr := os.Hostname(); herr == nil {
		// The hostname is usually "<ComputerName>.local" with spaces
		// replaced; strip the mDNS suffix so it reads like a name.
		h.FriendlyName = strings.TrimSuffix(name, ".local")
	} else {
		errs = append(errs, err, herr)
	}

	str := func(name string) string {
		v, err := unix.Sysctl(name)
		if err != nil {
			errs = append(errs, err)
			return ""
		}
		return strings.TrimSpace(v)
	}
	h.ModelID = str("hw.model")
	h.Chip = str("machdep.cpu.brand_string")
	h.OSVersion = str("kern.osproductversion")
	h.OSBuild = str("kern.osversion")
	if h.OSVersion != "" || h.OSBuild != "" {
		h.OSName = "macOS"
	}

	// hw.perflevel* exist only on Apple silicon (and not on Intel Macs),
	// so absence is normal and not an error.
	h.PerfCores = sysctlCount("hw.perflevel0.physicalcpu")
	h.EffCores = sysctlCount("hw.perflevel1.physicalcpu")

	if h == (hostInfo{}) {
		return h, errors.Join(append([]error{errors.New("no host facts readable")}, errs...)...)
	}
	return h, nil
}

// sysctlCount returns a core count, or nil when the sysctl is absent.
func sysctlCount(name string) *int {
	v, err := unix.SysctlUint32(name)
	if err != nil {
		return nil
	}
	n := int(v)
	return &n
}
