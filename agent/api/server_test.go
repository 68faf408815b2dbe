package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster"

	"github.com/orrery-cluster/orrery/agent/state"
)

const testNode = "node-a"

// Published values the tests look for in the responses.
const (
	// bigRAM is above 2^53: a float64 round trip would change it.
	bigRAM       uint64 = 1<<60 + 1
	bigRAMString        = "1152921504606846977"
	ramAvail     uint64 = 1<<40 + 3
	swapTotal    uint64 = 8 << 30
	swapAvail    uint64 = 6<<30 + 7
	diskTotal    uint64 = 1<<53 + 1
	diskAvail    uint64 = 123456789
)

var sampledAt = time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)

// fixtureEvents are published, in this order, by newFixture: indices 0..4.
func fixtureEvents() []state.Event {
	return []state.Event{
		state.NodeIdentityMeasured{NodeID: testNode, Identity: state.NodeIdentity{
			NodeID: testNode, FriendlyName: "Test Box", OSName: "linux", Arch: "amd64",
			CPUCount: 8, PerfCores: state.Int(4), RAMTotal: state.Bytes(bigRAM),
			AgentVersion: "test", StartedAt: sampledAt,
		}},
		state.NodeMemoryMeasured{NodeID: testNode, Memory: state.NodeMemory{
			RAMTotal: state.Bytes(bigRAM), RAMAvailable: state.Bytes(ramAvail),
			SwapTotal: state.Bytes(swapTotal), SwapAvailable: state.Bytes(swapAvail),
			SampledAt: sampledAt,
		}},
		state.NodeSystemMeasured{NodeID: testNode, System: state.NodeSystem{
			CPUUsage: state.Float(0.25), Load1: state.Float(1.5), Load5: state.Float(0.75),
			// GPUUsage, Temp, SysPower, Load15, PCPUUsage, ECPUUsage left nil.
			SampledAt: sampledAt,
		}},
		state.NodeDiskMeasured{NodeID: testNode, Disk: state.NodeDisk{
			Path: "/data/models", Total: state.Bytes(diskTotal), Available: state.Bytes(diskAvail),
			SampledAt: sampledAt,
		}},
		state.NodeNetworkMeasured{NodeID: testNode, Network: state.NodeNetwork{
			Interfaces: []state.NetworkInterface{{
				Name: "eth0", Kind: "ethernet", Addresses: []string{"10.0.0.2/24"}, MTU: 1500, Up: true,
				BytesSent: 1<<62 + 5, BytesRecv: 42,
			}},
			SampledAt: sampledAt,
		}},
	}
}

var fixtureTypes = []string{
	"NodeIdentityMeasured", "NodeMemoryMeasured", "NodeSystemMeasured", "NodeDiskMeasured", "NodeNetworkMeasured",
}

type fixture struct {
	store *state.Store
	seq   *state.LocalSequencer
	srv   *httptest.Server
}

// newStore returns a store keeping retain events and a sequencer on it.
func newStore(retain int) (*state.Store, *state.LocalSequencer) {
	st := state.NewStore(state.NewLog(retain), state.NewMemoryHistory(0))
	return st, &state.LocalSequencer{Store: st}
}

func publish(t *testing.T, seq *state.LocalSequencer, evs ...state.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := seq.Publish(ev); err != nil {
			t.Fatalf("publish %s: %v", ev.Type(), err)
		}
	}
}

func serve(t *testing.T, st *state.Store) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(newAPI(st).Handler())
	t.Cleanup(srv.Close)
	return srv
}

func newAPI(st *state.Store) *Server {
	return &Server{NodeID: testNode, Version: "v-test", Store: st, Logger: slog.New(slog.DiscardHandler)}
}

// newFixture serves a store (retaining 64 events) holding the five fixture
// events.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, seq := newStore(64)
	publish(t, seq, fixtureEvents()...)
	return &fixture{store: st, seq: seq, srv: serve(t, st)}
}

type response struct {
	code   int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url string, hdr http.Header) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		// Report redirects instead of following them.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: b}
}

func get(t *testing.T, url string) response { t.Helper(); return do(t, http.MethodGet, url, nil) }

// decodeStrict decodes b into v, keeping numbers exact.
func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if dec.More() {
		t.Fatalf("trailing data after JSON value in %q", b)
	}
}

func object(t *testing.T, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	decode(t, b, &m)
	return m
}

func wantKeys(t *testing.T, m map[string]json.RawMessage, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("missing key %q in %v", k, keysOf(m))
		}
	}
	if len(m) != len(keys) {
		t.Errorf("keys = %v, want exactly %v", keysOf(m), keys)
	}
}

func keysOf(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func wantRaw(t *testing.T, m map[string]json.RawMessage, key, want string) {
	t.Helper()
	if got := string(m[key]); got != want {
		t.Errorf("%s = %s, want %s", key, got, want)
	}
}

// wantAbsent checks that key is not in m (an unknown value is left out,
// never null or 0).
func wantAbsent(t *testing.T, m map[string]json.RawMessage, key string) {
	t.Helper()
	if v, ok := m[key]; ok {
		t.Errorf("%s = %s, want the key absent", key, v)
	}
}

// wantJSONError checks an error response: JSON content type and a
// non-empty "error" string as the only key.
func wantJSONError(t *testing.T, r response) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var m map[string]string
	decode(t, r.body, &m)
	if len(m) != 1 || m["error"] == "" {
		t.Errorf("error body = %s, want {\"error\": \"…\"}", r.body)
	}
	return m["error"]
}

type memoryJSON struct {
	RAMTotal      *state.Memory `json:"ramTotal"`
	RAMAvailable  *state.Memory `json:"ramAvailable"`
	SwapTotal     *state.Memory `json:"swapTotal"`
	SwapAvailable *state.Memory `json:"swapAvailable"`
	SampledAt     time.Time     `json:"sampledAt"`
}

