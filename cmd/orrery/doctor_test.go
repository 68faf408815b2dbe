package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/discovery"
	"github.com/orrery-cluster/orrery/engine/gpulib"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// cannedAgent serves fixed JSON for the endpoints the doctor reads; a path
// missing from bodies answers 404 with the API's error shape.
func cannedAgent(t *testing.T, bodies map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.URL.Path]
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":"no such endpoint: %s"}`+"\n", r.URL.Path)
			return
		}
		fmt.Fprintln(w, b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

const (
	cannedHealth = `{"status":"ok","nodeId":"node-b","version":"1.2.3","lastEventAppliedIdx":41}`
	// node-a and node-c are measured ("links"), node-d not yet.
	cannedCluster = `{"nodeId":"node-b","masterId":"node-a","isMaster":false,
		"members":[
			{"nodeId":"node-a","startedAt":"2025-01-01T00:00:00Z","lastHeard":"2025-01-01T00:01:00Z","self":false},
			{"nodeId":"node-b","startedAt":"2025-01-01T00:00:01Z","lastHeard":"0001-01-01T00:00:00Z","self":true},
			{"nodeId":"node-c","startedAt":"2025-01-01T00:00:02Z","lastHeard":"2025-01-01T00:01:00Z","self":false},
			{"nodeId":"node-d","startedAt":"2025-01-01T00:00:03Z","lastHeard":"2025-01-01T00:01:00Z","self":false}],
		"lastEventAppliedIdx":41,"stateHash":"ab",
		"links":[{"peerId":"node-a","rttLastNs":300000,"rttEwmaNs":254000,"rttMinNs":200000,"lossPct":0,"probes":5,
			"clockOffsetNs":-1500000,"clockOffsetUncertaintyNs":100000},
			{"peerId":"node-c","rttEwmaNs":1234567,"clockOffsetNs":20000}]}`
	cannedDiscoveryOK = `{"mode":{"mdns":true,"loopback":false,"static":true},"peersFound":3,
		"multicastInterfaces":["eth0","wlan0"],"problems":[]}`
	cannedDiscoveryBad = `{"mode":{"mdns":false,"loopback":true,"static":false},"peersFound":1,
		"multicastInterfaces":[],"problems":[
			{"code":"key-mismatch","message":"node x at 10.0.0.2:52417 advertises cluster-key fingerprint aa, ours is bb","hint":"Run orrery key show on one Mac."},
			{"code":"peer-unreachable","message":"node y was found but does not answer","hint":"Check its firewall."}]}`
)

// The GPU reports: a node with lavapipe's driver whose speed listed no
// device (lavapipe is not allowed without --gpu-software), and one that
// listed lavapipe.
const (
	cannedGPUNoDevice = `{"os":"linux","library":{"dir":"/usr/lib/orrery/lib/ollama","from":"beside the executable",
		"libs":["vulkan"],"ollama":"v0.17.4"},"drivers":[{"name":"intel_icd"},{"name":"lvp_icd","software":true}],
		"devicesListed":true}`
	cannedGPULavapipe = `{"os":"linux","library":{"dir":"/work/lib/ollama","from":"ORRERY_GPU_LIB","libs":["vulkan"]},
		"drivers":[{"name":"lvp_icd","software":true}],"hardware":[{"pci":"0000:01:00.0","vendor":"AMD"}],
		"devices":[{"id":"6d65","library":"Vulkan","name":"Vulkan0","description":"llvmpipe (LLVM 15.0.6, 256 bits)",
		"totalBytes":2147483648,"freeBytes":2040109465,"software":true}],"devicesListed":true}`
)

func TestDoctorReport(t *testing.T) {
	members := "" +
		"Node       node-b\n" +
		"Master     node-a\n" +
		"Members    4 (rtt and clock offset measured from this node; offset = member's clock − ours)\n" +
		"  node-a  master             rtt 0.25 ms  offset -1.50 ms ± 0.10 ms\n" +
		"  node-b  worker, this node\n" +
		"  node-c  worker             rtt 1.23 ms  offset +0.02 ms\n" +
		"  node-d  worker             no probe yet\n"
	tests := []struct {
		name      string
		discovery string
		gpu       string // "": the agent has no /state/gpu
		code      int
		want      string
	}{
		{name: "no problems", discovery: cannedDiscoveryOK, gpu: cannedGPUNoDevice, code: 0, want: members +
			"Discovery  mDNS, static peers\n" +
			"           multicast interfaces: eth0, wlan0\n" +
			"GPU        backends: /usr/lib/orrery/lib/ollama (vulkan; built from ollama v0.17.4)\n" +
			"           Vulkan drivers: intel_icd, lvp_icd (software)\n" +
			"           PCI GPUs: none\n" +
			"           devices: none\n" +
			"           → libggml-vulkan.so found but no Vulkan device: runs on the CPU (no GPU on the PCI bus; lavapipe's device, which computes on the CPU, is used only with --gpu-software)\n" +
			"\n" +
			"✓ found 3 peers\n"},
		{name: "problems", discovery: cannedDiscoveryBad, gpu: cannedGPULavapipe, code: 1, want: members +
			"Discovery  loopback (agents on this machine)\n" +
			"GPU        backends: /work/lib/ollama (vulkan; from ORRERY_GPU_LIB)\n" +
			"           Vulkan drivers: lvp_icd (software)\n" +
			"           PCI GPUs: AMD GPU at 0000:01:00.0, no kernel driver\n" +
			"           devices: Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)), software, 1.9 GiB free of 2.0 GiB\n" +
			"           → GPU: Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)), software: used only with --gpu-software; runs on the CPU otherwise\n" +
			"\n" +
			"✗ node x at 10.0.0.2:52417 advertises cluster-key fingerprint aa, ours is bb\n" +
			"    → Run orrery key show on one Mac.\n" +
			"✗ node y was found but does not answer\n" +
			"    → Check its firewall.\n"},
		{name: "an agent without /state/gpu", discovery: cannedDiscoveryOK, code: 0, want: members +
			"Discovery  mDNS, static peers\n" +
			"           multicast interfaces: eth0, wlan0\n" +
			"GPU        not reported: GET @/state/gpu: 404 Not Found: no such endpoint: /state/gpu\n" +
			"\n" +
			"✓ found 3 peers\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bodies := map[string]string{"/healthz": cannedHealth, "/cluster": cannedCluster, "/state/discovery": tc.discovery}
			if tc.gpu != "" {
				bodies["/state/gpu"] = tc.gpu
			}
			srv := cannedAgent(t, bodies)
			code, out, errs := runCLI("doctor", "--api", srv.URL+"/")
			if code != tc.code || errs != "" {
				t.Errorf("exit %d, want %d; stderr: %s", code, tc.code, errs)
			}
			want := "Agent      " + srv.URL + " (orrery 1.2.3, status ok)\n" + strings.ReplaceAll(tc.want, "@", srv.URL)
			if out != want {
				t.Errorf("output:\n%s\nwant:\n%s", out, want)
			}
		})
	}
}

