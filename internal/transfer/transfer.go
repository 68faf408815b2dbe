// Package transfer holds what every bulk transfer of the agent shares
// (model pulls from a hub or a registry, shard pulls, shards between
// nodes): an HTTP transport whose connection, TLS handshake and response
// headers time out, and a watch on a response body that gives up on a
// connection that stalls, so that the transfer resumes on a new one
// instead of hanging.
package transfer

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults.
const (
	// DialTimeout bounds a TCP connect, TLSTimeout a TLS handshake.
	DialTimeout = 10 * time.Second
	TLSTimeout  = 10 * time.Second
	// HeaderTimeout bounds the wait for a response's headers once the
	// request is sent.
	HeaderTimeout = 30 * time.Second
	// DefaultStall is how long a connection may bring less than StallBytes
	// before it is given up (--download-idle-timeout).
	DefaultStall = 15 * time.Second
	// StallBytes is the least a connection must bring per stall window: a
	// trickle of a few bytes a second is a stall too (a CDN edge gone bad,
	// a Wi-Fi link that holds the socket open), not progress.
	StallBytes = 16 << 10
)

// ErrStalled ends a read from a watched body that brought less than
// StallBytes within its window.
var ErrStalled = errors.New("connection stalled")

// Transport is an http.Transport with dial, TLS and response-header
// timeouts and proxies from the environment, as http.DefaultTransport, but
// with no transfer ever waiting on a dead peer for the OS's own timeouts.
func Transport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   TLSTimeout,
		ResponseHeaderTimeout: HeaderTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          32,
		MaxIdleConnsPerHost:   8,
		ForceAttemptHTTP2:     true,
	}
}

// Client is an http.Client over Transport. It has no overall timeout: a
// download may rightly take hours; Watch bounds each connection instead.
func Client() *http.Client { return &http.Client{Transport: Transport()} }

// Watch returns body, watched: once window passes with less than
// StallBytes read, the body is closed, and the read in progress and every
// later one fail with an error that wraps ErrStalled and names host. A
// window of 0 or less returns body as it is. Close the result, not body.
func Watch(body io.ReadCloser, window time.Duration, host string) io.ReadCloser {
	if window <= 0 {
		return body
	}
	w := &watched{body: body, window: window, host: host}
	w.timer = time.AfterFunc(window, w.check)
	return w
}

type watched struct {
	body   io.ReadCloser
	window time.Duration
	host   string
	timer  *time.Timer

	mu      sync.Mutex // guards the fields below
	got     int64      // bytes read in this window
	stalled bool
	closed  bool
}

// check runs at each window's end: too little came, or the window starts
// again.
func (w *watched) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.got < StallBytes {
		w.stalled, w.closed = true, true
		w.body.Close() // unblocks the read in progress
		return
	}
	w.got = 0
	w.timer.Reset(w.window)
}

func (w *watched) Read(p []byte) (int, error) {
	n, err := w.body.Read(p)
	w.mu.Lock()
	w.got += int64(n)
	stalled := w.stalled
	w.mu.Unlock()
	if stalled {
		return n, w.stallErr()
	}
	return n, err
}

func (w *watched) stallErr() error {
	return fmt.Errorf("%w: %s sent less than %d KiB in %v", ErrStalled, w.host, StallBytes>>10, w.window)
}

func (w *watched) Close() error {
	w.timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil // closed when it stalled
	}
	w.closed = true
	return w.body.Close()
}