func checkFixtureMemory(t *testing.T, b []byte) {
	t.Helper()
	m := object(t, b)
	wantKeys(t, m, "ramTotal", "ramAvailable", "swapTotal", "swapAvailable", "sampledAt")
	// The literal digits prove the value never went through a float64.
	wantRaw(t, m, "ramTotal", `{"inBytes":`+bigRAMString+`}`)
	var mem memoryJSON
	decode(t, b, &mem)
	if mem.RAMTotal == nil || mem.RAMTotal.InBytes != bigRAM {
		t.Errorf("ramTotal = %+v, want %d", mem.RAMTotal, bigRAM)
	}
	if mem.RAMAvailable == nil || mem.RAMAvailable.InBytes != ramAvail {
		t.Errorf("ramAvailable = %+v, want %d", mem.RAMAvailable, ramAvail)
	}
	if mem.SwapTotal == nil || mem.SwapTotal.InBytes != swapTotal {
		t.Errorf("swapTotal = %+v, want %d", mem.SwapTotal, swapTotal)
	}
	if mem.SwapAvailable == nil || mem.SwapAvailable.InBytes != swapAvail {
		t.Errorf("swapAvailable = %+v, want %d", mem.SwapAvailable, swapAvail)
	}
	if !mem.SampledAt.Equal(sampledAt) {
		t.Errorf("sampledAt = %v, want %v", mem.SampledAt, sampledAt)
	}
}

func TestGetPaths(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		path  string
		code  int
		check func(t *testing.T, b []byte)
	}{
		{"/node_id", 200, func(t *testing.T, b []byte) {
			var s string
			decode(t, b, &s)
			if s != testNode {
				t.Errorf("node id = %q, want %q", s, testNode)
			}
		}},
		{"/healthz", 200, func(t *testing.T, b []byte) {
			m := object(t, b)
			wantKeys(t, m, "status", "nodeId", "version", "lastEventAppliedIdx")
			wantRaw(t, m, "status", `"ok"`)
			wantRaw(t, m, "nodeId", `"node-a"`)
			wantRaw(t, m, "version", `"v-test"`)
			wantRaw(t, m, "lastEventAppliedIdx", "4")
		}},
		{"/state", 200, func(t *testing.T, b []byte) {
			m := object(t, b)
			wantKeys(t, m, "lastEventAppliedIdx", "nodeIdentities", "nodeMemory", "nodeSystem",
				"nodeDisk", "nodeNetwork", "nodeLinkTelemetry", "nodeModels", "instances", "runners", "topology", "downloads")
			wantRaw(t, m, "lastEventAppliedIdx", "4")
			for _, k := range []string{"nodeIdentities", "nodeMemory", "nodeSystem", "nodeDisk", "nodeNetwork"} {
				wantKeys(t, object(t, m[k]), testNode)
			}
			checkFixtureMemory(t, object(t, m["nodeMemory"])[testNode])
		}},
		{"/state/", 200, func(t *testing.T, b []byte) {
			wantRaw(t, object(t, b), "lastEventAppliedIdx", "4")
		}},
		{"/state/lastEventAppliedIdx", 200, func(t *testing.T, b []byte) {
			if got := string(bytes.TrimSpace(b)); got != "4" {
				t.Errorf("body = %q, want 4", got)
			}
		}},
		{"/state/nodeIdentities", 200, func(t *testing.T, b []byte) {
			m := object(t, b)
			wantKeys(t, m, testNode)
			id := object(t, m[testNode])
			wantRaw(t, id, "nodeId", `"node-a"`)
			wantRaw(t, id, "friendlyName", `"Test Box"`)
			wantRaw(t, id, "cpuCount", "8")
			wantRaw(t, id, "perfCores", "4")
			wantAbsent(t, id, "effCores")
			wantRaw(t, id, "ramTotal", `{"inBytes":`+bigRAMString+`}`)
			wantRaw(t, id, "startedAt", `"2026-03-04T05:06:07.89Z"`)
		}},
		{"/state/nodeMemory", 200, func(t *testing.T, b []byte) {
			m := object(t, b)
			wantKeys(t, m, testNode)
			checkFixtureMemory(t, m[testNode])
		}},
		{"/state/nodeMemory/node-a", 200, checkFixtureMemory},
		{"/state/nodeMemory/node-a/", 200, checkFixtureMemory},
		{"/state/nodeMemory/node-a/ramTotal/inBytes", 200, func(t *testing.T, b []byte) {
			if got := string(bytes.TrimSpace(b)); got != bigRAMString {
				t.Errorf("body = %q, want %s", got, bigRAMString)
			}
			var n uint64
			decode(t, b, &n)
			if n != bigRAM {
				t.Errorf("inBytes = %d, want %d", n, bigRAM)
			}
		}},
		{"/state/nodeSystem/node-a", 200, func(t *testing.T, b []byte) {
			m := object(t, b)
			// Unknown values are absent, so that exo's harness
			// (data.get(k, 0.0)) reads its default rather than None.
			wantKeys(t, m, "cpuUsage", "load1", "load5", "sampledAt")
			for _, k := range []string{"pcpuUsage", "ecpuUsage", "gpuUsage", "temp", "sysPower", "load15"} {
				wantAbsent(t, m, k)
			}
			wantRaw(t, m, "cpuUsage", "0.25")
			wantRaw(t, m, "load1", "1.5")
			wantRaw(t, m, "load5", "0.75")
		}},
		{"/state/nodeDisk/node-a", 200, func(t *testing.T, b []byte) {
			m := object(t, b)
			wantKeys(t, m, "path", "total", "available", "sampledAt")
			wantRaw(t, m, "path", `"/data/models"`)
			wantRaw(t, m, "total", `{"inBytes":`+strconv.FormatUint(diskTotal, 10)+`}`)
			wantRaw(t, m, "available", `{"inBytes":`+strconv.FormatUint(diskAvail, 10)+`}`)
		}},
		{"/state/nodeNetwork/node-a", 200, func(t *testing.T, b []byte) {
			var n struct {
				Interfaces []struct {
					Name      string          `json:"name"`
					Kind      string          `json:"kind"`
					Addresses []string        `json:"addresses"`
					MTU       int             `json:"mtu"`
					Up        bool            `json:"up"`
					SpeedMbps json.RawMessage `json:"speedMbps"`
					BytesSent uint64          `json:"bytesSent"`
					BytesRecv uint64          `json:"bytesRecv"`
					SendMBps  json.RawMessage `json:"sendMBps"`
				} `json:"interfaces"`
				SampledAt time.Time `json:"sampledAt"`
			}
			decode(t, b, &n)
			if len(n.Interfaces) != 1 {
				t.Fatalf("interfaces = %d, want 1: %s", len(n.Interfaces), b)
			}
			i := n.Interfaces[0]
			if i.Name != "eth0" || i.Kind != "ethernet" || i.MTU != 1500 || !i.Up ||
				len(i.Addresses) != 1 || i.Addresses[0] != "10.0.0.2/24" {
				t.Errorf("interface = %+v", i)
			}
			if i.BytesSent != 1<<62+5 || i.BytesRecv != 42 {
				t.Errorf("bytes sent/recv = %d/%d, want %d/42", i.BytesSent, i.BytesRecv, uint64(1<<62+5))
			}
			if i.SpeedMbps != nil || i.SendMBps != nil {
				t.Errorf("speedMbps = %s, sendMBps = %s, want both absent", i.SpeedMbps, i.SendMBps)
			}
			if !n.SampledAt.Equal(sampledAt) {
				t.Errorf("sampledAt = %v", n.SampledAt)
			}
		}},
		{"/state/nodeNetwork/node-a/interfaces/0/name", 200, func(t *testing.T, b []byte) {
			if got := string(bytes.TrimSpace(b)); got != `"eth0"` {
				t.Errorf("body = %s, want \"eth0\"", got)
			}
		}},
		{"/state/topology", 200, func(t *testing.T, b []byte) {
			m := object(t, b)
			wantKeys(t, m, "nodes", "connections")
			wantRaw(t, m, "nodes", `[{"nodeId":"node-a"}]`)
			wantRaw(t, m, "connections", `[]`)
		}},
		{"/state/topology/nodes/0/nodeId", 200, func(t *testing.T, b []byte) {
			if got := string(bytes.TrimSpace(b)); got != `"node-a"` {
				t.Errorf("body = %s", got)
			}
		}},

		// Not found.
		{"/state/nope", 404, nil},
		{"/state/nodeMemory/unknown-node", 404, nil},
		{"/state/nodeMemory/node-a/ramTotal/inBytes/deeper", 404, nil},
		{"/state/topology/nodes/1", 404, nil},
		{"/state/topology/nodes/-1", 404, nil},
		{"/state/NodeMemory", 404, nil},        // keys are case-sensitive camelCase
		{"/state/bad..seg", 404, nil},          // ".." inside a segment is an allowed name, just absent
		{"/nope", 404, nil},                    // no such endpoint
		{"/history/memory", 404, nil},          // no id
		{"/history/memory/node-a/x", 404, nil}, // too deep
		{"/", 404, nil},

		// Bad paths.
		{"/state/bad%20seg", 400, nil},
		{"/state/nodeMemory/node%3Fa", 400, nil},
		{"/state/a%2F..%2Fb", 400, nil},
		{"/state/nodeMemory/%2E%2E", 400, nil},
		{"/state/a/b/c/d/e/f/g/h/i", 400, nil}, // 9 segments, limit 8
		{"/state/" + strings.Repeat("a", state.MaxPathLen+1), 400, nil},
	}
	for _, tc := range tests {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			r := get(t, f.srv.URL+tc.path)
			if r.code != tc.code {
				t.Fatalf("GET %s = %d %s, want %d", tc.path, r.code, r.body, tc.code)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(r.body)) {
				t.Errorf("Content-Length = %q, body is %d bytes", cl, len(r.body))
			}
			if !bytes.HasSuffix(r.body, []byte("\n")) {
				t.Errorf("body does not end in a newline: %q", r.body)
			}
			if tc.code != 200 {
				wantJSONError(t, r)
				return
			}
			if !json.Valid(r.body) {
				t.Fatalf("invalid JSON: %s", r.body)
			}
			tc.check(t, r.body)
		})
	}
}

