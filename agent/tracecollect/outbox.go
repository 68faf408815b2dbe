package tracecollect

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/orrery-cluster/orrery/cluster/wire"
)

// outbox is a rank's chunks waiting for the master, in order: in memory up
// to its budget, then appended to a spill file (as wire frames) until the
// sender has caught up. Safe for concurrent use: one pusher, one popper.
type outbox struct {
	dir    string
	budget int

	mu       sync.Mutex
	cond     *sync.Cond
	mem      []*wire.TraceChunk // the oldest chunks
	memBytes int
	file     *os.File // the newer ones, [rOff, wOff), fileN of them
	r        *bufio.Reader
	w        *bufio.Writer
	fileN    int
	closed   bool
}

func newOutbox(dir string, budget int) *outbox {
	b := &outbox{dir: dir, budget: budget}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// push queues a chunk, on disk when the memory is full or chunks already
// wait there (order is kept).
func (b *outbox) push(c *wire.TraceChunk) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.cond.Signal()
	size := len(c.Data) + 256
	if b.fileN == 0 && b.memBytes+size <= b.budget {
		b.mem = append(b.mem, c)
		b.memBytes += size
		return nil
	}
	if b.file == nil {
		f, err := os.CreateTemp(b.dir, spillPrefix+"ship-*")
		if err != nil {
			return fmt.Errorf("trace outbox: %w", err)
		}
		os.Remove(f.Name()) // gone with the process, whatever happens
		b.file = f
		b.w = bufio.NewWriterSize(f, 256<<10)
		b.r = bufio.NewReaderSize(&tailReader{f: f}, 256<<10)
	}
	typ, p, err := wire.Encode(c)
	if err == nil {
		err = wire.WriteFrame(b.w, typ, p)
	}
	if err != nil {
		return fmt.Errorf("trace outbox: spill chunk %d: %w", c.Seq, err)
	}
	b.fileN++
	return nil
}

// close says no more chunks come.
func (b *outbox) close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Signal()
	b.mu.Unlock()
}

// pop returns the oldest chunk, waiting for one; nil once closed and
// empty.
func (b *outbox) pop() (*wire.TraceChunk, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.mem) == 0 && b.fileN == 0 && !b.closed {
		b.cond.Wait()
	}
	if len(b.mem) > 0 {
		c := b.mem[0]
		b.mem[0] = nil
		b.mem = b.mem[1:]
		b.memBytes -= len(c.Data) + 256
		return c, nil
	}
	if b.fileN == 0 {
		return nil, nil
	}
	if err := b.w.Flush(); err != nil {
		return nil, fmt.Errorf("trace outbox: %w", err)
	}
	typ, p, err := wire.ReadFrame(b.r, maxFrame)
	if err != nil {
		return nil, fmt.Errorf("trace outbox: read back: %w", err)
	}
	m, err := wire.Decode(typ, p)
	if err != nil {
		return nil, fmt.Errorf("trace outbox: read back: %w", err)
	}
	c, ok := m.(*wire.TraceChunk)
	if !ok {
		return nil, fmt.Errorf("trace outbox: read back a %s", typ)
	}
	b.fileN--
	return c, nil
}

// tailReader reads a file that grows behind it, from off on. It reports
// io.EOF only when nothing at all is left: a bufio.Reader keeps an error
// that came with data and returns it at its next read, even once more has
// been written (a reader that caught up with the spill file's writer then
// failed the next chunk with EOF).
type tailReader struct {
	f   *os.File
	off int64
}

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.f.ReadAt(p, t.off)
	t.off += int64(n)
	if n > 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

// len is how many chunks wait.
func (b *outbox) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mem) + b.fileN
}

// discard drops what waits and the spill file.
func (b *outbox) discard() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mem, b.memBytes, b.fileN = nil, 0, 0
	if b.file != nil {
		b.file.Close()
		b.file = nil
	}
}
