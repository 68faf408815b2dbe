package runnerapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
)

// The runner↔agent protocol. A runner of a multi-rank instance reaches
// the other ranks only through its agent's loopback API: it asks for its
// outbound rank link (GET RankLinkPath, upgraded to RankLinkUpgrade; the
// agent relays the connection to the next rank) and posts its spans of a
// traced request (POST RankTracePath with a RankTrace). Both carry the
// runner's token, which the agent hands it in $TokenEnv, as
// "Authorization: Bearer TOKEN". The agent serves these paths (see
// agent/supervisor's relay); this file is the runner's side.
const (
	// TokenEnv carries the runner's bearer token from the agent (not on
	// the command line, where every local user could read it).
	TokenEnv = "ORRERY_RUNNER_TOKEN"
	// RankLinkPath is the agent's rank-link endpoint (GET, upgraded).
	RankLinkPath = "/internal/rank-link"
	// RankTracePath is the agent's span upload endpoint (POST, JSON
	// RankTrace; answered 204).
	RankTracePath = "/internal/rank-trace"
	// RankAddrPath is the agent's endpoint that gives a tensor-parallel
	// rank the direct address of a lower rank of its group (GET, ?to=N;
	// 200 with "host:port", or 404 when there is none: link through the
	// agent instead).
	RankAddrPath = "/internal/rank-addr"
	// LinkSecretEnv carries the group's direct-link secret (hex), and
	// DirectFDEnv the descriptor of the listener the agent granted for
	// direct links from the higher ranks (see collective.LinkTLS).
	LinkSecretEnv = "ORRERY_LINK_SECRET"
	// GroupTokenEnv carries the token every link of a tensor-parallel
	// group presents when its ranks link over loopback addresses
	// (tp-bench; through the agent, the instance id is the group's).
	GroupTokenEnv = "ORRERY_TP_TOKEN"
	DirectFDEnv   = "ORRERY_DIRECT_FD"
	// RankLinkUpgrade is the Upgrade token of a rank-link request.
	RankLinkUpgrade = "orrery-rank"
	// AuthHeader carries BearerPrefix + the runner's token.
	AuthHeader   = "Authorization"
	BearerPrefix = "Bearer "
)

// Timeouts of the runner's calls to its agent.
const (
	rankLinkDialTimeout   = 2 * time.Second
	rankLinkAnswerTimeout = 10 * time.Second
	rankTraceTimeout      = 10 * time.Second
)

// RankTrace is the body of POST RankTracePath: a rank's spans of a traced
// request, and the error that ended it, if any.
type RankTrace struct {
	TraceID string       `json:"traceId"`
	Spans   []trace.Span `json:"spans"`
	// Counters are the rank's counter samples (its outbound link's bytes,
	// LinkCounter).
	Counters []trace.CounterSample `json:"counters,omitempty"`
	Error    string                `json:"error,omitempty"`
}

// DialRankLink asks the agent at agentAPI (host:port) for this rank's
// outbound link: an upgraded HTTP connection the agent relays to the next
// rank. It speaks HTTP/1.1 by hand because the link is a raw net.Conn
// after the 101 answer.
func DialRankLink(ctx context.Context, agentAPI, token string) (net.Conn, error) {
	return dialRankLink(ctx, agentAPI, token, RankLinkPath)
}

// DialRankLinkTo asks the agent for a link to rank to of this runner's
// tensor-parallel group (a lower rank: the higher one dials).
func DialRankLinkTo(ctx context.Context, agentAPI, token string, to int) (net.Conn, error) {
	return dialRankLink(ctx, agentAPI, token, RankLinkPath+"?"+RankLinkToParam+"="+strconv.Itoa(to))
}

// RankLinkToParam names the rank a tensor-parallel rank link goes to.
const RankLinkToParam = "to"

