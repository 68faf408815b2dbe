package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
	"github.com/orrery-cluster/orrery/internal/chatstream"
)

// Model is the generated model the demo serves when it is given no file.
const Model = "orrery-demo-small"

// served is the model the demo chats with.
type served struct {
	id, path        string // path "": generate the small preset as id
	draftID, draft  string // draft "": none
	prompt, shownAs string
	maxTokens       int
}

// demoModel is what opts ask the demo to serve: a model file (the trained
// KJV target under make run), or the random-weight small preset.
func demoModel(opts Options) served {
	if opts.Model == "" {
		return served{id: Model, prompt: "hello, cluster", shownAs: "random weights: gibberish by design", maxTokens: 48}
	}
	id := func(p string) string { return strings.TrimSuffix(filepath.Base(p), ".gguf") }
	m := served{id: id(opts.Model), path: opts.Model, prompt: "And it came to pass, when the king heard",
		shownAs: "trained on the King James Bible: a base model continues the text", maxTokens: 64}
	if opts.Draft != "" {
		m.draftID, m.draft = id(opts.Draft), opts.Draft
	}
	return m
}

// install copies src into dir/models/id.gguf unless the same bytes are
// there (atomically: a stopped copy leaves no half model).
func install(src, dataDir, id string) error {
	dst := filepath.Join(dataDir, "models", id+".gguf")
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(dst, b, 0o600)
}

// Timeouts of the demo chat: the wait for each runner of the demo model,
// placing it, and the chat.
const (
	loadTimeout  = 2 * time.Minute
	placeTimeout = 30 * time.Second
	chatTimeout  = time.Minute
)

