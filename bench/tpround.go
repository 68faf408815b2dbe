package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v4/mem"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// tp-bench's rounds: each side's prefill, decodes and batched decodes,
// and the runners of the whole model at once for the cores' ceiling.

// startTwins starts, pinned, a runner of the whole model on each core of
// the group but the single runner's: singles are the single runner and
// these twins, which compute beside it for the cores' ceiling. They are
// skipped (rep says why) where the memory available now could not hold
// them beside the others.
func startTwins(ctx context.Context, o TPOptions, rep *TPReport, single *tpRunners, log io.Writer) ([]*tpRunners, error) {
	singles := []*tpRunners{single}
	if o.Cores == nil {
		return singles, nil
	}
	twins := o.Ranks - 1
	need := uint64(float64(twins) * float64(rep.ModelBytes) * 1.1)
	if vm, err := mem.VirtualMemory(); err == nil && vm.Available < need {
		rep.CeilingSkipped = fmt.Sprintf("the cores' ceiling needs a runner of the whole model on each of %d more cores (%s in all), and %s is available",
			twins, HumanBytes(int64(need)), HumanBytes(int64(vm.Available)))
		fmt.Fprintln(log, "skipped: "+rep.CeilingSkipped)
		return singles, nil
	}
	for r := 1; r <= twins; r++ {
		twin, err := startTPRunnersAt(ctx, o, []string{o.Model}, r)
		if err != nil {
			for _, t := range singles[1:] {
				t.close()
			}
			return nil, fmt.Errorf("one runner on core %d: %w", o.Cores[r], err)
		}
		singles = append(singles, twin)
	}
	return singles, nil
}

// ceilings computes the ceilings from the sides measured: Ranks × the
// runners' speed at once over one runner's alone.
func (rep *TPReport) ceilings() {
	n := float64(rep.Ranks)
	rep.CeilingRounds = ratios(rep.Together.DecodeTokPerSec, rep.Single.DecodeTokPerSec)
	for i := range rep.CeilingRounds {
		rep.CeilingRounds[i] *= n
	}
	if rep.Single.Decode > 0 {
		rep.DecodeCeiling = n * rep.Together.Decode / rep.Single.Decode
	}
	if rep.Single.Prefill > 0 {
		rep.PrefillCeiling = n * rep.Together.Prefill / rep.Single.Prefill
	}
}

// round times round i's prefill, decode (untraced and traced) and batched
// decode on g into side; round 0 warms up and is not kept.
func (g *tpRunners) round(ctx context.Context, o TPOptions, i int, side *TPSide) error {
	noop := tpNoop
	if o.PP > 0 {
		d, err := g.client.Complete(ctx, tpPrefillReq(o, i, g.vocab), noop)
		if err != nil {
			return err
		}
		if i > 0 {
			side.PrefillTokPerSec = append(side.PrefillTokPerSec, d.PrefillTokPerSec())
		}
	}
	for _, traced := range []bool{false, true} {
		if o.TG == 0 {
			break
		}
		req := tpDecodeReq(o, i)
		if traced {
			req.TraceID = fmt.Sprintf("tp-bench-%d", i)
		}
		d, err := g.client.Complete(ctx, req, noop)
		if err != nil {
			return err
		}
		switch {
		case i == 0:
		case traced:
			side.DecodeTracedTokPerSec = append(side.DecodeTracedTokPerSec, d.DecodeTokPerSec())
			c, r := decodeSpans(d.Spans)
			side.computeNs, side.reduceNs, side.tracedTokens = side.computeNs+c, side.reduceNs+r, side.tracedTokens+o.TG
		default:
			side.DecodeTokPerSec = append(side.DecodeTokPerSec, d.DecodeTokPerSec())
		}
	}
	if o.Concurrent > 1 && o.TG > 0 {
		v, err := tpBatched(ctx, g.client, o, i)
		if err != nil {
			return err
		}
		if i > 0 {
			side.BatchedTokPerSec = append(side.BatchedTokPerSec, v)
		}
	}
	return nil
}

