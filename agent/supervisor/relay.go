package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/ident"
)

// The relay joins the ranks of a pipeline. Runners never reach each other
// directly: each rank's runner asks this node's agent for its outbound rank
// link (GET runner.RankLinkPath, upgraded), and the agent connects it to
// the next rank's runner, here or, over an authenticated stream link, on
// that rank's node, whose relay hands it to the runner (Accept). Runners
// of ranks > 0 also post their spans here (POST runner.RankTracePath).
// The protocol itself (paths, token, bodies) is engine/runner's.

// maxRankTraceBytes bounds one rank's span upload.
const maxRankTraceBytes = 256 << 20

// dialWait bounds connecting a rank link to the next rank.
const dialWait = 5 * time.Second

// RelayConfig wires a Relay.
type RelayConfig struct {
	// Self is this node's id; State its replicated state.
	Self  string
	State func() state.State
	// DialPeer opens a rank stream link to node, naming the receiving
	// rank with id (see RankStreamID).
	DialPeer func(ctx context.Context, node, id string) (net.Conn, error)
	// PeerHost is the host at which this node reaches node (its peer
	// link's), for a rank's direct link; false when unknown.
	PeerHost func(node string) (string, bool)
	// ShipRank ships a rank's spans and counter samples of a traced task
	// to the master; ranks are its instance's. It must not block.
	ShipRank func(task string, rank int, spans []trace.Span, counters []trace.CounterSample, ranks []state.ShardRange)
}

// Relay serves this node's runners their rank links and takes their spans.
type Relay struct {
	s   *Supervisor
	cfg RelayConfig
}

// Relay returns the rank-link relay of this supervisor's runners.
func (s *Supervisor) Relay(cfg RelayConfig) *Relay { return &Relay{s: s, cfg: cfg} }

// LinkKind is which port of a runner a rank link goes to.
type LinkKind byte

const (
	// PipeLink is a pipeline stage's link to the next stage (to its
	// group's first rank, in a hybrid plan).
	PipeLink LinkKind = iota
	// MeshLink is a tensor-parallel rank's link to a lower rank of its
	// group.
	MeshLink
)

// RankStreamID names the receiving rank of a rank stream link and its
// port: <instance>-r<rank> for a pipeline link, -m<rank> for a group's.
func RankStreamID(instanceID string, rank int, kind LinkKind) string {
	if kind == MeshLink {
		return fmt.Sprintf("%s-m%d", instanceID, rank)
	}
	return fmt.Sprintf("%s-r%d", instanceID, rank)
}

func parseRankStreamID(id string) (string, int, LinkKind, error) {
	i := max(strings.LastIndex(id, "-r"), strings.LastIndex(id, "-m"))
	if i <= 0 {
		return "", 0, 0, fmt.Errorf("rank stream id %q", id)
	}
	kind := PipeLink
	if id[i+1] == 'm' {
		kind = MeshLink
	}
	r, err := strconv.Atoi(id[i+2:])
	if err != nil || r < 0 {
		return "", 0, 0, fmt.Errorf("rank stream id %q", id)
	}
	if err := ident.ValidInstanceID(id[:i]); err != nil {
		return "", 0, 0, fmt.Errorf("rank stream id: %w", err)
	}
	return id[:i], r, kind, nil
}

// Accept takes a rank stream link from peer and connects it to the local
// runner of the rank id names, if peer runs a rank that links to it.
// It owns c.
func (r *Relay) Accept(peer, id string, c net.Conn) {
	inst, rank, kind, err := parseRankStreamID(id)
	if err != nil {
		c.Close()
		return
	}
	in, ok := r.cfg.State().Instances[inst]
	if !ok {
		// A node just started learns the instance from the master a
		// moment after the other ranks' runners start dialling: they retry.
		r.s.log.Debug("refused a rank link: instance not in this node's state yet", "from", peer, "id", id)
		c.Close()
		return
	}
	if rank >= len(in.Ranks) || !linksTo(in, rank, kind, peer) {
		r.s.log.Warn("refused a rank link", "from", peer, "id", id)
		c.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialWait)
	rc, err := r.s.DialRank(ctx, inst, rank, kind)
	cancel()
	if err != nil {
		r.s.log.Debug("rank link: local runner not ready", "id", id, "err", err)
		c.Close()
		return
	}
	splice(c, rc)
}

// linksTo reports whether node peer runs a rank that links to rank: in a
// tensor-parallel group, a rank above it in its stage (each rank dials
// the ones below); in a pipeline, the previous stage's first rank, to
// the stage's first.
func linksTo(in state.Instance, rank int, kind LinkKind, peer string) bool {
	sh := in.Shape()
	if kind == MeshLink {
		for _, r := range sh.Peers(rank) {
			if sh.MeshDials(r, rank) && r < len(in.Ranks) && in.Ranks[r].NodeID == peer {
				return true
			}
		}
		return false
	}
	prev, ok := sh.Prev(rank)
	return ok && in.Ranks[prev].NodeID == peer
}

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { a.Close(); b.Close() }) }
	go func() { io.Copy(a, b); closeBoth() }()
	go func() { io.Copy(b, a); closeBoth() }()
}

// RelayRoutes are the method and path of every route Handler serves.
func RelayRoutes() [][2]string {
	return [][2]string{{http.MethodGet, runnerapi.RankLinkPath}, {http.MethodGet, runnerapi.RankAddrPath}, {http.MethodPost, runnerapi.RankTracePath}}
}

