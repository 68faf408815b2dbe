package app

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/tracestore"
)

// RequestTimeout bounds one request of Client when the caller's context
// has no earlier deadline: the agent's API is local, so a slow answer
// means a stuck agent, and the menu should say so rather than hang.
const RequestTimeout = 5 * time.Second

// Client reads the agent's local HTTP API for the menu, through the
// shared API client (agent/api/client) with RequestTimeout. The zero
// value is not usable: set BaseURL. It is safe for concurrent use.
type Client struct {
	// BaseURL is the API's base, e.g. http://127.0.0.1:52416.
	BaseURL string
	// HTTP is the client to use; nil means http.DefaultClient.
	HTTP *http.Client
}

// APIError is a non-2xx answer of the agent.
type APIError = client.Error

func (c *Client) api() *client.Client {
	return &client.Client{BaseURL: c.BaseURL, HTTP: c.HTTP, Timeout: RequestTimeout}
}

// State returns GET /state.
func (c *Client) State(ctx context.Context) (state.State, error) { return c.api().State(ctx) }

// Traces returns GET /v1/traces, as the agent orders them.
func (c *Client) Traces(ctx context.Context) ([]tracestore.Meta, error) {
	return c.api().Traces(ctx)
}

// TraceStats returns GET /v1/traces/{id}/stats.
func (c *Client) TraceStats(ctx context.Context, id string) (StepStats, error) {
	st, err := c.api().TraceStats(ctx, id)
	return StepStats{st}, err
}

// OpenTrace asks the agent to open its Perfetto hand-off page for trace id
// in the system browser (POST /v1/traces/{id}/open). When the agent cannot
// open a browser the *APIError carries the page's URL.
func (c *Client) OpenTrace(ctx context.Context, id string) (pageURL string, err error) {
	return c.api().OpenTrace(ctx, id)
}

// StepStats is a trace's statistics as the menu reads them: for the
// decode speed of its latest chat.
type StepStats struct{ api.TraceStats }

// DecodeTokPerS is the decode speed of a generation trace. Rank 0 drives
// the pipeline: its decode step for a token runs from sending the token
// down to receiving the next one back, so it spans every rank's share of
// that token; its steps' count over their total time is tokens per second.
// (The other ranks' steps overlap rank 0's and must not be added.) Traces
// without rank stats fall back to all decode steps divided by the ranks.
// ok is false when the trace has no decode steps.
func (s StepStats) DecodeTokPerS() (tokPerS float64, ok bool) {
	if d, has := s.ByRank["0"].ByCategory["decode"]; has && d.Count > 0 && d.TotalUs > 0 {
		return float64(d.Count) * 1e6 / float64(d.TotalUs), true
	}
	d, has := s.PerStep["decode"]
	if !has || d.Count == 0 || d.TotalUs <= 0 {
		return 0, false
	}
	ranks := max(len(s.ByRank), 1)
	return float64(d.Count) / float64(ranks) * 1e6 / float64(d.TotalUs), true
}

// pageURLOf returns the hand-off page's URL an OpenTrace error carries.
func pageURLOf(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.PageURL
	}
	return ""
}