func dialRankLink(ctx context.Context, agentAPI, token, path string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: rankLinkDialTimeout}).DialContext(ctx, "tcp", agentAPI)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%s: %s%s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n",
		path, agentAPI, AuthHeader, BearerPrefix, token, RankLinkUpgrade)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(rankLinkAnswerTimeout))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("rank link: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		c.Close()
		return nil, fmt.Errorf("rank link: %s %s", resp.Status, strings.TrimSpace(string(b)))
	}
	c.SetReadDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// bufConn reads what the HTTP reader buffered first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// PostRankTrace hands a rank's spans of a traced request to the agent at
// agentAPI, which ships them to the master.
func PostRankTrace(ctx context.Context, agentAPI, token string, t RankTrace) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rankTraceTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+agentAPI+RankTracePath, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set(AuthHeader, BearerPrefix+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("rank trace: %s %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// RankAddr asks the agent for the direct address of rank to of this
// runner's tensor-parallel group; "" when it has none (the rank has no
// direct listener, or its node's address is unknown).
func RankAddr(ctx context.Context, agentAPI, token string, to int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, rankLinkAnswerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+agentAPI+RankAddrPath+"?"+RankLinkToParam+"="+strconv.Itoa(to), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set(AuthHeader, BearerPrefix+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch resp.StatusCode {
	case http.StatusOK:
		addr := strings.TrimSpace(string(b))
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return "", fmt.Errorf("rank addr: %q: %w", addr, err)
		}
		return addr, nil
	case http.StatusNotFound:
		return "", nil
	}
	return "", fmt.Errorf("rank addr: %s %s", resp.Status, strings.TrimSpace(string(b)))
}

// AuthFrame is the type of the first frame on a runner's rank port, the
// agent's hello: a rank link frame (type byte, uint32 little-endian
// length, payload) whose payload is JSON {"token": …}. engine/runner's
// rank links open with a hello frame of the same type.
const AuthFrame byte = 1

// maxAuthFrame bounds the agent's first frame on a runner's rank port.
const maxAuthFrame = 4 << 10

// authHello is the payload of the agent's hello.
type authHello struct {
	Token string `json:"token"`
}

// SendAuth is what the agent sends first on a connection to a runner's
// rank port: a hello carrying that runner's token.
func SendAuth(c net.Conn, token string) error {
	j, err := json.Marshal(authHello{Token: token})
	if err != nil {
		return err
	}
	b := make([]byte, 5, 5+len(j))
	b[0] = AuthFrame
	binary.LittleEndian.PutUint32(b[1:], uint32(len(j)))
	_, err = c.Write(append(b, j...))
	return err
}

// ReadAuth reads what SendAuth wrote, byte for byte (nothing after it:
// the link's own protocol follows), and checks the token.
func ReadAuth(c net.Conn, token string) error {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint32(hdr[1:])
	if hdr[0] != AuthFrame || n > maxAuthFrame {
		return fmt.Errorf("rank port: a frame of type %d and %d bytes, want the agent's hello", hdr[0], n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	var h authHello
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("rank port: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(h.Token), []byte(token)) != 1 {
		return errors.New("rank port: wrong token")
	}
	return nil
}

// LinkSampleEvery is how often a traced request's rank samples the bytes
// its outbound link has sent (plus once when the request starts on the
// rank and once when it ends there).
const LinkSampleEvery = 100 * time.Millisecond

// LinkCounter names the counter of the bytes rank to's inbound link has
// received from this rank so far (frames, headers included): the agent
// turns its samples into the link's MB/s track.
func LinkCounter(to int) string { return linkCounterPrefix + strconv.Itoa(to) }

const linkCounterPrefix = "link → rank "

// ParseLinkCounter is the rank a LinkCounter name names.
func ParseLinkCounter(name string) (int, bool) {
	r, ok := strings.CutPrefix(name, linkCounterPrefix)
	n, err := strconv.Atoi(r)
	return n, ok && err == nil && n >= 0
}
