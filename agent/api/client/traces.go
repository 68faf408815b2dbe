package client

import (
	"context"
	"io"
	"net/http"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/tracestore"
)

// Traces returns GET /v1/traces: the node's traces, newest first.
func (c *Client) Traces(ctx context.Context) ([]tracestore.Meta, error) {
	var l api.TraceList
	err := c.get(ctx, "/v1/traces", &l)
	return l.Traces, err
}

// TracesJSON is Traces's answer as the agent wrote it.
func (c *Client) TracesJSON(ctx context.Context) ([]byte, error) {
	return c.raw(ctx, http.MethodGet, "/v1/traces", nil)
}

// Trace returns GET /v1/traces/{id}: one trace's metadata.
func (c *Client) Trace(ctx context.Context, id string) (tracestore.Meta, error) {
	var m tracestore.Meta
	err := c.get(ctx, path("/v1/traces/", id), &m)
	return m, err
}

// TraceStats returns GET /v1/traces/{id}/stats.
func (c *Client) TraceStats(ctx context.Context, id string) (api.TraceStats, error) {
	var st api.TraceStats
	err := c.get(ctx, path("/v1/traces/", id, "/stats"), &st)
	return st, err
}

// TraceStatsJSON is TraceStats's answer as the agent wrote it.
func (c *Client) TraceStatsJSON(ctx context.Context, id string) ([]byte, error) {
	return c.raw(ctx, http.MethodGet, path("/v1/traces/", id, "/stats"), nil)
}

// TraceRaw returns GET /v1/traces/{id}/raw, the Chrome-trace JSON, as a
// stream the caller closes.
func (c *Client) TraceRaw(ctx context.Context, id string) (io.ReadCloser, error) {
	resp, err := c.open(ctx, http.MethodGet, path("/v1/traces/", id, "/raw"), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// DeleteTrace runs DELETE /v1/traces/{id}.
func (c *Client) DeleteTrace(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, path("/v1/traces/", id), nil, &api.TraceDeleted{})
}

// OpenTrace asks the agent to open its Perfetto page for trace id in the
// system browser (POST /v1/traces/{id}/open) and returns the page's URL.
// When the agent cannot open a browser the *Error's PageURL is the page.
func (c *Client) OpenTrace(ctx context.Context, id string) (pageURL string, err error) {
	var o api.TraceOpened
	err = c.do(ctx, http.MethodPost, path("/v1/traces/", id, "/open"), struct{}{}, &o)
	return o.URL, err
}

// PerfettoURL is the agent's Perfetto hand-off page of trace id.
func (c *Client) PerfettoURL(id string) string { return c.BaseURL + path("/perfetto/", id) }
