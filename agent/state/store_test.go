package state

import (
	"context"
	"testing"
	"time"
)

// A reader that waits on the log for a change it then looks for in the
// state must find it: Apply makes the state visible before it wakes the
// log's waiters. (When it woke them first, a waiter could read the old
// state, take the new Next and sleep until some later event: the cause
// of a keep-alive test that hung in CI.)
func TestApplyStateBeforeWake(t *testing.T) {
	store := NewStore(NewLog(16), NewMemoryHistory(DefaultHistoryWindow))
	seq := &LocalSequencer{Store: store}
	for i := range 2000 {
		id := "i" + string(rune('a'+i%26))
		found := make(chan error, 1)
		applied := store.Log().Next()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for {
				next := store.Log().Next()
				if st := store.State(); st.LastEventAppliedIdx >= applied && next > applied {
					found <- nil
					return
				}
				if err := store.Log().Wait(ctx, next); err != nil {
					found <- err
					return
				}
			}
		}()
		if err := seq.Publish(NodeIdentityMeasured{NodeID: "n1", Identity: NodeIdentity{NodeID: "n1", FriendlyName: id}}); err != nil {
			t.Fatal(err)
		}
		if err := <-found; err != nil {
			t.Fatalf("event %d: the waiter saw the log move but not the state: %v", i, err)
		}
	}
}
