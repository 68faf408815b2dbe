package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Twenty loads and unloads of a model on the GPU, through an agent: every
// runner process ends with its instance, and the device's free memory, the
// machine's available memory and the agent's own memory come back to
// where they started (lavapipe's "device memory" is its process's host
// memory, so its figure only shows what a listing process sees; the
// machine's available memory is what shows a runner's memory kept).
func TestGPULoadUnload(t *testing.T) {
	ps, _, modelID := gpuAgents(t, [][]string{{"--gpu-software"}}, "--preset", "tiny")
	a := ps[0]
	bin := buildBinary(t)
	free := func() uint64 {
		out, err := exec.Command(bin, "speed", "--list-gpus", "--gpu-software", "--json", "--dir", t.TempDir()).Output()
		if err != nil {
			t.Fatalf("orrery speed --list-gpus: %v", err)
		}
		var ds []runnerapi.Device
		if err := json.Unmarshal(out, &ds); err != nil || len(ds) == 0 {
			t.Fatalf("orrery speed --list-gpus: %q (%v), want a device", out, err)
		}
		return ds[0].FreeBytes
	}
	devBefore, availBefore, rssBefore := free(), memAvailable(t), rssOf(t, a.cmd.Process.Pid)
	req := `{"model":"` + modelID + `","prompt":"hello","max_tokens":4,"temperature":0}`
	const loads = 20
	start := time.Now()
	for i := range loads {
		in := placeJSON(t, a, `{"model":"`+modelID+`","gpuLayers":"auto"}`)
		wantOffload(t, a, in.InstanceID, 0, true, "")
		legacyComplete(t, a, req)
		deleteInstance(t, a, in.InstanceID)
		poll(t, a, 20*time.Second, fmt.Sprintf("load %d's runner gone", i), func() (bool, string) {
			pids := runnerPids(a.cmd.Process.Pid)
			return len(pids) == 0, fmt.Sprint(pids)
		})
	}
	devAfter, availAfter, rssAfter := free(), memAvailable(t), rssOf(t, a.cmd.Process.Pid)
	t.Logf("%d loads and unloads in %v: device free %.1f → %.1f MiB, machine available %.1f → %.1f MiB, agent RSS %.1f → %.1f MiB",
		loads, time.Since(start).Round(time.Second), mib(devBefore), mib(devAfter), mib(availBefore), mib(availAfter), mib(rssBefore), mib(rssAfter))
	if devAfter+16<<20 < devBefore {
		t.Errorf("the device has %.1f MiB less free after %d loads", mib(devBefore-devAfter), loads)
	}
	// Other processes come and go on the machine: a margin of 256 MiB, far
	// below twenty runners' worth of a model kept (each runner here ~150 MiB).
	if availAfter+256<<20 < availBefore {
		t.Errorf("the machine has %.1f MiB less available after %d loads", mib(availBefore-availAfter), loads)
	}
	if rssAfter > rssBefore+64<<20 {
		t.Errorf("the agent grew by %.1f MiB over %d loads", mib(rssAfter-rssBefore), loads)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// memAvailable is /proc/meminfo's MemAvailable.
func memAvailable(t *testing.T) uint64 {
	t.Helper()
	return procKB(t, "/proc/meminfo", "MemAvailable:")
}

// rssOf is a process's resident memory.
func rssOf(t *testing.T, pid int) uint64 {
	t.Helper()
	return procKB(t, fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
}

// procKB reads a "Key: N kB" line of a /proc file, in bytes.
func procKB(t *testing.T, path, key string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == key {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("%s %s: %v", path, key, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("%s: no %s", path, key)
	return 0
}
