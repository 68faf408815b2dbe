package collective

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Group is how one runner's tensor-parallel rank links to the rest of its
// group: the one place a runner's group links are made. Either every
// rank's loopback address is given (Addrs, with the group's Token: tp-bench,
// no agent), or the runner's agent arranges them (AgentAPI, knowing the
// runner by RunnerToken, for Instance): the rank dials each lower rank
// directly where the agent granted direct links (Direct: TLS under the
// instance's link secret, at the address the agent gives), else through
// the agent (which relays to that rank's node over the cluster's TLS
// links), and it accepts the higher ranks on its granted listener and on a
// loopback port where the agent presents this runner's token first. The
// agent's side is agent/supervisor's relay and direct.go.
type Group struct {
	Rank, Ranks int
	// Wire is how the all-reduces send their values.
	Wire Wire

	Addrs []string
	Token string

	AgentAPI, Instance, RunnerToken string
	Direct                          *Direct // nil: none granted
	Log                             *slog.Logger
}

// Listen listens where the rank accepts its group's higher ranks, and
// returns the listener and the function that forms the group (every rank
// calls it before loading its slice, runner.Config.TPConnect). The
// listener is the runner's loopback port, which the agent connects to
// (Health.MeshAddr), when the agent arranges the links.
func (g Group) Listen() (func(context.Context) (*Mesh, error), net.Listener, error) {
	if g.Log == nil {
		g.Log = slog.New(slog.DiscardHandler)
	}
	var connect func(context.Context) (*Mesh, error)
	var ln net.Listener
	var err error
	if len(g.Addrs) > 0 {
		connect, ln, err = g.loopback()
	} else {
		connect, ln, err = g.viaAgent()
	}
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context) (*Mesh, error) {
		m, err := connect(ctx)
		if m != nil {
			m.Wire = g.Wire
		}
		return m, err
	}, ln, nil
}

// loopback listens on this rank's address of Addrs: loopback only, since
// a runner never listens beyond this machine.
func (g Group) loopback() (func(context.Context) (*Mesh, error), net.Listener, error) {
	switch {
	case len(g.Addrs) != g.Ranks:
		return nil, nil, fmt.Errorf("--tp-addrs has %d addresses for %d ranks", len(g.Addrs), g.Ranks)
	case g.Token == "":
		return nil, nil, fmt.Errorf("$%s is not set (every rank of the group presents it)", runnerapi.GroupTokenEnv)
	}
	for _, a := range g.Addrs {
		host, _, err := net.SplitHostPort(a)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return nil, nil, fmt.Errorf("--tp-addrs: %q is not a loopback host:port", a)
		}
	}
	ln, err := net.Listen("tcp", g.Addrs[g.Rank])
	if err != nil {
		return nil, nil, fmt.Errorf("tensor-parallel listen: %w", err)
	}
	return func(ctx context.Context) (*Mesh, error) {
		return Connect(ctx, g.Rank, g.Ranks, g.Addrs, ln, g.Token)
	}, ln, nil
}

// viaAgent links through the agent, and directly where it granted it. The
// group's token is the instance id: the links are already authenticated
// (the link secret, or the agents' runner tokens and cluster key).
func (g Group) viaAgent() (func(context.Context) (*Mesh, error), net.Listener, error) {
	if g.AgentAPI == "" || g.Instance == "" {
		return nil, nil, errors.New("--agent-api and --instance are required with --tp-ranks > 1 and no --tp-addrs")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("tensor-parallel listen: %w", err)
	}
	dial := func(ctx context.Context, r int) (net.Conn, error) {
		if c := g.Direct.dial(ctx, g.AgentAPI, g.RunnerToken, r, g.Log); c != nil {
			return c, nil
		}
		return runnerapi.DialRankLinkTo(ctx, g.AgentAPI, g.RunnerToken, r)
	}
	accept := checking(ln, agentAuth(g.RunnerToken))
	if g.Direct != nil && g.Direct.ln != nil {
		accept = mergeListeners(accept, checking(g.Direct.ln, tlsAccepted(g.Direct.server)))
	}
	return func(ctx context.Context) (*Mesh, error) {
		m, err := ConnectWith(ctx, g.Rank, g.Ranks, dial, accept, g.Instance)
		accept.Close() // the group is formed (or failed): no more links come
		return m, err
	}, ln, nil
}

// agentAuth is a check for checking: the connection on which the agent
// presented this runner's token.
func agentAuth(token string) func(net.Conn) (net.Conn, error) {
	return func(c net.Conn) (net.Conn, error) {
		if err := runnerapi.ReadAuth(c, token); err != nil {
			return nil, err
		}
		return c, nil
	}
}

// SplitAddrs reads --tp-addrs: comma-separated, "" for none.
func SplitAddrs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
