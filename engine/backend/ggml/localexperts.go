//go:build cgo

package ggml

// Expert parallelism: a rank holds experts [first, first+n) and routes
// every token over all of them, as the whole model does. Two custom ops
// turn the chosen experts' ids into the rank's own: a local expert's id
// less first and its weight kept; any other's replaced by a local expert
// that the batch uses anyway, with weight 0. mul_mat_id reads each
// expert's weights once for all its rows, so the stand-ins add a few dot
// products, not an expert (unless no token of the batch chose one of the
// rank's: then expert first is read in vain). The weights of 0 make their
// rows add exactly nothing to the sum the group all-reduces.

/*
#include <stdint.h>

struct ggml_tensor;
struct ggml_context;
typedef void (*ggml_custom1_op_t)(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * userdata);
typedef void (*ggml_custom2_op_t)(struct ggml_tensor * dst, const struct ggml_tensor * a, const struct ggml_tensor * b, int ith, int nth, void * userdata);
struct ggml_tensor * ggml_map_custom1(struct ggml_context * ctx, struct ggml_tensor * a, ggml_custom1_op_t fun, int n_tasks, void * userdata);
struct ggml_tensor * ggml_map_custom2(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, ggml_custom2_op_t fun, int n_tasks, void * userdata);
void * ggml_get_data(const struct ggml_tensor * tensor);
int64_t ggml_nelements(const struct ggml_tensor * tensor);

// The range travels in the op's userdata: first in the high 32 bits.
static int orrery_is_local(int32_t id, uintptr_t ud) {
	int32_t first = (int32_t)(ud >> 32), n = (int32_t)(ud & 0xffffffffu);
	return id >= first && id < first + n;
}

static void orrery_local_ids_op(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * ud) {
	(void)nth;
	if (ith != 0) return;
	uintptr_t u = (uintptr_t)ud;
	int32_t first = (int32_t)(u >> 32);
	const int32_t * in = (const int32_t *)ggml_get_data(a);
	int32_t * out = (int32_t *)ggml_get_data(dst);
	int64_t n = ggml_nelements(a);
	int32_t fill = 0;
	for (int64_t i = 0; i < n; i++) {
		if (orrery_is_local(in[i], u)) { fill = in[i] - first; break; }
	}
	for (int64_t i = 0; i < n; i++) {
		out[i] = orrery_is_local(in[i], u) ? in[i] - first : fill;
	}
}

static void orrery_local_weights_op(struct ggml_tensor * dst, const struct ggml_tensor * a, const struct ggml_tensor * b, int ith, int nth, void * ud) {
	(void)nth;
	if (ith != 0) return;
	const float * w = (const float *)ggml_get_data(a);
	const int32_t * ids = (const int32_t *)ggml_get_data(b);
	float * out = (float *)ggml_get_data(dst);
	int64_t n = ggml_nelements(a);
	for (int64_t i = 0; i < n; i++) {
		out[i] = orrery_is_local(ids[i], (uintptr_t)ud) ? w[i] : 0.0f;
	}
}

static struct ggml_tensor * orrery_local_ids(struct ggml_context * ctx, struct ggml_tensor * ids, uintptr_t ud) {
	return ggml_map_custom1(ctx, ids, orrery_local_ids_op, 1, (void *)ud);
}

static struct ggml_tensor * orrery_local_weights(struct ggml_context * ctx, struct ggml_tensor * w, struct ggml_tensor * ids, uintptr_t ud) {
	return ggml_map_custom2(ctx, w, ids, orrery_local_weights_op, 1, (void *)ud);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ollama/ollama/ml"
)

// localExperts returns chosen ([used, n] expert ids of the whole model)
// as ids of the rank's experts [first, first+count), and w ([1, used, n]
// their weights) with the weights of the others' experts set to 0.
func localExperts(c ml.Context, chosen, w ml.Tensor, first, count int) (ml.Tensor, ml.Tensor) {
	fail := func(err error) { panic(fmt.Errorf("expert-parallel ids: %w", err)) }
	chosen, w = chosen.Contiguous(c), w.Contiguous(c)
	ctx, err := ollamaContextC(c)
	if err != nil {
		fail(err)
	}
	ids, err := ollamaTensorC(chosen)
	if err != nil {
		fail(err)
	}
	wt, err := ollamaTensorC(w)
	if err != nil {
		fail(err)
	}
	ud := C.uintptr_t(uint64(first)<<32 | uint64(uint32(count)))
	localIDs := C.orrery_local_ids((*C.struct_ggml_context)(ctx), (*C.struct_ggml_tensor)(ids), ud)
	localW := C.orrery_local_weights((*C.struct_ggml_context)(ctx), (*C.struct_ggml_tensor)(wt), (*C.struct_ggml_tensor)(ids), ud)
	if localIDs == nil || localW == nil {
		fail(errors.New("ggml_map_custom failed"))
	}
	chosen, err = ollamaTensorLike(chosen, unsafe.Pointer(localIDs))
	if err != nil {
		fail(err)
	}
	w, err = ollamaTensorLike(w, unsafe.Pointer(localW))
	if err != nil {
		fail(err)
	}
	return chosen, w
}
