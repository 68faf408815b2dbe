package pull

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/transfer"
)

// Puller runs this node's pulls and publishes their progress into the
// state (state.DownloadProgress): every second while one runs, and when
// it ends.

// Limits.
const (
	// MaxRunning bounds the pulls running at once on a node.
	MaxRunning = 4
	// progressEvery is how often a running pull's progress is published.
	progressEvery = time.Second
	// rateWindow is the span the MB/s figure is measured over.
	rateWindow = 5 * time.Second
)

// Errors the API maps to statuses.
var (
	ErrBadRef     = errors.New("bad model reference")
	ErrTooMany    = errors.New("too many pulls running")
	ErrNoSuchPull = errors.New("no such pull")
)

// Config wires a Puller.
type Config struct {
	Self string
	// HFCache is the hub cache dir hf.co pulls go to; OllamaDir the
	// Ollama store registry pulls go to.
	HFCache   string
	HF        HF
	OllamaDir string
	Registry  Registry
	// Offline refuses pulls (HF_HUB_OFFLINE).
	Offline bool
	Fetcher *Fetcher
	// Publish sends a download's progress into the state.
	Publish func(state.Event) error
	// Pulled is called after a pull completed (to rescan the models).
	Pulled func()
	Logger *slog.Logger
}

// Puller is safe for concurrent use.
type Puller struct {
	cfg  Config
	log  *slog.Logger
	base context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu   sync.Mutex // guards jobs
	jobs map[string]*job
}

// job is one running pull.
type job struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once dl holds the outcome
	mu     sync.Mutex    // guards dl and samples
	dl     state.Download
	// samples are (time, bytes) for the rate, over rateWindow.
	samples []sample
}

type sample struct {
	at    time.Time
	bytes int64
}

// New returns a Puller; Close cancels its pulls.
func New(cfg Config) *Puller {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Fetcher == nil {
		cfg.Fetcher = &Fetcher{}
	}
	// One client, with connect, TLS and header timeouts, for everything a
	// pull asks of a hub or registry.
	hc := transfer.Client()
	if cfg.Fetcher.Client == nil {
		f := *cfg.Fetcher
		f.Client = hc
		cfg.Fetcher = &f
	}
	if cfg.HF.Client == nil {
		cfg.HF.Client = hc
	}
	if cfg.Registry.Client == nil {
		cfg.Registry.Client = hc
	}
	if cfg.Pulled == nil {
		cfg.Pulled = func() {}
	}
	base, stop := context.WithCancel(context.Background())
	return &Puller{cfg: cfg, log: cfg.Logger.With("component", "pull"), base: base, stop: stop, jobs: map[string]*job{}}
}

// Pull starts pulling ref (hf.co/{org}/{repo}[:{quant}], or
// [namespace/]name[:tag] from the registry) and returns its download at
// once. A pull of the same reference already running is returned instead
// of a second one.
func (p *Puller) Pull(ref string) (state.Download, error) {
	_, d, err := p.start(ref)
	return d, err
}

// start is Pull, also returning the job.
func (p *Puller) start(ref string) (*job, state.Download, error) {
	var norm string
	var fetch func(ctx context.Context, j *job) error
	if r, ok, err := ParseHFRef(ref); ok {
		if err != nil {
			return nil, state.Download{}, fmt.Errorf("%w: %v", ErrBadRef, err)
		}
		if p.cfg.Offline {
			return nil, state.Download{}, ErrOffline
		}
		norm = "hf.co/" + r.Repo + ":" + r.Quant
		fetch = func(ctx context.Context, j *job) error { return p.fetchHF(ctx, j, r) }
	} else {
		r, err := ParseOllamaRef(ref)
		if err != nil {
			return nil, state.Download{}, fmt.Errorf("%w: %v (or hf.co/{org}/{repo}[:{quant}])", ErrBadRef, err)
		}
		norm = r.String()
		fetch = func(ctx context.Context, j *job) error { return p.fetchOllama(ctx, j, r) }
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range p.jobs {
		if d := j.snapshot(); d.Ref == norm && d.Status == state.DownloadRunning {
			return j, d, nil
		}
	}
	if len(p.jobs) >= MaxRunning {
		return nil, state.Download{}, fmt.Errorf("%w: %d at once (wait for one to end)", ErrTooMany, MaxRunning)
	}
	var b [4]byte
	rand.Read(b[:])
	now := time.Now().UTC()
	ctx, cancel := context.WithCancel(p.base)
	j := &job{cancel: cancel, done: make(chan struct{}), dl: state.Download{ID: "pull-" + hex.EncodeToString(b[:]), NodeID: p.cfg.Self, Ref: norm,
		Status: state.DownloadRunning, Files: []state.DownloadFile{}, StartedAt: now, UpdatedAt: now}}
	first := j.dl
	p.jobs[first.ID] = j
	p.publish(first)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.run(ctx, j, fetch, first.ID)
	}()
	return j, first, nil
}

