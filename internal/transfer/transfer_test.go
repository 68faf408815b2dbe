package transfer

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// blockingBody gives what it holds, then blocks until closed, as a socket
// held open with nothing on it does.
type blockingBody struct {
	data   []byte
	closed chan struct{}
}

func (b *blockingBody) Read(p []byte) (int, error) {
	if len(b.data) > 0 {
		n := copy(p, b.data)
		b.data = b.data[n:]
		return n, nil
	}
	<-b.closed
	return 0, errors.New("use of closed connection")
}

func (b *blockingBody) Close() error {
	select {
	case <-b.closed:
	default:
		close(b.closed)
	}
	return nil
}

func TestWatchGivesUpOnASilentBody(t *testing.T) {
	b := &blockingBody{data: []byte("some bytes"), closed: make(chan struct{})}
	w := Watch(b, 100*time.Millisecond, "cdn.example")
	defer w.Close()
	start := time.Now()
	got, err := io.ReadAll(w)
	if string(got) != "some bytes" || !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "cdn.example") {
		t.Fatalf("read %q, %v; want the bytes, then ErrStalled naming the host", got, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("gave up after %v", took)
	}
}

// trickle yields one byte per read, every tick.
type trickle struct {
	tick   time.Duration
	left   int
	closed chan struct{}
}

func (tr *trickle) Read(p []byte) (int, error) {
	if tr.left == 0 {
		return 0, io.EOF
	}
	select {
	case <-tr.closed:
		return 0, errors.New("closed")
	case <-time.After(tr.tick):
	}
	tr.left--
	p[0] = 'x'
	return 1, nil
}

func (tr *trickle) Close() error { close(tr.closed); return nil }

func TestWatchGivesUpOnATrickle(t *testing.T) {
	w := Watch(&trickle{tick: 5 * time.Millisecond, left: 1 << 20, closed: make(chan struct{})}, 100*time.Millisecond, "slow.example")
	defer w.Close()
	got, err := io.ReadAll(w)
	if !errors.Is(err, ErrStalled) || len(got) == 0 || len(got) >= StallBytes {
		t.Fatalf("read %d bytes, %v; want a few, then ErrStalled", len(got), err)
	}
}

func TestWatchLeavesAFlowingBody(t *testing.T) {
	data := strings.Repeat("y", 4*StallBytes)
	w := Watch(io.NopCloser(strings.NewReader(data)), 50*time.Millisecond, "h")
	got, err := io.ReadAll(w)
	w.Close()
	if err != nil || len(got) != len(data) {
		t.Fatalf("read %d of %d bytes, %v", len(got), len(data), err)
	}
	if Watch(io.NopCloser(strings.NewReader("")), 0, "h") == nil {
		t.Fatal("an unwatched body is nil")
	}
}
