package supervisor

import (
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/state"
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