func TestDoctorErrors(t *testing.T) {
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"doctor", "--bogus"},
			{"doctor", "extra"},
			{"doctor", "--api", "ftp://127.0.0.1:1"},
			{"doctor", "--api", "http://127.0.0.1:1/state"},
			{"doctor", "--api", "http://"},
		} {
			if code, out, errs := runCLI(args...); code != 2 || out != "" || errs == "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and a message", args, code, out, errs)
			}
		}
		if code, _, errs := runCLI("doctor", "-h"); code != 0 || !strings.Contains(errs, "-api") {
			t.Errorf("doctor -h: exit %d, stderr %q", code, errs)
		}
	})
	t.Run("no agent", func(t *testing.T) {
		addr := testutil.FreeAddr(t)
		code, out, errs := runCLI("doctor", "--api", addr) // the scheme is optional
		if code != 1 || out != "" {
			t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
		}
		for _, w := range []string{"no agent answers at http://" + addr, "start one with `orrery agent`"} {
			if !strings.Contains(errs, w) {
				t.Errorf("stderr lacks %q: %s", w, errs)
			}
		}
	})
	t.Run("agent without a cluster", func(t *testing.T) {
		srv := cannedAgent(t, map[string]string{"/healthz": cannedHealth, "/state/discovery": cannedDiscoveryOK})
		code, out, errs := runCLI("doctor", "--api", srv.URL)
		if code != 1 || out != "" || !strings.Contains(errs, "/cluster: 404") || !strings.Contains(errs, "no such endpoint") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 1 and the 404", code, out, errs)
		}
	})
}

