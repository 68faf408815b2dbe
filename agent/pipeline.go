package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/cluster/wire"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Pipelines across nodes: rank links relayed between runners through the
// agents (over authenticated stream links between nodes), shards cut here
// or fetched from a node that has the model, the spans of ranks > 0, and
// the owner marking an instance Failed when a rank fails.

// rankStreamID names the receiving rank of a rank stream link.
func rankStreamID(instanceID string, rank int) string { return fmt.Sprintf("%s-r%d", instanceID, rank) }

func parseRankStreamID(id string) (string, int, error) {
	i := strings.LastIndex(id, "-r")
	if i <= 0 {
		return "", 0, fmt.Errorf("rank stream id %q", id)
	}
	r, err := strconv.Atoi(id[i+2:])
	if err != nil || r < 0 {
		return "", 0, fmt.Errorf("rank stream id %q", id)
	}
	return id[:i], r, nil
}

// onStream is cluster.Config.OnStream.
func (a *Agent) onStream(peer, purpose, id string, c net.Conn) {
	switch purpose {
	case wire.StreamHTTP:
		a.peerLn.offer(c)
	case wire.StreamRank:
		inst, rank, err := parseRankStreamID(id)
		if err != nil {
			c.Close()
			return
		}
		if in, ok := a.store.State().Instances[inst]; !ok || rank >= len(in.Ranks) || in.Ranks[(rank+len(in.Ranks)-1)%len(in.Ranks)].NodeID != peer {
			a.log.Warn("refused a rank link", "from", peer, "id", id)
			c.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rc, err := a.sup.DialRank(ctx, inst, rank)
		cancel()
		if err != nil {
			a.log.Debug("rank link: local runner not ready", "id", id, "err", err)
			c.Close()
			return
		}
		splice(c, rc)
	default:
		c.Close()
	}
}

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { a.Close(); b.Close() }) }
	go func() { io.Copy(a, b); closeBoth() }()
	go func() { io.Copy(b, a); closeBoth() }()
}

// runnerAuth checks a runner's bearer token.
func (a *Agent) runnerAuth(r *http.Request) (state.Instance, int, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return state.Instance{}, 0, false
	}
	return a.sup.Authorize(tok)
}

// internalHandler serves the runners of this node: their rank links
// (upgraded connections relayed to the next rank) and their spans.
func (a *Agent) internalHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /internal/rank-link", a.rankLink)
	mux.HandleFunc("POST /internal/rank-trace", a.rankTrace)
	return mux
}

// rankLink upgrades a runner's request into its outbound rank link and
// connects it to the next rank, here or on its node.
func (a *Agent) rankLink(w http.ResponseWriter, r *http.Request) {
	in, rank, ok := a.runnerAuth(r)
	if !ok {
		http.Error(w, "unknown runner token", http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Upgrade") != runnerUpgrade {
		http.Error(w, "want Upgrade: "+runnerUpgrade, http.StatusBadRequest)
		return
	}
	n := len(in.Ranks)
	next := (rank + 1) % n
	node := in.Ranks[next].NodeID
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var down net.Conn
	var err error
	if node == a.identity.NodeID {
		down, err = a.sup.DialRank(ctx, in.InstanceID, next)
	} else {
		down, err = a.node.DialStream(ctx, node, wire.StreamRank, rankStreamID(in.InstanceID, next))
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("rank %d on %s: %v", next, node, err), http.StatusServiceUnavailable)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		down.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Upgrade", runnerUpgrade)
	w.WriteHeader(http.StatusSwitchingProtocols)
	up, brw, err := hj.Hijack()
	if err != nil {
		down.Close()
		return
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		down.Write(b)
	}
	brw.Writer.Flush()
	splice(up, down)
}

// runnerUpgrade is the Upgrade token of a rank link request.
const runnerUpgrade = "orrery-rank"

// rankTraceBody is what a rank > 0 posts when a traced request ends.
type rankTraceBody struct {
	TraceID string       `json:"traceId"`
	Spans   []trace.Span `json:"spans"`
	Error   string       `json:"error,omitempty"`
}

func (a *Agent) rankTrace(w http.ResponseWriter, r *http.Request) {
	_, rank, ok := a.runnerAuth(r)
	if !ok {
		http.Error(w, "unknown runner token", http.StatusUnauthorized)
		return
	}
	var b rankTraceBody
	if err := json.NewDecoder(io.LimitReader(r.Body, 256<<20)).Decode(&b); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := validTraceID(b.TraceID); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.shipRank(b.TraceID, rank, b.Spans)
	w.WriteHeader(http.StatusNoContent)
}

func validTraceID(id string) error {
	if err := state.ValidNodeID(id); err != nil {
		return fmt.Errorf("trace id: %w", err)
	}
	return nil
}

// shipRank ships one rank's spans of a task to the master (the task's
// announcement comes from rank 0's node).
func (a *Agent) shipRank(task string, rank int, spans []trace.Span) {
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sh := a.newShipper(task, rank)
		sh.Add(spans...)
		if err := sh.Finish(ctx); err != nil {
			a.log.Warn("ship trace", "task", task, "rank", rank, "err", err)
		}
	}()
}

