/* plugins/cuda/repack.cu — repacked copies of quantized weights in device memory (layout: repack.cuh).
 *
 * A 2-D q4_0, q8_0, q4_K or q6_K leaf flagged WEIGHT ("constant data uploaded once") that a MUL_MAT
 * reads gets a second copy in the repacked layout, which the decode mat-vec (mmv_rp.cuh) and the
 * prefill int8 GEMM (mmq.cuh) read instead of ggml's blocks. The copies live in one cache per
 * process, keyed by device, address, type and shape, shared by every plan that uses the weight (a
 * model's prefill and decode plans) and freed when the last plan lets go; a plan takes its entries
 * when it is created (the device memory is allocated then) and fills those not yet filled before its
 * first launch: the repack kernels run on the plan's stream, which is then synchronized once, so a
 * plan on another stream never reads a half-written copy and CUDA-graph capture never sees them.
 *
 * Writes into a buffer that holds repacked weights (buffer_write, and its free) mark the entries
 * inside the written range stale; a plan refills stale entries before its next launch. The memory
 * cost is the weights' size again. Device option repack=0 turns the path off (new plans use ggml's
 * blocks; existing plans keep theirs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <atomic>
#include <mutex>
#include "repack.h"
#include "plugin_internal.h"

struct cuda_repack {
    cuda_repack *next;
    int device;
    const void *src;            /* the weight's data */
    int32_t type;
    int64_t ne0, ne1, nb1;
    const pyg_buffer *buf;      /* buffer holding src when last acquired (for invalidation) */
    uint64_t span;              /* bytes of src */
    int refs;
    std::atomic<int> ready;     /* the copy matches src */
    void *mem;
    size_t bytes;
    rq_w w;                     /* device pointers into mem */
};

static std::mutex g_mu;
static cuda_repack *g_list;
static std::atomic<uint64_t> g_generation(1); /* bumped whenever an entry goes stale */

static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

int cuda_repack_eligible(const pyg_tensor *node) {
    if (!node || node->op != PYG_OP_MUL_MAT) return 0;
    const pyg_tensor *w = node->src[0];
    if (!w || w->op != PYG_OP_NONE || !(w->flags & PYG_TENSOR_FLAG_WEIGHT) || !w->data) return 0;
    if (!is_supported_quant(w->type) || w->type == PYG_TYPE_Q4_1 || w->ne[2] != 1 || w->ne[3] != 1) return 0; /* no repacked q4_1 layout */
    const pyg_type_traits *tr = pyg_type_get_traits(w->type);
    if (!tr || w->ne[0] % tr->block_size || w->nb[0] != (uint64_t)tr->type_size) return 0;
    if (w->ne[0] % 32 || w->ne[0] > 32768 || w->ne[1] > (1ll << 30)) return 0;
    return ((uintptr_t)w->data & 1) == 0 && (w->nb[1] & 1) == 0;
}

const rq_w *cuda_repack_weights(const cuda_repack *r) { return r ? &r->w : NULL; }

