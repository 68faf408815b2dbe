package agent

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/instance"
	"github.com/orrery-cluster/orrery/agent/pull"
	"github.com/orrery-cluster/orrery/agent/state"
)

// newPuller pulls hf.co models into the Hugging Face cache the scanner
// reads (or <data-dir>/huggingface when there is no home), honouring
// HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE as the huggingface_hub tools
// do, and registry models into Ollama's store (OLLAMA_MODELS).
func newPuller(cfg Config, self string, publish func(state.Event) error, pulled func(), log *slog.Logger) *pull.Puller {
	dir := cfg.modelDirs().HuggingFace
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "huggingface")
	}
	off := strings.ToLower(cfg.Getenv("HF_HUB_OFFLINE"))
	return pull.New(pull.Config{Self: self, HFCache: dir,
		HF:        pull.HF{Endpoint: cfg.Getenv("HF_ENDPOINT"), Token: cfg.Getenv("HF_TOKEN")},
		OllamaDir: cfg.modelDirs().Ollama, Registry: pull.Registry{URL: cfg.Registry},
		Offline: off == "1" || off == "true" || off == "yes" || off == "on",
		Fetcher: &pull.Fetcher{Stall: cfg.DownloadIdle},
		Publish: publish, Pulled: pulled, Logger: log})
}

// pullsView is the Puller, and the model deletion of the instance
// manager, as the API sees them.
type pullsView struct {
	p *pull.Puller
	m *instance.Manager
}

func (v pullsView) DeleteModel(id string) (api.ModelDeleted, error) { return v.m.DeleteModel(id) }

func (v pullsView) Pull(ref string) (state.Download, error) {
	d, err := v.p.Pull(ref)
	return d, pullErr(err)
}

func (v pullsView) CancelPull(id string) error { return pullErr(v.p.Cancel(id)) }

// pullErr classifies a Puller error for the API, keeping its text.
func pullErr(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pull.ErrBadRef):
		kind = api.ErrPullRef
	case errors.Is(err, pull.ErrTooMany):
		kind = api.ErrPullBusy
	case errors.Is(err, pull.ErrOffline):
		kind = api.ErrPullOffline
	case errors.Is(err, pull.ErrNoSuchPull):
		kind = api.ErrNoPull
	default:
		return err
	}
	return classified{err, kind}
}

// classified is an error that also is kind.
type classified struct{ err, kind error }

func (c classified) Error() string   { return c.err.Error() }
func (c classified) Unwrap() []error { return []error{c.err, c.kind} }
