package tracecollect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Rank-side defaults.
const (
	// DefaultFlushEvery is how often a running task ships what its rank
	// recorded so far, so that a long task never holds all its spans.
	DefaultFlushEvery = time.Second
	// DefaultSampleEvery is how often the link counters are read into the
	// rank's MB/s counter tracks.
	DefaultSampleEvery = 100 * time.Millisecond
	// chunkSpans is the most spans drained into one chunk; chunks are split
	// further if their encoding passes wire.MaxTraceChunk.
	chunkSpans = 2048
)

// ShipperConfig configures one rank's Shipper.
type ShipperConfig struct {
	Task string
	Rank int
	// Node is this node's id, stamped on the spans.
	Node string
	// Send delivers one chunk to the master (a Router's Chunk). It may
	// block while the master reads slowly; it is never called from the
	// recording's path.
	Send func(ctx context.Context, c *wire.TraceChunk) error
	// LinkBytes returns the bytes sent so far to each peer (nil: no link
	// tracks).
	LinkBytes func() map[string]uint64
	// FlushEvery and SampleEvery default to DefaultFlushEvery and
	// DefaultSampleEvery.
	FlushEvery, SampleEvery time.Duration
	// SpillDir takes the chunks waiting for the master past OutboxMemory
	// bytes of them ("": os.TempDir(); 0: 64 MiB).
	SpillDir     string
	OutboxMemory int
	// RetryWait is the first wait before a failed send is tried again
	// (default 500 ms, doubling).
	RetryWait time.Duration
	// Recorder options (Disabled is ignored: a Shipper always records).
	Options trace.Options
}

// Sending: a failed send is tried sendAttempts times in all; chunks wait
// in memory up to defaultOutboxMemory bytes, then in a spill file.
const (
	sendAttempts        = 5
	defaultOutboxMemory = 64 << 20
)

// Shipper records one rank's part of a traced task and ships it to the
// master in bounded chunks: every FlushEvery while the task runs, and the
// rest, marked final, when it ends. It also samples the node's per-peer
// link traffic into "link a→b" MB/s counter tracks.
//
// Recording and sending are apart: every FlushEvery the recorder is
// drained into chunks, which wait in an outbox (memory, then disk) for a
// sender that delivers them as fast as the master takes them. A slow
// master thus slows the shipping only, never the model, and loses nothing:
// the recorder never fills up while its spans wait.
type Shipper struct {
	cfg ShipperConfig
	rec *trace.Recorder
	box *outbox

	stop   chan struct{}
	wg     sync.WaitGroup
	sent   chan struct{} // closed when the sender has delivered the final chunk, or given up
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex // guards the fields below
	seq       int
	extra     []trace.Span // spans added with Add
	counters  []trace.CounterSample
	prev      map[string]uint64
	prevT     time.Time
	err       error // the first error: encoding, spilling or sending
	finishing bool  // Finish was called
	finished  bool  // the final chunk was queued
}