// Handler serves the runners of this node: their rank links and spans.
func (r *Relay) Handler() http.Handler {
	mux := http.NewServeMux()
	handlers := map[string]http.HandlerFunc{runnerapi.RankLinkPath: r.rankLink, runnerapi.RankAddrPath: r.rankAddr, runnerapi.RankTracePath: r.rankTrace}
	for _, rt := range RelayRoutes() {
		mux.HandleFunc(rt[0]+" "+rt[1], handlers[rt[1]])
	}
	return mux
}

// runnerAuth checks a runner's bearer token.
func (r *Relay) runnerAuth(req *http.Request) (state.Instance, int, bool) {
	tok, ok := strings.CutPrefix(req.Header.Get(runnerapi.AuthHeader), runnerapi.BearerPrefix)
	if !ok {
		return state.Instance{}, 0, false
	}
	return r.s.Authorize(tok)
}

// rankLink upgrades a runner's request into its outbound rank link and
// connects it to the next rank, here or on its node.
func (r *Relay) rankLink(w http.ResponseWriter, req *http.Request) {
	in, rank, ok := r.runnerAuth(req)
	if !ok {
		http.Error(w, "unknown runner token", http.StatusUnauthorized)
		return
	}
	if req.Header.Get("Upgrade") != runnerapi.RankLinkUpgrade {
		http.Error(w, "want Upgrade: "+runnerapi.RankLinkUpgrade, http.StatusBadRequest)
		return
	}
	next, kind, err := linkTarget(in, rank, req.URL.Query().Get(runnerapi.RankLinkToParam))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	node := in.Ranks[next].NodeID
	ctx, cancel := context.WithTimeout(req.Context(), dialWait)
	defer cancel()
	var down net.Conn
	if node == r.cfg.Self {
		down, err = r.s.DialRank(ctx, in.InstanceID, next, kind)
	} else {
		down, err = r.cfg.DialPeer(ctx, node, RankStreamID(in.InstanceID, next, kind))
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("rank %d on %s: %v", next, node, err), http.StatusServiceUnavailable)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		down.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Upgrade", runnerapi.RankLinkUpgrade)
	w.WriteHeader(http.StatusSwitchingProtocols)
	up, brw, err := hj.Hijack()
	if err != nil {
		down.Close()
		return
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		down.Write(b)
	}
	brw.Writer.Flush()
	splice(up, down)
}

// linkTarget is the rank (of the instance's) and port that rank's link
// goes to: with to (a rank of its tensor-parallel group, below its own),
// that rank's mesh port; else the next pipeline stage's first rank.
func linkTarget(in state.Instance, rank int, to string) (int, LinkKind, error) {
	sh := in.Shape()
	stage, slice := sh.Stage(rank)
	if to != "" {
		t, err := strconv.Atoi(to)
		if err != nil || t < 0 || !sh.MeshDials(rank, sh.Rank(stage, t)) {
			return 0, 0, fmt.Errorf("rank link from rank %d to %q: want a lower rank of its tensor-parallel group (of %d)", rank, to, sh.Group())
		}
		return sh.Rank(stage, t), MeshLink, nil
	}
	next, ok := sh.Next(rank)
	if !ok {
		return 0, 0, fmt.Errorf("rank link from rank %d: it links to no pipeline stage (stage %d of %d, group rank %d)", rank, stage, sh.Pipeline, slice)
	}
	return next, PipeLink, nil
}

// rankAddr answers a tensor-parallel runner with the direct address of a
// lower rank of its group: that rank's node's peer host and the port of
// the listener its agent granted it; 404 when there is none.
func (r *Relay) rankAddr(w http.ResponseWriter, req *http.Request) {
	in, rank, ok := r.runnerAuth(req)
	if !ok {
		http.Error(w, "unknown runner token", http.StatusUnauthorized)
		return
	}
	addr, code, err := directAddr(r.cfg.State(), in, rank, req.URL.Query().Get(runnerapi.RankLinkToParam), r.cfg.PeerHost)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	fmt.Fprint(w, addr)
}

// directAddr is where rank's link to lower rank to of its group goes
// directly; else an error with its HTTP status (400: not a lower rank of
// its group; 404: no direct address known).
func directAddr(st state.State, in state.Instance, rank int, to string, peerHost func(string) (string, bool)) (string, int, error) {
	next, kind, err := linkTarget(in, rank, to)
	if err == nil && kind != MeshLink {
		err = fmt.Errorf("rank addr from rank %d: want ?%s= a lower rank of its group", rank, runnerapi.RankLinkToParam)
	}
	if err != nil {
		return "", http.StatusBadRequest, err
	}
	rs := st.Runners[RunnerID(in.InstanceID, next)]
	node := in.Ranks[next].NodeID
	host, known := "", false
	if peerHost != nil {
		host, known = peerHost(node)
	}
	if rs.LinkPort == 0 || !known {
		return "", http.StatusNotFound, fmt.Errorf("rank %d on %s has no direct link address (port %d, host known %v)", next, node, rs.LinkPort, known)
	}
	return net.JoinHostPort(host, strconv.Itoa(rs.LinkPort)), 0, nil
}

func (r *Relay) rankTrace(w http.ResponseWriter, req *http.Request) {
	in, rank, ok := r.runnerAuth(req)
	if !ok {
		http.Error(w, "unknown runner token", http.StatusUnauthorized)
		return
	}
	var b runnerapi.RankTrace
	if err := json.NewDecoder(io.LimitReader(req.Body, maxRankTraceBytes)).Decode(&b); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := ident.ValidTraceID(b.TraceID); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// A stage of a pipeline of groups records as its pipeline rank; its
	// spans go where the instance's rank is.
	for i := range b.Spans {
		b.Spans[i].Rank = rank
	}
	r.cfg.ShipRank(b.TraceID, rank, b.Spans, b.Counters, in.Ranks)
	w.WriteHeader(http.StatusNoContent)
}
