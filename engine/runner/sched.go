package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// The scheduler: continuous batching over the engine's slots. Requests
// join a free slot between steps and leave when done; each step carries
// one decode row for every slot that waits for its next token, and fills
// the rest of the batch with prompt chunks (so a new prompt delays the
// others' decode by one chunk at most). A slot keeps its cache when its
// request ends: the next request whose prompt starts the same way reuses
// that prefix (the prefix cache).

// ErrCancelled is wrapped by the error of a job whose context ended.
var ErrCancelled = errors.New("cancelled")

// Scheduler runs requests on an Engine's slots. Submit is safe for
// concurrent use; Run drives the engine from one goroutine.
type Scheduler struct {
	E   Engine
	Tok *tokenizer.Tokenizer
	// NoPrefixCache starts every request with an empty cache (benchmarks
	// of prefill).
	NoPrefixCache bool
	// ContextShift lets a generation run past the context: when a slot's
	// cache is full, it drops the older half after the first token and
	// goes on (llama.cpp's context shift).
	ContextShift bool
	// Spec is the instance's speculative decoding (drafter.go): the draft
	// sources its requests may name, and what adaptive K measured. nil:
	// prompt lookup alone (Run makes it).
	Spec *Speculator

	once sync.Once
	// mu guards the submitted jobs not yet taken, and why Run ended.
	mu       sync.Mutex
	incoming []*Job
	ended    error
	wake     chan struct{}

	slots []*slot
	queue []*Job
	admit uint64 // admission counter: the order slots' prefill goes in
	// inflight counts sampling steps submitted and not received.
	inflight int
}

// slot is one KV cache sequence: the tokens it holds, and the request it
// serves, if any.
type slot struct {
	id   int
	hist []int32 // tokens whose keys and values the sequence holds
	used time.Time

	job     *Job
	order   uint64 // admission order
	next    int    // prompt tokens fed so far
	waiting bool   // a sampling step for it is in flight
	tok     int32  // the last token sampled, fed next
	n       int    // tokens generated
	maxTok  int
	out     *output
	phase   trace.Token
	open    bool
	decodeT time.Time
	shifted bool // a context shift happened: the cache is not a prompt's
	// spec is the slot's speculation: its request's drafter, and adaptive
	// K's state of the slot (drafter.go).
	spec slotSpec
}

func (s *Scheduler) init() {
	s.once.Do(func() {
		s.wake = make(chan struct{}, 1)
		if s.Spec == nil {
			s.Spec = NewSpeculator(nil)
		}
		for i := range max(s.E.Options().Parallel, 1) {
			s.slots = append(s.slots, &slot{id: i})
		}
	})
}

