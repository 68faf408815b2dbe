package runner

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// stageFake is a pipeline's last rank's blocks for FuzzStageFrames: it
// checks its arguments as the ggml backend does (positions in the
// context, sequences among the slots, rows among the batch's) and answers
// with logits and embeddings of the sizes asked for. bad records a call
// that a stage should never make whatever its frames said: one naming a
// slot it does not have.
type stageFake struct {
	parallel, ctxLen int
	bad              string
}

const stageFakeDim, stageFakeVocab = 4, 8

func (f *stageFake) Config() model.Config {
	return model.Config{Dim: stageFakeDim, Vocab: stageFakeVocab, Pooling: model.PoolMean}
}
func (f *stageFake) Options() backend.Options {
	return backend.Options{ContextLen: f.ctxLen, BatchSize: 512, Parallel: f.parallel}
}
func (f *stageFake) slot(what string, seq int) {
	if seq < 0 || seq >= f.parallel {
		f.bad = fmt.Sprintf("%s of slot %d of %d", what, seq, f.parallel)
	}
}
func (f *stageFake) Remove(seq, from int) error {
	f.slot("Remove", seq)
	if from < 0 {
		return fmt.Errorf("remove from %d", from)
	}
	return nil
}
func (f *stageFake) Shift(seq, keep, discard int) error {
	f.slot("Shift", seq)
	if keep < 0 || discard < 1 {
		return fmt.Errorf("shift keep %d discard %d", keep, discard)
	}
	return nil
}
func (f *stageFake) Forward(_ context.Context, b backend.Batch) (backend.Result, error) {
	n := len(b.Positions)
	if n < 1 || n > 512 || len(b.Seqs) != n || len(b.Hidden) != n*stageFakeDim {
		return backend.Result{}, fmt.Errorf("batch of %d positions, %d seqs, %d hidden", n, len(b.Seqs), len(b.Hidden))
	}
	for i, p := range b.Positions {
		f.slot("Forward", b.Seqs[i])
		if p < 0 || int(p) >= f.ctxLen {
			return backend.Result{}, fmt.Errorf("position %d", p)
		}
	}
	for _, o := range append(append([]int32{}, b.Outputs...), b.Embeds...) {
		if o < 0 || int(o) >= n {
			return backend.Result{}, fmt.Errorf("row %d of %d", o, n)
		}
	}
	res := backend.Result{Logits: make([]float32, len(b.Outputs)*stageFakeVocab), Embeds: make([]float32, len(b.Embeds)*stageFakeDim)}
	for i := range res.Logits {
		res.Logits[i] = float32(i%stageFakeVocab) / 3
	}
	for i := range res.Embeds {
		res.Embeds[i] = 1
	}
	return res, nil
}

// frame is one rank-link frame as a stage reads it.
func frame(typ byte, payload []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// Whatever frames the previous rank sends, a pipeline's last rank ends
// with an error, never a panic, and never hands its blocks a slot it does
// not have.
func FuzzStageFrames(f *testing.F) {
	js := func(v any) []byte { b, _ := json.Marshal(v); return b }
	act := func(groups []actGroup) []byte {
		rows := 0
		for _, g := range groups {
			rows += int(g.N)
		}
		m := actMsg{Seq: 1, Groups: groups, Hidden: make([]float32, rows*stageFakeDim)}
		return frame(frameAct, m.marshal(nil))
	}
	f.Add(bytes.Join([][]byte{
		frame(frameBegin, js(beginMsg{Req: 1, Slot: 1, Keep: 3, Logprobs: 2})),
		act([]actGroup{{Slot: 1, Sample: true, Start: 3, N: 2}}),
		act([]actGroup{{Slot: 1, Decode: true, Sample: true, Token: 1, Start: 5, N: 3, Drafts: []int32{2, 3}}}),
		frame(frameBack, js(rollbackMsg{Slot: 1, Keep: 6})),
		frame(frameShift, js(shiftMsg{Slot: 1, Keep: 2, Discard: 2})),
		frame(frameEnd, js(endMsg{Req: 1, Slot: 1, Forget: true})),
	}, nil))
	f.Add(bytes.Join([][]byte{
		frame(frameBegin, js(beginMsg{Req: 2, Slot: 0, Embed: true})),
		act([]actGroup{{Slot: 0, Sample: true, Embed: true, Start: 0, N: 2}}),
		frame(frameBegin, js(beginMsg{Req: 3, Slot: 2, TraceID: "t1"})),
		act([]actGroup{{Slot: 2, Sample: true, Start: 0, N: 1}, {Slot: 0, Start: 2, N: 1}}),
	}, nil))
	f.Add(frame(frameBegin, []byte(`{"slot":1,"keep":-4,"sample":{"temperature":-1}}`)))
	f.Add(frame(frameShift, []byte(`{"slot":0,"keep":2147483647,"discard":2}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		fake := &stageFake{parallel: 3, ctxLen: 64}
		s := &Stage{F: fake, In: NewLink(memConn{r: bytes.NewReader(data)}), Out: NewLink(memConn{r: bytes.NewReader(nil)}), Rank: 1, Shape: runnerapi.Shape{Pipeline: 2, Tensor: 1}}
		if err := s.Serve(context.Background()); err == nil {
			t.Fatal("Serve ended without an error")
		}
		if fake.bad != "" {
			t.Fatalf("the stage called %s", fake.bad)
		}
	})
}