// TestDoctorLocal: --local asks no agent and shows this binary's GPU
// backends (here, ORRERY_GPU_LIB's) and a verdict.
func TestDoctorLocal(t *testing.T) {
	root := testutil.WriteTree(t, map[string]string{
		"lib/ollama/libggml-vulkan.so":           "elf",
		"lib/ollama/libggml-base.so.0":           "elf",
		"lib/ollama/" + gpulib.MarkerFile:        "ollama v0.17.4\n",
		"nobase/lib/ollama/libggml-vulkan.so":    "elf",
		"nobase/lib/ollama/" + gpulib.MarkerFile: "ollama v0.17.4\n",
	})
	t.Setenv(gpulib.OllamaLibEnv, "")
	for _, tc := range []struct{ dir, backends, verdict string }{
		{dir: filepath.Join(root, "lib/ollama"),
			backends: "GPU        backends: " + filepath.Join(root, "lib/ollama") + " (vulkan; built from ollama v0.17.4; from ORRERY_GPU_LIB)\n",
			verdict:  "           → libggml-vulkan.so found; devices not listed yet"},
		{dir: filepath.Join(root, "nobase/lib/ollama"),
			backends: "GPU        backends: " + filepath.Join(root, "nobase/lib/ollama") + " (vulkan; built from ollama v0.17.4; from ORRERY_GPU_LIB): libggml-base.so.0, which the GPU backends link to, is missing",
			verdict:  "           → the GPU backends cannot load (libggml-base.so.0"},
	} {
		t.Setenv(gpulib.LibEnv, tc.dir)
		code, out, errs := runCLI("doctor", "--local", "--api", testutil.FreeAddr(t))
		if code != 0 || errs != "" {
			t.Errorf("doctor --local: exit %d, stderr %q", code, errs)
		}
		for _, want := range []string{tc.backends, "           Vulkan drivers: ", "           PCI GPUs: ", "           devices: not listed\n", tc.verdict} {
			if !strings.Contains(out, want) {
				t.Errorf("doctor --local output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "Agent") || strings.Contains(out, "Discovery") {
			t.Errorf("doctor --local asked an agent:\n%s", out)
		}
	}
}

type discoveryCodes struct {
	PeersFound int                 `json:"peersFound"`
	Problems   []discovery.Problem `json:"problems"`
}

// TestDoctorProcess runs the doctor against a real agent alone in its
// loopback dir, and checks that it says what /state/discovery says.
func TestDoctorProcess(t *testing.T) {
	bin := buildBinary(t)
	p := startAgentEnv(t, bin, testutil.FreeAddr(t), t.TempDir(), nil, "--loopback-dir", t.TempDir())
	waitHealthy(t, p)
	report := func() (d discoveryCodes) {
		p.mustGet(t, "/state/discovery", &d)
		return d
	}
	// Until every discovery source has run once, the agent reports neither
	// peers nor problems; wait for a settled answer.
	poll(t, p, 10*time.Second, "a settled discovery report", func() (bool, string) {
		d := report()
		return d.PeersFound > 0 || len(d.Problems) > 0, fmt.Sprintf("%+v", d)
	})
	var id string
	p.mustGet(t, "/node_id", &id)

	for attempt := 0; ; attempt++ {
		before := report()
		cmd := exec.Command(bin, "doctor", "--api", "http://"+p.addr)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("doctor: %v", err)
		}
		code := cmd.ProcessState.ExitCode()
		after := report()
		if bj, aj := mustJSON(t, before), mustJSON(t, after); bj != aj {
			if attempt < 3 {
				continue // the report changed while the doctor ran
			}
			t.Fatalf("discovery report keeps changing: %s then %s", bj, aj)
		}
		s := string(out)
		t.Logf("doctor output:\n%s", s)
		if !strings.Contains(s, "Node       "+id+"\n") || !strings.Contains(s, "Discovery  loopback") {
			t.Errorf("doctor output lacks the node id %s or the loopback mode", id)
		}
		// The GPU part says what the agent's /state/gpu says.
		var g gpulib.Report
		p.mustGet(t, "/state/gpu", &g)
		if !strings.Contains(s, "\nGPU        backends: ") || !strings.Contains(s, "           → "+g.Verdict()+"\n") {
			t.Errorf("doctor output lacks the GPU backends or the verdict %q", g.Verdict())
		}
		if len(after.Problems) == 0 {
			want := fmt.Sprintf("✓ found %d peer", after.PeersFound)
			if code != 0 || !strings.Contains(s, want) || strings.Contains(s, "✗") {
				t.Errorf("no problems reported: exit %d, want 0 and %q", code, want)
			}
			return
		}
		// Alone in its loopback dir, the agent can only find nothing.
		codes := []string{}
		for _, pr := range after.Problems {
			codes = append(codes, pr.Code)
			if !strings.Contains(s, "✗ "+pr.Message+"\n    → "+pr.Hint+"\n") {
				t.Errorf("doctor output lacks problem %s", pr.Code)
			}
		}
		if !slices.Contains(codes, "nothing-found") {
			t.Errorf("problem codes %v, want nothing-found among them", codes)
		}
		if code != 1 || strings.Contains(s, "✓") {
			t.Errorf("exit %d with problems %v, want 1 and no ✓", code, codes)
		}
		return
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