// linksMeasured waits (at most linkWait) until the host's state has a
// measured link between every pair of nodes, so that the instance is
// placed with the cost model's prediction (docs/cost-model.md).
func linksMeasured(ctx context.Context, host *node, ids []string) {
	deadline := time.Now().Add(linkWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := host.api.State(ctx)
		if err == nil && allLinked(st, ids) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// linkWait bounds linksMeasured (links are sampled every 2 s).
const linkWait = 10 * time.Second

func allLinked(st state.State, ids []string) bool {
	for _, a := range ids {
		for _, b := range ids {
			if a == b {
				continue
			}
			ok := false
			for _, l := range st.NodeLinkTelemetry[a].Links {
				ok = ok || l.Peer == b && l.Probes > 0
			}
			if !ok {
				return false
			}
		}
	}
	return true
}

// chat generates the demo model on the last node, places it across
// every node (the others receive their shards from the last node over the
// peer link), streams one chat completion through node 0, prints the
// tokens and their speed, and returns the request's trace id.
func chat(ctx context.Context, nodes []*node, m served, stdout, stderr io.Writer) (string, error) {
	host, entry := nodes[len(nodes)-1], nodes[0]
	path := filepath.Join(host.dataDir, "models", Model+".gguf")
	if m.path != "" {
		fmt.Fprintf(stderr, "orrery demo: serving %s from node %d\n", m.path, host.idx)
		if err := install(m.path, host.dataDir, m.id); err != nil {
			return "", fmt.Errorf("copy the demo model: %w", err)
		}
		for _, n := range nodes {
			if err := installDraft(m, n); err != nil {
				return "", err
			}
		}
	} else if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "orrery demo: generating a random-weight model (%s) on node %d …\n", ModelShape(model.Presets["small"]), host.idx)
		if err := model.Generate(path, model.Presets["small"]); err != nil {
			return "", fmt.Errorf("generate the demo model: %w", err)
		}
	}
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.id)
	}
	linksMeasured(ctx, host, ids)
	if m.draft != "" {
		// Placement checks that rank 0's node lists the draft: the copies
		// appear in the state at each node's next model scan.
		if err := draftListed(ctx, host, ids, m.draftID); err != nil {
			return "", err
		}
	}
	pctx, cancel := context.WithTimeout(ctx, placeTimeout)
	pr := api.PlaceRequest{Model: m.id, Nodes: ids, DraftModel: m.draftID}
	if m.draftID != "" {
		// The instance's default: every chat speculates, the demo's and
		// yours (drafting where it pays: engine/runner/speccost.go).
		pr.Speculative = &runnerapi.Speculation{Draft: m.draftID, Max: 4}
	}
	placed, err := host.api.Place(pctx, pr)
	cancel()
	if err != nil {
		return "", fmt.Errorf("place %s: %w", m.id, err)
	}
	if len(placed.RunnerIDs) != len(nodes) {
		return "", fmt.Errorf("place %s: %d runners for %d nodes", m.id, len(placed.RunnerIDs), len(nodes))
	}
	if placed.Existed {
		// The host restored its pinned instance from the last run's
		// data: the same nodes (their ids persist in the demo dir).
		fmt.Fprintf(stderr, "orrery demo: %s already runs on these nodes as instance %s (kept from an earlier run in %s); reusing it\n",
			m.id, placed.Instance.InstanceID, filepath.Dir(host.dataDir))
	}
	removeOthers(ctx, host.api, m.id, placed.Instance.InstanceID, stderr)
	for _, id := range placed.RunnerIDs {
		if err := waitRunner(ctx, host.api, id, stderr); err != nil {
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
	spec := ""
	if m.draftID != "" {
		spec = ", drafted by " + m.draftID + " beside rank 0"
	}
	fmt.Fprintf(stdout, "\nChat with %s split over %d nodes (%s)%s, asked through node %d (%s):\n> %s\n",
		m.id, len(nodes), strings.Join(split, "; "), spec, entry.idx, m.shownAs, m.prompt)
	return stream(ctx, entry.api, m, stdout)
}

// installDraft copies m's draft model, if any, into n's models: the
// draft must be on the node of rank 0, wherever placement puts it.
func installDraft(m served, n *node) error {
	if m.draft == "" {
		return nil
	}
	if err := install(m.draft, n.dataDir, m.draftID); err != nil {
		return fmt.Errorf("copy the draft model to node %d: %w", n.idx, err)
	}
	return nil
}

// draftListed waits (at most draftWait) until every node lists the draft
// model id in the host's state.
func draftListed(ctx context.Context, host *node, ids []string, id string) error {
	deadline := time.Now().Add(draftWait)
	missing := ids
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if st, err := host.api.State(ctx); err == nil {
			missing = nil
			for _, n := range ids {
				if !slices.ContainsFunc(st.NodeModels[n].Models, func(mi state.ModelInfo) bool { return mi.ID == id }) {
					missing = append(missing, n)
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("draft model %s not listed by nodes %v within %v", id, missing, draftWait)
}

// draftWait bounds draftListed: two model scans (instance.ModelScanInterval)
// and some.
const draftWait = 25 * time.Second

// removeOthers deletes every instance of the demo model but keep: copies
// that earlier runs left (on other nodes, say with another --nodes), which
// would hold memory for nothing. Failures are reported, not fatal.
func removeOthers(ctx context.Context, c *client.Client, modelID, keep string, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, placeTimeout)
	defer cancel()
	st, err := c.State(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "orrery demo: list instances: %v\n", err)
		return
	}
	for id, in := range st.Instances {
		if in.ModelID != modelID || id == keep {
			continue
		}
		fmt.Fprintf(stderr, "orrery demo: removing instance %s of %s, left by an earlier run on other nodes\n", id, modelID)
		if err := c.DeleteInstance(ctx, id); err != nil {
			fmt.Fprintf(stderr, "orrery demo: remove instance %s: %v\n", id, err)
		}
	}
}

// waitRunner shows the runner's load progress until it is Ready.
func waitRunner(ctx context.Context, c *client.Client, id string, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	last := ""
	for {
		if r, err := c.Runner(ctx, id); err == nil {
			line := fmt.Sprintf("runner %s: %s %d/%d layers", id, r.Status, r.LayersLoaded, r.TotalLayers)
			if t := r.Transfer; t != nil && t.Total.InBytes > 0 {
				line += fmt.Sprintf(", shard %.1f of %.1f MB from %.8s", float64(t.Bytes.InBytes)/1e6, float64(t.Total.InBytes)/1e6, t.From)
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
			return fmt.Errorf("runner %s not ready within %v (last: %s)", id, loadTimeout, last)
		case <-time.After(pollEvery):
		}
	}
}

// stream streams one completion, printing tokens as they come and
// then the speed figures; it returns the trace id.
func stream(ctx context.Context, c *client.Client, m served, stdout io.Writer) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, chatTimeout)
	defer cancel()
	seed := int64(1)
	req := client.ChatRequest{Model: m.id, MaxTokens: m.maxTokens, Seed: &seed,
		Messages: []client.ChatMessage{{Role: "user", Content: m.prompt}}}
	start := time.Now()
	var first time.Duration
	var fin chatstream.Chunk // the last chunk has usage and timings
	traceID, err := c.ChatStream(ctx, req, func(c chatstream.Chunk) {
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
		return traceID, fmt.Errorf("chat: %w", err)
	}
	if fin.Usage == nil {
		return traceID, errors.New("chat stream: no usage in the last chunk")
	}
	total := time.Since(start)
	fmt.Fprintf(stdout, "\n\n%d tokens in %.2f s (%.1f tok/s end to end); prompt %d tokens at %.0f tok/s, decode %.1f tok/s, first token after %.0f ms\n",
		fin.Usage.CompletionTokens, total.Seconds(), float64(fin.Usage.CompletionTokens)/total.Seconds(),
		fin.Usage.PromptTokens, fin.Orrery.PrefillTokPerSec, fin.Orrery.DecodeTokPerSec, float64(first.Microseconds())/1000)
	if o := fin.Orrery; o.DraftTokens > 0 {
		fmt.Fprintf(stdout, "speculation: %d tokens drafted, %d accepted (%.0f %%)\n", o.DraftTokens, o.AcceptedDraftTokens, 100*float64(o.AcceptedDraftTokens)/float64(o.DraftTokens))
	}
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

// ModelShape describes a generated model's shape in one line.
func ModelShape(o model.GenOptions) string {
	ff := fmt.Sprintf("ff %d", o.FFDim)
	if o.Experts > 0 {
		ff = fmt.Sprintf("%d of %d experts of ff %d", o.ExpertsUsed, o.Experts, o.ExpertFFDim)
	}
	return fmt.Sprintf("%s, %d layers, dim %d, %s, %d/%d heads, vocab %d, ctx %d, %s", o.Arch, o.Layers, o.Dim, ff, o.Heads, o.KVHeads, o.Vocab, o.ContextLen, o.Type)
}
