package tracecollect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// Send delivers one chunk to the master (a Router's Chunk).
	Send func(ctx context.Context, c *wire.TraceChunk) error
	// LinkBytes returns the bytes sent so far to each peer (nil: no link
	// tracks).
	LinkBytes func() map[string]uint64
	// FlushEvery and SampleEvery default to DefaultFlushEvery and
	// DefaultSampleEvery.
	FlushEvery, SampleEvery time.Duration
	// Recorder options (Disabled is ignored: a Shipper always records).
	Options trace.Options
}

// Shipper records one rank's part of a traced task and ships it to the
// master in bounded chunks: every FlushEvery while the task runs, and the
// rest, marked final, when it ends. It also samples the node's per-peer
// link traffic into "link a→b" MB/s counter tracks.
type Shipper struct {
	cfg ShipperConfig
	rec *trace.Recorder

	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex // guards the fields below; held while shipping
	seq       int
	extra     []trace.Span // spans added with Add
	counters  []trace.CounterSample
	prev      map[string]uint64
	prevT     time.Time
	err       error // the first shipping error
	finishing bool  // Finish was called
	finished  bool  // the final chunk went out (or failed to)
}

// NewShipper starts recording and the periodic flush. End it with Finish.
func NewShipper(cfg ShipperConfig) *Shipper {
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = DefaultFlushEvery
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	opts := cfg.Options
	opts.Disabled = false
	s := &Shipper{cfg: cfg, rec: trace.NewRecorder(cfg.Rank, cfg.Node, opts), stop: make(chan struct{})}
	s.sampleLinks(time.Now())
	s.wg.Add(1)
	go s.loop()
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
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.FlushEvery*10)
			s.ship(ctx, false)
			cancel()
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

// ship sends everything recorded so far, in chunks; with final, the last
// chunk is marked so. The first error is kept for Finish; later ships still
// try, since a lost chunk only makes the rank incomplete.
func (s *Shipper) ship(ctx context.Context, final bool) {
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
				if err = s.cfg.Send(ctx, c); err != nil {
					break
				}
			}
		}
		s.seq = next
		if err != nil && s.err == nil {
			s.err = err
		}
		if last {
			return
		}
	}
}

// Finish stops the flush loop, takes a last link sample and ships the rest,
// the last chunk marked final. It returns the first shipping error. Only
// the first call does anything.
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
	s.ship(ctx, true)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
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
