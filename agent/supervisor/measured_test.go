package supervisor

import (
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// A finished request gives its decode tok/s and the mean of its decode
// all-reduces (prefill's are not decode's); too short a decode gives
// nothing.
func TestMeasuredOf(t *testing.T) {
	done := &runnerapi.Done{Result: runnerapi.Result{CompletionTokens: 11, DecodeNs: 100e6}, Spans: []trace.Span{
		{Name: "all-reduce", Cat: "decode/comms", DurNs: 200e3},
		{Name: "all-reduce", Cat: "decode/comms", DurNs: 400e3},
		{Name: "all-reduce", Cat: "prefill/comms", DurNs: 9e6},
		{Name: "compute", Cat: "decode/compute", DurNs: 5e6},
	}}
	dec, reduce := measuredOf(done)
	if dec != 100 || reduce != 300 {
		t.Errorf("measured %.1f tok/s, %.1f µs; want 100 and 300", dec, reduce)
	}
	done.Spans = nil
	if dec, reduce := measuredOf(done); dec != 100 || reduce != 0 {
		t.Errorf("a pipeline: %.1f tok/s, %.1f µs", dec, reduce)
	}
	done.CompletionTokens = 3
	if dec, _ := measuredOf(done); dec != 0 {
		t.Errorf("3 tokens measured %.1f tok/s", dec)
	}
	if dec, _ := measuredOf(nil); dec != 0 {
		t.Error("no request measured something")
	}
}
