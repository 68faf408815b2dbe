package runnerapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/orrery-cluster/orrery/engine/trace"
)

// maxLineBytes bounds one NDJSON line from a runner (the final line
// carries the spans of a long completion).
const maxLineBytes = 64 << 20

// Client talks to one runner process.
type Client struct {
	// Addr is the runner's host:port on loopback; Token its bearer token.
	Addr, Token string
	// HTTP defaults to a client without timeouts (streams are long;
	// callers bound them with their context).
	HTTP *http.Client
}

// RequestError is an error the runner answered before streaming.
type RequestError struct {
	Status int
	ErrorBody
}

func (e *RequestError) Error() string { return e.ErrorBody.Error }

// ErrStreamBroken is wrapped when the runner's stream ends without its
// final line: the process died or the connection broke mid-completion.
var ErrStreamBroken = errors.New("runner stream ended early")

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Addr+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.http().Do(req)
}

// Health asks for the runner's status.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.getJSON(ctx, "/health", &h)
	return h, err
}

// LoadSpans returns the spans the runner recorded while loading.
func (c *Client) LoadSpans(ctx context.Context) ([]trace.Span, error) {
	var v struct {
		Spans []trace.Span `json:"spans"`
	}
	err := c.getJSON(ctx, "/load-trace", &v)
	return v.Spans, err
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxLineBytes)).Decode(v); err != nil {
		return fmt.Errorf("runner %s: %w", path, err)
	}
	return nil
}

func readError(resp *http.Response) error {
	var eb ErrorBody
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		eb = ErrorBody{Error: fmt.Sprintf("runner answered %s: %.200s", resp.Status, b), Kind: "runner"}
	}
	return &RequestError{Status: resp.StatusCode, ErrorBody: eb}
}

// Complete runs a completion, calling onPiece for every token as it
// comes. It returns the final line, a *RequestError for a request the
// runner refused, or an error wrapping ErrStreamBroken. When the runner
// reports a failure mid-stream, the Done it returns with the error holds
// the spans recorded until then.
func (c *Client) Complete(ctx context.Context, req CompletionRequest, onPiece func(Piece) error) (*Done, error) {
	resp, err := c.do(ctx, http.MethodPost, "/completion", req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStreamBroken, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue // blank lines carry nothing
		}
		var m StreamMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("runner stream: %w", err)
		}
		switch {
		case m.Error != "":
			return m.Done, errors.New(m.Error)
		case m.Done != nil:
			return m.Done, nil
		case m.Piece != nil:
			if err := onPiece(*m.Piece); err != nil {
				return nil, err
			}
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("%w: %v", ErrStreamBroken, err)
}

// Embed asks the runner for an embedding request's vectors: an
// *RequestError for a request it refused.
func (c *Client) Embed(ctx context.Context, req EmbedRequest) (*EmbedResponse, error) {
	resp, err := c.do(ctx, http.MethodPost, "/embed", req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStreamBroken, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readError(resp)
	}
	var out EmbedResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxLineBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: runner /embed: %v", ErrStreamBroken, err)
	}
	if len(out.Embeddings) != len(req.Inputs) {
		return nil, fmt.Errorf("runner /embed: %d vectors for %d inputs", len(out.Embeddings), len(req.Inputs))
	}
	return &out, nil
}