// TestStatePathMirrorsState checks that every top-level key of /state is
// served, byte for byte, by /state/<key>.
func TestStatePathMirrorsState(t *testing.T) {
	f := newFixture(t)
	all := object(t, get(t, f.srv.URL+"/state").body)
	if len(all) == 0 {
		t.Fatal("empty /state")
	}
	for k, want := range all {
		r := get(t, f.srv.URL+"/state/"+k)
		if r.code != 200 {
			t.Errorf("/state/%s = %d %s", k, r.code, r.body)
			continue
		}
		var a, b any
		decode(t, want, &a)
		decode(t, r.body, &b)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Errorf("/state/%s = %s, want %s", k, jb, ja)
		}
	}
}

func TestEmptyStore(t *testing.T) {
	st, _ := newStore(8)
	srv := serve(t, st)
	m := object(t, get(t, srv.URL+"/state").body)
	wantRaw(t, m, "lastEventAppliedIdx", "-1")
	wantRaw(t, m, "nodeMemory", "{}")
	wantRaw(t, m, "topology", `{"nodes":[],"connections":[]}`)

	r := get(t, srv.URL+"/events")
	if r.code != 200 {
		t.Fatalf("/events = %d %s", r.code, r.body)
	}
	// An empty page is [] (not null) and next stays at since.
	if got := strings.TrimSpace(string(r.body)); got != `{"events":[],"next":0}` {
		t.Errorf("/events = %s", got)
	}
	if r := get(t, srv.URL+"/history/memory/"+testNode); r.code != 404 {
		t.Errorf("history of a node never seen = %d, want 404", r.code)
	}
	if r := get(t, srv.URL+"/history/system/"+testNode); r.code != 404 {
		t.Errorf("system history of a node never seen = %d, want 404", r.code)
	}
	if r := get(t, srv.URL+"/history/system/..%2f..%2fetc"); r.code != 400 && r.code != 404 {
		t.Errorf("system history of a bad id = %d, want 400 or 404", r.code)
	}
}

