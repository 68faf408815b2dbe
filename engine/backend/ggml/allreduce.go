//go:build cgo

package ggml

// The tensor-parallel all-reduce runs inside the compute graph: a ggml
// custom op (ggml_map_custom1_inplace) on a block's partial output calls
// back into Go, which sums it across the group (backend.Collective) in
// place. So a forward pass stays one graph, with no host round trip of the
// hidden state between segments. The backend knows only the Collective
// interface, never sockets.
//
// A block on a GPU is the exception: no GPU backend runs the op, so ggml's
// scheduler runs it on the CPU, on a copy of the partial output it makes
// on the host, and copies the sum back for what follows. The in-place op
// would write through the device tensor's address (not the host's: a
// fault), so such a block's all-reduce is an op with its own output, which
// the scheduler allocates on the host: it copies its input there, then
// sums. Each is a crossing of the hidden state both ways; BenchmarkGPU-
// Crossing measures what one costs.
//
// Like repack.go this reaches below ollama's Go API: the op needs the C
// context and tensor that ollama's Context and Tensor keep in unexported
// fields (ollamaprivate.go). Every step is checked.

/*
#include <stdint.h>
#include <string.h>

struct ggml_tensor;
struct ggml_context;
typedef void (*ggml_custom1_op_t)(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * userdata);
struct ggml_tensor * ggml_map_custom1_inplace(struct ggml_context * ctx, struct ggml_tensor * a, ggml_custom1_op_t fun, int n_tasks, void * userdata);
struct ggml_tensor * ggml_map_custom1(struct ggml_context * ctx, struct ggml_tensor * a, ggml_custom1_op_t fun, int n_tasks, void * userdata);
void * ggml_get_data(const struct ggml_tensor * tensor);
int64_t ggml_nelements(const struct ggml_tensor * tensor);
size_t ggml_nbytes(const struct ggml_tensor * tensor);
int ggml_is_contiguous(const struct ggml_tensor * tensor);

// orreryAllReduce is allreduce_export.go's Go function.
extern void orreryAllReduce(uintptr_t h, float * data, int64_t n);

// One task: the thread that runs it sums the whole tensor (the others wait
// at ggml's barrier after the op).
static void orrery_allreduce_op(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * ud) {
	(void)a; (void)nth;
	if (ith != 0) return;
	orreryAllReduce((uintptr_t)ud, (float *)ggml_get_data(dst), ggml_nelements(dst));
}

// The same into its own output (a block on a GPU: see above), a copy of
// a, contiguous as a is.
static void orrery_allreduce_copy_op(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * ud) {
	(void)nth;
	if (ith != 0) return;
	memcpy(ggml_get_data(dst), ggml_get_data(a), ggml_nbytes(dst));
	orreryAllReduce((uintptr_t)ud, (float *)ggml_get_data(dst), ggml_nelements(dst));
}

static struct ggml_tensor * orrery_allreduce(struct ggml_context * ctx, struct ggml_tensor * a, uintptr_t h, int copy) {
	if (copy) {
		return ggml_map_custom1(ctx, a, orrery_allreduce_copy_op, 1, (void *)h);
	}
	return ggml_map_custom1_inplace(ctx, a, orrery_allreduce_op, 1, (void *)h);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/backend"
)

// tpGroup is a rank's collective as the graph's callback sees it: the
// handle passed to the op, and the first error of a forward pass.
type tpGroup struct {
	c backend.Collective
	h cgo.Handle

	mu  sync.Mutex
	err error
	// Bytes counts the values summed, for traces.
	values int64
}

func newTPGroup(c backend.Collective) *tpGroup {
	g := &tpGroup{c: c}
	g.h = cgo.NewHandle(g)
	return g
}

func (g *tpGroup) close() {
	if g != nil {
		g.h.Delete()
	}
}

// take returns and clears the forward pass's error.
func (g *tpGroup) take() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.err
	g.err = nil
	return err
}

// reduce sums buf across the group; with exact, over f32 whatever the
// group's wire (backend.ExactCollective).
func (g *tpGroup) reduce(buf []float32, exact bool) {
	g.mu.Lock()
	failed := g.err != nil
	g.mu.Unlock()
	if failed {
		return // the pass has failed; later sums would only wait
	}
	sum := g.c.AllReduce
	if e, ok := g.c.(backend.ExactCollective); ok && exact {
		sum = e.AllReduceExact
	}
	err := sum(buf)
	g.mu.Lock()
	g.values += int64(len(buf))
	if err != nil && g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
}

// allReduce sums t (a contiguous f32 result, such as a matmul's) across
// the group, in the graph; onGPU says t is computed on a GPU (its block
// is there), whose sum goes through the host (see above).
func (r *Rank) allReduce(c ml.Context, t ml.Tensor, onGPU bool) ml.Tensor {
	return groupOp(c, t, r.group, onGPU)
}

// groupOp is g's sum of t as an op of the graph: a CPU op, so that from a
// GPU (onGPU) the graph crosses to the host and back at it (what
// MeasureGPU times with a group that sums nothing).
func groupOp(c ml.Context, t ml.Tensor, g *tpGroup, onGPU bool) ml.Tensor {
	ctx, err := ollamaContextC(c)
	if err != nil {
		panic(fmt.Errorf("tensor-parallel all-reduce: %w", err))
	}
	src, err := ollamaTensorC(t)
	if err != nil {
		panic(fmt.Errorf("tensor-parallel all-reduce: %w", err))
	}
	if C.ggml_is_contiguous((*C.struct_ggml_tensor)(src)) == 0 {
		panic(errors.New("tensor-parallel all-reduce of a non-contiguous tensor"))
	}
	cp := C.int(0)
	if onGPU {
		cp = 1
	}
	dst := C.orrery_allreduce((*C.struct_ggml_context)(ctx), (*C.struct_ggml_tensor)(src), C.uintptr_t(g.h), cp)
	if dst == nil {
		panic(errors.New("tensor-parallel all-reduce: ggml_map_custom1 failed"))
	}
	out, err := ollamaTensorLike(t, unsafe.Pointer(dst))
	if err != nil {
		panic(fmt.Errorf("tensor-parallel all-reduce: %w", err))
	}
	return out
}