// Cancel stops a running pull; its part files stay, for a later pull of
// the same model to resume.
func (p *Puller) Cancel(id string) error {
	p.mu.Lock()
	j := p.jobs[id]
	p.mu.Unlock()
	if j == nil {
		return fmt.Errorf("%w %q running on this node", ErrNoSuchPull, id)
	}
	j.cancel()
	return nil
}

// Close cancels every pull and waits for them to end.
func (p *Puller) Close() {
	p.stop()
	p.wg.Wait()
}

func (j *job) snapshot() state.Download {
	j.mu.Lock()
	defer j.mu.Unlock()
	d := j.dl
	d.Files = append([]state.DownloadFile(nil), j.dl.Files...)
	return d
}

func (p *Puller) publish(d state.Download) {
	if err := p.cfg.Publish(state.DownloadProgress{NodeID: p.cfg.Self, Download: d}); err != nil {
		p.log.Warn("publish download progress", "download", d.ID, "err", err)
	}
}

// run pulls one reference: list, fetch each file, link it into the cache.
func (p *Puller) run(ctx context.Context, j *job, fetch func(context.Context, *job) error, id string) {
	defer func() {
		p.mu.Lock()
		delete(p.jobs, id)
		p.mu.Unlock()
	}()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	tickDone := make(chan struct{})
	go func() {
		for {
			select {
			case <-tickDone:
				return
			case <-tick.C:
				p.publish(j.progress(time.Now()))
			}
		}
	}()
	err := fetch(ctx, j)
	close(tickDone)
	j.mu.Lock()
	switch {
	case err == nil:
		j.dl.Status = state.DownloadDone
	case ctx.Err() != nil:
		j.dl.Status, j.dl.Error = state.DownloadCanceled, "canceled"
	default:
		j.dl.Status, j.dl.Error = state.DownloadFailed, truncate(err.Error(), 2048)
	}
	j.mu.Unlock()
	d := j.progress(time.Now())
	d.MBps, d.EtaSeconds = nil, nil
	p.publish(d)
	defer close(j.done)
	if err != nil {
		p.log.Warn("pull failed", "ref", d.Ref, "download", d.ID, "err", err)
		return
	}
	p.log.Info("pulled", "ref", d.Ref, "model", d.Model, "bytes", d.Size, "resumed", d.Resumed,
		"took", time.Since(d.StartedAt).Round(time.Millisecond))
	p.cfg.Pulled()
}

// fetchHF pulls a repo's quant from the hub into the HF cache.
func (p *Puller) fetchHF(ctx context.Context, j *job, r HFRef) error {
	files, err := p.cfg.HF.Files(ctx, r)
	if err != nil {
		return err
	}
	commit, err := p.cfg.HF.Commit(ctx, r.Repo)
	if err != nil {
		return err
	}
	cache := HFCache{Dir: p.cfg.HFCache}
	j.mu.Lock()
	for _, f := range files {
		df := state.DownloadFile{Name: f.Path, Size: f.Size}
		if f.SHA256 != "" {
			df.Digest = "sha256:" + f.SHA256
		}
		j.dl.Files = append(j.dl.Files, df)
		j.dl.Size += f.Size
	}
	// The scanner names a hub model {repo}/{first file without .gguf}.
	j.dl.Model = r.Repo + "/" + strings.TrimSuffix(files[0].Path, path.Ext(files[0].Path))
	j.mu.Unlock()
	f := p.fetcher(j)
	f.Header = p.cfg.HF.Header()
	for i, file := range files {
		t := Target{URL: p.cfg.HF.ResolveURL(r.Repo, file.Path), Size: file.Size, SHA256: file.SHA256,
			Dest: cache.Blob(r.Repo, file.SHA256)}
		if err := j.fetch(ctx, &f, i, t); err != nil {
			return err
		}
		if _, err := cache.Link(r.Repo, commit, file); err != nil {
			return fmt.Errorf("link %s: %w", file.Path, err)
		}
	}
	return nil
}