// Submit queues a request (prompt from Generator.Prepare) and returns its
// job; rec (may be nil) records rank 0's spans. The job ends when ctx
// does, or at once with Run's error when Run has ended.
func (s *Scheduler) Submit(ctx context.Context, req *runnerapi.Request, prompt []int32, traceID string, rec *trace.Recorder) *Job {
	s.init()
	ctx, cancel := context.WithCancel(ctx)
	j := &Job{ctx: ctx, cancel: cancel, req: req, prompt: prompt, traceID: traceID, rec: rec, queued: time.Now(),
		notify: make(chan struct{}, 1), done: make(chan struct{})}
	s.mu.Lock()
	ended := s.ended
	if ended == nil {
		s.incoming = append(s.incoming, j)
	}
	s.mu.Unlock()
	if ended != nil {
		j.finish(runnerapi.Result{PromptTokens: len(prompt)}, fmt.Errorf("scheduler stopped: %w", ended))
		return j
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return j
}

func cancelled(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
}

// Run schedules until ctx ends or the engine fails for good (a broken
// pipeline); every job still queued or running then fails with the error.
func (s *Scheduler) Run(ctx context.Context) (err error) {
	s.init()
	defer func() {
		s.mu.Lock()
		s.ended, s.queue = err, append(s.queue, s.incoming...)
		s.incoming = nil
		s.mu.Unlock()
		s.failAll(err)
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.drainJobs()
		s.dropCancelled()
		if err := s.admitJobs(ctx); err != nil && errors.Is(err, ErrLinkLost) {
			return err
		}
		if s.inflight < s.E.Depth() {
			if st := s.build(ctx); st != nil {
				st.sent = time.Now()
				if err := s.E.Submit(ctx, st); err != nil {
					if fatal := s.stepFailed(st, err); fatal != nil {
						return fatal
					}
					continue
				}
				if st.samples() {
					s.inflight++
				}
				continue
			}
		}
		if s.inflight > 0 {
			st, samples, err := s.E.Recv(ctx)
			s.inflight--
			if err != nil {
				if fatal := s.stepFailed(st, err); fatal != nil {
					return fatal
				}
				continue
			}
			if st != nil && !st.sent.IsZero() {
				s.Spec.stepped(st.rows(), len(st.Groups), time.Since(st.sent))
			}
			s.deliver(samples)
			continue
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drainJobs moves submitted jobs to the queue.
func (s *Scheduler) drainJobs() {
	s.mu.Lock()
	s.queue = append(s.queue, s.incoming...)
	s.incoming = nil
	s.mu.Unlock()
}

// dropCancelled ends queued jobs whose context ended, and running ones
// that have no step in flight (one that has ends when its step returns:
// within one step).
func (s *Scheduler) dropCancelled() {
	q := s.queue[:0]
	for _, j := range s.queue {
		if j.ctx.Err() != nil {
			j.finish(runnerapi.Result{PromptTokens: len(j.prompt)}, cancelled(j.ctx))
			continue
		}
		q = append(q, j)
	}
	s.queue = q
	for _, sl := range s.slots {
		if sl.job != nil && !sl.waiting && sl.job.ctx.Err() != nil {
			s.end(sl, cancelled(sl.job.ctx))
		}
	}
}

// admitJobs gives queued jobs free slots, in arrival order: the slot whose
// cache shares the longest prefix with the prompt, else the one least
// recently used. The slots share one pool of ContextLen cache positions:
// a request reserves its prompt and its most tokens, idle slots' cached
// prefixes are forgotten (least recently used first) to make room, and
// the queue waits while the running requests hold too much.
func (s *Scheduler) admitJobs(ctx context.Context) error {
	for len(s.queue) > 0 {
		j := s.queue[0]
		var best *slot
		bestKeep := -1
		for _, sl := range s.slots {
			if sl.job != nil || sl.waiting {
				continue
			}
			keep := 0
			// An embedding pools every row: none is kept from the cache.
			if !s.NoPrefixCache && !j.req.NoPromptCache && !j.req.Embed {
				keep = commonPrefix(sl.hist, j.prompt[:len(j.prompt)-1])
			}
			if keep > bestKeep || keep == bestKeep && sl.used.Before(best.used) {
				best, bestKeep = sl, keep
			}
		}
		if best == nil {
			return nil
		}
		ok, err := s.makeRoom(best, s.reserve(j))
		if err != nil || !ok {
			return err
		}
		s.queue = s.queue[1:]
		if err := s.start(ctx, best, j, bestKeep); err != nil {
			return err
		}
	}
	return nil
}

// maxTokens is how many tokens j may generate: its max_tokens (or the
// default), cut at the context's end.
func (s *Scheduler) maxTokens(j *Job) int {
	if j.req.Embed {
		return 0
	}
	n := j.req.MaxTokens
	if n == 0 {
		n = runnerapi.DefaultMaxTokens
	}
	if s.ContextShift {
		return n
	}
	return min(n, s.E.Options().ContextLen-len(j.prompt))
}

// reserve is how many cache positions j may hold at once.
func (s *Scheduler) reserve(j *Job) int {
	return min(len(j.prompt)+s.maxTokens(j), s.E.Options().ContextLen)
}

// makeRoom frees cache positions for a request of need positions in slot
// for: it forgets idle slots' cached prefixes, least recently used first,
// and reports whether the pool then has room.
func (s *Scheduler) makeRoom(for_ *slot, need int) (bool, error) {
	used := func() int {
		n := 0
		for _, sl := range s.slots {
			switch {
			case sl == for_:
			case sl.job != nil:
				n += s.reserve(sl.job)
			default:
				n += len(sl.hist)
			}
		}
		return n
	}
	for used()+need > s.E.Options().ContextLen {
		var lru *slot
		for _, sl := range s.slots {
			if sl != for_ && sl.job == nil && !sl.waiting && len(sl.hist) > 0 && (lru == nil || sl.used.Before(lru.used)) {
				lru = sl
			}
		}
		if lru == nil {
			return false, nil
		}
		if err := s.E.Forget(lru.id); err != nil {
			return false, err
		}
		lru.hist = lru.hist[:0]
	}
	return true, nil
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// start begins job j in slot sl, keeping keep cached positions.
func (s *Scheduler) start(ctx context.Context, sl *slot, j *Job, keep int) error {
	j.start = time.Now()
	j.queueNs = j.start.Sub(j.queued).Nanoseconds()
	j.res = runnerapi.Result{PromptTokens: len(j.prompt)}
	src, err := s.canSpeculate(j.req.Speculative)
	if err != nil {
		j.finish(j.res, err)
		return nil
	}
	kept, err := s.E.Begin(ctx, sl.id, j.req, j.traceID, keep)
	if err != nil {
		sl.hist = sl.hist[:0]
		j.finish(j.res, err)
		return err
	}
	sl.hist = sl.hist[:kept]
	j.res.CachedTokens = kept
	s.admit++
	*sl = slot{id: sl.id, hist: sl.hist, used: sl.used, job: j, order: s.admit, next: kept,
		maxTok: s.maxTokens(j), out: newOutput(j.req.Stop), spec: sl.spec}
	sl.spec.reset(sl.id, j.req.Speculative, src)
	sl.out.ignoreEOS = j.req.IgnoreEOS
	if j.req.Echo {
		j.push(runnerapi.Piece{Index: -1, Token: -1, Text: echoText(s.Tok, j.req, j.prompt), Echo: true})
	}
	sl.phase, sl.open = j.rec.Start("prefill", "prefill"), true
	return nil
}

// echoText is the prompt's text as a user reads it: special tokens (a
// leading BOS among them) left out, SentencePiece's space prefix removed.
func echoText(tok *tokenizer.Tokenizer, req *runnerapi.Request, prompt []int32) string {
	if len(req.PromptTokens) == 0 && len(req.Messages) == 0 {
		return req.Prompt
	}
	return validPrefix(tok.Detokenize(tok.StripBOS(prompt), false, false))
}

// build makes the next step: a decode row for every slot whose next token
// is known, then prompt chunks, oldest request first, up to the batch
// size. It is nil when no slot has work that is not in flight.
func (s *Scheduler) build(ctx context.Context) *Step {
	st := &Step{}
	budget := s.E.Options().BatchSize
	// Through a pipeline of N ranks the decoding requests go in N
	// micro-batches, so that each rank works on one while the others
	// work on the rest.
	decoding := 0
	for _, sl := range s.slots {
		if sl.job != nil && sl.next == len(sl.job.prompt) {
			decoding++
		}
	}
	rows := (decoding + s.E.Depth() - 1) / s.E.Depth()
	for _, sl := range s.slots {
		if budget == 0 || rows == 0 || sl.job == nil || sl.waiting || sl.next < len(sl.job.prompt) {
			continue
		}
		if len(sl.hist) >= s.E.Options().ContextLen {
			if err := s.shift(sl); err != nil {
				s.end(sl, err)
				continue
			}
		}
		rows--
		sl.phase, sl.open = sl.job.rec.Start(fmt.Sprintf("token %d", sl.n), "decode"), true
		drafts, err := s.draft(ctx, sl, budget)
		if err != nil {
			sl.phase.End(trace.Args{})
			sl.open = false
			s.end(sl, err)
			continue
		}
		toks := append([]int32{sl.tok}, drafts...)
		st.Groups = append(st.Groups, Group{Slot: sl.id, Tokens: toks, Start: len(sl.hist), Sample: true, Decode: true,
			Draft: len(toks) - 1, TokenIndex: sl.n, Parent: &sl.phase})
		sl.hist = append(sl.hist, toks...)
		sl.waiting = true
		budget -= len(toks)
	}
	for budget > 0 {
		var sl *slot
		for _, x := range s.slots {
			if x.job != nil && !x.waiting && x.next < len(x.job.prompt) && (sl == nil || x.order < sl.order) {
				sl = x
			}
		}
		if sl == nil {
			break
		}
		p := sl.job.prompt
		k := min(budget, len(p)-sl.next)
		last := sl.next+k == len(p)
		st.Groups = append(st.Groups, Group{Slot: sl.id, Tokens: p[sl.next : sl.next+k], Start: sl.next, Sample: last,
			Embed: sl.job.req.Embed, TokenIndex: sl.next, Parent: &sl.phase})
		sl.hist = append(sl.hist, p[sl.next:sl.next+k]...)
		sl.next += k
		sl.waiting = last
		budget -= k
	}
	if len(st.Groups) == 0 {
		return nil
	}
	return st
}

// shift makes room in a full slot: it keeps the first token (BOS) and
// drops half of the rest on every rank, as llama.cpp's context shift does.
func (s *Scheduler) shift(sl *slot) error {
	keep := 0
	if len(s.Tok.StripBOS(sl.hist[:1])) == 0 {
		keep = 1
	}
	discard := (len(sl.hist) - keep) / 2
	sp := sl.job.rec.Start("context shift", "shift")
	err := s.E.Shift(sl.id, keep, discard)
	sp.End(trace.Args{}.WithToken(sl.n))
	if err != nil {
		return fmt.Errorf("context shift of slot %d (%d positions, dropping %d): %w", sl.id, len(sl.hist), discard, err)
	}
	sl.hist = append(sl.hist[:keep], sl.hist[keep+discard:]...)
	sl.shifted = true
	return nil
}

// deliver hands each sampled token to its slot's request.
func (s *Scheduler) deliver(samples []Sampled) {
	now := time.Now()
	for _, smp := range samples {
		sl := s.slots[smp.Slot]
		j := sl.job
		sl.waiting = false
		if sl.open {
			sl.phase.End(trace.Args{}.WithToken(sl.n))
			sl.open = false
		}
		if sl.n == 0 {
			j.res.PrefillNs = now.Sub(j.start).Nanoseconds()
			j.res.FirstTokenNs = j.res.PrefillNs
			sl.decodeT = now
		}
		if j.ctx.Err() != nil {
			s.end(sl, cancelled(j.ctx))
			continue
		}
		if j.req.Embed {
			var err error
			if j.res.Embedding, j.res.FinishReason = smp.Embedding, "stop"; smp.Embedding == nil {
				err = fmt.Errorf("slot %d: the last rank returned no embedding", sl.id)
			}
			s.end(sl, err)
			continue
		}
		if len(smp.Tokens) == 0 {
			s.end(sl, fmt.Errorf("slot %d: the step sampled no token", sl.id))
			continue
		}
		if smp.Drafted > 0 {
			if err := s.settleDrafts(sl, smp); err != nil {
				s.end(sl, err)
				continue
			}
		}
		for i, tok := range smp.Tokens {
			var lp *runnerapi.Logprobs
			if i < len(smp.Logprobs) {
				lp = smp.Logprobs[i]
			}
			if s.emit(sl, tok, lp) {
				break
			}
		}
	}
}

// emit hands one sampled token to sl's request; it reports whether the
// request ended (end-of-generation, a stop string, max tokens).
func (s *Scheduler) emit(sl *slot, tok int32, lp *runnerapi.Logprobs) bool {
	j := sl.job
	piece, done := sl.out.add(s.Tok, tok)
	piece.Index, piece.Token = sl.n, tok
	if lp != nil {
		lp.Text = tokenText(s.Tok, lp.Token)
		for k := range lp.Top {
			lp.Top[k].Text = tokenText(s.Tok, lp.Top[k].Token)
		}
		piece.Logprobs = lp
	}
	j.push(piece)
	sl.n++
	j.res.CompletionTokens = sl.n
	switch {
	case done:
		j.res.FinishReason = "stop"
	case sl.n >= sl.maxTok:
		j.res.FinishReason = "length"
	default:
		sl.tok = tok
		return false
	}
	s.end(sl, nil)
	return true
}

// end finishes the request in sl; the slot keeps its cache for the next.
func (s *Scheduler) end(sl *slot, err error) {
	j := sl.job
	if sl.open {
		sl.phase.End(trace.Args{})
		sl.open = false
	}
	if err == nil {
		if !sl.decodeT.IsZero() {
			j.res.DecodeNs = time.Since(sl.decodeT).Nanoseconds()
		}
		if tail := sl.out.flush(); tail != "" {
			j.push(runnerapi.Piece{Index: j.res.CompletionTokens, Token: -1, Text: tail})
		}
	}
	s.E.End(sl.id, err)
	if sl.shifted {
		// The cache no longer holds what a prompt would compute: it is
		// dropped rather than reused.
		sl.hist = sl.hist[:0]
		if ferr := s.E.Forget(sl.id); ferr != nil && err == nil {
			err = ferr
		}
	}
	sl.job, sl.used = nil, time.Now()
	sl.spec.reset(sl.id, nil, nil)
	j.finish(j.res, err)
}

// stepFailed ends the requests of a failed step (their caches are
// forgotten); it returns the error when the engine cannot go on.
func (s *Scheduler) stepFailed(st *Step, err error) error {
	if st == nil || errors.Is(err, ErrLinkLost) || errors.Is(err, context.Canceled) {
		s.failAll(err)
		return err
	}
	for _, g := range st.Groups {
		sl := s.slots[g.Slot]
		sl.waiting = false
		sl.hist = sl.hist[:0]
		if sl.job != nil {
			s.end(sl, fmt.Errorf("step at positions %d…%d of slot %d: %w", g.Start, g.Start+len(g.Tokens)-1, g.Slot, err))
		}
	}
	return nil
}

// failAll ends every queued and running request with err.
func (s *Scheduler) failAll(err error) {
	for _, j := range s.queue {
		j.finish(runnerapi.Result{PromptTokens: len(j.prompt)}, err)
	}
	s.queue = nil
	for _, sl := range s.slots {
		sl.waiting = false
		sl.hist = sl.hist[:0]
		if sl.job != nil {
			s.end(sl, err)
		}
	}
	s.inflight = 0
}

// tokenText is one token's text as logprobs report it: its decoded bytes
// (invalid UTF-8 becomes U+FFFD).
func tokenText(tok *tokenizer.Tokenizer, id int32) string {
	s, err := tok.Decode([]int32{id})
	if err != nil {
		return ""
	}
	return validPrefix(s)
}
