package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultBaseURL is where an agent's API listens unless told otherwise.
const DefaultBaseURL = "http://127.0.0.1:52416"

// maxResponse bounds what is read of one JSON answer (a long trace list is
// the largest).
const maxResponse = 64 << 20

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 64 << 10

// Client calls one agent's API. Set BaseURL; the other fields may stay
// zero. It is safe for concurrent use.
type Client struct {
	// BaseURL is the API's base, scheme://host:port, e.g.
	// http://127.0.0.1:52416 (see ParseBaseURL).
	BaseURL string
	// HTTP is the client to use; nil means http.DefaultClient.
	HTTP *http.Client
	// Timeout, when > 0, bounds each request, answer included, whose
	// context has no deadline of its own.
	Timeout time.Duration
	// Token, when set, is sent as a bearer token: the API of an agent
	// reached from another machine asks for it (--api-token).
	Token string
}

// New returns a client of the API at baseURL (a trailing slash is cut).
func New(baseURL string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/")}
}

// ParseBaseURL accepts "http://host:port", "host:port" and a trailing
// slash, and returns "scheme://host:port".
func ParseBaseURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("want an http:// URL, got scheme %q", u.Scheme)
	}
	if u.Host == "" {
		return "", errors.New("no host")
	}
	if p := strings.TrimRight(u.Path, "/"); p != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("want only scheme, host and port, e.g. http://127.0.0.1:52416")
	}
	return u.Scheme + "://" + u.Host, nil
}

// Error is an answer of the agent other than 2xx.
type Error struct {
	Method string
	URL    string
	Status int
	// Message is the API's {"error": "…"} or OpenAI's
	// {"error": {"message": "…"}}, else the body.
	Message string
	// PageURL is the {"url": …} a failed trace open carries: the page to
	// open by hand.
	PageURL string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.Status, http.StatusText(e.Status), e.Message)
}

// errorOf reads an error answer's message.
func errorOf(method, url string, status int, body []byte) *Error {
	e := &Error{Method: method, URL: url, Status: status, Message: strings.TrimSpace(string(body))}
	var plain struct {
		Error string `json:"error"`
		URL   string `json:"url"`
	}
	var oai struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &plain) == nil && plain.Error != "" {
		e.Message, e.PageURL = plain.Error, plain.URL
	} else if json.Unmarshal(body, &oai) == nil && oai.Error.Message != "" {
		e.Message = oai.Error.Message
	}
	return e
}

// path joins literal path parts and escaped segments: path("/v1/traces/",
// id, "/stats"). Parts at even positions are literal, odd ones escaped.
func path(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			p = url.PathEscape(p)
		}
		b.WriteString(p)
	}
	return b.String()
}

// query is path with an encoded query.
func query(p string, q url.Values) string { return p + "?" + q.Encode() }

// open sends one request (in as JSON unless nil) and returns a 2xx answer,
// whose body the caller closes; the body's Close ends the request's
// Timeout. Transport errors come back as the http.Client's *url.Error.
func (c *Client) open(ctx context.Context, method, p string, in any) (*http.Response, error) {
	cancel := context.CancelFunc(func() {})
	if _, has := ctx.Deadline(); !has && c.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
	}
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("%s %s: %w", method, p, err)
		}
		rd = bytes.NewReader(b)
	}
	u := c.BaseURL + p
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		cancel()
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer cancel()
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, errorOf(method, u, resp.StatusCode, b)
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelBody ends a request's own timeout when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// raw returns the body of a 2xx answer.
func (c *Client) raw(ctx context.Context, method, p string, in any) ([]byte, error) {
	resp, err := c.open(ctx, method, p, in)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, c.BaseURL+p, err)
	}
	return b, nil
}

// do sends one request and decodes a 2xx answer into out (unless nil).
func (c *Client) do(ctx context.Context, method, p string, in, out any) error {
	b, err := c.raw(ctx, method, p, in)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode: %w", method, c.BaseURL+p, err)
	}
	return nil
}

// get is do for GET.
func (c *Client) get(ctx context.Context, p string, out any) error {
	return c.do(ctx, http.MethodGet, p, nil, out)
}
