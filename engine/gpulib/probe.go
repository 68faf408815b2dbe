package gpulib

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Driver is a Vulkan driver the Vulkan loader would load: an ICD manifest.
type Driver struct {
	// Name is the manifest's file name without its extension and
	// architecture ("lvp_icd", "nvidia_icd", "radeon_icd").
	Name string `json:"name"`
	// Software is set for one that computes on the CPU (Mesa's lavapipe).
	Software bool `json:"software,omitempty"`
}

// VulkanDrivers lists the Vulkan drivers installed under root ("" or "/":
// this machine), where the Vulkan loader looks for them: the files that
// VK_DRIVER_FILES or VK_ICD_FILENAMES name, else the manifests in its
// search path's icd.d directories. Mesa's package installs several
// (lavapipe's, and the Intel and AMD ones that find no device without
// that hardware), so a driver says little of a device; none says there
// can be no Vulkan device at all.
func VulkanDrivers(root string, getenv func(string) string) []Driver {
	if getenv == nil {
		getenv = os.Getenv
	}
	var files []string
	if list := firstSet(getenv, "VK_DRIVER_FILES", "VK_ICD_FILENAMES"); list != "" {
		for _, f := range filepath.SplitList(list) {
			if st, err := os.Stat(under(root, f)); err == nil && st.IsDir() {
				files = append(files, manifests(under(root, f))...)
			} else if err == nil {
				files = append(files, f)
			}
		}
	} else {
		dirs := []string{"/etc/vulkan/icd.d"}
		data := getenv("XDG_DATA_DIRS")
		if data == "" {
			data = "/usr/local/share:/usr/share"
		}
		for _, d := range filepath.SplitList(data) {
			dirs = append(dirs, filepath.Join(d, "vulkan/icd.d"))
		}
		for _, d := range dirs {
			files = append(files, manifests(under(root, d))...)
		}
	}
	var out []Driver
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if i := strings.IndexByte(name, '.'); i > 0 {
			name = name[:i] // lvp_icd.x86_64 → lvp_icd
		}
		d := Driver{Name: name, Software: strings.HasPrefix(name, "lvp_") || strings.Contains(name, "swiftshader")}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Driver) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func manifests(dir string) []string {
	ms, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	return ms
}

func under(root, path string) string {
	if root == "" {
		return path
	}
	return filepath.Join(root, path)
}

// Hardware is a GPU on the PCI bus, whatever its driver.
type Hardware struct {
	// PCI is its address ("0000:01:00.0"), Vendor its maker.
	PCI    string `json:"pci"`
	Vendor string `json:"vendor"`
	// Driver is the kernel driver bound to it ("nvidia", "amdgpu",
	// "i915", "xe", "nouveau"; "": none).
	Driver string `json:"driver,omitempty"`
}

func (h Hardware) String() string {
	s := h.Vendor + " GPU at " + h.PCI
	if h.Driver == "" {
		return s + ", no kernel driver"
	}
	return s + ", driver " + h.Driver
}

// gpuVendors are the PCI vendors whose display controllers compute: a
// server's BMC (ASPEED, Matrox) or a VM's display (QEMU, virtio, VMware)
// shows as one too, and is not a GPU for this.
var gpuVendors = map[string]string{"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}

// PCIGPUs lists the GPUs on the PCI bus under root ("" or "/": this
// machine's /sys): display controllers (PCI class 0x03) of NVIDIA, AMD and
// Intel, with or without a driver. Linux only: elsewhere there is no /sys
// and it finds none.
func PCIGPUs(root string) []Hardware {
	devs, _ := filepath.Glob(under(root, "/sys/bus/pci/devices/*"))
	var out []Hardware
	for _, d := range devs {
		class := readTrim(filepath.Join(d, "class"))
		vendor, ok := gpuVendors[readTrim(filepath.Join(d, "vendor"))]
		if !ok || !strings.HasPrefix(class, "0x03") {
			continue
		}
		h := Hardware{PCI: filepath.Base(d), Vendor: vendor}
		if l, err := os.Readlink(filepath.Join(d, "driver")); err == nil {
			h.Driver = filepath.Base(l)
		}
		out = append(out, h)
	}
	return out
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