// tpSides runs o.Repeat rounds (after a warmup) on the single runner
// (singles[0]), on the group, and with more singles (one a core) on all of
// them at once, one after the other in each round, so that the machine's
// drift (a third on this VM from minute to minute) falls on every side
// alike; the runners not measured wait idle (blocked on their sockets).
func tpSides(ctx context.Context, o TPOptions, singles []*tpRunners, group *tpRunners) (one, tp, together TPSide, err error) {
	for i := 0; i <= o.Repeat; i++ {
		if err := singles[0].round(ctx, o, i, &one); err != nil {
			return one, tp, together, fmt.Errorf("one runner: %w", err)
		}
		if err := group.round(ctx, o, i, &tp); err != nil {
			return one, tp, together, fmt.Errorf("tensor-parallel runners: %w", err)
		}
		if len(singles) > 1 {
			if err := tpTogether(ctx, o, i, singles, &together); err != nil {
				return one, tp, together, fmt.Errorf("runners at once: %w", err)
			}
		}
	}
	for _, side := range []*TPSide{&one, &tp, &together} {
		side.Prefill, side.Decode, side.DecodeTraced = Mean(side.PrefillTokPerSec), Mean(side.DecodeTokPerSec), Mean(side.DecodeTracedTokPerSec)
		side.Batched = Mean(side.BatchedTokPerSec)
		if side.tracedTokens > 0 {
			side.DecodeComputeMs = float64(side.computeNs) / 1e6 / float64(side.tracedTokens)
			side.DecodeReduceMs = float64(side.reduceNs) / 1e6 / float64(side.tracedTokens)
		}
	}
	return one, tp, together, nil
}

// tpTogether has every runner of singles prefill o.PP tokens at once,
// then decode o.TG at once (round i's prompts, as the single runner's),
// and keeps the slowest runner's speeds (round 0 warms up).
func tpTogether(ctx context.Context, o TPOptions, i int, singles []*tpRunners, side *TPSide) error {
	type speeds struct{ prefill, decode float64 }
	at := make([]speeds, len(singles))
	errs := make([]error, len(singles))
	var wg sync.WaitGroup
	for k, g := range singles {
		wg.Go(func() {
			if o.PP > 0 {
				d, err := g.client.Complete(ctx, tpPrefillReq(o, i, g.vocab), tpNoop)
				if err != nil {
					errs[k] = err
					return
				}
				at[k].prefill = d.PrefillTokPerSec()
			}
		})
	}
	wg.Wait()
	for k, g := range singles {
		wg.Go(func() {
			if errs[k] != nil || o.TG == 0 {
				return
			}
			d, err := g.client.Complete(ctx, tpDecodeReq(o, i), tpNoop)
			if err != nil {
				errs[k] = err
				return
			}
			at[k].decode = d.DecodeTokPerSec()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || i == 0 {
		return err
	}
	slowest := at[0]
	for _, s := range at[1:] {
		slowest.prefill, slowest.decode = min(slowest.prefill, s.prefill), min(slowest.decode, s.decode)
	}
	if o.PP > 0 {
		side.PrefillTokPerSec = append(side.PrefillTokPerSec, slowest.prefill)
	}
	if o.TG > 0 {
		side.DecodeTokPerSec = append(side.DecodeTokPerSec, slowest.decode)
	}
	return nil
}

func tpNoop(runnerapi.Piece) error { return nil }

// tpPrefillReq is round i's prefill: o.PP tokens, one generated.
func tpPrefillReq(o TPOptions, i, vocab int) runnerapi.CompletionRequest {
	prompt := make([]int32, o.PP)
	for k := range prompt {
		prompt[k] = int32((k*7919 + i*31 + 300) % max(vocab, 1))
	}
	return runnerapi.CompletionRequest{Request: runnerapi.Request{PromptTokens: prompt, MaxTokens: 1, IgnoreEOS: true}}
}

// tpDecodeReq is round i's decode: o.TG tokens after the first.
func tpDecodeReq(o TPOptions, i int) runnerapi.CompletionRequest {
	return runnerapi.CompletionRequest{Request: runnerapi.Request{PromptTokens: []int32{int32(1 + i)}, MaxTokens: o.TG + 1, IgnoreEOS: true}}
}

// decodeSpans sums a traced request's decode spans: its forward passes
// ("compute") and the all-reduces inside them.
func decodeSpans(spans []trace.Span) (compute, reduce int64) {
	for _, sp := range spans {
		if !strings.HasPrefix(sp.Cat, "decode") {
			continue
		}
		switch sp.Name {
		case "compute":
			compute += sp.DurNs
		case "all-reduce":
			reduce += sp.DurNs
		}
	}
	return compute, reduce
}

// tpBatched decodes o.TG tokens for o.Concurrent requests at once and
// returns their aggregate tok/s (all tokens over the wall time).
func tpBatched(ctx context.Context, c *runnerapi.Client, o TPOptions, run int) (float64, error) {
	errs := make(chan error, o.Concurrent)
	start := time.Now()
	for k := range o.Concurrent {
		go func() {
			req := runnerapi.CompletionRequest{Request: runnerapi.Request{PromptTokens: []int32{int32(2 + k + run*o.Concurrent)}, MaxTokens: o.TG, IgnoreEOS: true}}
			_, err := c.Complete(ctx, req, func(runnerapi.Piece) error { return nil })
			errs <- err
		}()
	}
	for range o.Concurrent {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return float64(o.Concurrent*o.TG) / time.Since(start).Seconds(), nil
}
