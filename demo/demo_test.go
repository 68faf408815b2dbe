package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"

	"github.com/orrery-cluster/orrery/agent/api/client"
)

// A busy port is named, and nothing is started or created.
func TestDemoBusyPort(t *testing.T) {
	base := testutil.FreeBasePort(t, 3)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+1)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := filepath.Join(t.TempDir(), "demo")
	var stdout, stderr strings.Builder
	err = Run(context.Background(), Options{Nodes: 3, BasePort: base, Dir: dir, Exe: "/nonexistent/orrery"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port %d (node 1's API", base+1)) || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("Run = %v, want an error naming port %d", err, base+1)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("demo dir was created before the port check: %v", err)
	}
	if stdout.Len() != 0 || stderr.Len() != 0 {
		t.Errorf("output before failing: %q %q", stdout.String(), stderr.String())
	}
}

// A node that exits while the cluster forms fails the demo, with its log.
func TestDemoNodeExitsAtStart(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to stand in for a failing agent")
	}
	dir := t.TempDir()
	var stdout, stderr strings.Builder
	// "sh agent --api-addr …" fails at once: no script named agent.
	err = Run(context.Background(), Options{Nodes: 2, BasePort: testutil.FreeBasePort(t, 2), Dir: dir, Exe: sh}, &stdout, &stderr)
	if err == nil {
		t.Fatal("Run succeeded with agents that cannot start")
	}
	msg := err.Error()
	if !strings.Contains(msg, "exited: exit status") || !strings.Contains(msg, filepath.Join(dir, "node-")) ||
		!strings.Contains(msg, "agent.log") || !strings.Contains(msg, "it ends with:") {
		t.Errorf("error does not say which node exited and where its log is: %v", err)
	}
	if stdout.Len() != 0 {
		t.Errorf("a table was printed: %s", stdout.String())
	}
}

// fakeNode serves /healthz and /cluster as an agent would, from the
// current values of its fields.
type fakeNode struct {
	id, master string
	members    int
}

func (f *fakeNode) start(t *testing.T, idx int) *node {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			fmt.Fprintf(w, `{"status":"ok","nodeId":%q}`, f.id)
		case "/cluster":
			members := make([]string, f.members)
			for i := range members {
				members[i] = fmt.Sprintf(`{"nodeId":"n%d"}`, i)
			}
			fmt.Fprintf(w, `{"nodeId":%q,"masterId":%q,"isMaster":%t,"members":[%s]}`, f.id, f.master, f.id == f.master, strings.Join(members, ","))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return &node{idx: idx, url: srv.URL, api: &client.Client{BaseURL: srv.URL, Timeout: requestTimeout}}
}

// ready waits for every node to answer, see every member and agree on
// the master, says what it still waits for, and records ids and roles.
func TestReady(t *testing.T) {
	a, b := &fakeNode{id: "node-a", master: "node-a", members: 2}, &fakeNode{id: "node-b", master: "", members: 1}
	nodes := []*node{a.start(t, 0), b.start(t, 1)}
	ctx := context.Background()
	if ok, msg := ready(ctx, nodes); ok || msg != "node 1 has no master yet" {
		t.Errorf("ready = %v, %q; want node 1 without a master", ok, msg)
	}
	b.master = "node-a"
	if ok, msg := ready(ctx, nodes); ok || msg != "node 1 sees 1 of 2 members" {
		t.Errorf("ready = %v, %q; want node 1 short of a member", ok, msg)
	}
	b.members = 2
	if ok, msg := ready(ctx, nodes); !ok {
		t.Fatalf("ready = false, %q; want true", msg)
	}
	if nodes[0].id != "node-a" || nodes[1].id != "node-b" || !nodes[0].master || nodes[1].master {
		t.Errorf("nodes: %+v %+v", *nodes[0], *nodes[1])
	}
	if m := master(nodes); m != nodes[0] {
		t.Errorf("master = node %d, want 0", m.idx)
	}
}

// stream prints the tokens, made printable, then the speed line, and
// returns the trace id.
func TestStream(t *testing.T) {
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		w.Header().Set(client.TraceIDHeader, "chat-1")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\\u001b[2J\"}}]}\n\n"+
			"data: {\"choices\":[{\"delta\":{}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2},\"orrery\":{\"prefillTokPerSec\":100,\"decodeTokPerSec\":20}}\n\n"+
			"data: [DONE]\n\n")
	}))
	defer srv.Close()
	var out strings.Builder
	id, err := stream(context.Background(), client.New(srv.URL), demoModel(Options{}), &out)
	if err != nil || id != "chat-1" {
		t.Fatalf("stream = %q, %v", id, err)
	}
	if !strings.HasPrefix(out.String(), "hi\uFFFD[2J\n\n2 tokens in ") || !strings.Contains(out.String(), "prompt 5 tokens at 100 tok/s, decode 20.0 tok/s") {
		t.Errorf("output %q", out.String())
	}
	for _, w := range []string{`"model":"` + Model + `"`, `"stream":true`, `"seed":1`, `"max_tokens":48`} {
		if !strings.Contains(body, w) {
			t.Errorf("request %s lacks %s", body, w)
		}
	}
}

// install copies a model into a node's models once, and again only when
// the source's bytes change.
func TestInstall(t *testing.T) {
	src, data := filepath.Join(t.TempDir(), "m.gguf"), t.TempDir()
	if err := os.WriteFile(src, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(data, "models", "id.gguf")
	if err := install(src, data, "id"); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(dst, past, past)
	if err := install(src, data, "id"); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(dst); !st.ModTime().Equal(past) {
		t.Errorf("the same bytes were copied again")
	}
	os.WriteFile(src, []byte("two"), 0o600)
	if err := install(src, data, "id"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "two" {
		t.Errorf("installed %q, want the new bytes", b)
	}
}
