package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
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
		testutil.WaitFor(t, typ, func() bool { return count(typ) > 0 })
	}
	testutil.WaitFor(t, "4 memory samples", func() bool { return count("NodeMemoryMeasured") >= 4 })
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
		"registry path": func(c *Config) { c.Registry = "https://registry.example/v2" },
		"registry ftp":  func(c *Config) { c.Registry = "ftp://registry.example" },
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

// TestServiceFailureStopsTheAgent: when a service fails, the agent does
// not carry on without it: Run returns the failure, naming the service,
// and the API stops answering.
func TestServiceFailureStopsTheAgent(t *testing.T) {
	a, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + a.Addr().String()
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the API", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	// Break the API's listener under it, as a dying socket would.
	a.ln.Close()
	done := make(chan error, 1)
	go func() { done <- a.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.HasPrefix(err.Error(), "api: ") {
			t.Fatalf("Wait = %v, want the api service's failure", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the agent carried on after its API failed")
	}
}

// TestClusterFailureStopsTheAgent: a node whose peer listener fails is no
// longer a member; the agent stops and says so rather than serving a
// state nobody updates.
func TestClusterFailureStopsTheAgent(t *testing.T) {
	a, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.pln.Close()
	done := make(chan error, 1)
	go func() { done <- a.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.HasPrefix(err.Error(), "cluster: accept peer links") {
			t.Fatalf("Wait = %v, want the cluster service's failure", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the agent carried on after its cluster node failed")
	}
}

func TestRunAllStopsEveryServiceOnTheFirstFailure(t *testing.T) {
	testutil.CheckLeaks(t)
	log := slog.New(slog.DiscardHandler)
	boom := errors.New("boom")
	stopped := make(chan string, 10)
	waiter := func(name string) service {
		return service{name, func(ctx context.Context) error {
			<-ctx.Done()
			stopped <- name
			return ctx.Err() // an error while stopping is not a failure
		}}
	}
	err := runAll(context.Background(), log, []service{waiter("a"), {"b", func(context.Context) error { return boom }}, waiter("c")})
	if !errors.Is(err, boom) || err.Error() != "b: boom" {
		t.Fatalf("runAll = %v, want b's failure", err)
	}
	if len(stopped) != 2 {
		t.Fatalf("%d of 2 other services stopped", len(stopped))
	}
	// A service that returns nil while the agent runs has failed too.
	err = runAll(context.Background(), log, []service{waiter("a"), {"quiet", func(context.Context) error { return nil }}})
	if !errors.Is(err, ErrServiceStopped) || !strings.HasPrefix(err.Error(), "quiet: ") {
		t.Fatalf("runAll = %v, want quiet's unexpected stop", err)
	}
	// A clean stop is no failure.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runAll(ctx, log, []service{waiter("a")}); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
}
