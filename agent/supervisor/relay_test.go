package supervisor

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/trace"
)

func TestRankStreamIDRoundTrip(t *testing.T) {
	for _, c := range []struct {
		inst string
		rank int
		kind LinkKind
	}{{"inst-1a2b", 0, PipeLink}, {"inst-r2", 3, PipeLink}, {"a", 12, MeshLink}, {"inst-m2", 1, PipeLink}, {"inst-r2", 2, MeshLink}} {
		id := RankStreamID(c.inst, c.rank, c.kind)
		inst, rank, kind, err := parseRankStreamID(id)
		if err != nil || inst != c.inst || rank != c.rank || kind != c.kind {
			t.Errorf("%q: %q %d %v %v", id, inst, rank, kind, err)
		}
	}
	for _, bad := range []string{"", "-r1", "-m1", "inst", "inst-r", "inst-m", "inst-rx", "inst-r-1", "inst-m-1", "../x-r1", "a/b-m0"} {
		if _, _, _, err := parseRankStreamID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func testRelay(t *testing.T, st state.State) (*Relay, *[]string) {
	t.Helper()
	s := New(Config{NodeID: "b"})
	var shipped []string
	r := s.Relay(RelayConfig{Self: "b", State: func() state.State { return st },
		DialPeer: func(context.Context, string, string) (net.Conn, error) {
			t.Error("dialled a peer")
			return nil, io.EOF
		},
		ShipRank: func(task string, rank int, _ []trace.Span, _ []trace.CounterSample, _ []state.ShardRange) {
			shipped = append(shipped, task)
		}})
	return r, &shipped
}

// TestAcceptRefusesStrangers: a rank link is taken only from the node that
// runs the receiving rank's predecessor.
func TestAcceptRefusesStrangers(t *testing.T) {
	st := state.New()
	st.Instances = map[string]state.Instance{"inst-1": {InstanceID: "inst-1", Ranks: []state.ShardRange{
		{Rank: 0, NodeID: "a"}, {Rank: 1, NodeID: "b"}}}}
	r, _ := testRelay(t, st)
	for _, c := range []struct{ peer, id string }{
		{"c", RankStreamID("inst-1", 1, PipeLink)}, // not rank 0's node
		{"a", RankStreamID("inst-9", 1, PipeLink)}, // no such instance
		{"a", RankStreamID("inst-1", 5, PipeLink)}, // no such rank
		{"a", RankStreamID("inst-1", 0, MeshLink)}, // not a tensor-parallel group
		{"a", "garbage"},
	} {
		here, there := net.Pipe()
		done := make(chan struct{})
		go func() { r.Accept(c.peer, c.id, here); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%+v: Accept did not return", c)
		}
		there.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := there.Read(make([]byte, 1)); err != io.EOF && err != io.ErrClosedPipe {
			t.Errorf("%+v: the link was not closed: %v", c, err)
		}
	}
}

// TestHybridLinks: in pipeline 2 × tensor 2 (ranks 0,1 stage 0 on nodes
// a,b; ranks 2,3 stage 1 on c,d), a rank's group links go to the lower
// ranks of its stage, its pipeline link from the first rank of one stage
// to the next's; anything else is refused, and a peer's link is taken
// only from a node that runs a rank that links to it.
func TestHybridLinks(t *testing.T) {
	in := state.Instance{InstanceID: "i", Tensor: 2, Ranks: []state.ShardRange{{NodeID: "a"}, {NodeID: "b"}, {NodeID: "c"}, {NodeID: "d"}}}
	for _, c := range []struct {
		rank     int
		to       string
		want     int
		wantKind LinkKind
		wantErr  bool
	}{
		{0, "", 2, PipeLink, false},
		{2, "", 0, PipeLink, false},
		{1, "0", 0, MeshLink, false},
		{3, "0", 2, MeshLink, false},
		{1, "", 0, 0, true},  // a follower has no pipeline link
		{3, "1", 0, 0, true}, // not below it
		{2, "0", 0, 0, true}, // rank 0 of its group dials no one
		{1, "x", 0, 0, true},
	} {
		got, kind, err := linkTarget(in, c.rank, c.to)
		if (err != nil) != c.wantErr || !c.wantErr && (got != c.want || kind != c.wantKind) {
			t.Errorf("rank %d to %q: %d %v %v, want %d %v (error %v)", c.rank, c.to, got, kind, err, c.want, c.wantKind, c.wantErr)
		}
	}
	for _, c := range []struct {
		rank int
		kind LinkKind
		peer string
		want bool
	}{
		{2, PipeLink, "a", true}, {0, PipeLink, "c", true}, {2, PipeLink, "b", false}, {3, PipeLink, "a", false},
		{0, MeshLink, "b", true}, {2, MeshLink, "d", true}, {0, MeshLink, "c", false}, {1, MeshLink, "a", false},
	} {
		if got := linksTo(in, c.rank, c.kind, c.peer); got != c.want {
			t.Errorf("linksTo(rank %d, %v, %s) = %v, want %v", c.rank, c.kind, c.peer, got, c.want)
		}
	}
	pipe := state.Instance{Ranks: in.Ranks[:3]}
	if !linksTo(pipe, 0, PipeLink, "c") || linksTo(pipe, 0, PipeLink, "b") {
		t.Error("a 3-rank pipeline's rank 0 should take its link from rank 2's node only")
	}
	if got, kind, err := linkTarget(pipe, 1, ""); err != nil || got != 2 || kind != PipeLink {
		t.Errorf("pipeline rank 1: %d %v %v, want rank 2", got, kind, err)
	}
}

// TestDirectAddr: a rank gets a lower rank of its group's direct address
// (its node's host, its runner's granted port); none without a port or a
// known host, and a refusal for anything but a lower rank of its group.
func TestDirectAddr(t *testing.T) {
	in := state.Instance{InstanceID: "i", Tensor: 2, Ranks: []state.ShardRange{{NodeID: "a"}, {NodeID: "b"}, {NodeID: "c"}, {NodeID: "d"}}}
	st := state.New()
	st.Runners = map[string]state.Runner{RunnerID("i", 0): {LinkPort: 4100}, RunnerID("i", 2): {LinkPort: 4102}}
	hosts := func(node string) (string, bool) {
		return map[string]string{"a": "10.0.0.1", "c": "fe80::1"}[node], node == "a" || node == "c"
	}
	for _, c := range []struct {
		rank int
		to   string
		want string
		code int
	}{
		{1, "0", "10.0.0.1:4100", 0},
		{3, "0", "[fe80::1]:4102", 0},
		{1, "", "", 400},  // a pipeline link, not a group's
		{0, "0", "", 400}, // not below it
	} {
		got, code, err := directAddr(st, in, c.rank, c.to, hosts)
		if got != c.want || code != c.code || (c.code != 0) != (err != nil) {
			t.Errorf("rank %d to %q: %q %d %v, want %q %d", c.rank, c.to, got, code, err, c.want, c.code)
		}
	}
	st.Runners[RunnerID("i", 2)] = state.Runner{}
	if _, code, err := directAddr(st, in, 3, "0", hosts); code != 404 || err == nil {
		t.Errorf("no port granted: %d %v, want 404", code, err)
	}
	if _, code, _ := directAddr(st, in, 1, "0", func(string) (string, bool) { return "", false }); code != 404 {
		t.Errorf("host unknown: %d, want 404", code)
	}
}

// TestRunnerEndpointsNeedTheToken: the /internal endpoints answer only a
// runner of this node, by its bearer token.
func TestRunnerEndpointsNeedTheToken(t *testing.T) {
	r, shipped := testRelay(t, state.New())
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	for _, c := range []struct{ method, path, auth string }{
		{http.MethodGet, "/internal/rank-link", ""},
		{http.MethodGet, "/internal/rank-addr?to=0", "Bearer nope"},
		{http.MethodGet, "/internal/rank-link", "Bearer nope"},
		{http.MethodPost, "/internal/rank-trace", "Bearer nope"},
		{http.MethodPost, "/internal/rank-trace", "nope"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(`{"traceId":"t","spans":[]}`))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s (%q): %d, want 401", c.method, c.path, c.auth, resp.StatusCode)
		}
	}
	if len(*shipped) != 0 {
		t.Errorf("shipped %v without a token", *shipped)
	}
}

// FuzzRankStreamID: any id a peer sends parses without panicking, and one
// that parses names a valid instance and a rank that read back the same.
func FuzzRankStreamID(f *testing.F) {
	f.Add("inst-1a2b-r0")
	f.Add("inst-m2-r3")
	f.Add("a-m12")
	f.Add("../x-r1")
	f.Fuzz(func(t *testing.T, id string) {
		inst, rank, kind, err := parseRankStreamID(id)
		if err != nil {
			return
		}
		back, r2, k2, err := parseRankStreamID(RankStreamID(inst, rank, kind))
		if err != nil || back != inst || r2 != rank || k2 != kind || rank < 0 {
			t.Fatalf("%q parsed as %q %d %v, which reads back as %q %d %v (%v)", id, inst, rank, kind, back, r2, k2, err)
		}
	})
}
