/* plugins/cpu/repack.c — weights kept a second time in a kernel-friendly layout.
 *
 * A q4_0 or q4_K weight (a leaf flagged WEIGHT: "constant data uploaded once") that a MUL_MAT
 * reads is repacked once into 8-row interleaved blocks (quants.h, QUANT_Q4_0X8_BLOCK,
 * QUANT_Q4_KX8_BLOCK), which the AVX2
 * mat-vec and GEMM kernels read without horizontal sums. The copies live in one process-wide
 * cache keyed by the weight's address, type and shape, shared by every plan that uses the
 * weight (a model's prefill and decode graphs) and freed when the last plan lets go.
 *
 * The host promises weights do not change, but a cheap check guards against memory reused for a
 * different weight at the same address: a hash of 64 words sampled across the tensor (first and
 * last included) is compared when a plan first takes the copy, and a mismatch repacks. Cost: the copy
 * doubles the memory of those weights; the device option repack=0 turns it off.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "quants.h"
#include "repack.h"

struct cpu_repack {
    struct cpu_repack *next;
    const void *src;      /* the weight's data */
    int32_t type;
    int64_t ne0, ne1, nb1;
    uint64_t check;       /* sample hash of src when `data` was filled */
    int refs;
    int ready;
    void *data;           /* ne1 / 8 groups of ne0 / 32 blocks */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cpu_repack *g_list;

int cpu_repack_eligible(const pyg_tensor *node, int isa) {
#ifdef QUANT_HAVE_X86
    const pyg_tensor *w = node->src[0];
    /* the 8-row kernels are AVX2 code; on AVX-512 CPUs they still beat the AVX-512 row kernels
     * (measured on a Sapphire Rapids host, 2 threads: q4_0 26 vs 8 GB/s, q4_K 25 vs 12 GB/s) */
    if (isa < QUANT_ISA_AVX2 || node->op != PYG_OP_MUL_MAT || !w) return 0;
    if (w->op != PYG_OP_NONE || !(w->flags & PYG_TENSOR_FLAG_WEIGHT)) return 0;
    if (w->type != PYG_TYPE_Q4_0 && w->type != PYG_TYPE_Q4_K) return 0;
    const pyg_type_traits *tr = pyg_type_get_traits(w->type);
    if (w->ne[2] != 1 || w->ne[3] != 1 || w->ne[1] % 8 != 0 || w->ne[0] % tr->block_size != 0) return 0;
    return w->nb[0] == (uint64_t)tr->type_size && w->nb[1] >= (uint64_t)(w->ne[0] / tr->block_size * tr->type_size);
#else
    (void)node, (void)isa;
    return 0;
#endif
}

static uint64_t sample_hash(const pyg_tensor *w) {
    const size_t row = pyg_type_row_size(w->type, w->ne[0]);
    const size_t span = (size_t)(w->ne[1] - 1) * (size_t)w->nb[1] + row;
    const unsigned char *p = w->data;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ span;
    for (int i = 0; i < 64; i++) {
        uint64_t v = 0;
        size_t off = span >= 8 ? (span - 8) / 63 * (size_t)i : 0;
        if (off + 8 > span) off = span >= 8 ? span - 8 : 0;
        memcpy(&v, p + off, span >= 8 ? 8 : 0);
        h = (h ^ v) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

cpu_repack *cpu_repack_acquire(const pyg_tensor *w) {
    pthread_mutex_lock(&g_lock);
    cpu_repack *r = g_list;
    for (; r; r = r->next)
        if (r->src == w->data && r->type == w->type && r->ne0 == w->ne[0] && r->ne1 == w->ne[1] &&
            r->nb1 == (int64_t)w->nb[1])
            break;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (r) {
            r->src = w->data;
            r->type = w->type;
            r->ne0 = w->ne[0];
            r->ne1 = w->ne[1];
            r->nb1 = (int64_t)w->nb[1];
            r->next = g_list;
            g_list = r;
        }
    }
    if (r) r->refs++;
    pthread_mutex_unlock(&g_lock);
    return r;
}

const void *cpu_repack_get(cpu_repack *r, const pyg_tensor *w) {
#ifdef QUANT_HAVE_X86
    const void *out = NULL;
    pthread_mutex_lock(&g_lock);
    const uint64_t h = sample_hash(w);
    if (r->ready && r->check == h) {
        out = r->data;
    } else {
        const int q4k = r->type == PYG_TYPE_Q4_K;
        const int64_t nb = r->ne0 / (q4k ? QK_SUPER : QK_32), groups = r->ne1 / 8;
        const size_t gb = q4k ? QUANT_Q4_KX8_BLOCK : QUANT_Q4_0X8_BLOCK;
        if (!r->data) {
            void *d = NULL;
            if (posix_memalign(&d, CPU_ALIGN, (size_t)(groups * nb) * gb) == 0) r->data = d;
        }
        if (r->data) {
            for (int64_t g = 0; g < groups; g++) {
                const char *src = (const char *)w->data + (size_t)(8 * g) * (size_t)r->nb1;
                char *dst = (char *)r->data + (size_t)(g * nb) * gb;
                if (q4k)
                    quant_q4_K_repack8_avx2(src, (size_t)r->nb1, nb, dst);
                else
                    quant_q4_0_repack8_avx2(src, (size_t)r->nb1, nb, dst);
            }
            r->check = h;
            r->ready = 1;
            out = r->data;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return out;
#else
    (void)r, (void)w;
    return NULL;
#endif
}

void cpu_repack_release(cpu_repack *r) {
    if (!r) return;
    pthread_mutex_lock(&g_lock);
    if (--r->refs == 0) {
        cpu_repack **pp = &g_list;
        while (*pp && *pp != r) pp = &(*pp)->next;
        if (*pp) *pp = r->next;
        free(r->data);
        free(r);
    }
    pthread_mutex_unlock(&g_lock);
}
