package delayproxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards each TCP connection it accepts to a new connection
// from its dial function, holding every chunk it reads for Delay before
// writing it on, in both directions. Each direction has a reader and a
// writer goroutine joined by a queue of (deliverAt, bytes), so the delay
// adds latency without limiting throughput (up to the queue's length).
// It is pure Go: no netem needed.
type Proxy struct {
	ln    net.Listener
	dial  func(context.Context) (net.Conn, error)
	delay time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	accepted, dialFailed atomic.Int64
	forwarded            [2]atomic.Int64 // bytes: client→server, server→client

	lateMu             sync.Mutex
	chunks             int64
	lateTotal, lateMax time.Duration // how much later than Delay chunks were written
}

// delayQueueLen bounds the chunks in flight per direction.
const delayQueueLen = 4096

// New serves ln until Close. dial opens the upstream connection
// for each accepted one (e.g. with Dial, inside a namespace).
func New(ln net.Listener, delay time.Duration, dial func(context.Context) (net.Conn, error)) *Proxy {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, dial: dial, delay: delay, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p
}

// Addr is the listening address.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// Accepted counts the connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// DialFailed counts the accepted connections whose upstream dial failed.
func (p *Proxy) DialFailed() int64 { return p.dialFailed.Load() }

// Forwarded returns the bytes forwarded client→upstream and upstream→client.
func (p *Proxy) Forwarded() (up, down int64) {
	return p.forwarded[0].Load(), p.forwarded[1].Load()
}

// Lateness reports how many chunks were forwarded and by how much their
// write started later than Delay after their read: the proxy's own error.
func (p *Proxy) Lateness() (chunks int64, mean, max time.Duration) {
	p.lateMu.Lock()
	defer p.lateMu.Unlock()
	if p.chunks > 0 {
		mean = p.lateTotal / time.Duration(p.chunks)
	}
	return p.chunks, mean, p.lateMax
}

func (p *Proxy) noteLate(d time.Duration) {
	p.lateMu.Lock()
	p.chunks++
	p.lateTotal += d
	p.lateMax = max(p.lateMax, d)
	p.lateMu.Unlock()
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// track registers c for Close; false when the proxy is already closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			up, err := p.dial(p.ctx)
			if err != nil {
				p.dialFailed.Add(1)
				return
			}
			if !p.track(up) {
				up.Close()
				return
			}
			defer p.untrack(up)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(up, c, &p.forwarded[0]) }()
			go func() { defer wg.Done(); p.pipe(c, up, &p.forwarded[1]) }()
			wg.Wait()
		}()
	}
}

type delayedChunk struct {
	at time.Time
	b  []byte
}

// pipe copies src to dst, each chunk delayed by p.delay after it was read.
// On EOF it half-closes dst once the queue is flushed; on a write error it
// closes both, so that the other direction ends too.
func (p *Proxy) pipe(dst, src net.Conn, count *atomic.Int64) {
	q := make(chan delayedChunk, delayQueueLen)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- delayedChunk{time.Now().Add(p.delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		sleepUntil(ch.at)
		p.noteLate(time.Since(ch.at))
		if _, err := dst.Write(ch.b); err != nil {
			dst.Close()
			src.Close()
			for range q { // let the reader see its error and end
			}
			return
		}
		count.Add(int64(len(ch.b)))
	}
	if hc, ok := dst.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
	} else {
		dst.Close()
	}
}
