package main

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A tensor-parallel runner's direct links (see agent/supervisor's
// direct.go): the listener its agent granted it and the TLS configs of
// its instance's link secret.
type directLinks struct {
	ln             net.Listener // nil: none granted (it still dials)
	server, client *tls.Config
}

// directTimeout bounds a direct link's dial and TLS handshake.
const directTimeout = 3 * time.Second

// directFromEnv reads the agent's grant: nil when it gave no link secret.
func directFromEnv(getenv func(string) string) (*directLinks, error) {
	sec := getenv(runnerapi.LinkSecretEnv)
	if sec == "" {
		return nil, nil
	}
	secret, err := hex.DecodeString(sec)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", runnerapi.LinkSecretEnv, err)
	}
	d := &directLinks{}
	if d.server, d.client, err = collective.LinkTLS(secret); err != nil {
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
func (d *directLinks) dial(ctx context.Context, agentAPI, token string, r int, log *slog.Logger) net.Conn {
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
	return collective.MarkDirect(c)
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
		return collective.MarkDirect(tc), nil
	}
}

// checked accepts from a listener and checks each connection in a
// goroutine of its own, so that one that sends nothing does not hold up
// the others; Accept yields those that passed (check's connection), and
// the others are closed. At most maxChecking are checked at once (more are
// closed as they come), and one that passed waits at most parkWait for
// Accept: its dialler waits 10 s for an answer, then dials again, and a
// stale connection must not be taken for the new one.
type checked struct {
	ln      net.Listener
	conns   chan net.Conn
	err     error         // why the listener stopped, once stopped is closed
	stopped chan struct{} // the listener's Accept failed
	done    chan struct{} // Close was called
	once    sync.Once
}

const (
	maxChecking = 16
	parkWait    = 5 * time.Second
)

func checking(ln net.Listener, check func(net.Conn) (net.Conn, error)) net.Listener {
	l := &checked{ln: ln, conns: make(chan net.Conn), stopped: make(chan struct{}), done: make(chan struct{})}
	slots := make(chan struct{}, maxChecking)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				l.err = err
				close(l.stopped)
				return
			}
			select {
			case slots <- struct{}{}:
			default:
				c.Close()
				continue
			}
			go func() {
				defer func() { <-slots }()
				cc, err := check(c)
				if err != nil {
					c.Close()
					return
				}
				park := time.NewTimer(parkWait)
				defer park.Stop()
				select {
				case l.conns <- cc:
				case <-park.C:
					cc.Close()
				case <-l.stopped:
					cc.Close()
				case <-l.done:
					cc.Close()
				}
			}()
		}
	}()
	return l
}

func (l *checked) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.stopped:
		return nil, l.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *checked) Close() error {
	err := net.ErrClosed
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
	})
	return err
}

func (l *checked) Addr() net.Addr { return l.ln.Addr() }

// merged accepts from several listeners at once; Close closes them all.
type merged struct {
	conns chan net.Conn
	errs  chan error
	lns   []net.Listener
	once  sync.Once
	done  chan struct{}
}

func mergeListeners(lns ...net.Listener) net.Listener {
	m := &merged{conns: make(chan net.Conn), errs: make(chan error, len(lns)), lns: lns, done: make(chan struct{})}
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					m.errs <- err
					return
				}
				select {
				case m.conns <- c:
				case <-m.done:
					c.Close()
					return
				}
			}
		}()
	}
	return m
}

func (m *merged) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case err := <-m.errs:
		return nil, err
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *merged) Close() error {
	var errs []error
	m.once.Do(func() {
		close(m.done)
		for _, ln := range m.lns {
			errs = append(errs, ln.Close())
		}
	})
	return errors.Join(errs...)
}

func (m *merged) Addr() net.Addr { return m.lns[0].Addr() }
