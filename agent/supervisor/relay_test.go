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
	}{{"inst-1a2b", 0}, {"inst-r2", 3}, {"a", 12}} {
		id := RankStreamID(c.inst, c.rank)
		inst, rank, err := parseRankStreamID(id)
		if err != nil || inst != c.inst || rank != c.rank {
			t.Errorf("%q: %q %d %v", id, inst, rank, err)
		}
	}
	for _, bad := range []string{"", "-r1", "inst", "inst-r", "inst-rx", "inst-r-1", "../x-r1", "a/b-r0"} {
		if _, _, err := parseRankStreamID(bad); err == nil {
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
		{"c", RankStreamID("inst-1", 1)}, // not rank 0's node
		{"a", RankStreamID("inst-9", 1)}, // no such instance
		{"a", RankStreamID("inst-1", 5)}, // no such rank
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

// TestRunnerEndpointsNeedTheToken: the /internal endpoints answer only a
// runner of this node, by its bearer token.
func TestRunnerEndpointsNeedTheToken(t *testing.T) {
	r, shipped := testRelay(t, state.New())
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	for _, c := range []struct{ method, path, auth string }{
		{http.MethodGet, "/internal/rank-link", ""},
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
