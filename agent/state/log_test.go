package state

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"
)

func mem(node string, i int) Event {
	return NodeMemoryMeasured{NodeID: node, Memory: NodeMemory{RAMAvailable: Bytes(uint64(i))}}
}

func TestLogSinceAndRetention(t *testing.T) {
	l := NewLog(4)
	for i := 0; i < 10; i++ {
		if err := l.Append(Indexed{Idx: int64(i), Event: mem("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Append(Indexed{Idx: 3, Event: mem("a", 3)}); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("replayed append: err = %v", err)
	}
	got, err := l.Since(6, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].Idx != 6 || got[3].Idx != 9 {
		t.Fatalf("Since(6) = %v", idxs(got))
	}
	if ev := got[1].Event.(NodeMemoryMeasured); ev.Memory.RAMAvailable.InBytes != 7 {
		t.Errorf("event 7 carries %d", ev.Memory.RAMAvailable.InBytes)
	}
	if got, _ := l.Since(7, 2); len(got) != 2 || got[0].Idx != 7 || got[1].Idx != 8 {
		t.Errorf("Since(7, max 2) = %v", idxs(got))
	}
	if got, err := l.Since(10, 0); err != nil || len(got) != 0 {
		t.Errorf("Since(next) = %v, %v; want empty", idxs(got), err)
	}
	if _, err := l.Since(5, 0); !errors.Is(err, ErrCompacted) {
		t.Errorf("Since(5) after retention 4: err = %v, want ErrCompacted", err)
	}
}

func TestLogResetAndStoreRestore(t *testing.T) {
	st := NewStore(NewLog(4), NewMemoryHistory(time.Hour))
	seq := &LocalSequencer{Store: st}
	for i := 0; i < 3; i++ {
		seq.Publish(mem("a", i))
	}
	snap := Apply(New(), mem("m", 42))
	snap.LastEventAppliedIdx = 99
	st.Restore(snap)
	if st.State().LastEventAppliedIdx != 99 || st.Log().Next() != 100 {
		t.Fatalf("after restore: idx %d, log next %d", st.State().LastEventAppliedIdx, st.Log().Next())
	}
	if _, err := st.Log().Since(0, 0); !errors.Is(err, ErrCompacted) {
		t.Errorf("events before the snapshot: err = %v, want ErrCompacted", err)
	}
	for i := 0; i < 6; i++ { // wraps the ring of 4
		if err := seq.Publish(mem("a", 100+i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.Log().Since(102, 0)
	if err != nil || len(got) != 4 || got[0].Idx != 102 || got[3].Idx != 105 {
		t.Fatalf("Since(102) = %v, %v", idxs(got), err)
	}
	if v := got[0].Event.(NodeMemoryMeasured).Memory.RAMAvailable.InBytes; v != 102 {
		t.Errorf("event 102 carries %d", v)
	}
}

func TestLogWaitWakesOnAppend(t *testing.T) {
	l := NewLog(8)
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background(), 0) }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned before any append: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	l.Append(Indexed{Idx: 0, Event: mem("a", 0)})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not wake on append")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx, 5); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on cancelled ctx = %v", err)
	}
}

func TestStoreAndSequencerConcurrentPublish(t *testing.T) {
	st := NewStore(NewLog(1024), NewMemoryHistory(time.Hour))
	seq := &LocalSequencer{Store: st}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if err := seq.Publish(mem("n", i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := st.State().LastEventAppliedIdx; got != 399 {
		t.Errorf("lastEventAppliedIdx = %d, want 399", got)
	}
	evs, err := st.Log().Since(0, 0)
	if err != nil || len(evs) != 400 {
		t.Fatalf("log has %d events, err %v", len(evs), err)
	}
	for i, e := range evs {
		if e.Idx != int64(i) {
			t.Fatalf("event %d has idx %d", i, e.Idx)
		}
	}
	if err := seq.Publish(NodeMemoryMeasured{NodeID: "bad/id"}); err == nil {
		t.Error("publishing an invalid node id succeeded")
	}
	nan := math.NaN()
	if err := seq.Publish(NodeSystemMeasured{NodeID: "n", System: NodeSystem{CPUUsage: &nan}}); err == nil {
		t.Error("publishing a NaN succeeded; no reader could encode it")
	}
	if st.State().LastEventAppliedIdx != 399 {
		t.Error("a refused event advanced the state")
	}
	if Float(math.Inf(1)) != nil || Float(nan) != nil || *Float(0.5) != 0.5 {
		t.Error("Float does not turn non-finite values into null")
	}
}

func TestStoreRefusesGapWithoutSideEffects(t *testing.T) {
	st := NewStore(NewLog(8), NewMemoryHistory(time.Hour))
	if err := st.Apply(Indexed{Idx: 1, Event: mem("a", 1)}); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("gap: err = %v", err)
	}
	if st.Log().Next() != 0 || st.State().LastEventAppliedIdx != -1 {
		t.Error("a refused event changed the log or the state")
	}
	if _, ok := st.History().Get("a"); ok {
		t.Error("a refused event reached the history")
	}
}

func TestMemoryHistoryWindow(t *testing.T) {
	h := NewMemoryHistory(10 * time.Second)
	for i := 0; i < 30; i++ {
		h.Add("a", NodeMemory{RAMAvailable: Bytes(uint64(i)), SampledAt: t0.Add(time.Duration(i) * time.Second)})
	}
	got, ok := h.Get("a")
	if !ok {
		t.Fatal("no history")
	}
	// Newest at 29 s; window 10 s keeps 19..29.
	if len(got) != 11 || got[0].RAMAvailable.InBytes != 19 || got[10].RAMAvailable.InBytes != 29 {
		t.Errorf("kept %d samples, first %d", len(got), got[0].RAMAvailable.InBytes)
	}
	got[0].RAMAvailable = nil
	if again, _ := h.Get("a"); again[0].RAMAvailable == nil {
		t.Error("Get returned the internal slice, not a copy")
	}
	if _, ok := h.Get("b"); ok {
		t.Error("history for an unknown node")
	}
}

func TestMemoryHistoryBounds(t *testing.T) {
	h := NewMemoryHistory(time.Hour)
	for i := 0; i < maxHistorySamples+50; i++ {
		h.Add("a", NodeMemory{SampledAt: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	if got, _ := h.Get("a"); len(got) != maxHistorySamples {
		t.Errorf("kept %d samples, cap %d", len(got), maxHistorySamples)
	}
	for i := 0; i < maxHistoryNodes+10; i++ {
		h.Add("node-"+strconv.Itoa(i), NodeMemory{SampledAt: t0})
	}
	if n := len(h.s.nodes); n != maxHistoryNodes {
		t.Errorf("tracking %d nodes, cap %d", n, maxHistoryNodes)
	}
}

func idxs(evs []Indexed) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Idx
	}
	return out
}