type eventsPageJSON struct {
	Events []json.RawMessage `json:"events"`
	Next   *int64            `json:"next"`
}

func getEvents(t *testing.T, url string) (eventsPageJSON, []state.Indexed) {
	t.Helper()
	r := get(t, url)
	if r.code != 200 {
		t.Fatalf("GET %s = %d %s", url, r.code, r.body)
	}
	var p eventsPageJSON
	decode(t, r.body, &p)
	if p.Events == nil {
		t.Fatalf("events is null or missing: %s", r.body)
	}
	if p.Next == nil {
		t.Fatalf("next missing: %s", r.body)
	}
	out := make([]state.Indexed, len(p.Events))
	for i, raw := range p.Events {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, raw)
		}
	}
	return p, out
}

func TestEvents(t *testing.T) {
	f := newFixture(t)

	t.Run("since=0", func(t *testing.T) {
		p, evs := getEvents(t, f.srv.URL+"/events?since=0")
		if len(evs) != len(fixtureTypes) {
			t.Fatalf("%d events, want %d", len(evs), len(fixtureTypes))
		}
		want := fixtureEvents()
		for i, ie := range evs {
			if ie.Idx != int64(i) || ie.Event.Type() != fixtureTypes[i] {
				t.Errorf("event %d = idx %d type %s, want idx %d type %s", i, ie.Idx, ie.Event.Type(), i, fixtureTypes[i])
			}
			// The wire form has exactly idx, type and event.
			w := object(t, p.Events[i])
			wantKeys(t, w, "idx", "type", "event")
			wantRaw(t, w, "idx", strconv.Itoa(i))
			wantRaw(t, w, "type", `"`+fixtureTypes[i]+`"`)
			wantRaw(t, object(t, w["event"]), "nodeId", `"node-a"`)
			// And it decodes to what was published.
			gotJSON, _ := json.Marshal(ie.Event)
			wantJSON, _ := json.Marshal(want[i])
			if !bytes.Equal(gotJSON, wantJSON) {
				t.Errorf("event %d round trip:\n got %s\nwant %s", i, gotJSON, wantJSON)
			}
		}
		if *p.Next != 5 {
			t.Errorf("next = %d, want 5", *p.Next)
		}
		m, ok := evs[1].Event.(state.NodeMemoryMeasured)
		if !ok || m.Memory.RAMTotal == nil || m.Memory.RAMTotal.InBytes != bigRAM {
			t.Errorf("memory event ramTotal lost precision: %+v", evs[1].Event)
		}
	})

	t.Run("default since is 0", func(t *testing.T) {
		_, evs := getEvents(t, f.srv.URL+"/events")
		if len(evs) != 5 || evs[0].Idx != 0 {
			t.Errorf("got %d events starting at %v", len(evs), evs)
		}
	})

	t.Run("since=2&limit=1", func(t *testing.T) {
		p, evs := getEvents(t, f.srv.URL+"/events?since=2&limit=1")
		if len(evs) != 1 || evs[0].Idx != 2 || evs[0].Event.Type() != "NodeSystemMeasured" {
			t.Fatalf("events = %+v, want exactly idx 2 (NodeSystemMeasured)", evs)
		}
		if *p.Next != 3 {
			t.Errorf("next = %d, want 3", *p.Next)
		}
	})

	t.Run("paging with next", func(t *testing.T) {
		var got []int64
		since := int64(0)
		for range 10 {
			p, evs := getEvents(t, fmt.Sprintf("%s/events?since=%d&limit=2", f.srv.URL, since))
			if len(evs) == 0 {
				if *p.Next != since {
					t.Errorf("empty page next = %d, want %d", *p.Next, since)
				}
				break
			}
			for _, ie := range evs {
				got = append(got, ie.Idx)
			}
			since = *p.Next
		}
		if fmt.Sprint(got) != "[0 1 2 3 4]" {
			t.Errorf("paged indices = %v, want [0 1 2 3 4]", got)
		}
	})

	t.Run("at the head", func(t *testing.T) {
		p, evs := getEvents(t, f.srv.URL+"/events?since=5")
		if len(evs) != 0 || *p.Next != 5 {
			t.Errorf("since=5: %d events, next %d; want none, next 5", len(evs), *p.Next)
		}
	})

	t.Run("limit bounds", func(t *testing.T) {
		for _, q := range []string{"limit=1", fmt.Sprintf("limit=%d", MaxEventsLimit)} {
			if r := get(t, f.srv.URL+"/events?"+q); r.code != 200 {
				t.Errorf("%s = %d %s, want 200", q, r.code, r.body)
			}
		}
	})

	for _, q := range []string{
		"since=-1", "since=x", "since=1.5", "since=99999999999999999999",
		"limit=0", "limit=-3", "limit=100000", fmt.Sprintf("limit=%d", MaxEventsLimit+1), "limit=x",
	} {
		t.Run("bad "+q, func(t *testing.T) {
			r := get(t, f.srv.URL+"/events?"+q)
			if r.code != 400 {
				t.Fatalf("%s = %d %s, want 400", q, r.code, r.body)
			}
			msg := wantJSONError(t, r)
			if param := q[:strings.IndexByte(q, '=')]; !strings.HasPrefix(msg, param+":") {
				t.Errorf("error %q does not name %s", msg, param)
			}
		})
	}
}

