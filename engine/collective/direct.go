package collective

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Direct is a tensor-parallel runner's grant of direct links (see
// agent/supervisor's direct.go): the listener its agent granted it and
// the TLS configs of its instance's link secret.
type Direct struct {
	ln             net.Listener // nil: none granted (it still dials)
	server, client *tls.Config
}

// directTimeout bounds a direct link's dial and TLS handshake.
const directTimeout = 3 * time.Second

// DirectFromEnv reads the agent's grant from the runner's environment
// (runnerapi.LinkSecretEnv, runnerapi.DirectFDEnv): nil when it gave no
// link secret.
func DirectFromEnv(getenv func(string) string) (*Direct, error) {
	sec := getenv(runnerapi.LinkSecretEnv)
	if sec == "" {
		return nil, nil
	}
	secret, err := hex.DecodeString(sec)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", runnerapi.LinkSecretEnv, err)
	}
	d := &Direct{}
	if d.server, d.client, err = LinkTLS(secret); err != nil {
		return nil, err
	}
	if fd := getenv(runnerapi.DirectFDEnv); fd != "" {
		n, err := strconv.Atoi(fd)
		if err != nil || n < 3 {
			return nil, fmt.Errorf("$%s=%q: want an inherited descriptor (3 or more)", runnerapi.DirectFDEnv, fd)
		}
		f := os.NewFile(uintptr(n), "direct-link-listener")
		d.ln, err = net.FileListener(f)
		f.Close() // FileListener holds its own copy
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", runnerapi.DirectFDEnv, err)
		}
	}
	return d, nil
}

// dial links to rank r directly, if the agent knows its address and the
// handshake succeeds; nil otherwise (the caller goes through the agent).
func (d *Direct) dial(ctx context.Context, agentAPI, token string, r int, log *slog.Logger) net.Conn {
	if d == nil {
		return nil
	}
	addr, err := runnerapi.RankAddr(ctx, agentAPI, token, r)
	if err != nil || addr == "" {
		log.Debug("no direct link address", "to", r, "err", err)
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, directTimeout)
	defer cancel()
	c, err := (&tls.Dialer{Config: d.client}).DialContext(dctx, "tcp", addr)
	if err != nil {
		log.Warn("direct rank link failed; linking through the agent", "to", r, "addr", addr, "err", err)
		return nil
	}
	log.Info("direct rank link", "to", r, "addr", addr)
	return MarkDirect(c)
}

// tlsAccepted is a check for checking: the connection that completes the
// group's TLS handshake (strangers on the peer network do not).
func tlsAccepted(cfg *tls.Config) func(net.Conn) (net.Conn, error) {
	return func(c net.Conn) (net.Conn, error) {
		tc := tls.Server(c, cfg)
		tc.SetDeadline(time.Now().Add(directTimeout))
		if err := tc.Handshake(); err != nil {
			return nil, err
		}
		tc.SetDeadline(time.Time{})
		return MarkDirect(tc), nil
	}
}
