package supervisor

import (
	"context"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A tensor-parallel group's direct links run between its runners, past
// the agents, so the node's per-peer traffic (its peer links' counters)
// would miss them. Each such runner's group links are polled every
// meshEvery while it serves, and their bytes since the last poll added to
// the peer's totals: DirectBytes.

const meshEvery = time.Second

// directTotals are the bytes sent to and received from each peer node on
// direct group links, since the agent started.
type directTotals struct{ sent, recv uint64 }

// DirectBytes returns, by peer node, the bytes this node's runners have
// sent and received on direct tensor-parallel links so far.
func (s *Supervisor) DirectBytes() map[string][2]uint64 {
	s.directMu.Lock()
	defer s.directMu.Unlock()
	out := make(map[string][2]uint64, len(s.direct))
	for peer, t := range s.direct {
		out[peer] = [2]uint64{t.sent, t.recv}
	}
	return out
}

func (s *Supervisor) addDirect(peer string, sent, recv uint64) {
	s.directMu.Lock()
	defer s.directMu.Unlock()
	if s.direct == nil {
		s.direct = map[string]directTotals{}
	}
	t := s.direct[peer]
	t.sent += sent
	t.recv += recv
	s.direct[peer] = t
}

// meshTraffic polls the runner's group links once and adds what its
// direct ones carried since seen (by group rank, updated) to their peer
// nodes' totals.
func (p *proc) meshTraffic(client *runnerapi.Client, seen map[int][2]uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	h, err := client.Health(ctx)
	cancel()
	if err != nil {
		return
	}
	sh := p.inst.Shape()
	stage, _ := sh.Stage(p.rank)
	for _, l := range h.Mesh {
		r := sh.Rank(stage, l.Rank) // the instance's rank
		if !l.Direct || r < 0 || r >= len(p.inst.Ranks) {
			continue
		}
		last := seen[l.Rank]
		if l.Sent >= last[0] && l.Recv >= last[1] {
			p.s.addDirect(p.inst.Ranks[r].NodeID, l.Sent-last[0], l.Recv-last[1])
		}
		seen[l.Rank] = [2]uint64{l.Sent, l.Recv}
	}
}
