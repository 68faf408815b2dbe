package gpulib

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBuildKeyCoversInputs: scripts/gpu-build.sh's cache key (--key)
// changes with each thing that makes the libraries differ, so that a
// change to any of them rebuilds rather than takes the cache: the ollama
// module (here, go.mod replacing it), the C and C++ compilers (their
// version, or another named by CC), cmake, glslc, nvcc appearing, the
// Vulkan headers and the script itself. The tools are fakes that print a
// version; the script runs on a copy of the repository's go.mod.
func TestBuildKeyCoversInputs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("scripts/gpu-build.sh builds on Linux only")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join("..", "..")
	root := t.TempDir()
	copyFile := func(from, to string, extra string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, append(b, extra...), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(filepath.Join(repo, "go.mod"), filepath.Join(root, "go.mod"), "")
	copyFile(filepath.Join(repo, "go.sum"), filepath.Join(root, "go.sum"), "")
	copyFile(filepath.Join(repo, "scripts/gpu-build.sh"), filepath.Join(root, "scripts/gpu-build.sh"), "")
	fake := func(dir, name, out string) {
		t.Helper()
		copyFile("/dev/null", filepath.Join(dir, name), "#!/bin/sh\necho \""+out+"\"\n")
	}
	bin, cuda := filepath.Join(root, "fakebin"), filepath.Join(root, "fakecuda")
	for _, n := range []string{"gcc", "g++", "cmake", "glslc", "othercc"} {
		fake(bin, n, n+" fake ${FAKE_"+strings.ToUpper(strings.NewReplacer("+", "X").Replace(n))+":-1}")
	}
	fake(cuda, "nvcc", "nvcc fake\nCuda compilation tools, release 12.4")
	vk := func(name, version string) string {
		dir := filepath.Join(root, name)
		copyFile("/dev/null", filepath.Join(dir, "include/vulkan/vulkan_core.h"),
			"#define VK_HEADER_VERSION "+version+"\n#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 3, VK_HEADER_VERSION)\n")
		return dir
	}
	vk239, vk240 := vk("vk239", "239"), vk("vk240", "240")
	copyFile("/dev/null", filepath.Join(root, "fakeollama/go.mod"), "module github.com/ollama/ollama\n\ngo 1.24\n")
	path := bin + ":" + filepath.Dir(gobin) + ":/usr/bin:/bin"

	key := func(t *testing.T, env ...string) (string, string) {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join(root, "scripts/gpu-build.sh"), "--key")
		cmd.Env = append(os.Environ(), append([]string{"PATH=" + path, "VULKAN_SDK=" + vk239, "CC=", "CXX="}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("gpu-build.sh --key: %v\n%s", err, out)
		}
		k, inputs, _ := strings.Cut(string(out), "\n")
		if len(k) != 16 {
			t.Fatalf("gpu-build.sh --key printed %q", out)
		}
		return k, inputs
	}
	base, inputs := key(t)
	t.Logf("key %s of:\n%s", base, inputs)
	if again, _ := key(t); again != base {
		t.Fatalf("the same inputs gave keys %s and %s", base, again)
	}
	changes := []struct {
		name   string
		env    []string
		before func(t *testing.T) // changes a file, and undoes it with t.Cleanup
		want   string             // in the inputs
	}{
		{name: "gcc's version", env: []string{"FAKE_GCC=2"}, want: "gcc fake 2"},
		{name: "CC", env: []string{"CC=othercc"}, want: "othercc fake 1"},
		{name: "g++'s version", env: []string{"FAKE_GXX=2"}, want: "g++ fake 2"},
		{name: "cmake's version", env: []string{"FAKE_CMAKE=2"}, want: "cmake fake 2"},
		{name: "glslc's version", env: []string{"FAKE_GLSLC=2"}, want: "glslc fake 2"},
		{name: "nvcc", env: []string{"PATH=" + cuda + ":" + path}, want: "release 12.4"},
		{name: "the Vulkan headers", env: []string{"VULKAN_SDK=" + vk240}, want: "240 VK_MAKE_API_VERSION"},
		{name: "the script", before: func(t *testing.T) {
			p := filepath.Join(root, "scripts/gpu-build.sh")
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			copyFile(p, p, "# a change\n")
			t.Cleanup(func() { os.WriteFile(p, orig, 0o755) })
		}},
		{name: "the ollama module", before: func(t *testing.T) {
			p := filepath.Join(root, "go.mod")
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			copyFile(p, p, "\nreplace github.com/ollama/ollama => ./fakeollama\n")
			t.Cleanup(func() { os.WriteFile(p, orig, 0o644) })
		}, want: "replaced by ./fakeollama"},
	}
	seen := map[string]string{base: "the base"}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before(t)
			}
			k, in := key(t, c.env...)
			if other, dup := seen[k]; dup {
				t.Errorf("key %s, as for %s: a change of %s would take the cache", k, other, c.name)
			}
			seen[k] = c.name
			if !strings.Contains(in, c.want) {
				t.Errorf("the inputs lack %q:\n%s", c.want, in)
			}
		})
	}
}