func TestEventsCompacted(t *testing.T) {
	st, seq := newStore(4)
	for i := range 10 {
		publish(t, seq, state.NodeMemoryMeasured{NodeID: testNode, Memory: state.NodeMemory{
			RAMTotal: state.Bytes(1000), RAMAvailable: state.Bytes(uint64(i)), SampledAt: sampledAt.Add(time.Duration(i) * time.Second),
		}})
	}
	srv := serve(t, st)

	// Asking for events no longer kept gives what is kept, flagged.
	for _, since := range []int{0, 5} {
		r := get(t, fmt.Sprintf("%s/events?since=%d", srv.URL, since))
		if r.code != http.StatusOK {
			t.Fatalf("since=%d = %d %s, want 200", since, r.code, r.body)
		}
		m := object(t, r.body)
		wantRaw(t, m, "truncated", "true")
		wantRaw(t, m, "first", "6")
		wantRaw(t, m, "next", "10")
		var evs []state.Indexed
		if err := json.Unmarshal(m["events"], &evs); err != nil || len(evs) != 4 || evs[0].Idx != 6 {
			t.Errorf("since=%d: events %s (%v), want idx 6..9", since, m["events"], err)
		}
	}
	// A page that is complete carries no truncation fields.
	if m := object(t, get(t, srv.URL+"/events?since=7").body); m["truncated"] != nil || m["first"] != nil {
		t.Errorf("complete page flagged as truncated: %v", m)
	}

	// The four retained events are still served, in order.
	p, evs := getEvents(t, srv.URL+"/events?since=6")
	var idx []int64
	for _, ie := range evs {
		idx = append(idx, ie.Idx)
		m := ie.Event.(state.NodeMemoryMeasured)
		if m.Memory.RAMAvailable.InBytes != uint64(ie.Idx) {
			t.Errorf("event %d carries sample %d (ring buffer mixed up)", ie.Idx, m.Memory.RAMAvailable.InBytes)
		}
	}
	if fmt.Sprint(idx) != "[6 7 8 9]" || *p.Next != 10 {
		t.Errorf("since=6: indices %v next %d, want [6 7 8 9] next 10", idx, *p.Next)
	}
	// The state is unaffected by compaction.
	m := object(t, get(t, srv.URL+"/state").body)
	wantRaw(t, m, "lastEventAppliedIdx", "9")
}

func TestMemoryHistory(t *testing.T) {
	f := newFixture(t)
	second := state.NodeMemory{
		RAMTotal: state.Bytes(bigRAM), RAMAvailable: state.Bytes(ramAvail - 1),
		SampledAt: sampledAt.Add(500 * time.Millisecond),
	}
	publish(t, f.seq, state.NodeMemoryMeasured{NodeID: testNode, Memory: second})

	r := get(t, f.srv.URL+"/history/memory/node-a")
	if r.code != 200 {
		t.Fatalf("history = %d %s", r.code, r.body)
	}
	m := object(t, r.body)
	wantKeys(t, m, "nodeId", "samples")
	wantRaw(t, m, "nodeId", `"node-a"`)
	var samples []struct {
		T            time.Time     `json:"t"`
		RAMTotal     *state.Memory `json:"ramTotal"`
		RAMAvailable *state.Memory `json:"ramAvailable"`
		SwapTotal    *state.Memory `json:"swapTotal"`
	}
	decode(t, m["samples"], &samples)
	if len(samples) != 2 {
		t.Fatalf("%d samples, want 2: %s", len(samples), m["samples"])
	}
	if !samples[0].T.Equal(sampledAt) || !samples[1].T.Equal(second.SampledAt) {
		t.Errorf("sample times = %v, %v", samples[0].T, samples[1].T)
	}
	if samples[0].RAMTotal.InBytes != bigRAM || samples[0].RAMAvailable.InBytes != ramAvail ||
		samples[1].RAMAvailable.InBytes != ramAvail-1 {
		t.Errorf("samples = %+v", samples)
	}
	if samples[0].SwapTotal == nil || samples[0].SwapTotal.InBytes != swapTotal || samples[1].SwapTotal != nil {
		t.Errorf("swapTotal = %v, %v; want %d, null", samples[0].SwapTotal, samples[1].SwapTotal, swapTotal)
	}

	for _, tc := range []struct {
		id   string
		code int
	}{
		{"unknown-node", 404},
		{"a.b", 400},
		{"a%20b", 400},
		{"a:b", 400},
		{strings.Repeat("x", state.MaxNodeIDLen+1), 400},
	} {
		r := get(t, f.srv.URL+"/history/memory/"+tc.id)
		if r.code != tc.code {
			t.Errorf("history of %q = %d %s, want %d", tc.id, r.code, r.body, tc.code)
			continue
		}
		wantJSONError(t, r)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ method, path string }{
		{http.MethodPost, "/state"},
		{http.MethodPut, "/state/nodeMemory/node-a"},
		{http.MethodDelete, "/node_id"},
		{http.MethodPatch, "/healthz"},
		{http.MethodPost, "/events"},
		{http.MethodPost, "/events/stream"},
		{http.MethodOptions, "/history/memory/node-a"},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			r := do(t, tc.method, f.srv.URL+tc.path, nil)
			if r.code != http.StatusMethodNotAllowed {
				t.Fatalf("%s %s = %d %s, want 405", tc.method, tc.path, r.code, r.body)
			}
			allow := r.header.Get("Allow")
			if !strings.Contains(allow, "GET") || !strings.Contains(allow, "HEAD") {
				t.Errorf("Allow = %q, want GET and HEAD", allow)
			}
			if msg := wantJSONError(t, r); !strings.Contains(msg, tc.method) {
				t.Errorf("error %q does not name the method", msg)
			}
		})
	}

	// HEAD is allowed and has no body.
	r := do(t, http.MethodHead, f.srv.URL+"/healthz", nil)
	if r.code != 200 || len(r.body) != 0 {
		t.Errorf("HEAD /healthz = %d with %d body bytes, want 200 and none", r.code, len(r.body))
	}
	// The state was not changed by any of the above.
	wantRaw(t, object(t, get(t, f.srv.URL+"/state").body), "lastEventAppliedIdx", "4")
}