cuda_repack *cuda_repack_acquire(const pyg_device *dev, const pyg_tensor *node) {
    if (!cuda_repack_eligible(node)) return NULL;
    const pyg_tensor *w = node->src[0];
    std::lock_guard<std::mutex> lk(g_mu);
    cuda_repack *r = g_list;
    for (; r; r = r->next)
        if (r->device == dev->index && r->src == w->data && r->type == w->type && r->ne0 == w->ne[0] &&
            r->ne1 == w->ne[1] && r->nb1 == (int64_t)w->nb[1])
            break;
    if (!r) {
        const int64_t K = w->ne[0], M = w->ne[1], Mp = (M + RQ_ROW_PAD - 1) / RQ_ROW_PAD * RQ_ROW_PAD;
        const size_t qs = al256((size_t)(Mp * rq_qs_row(w->type, K))), qh = al256((size_t)rq_qh_bytes(w->type, Mp, K));
        const size_t sc = al256((size_t)rq_sc_bytes(w->type, Mp, K));
        void *mem = NULL;
        if (gpuSetDevice(dev->index) != gpuSuccess || gpuMalloc(&mem, qs + qh + sc) != gpuSuccess) {
            gpuGetLastError();
            pyg_cuda_log(PYG_LOG_WARN, "repack: no device memory for a copy of '%s' (%zu bytes); it stays on "
                         "the block-reading kernels", w->name, qs + qh + sc);
            return NULL;
        }
        r = new cuda_repack();
        r->device = dev->index;
        r->src = w->data;
        r->type = w->type;
        r->ne0 = K;
        r->ne1 = M;
        r->nb1 = (int64_t)w->nb[1];
        r->span = pyg_tensor_nbytes(w);
        r->refs = 0;
        r->ready.store(0);
        r->mem = mem;
        r->bytes = qs + qh + sc;
        r->w.qs = (const uint8_t *)mem;
        r->w.qh = qh ? (const uint8_t *)mem + qs : NULL;
        r->w.sc = (const uint8_t *)mem + qs + qh;
        r->w.K = K;
        r->w.M = M;
        r->w.Mp = Mp;
        r->w.qs_row = rq_qs_row(w->type, K);
        r->w.type = w->type;
        r->next = g_list;
        g_list = r;
    }
    if (w->buffer && r->buf != w->buffer) {
        r->buf = w->buffer;
        ((pyg_buffer *)w->buffer)->repacked = 1;
    }
    r->refs++;
    return r;
}

void cuda_repack_release(cuda_repack *r) {
    if (!r) return;
    std::lock_guard<std::mutex> lk(g_mu);
    if (--r->refs > 0) return;
    cuda_repack **pp = &g_list;
    while (*pp && *pp != r) pp = &(*pp)->next;
    if (*pp) *pp = r->next;
    if (gpuSetDevice(r->device) == gpuSuccess) gpuFree(r->mem);
    gpuGetLastError();
    delete r;
}

void cuda_repack_invalidate(const pyg_buffer *b, const void *base, uint64_t offset, uint64_t size, int freed) {
    std::lock_guard<std::mutex> lk(g_mu);
    const char *lo = (const char *)base + offset, *hi = lo + size;
    for (cuda_repack *r = g_list; r; r = r->next) {
        if (r->buf != b) continue;
        const char *s = (const char *)r->src;
        if (freed || (s < hi && lo < s + r->span)) {
            if (r->ready.exchange(0)) g_generation.fetch_add(1);
            if (freed) r->buf = NULL;
        }
    }
}

uint64_t cuda_repack_generation(void) { return g_generation.load(); }

/* ---------------------------------------------------------------- the repack kernels */

__global__ void k_repack(rq_job j) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < j.units + j.groups;
         i += (int64_t)gridDim.x * blockDim.x)
        rq_job_item(j, i);
}

int cuda_repack_ensure(cuda_repack *const *list, int n, uint64_t *seen_generation, gpuStream_t s, char *err,
                       size_t errlen) {
    const uint64_t gen = g_generation.load();
    if (*seen_generation == gen) return PYG_OK; /* nothing went stale since this plan last checked */
    std::lock_guard<std::mutex> lk(g_mu);
    int queued = 0;
    for (int i = 0; i < n; i++) {
        cuda_repack *r = list[i];
        if (!r || r->ready.load()) continue;
        const rq_job j = rq_job_make(r->src, r->nb1, r->w);
        const int64_t items = j.units + j.groups;
        const unsigned blocks = (unsigned)((items + 255) / 256 < 65535 ? (items + 255) / 256 : 65535);
        k_repack<<<blocks, 256, 0, s>>>(j);
        gpuError_t e = gpuGetLastError();
        if (e != gpuSuccess) {
            snprintf(err, errlen, "repack: kernel launch failed: %s", gpuGetErrorString(e));
            return PYG_ERR_DEVICE;
        }
        queued = 1;
    }
    if (queued) {
        gpuError_t e = gpuStreamSynchronize(s);
        if (e != gpuSuccess) {
            gpuGetLastError();
            snprintf(err, errlen, "repack: %s", gpuGetErrorString(e));
            return PYG_ERR_DEVICE;
        }
        for (int i = 0; i < n; i++)
            if (list[i]) list[i]->ready.store(1);
    }
    *seen_generation = gen;
    return PYG_OK;
}
