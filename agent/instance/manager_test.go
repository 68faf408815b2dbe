package instance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/agent/telemetry"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/modelstore"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// oneNode is a manager of a lone node "n1" that has the tiny model, with
// the local sequencer (it is its own master) and no runners started.
func oneNode(t *testing.T) (*Manager, *state.LocalSequencer) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "models")
	os.MkdirAll(dir, 0o700)
	if err := model.Generate(filepath.Join(dir, "tiny.gguf"), model.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	store := state.NewStore(state.NewLog(100), state.NewMemoryHistory(state.DefaultHistoryWindow))
	seq := &state.LocalSequencer{Store: store}
	m := New(Config{Self: "n1", Store: store, Publish: seq.Publish, Models: &modelstore.Scanner{Dirs: modelstore.Dirs{Orrery: dir}},
		Runners: supervisor.New(supervisor.Config{NodeID: "n1"}),
		ShipTrace: func(string, string, []trace.Span, []trace.CounterSample, []state.ShardRange, string) {
		}})
	// The node's identity and memory, as its samplers would publish them.
	if err := seq.Publish(state.NodeIdentityMeasured{NodeID: "n1", Identity: state.NodeIdentity{NodeID: "n1"}}); err != nil {
		t.Fatal(err)
	}
	ev, err := (&telemetry.MemorySampler{NodeID: "n1"}).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := seq.Publish(ev); err != nil {
		t.Fatal(err)
	}
	return m, seq
}

func TestPlaceRouteDelete(t *testing.T) {
	m, _ := oneNode(t)
	ctx := context.Background()
	if _, _, err := m.Route(ctx, "nope", nil); !errors.Is(err, api.ErrModelNotFound) || !strings.Contains(err.Error(), "running: none") {
		t.Fatalf("Route of a model no node has: %v, want ErrModelNotFound naming what runs", err)
	}
	in, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny"})
	if err != nil || existed {
		t.Fatal(err, existed)
	}
	if in.NodeID != "n1" || len(in.Ranks) != 1 || in.Ranks[0].FirstLayer != 0 || in.Ranks[0].LastLayer != 4 {
		t.Fatalf("placed %+v, want all 4 blocks on n1", in)
	}
	if _, ok := m.cfg.Store.State().Instances[in.InstanceID]; !ok {
		t.Fatal("the instance is not in the state after Place returned")
	}
	// The same model on the same nodes again is that instance.
	if again, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny"}); err != nil || !existed || again.InstanceID != in.InstanceID {
		t.Fatalf("second Place = %s, existed %v, %v; want %s, true", again.InstanceID, existed, err, in.InstanceID)
	}
	if n := len(m.cfg.Store.State().Instances); n != 1 {
		t.Fatalf("%d instances after placing the same model twice, want 1", n)
	}
	id, node, err := m.Route(ctx, "tiny", nil)
	if err != nil || id != in.InstanceID || node != "n1" {
		t.Fatalf("Route = %s, %s, %v", id, node, err)
	}
	if err := m.Delete(ctx, in.InstanceID); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.cfg.Store.State().Instances[in.InstanceID]; ok {
		t.Fatal("the instance is still in the state after Delete")
	}
	if err := m.Delete(ctx, in.InstanceID); !errors.Is(err, api.ErrNotHere) {
		t.Fatalf("deleting it again: %v, want ErrNotHere", err)
	}
}

func TestPlaceRefusals(t *testing.T) {
	m, _ := oneNode(t)
	ctx := context.Background()
	if _, _, err := m.Place(ctx, api.PlaceRequest{Model: "nope"}); !errors.Is(err, api.ErrModelNotFound) {
		t.Errorf("unknown model: %v", err)
	}
	if _, _, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Node: "stranger"}); err == nil || !strings.Contains(err.Error(), "not a member") {
		t.Errorf("a node outside the cluster: %v", err)
	}
	// Ranks past the model's 4 blocks are a bad request, not a panic.
	if _, _, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Ranks: []state.ShardRange{{NodeID: "n1", LastLayer: 10}}}); !errors.Is(err, runnerapi.ErrBadRequest) ||
		!strings.Contains(err.Error(), "4-layer model") {
		t.Errorf("layers [0, 10) of 4: %v", err)
	}
	if _, err := m.PickNode("nope"); !errors.Is(err, api.ErrModelNotFound) {
		t.Errorf("PickNode of an unknown model: %v", err)
	}
	if n, err := m.PickNode("tiny"); err != nil || n != "n1" {
		t.Errorf("PickNode = %s, %v", n, err)
	}
}