func serveRecorded(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func recorded(t *testing.T, rec *httptest.ResponseRecorder) response {
	t.Helper()
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func TestHostCheck(t *testing.T) {
	st, seq := newStore(8)
	publish(t, seq, fixtureEvents()...)
	strict := newAPI(st).Handler()
	open := (&Server{NodeID: testNode, Store: st, Logger: slog.New(slog.DiscardHandler), AllowAnyHost: true}).Handler()

	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"localhost", true},
		{"localhost:52416", true},
		{"LocalHost:52416", true},
		{"127.0.0.1", true},
		{"127.0.0.1:52416", true},
		{"127.1.2.3:80", true},
		{"[::1]:1", true},
		{"[::1]", true},
		{"evil.example", false},
		{"evil.example:52416", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.evil.example", false},
		{"0.0.0.0:52416", false},
		{"192.168.1.10:52416", false},
		{"[::]:52416", false},
		{"", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
			req.Host = tc.host
			r := recorded(t, serveRecorded(strict, req))
			want := http.StatusOK
			if !tc.ok {
				want = http.StatusForbidden
			}
			if r.code != want {
				t.Fatalf("Host %q = %d %s, want %d", tc.host, r.code, r.body, want)
			}
			if !tc.ok {
				if msg := wantJSONError(t, r); !strings.Contains(msg, "not allowed") {
					t.Errorf("403 error = %q", msg)
				}
			}
			// With AllowAnyHost every host gets through.
			req = httptest.NewRequest(http.MethodGet, "/healthz", nil)
			req.Host = tc.host
			if rec := serveRecorded(open, req); rec.Code != http.StatusOK {
				t.Errorf("AllowAnyHost: Host %q = %d %s, want 200", tc.host, rec.Code, rec.Body)
			}
		})
	}

	// The check runs before routing: even unknown paths and wrong methods
	// get 403 from a foreign host.
	req := httptest.NewRequest(http.MethodPost, "/nope", nil)
	req.Host = "evil.example"
	if rec := serveRecorded(strict, req); rec.Code != http.StatusForbidden {
		t.Errorf("POST /nope from evil.example = %d, want 403", rec.Code)
	}
}

func TestBodyLimit(t *testing.T) {
	st, _ := newStore(8)
	h := newAPI(st).Handler()

	req := httptest.NewRequest(http.MethodPost, "/state", strings.NewReader("x"))
	req.Host = "127.0.0.1"
	req.ContentLength = MaxBodyBytes + 1
	r := recorded(t, serveRecorded(h, req))
	if r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("POST with Content-Length %d = %d %s, want 413", req.ContentLength, r.code, r.body)
	}
	wantJSONError(t, r)

	// At the limit the request gets through to the method check.
	req = httptest.NewRequest(http.MethodPost, "/state", strings.NewReader("x"))
	req.Host = "127.0.0.1"
	req.ContentLength = MaxBodyBytes
	if rec := serveRecorded(h, req); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST with Content-Length %d = %d, want 405", req.ContentLength, rec.Code)
	}

	// Over a real connection too.
	srv := serve(t, st)
	resp, err := http.Post(srv.URL+"/state", "application/octet-stream", bytes.NewReader(make([]byte, MaxBodyBytes+1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("POST of %d bytes = %d, want 413", MaxBodyBytes+1, resp.StatusCode)
	}
}

// A 10 MB conversation is a 400 in each protocol's own error shape, over a
// real connection, with and without a Content-Length.
func TestInferenceBodyLimit(t *testing.T) {
	st, _ := newStore(8)
	srv := serve(t, st)
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 10<<20) + `"}]}`
	for _, tc := range []struct{ path, shape string }{
		{"/v1/chat/completions", `"code":"request_too_large"`},
		{"/v1/messages", `"type":"error"`},
		{"/api/chat", `{"error":"request body is`},
	} {
		resp, err := http.Post(srv.URL+tc.path, "application/json", strings.NewReader(big))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.shape) {
			t.Errorf("%s with 10 MB: %d %s, want 400 with %s", tc.path, resp.StatusCode, b, tc.shape)
		}
	}
}

// sseFrame is one Server-Sent Events frame.
type sseFrame struct {
	ID, Event, Data string
	Comment         string
}

// sseStream reads frames in a goroutine so that the test can wait for each
// one with a deadline.
type sseStream struct {
	resp   *http.Response
	frames chan sseFrame
	errc   chan error // the read error that ended the stream
}

func openStream(t *testing.T, url string, hdr http.Header) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	s := &sseStream{resp: resp, frames: make(chan sseFrame), errc: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.frames)
		br := bufio.NewReader(resp.Body)
		var f sseFrame
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				s.errc <- err
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				select {
				case s.frames <- f:
				case <-ctx.Done():
					s.errc <- ctx.Err()
					return
				}
				f = sseFrame{}
			case strings.HasPrefix(line, ":"):
				f.Comment += strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "id: "):
				f.ID = line[len("id: "):]
			case strings.HasPrefix(line, "event: "):
				f.Event = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				f.Data += line[len("data: "):]
			default:
				s.errc <- fmt.Errorf("unexpected SSE line %q", line)
				return
			}
		}
	}()
	// Cancel (which ends the server's handler too) before the server closes.
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return s
}

const frameTimeout = 5 * time.Second

// next returns the next frame that is not a bare comment.
func (s *sseStream) next(t *testing.T) sseFrame {
	t.Helper()
	timeout := time.NewTimer(frameTimeout)
	defer timeout.Stop()
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				t.Fatalf("stream ended: %v", <-s.errc)
			}
			if f.ID == "" && f.Event == "" && f.Data == "" {
				continue // comment: the greeting or a keep-alive
			}
			return f
		case <-timeout.C:
			t.Fatalf("no SSE frame within %v", frameTimeout)
		}
	}
}

