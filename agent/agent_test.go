package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
)

func testConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.APIAddr = "127.0.0.1:0"
	cfg.PeerAddr = "127.0.0.1:0"
	cfg.MDNS = false
	cfg.DataDir = t.TempDir()
	cfg.MemoryInterval = 100 * time.Millisecond
	cfg.SystemInterval = 100 * time.Millisecond
	return cfg
}

// waitFor polls cond every 20 ms until it holds or 15 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAgentRunsSamplersAndServesAPI(t *testing.T) {
	a, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	base := "http://" + a.Addr().String()

	count := func(typ string) int {
		evs, _ := a.Store().Log().Since(0, 0)
		n := 0
		for _, e := range evs {
			if e.Event.Type() == typ {
				n++
			}
		}
		return n
	}
	for _, typ := range []string{"NodeIdentityMeasured", "NodeMemoryMeasured", "NodeSystemMeasured", "NodeDiskMeasured", "NodeNetworkMeasured"} {
		waitFor(t, typ, func() bool { return count(typ) > 0 })
	}
	waitFor(t, "4 memory samples", func() bool { return count("NodeMemoryMeasured") >= 4 })
	if n := count("NodeIdentityMeasured"); n != 1 {
		t.Errorf("identity published %d times", n)
	}

	resp, err := http.Get(base + "/state/nodeMemory/" + a.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m state.NodeMemory
	if err := json.Unmarshal(body, &m); err != nil || m.RAMTotal == nil || m.RAMTotal.InBytes == 0 {
		t.Fatalf("nodeMemory = %s (%v)", body, err)
	}

	// An open SSE stream must not hold up shutdown.
	req, _ := http.NewRequest("GET", base+"/events/stream", nil)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop within 10 s of cancel")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("API still answering after shutdown")
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"tiny interval": func(c *Config) { c.MemoryInterval = time.Millisecond },
		"no data dir":   func(c *Config) { c.DataDir = "" },
		"bad addr":      func(c *Config) { c.APIAddr = "nonsense" },
		"bad peer addr": func(c *Config) { c.PeerAddr = "nonsense" },
		"fail-after":    func(c *Config) { c.FailAfter = c.Heartbeat },
	} {
		cfg := testConfig(t)
		mut(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "config") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	// A port in use fails in New, with the address in the message.
	a, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cfg := testConfig(t)
	cfg.APIAddr = a.Addr().String()
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), a.Addr().String()) {
		t.Errorf("busy port: err = %v", err)
	}
}
