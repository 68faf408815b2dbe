package collective

import (
	"errors"
	"net"
	"sync"
	"time"
)

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
