package runnerapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// bodyTransport answers every request with a fixed NDJSON body.
type bodyTransport string

func (b bodyTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/x-ndjson"}},
		Body: io.NopCloser(strings.NewReader(string(b)))}, nil
}

// Whatever a runner's stream holds, the client returns a Done or an error,
// never both, never a panic; a stream without its final line is
// ErrStreamBroken.
func FuzzCompleteStream(f *testing.F) {
	f.Add(`{"piece":{"index":0,"token":5,"text":"hi"}}` + "\n" + `{"done":{"finishReason":"stop","promptTokens":3,"completionTokens":1}}` + "\n")
	f.Add(`{"piece":{"index":0,"token":5,"text":"hi"}}` + "\n")
	f.Add(`{"error":"boom"}` + "\n")
	f.Add("not json\n")
	f.Add(`{"done":{"spans":[{"name":"x","cat":"decode","startNs":1,"durNs":2}]}}`)
	f.Fuzz(func(t *testing.T, body string) {
		c := &Client{Addr: "runner", Token: "t", HTTP: &http.Client{Transport: bodyTransport(body)}}
		pieces := 0
		done, err := c.Complete(context.Background(), CompletionRequest{}, func(Piece) error { pieces++; return nil })
		if err == nil && done == nil {
			t.Fatal("no error and no done")
		}
		// What the stream should end with, read independently: the first
		// line that ends it, or none.
		ended := false
		for _, line := range strings.Split(body, "\n") {
			var m StreamMsg
			if strings.TrimSpace(line) == "" {
				continue
			}
			if json.Unmarshal([]byte(line), &m) != nil {
				ended = true // a bad line ends it with an error
				break
			}
			if m.Error != "" || m.Done != nil {
				ended = true
				break
			}
		}
		if !ended && !errors.Is(err, ErrStreamBroken) {
			t.Fatalf("a stream without an end gave %v, want ErrStreamBroken", err)
		}
	})
}
