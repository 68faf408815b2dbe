package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/internal/chatstream"
)

// demoModel is the generated model the demo serves.
const demoModel = "orrery-demo-small"

// demoLoadTimeout bounds the wait for the demo model's runner.
const demoLoadTimeout = 2 * time.Minute

// demoChat generates the demo model on the last node, places it across
// every node (the others receive their shards from the last node over the
// peer link), streams one chat completion through node 0, prints the
// tokens and their speed, and returns the request's trace id.
func demoChat(ctx context.Context, nodes []*demoNode, stdout, stderr io.Writer) (string, error) {
	host, entry := nodes[len(nodes)-1], nodes[0]
	path := filepath.Join(host.dataDir, "models", demoModel+".gguf")
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "orrery demo: generating a random-weight model (%s) on node %d …\n", shape(model.Presets["small"]), host.idx)
		if err := model.Generate(path, model.Presets["small"]); err != nil {
			return "", fmt.Errorf("generate the demo model: %w", err)
		}
	}
	var ids []string
	for _, n := range nodes {
		ids = append(ids, `"`+n.id+`"`)
	}
	body, code, err := demoPost(ctx, host.url+"/instance", `{"model":"`+demoModel+`","nodes":[`+strings.Join(ids, ",")+`]}`)
	if err != nil {
		return "", fmt.Errorf("place %s: %w", demoModel, err)
	}
	if code != http.StatusCreated {
		return "", fmt.Errorf("place %s: %d %s", demoModel, code, body)
	}
	var placed struct {
		Instance struct {
			Ranks []struct {
				Rank                  int    `json:"rank"`
				NodeID                string `json:"nodeId"`
				FirstLayer, LastLayer int
			} `json:"ranks"`
		} `json:"instance"`
		RunnerIDs []string `json:"runnerIds"`
	}
	if err := json.Unmarshal(body, &placed); err != nil || len(placed.RunnerIDs) != len(nodes) {
		return "", fmt.Errorf("place %s: answer %s", demoModel, body)
	}
	for _, id := range placed.RunnerIDs {
		if err := demoWaitRunner(ctx, host.url, id, stderr); err != nil {
			return "", err
		}
	}
	idx := map[string]int{}
	for _, n := range nodes {
		idx[n.id] = n.idx
	}
	var split []string
	for _, r := range placed.Instance.Ranks {
		split = append(split, fmt.Sprintf("rank %d: node %d, layers %d-%d", r.Rank, idx[r.NodeID], r.FirstLayer, r.LastLayer-1))
	}
	fmt.Fprintf(stdout, "\nChat with %s split over %d nodes (%s), asked through node %d (random weights: gibberish by design):\n> hello, cluster\n",
		demoModel, len(nodes), strings.Join(split, "; "), entry.idx)
	return demoStream(ctx, entry.url, stdout)
}

func demoPost(ctx context.Context, url, body string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return b, resp.StatusCode, err
}

// demoWaitRunner shows the runner's load progress until it is Ready.
func demoWaitRunner(ctx context.Context, url, id string, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, demoLoadTimeout)
	defer cancel()
	last := ""
	for {
		var r struct {
			Status       string `json:"status"`
			LayersLoaded int    `json:"layersLoaded"`
			TotalLayers  int    `json:"totalLayers"`
			Error        string `json:"error"`
			Transfer     *struct {
				From         string
				Bytes, Total struct{ InBytes uint64 }
			} `json:"transfer"`
		}
		if err := apiGet(ctx, http.DefaultClient, url, "/state/runners/"+id, &r); err == nil {
			line := fmt.Sprintf("runner %s: %s %d/%d layers", id, r.Status, r.LayersLoaded, r.TotalLayers)
			if r.Transfer != nil && r.Transfer.Total.InBytes > 0 {
				line += fmt.Sprintf(", shard %.1f of %.1f MB from %.8s", float64(r.Transfer.Bytes.InBytes)/1e6, float64(r.Transfer.Total.InBytes)/1e6, r.Transfer.From)
			}
			if line != last {
				fmt.Fprintf(stderr, "orrery demo: %s\n", line)
				last = line
			}
			switch r.Status {
			case "Ready", "Running":
				return nil
			case "Failed", "Shutdown":
				return fmt.Errorf("runner %s failed: %s", id, r.Error)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("runner %s not ready within %v (last: %s)", id, demoLoadTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// demoStream streams one completion, printing tokens as they come and
// then the speed figures; it returns the trace id.
func demoStream(ctx context.Context, url string, stdout io.Writer) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	body := `{"model":"` + demoModel + `","stream":true,"max_tokens":48,"seed":1,` +
		`"messages":[{"role":"user","content":"hello, cluster"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("chat: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", fmt.Errorf("chat: %s %s", resp.Status, b)
	}
	traceID := resp.Header.Get("X-Orrery-Trace-Id")
	var first time.Duration
	var fin chatstream.Chunk // the last chunk has usage and timings
	err = chatstream.Read(resp.Body, func(c chatstream.Chunk) {
		if text := c.Content(); text != "" {
			if first == 0 {
				first = time.Since(start)
			}
			fmt.Fprint(stdout, printable(text))
		}
		if c.Usage != nil && c.Orrery != nil {
			fin = c
		}
	})
	if err != nil {
		return traceID, err
	}
	if fin.Usage == nil {
		return traceID, errors.New("chat stream: no usage in the last chunk")
	}
	total := time.Since(start)
	fmt.Fprintf(stdout, "\n\n%d tokens in %.2f s (%.1f tok/s end to end); prompt %d tokens at %.0f tok/s, decode %.1f tok/s, first token after %.0f ms\n",
		fin.Usage.CompletionTokens, total.Seconds(), float64(fin.Usage.CompletionTokens)/total.Seconds(),
		fin.Usage.PromptTokens, fin.Orrery.PrefillTokPerSec, fin.Orrery.DecodeTokPerSec, float64(first.Microseconds())/1000)
	return traceID, nil
}

// printable keeps generated text from moving the terminal's cursor:
// control characters other than newline and tab become U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}
