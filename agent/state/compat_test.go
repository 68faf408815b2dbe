package state

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// TestEventLogWrittenBefore reads an event log and the state it builds as
// the code at 6520353 wrote them (testdata/eventlog-6520353*.json*: every
// event type, a pipeline, a tensor group and a pipeline of groups, with
// speculation, a prediction and a node's measured speed). Every event
// must decode, pass Validate and encode to the same bytes, and the state
// they build must encode to the same bytes too: agents of this version
// and of that one read each other's events and snapshots. The files are
// never regenerated; a change to the wire adds a file of its own.
func TestEventLogWrittenBefore(t *testing.T) {
	f, err := os.Open("testdata/eventlog-6520353.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := New()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		var ie Indexed
		if err := json.Unmarshal(line, &ie); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		if err := Validate(ie.Event); err != nil {
			t.Fatalf("line %d (%s): %v", n+1, ie.Event.Type(), err)
		}
		out, err := json.Marshal(ie)
		if err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		if !bytes.Equal(out, line) {
			t.Errorf("line %d (%s) encodes differently:\nwas %s\nnow %s", n+1, ie.Event.Type(), line, out)
		}
		if s, err = ApplyIndexed(s, ie); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < len(EventTypes()) {
		t.Fatalf("%d events, fewer than the %d event types", n, len(EventTypes()))
	}
	want, err := os.ReadFile("testdata/eventlog-6520353-state.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if got = append(got, '\n'); !bytes.Equal(got, want) {
		t.Errorf("the state the log builds encodes differently:\nwas %s\nnow %s", want, got)
	}
	var back State
	if err := json.Unmarshal(want, &back); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := back.CheckIDs(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	again, _ := json.MarshalIndent(back, "", "  ")
	if !bytes.Equal(append(again, '\n'), want) {
		t.Errorf("the snapshot does not round-trip")
	}
}

// TestGPUFields: an instance's GPU layers and a runner's offload travel
// in the events (GPU layers as "auto" or a number) and reach the state,
// and events without them encode as before: no key at all.
func TestGPUFields(t *testing.T) {
	auto, three := runnerapi.GPUAuto, runnerapi.GPULayers(3)
	dev := &runnerapi.Device{ID: "6d65", Library: "Vulkan", Name: "Vulkan0", Description: "llvmpipe (LLVM 15.0.6, 256 bits)",
		TotalBytes: 2 << 30, FreeBytes: 2 << 30, Software: true}
	evs := []Event{
		InstanceCreated{NodeID: "n1", Instance: Instance{InstanceID: "inst-a", ModelID: "m", NodeID: "n1", GPULayers: &auto,
			Ranks: []ShardRange{{NodeID: "n1", LastLayer: 8}}, CreatedAt: t0}},
		InstanceCreated{NodeID: "n1", Instance: Instance{InstanceID: "inst-b", ModelID: "m", NodeID: "n1", GPULayers: &three,
			Ranks: []ShardRange{{NodeID: "n1", LastLayer: 8}}, CreatedAt: t0}},
		RunnerStatusChanged{NodeID: "n1", Runner: Runner{RunnerID: "inst-a-0", InstanceID: "inst-a", NodeID: "n1", Status: RunnerReady,
			TotalLayers: 8, Since: t0, Offload: &runnerapi.Offload{Device: dev, Blocks: 6, Total: 8, Reason: "6 of 9 fit", GPUBytes: 1 << 20, CPUBytes: 2 << 20}}},
	}
	wants := []string{`"gpuLayers":"auto"`, `"gpuLayers":3`, `"offload":{"device":{"id":"6d65","library":"Vulkan","name":"Vulkan0"`}
	s := New()
	for i, ev := range evs {
		in := Indexed{Idx: int64(i), Event: ev}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(wants[i])) {
			t.Errorf("%s lacks %s", b, wants[i])
		}
		var out Indexed
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if err := Validate(out.Event); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("round trip:\n in %#v\nout %#v", in, out)
		}
		if s, err = ApplyIndexed(s, out); err != nil {
			t.Fatal(err)
		}
	}
	if g := s.Instances["inst-b"].GPULayers; g == nil || *g != 3 {
		t.Errorf("the state's inst-b: gpuLayers %v, want 3", g)
	}
	if o := s.Runners["inst-a-0"].Offload; o == nil || o.String() != "6/8 blocks on Vulkan0" {
		t.Errorf("the state's runner: offload %+v", o)
	}
	b, _ := json.Marshal(Instance{InstanceID: "inst-c"})
	r, _ := json.Marshal(Runner{RunnerID: "r"})
	if bytes.Contains(b, []byte("gpuLayers")) || bytes.Contains(r, []byte("offload")) {
		t.Errorf("without GPU fields: %s, %s", b, r)
	}
}
