package runner

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// linkRetry is how often a rank retries reaching its successor, which may
// still be loading.
const linkRetry = 250 * time.Millisecond

// maxRequestBytes caps a completion request's body.
const maxRequestBytes = 4 << 20

// LoadFunc loads a rank's blocks of the model at path; progress gets 0..1.
type LoadFunc func(ctx context.Context, path string, opts backend.Options, progress func(float32)) (backend.Rank, error)

// Config configures a runner's server.
type Config struct {
	ModelPath string
	Options   backend.Options
	Load      LoadFunc
	// Token must be presented as "Authorization: Bearer <token>" on every
	// request: the port is on loopback, but other local users can reach it.
	Token string
	// Node and NodeName stamp the spans (the agent's node id and name).
	Node, NodeName string
	Logger         *slog.Logger

	// Rank is this runner's rank of Instance, whose Shape says its place:
	// its pipeline stage, and in a tensor-parallel group its slice. The
	// zero Shape is one rank holding the whole model, with no links.
	Instance string
	Shape    runnerapi.Shape
	Rank     int
	// DialNext connects to the next stage (through the agent);
	// RankListener accepts the link from the previous one (the agent
	// connects and presents Token first). Both are needed with more than
	// one stage.
	DialNext     func(ctx context.Context) (net.Conn, error)
	RankListener net.Listener
	// ContextShift lets rank 0's generations run past the context
	// (Scheduler.ContextShift).
	ContextShift bool
	// TPConnect builds a tensor-parallel rank's group mesh (every rank
	// calls it before loading its slice; the group's first rank holds the
	// stage's rank links). MeshListener, if set, is where the agent
	// connects the group's higher ranks (Health.MeshAddr).
	TPConnect    func(ctx context.Context) (*collective.Mesh, error)
	MeshListener net.Listener
	// OnStageTrace gets the spans and counter samples of each traced
	// request on ranks > 0.
	OnStageTrace func(traceID string, spans []trace.Span, counters []trace.CounterSample, err error)
	// DraftModelPath, on rank 0, is a draft model for speculative
	// decoding, which requests name as DraftID (draftmodel.go).
	DraftModelPath, DraftID string
	// DraftThreads are the draft model's CPU threads (0: one for a small
	// draft, else the target's: draftThreads).
	DraftThreads int
	// DefaultSpeculation, on rank 0, is what a request that names no
	// speculation speculates with (nil: none); {"draft": "none"} in a
	// request turns it off.
	DefaultSpeculation *runnerapi.Speculation
}

// Server serves one loaded model to the agent that started the process.
type Server struct {
	cfg Config
	log *slog.Logger
	// fatal gets the error that ends this runner: a broken pipeline.
	fatal chan error

	mu        sync.Mutex // guards the fields below
	health    runnerapi.Health
	gen       *Generator
	sched     *Scheduler
	stopLoop  func() (wait func()) // stops the rank's loop; wait waits for it
	rank      backend.Rank
	draftRank backend.Rank // the draft model, on rank 0 (nil: none)
	in, out   *Link
	mesh      *collective.Mesh
	loadSpans []trace.Span
}

// NewServer returns a server whose model is not loaded yet: call Load.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Shape == (runnerapi.Shape{}) {
		cfg.Shape = runnerapi.Shape{Pipeline: 1, Tensor: 1}
	}
	stage, _ := cfg.Shape.Stage(cfg.Rank)
	h := runnerapi.Health{Status: runnerapi.StatusLoading, Pid: os.Getpid(), Rank: stage, Ranks: cfg.Shape.Pipeline}
	if cfg.RankListener != nil {
		h.RankAddr = cfg.RankListener.Addr().String()
	}
	if cfg.MeshListener != nil {
		h.MeshAddr = cfg.MeshListener.Addr().String()
	}
	return &Server{cfg: cfg, log: cfg.Logger, fatal: make(chan error, 1), health: h}
}

// Fatal delivers the error that ends the runner (a broken pipeline); the
// process exits with it.
func (s *Server) Fatal() <-chan error { return s.fatal }

func (s *Server) die(err error) {
	select {
	case s.fatal <- err:
	default:
	}
}

