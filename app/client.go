package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/tracestore"
)

// RequestTimeout bounds one request of Client when the caller's context
// has no earlier deadline: the agent's API is local, so a slow answer
// means a stuck agent, and the menu should say so rather than hang.
const RequestTimeout = 5 * time.Second

// Client reads the agent's local HTTP API. The zero value is not usable:
// set BaseURL. It is safe for concurrent use.
type Client struct {
	// BaseURL is the API's base, e.g. http://127.0.0.1:52416.
	BaseURL string
	// HTTP is the client to use; nil means http.DefaultClient.
	HTTP *http.Client
}

// APIError is a non-2xx answer of the agent.
type APIError struct {
	Status  int
	Message string // the agent's {"error": …}, or the body's start
	URL     string // the {"url": …} some errors carry (trace open)
}

func (e *APIError) Error() string { return fmt.Sprintf("agent answered %d: %s", e.Status, e.Message) }

// State returns GET /state.
func (c *Client) State(ctx context.Context) (state.State, error) {
	var st state.State
	err := c.do(ctx, http.MethodGet, "/state", nil, &st)
	return st, err
}

// Traces returns GET /v1/traces, as the agent orders them.
func (c *Client) Traces(ctx context.Context) ([]tracestore.Meta, error) {
	var body struct {
		Traces []tracestore.Meta `json:"traces"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/traces", nil, &body)
	return body.Traces, err
}

// StepStats is the part of GET /v1/traces/{id}/stats the menu reads: the
// step spans per step category, and the ranks.
type StepStats struct {
	PerStep map[string]struct {
		TotalUs int64 `json:"totalUs"`
		Count   int64 `json:"count"`
	} `json:"perStep"`
	ByRank map[string]json.RawMessage `json:"byRank"`
}

// DecodeTokPerS is the decode speed of a generation trace. Rank 0 drives
// the pipeline: its decode step for a token runs from sending the token
// down to receiving the next one back, so it spans every rank's share of
// that token; its steps' count over their total time is tokens per second.
// (The other ranks' steps overlap rank 0's and must not be added.) Traces
// without rank stats fall back to all decode steps divided by the ranks.
// ok is false when the trace has no decode steps.
func (s StepStats) DecodeTokPerS() (tokPerS float64, ok bool) {
	if raw, has := s.ByRank["0"]; has {
		var r0 struct {
			ByCategory map[string]struct {
				TotalUs int64 `json:"totalUs"`
				Count   int64 `json:"count"`
			} `json:"byCategory"`
		}
		if json.Unmarshal(raw, &r0) == nil {
			if d, has := r0.ByCategory["decode"]; has && d.Count > 0 && d.TotalUs > 0 {
				return float64(d.Count) * 1e6 / float64(d.TotalUs), true
			}
		}
	}
	d, has := s.PerStep["decode"]
	if !has || d.Count == 0 || d.TotalUs <= 0 {
		return 0, false
	}
	ranks := max(len(s.ByRank), 1)
	return float64(d.Count) / float64(ranks) * 1e6 / float64(d.TotalUs), true
}

// TraceStats returns GET /v1/traces/{id}/stats.
func (c *Client) TraceStats(ctx context.Context, id string) (StepStats, error) {
	var s StepStats
	err := c.do(ctx, http.MethodGet, "/v1/traces/"+url.PathEscape(id)+"/stats", nil, &s)
	return s, err
}

// OpenTrace asks the agent to open its Perfetto hand-off page for trace id
// in the system browser (POST /v1/traces/{id}/open). When the agent cannot
// open a browser the *APIError carries the page's URL.
func (c *Client) OpenTrace(ctx context.Context, id string) (pageURL string, err error) {
	var body struct {
		URL string `json:"url"`
	}
	err = c.do(ctx, http.MethodPost, "/v1/traces/"+url.PathEscape(id)+"/open", []byte("{}"), &body)
	return body.URL, err
}

func (c *Client) do(ctx context.Context, method, path string, reqBody []byte, out any) error {
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, RequestTimeout)
		defer cancel()
	}
	var rd io.Reader
	if reqBody != nil {
		rd = bytes.NewReader(reqBody)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if reqBody != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		apiErr := &APIError{Status: resp.StatusCode, Message: string(bytes.TrimSpace(b))}
		var e struct {
			Error string `json:"error"`
			URL   string `json:"url"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			apiErr.Message, apiErr.URL = e.Error, e.URL
		}
		return fmt.Errorf("%s %s: %w", method, path, apiErr)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode: %w", method, path, err)
	}
	return nil
}

// pageURLOf returns the hand-off page's URL an OpenTrace error carries.
func pageURLOf(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.URL
	}
	return ""
}
