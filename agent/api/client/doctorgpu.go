package client

import (
	"fmt"
	"io"
	"strings"

	"github.com/orrery-cluster/orrery/engine/gpulib"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// WriteGPUText writes the GPU section of orrery doctor: where the GPU
// backends load from, the Vulkan drivers and PCI GPUs, the devices ggml
// listed, and the verdict.
func WriteGPUText(out io.Writer, g gpulib.Report) error {
	var w strings.Builder
	writeGPU(&w, g)
	_, err := io.WriteString(out, w.String())
	return err
}

// gpuIndent lines up the section's lines under its first, as Discovery's.
const gpuIndent = "           "

func writeGPU(w *strings.Builder, g gpulib.Report) {
	if g.OS == "darwin" {
		fmt.Fprintln(w, "GPU        backends: Metal, compiled in")
	} else {
		fmt.Fprintf(w, "GPU        backends: %s\n", libraryText(g.Library))
		fmt.Fprintf(w, "%sVulkan drivers: %s\n", gpuIndent, driversText(g.Drivers))
		hw := "none"
		if len(g.Hardware) > 0 {
			var hs []string
			for _, h := range g.Hardware {
				hs = append(hs, h.String())
			}
			hw = strings.Join(hs, "; ")
		}
		fmt.Fprintf(w, "%sPCI GPUs: %s\n", gpuIndent, hw)
	}
	fmt.Fprintf(w, "%sdevices: %s\n", gpuIndent, devicesText(g))
	fmt.Fprintf(w, "%s→ %s\n", gpuIndent, g.Verdict())
}

func libraryText(l gpulib.Library) string {
	if l.Dir == "" {
		s := "none"
		if l.Problem != "" {
			s += ": " + l.Problem
		}
		if len(l.Searched) > 0 {
			s += " (looked in " + strings.Join(l.Searched, ", ") + ")"
		}
		return s
	}
	s := l.Dir
	var what []string
	if len(l.Libs) > 0 {
		what = append(what, strings.Join(l.Libs, ", "))
	}
	if l.Ollama != "" {
		what = append(what, "built from ollama "+l.Ollama)
	}
	if l.From != "" && l.From != gpulib.FromExecutable {
		what = append(what, "from "+l.From)
	}
	if len(what) > 0 {
		s += " (" + strings.Join(what, "; ") + ")"
	}
	if l.Problem != "" {
		s += ": " + l.Problem
	}
	return s
}

func driversText(ds []gpulib.Driver) string {
	if len(ds) == 0 {
		return "none"
	}
	var out []string
	for _, d := range ds {
		if d.Software {
			out = append(out, d.Name+" (software)")
		} else {
			out = append(out, d.Name)
		}
	}
	return strings.Join(out, ", ")
}

func devicesText(g gpulib.Report) string {
	switch {
	case len(g.Devices) > 0:
		var out []string
		for _, d := range g.Devices {
			out = append(out, deviceText(d))
		}
		return strings.Join(out, "; ")
	case g.DevicesListed:
		return "none"
	}
	return "not listed"
}

// deviceText reads "Vulkan0 (llvmpipe …), software, 1.9 GiB free of 2.0
// GiB".
func deviceText(d runnerapi.Device) string {
	s := d.String()
	if d.Software {
		s += ", software"
	}
	if d.Unified {
		s += ", unified memory"
	}
	if d.TotalBytes > 0 {
		s += fmt.Sprintf(", %s free of %s", gib(d.FreeBytes), gib(d.TotalBytes))
	}
	return s
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