// modelFile is supervisor.Config.ModelFile: the whole model for a
// one-rank instance on a node that has it; otherwise the rank's shard,
// from the shard cache, cut here, or fetched from a node with the model.
func (a *Agent) modelFile(ctx context.Context, in state.Instance, rank int, progress func(supervisor.Progress)) (string, supervisor.ShardInfo, error) {
	rg := in.Ranks[rank]
	e, local := a.models.Find(in.ModelID)
	if local && e.Error == "" && rg.FirstLayer == 0 && rg.LastLayer == e.Layers {
		return e.Path, supervisor.ShardInfo{How: "model"}, nil
	}
	if local && e.Error == "" {
		hash, err := a.hashes.get(e.Path)
		if err != nil {
			return "", supervisor.ShardInfo{}, err
		}
		path, n, err := a.cutShard(e.Path, hash, rg.FirstLayer, rg.LastLayer)
		return path, supervisor.ShardInfo{How: "built", Bytes: n}, err
	}
	return a.fetchShard(ctx, in, rg, progress)
}

// shardDir holds cut and received shards: <hash prefix>-<first>-<last>.gguf.
func (a *Agent) shardDir() string { return filepath.Join(a.cfg.DataDir, "shards") }

func shardName(hash string, first, last int) string {
	return fmt.Sprintf("%.16s-%d-%d.gguf", hash, first, last)
}

// cutShard returns the cached shard of the model at path, cutting it
// first if needed.
func (a *Agent) cutShard(path, hash string, first, last int) (string, int64, error) {
	a.shardMu.Lock()
	defer a.shardMu.Unlock()
	dst := filepath.Join(a.shardDir(), shardName(hash, first, last))
	if st, err := os.Stat(dst); err == nil {
		return dst, st.Size(), nil
	}
	if err := os.MkdirAll(a.shardDir(), 0o700); err != nil {
		return "", 0, err
	}
	if err := model.WriteShard(path, dst, first, last, hash); err != nil {
		return "", 0, fmt.Errorf("cut shard [%d, %d): %w", first, last, err)
	}
	st, err := os.Stat(dst)
	if err != nil {
		return "", 0, err
	}
	a.log.Info("shard cut", "model", path, "first", first, "last", last, "bytes", st.Size())
	return dst, st.Size(), nil
}

// fetchShard receives the shard from a node that has the model, over the
// peer API, into the shard cache (atomically), reporting progress.
func (a *Agent) fetchShard(ctx context.Context, in state.Instance, rg state.ShardRange, progress func(supervisor.Progress)) (string, supervisor.ShardInfo, error) {
	// The owner placed the instance from its own copy of the model.
	src := in.NodeID
	if _, member := a.store.State().NodeIdentities[src]; !member || src == a.identity.NodeID {
		var err error
		if src, err = (inference{a}).PickNode(in.ModelID); err != nil {
			return "", supervisor.ShardInfo{}, err
		}
		if src == a.identity.NodeID {
			return "", supervisor.ShardInfo{}, fmt.Errorf("model %s is listed here but not found", in.ModelID)
		}
	}
	q := fmt.Sprintf("http://%s/internal/shard?model=%s&first=%d&last=%d", src, urlQuery(in.ModelID), rg.FirstLayer, rg.LastLayer)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, q, nil)
	if err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	resp, err := a.peerHTTP.Do(req)
	if err != nil {
		return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: %w", src, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: %s %s", src, resp.Status, b)
	}
	hash := resp.Header.Get("X-Orrery-Model-Hash")
	if len(hash) < 16 || strings.ContainsAny(hash, `/\.`) {
		return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: model hash %q", src, hash)
	}
	dst := filepath.Join(a.shardDir(), shardName(hash, rg.FirstLayer, rg.LastLayer))
	if st, err := os.Stat(dst); err == nil && st.Size() == resp.ContentLength {
		return dst, supervisor.ShardInfo{How: "model", From: src}, nil // cached from an earlier transfer
	}
	if err := os.MkdirAll(a.shardDir(), 0o700); err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	tmp, err := os.CreateTemp(a.shardDir(), ".recv-*")
	if err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	defer os.Remove(tmp.Name())
	size := resp.ContentLength
	var done int64
	buf := make([]byte, 1<<20)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := tmp.Write(buf[:n]); err != nil {
				tmp.Close()
				return "", supervisor.ShardInfo{}, err
			}
			done += int64(n)
			progress(supervisor.Progress{From: src, Done: done, Size: size})
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			tmp.Close()
			return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s after %d of %d bytes: %w", src, done, size, rerr)
		}
	}
	if size >= 0 && done != size {
		tmp.Close()
		return "", supervisor.ShardInfo{}, fmt.Errorf("shard from %s: %d of %d bytes", src, done, size)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", supervisor.ShardInfo{}, err
	}
	if err := tmp.Close(); err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", supervisor.ShardInfo{}, err
	}
	a.log.Info("shard received", "from", src, "model", in.ModelID, "first", rg.FirstLayer, "last", rg.LastLayer, "bytes", done)
	return dst, supervisor.ShardInfo{How: "transfer", From: src, Bytes: done}, nil
}