// NewShipper starts recording, the periodic flush and the sender. End it
// with Finish.
func NewShipper(cfg ShipperConfig) *Shipper {
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = DefaultFlushEvery
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.RetryWait <= 0 {
		cfg.RetryWait = 500 * time.Millisecond
	}
	if cfg.SpillDir == "" {
		cfg.SpillDir = os.TempDir()
	}
	if cfg.OutboxMemory <= 0 {
		cfg.OutboxMemory = defaultOutboxMemory
	}
	opts := cfg.Options
	opts.Disabled = false
	s := &Shipper{cfg: cfg, rec: trace.NewRecorder(cfg.Rank, cfg.Node, opts), stop: make(chan struct{}), sent: make(chan struct{}),
		box: newOutbox(cfg.SpillDir, cfg.OutboxMemory)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.sampleLinks(time.Now())
	s.wg.Add(1)
	go s.loop()
	go s.sender()
	return s
}

// AddCounters adds counter samples taken elsewhere; they are shipped with
// the next chunk.
func (s *Shipper) AddCounters(cs ...trace.CounterSample) {
	s.mu.Lock()
	s.counters = append(s.counters, cs...)
	s.mu.Unlock()
}

// Recorder is the rank's recorder: pass it to the code that does the work.
func (s *Shipper) Recorder() *trace.Recorder { return s.rec }

// Add adds finished spans built elsewhere (e.g. from timings taken by a
// lower layer); they are shipped with the next chunk.
func (s *Shipper) Add(spans ...trace.Span) {
	s.mu.Lock()
	s.extra = append(s.extra, spans...)
	s.mu.Unlock()
}

func (s *Shipper) loop() {
	defer s.wg.Done()
	sample := time.NewTicker(s.cfg.SampleEvery)
	defer sample.Stop()
	flush := time.NewTicker(s.cfg.FlushEvery)
	defer flush.Stop()
	for {
		select {
		case <-s.stop:
			return
		case t := <-sample.C:
			s.mu.Lock()
			s.sampleLinksLocked(t)
			s.mu.Unlock()
		case <-flush.C:
			s.queue(false)
		}
	}
}

func (s *Shipper) sampleLinks(t time.Time) {
	s.mu.Lock()
	s.sampleLinksLocked(t)
	s.mu.Unlock()
}

// sampleLinksLocked records, for each peer, the MB/s sent since the last
// sample as a counter value holding from that sample's time on.
func (s *Shipper) sampleLinksLocked(t time.Time) {
	if s.cfg.LinkBytes == nil {
		return
	}
	cur := s.cfg.LinkBytes()
	if s.prev != nil {
		dt := t.Sub(s.prevT).Seconds()
		for peer, b := range cur {
			p, ok := s.prev[peer]
			if !ok || b < p || dt <= 0 {
				continue
			}
			s.counters = append(s.counters, trace.LinkSample(s.cfg.Node, peer, s.prevT, float64(b-p)/1e6/dt))
		}
	}
	s.prev, s.prevT = cur, t
}

// queue drains everything recorded so far into chunks in the outbox; with
// final, the last chunk is marked so and the outbox closed.
func (s *Shipper) queue(final bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	buf := make([]trace.Span, 0, chunkSpans)
	for {
		buf = s.rec.AppendDrain(buf[:0], chunkSpans)
		if n := min(chunkSpans-len(buf), len(s.extra)); n > 0 {
			buf = append(buf, s.extra[:n]...)
			s.extra = s.extra[n:]
		}
		var counters []trace.CounterSample
		if len(buf) < chunkSpans {
			counters, s.counters = append(s.counters, s.rec.DrainCounters()...), nil
		}
		last := len(buf) < chunkSpans
		if len(buf) == 0 && len(counters) == 0 && !(last && final) {
			return
		}
		var dropped uint64
		if last && final {
			dropped = s.rec.Dropped()
		}
		chunks, next, err := Chunks(s.cfg.Task, s.cfg.Rank, s.seq, buf, counters, dropped, last && final)
		if err == nil {
			for _, c := range chunks {
				if err = s.box.push(c); err != nil {
					break
				}
			}
		}
		s.seq = next
		if err != nil && s.err == nil {
			s.err = err
		}
		if last {
			if final {
				s.finished = true
				s.box.close()
			}
			return
		}
	}
}

// sender delivers the outbox's chunks in order until the final one, each
// tried sendAttempts times (a master that changes meanwhile gets it: the
// Router sends to the master of the moment). A chunk that cannot be
// delivered ends the shipping, with its error kept: the rank then counts
// as incomplete on the master.
func (s *Shipper) sender() {
	defer close(s.sent)
	for {
		if s.ctx.Err() != nil {
			return // abandoned: Finish says how many were left
		}
		c, err := s.box.pop()
		if err != nil {
			s.fail(err)
			s.box.discard()
			return
		}
		if c == nil {
			return // closed and empty
		}
		wait := s.cfg.RetryWait
		for attempt := 1; ; attempt++ {
			err := s.cfg.Send(s.ctx, c)
			if err == nil {
				break
			}
			if attempt == sendAttempts || s.ctx.Err() != nil {
				// The master is not to be reached: the rest would fail
				// alike, each after its retries.
				n := s.box.len()
				s.fail(fmt.Errorf("trace chunk %d of rank %d, after %d attempts: %w (%d more chunks abandoned)", c.Seq, c.Rank, attempt, err, n))
				s.box.discard()
				s.cancel()
				return
			}
			select {
			case <-s.ctx.Done():
			case <-time.After(wait):
			}
			wait *= 2
		}
	}
}

func (s *Shipper) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// Finish stops the flush loop, takes a last link sample, queues the rest,
// the last chunk marked final, and waits until the sender has delivered
// every chunk, or ctx ends (the rest is then abandoned). It returns the
// first error. Only the first call does anything.
func (s *Shipper) Finish(ctx context.Context) error {
	s.mu.Lock()
	if s.finishing {
		s.mu.Unlock()
		return errors.New("trace shipper already finished")
	}
	s.finishing = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.sampleLinks(time.Now())
	s.queue(true)
	select {
	case <-s.sent:
	case <-ctx.Done():
		s.cancel()
		<-s.sent
		s.fail(fmt.Errorf("trace of rank %d: %d chunks not delivered: %w", s.cfg.Rank, s.box.len(), ctx.Err()))
	}
	s.cancel()
	s.box.discard()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Chunks encodes one rank's spans and counters as wire chunks numbered from
// seq, each within wire.MaxTraceChunk; with final the last one is marked
// so (an empty final chunk is still sent, so the master knows). It returns
// the next sequence number.
func Chunks(task string, rank, seq int, spans []trace.Span, counters []trace.CounterSample, dropped uint64, final bool) ([]*wire.TraceChunk, int, error) {
	var out []*wire.TraceChunk
	var add func(spans []trace.Span, counters []trace.CounterSample) error
	add = func(spans []trace.Span, counters []trace.CounterSample) error {
		b, err := json.Marshal(chunkData{Spans: spans, Counters: counters})
		if err != nil {
			return fmt.Errorf("encode trace chunk: %w", err)
		}
		if len(b) <= wire.MaxTraceChunk {
			out = append(out, &wire.TraceChunk{Task: task, Rank: rank, Data: b})
			return nil
		}
		switch {
		case len(spans) > 1:
			h := len(spans) / 2
			if err := add(spans[:h], nil); err != nil {
				return err
			}
			return add(spans[h:], counters)
		case len(counters) > 1:
			h := len(counters) / 2
			if err := add(spans, counters[:h]); err != nil {
				return err
			}
			return add(nil, counters[h:])
		default:
			return fmt.Errorf("one span or counter encodes to %d bytes, over the %d-byte chunk limit", len(b), wire.MaxTraceChunk)
		}
	}
	if err := add(spans, counters); err != nil {
		return nil, seq, err
	}
	if dropped > 0 {
		b, err := json.Marshal(chunkData{Spans: []trace.Span{}, Dropped: dropped})
		if err != nil {
			return nil, seq, fmt.Errorf("encode trace chunk: %w", err)
		}
		out = append(out, &wire.TraceChunk{Task: task, Rank: rank, Data: b})
	}
	for _, c := range out {
		c.Seq = seq
		seq++
	}
	out[len(out)-1].Final = final
	return out, seq, nil
}
