package supervisor

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// TestArgsDraft: rank 0's draft model reaches its runner's command line,
// with the draft's threads only when the agent sets them.
func TestArgsDraft(t *testing.T) {
	inst := state.Instance{InstanceID: "i1", DraftModel: "kjv-draft", Ranks: []state.ShardRange{{NodeID: "n1", FirstLayer: 0, LastLayer: 8}}}
	for _, c := range []struct {
		threads int
		want    string
	}{
		{0, "--draft-model /m/d.gguf --draft-id kjv-draft"},
		{1, "--draft-model /m/d.gguf --draft-id kjv-draft --draft-threads 1"},
	} {
		p := &proc{s: &Supervisor{cfg: Config{NodeID: "n1", DraftThreads: c.threads}}, inst: inst}
		args := strings.Join(p.args("/m/t.gguf", "/m/d.gguf"), " ")
		if !strings.Contains(args, c.want) || c.threads == 0 && strings.Contains(args, "--draft-threads") {
			t.Errorf("draft threads %d: args %q, want %q", c.threads, args, c.want)
		}
	}
	p := &proc{s: &Supervisor{cfg: Config{NodeID: "n1", DraftThreads: 1}}, inst: inst}
	if args := p.args("/m/t.gguf", ""); slices.Contains(args, "--draft-threads") {
		t.Errorf("no draft, yet %q", args)
	}
}

// TestListenIn: a direct listener takes the first free port of its range,
// and a range with none free is an error naming it.
func TestListenIn(t *testing.T) {
	base := testutil.FreeBasePort(t, 2)
	first, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := listenIn("127.0.0.1", [2]int{base, base}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("no free port in %d-%d", base, base)) {
		t.Fatalf("a busy range: %v", err)
	}
	ln, err := listenIn("127.0.0.1", [2]int{base, base + 1})
	if err != nil {
		t.Fatalf("range %d-%d with %d free: %v", base, base+1, base+1, err)
	}
	defer ln.Close()
	if got := ln.Addr().(*net.TCPAddr).Port; got != base+1 {
		t.Fatalf("range %d-%d (%d busy): listened on %d", base, base+1, base, got)
	}
}

// TestArgsSpeculative: an instance's default speculation reaches rank 0's
// runner as JSON, and no other rank's.
func TestArgsSpeculative(t *testing.T) {
	inst := state.Instance{InstanceID: "i1", Speculative: &runnerapi.Speculation{Draft: "ngram", Max: 6},
		Ranks: []state.ShardRange{{NodeID: "n1", FirstLayer: 0, LastLayer: 4}, {Rank: 1, NodeID: "n1", FirstLayer: 4, LastLayer: 8}}}
	for rank, want := range []bool{true, false} {
		p := &proc{s: &Supervisor{cfg: Config{NodeID: "n1", AgentAPI: "127.0.0.1:1"}}, inst: inst, rank: rank}
		args := strings.Join(p.args("/m/t.gguf", ""), " ")
		if got := strings.Contains(args, `--speculative {"draft":"ngram","max":6}`); got != want {
			t.Errorf("rank %d: args %q; --speculative there: %v, want %v", rank, args, got, want)
		}
	}
}
