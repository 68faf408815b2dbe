package identity

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func probeHost() (hostInfo, error) { return probeLinux("/") }

// probeLinux reads the machine description under root ("/" in production,
// a fixture tree in tests).
func probeLinux(root string) (hostInfo, error) {
	var h hostInfo
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	h.Fingerprint = read("etc/machine-id")
	if h.Fingerprint == "" {
		h.Fingerprint = read("var/lib/dbus/machine-id")
	}
	if root == "/" {
		h.FriendlyName, _ = os.Hostname()
	} else {
		h.FriendlyName = read("etc/hostname")
	}
	h.ModelID = read("sys/class/dmi/id/product_name")
	h.Chip = cpuModel(filepath.Join(root, "proc/cpuinfo"))
	osr := osRelease(filepath.Join(root, "etc/os-release"))
	h.OSName = osr["NAME"]
	h.OSVersion = osr["VERSION_ID"]
	h.OSBuild = read("proc/sys/kernel/osrelease")
	// Hybrid Intel CPUs list their P and E cores as two PMUs.
	if n, ok := cpuListLen(read("sys/devices/cpu_core/cpus")); ok {
		h.PerfCores = &n
	}
	if n, ok := cpuListLen(read("sys/devices/cpu_atom/cpus")); ok {
		h.EffCores = &n
	}
	if h == (hostInfo{}) {
		return h, errors.New("nothing readable under " + root)
	}
	return h, nil
}

func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name", "Model", "Hardware", "cpu model":
			if v = strings.TrimSpace(v); v != "" {
				return v
			}
		}
	}
	return ""
}

func osRelease(path string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		out[k] = v
	}
	return out
}

// cpuListLen counts the CPUs in a kernel cpulist such as "0-7,16,18-19".
func cpuListLen(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, false
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, false
			}
		}
		n += b - a + 1
	}
	return n, true
}