// nextEvent reads a frame and checks that it is an event frame with the
// given index.
func (s *sseStream) nextEvent(t *testing.T, idx int64) state.Indexed {
	t.Helper()
	f := s.next(t)
	if f.Event != "" {
		t.Fatalf("frame %+v: want a plain event frame", f)
	}
	if f.ID != strconv.FormatInt(idx, 10) {
		t.Fatalf("frame id %q, want %d (data %s)", f.ID, idx, f.Data)
	}
	var ie state.Indexed
	if err := json.Unmarshal([]byte(f.Data), &ie); err != nil {
		t.Fatalf("frame %s data does not parse as state.Indexed: %v: %s", f.ID, err, f.Data)
	}
	if ie.Idx != idx {
		t.Fatalf("frame id %s carries idx %d", f.ID, ie.Idx)
	}
	return ie
}

func TestEventStream(t *testing.T) {
	f := newFixture(t)
	s := openStream(t, f.srv.URL+"/events/stream?since=0", nil)

	if s.resp.StatusCode != 200 {
		t.Fatalf("status %d", s.resp.StatusCode)
	}
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	if cc := s.resp.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("Cache-Control = %q, want no-cache", cc)
	}

	// The greeting comment comes first.
	select {
	case fr := <-s.frames:
		if fr.Comment == "" || fr.ID != "" || fr.Data != "" {
			t.Errorf("first frame = %+v, want the greeting comment", fr)
		}
	case <-time.After(frameTimeout):
		t.Fatal("no greeting")
	}

	// The retained events replay in order...
	for i, typ := range fixtureTypes {
		if ie := s.nextEvent(t, int64(i)); ie.Event.Type() != typ {
			t.Errorf("event %d type %s, want %s", i, ie.Event.Type(), typ)
		}
	}

	// ...and a new one arrives live.
	live := state.NodeMemoryMeasured{NodeID: testNode, Memory: state.NodeMemory{
		RAMTotal: state.Bytes(bigRAM), RAMAvailable: state.Bytes(777), SampledAt: sampledAt.Add(time.Second),
	}}
	publish(t, f.seq, live)
	ie := s.nextEvent(t, 5)
	m, ok := ie.Event.(state.NodeMemoryMeasured)
	if !ok || m.Memory.RAMAvailable.InBytes != 777 || m.Memory.RAMTotal.InBytes != bigRAM {
		t.Errorf("live event = %#v, want the one just published", ie.Event)
	}

	// Several published at once all arrive, in order.
	for i := range 3 {
		publish(t, f.seq, state.NodeDiskMeasured{NodeID: testNode, Disk: state.NodeDisk{Path: strconv.Itoa(i), SampledAt: sampledAt}})
	}
	for i := range 3 {
		ie := s.nextEvent(t, int64(6+i))
		if d, ok := ie.Event.(state.NodeDiskMeasured); !ok || d.Disk.Path != strconv.Itoa(i) {
			t.Errorf("event %d = %#v", 6+i, ie.Event)
		}
	}
}

func TestEventStreamStart(t *testing.T) {
	f := newFixture(t)

	t.Run("Last-Event-ID", func(t *testing.T) {
		s := openStream(t, f.srv.URL+"/events/stream", http.Header{"Last-Event-Id": {"2"}})
		s.nextEvent(t, 3)
		s.nextEvent(t, 4)
	})
	t.Run("since wins over Last-Event-ID", func(t *testing.T) {
		s := openStream(t, f.srv.URL+"/events/stream?since=4", http.Header{"Last-Event-Id": {"0"}})
		s.nextEvent(t, 4)
	})
	t.Run("bad since", func(t *testing.T) {
		for _, q := range []string{"x", "-1"} {
			r := get(t, f.srv.URL+"/events/stream?since="+q)
			if r.code != 400 {
				t.Errorf("since=%s = %d %s, want 400", q, r.code, r.body)
				continue
			}
			wantJSONError(t, r)
		}
	})
	t.Run("no start means new events only", func(t *testing.T) {
		// The handler fixes its start before it sends the headers, so
		// once Do returns the next publish is the first event we get.
		s := openStream(t, f.srv.URL+"/events/stream", nil)
		// A Last-Event-ID that does not parse is ignored the same way.
		s2 := openStream(t, f.srv.URL+"/events/stream", http.Header{"Last-Event-Id": {"junk"}})
		next := f.store.Log().Next()
		publish(t, f.seq, state.NodeDiskMeasured{NodeID: testNode, Disk: state.NodeDisk{Path: "live", SampledAt: sampledAt}})
		for _, st := range []*sseStream{s, s2} {
			ie := st.nextEvent(t, next)
			if d, ok := ie.Event.(state.NodeDiskMeasured); !ok || d.Disk.Path != "live" {
				t.Errorf("first event = %#v, want the live one", ie.Event)
			}
		}
	})
	t.Run("future since waits", func(t *testing.T) {
		next := f.store.Log().Next()
		s := openStream(t, fmt.Sprintf("%s/events/stream?since=%d", f.srv.URL, next+1), nil)
		publish(t, f.seq,
			state.NodeDiskMeasured{NodeID: testNode, Disk: state.NodeDisk{Path: "skipped", SampledAt: sampledAt}},
			state.NodeDiskMeasured{NodeID: testNode, Disk: state.NodeDisk{Path: "wanted", SampledAt: sampledAt}})
		ie := s.nextEvent(t, next+1)
		if d, ok := ie.Event.(state.NodeDiskMeasured); !ok || d.Disk.Path != "wanted" {
			t.Errorf("event = %#v, want the one at since", ie.Event)
		}
	})
}