// fetchOllama pulls a model from the registry into the Ollama store:
// every blob, then the manifest.
func (p *Puller) fetchOllama(ctx context.Context, j *job, r OllamaRef) error {
	if p.cfg.OllamaDir == "" {
		return errors.New("no Ollama store to pull into (no home directory, and OLLAMA_MODELS unset)")
	}
	m, raw, err := p.cfg.Registry.Manifest(ctx, r)
	if err != nil {
		return err
	}
	store, host := OllamaStore{Dir: p.cfg.OllamaDir}, p.cfg.Registry.Host()
	layers := append([]Layer{m.Config}, m.Layers...)
	j.mu.Lock()
	for _, l := range layers {
		j.dl.Files = append(j.dl.Files, state.DownloadFile{Name: l.MediaType + " " + l.Digest[:19], Size: l.Size, Digest: l.Digest})
		j.dl.Size += l.Size
	}
	j.dl.Model = store.ModelID(host, r)
	j.mu.Unlock()
	f := p.fetcher(j)
	for i, l := range layers {
		t := Target{URL: p.cfg.Registry.BlobURL(r, l.Digest), Size: l.Size, SHA256: strings.TrimPrefix(l.Digest, "sha256:"),
			Dest: store.Blob(l.Digest)}
		if err := j.fetch(ctx, &f, i, t); err != nil {
			return err
		}
	}
	return store.WriteManifest(host, r, raw)
}

// fetcher is the Fetcher of job j: its retries and stalls go into j's
// download, and each stall into the log, once, with the host.
func (p *Puller) fetcher(j *job) Fetcher {
	f := *p.cfg.Fetcher
	f.OnRetry = func(r Retry) {
		j.mu.Lock()
		j.dl.Retries++
		if r.Stalled {
			j.dl.Stalls++
		}
		ref, id := j.dl.Ref, j.dl.ID
		j.mu.Unlock()
		if r.Stalled {
			p.log.Warn("download stalled; resuming on a new connection", "ref", ref, "download", id, "host", r.Host, "err", r.Err)
		} else {
			p.log.Info("download attempt failed; retrying", "ref", ref, "download", id, "host", r.Host, "err", r.Err)
		}
	}
	return f
}

// fetch fetches file i of the download, counting its progress and the
// bytes resumed.
func (j *job) fetch(ctx context.Context, f *Fetcher, i int, t Target) error {
	st, err := f.Fetch(ctx, t, func(done, _ int64) { j.setFile(i, done) })
	j.mu.Lock()
	j.dl.Resumed += st.Resumed
	j.mu.Unlock()
	if err != nil {
		return err
	}
	j.setFile(i, t.Size)
	return nil
}

func (j *job) setFile(i int, done int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dl.Files[i].Bytes = done
	var total int64
	for _, f := range j.dl.Files {
		total += f.Bytes
	}
	j.dl.Bytes = total
}

// progress is the download now, with its rate over rateWindow and ETA.
func (j *job) progress(now time.Time) state.Download {
	j.mu.Lock()
	j.dl.UpdatedAt = now.UTC()
	j.samples = append(j.samples, sample{now, j.dl.Bytes})
	for len(j.samples) > 2 && now.Sub(j.samples[1].at) >= rateWindow {
		j.samples = j.samples[1:]
	}
	first := j.samples[0]
	if dt := now.Sub(first.at).Seconds(); dt > 0 && len(j.samples) > 1 {
		rate := float64(j.dl.Bytes-first.bytes) / dt
		j.dl.MBps = state.Float(rate / 1e6)
		if rate > 0 {
			j.dl.EtaSeconds = state.Float(float64(j.dl.Size-j.dl.Bytes) / rate)
		}
	}
	j.mu.Unlock()
	return j.snapshot()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