// A placement onto the nodes of a live instance, in any order, is that
// instance; Duplicate places a second copy; IfNone refuses where the model
// runs on other nodes; an instance restored from disk but not yet back in
// the state counts as live.
func TestPlaceSameNodes(t *testing.T) {
	m, seq := oneNode(t)
	ctx := context.Background()
	// A second member, n2, with n1's memory.
	mem := m.cfg.Store.State().NodeMemory["n1"]
	for _, ev := range []state.Event{state.NodeIdentityMeasured{NodeID: "n2", Identity: state.NodeIdentity{NodeID: "n2"}},
		state.NodeMemoryMeasured{NodeID: "n2", Memory: mem}} {
		if err := seq.Publish(ev); err != nil {
			t.Fatal(err)
		}
	}
	in, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Nodes: []string{"n1", "n2"}})
	if err != nil || existed || len(in.Ranks) != 2 {
		t.Fatalf("Place on n1, n2 = %+v, existed %v, %v", in, existed, err)
	}
	again, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Nodes: []string{"n2", "n1"}})
	if err != nil || !existed || again.InstanceID != in.InstanceID {
		t.Fatalf("Place on n2, n1 = %s, existed %v, %v; want %s, true", again.InstanceID, existed, err, in.InstanceID)
	}
	if _, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Nodes: []string{"n2", "n1"}, IfNone: true}); err != nil || !existed {
		t.Fatalf("IfNone on the same nodes: existed %v, %v; want the live instance", existed, err)
	}
	if _, _, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Node: "n1", IfNone: true}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("IfNone on other nodes: %v, want ErrConflict", err)
	}
	dup, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Nodes: []string{"n2", "n1"}, Duplicate: true})
	if err != nil || existed || dup.InstanceID == in.InstanceID {
		t.Fatalf("Duplicate = %s, existed %v, %v; want a new instance", dup.InstanceID, existed, err)
	}
	if n := len(m.cfg.Store.State().Instances); n != 2 {
		t.Fatalf("%d instances, want 2", n)
	}
	// Restored from disk (the node's own record), not yet in the state.
	restored := state.Instance{InstanceID: "inst-restored", ModelID: "tiny", NodeID: "n1", Status: state.InstanceStatusActive,
		Ranks: []state.ShardRange{{Rank: 0, NodeID: "n1", LastLayer: 4}}}
	m.cfg.Owned = func() []state.Instance { return []state.Instance{restored} }
	got, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Node: "n1"})
	if err != nil || !existed || got.InstanceID != restored.InstanceID {
		t.Fatalf("Place on n1 with a restored instance there = %s, existed %v, %v; want it", got.InstanceID, existed, err)
	}
}

// A placement's "gpuLayers" is kept in the instance (its runners read it
// there), and a live instance with other GPU layers is not the answer to
// it: a placement asking for another split of blocks places anew.
func TestPlaceGPULayers(t *testing.T) {
	m, _ := oneNode(t)
	ctx := context.Background()
	zero := runnerapi.GPULayers(0)
	cpu, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", GPULayers: &zero})
	if err != nil || existed || cpu.GPULayers == nil || *cpu.GPULayers != 0 {
		t.Fatalf("Place with gpuLayers 0 = %+v, existed %v, %v", cpu, existed, err)
	}
	if st := m.cfg.Store.State().Instances[cpu.InstanceID]; st.GPULayers == nil || *st.GPULayers != 0 {
		t.Fatalf("the state's instance: gpuLayers %v, want 0", st.GPULayers)
	}
	auto := runnerapi.GPUAuto
	gpu, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", GPULayers: &auto})
	if err != nil || existed || gpu.InstanceID == cpu.InstanceID || gpu.GPULayers == nil || *gpu.GPULayers != runnerapi.GPUAuto {
		t.Fatalf("Place with gpuLayers auto beside one with 0 = %+v, existed %v, %v; want a new instance", gpu, existed, err)
	}
	again, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", GPULayers: &zero})
	if err != nil || !existed || again.InstanceID != cpu.InstanceID {
		t.Fatalf("Place with gpuLayers 0 again = %s, existed %v, %v; want %s", again.InstanceID, existed, err, cpu.InstanceID)
	}
	if def, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny"}); err != nil || existed || def.GPULayers != nil {
		t.Fatalf("Place with the nodes' default beside both = %+v, existed %v, %v; want a new instance naming none", def, existed, err)
	}
}

