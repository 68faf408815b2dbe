//go:build cgo

package ggml

// The CPU backend's threads. ollama's ml package makes one ggml CPU backend
// per process and shares it among every model loaded there, and each
// NewBackend sets its thread count for all of them: a runner that loaded a
// one-thread draft model after its target computed the target on one
// thread too. So each rank binds its own thread count, and its own pool,
// to that backend before it computes (bind).
//
// The pool: without one, ggml makes a disposable pool for each graph,
// starting threads-1 threads and joining them again every pass. llama.cpp
// keeps a pool too.
//
// ollama keeps the backend in an unexported field, so, as repack.go does,
// this reaches below its Go API (ollamaprivate.go); every step is checked.

/*
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct ggml_backend * ggml_backend_t;
struct ggml_threadpool;
struct ggml_threadpool_params; // ggml.h's; see orrery_threadpool_new
void ggml_threadpool_params_init(struct ggml_threadpool_params * p, int n_threads);
struct ggml_threadpool * ggml_threadpool_new(struct ggml_threadpool_params * params);
void ggml_threadpool_free(struct ggml_threadpool * threadpool);
bool ggml_backend_is_cpu(ggml_backend_t backend);
void ggml_backend_cpu_set_n_threads(ggml_backend_t backend_cpu, int n_threads);
void ggml_backend_cpu_set_threadpool(ggml_backend_t backend_cpu, struct ggml_threadpool * threadpool);

enum { orrery_params_size = 4096 };

// For orrery_compute_threads: a graph of one custom op that records how
// many threads ran it.
struct ggml_tensor;
struct ggml_context;
struct ggml_cgraph;
struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
typedef void (*ggml_custom1_op_t)(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * userdata);
struct ggml_context * ggml_init(struct ggml_init_params params);
void ggml_free(struct ggml_context * ctx);
struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, int type, int64_t ne0);
struct ggml_tensor * ggml_map_custom1(struct ggml_context * ctx, struct ggml_tensor * a, ggml_custom1_op_t fun, int n_tasks, void * userdata);
struct ggml_cgraph * ggml_new_graph(struct ggml_context * ctx);
void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
int ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph * cgraph);

static void orrery_count_threads(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * ud) {
	(void)dst; (void)a;
	if (ith == 0) *(int *)ud = nth;
}

// orrery_compute_threads computes that graph on backend as it is set up
// and returns the number of threads that ran it (-1: failed).
static int orrery_compute_threads(ggml_backend_t backend) {
	struct ggml_init_params p = { 1 << 20, NULL, false };
	struct ggml_context * ctx = ggml_init(p);
	if (!ctx) return -1;
	int nth = -1;
	struct ggml_tensor * x = ggml_new_tensor_1d(ctx, 0, 64); // GGML_TYPE_F32
	struct ggml_cgraph * g = ggml_new_graph(ctx);
	ggml_build_forward_expand(g, ggml_map_custom1(ctx, x, orrery_count_threads, -1, &nth)); // -1: GGML_N_TASKS_MAX
	if (ggml_backend_graph_compute(backend, g) != 0) nth = -1;
	ggml_free(ctx);
	return nth;
}

// orrery_params_init fills p (orrery_params_size bytes) with ggml's
// defaults for n threads.
static void orrery_params_init(unsigned char * p, int n) {
	memset(p, 0, orrery_params_size);
	ggml_threadpool_params_init((struct ggml_threadpool_params *) p, n);
}

// orrery_threadpool_new makes a pool of n threads polling at poll. ggml.h's
// parameters are not declared here: ggml fills them in a buffer far larger
// than they are (a cpumask of 512 bools, then n_threads, prio, poll and
// two bools). poll is the field two after n_threads, which is found by
// filling the buffer for two thread counts, and must hold ggml's default,
// 50; where it is not found so, the pool polls as ggml's default does.
static struct ggml_threadpool * orrery_threadpool_new(int n, uint32_t poll) {
	unsigned char * a = malloc(orrery_params_size), * b = malloc(orrery_params_size);
	struct ggml_threadpool * tp = NULL;
	if (!a || !b) goto out;
	orrery_params_init(a, 3);
	orrery_params_init(b, 5);
	size_t off = 0;
	for (; off + 12 <= orrery_params_size; off += 4) {
		int32_t x, y;
		memcpy(&x, a + off, 4);
		memcpy(&y, b + off, 4);
		if (x == 3 && y == 5) break;
	}
	orrery_params_init(a, n);
	if (off + 12 <= orrery_params_size) {
		uint32_t def;
		memcpy(&def, a + off + 8, 4);
		if (def == 50) memcpy(a + off + 8, &poll, 4);
	}
	tp = ggml_threadpool_new((struct ggml_threadpool_params *) a);
out:
	free(a);
	free(b);
	return tp;
}
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/ollama/ollama/ml"
)

// threads is a rank's hold on the process's CPU backend.
type threads struct {
	n    int
	cpus []C.ggml_backend_t
	pool *C.struct_ggml_threadpool // nil: one thread, or none attachable
}

// threadPoll is the pool's polling level (ggml: 0 sleeps at once, 100
// spins longest). Idle threads that spin take a core from the ranks and
// models beside them in the process and on the machine.
const threadPoll = 0

// newThreads finds b's CPU backends and, for n ≥ 2, makes a pool of n
// threads for them.
func newThreads(b ml.Backend, n int) (*threads, error) {
	bes, err := ollamaSchedBackends(b)
	if err != nil {
		return nil, err
	}
	t := &threads{n: n}
	for _, p := range bes {
		be := C.ggml_backend_t(p)
		if be != nil && bool(C.ggml_backend_is_cpu(be)) {
			t.cpus = append(t.cpus, be)
		}
	}
	if n >= 2 && len(t.cpus) > 0 {
		if t.pool = C.orrery_threadpool_new(C.int(n), threadPoll); t.pool == nil {
			return nil, fmt.Errorf("ggml_threadpool_new(%d) failed", n)
		}
	}
	return t, nil
}

// computeMu serializes the computations of the ranks in a process: they
// share ollama's one CPU backend, with its one thread count, pool and work
// buffer. Setting another rank's pool pauses the one set, so a rank that
// bound while another computed could stop that one's threads before they
// took its graph: both would wait forever. (The ranks of one
// tensor-parallel group each run in a process of their own: a forward
// holds this lock while it waits on the group's all-reduce.)
var computeMu sync.Mutex

// bind takes the process's CPU backend for this rank's computation, with
// its thread count and pool; the function returned gives it back.
func (t *threads) bind() (unlock func()) {
	computeMu.Lock()
	if t != nil {
		for _, be := range t.cpus {
			C.ggml_backend_cpu_set_n_threads(be, C.int(t.n))
			C.ggml_backend_cpu_set_threadpool(be, t.pool)
		}
	}
	return computeMu.Unlock
}

// close frees the pool, unset from the backend first (another rank binds
// its own before it computes).
func (t *threads) close() {
	if t == nil || t.pool == nil {
		return
	}
	computeMu.Lock()
	defer computeMu.Unlock()
	for _, be := range t.cpus {
		C.ggml_backend_cpu_set_threadpool(be, nil)
	}
	C.ggml_threadpool_free(t.pool)
	t.pool = nil
}

// computeThreads is the number of threads the process's CPU backend
// computes with as it is now set up (for tests; -1: no CPU backend).
func (t *threads) computeThreads() int {
	if t == nil || len(t.cpus) == 0 {
		return -1
	}
	return int(C.orrery_compute_threads(t.cpus[0]))
}
