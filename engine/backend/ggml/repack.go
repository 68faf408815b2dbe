//go:build cgo

package ggml

// Repacking: ggml's CPU backend has matrix kernels for weights stored in
// interleaved blocks (Q4_0 and IQ4_NL as 8×8 q8_0 tiles, Q4_K as 8×8 q8_K
// tiles), about twice as fast for prompts as the plain dot products. It
// uses them for tensors that live in its CPU_REPACK buffer type, which
// llama.cpp picks for weights. ollama's ml backend loads every weight into
// the plain CPU buffer, and ollama's cgo build leaves the repack buffer type
// out of ggml's list unless GGML_USE_CPU_REPACK is defined (the Makefile
// defines it). After loading, Orrery moves each matrix that ggml can repack
// into such a buffer (ggml repacks it as it is copied in) and gives the
// plain copy's pages back to the OS.
//
// This touches ggml's C API below ollama's Go API: ollama's Tensor keeps its
// C tensor in an unexported field, which move swaps (ollamaprivate.go).
// Every step is checked; anything unexpected leaves the weight where it was.

/*
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// ggml's public C API (ggml.h, ggml-backend.h, ggml-cpu.h), declared here
// because ollama's headers are not on this package's include path. The
// types are opaque; ggml_init_params is ggml.h's.
struct ggml_tensor;
struct ggml_context;
typedef struct ggml_backend_buffer_type * ggml_backend_buffer_type_t;
typedef struct ggml_backend_buffer * ggml_backend_buffer_t;
typedef struct ggml_backend_device * ggml_backend_dev_t;
typedef struct ggml_backend_reg * ggml_backend_reg_t;
struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
typedef ggml_backend_buffer_type_t * (*ggml_backend_dev_get_extra_bufts_t)(ggml_backend_dev_t device);

ggml_backend_reg_t ggml_backend_cpu_reg(void);
ggml_backend_dev_t ggml_backend_reg_dev_get(ggml_backend_reg_t reg, size_t index);
void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name);
const char * ggml_backend_buft_name(ggml_backend_buffer_type_t buft);
size_t ggml_backend_buft_get_alignment(ggml_backend_buffer_type_t buft);
size_t ggml_backend_buft_get_alloc_size(ggml_backend_buffer_type_t buft, const struct ggml_tensor * tensor);
ggml_backend_buffer_t ggml_backend_buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size);
void * ggml_backend_buffer_get_base(ggml_backend_buffer_t buffer);
void ggml_backend_buffer_free(ggml_backend_buffer_t buffer);
int ggml_backend_tensor_alloc(ggml_backend_buffer_t buffer, struct ggml_tensor * tensor, void * addr);
void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
struct ggml_context * ggml_init(struct ggml_init_params params);
void ggml_free(struct ggml_context * ctx);
size_t ggml_tensor_overhead(void);
struct ggml_tensor * ggml_dup_tensor(struct ggml_context * ctx, const struct ggml_tensor * src);
struct ggml_tensor * ggml_set_name(struct ggml_tensor * tensor, const char * name);
const char * ggml_get_name(const struct ggml_tensor * tensor);
size_t ggml_nbytes(const struct ggml_tensor * tensor);
void * ggml_get_data(const struct ggml_tensor * tensor);
int ggml_cpu_has_avx2(void);

// orrery_repack_buft is ggml-cpu's CPU_REPACK buffer type, or NULL when
// this build of ggml has none.
static ggml_backend_buffer_type_t orrery_repack_buft(void) {
	ggml_backend_reg_t reg = ggml_backend_cpu_reg();
	if (!reg) return NULL;
	ggml_backend_dev_get_extra_bufts_t f = (ggml_backend_dev_get_extra_bufts_t)
		ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
	if (!f) return NULL;
	ggml_backend_buffer_type_t * b = f(ggml_backend_reg_dev_get(reg, 0));
	for (; b && *b; b++) {
		if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
	}
	return NULL;
}

// orrery_repack copies src into a fresh tensor of the same type and shape
// in one CPU_REPACK buffer (ggml repacks it on the way in), then gives the
// whole pages of src's data back to the OS: src is not read again. The new
// tensor lives in ctx; *buf receives the buffer (free it with the model).
static struct ggml_tensor * orrery_repack(struct ggml_context * ctx, ggml_backend_buffer_type_t buft,
		struct ggml_tensor * src, ggml_backend_buffer_t * buf) {
	struct ggml_tensor * t = ggml_dup_tensor(ctx, src);
	if (!t) return NULL;
	ggml_set_name(t, ggml_get_name(src));
	size_t size = ggml_backend_buft_get_alloc_size(buft, t);
	size_t align = ggml_backend_buft_get_alignment(buft);
	ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(buft, size + align);
	if (!b) return NULL;
	char * base = (char *) ggml_backend_buffer_get_base(b);
	char * addr = (char *) (((uintptr_t) base + align - 1) / align * align);
	if (ggml_backend_tensor_alloc(b, t, addr) != 0) {
		ggml_backend_buffer_free(b);
		return NULL;
	}
	size_t n = ggml_nbytes(src);
	char * data = (char *) ggml_get_data(src);
	ggml_backend_tensor_set(t, data, 0, n);
	long page = sysconf(_SC_PAGESIZE);
	if (page > 0) {
		uintptr_t lo = ((uintptr_t) data + page - 1) / page * page;
		uintptr_t hi = ((uintptr_t) data + n) / page * page;
		if (hi > lo) madvise((void *) lo, hi - lo, MADV_DONTNEED);
	}
	*buf = b;
	return t;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// repacker moves weights into ggml's CPU_REPACK buffer type.
type repacker struct {
	buft C.ggml_backend_buffer_type_t
	ctx  *C.struct_ggml_context
	bufs []C.ggml_backend_buffer_t
}

// newRepacker returns nil when repacking is not possible here: not
// Linux/amd64 with AVX2 (macOS runs weights on Metal), or a ggml built
// without the repack buffer type.
func newRepacker(tensors int) *repacker {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" || C.ggml_cpu_has_avx2() == 0 {
		return nil
	}
	buft := C.orrery_repack_buft()
	if buft == nil {
		return nil
	}
	ctx := C.ggml_init(C.struct_ggml_init_params{mem_size: C.size_t(tensors+1) * C.ggml_tensor_overhead(), no_alloc: true})
	if ctx == nil {
		return nil
	}
	return &repacker{buft: buft, ctx: ctx}
}

// repackable reports whether ggml-cpu (this version, x86 with AVX2) has a
// repacked layout for a matrix of this type and shape; the rule is
// ggml_repack_get_optimal_repack_type's, which must not be asked about
// anything else (it aborts). Q2_K is left out: it also needs AVX-512.
// A stack of experts ([in, out, experts], for mul_mat_id) repacks as its
// rows: groups of 8 never straddle two experts when out is a multiple of 8.
func repackable(ti gguf.TensorInfo) bool {
	if len(ti.Dims) != 2 && len(ti.Dims) != 3 || ti.Dims[1]%8 != 0 {
		return false
	}
	switch ti.Type {
	case gguf.Q4_0, gguf.Q4_K, gguf.IQ4_NL:
		return true
	}
	return false
}

// move repacks the weight behind t (an ollama ggml Tensor) and points t at
// the repacked copy.
func (r *repacker) move(t ml.Tensor) error {
	p, err := ollamaTensorC(t)
	if err != nil {
		return err
	}
	src := (*C.struct_ggml_tensor)(p)
	if C.ggml_get_data(src) == nil { // ollamaTensorC refuses a nil t
		return fmt.Errorf("tensor has no data")
	}
	var buf C.ggml_backend_buffer_t
	dst := C.orrery_repack(r.ctx, r.buft, src, &buf)
	if dst == nil {
		return fmt.Errorf("repack %s failed", C.GoString(C.ggml_get_name(src)))
	}
	r.bufs = append(r.bufs, buf)
	return setOllamaTensorC(t, unsafe.Pointer(dst))
}

// close frees the repacked weights.
func (r *repacker) close() {
	if r == nil {
		return
	}
	for _, b := range r.bufs {
		C.ggml_backend_buffer_free(b)
	}
	r.bufs = nil
	C.ggml_free(r.ctx)
}
