package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// TestAgainstRealAgent reads a real in-process agent, so that the field
// names the menu relies on are the agent's.
func TestAgainstRealAgent(t *testing.T) {
	cfg := agent.DefaultConfig()
	cfg.APIAddr, cfg.PeerAddr, cfg.MDNS = "127.0.0.1:0", "127.0.0.1:0", false
	cfg.DataDir = t.TempDir()
	cfg.MemoryInterval = 100 * time.Millisecond
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()

	tray := &fakeTray{}
	s := &Shell{Client: &Client{BaseURL: "http://" + a.Addr().String()}, Tray: tray, Window: &fakeWindow{}}
	var v View
	testutil.WaitForTimeout(t, 15*time.Second, "the menu to show the agent's node and memory", func() bool {
		s.Refresh(ctx)
		v = tray.last()
		return v.Lines[0] == "Nodes: 1" && strings.HasSuffix(v.Lines[1], " GB used")
	})
	if v.Title != "1 node" || v.Lines[2] != "Runners: none" || v.Lines[3] != "Latest trace: none" {
		t.Errorf("view = %+v", v)
	}
}