// Load reads the model's metadata and tokenizer, then its weights, and
// records "load" spans with "metadata" and "weights" children.
func (s *Server) Load(ctx context.Context) error {
	rec := trace.NewRecorder(s.stage(), s.cfg.Node, trace.Options{NodeName: s.cfg.NodeName})
	root := rec.Start("load "+s.cfg.ModelPath, "load")
	err := s.load(ctx, &root)
	root.End(trace.Args{})
	spans := rec.Drain(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadSpans = spans
	if err != nil {
		s.health.Status, s.health.Error = runnerapi.StatusFailed, err.Error()
		return err
	}
	s.health.Status = runnerapi.StatusReady
	return nil
}

func (s *Server) load(ctx context.Context, root *trace.Token) error {
	meta := root.Child("metadata", "metadata")
	f, err := gguf.ReadFile(s.cfg.ModelPath)
	if err != nil {
		meta.End(trace.Args{})
		return err
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		meta.End(trace.Args{})
		return fmt.Errorf("%s: %w", s.cfg.ModelPath, err)
	}
	tok, err := tokenizer.New(f)
	meta.End(trace.Args{})
	if err != nil {
		return fmt.Errorf("%s: %w", s.cfg.ModelPath, err)
	}
	opts := s.cfg.Options
	if err := opts.Resolve(cfg); err != nil {
		return err
	}
	s.mu.Lock()
	s.health.Vocab, s.health.TotalLayers = cfg.Vocab, opts.LastLayer-opts.FirstLayer
	s.mu.Unlock()
	if err := s.connectTP(ctx, &opts); err != nil {
		return err
	}
	w := root.Child("weights", "weights")
	size := int64(0)
	if st, err := os.Stat(s.cfg.ModelPath); err == nil {
		size = st.Size()
	}
	rank, err := s.cfg.Load(ctx, s.cfg.ModelPath, opts, func(p float32) {
		s.mu.Lock()
		s.health.LayersLoaded = min(int(p*float32(s.health.TotalLayers)), s.health.TotalLayers)
		s.mu.Unlock()
	})
	w.End(trace.Args{}.WithBytes(size))
	if err != nil {
		return err
	}
	off := rank.Offload()
	s.mu.Lock()
	s.rank = rank
	s.health.ContextLen = rank.Options().ContextLen
	s.health.LayersLoaded = s.health.TotalLayers
	s.health.Offload = &off
	s.mu.Unlock()
	s.log.Info("runner loaded", "model", s.cfg.ModelPath, "config", cfg.String(), "contextLength", rank.Options().ContextLen,
		"rank", s.cfg.Rank, "shape", s.cfg.Shape.String(), "offload", offloadText(off))
	var fw Forwarder = rank
	if s.cfg.Shape.TensorParallel() {
		if fw, err = s.startTP(ctx, rank); fw == nil || err != nil {
			return err // a follower, serving; or a broken group
		}
	}
	var draft *DraftModel
	if s.cfg.Rank == 0 && s.cfg.DraftModelPath != "" {
		if draft, err = s.loadDraft(ctx, root, tok, opts); err != nil {
			return err
		}
	}
	if s.cfg.Shape.Pipeline == 1 {
		s.serveAs(ctx, &Generator{M: &Local{F: fw, Tok: tok}, Tok: tok}, draft, s.broke(0))
		return nil
	}
	s.mu.Lock()
	s.health.Status = runnerapi.StatusConnecting
	s.mu.Unlock()
	c := root.Child("connect", "connect")
	in, out, err := s.connect(ctx)
	c.End(trace.Args{})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.in, s.out = in, out
	s.mu.Unlock()
	if s.cfg.Rank == 0 {
		s.serveAs(ctx, &Generator{M: &Pipeline{F: fw, Out: out, In: in, Shape: s.cfg.Shape}, Tok: tok}, draft, s.broke(0))
		return nil
	}
	s.mu.Lock()
	mesh := s.mesh
	s.mu.Unlock()
	st := &Stage{F: fw, In: in, Out: out, Rank: s.stage(), Shape: s.cfg.Shape, Mesh: mesh, Node: s.cfg.Node,
		NodeName: s.cfg.NodeName, OnTrace: s.cfg.OnStageTrace, Tok: tok}
	s.loop(ctx, func(ctx context.Context) error {
		err := st.Serve(ctx)
		if err != nil {
			err = fmt.Errorf("%s (blocks %v): %w", s.broke(s.stage()), rank.Options().FirstLayer, err)
		}
		return err
	})
	return nil
}

// stage is this runner's pipeline stage.
func (s *Server) stage() int { st, _ := s.cfg.Shape.Stage(s.cfg.Rank); return st }

// broke names what failed when the loop of pipeline stage st's leader
// ends in an error, in the instance's shape.
func (s *Server) broke(st int) string {
	return fmt.Sprintf("%s broke at stage %d (rank %d)", s.cfg.Shape, st, s.cfg.Shape.Rank(st, 0))
}

// loop runs this rank's loop (rank 0's scheduler, another rank's stage)
// until ctx ends, Close stops it, or it fails, which ends the runner.
func (s *Server) loop(ctx context.Context, run func(context.Context) error) {
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.mu.Lock()
	s.stopLoop = func() func() { cancel(); return func() { <-done } }
	s.mu.Unlock()
	go func() {
		defer close(done)
		if err := run(lctx); lctx.Err() == nil && err != nil {
			s.die(err)
		}
	}()
}

// serveAs starts rank 0's scheduler over gen's engine, until ctx ends or
// the pipeline or group breaks (which ends the runner); broke names what
// failed.
func (s *Server) serveAs(ctx context.Context, gen *Generator, draft *DraftModel, broke string) {
	gen.ContextShift = s.cfg.ContextShift
	sched := &Scheduler{E: gen.M, Tok: gen.Tok, ContextShift: s.cfg.ContextShift, Spec: NewSpeculator(draft)}
	s.mu.Lock()
	s.gen, s.sched = gen, sched
	s.mu.Unlock()
	s.loop(ctx, func(ctx context.Context) error {
		if err := sched.Run(ctx); err != nil {
			return fmt.Errorf("%s: %w", broke, err)
		}
		return nil
	})
}

// Close frees the model and the links.
func (s *Server) Close() {
	// The rank's loop stops (between steps; a closed link ends a wait for
	// frames) before the weights go.
	s.mu.Lock()
	stop := s.stopLoop
	s.stopLoop = nil
	wait := func() {}
	if stop != nil {
		wait = stop()
	}
	for _, l := range []*Link{s.in, s.out} {
		if l != nil {
			l.Close()
		}
	}
	s.closeTPLocked()
	s.mu.Unlock()
	wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rank != nil {
		s.rank.Close()
		s.rank = nil
	}
	if s.draftRank != nil {
		s.draftRank.Close()
		s.draftRank = nil
	}
	s.gen = nil
}

// Health returns the current status.
func (s *Server) Health() runnerapi.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.health
	for _, l := range []*Link{s.in, s.out} {
		if l != nil {
			sent, recv := l.Bytes()
			h.LinkBytesSent += sent
			h.LinkBytesRecv += recv
		}
	}
	if s.mesh != nil {
		for _, l := range s.mesh.Links() {
			h.Mesh = append(h.Mesh, runnerapi.MeshLink(l))
		}
	}
	return h
}