// serveShard answers a peer's GET /internal/shard: the shard file, cut
// here if needed, with the model's hash.
func (a *Agent) serveShard(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	e, ok := a.models.Find(q.Get("model"))
	if !ok || e.Error != "" {
		http.Error(w, fmt.Sprintf("model %q is not on node %s", q.Get("model"), a.identity.NodeID), http.StatusNotFound)
		return
	}
	first, err1 := strconv.Atoi(q.Get("first"))
	last, err2 := strconv.Atoi(q.Get("last"))
	if err1 != nil || err2 != nil || first < 0 || last > e.Layers || first >= last {
		http.Error(w, fmt.Sprintf("layers [%s, %s) of a %d-layer model", q.Get("first"), q.Get("last"), e.Layers), http.StatusBadRequest)
		return
	}
	hash, err := a.hashes.get(e.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	path, _, err := a.cutShard(e.Path, hash, first, last)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("X-Orrery-Model-Hash", hash)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	io.Copy(w, f)
}

func urlQuery(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "=", "%3D", "+", "%2B", " ", "%20", "#", "%23", "?", "%3F").Replace(s)
}

// hashCache remembers model files' sha256 by path, size and mtime.
type hashCache struct {
	mu sync.Mutex
	m  map[string]string
}

func (h *hashCache) get(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.m[key]; ok {
		return v, nil
	}
	v, err := model.FileHash(path)
	if err != nil {
		return "", err
	}
	if h.m == nil {
		h.m = map[string]string{}
	}
	h.m[key] = v
	return v, nil
}

// failedGrace is how long the owner of an instance waits after a rank
// first shows Failed before naming the cause: the ranks whose links broke
// fail a moment after the one that died.
const failedGrace = 500 * time.Millisecond

// watchFailures marks this node's instances Failed when a rank failed,
// naming the rank that failed first for a reason other than a lost link.
func (a *Agent) watchFailures(st state.State) {
	for id, in := range st.Instances {
		if in.NodeID != a.identity.NodeID || in.Status == state.InstanceStatusFailed {
			continue
		}
		var failed []state.Runner
		for _, rk := range in.Ranks {
			if r, ok := st.Runners[supervisor.RunnerID(id, rk.Rank)]; ok && r.Status == state.RunnerFailed {
				failed = append(failed, r)
			}
		}
		if len(failed) == 0 {
			continue
		}
		a.failMu.Lock()
		first, seen := a.failSeen[id]
		if !seen {
			a.failSeen[id] = time.Now()
			first = time.Now()
		}
		a.failMu.Unlock()
		if time.Since(first) < failedGrace && len(failed) < len(in.Ranks) {
			continue // more may come; reconcile runs again within a second
		}
		cause := failed[0]
		for _, r := range failed {
			if !strings.Contains(r.Error, "rank link lost") && !strings.Contains(r.Error, "pipeline broke") {
				cause = r
				break
			}
		}
		msg := fmt.Sprintf("rank %d (node %s) failed: %s", cause.Rank, a.nodeName(st, cause.NodeID), cause.Error)
		if err := a.seq.Publish(state.InstanceFailed{NodeID: a.identity.NodeID, InstanceID: id, Error: truncate(msg, 2048)}); err != nil {
			a.log.Warn("publish instance failure", "instance", id, "err", err)
		} else {
			a.log.Warn("instance failed", "instance", id, "err", msg)
		}
	}
	a.failMu.Lock()
	for id := range a.failSeen {
		if in, ok := st.Instances[id]; !ok || in.Status == state.InstanceStatusFailed {
			delete(a.failSeen, id)
		}
	}
	a.failMu.Unlock()
}

func (a *Agent) nodeName(st state.State, id string) string {
	if ident, ok := st.NodeIdentities[id]; ok && ident.FriendlyName != "" {
		return fmt.Sprintf("%s, %.8s", ident.FriendlyName, id)
	}
	return id
}
