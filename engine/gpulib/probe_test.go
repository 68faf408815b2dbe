package gpulib

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestVulkanDrivers(t *testing.T) {
	icds := map[string]string{
		"usr/share/vulkan/icd.d/lvp_icd.x86_64.json":      "{}",
		"usr/share/vulkan/icd.d/radeon_icd.x86_64.json":   "{}",
		"usr/share/vulkan/icd.d/lvp_icd.i686.json":        "{}",
		"etc/vulkan/icd.d/nvidia_icd.json":                "{}",
		"opt/sdk/share/vulkan/icd.d/swiftshader_icd.json": "{}",
		"opt/mine/my_icd.json":                            "{}",
		"usr/share/vulkan/icd.d/README":                   "not a manifest",
	}
	root := tree(t, icds)
	tests := []struct {
		name string
		env  func(string) string
		want []Driver
	}{
		{name: "the loader's default path", env: noEnv,
			want: []Driver{{Name: "lvp_icd", Software: true}, {Name: "nvidia_icd"}, {Name: "radeon_icd"}}},
		{name: "XDG_DATA_DIRS", env: env("XDG_DATA_DIRS", "/opt/sdk/share"),
			want: []Driver{{Name: "nvidia_icd"}, {Name: "swiftshader_icd", Software: true}}},
		{name: "VK_DRIVER_FILES", env: env("VK_DRIVER_FILES", "/opt/mine/my_icd.json:/opt/mine/absent.json"),
			want: []Driver{{Name: "my_icd"}}},
		{name: "VK_ICD_FILENAMES, a directory", env: env("VK_ICD_FILENAMES", "/etc/vulkan/icd.d"),
			want: []Driver{{Name: "nvidia_icd"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := VulkanDrivers(root, tc.env); !slices.Equal(got, tc.want) {
				t.Errorf("VulkanDrivers: %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := VulkanDrivers(t.TempDir(), noEnv); len(got) != 0 {
		t.Errorf("no manifests: %+v", got)
	}
}

func TestPCIGPUs(t *testing.T) {
	dev := func(addr, class, vendor string) map[string]string {
		p := "sys/devices/pci0000:00/" + addr + "/"
		return map[string]string{p + "class": class + "\n", p + "vendor": vendor + "\n"}
	}
	root := tree(t,
		dev("0000:01:00.0", "0x030000", "0x10de"), // NVIDIA, driver nvidia
		dev("0000:02:00.0", "0x030000", "0x1a03"), // ASPEED: a server's BMC display
		dev("0000:00:1f.0", "0x060100", "0x8086"), // Intel, a bridge
		dev("0000:03:00.0", "0x038000", "0x1002"), // AMD, no driver
		dev("0000:00:02.0", "0x030000", "0x8086"), // Intel, driver i915
		map[string]string{"sys/bus/pci/drivers/nvidia/.keep": "", "sys/bus/pci/drivers/i915/.keep": "", "sys/bus/pci/devices/.keep": ""},
	)
	link := func(from, to string) {
		t.Helper()
		if err := os.Symlink(filepath.Join(root, to), filepath.Join(root, from)); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []string{"0000:01:00.0", "0000:02:00.0", "0000:00:1f.0", "0000:03:00.0", "0000:00:02.0"} {
		link("sys/bus/pci/devices/"+a, "sys/devices/pci0000:00/"+a)
	}
	link("sys/devices/pci0000:00/0000:01:00.0/driver", "sys/bus/pci/drivers/nvidia")
	link("sys/devices/pci0000:00/0000:00:02.0/driver", "sys/bus/pci/drivers/i915")
	want := []Hardware{
		{PCI: "0000:00:02.0", Vendor: "Intel", Driver: "i915"},
		{PCI: "0000:01:00.0", Vendor: "NVIDIA", Driver: "nvidia"},
		{PCI: "0000:03:00.0", Vendor: "AMD"},
	}
	if got := PCIGPUs(root); !slices.Equal(got, want) {
		t.Errorf("PCIGPUs: %+v, want %+v", got, want)
	}
	if got := want[2].String(); got != "AMD GPU at 0000:03:00.0, no kernel driver" {
		t.Errorf("String: %q", got)
	}
	if got := PCIGPUs(t.TempDir()); len(got) != 0 {
		t.Errorf("no /sys: %+v", got)
	}
}