// TestPickPrefersReadyInstances: of two instances, requests go to the one
// whose ranks are all ready; failed ones are listed for replacement.
func TestPickPrefersReadyInstances(t *testing.T) {
	m, seq := oneNode(t)
	pub := func(ev state.Event) {
		t.Helper()
		if err := seq.Publish(ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"inst-a", "inst-b", "inst-c"} {
		pub(state.InstanceCreated{NodeID: "n1", Instance: state.Instance{InstanceID: id, ModelID: "tiny", NodeID: "n1",
			Status: state.InstanceStatusActive, Ranks: []state.ShardRange{{Rank: 0, NodeID: "n1", LastLayer: 4}}}})
	}
	pub(state.RunnerStatusChanged{NodeID: "n1", Runner: state.Runner{RunnerID: supervisor.RunnerID("inst-b", 0),
		InstanceID: "inst-b", NodeID: "n1", Status: state.RunnerReady}})
	pub(state.InstanceFailed{NodeID: "n1", InstanceID: "inst-c", Error: "rank 0 failed"})
	id, node, failed := m.pick("tiny")
	if id != "inst-b" || node != "n1" {
		t.Errorf("picked %s on %s, want the ready inst-b", id, node)
	}
	if len(failed) != 1 || failed[0].InstanceID != "inst-c" {
		t.Errorf("failed = %+v, want inst-c", failed)
	}
}

// A model with no instance is placed by the requests that ask for it,
// once however many ask at the same moment; Progress follows its ranks
// and names a rank that failed.
func TestLoadOnDemand(t *testing.T) {
	m, seq := oneNode(t)
	ctx := context.Background()
	ids := make(chan string, 10)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, node, err := m.Route(ctx, "tiny", nil)
			if err != nil || node != "n1" {
				t.Errorf("Route = %s on %s, %v", id, node, err)
			}
			ids <- id
		}()
	}
	wg.Wait()
	close(ids)
	first := <-ids
	for id := range ids {
		if id != first {
			t.Errorf("requests routed to %s and %s", first, id)
		}
	}
	n := 0
	for _, in := range m.cfg.Store.State().Instances {
		if in.ModelID == "tiny" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d instances of tiny after 10 requests at once, want 1", n)
	}
	if got, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", IfNone: true}); err != nil || !existed || got.InstanceID != first {
		t.Errorf("Place IfNone with an instance running on the same node: %s, existed %v, %v; want %s", got.InstanceID, existed, err, first)
	}
	runner := func(status string, loaded int, errText string) {
		t.Helper()
		if err := seq.Publish(state.RunnerStatusChanged{NodeID: "n1", Runner: state.Runner{RunnerID: supervisor.RunnerID(first, 0),
			InstanceID: first, NodeID: "n1", Status: status, LayersLoaded: loaded, TotalLayers: 4, Error: errText}}); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := m.Progress(first); err != nil || p != (api.LoadProgress{Total: 4}) {
		t.Errorf("Progress before the runner starts: %+v, %v", p, err)
	}
	runner(state.RunnerLoading, 2, "")
	if p, err := m.Progress(first); err != nil || p != (api.LoadProgress{Loaded: 2, Total: 4}) {
		t.Errorf("Progress while loading: %+v, %v", p, err)
	}
	runner(state.RunnerReady, 4, "")
	if p, err := m.Progress(first); err != nil || p != (api.LoadProgress{Loaded: 4, Total: 4, Ready: true}) {
		t.Errorf("Progress when ready: %+v, %v", p, err)
	}
	runner(state.RunnerFailed, 4, "out of memory")
	if _, err := m.Progress(first); !errors.Is(err, api.ErrLoadFailed) || !strings.Contains(err.Error(), "rank 0 of "+first+" on node n1: out of memory") {
		t.Errorf("Progress after the runner failed: %v", err)
	}
	if _, err := m.Progress("inst-gone"); !errors.Is(err, api.ErrModelNotRunning) {
		t.Errorf("Progress of no instance: %v", err)
	}
}