func TestEventStreamCompacted(t *testing.T) {
	st, seq := newStore(4)
	for i := range 10 {
		publish(t, seq, state.NodeDiskMeasured{NodeID: testNode, Disk: state.NodeDisk{Path: strconv.Itoa(i), SampledAt: sampledAt}})
	}
	srv := serve(t, st)

	for _, tc := range []struct {
		name string
		url  string
		hdr  http.Header
	}{
		{"since", "/events/stream?since=0", nil},
		{"Last-Event-ID", "/events/stream", http.Header{"Last-Event-Id": {"3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStream(t, srv.URL+tc.url, tc.hdr)
			if s.resp.StatusCode != 200 {
				t.Fatalf("status %d", s.resp.StatusCode)
			}
			f := s.next(t)
			if f.Event != "error" || f.ID != "" {
				t.Fatalf("frame = %+v, want an error frame", f)
			}
			var m map[string]string
			if err := json.Unmarshal([]byte(f.Data), &m); err != nil || !strings.Contains(m["error"], "no longer retained") {
				t.Errorf("error data = %s (%v)", f.Data, err)
			}
			// The server then ends the stream.
			select {
			case extra, ok := <-s.frames:
				if ok {
					t.Errorf("frame after the error: %+v", extra)
				}
				if err := <-s.errc; err != io.EOF {
					t.Errorf("stream ended with %v, want EOF", err)
				}
			case <-time.After(frameTimeout):
				t.Error("stream still open after the error frame")
			}
		})
	}

	// Starting within retention works.
	s := openStream(t, srv.URL+"/events/stream?since=6", nil)
	for i := int64(6); i < 10; i++ {
		s.nextEvent(t, i)
	}
}

// TestConcurrentReaders runs readers against a publishing sequencer; run
// with -race it checks that the handlers only read published state.
func TestConcurrentReaders(t *testing.T) {
	f := newFixture(t)
	s := openStream(t, f.srv.URL+"/events/stream?since=0", nil)
	const n = 50
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := f.seq.Publish(state.NodeMemoryMeasured{NodeID: testNode, Memory: state.NodeMemory{
				RAMTotal: state.Bytes(bigRAM), RAMAvailable: state.Bytes(uint64(i)), SampledAt: sampledAt.Add(time.Duration(i) * time.Millisecond),
			}}); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
		}
	}()
	for range 5 {
		for _, p := range []string{"/state", "/state/nodeMemory/node-a", "/events?since=0", "/history/memory/node-a"} {
			if r := get(t, f.srv.URL+p); r.code != 200 {
				t.Errorf("%s = %d", p, r.code)
			}
		}
	}
	<-done
	for i := int64(0); i < 5+n; i++ {
		s.nextEvent(t, i)
	}
	wantRaw(t, object(t, get(t, f.srv.URL+"/state").body), "lastEventAppliedIdx", strconv.Itoa(4+n))
}

// TestDotSegmentsNeverReachLookup checks that "." and ".." segments in a raw
// URL path are cleaned by the mux (a redirect to the cleaned path), and
// that smuggled ones (%2F-encoded) are refused with 400.
func TestDotSegmentsNeverReachLookup(t *testing.T) {
	f := newFixture(t)
	for path, loc := range map[string]string{
		"/state/nodeMemory/../nope":  "/state/nope",
		"/state/./nodeMemory/node-a": "/state/nodeMemory/node-a",
		"/state/..":                  "/",
	} {
		r := get(t, f.srv.URL+path)
		if r.code != http.StatusTemporaryRedirect && r.code != http.StatusMovedPermanently {
			t.Errorf("GET %s = %d %s, want a redirect", path, r.code, r.body)
			continue
		}
		if got := r.header.Get("Location"); got != loc {
			t.Errorf("GET %s redirects to %q, want %q", path, got, loc)
		}
	}
	for _, path := range []string{"/state/nodeMemory%2F..%2Fnope", "/state/.%2FnodeMemory", "/state/nodeMemory/%2E"} {
		r := get(t, f.srv.URL+path)
		if r.code != http.StatusBadRequest {
			t.Errorf("GET %s = %d %s, want 400", path, r.code, r.body)
			continue
		}
		wantJSONError(t, r)
	}
}

// TestHeadEventStream checks that HEAD on the stream answers the headers and
// ends: a handler left streaming would hold the connection, so the client's
// next request on it (the transport reuses it) would never be answered.
func TestHeadEventStream(t *testing.T) {
	f := newFixture(t)
	client := &http.Client{Timeout: frameTimeout}
	t.Cleanup(client.CloseIdleConnections)
	for _, q := range []string{"?since=0", ""} {
		resp, err := client.Head(f.srv.URL + "/events/stream" + q)
		if err != nil {
			t.Fatalf("HEAD /events/stream%s: %v", q, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(b) != 0 {
			t.Errorf("HEAD /events/stream%s = %d with %d body bytes", q, resp.StatusCode, len(b))
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("HEAD Content-Type = %q", ct)
		}
		resp, err = client.Get(f.srv.URL + "/healthz")
		if err != nil {
			t.Fatalf("GET after HEAD /events/stream%s: %v", q, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET after HEAD = %d", resp.StatusCode)
		}
	}
}

// A web page can send a "simple" cross-site POST (text/plain) without a
// preflight; the ring benchmark must refuse it.
func TestRingBenchNeedsJSON(t *testing.T) {
	st, _ := newStore(8)
	h := (&Server{NodeID: "n", Store: st, Cluster: refuseCluster{}}).Handler()
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded"} {
		req := httptest.NewRequest("POST", "http://127.0.0.1:52416/v1/cluster/ring-bench", strings.NewReader(`{"sizeBytes":1,"rounds":1}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnsupportedMediaType {
			t.Errorf("Content-Type %q: %d %s, want 415", ct, rec.Code, rec.Body)
		}
	}
	req := httptest.NewRequest("POST", "http://127.0.0.1:52416/v1/cluster/ring-bench", strings.NewReader(`{"sizeBytes":1,"rounds":1}`))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "refused for test") {
		t.Errorf("JSON request: %d %s, want the cluster's own error", rec.Code, rec.Body)
	}
}

type refuseCluster struct{}

func (refuseCluster) ClusterStatus() cluster.Status { return cluster.Status{} }
func (refuseCluster) HashAt(int64) (string, bool)   { return "", false }
func (refuseCluster) RingBench(context.Context, int, int, bool) (RingBenchResult, error) {
	return RingBenchResult{}, errors.New("refused for test")
}