// Handler serves GET /health, GET /load-trace, POST /completion and POST
// /embed.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Health())
	})
	mux.HandleFunc("GET /load-trace", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		spans := s.loadSpans
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"spans": spans})
	})
	mux.HandleFunc("POST /completion", s.completion)
	mux.HandleFunc("POST /embed", s.embed)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, []byte("Bearer "+s.cfg.Token)) != 1 {
			writeJSON(w, http.StatusUnauthorized, runnerapi.ErrorBody{Error: "runner: missing or wrong token", Kind: "unauthorized"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) completion(w http.ResponseWriter, r *http.Request) {
	var req runnerapi.CompletionRequest
	gen, sched, _, ok := s.accept(w, r, "completion", &req, &req.TraceID)
	if !ok {
		return
	}
	req.Speculative = req.Speculative.OrDefault(s.cfg.DefaultSpeculation)
	prompt, parse, err := gen.PrepareChat(&req.Request)
	if err == nil {
		_, err = sched.canSpeculate(req.Speculative) // what this instance can draft with
	}
	if err != nil {
		refuse(w, err)
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	send := func(m runnerapi.StreamMsg) error {
		if err := enc.Encode(m); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	var rec *trace.Recorder
	if req.TraceID != "" {
		rec = trace.NewRecorder(0, s.cfg.Node, trace.Options{NodeName: s.cfg.NodeName})
	}
	s.mu.Lock()
	mesh := s.mesh
	s.mu.Unlock()
	stopOut := sampleLink(rec, s.outbound(), s.cfg.Shape.Rank(1, 0))
	stopMesh := sampleMesh(rec, mesh, 0)
	stopLink := func() { stopOut(); stopMesh() }
	// Every token is sent, with empty text while text is held back, so
	// that the client can count and time tokens.
	job := sched.Submit(r.Context(), &req.Request, prompt, req.TraceID, rec)
	out := newPieceParser(parse, func(p *runnerapi.Piece) error { return send(runnerapi.StreamMsg{Piece: p}) })
	res, err := job.Wait(out.emit)
	if err == nil {
		out.flush()
	}
	stopLink()
	done := &runnerapi.Done{Result: res, Spans: rec.Drain(0), Counters: rec.DrainCounters(), QueueNs: job.QueueNs()}
	if err != nil {
		if r.Context().Err() == nil {
			// The spans so far go with the error: the trace keeps them.
			send(runnerapi.StreamMsg{Error: err.Error(), Done: done})
		}
		s.log.Warn("completion failed", "err", err)
		return
	}
	send(runnerapi.StreamMsg{Done: done})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// offloadText is a rank's Offload for the log: "12/16 blocks on Vulkan0
// (llvmpipe …)", or "CPU", each with the reason for fewer blocks than the
// rank holds when there is one.
func offloadText(o runnerapi.Offload) string {
	s := o.String()
	if o.Device != nil && (o.Blocks > 0 || o.Head) {
		s += " (" + o.Device.Description + ")"
	}
	if o.Reason != "" {
		s += ": " + o.Reason
	}
	return s
}

// outbound is rank 0's link to rank 1 (nil with one rank, or before it
// connected).
func (s *Server) outbound() *Link {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out
}

// loadDraft loads the draft model beside rank 0, with the target's
// options (context, batch, slots, cache type; threads as draftThreads
// says), once its vocabulary is checked against the target's (tok).
func (s *Server) loadDraft(ctx context.Context, root *trace.Token, tok *tokenizer.Tokenizer, opts backend.Options) (*DraftModel, error) {
	sp := root.Child("draft model", "weights")
	defer sp.End(trace.Args{})
	path := s.cfg.DraftModelPath
	f, err := gguf.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	dtok, err := tokenizer.New(f)
	if err != nil {
		return nil, fmt.Errorf("draft model %s: %w", path, err)
	}
	if err := CheckVocab(tok, dtok); err != nil {
		return nil, fmt.Errorf("draft model %s cannot draft for %s: %w", path, s.cfg.ModelPath, err)
	}
	o := backend.Options{Threads: draftThreads(s.cfg.DraftThreads, opts.Threads, f.DataSize()), ContextLen: opts.ContextLen, BatchSize: opts.BatchSize, Parallel: opts.Parallel,
		KVType: opts.KVType, NoFlashAttention: opts.NoFlashAttention, NoRepack: opts.NoRepack,
		GPULayers: draftGPULayers(opts.GPULayers), GPUSoftware: opts.GPUSoftware, GPUMemory: opts.GPUMemory}
	r, err := s.cfg.Load(ctx, path, o, nil)
	if err != nil {
		return nil, fmt.Errorf("draft model %s: %w", path, err)
	}
	off := r.Offload()
	s.mu.Lock()
	s.draftRank = r
	s.health.DraftOffload = &off
	s.mu.Unlock()
	s.log.Info("draft model loaded", "model", path, "id", s.cfg.DraftID, "config", r.Config().String(), "offload", offloadText(off))
	return &DraftModel{ID: s.cfg.DraftID, F: r}, nil
}