// A model that fits nowhere is not placed on demand: ErrNoMemory (507)
// with the numbers.
func TestLoadOnDemandNoFit(t *testing.T) {
	m, seq := oneNode(t)
	if err := seq.Publish(state.NodeMemoryMeasured{NodeID: "n1", Memory: state.NodeMemory{RAMTotal: state.Bytes(1 << 20),
		RAMAvailable: state.Bytes(1 << 10), SampledAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	_, _, err := m.Route(context.Background(), "tiny", nil)
	if !errors.Is(err, api.ErrNoMemory) || !strings.Contains(err.Error(), "load tiny on demand: model does not fit: rank 0 on n1 needs 0.25 GiB") ||
		!strings.Contains(err.Error(), "has 0.00 GiB available") {
		t.Fatalf("Route of a model that fits nowhere: %v", err)
	}
	if len(m.cfg.Store.State().Instances) != 0 {
		t.Error("an instance was placed")
	}
}

// An on-demand instance is unloaded once idle past its keep-alive, never
// while a request holds it; an explicit placement is pinned; a request's
// keep_alive becomes the instance's.
func TestKeepAlive(t *testing.T) {
	m, seq := oneNode(t)
	ctx := context.Background()
	zero := api.KeepAlive{}
	in, _, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", KeepAlive: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if in.Pinned || in.ExpiresAt == nil || in.ExpiresAt.Sub(in.CreatedAt) != firstUseGrace {
		t.Fatalf("on-demand placement %+v: want its first expiry a grace after creation", in)
	}
	ready := func(id string) {
		t.Helper()
		if err := seq.Publish(state.RunnerStatusChanged{NodeID: "n1", Runner: state.Runner{RunnerID: supervisor.RunnerID(id, 0),
			InstanceID: id, NodeID: "n1", Status: state.RunnerReady}}); err != nil {
			t.Fatal(err)
		}
	}
	ready(in.InstanceID)
	get := func() (state.Instance, bool) {
		in, ok := m.cfg.Store.State().Instances[in.InstanceID]
		return in, ok
	}
	release, err := m.Hold(in.InstanceID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := get(); got.Active != 1 || got.ExpiresAt != nil {
		t.Fatalf("held: %+v", got)
	}
	later := time.Now().Add(time.Hour)
	m.reap(ctx, m.cfg.Store.State(), later)
	m.holds.mu.Lock()
	reaping := m.holds.reaping[in.InstanceID]
	m.holds.mu.Unlock()
	if _, ok := get(); !ok || reaping {
		t.Fatal("a held instance was unloaded")
	}
	release()
	release() // a second call does nothing
	got, _ := get()
	if got.Active != 0 || got.ExpiresAt == nil || time.Since(*got.ExpiresAt) > time.Minute || got.ExpiresAt.After(time.Now()) {
		t.Fatalf("released with keep-alive 0: %+v", got)
	}
	// Reaped a second past the expiry rather than "now", so that the test
	// does not rest on the wall clock having moved since the release.
	m.reap(ctx, m.cfg.Store.State(), got.ExpiresAt.Add(time.Second))
	if _, err := m.Hold(in.InstanceID, nil); !errors.Is(err, api.ErrUnloading) && !errors.Is(err, api.ErrModelNotRunning) {
		t.Fatalf("Hold while unloading: %v", err)
	}
	if err := m.waitState(ctx, func(s state.State) bool { _, ok := s.Instances[in.InstanceID]; return !ok }); err != nil {
		t.Fatalf("the idle instance was not unloaded: %v", err)
	}

	// Placed explicitly: pinned, whatever the clock says; a request that
	// asks for 1m unpins it, and one that asks for -1 pins it again.
	in, _, err = m.Place(ctx, api.PlaceRequest{Model: "tiny"})
	if err != nil || !in.Pinned || in.ExpiresAt != nil {
		t.Fatalf("explicit placement %+v %v: want pinned", in, err)
	}
	ready(in.InstanceID)
	m.reap(ctx, m.cfg.Store.State(), later)
	release, _ = m.Hold(in.InstanceID, &api.KeepAlive{D: time.Minute})
	release()
	if got, _ := get(); got.Pinned || got.KeepAliveMs != 60000 || got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 50*time.Second {
		t.Fatalf("after keep_alive 1m: %+v", got)
	}
	release, _ = m.Hold(in.InstanceID, &api.KeepAlive{D: -1})
	release()
	m.reap(ctx, m.cfg.Store.State(), later)
	// The reaper unloads in the background: the instance stays, pinned,
	// while it would have had time to.
	testutil.Never(t, 200*time.Millisecond, "the instance pinned by keep_alive -1 unloaded or unpinned", func() bool {
		got, ok := get()
		return !ok || !got.Pinned || got.ExpiresAt != nil
	})
}

// The models sampler publishes a list only when it changed (and every
// 10th scan regardless).
func TestModelsSamplerSkipsUnchanged(t *testing.T) {
	m, _ := oneNode(t)
	s := m.ModelsSampler()
	var published int
	for range 10 {
		ev, err := s.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ev != nil {
			published++
		}
	}
	if published != 2 { // the first scan and the 10th
		t.Fatalf("10 scans of an unchanged list published %d times", published)
	}
	os.Remove(m.cfg.Models.Scan()[0].Path)
	if ev, _ := s.Sample(context.Background()); ev == nil {
		t.Fatal("a removed model was not published")
	}
}

// An explicit placement onto the nodes of an instance loaded on demand
// pins that instance (this node owns it), so that it stays, and is
// restored after a restart, as an explicit placement is; one owned by
// another node is not reused.
func TestPlacePinsAnOnDemandInstance(t *testing.T) {
	m, seq := oneNode(t)
	ctx := context.Background()
	five := api.KeepAlive{D: 5 * time.Minute}
	od, _, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", KeepAlive: &five})
	if err != nil || od.Pinned {
		t.Fatalf("on-demand placement: %+v %v", od, err)
	}
	got, existed, err := m.Place(ctx, api.PlaceRequest{Model: "tiny"})
	if err != nil || !existed || got.InstanceID != od.InstanceID || !got.Pinned {
		t.Fatalf("explicit placement = %+v, existed %v, %v; want the same instance, pinned", got, existed, err)
	}
	if in := m.cfg.Store.State().Instances[od.InstanceID]; !in.Pinned || in.ExpiresAt != nil {
		t.Errorf("in the state: %+v, want pinned with no expiry", in)
	}
	// Another node's instance loaded on demand on these nodes.
	other := state.Instance{InstanceID: "inst-other", ModelID: "tiny", NodeID: "n9", Status: state.InstanceStatusActive,
		Ranks: []state.ShardRange{{Rank: 0, NodeID: "n1", LastLayer: 4}}, KeepAliveMs: 1000}
	if err := seq.Publish(state.InstanceDeleted{NodeID: "n1", InstanceID: od.InstanceID}); err != nil {
		t.Fatal(err)
	}
	if err := seq.Publish(state.InstanceCreated{NodeID: "n9", Instance: other}); err != nil {
		t.Fatal(err)
	}
	got, existed, err = m.Place(ctx, api.PlaceRequest{Model: "tiny"})
	if err != nil || existed || got.InstanceID == other.InstanceID || !got.Pinned {
		t.Fatalf("explicit placement over another node's on-demand instance = %+v, existed %v, %v; want a new pinned one", got, existed, err)
	}
}
