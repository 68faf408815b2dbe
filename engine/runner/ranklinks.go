package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// The pipeline's rank links: a rank accepts the previous rank's link on
// its rank port (through the agent, which presents the rank's token
// first) and dials the next one.

// connect sets up both rank links: it accepts the previous rank's (the
// agent presents our token first) while dialling the next one, retrying
// while that rank is not up yet.
func (s *Server) connect(ctx context.Context) (in, out *Link, err error) {
	if s.cfg.DialNext == nil || s.cfg.RankListener == nil {
		return nil, nil, fmt.Errorf("rank %d of %s: no rank links configured", s.cfg.Rank, s.cfg.Shape)
	}
	n, r := s.cfg.Shape.Pipeline, s.stage()
	prev, next := (r+n-1)%n, (r+1)%n
	inc, errc, stop := s.acceptPrev(prev)
	defer stop()
	for {
		c, derr := s.cfg.DialNext(ctx)
		if derr == nil {
			l := NewLink(c)
			derr = l.handshake(linkHello{Instance: s.cfg.Instance, From: r, To: next}, func(h linkHello) error {
				if h.Instance != s.cfg.Instance || h.From != next || h.To != r {
					return fmt.Errorf("rank link to %d answered as %+v", next, h)
				}
				return nil
			})
			if derr == nil {
				out = l
				break
			}
			l.Close()
		}
		s.log.Debug("rank link not up yet", "to", next, "err", derr)
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(linkRetry):
		}
	}
	select {
	case in = <-inc:
	case err := <-errc:
		out.Close()
		return nil, nil, err
	case <-ctx.Done():
		out.Close()
		return nil, nil, ctx.Err()
	}
	s.log.Info("rank links up", "from", prev, "to", next)
	return in, out, nil
}

// maxChecking bounds the connections a rank port checks at once; more
// are closed as they come.
const maxChecking = 16

// acceptPrev accepts the previous rank's link on the rank port. Each
// connection is checked in a goroutine of its own: one that sends nothing
// must not hold the port for the agent's. The first link that passes
// comes on the channel; stop ends the accepting (at the next connection)
// and closes a link nobody took.
func (s *Server) acceptPrev(prev int) (<-chan *Link, <-chan error, func()) {
	links, errc := make(chan *Link, 1), make(chan error, 1)
	var mu sync.Mutex
	var won, stopped bool
	over := func() bool { mu.Lock(); defer mu.Unlock(); return won || stopped }
	checking := make(chan struct{}, maxChecking)
	go func() {
		for {
			c, err := s.cfg.RankListener.Accept()
			if err != nil {
				errc <- fmt.Errorf("accept rank link: %w", err)
				return
			}
			if over() {
				c.Close()
				return
			}
			select {
			case checking <- struct{}{}:
			default:
				c.Close()
				continue
			}
			go func() {
				defer func() { <-checking }()
				l, err := s.acceptRankLink(c, prev)
				if err != nil {
					s.log.Warn("refused a rank link", "err", err)
					c.Close()
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if won || stopped {
					l.Close()
					return
				}
				won = true
				links <- l
			}()
		}
	}()
	stop := func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		select {
		case l := <-links:
			l.Close()
		default:
		}
	}
	return links, errc, stop
}

// acceptRankLink checks a connection on the rank port: first the agent's
// hello with our token (ReadAuth: at most 4 KiB read, and nothing sent,
// before the token is checked), then ours to the previous rank, and its.
func (s *Server) acceptRankLink(c net.Conn, prev int) (*Link, error) {
	if err := runnerapi.ReadAuth(c, s.cfg.Token); err != nil {
		return nil, err
	}
	l := NewLink(c)
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	err := l.sendJSON(frameHello, linkHello{Instance: s.cfg.Instance, From: s.stage(), To: prev})
	c.SetWriteDeadline(time.Time{})
	if err != nil {
		return nil, err
	}
	if err := expectHello(l, s.cfg.Instance, prev, s.stage()); err != nil {
		return nil, err
	}
	return l, nil
}

// expectHello reads the previous rank's hello on an accepted link.
func expectHello(l *Link, instance string, from, to int) error {
	l.c.SetDeadline(time.Now().Add(10 * time.Second))
	defer l.c.SetDeadline(time.Time{})
	typ, p, _, err := l.recvFrame()
	if err != nil {
		return err
	}
	var h linkHello
	if typ != frameHello || json.Unmarshal(p, &h) != nil || h.Instance != instance || h.From != from || h.To != to {
		return fmt.Errorf("rank link: hello %s, want instance %s from rank %d", p, instance, from)
	}
	return nil
}
