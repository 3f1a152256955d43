/* plugins/cpu/compute.c — which nodes the CPU kernels take (cpu_supports_op), plans (kernel per
 * node, scratch sizes) and running a plan on the shared persistent thread pool. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "cpu_compute.h"
#include "cpu_internal.h"
#include "quants.h"
#include "repack.h"

/* ------------------------------------------------------------------ supports_op */

static int known(const pyg_tensor *t) {
    return t && pyg_type_get_traits(t->type) != NULL;
}
static int is_float(const pyg_tensor *t) {
    return t && cpu_is_float_type(t->type);
}
static int same_shape(const pyg_tensor *a, const pyg_tensor *b) {
    for (int i = 0; i < PYG_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return 0;
    return 1;
}
static int shape_ok(const pyg_tensor *t) {
    for (int i = 0; i < PYG_MAX_DIMS; i++)
        if (t->ne[i] < 1) return 0;
    return 1;
}
/* block types: ne0 a multiple of the block, rows contiguous */
static int rows_ok(const pyg_tensor *t) {
    const pyg_type_traits *tr = pyg_type_get_traits(t->type);
    if (!tr) return 0;
    if (tr->block_size == 1) return 1;
    return t->ne[0] % tr->block_size == 0 && t->nb[0] == (uint64_t)tr->type_size;
}
/* readable as f32 rows by cpu_load_row */
static int readable(const pyg_tensor *t) {
    if (is_float(t)) return 1;
    const cpu_type_funcs *tf = known(t) ? cpu_type_funcs_get(t->type) : NULL;
    return tf && tf->to_f32 && rows_ok(t);
}
/* writable from f32 rows by cpu_store_row */
static int writable(const pyg_tensor *t) {
    if (is_float(t)) return 1;
    const cpu_type_funcs *tf = known(t) ? cpu_type_funcs_get(t->type) : NULL;
    return tf && tf->from_f32 && rows_ok(t);
}
static int is_index(const pyg_tensor *t) {
    return t && (t->type == PYG_TYPE_I32 || t->type == PYG_TYPE_I64);
}

static int supports_copy(const pyg_tensor *node, const pyg_tensor *src) {
    if (!known(src) || !known(node)) return 0;
    if (pyg_tensor_nelements(src) != pyg_tensor_nelements(node)) return 0;
    const pyg_type_traits *ts = pyg_type_get_traits(src->type), *td = pyg_type_get_traits(node->type);
    const int same_ne0 = src->ne[0] == node->ne[0];
    if (src->type == node->type) {
        if (td->block_size == 1) return 1; /* raw element copies, any strides */
        return same_ne0 && rows_ok(src) && rows_ok(node);
    }
    if (!writable(node)) return 0;
    if (same_ne0) return readable(src);
    return ts->block_size == 1 && is_float(src); /* element-wise gather */
}

int cpu_supports_op(const pyg_tensor *node) {
    if (!node || !known(node) || !shape_ok(node)) return 0;
    const pyg_tensor *s0 = node->src[0], *s1 = node->src[1], *s2 = node->src[2], *s3 = node->src[3];
    for (int i = 0; i < PYG_MAX_SRC; i++)
        if (node->src[i] && (!known(node->src[i]) || !shape_ok(node->src[i]))) return 0;
    switch (node->op) {
    case PYG_OP_NONE:
    case PYG_OP_VIEW:
    case PYG_OP_RESHAPE:
    case PYG_OP_PERMUTE:
    case PYG_OP_TRANSPOSE:
        return 1;
    case PYG_OP_CPY:
        return s0 && s1 && node->type == s1->type && same_shape(node, s1) && supports_copy(node, s0);
    case PYG_OP_CONT:
        return s0 && supports_copy(node, s0);
    case PYG_OP_ADD:
    case PYG_OP_MUL:
        if (!is_float(s0) || !is_float(s1) || !is_float(node) || !same_shape(node, s0)) return 0;
        for (int i = 0; i < PYG_MAX_DIMS; i++)
            if (s0->ne[i] % s1->ne[i] != 0) return 0;
        return 1;
    case PYG_OP_SCALE:
    case PYG_OP_SILU:
    case PYG_OP_GELU:
    case PYG_OP_RMS_NORM:
    case PYG_OP_NORM:
        return is_float(s0) && is_float(node) && same_shape(node, s0);
    case PYG_OP_SWIGLU:
        if (!is_float(s0) || !is_float(node)) return 0;
        if (s1) return is_float(s1) && same_shape(node, s0) && same_shape(node, s1);
        return s0->ne[0] == 2 * node->ne[0] && s0->ne[1] == node->ne[1] && s0->ne[2] == node->ne[2] &&
               s0->ne[3] == node->ne[3];
    case PYG_OP_SOFT_MAX:
        if (!is_float(s0) || !is_float(node) || !same_shape(node, s0)) return 0;
        if (s1) {
            if (s1->type != PYG_TYPE_F32 && s1->type != PYG_TYPE_F16) return 0;
            if (s1->ne[0] != s0->ne[0] || s1->ne[1] < s0->ne[1]) return 0;
            if (s0->ne[2] % s1->ne[2] != 0 || s0->ne[3] % s1->ne[3] != 0) return 0;
        }
        return 1;
    case PYG_OP_ROPE: {
        const int n_dims = node->op_params[0], mode = node->op_params[1];
        if (!is_float(s0) || !is_float(node) || !same_shape(node, s0)) return 0;
        if (!s1 || s1->type != PYG_TYPE_I32 || s1->ne[0] < s0->ne[2]) return 0;
        if (mode != PYG_ROPE_NORMAL && mode != PYG_ROPE_NEOX) return 0;
        if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > s0->ne[0]) return 0;
        if (s2 && (s2->type != PYG_TYPE_F32 || s2->ne[0] < n_dims / 2)) return 0;
        const float base = pyg_op_param_f32(node->op_params, 3), fs = pyg_op_param_f32(node->op_params, 4);
        return base > 0.0f && fs > 0.0f;
    }
    case PYG_OP_ARGMAX:
        return is_float(s0) && node->type == PYG_TYPE_I32 && pyg_tensor_nelements(node) == pyg_tensor_nrows(s0);
    case PYG_OP_MUL_MAT: {
        if (!s0 || !is_float(s1) || node->type != PYG_TYPE_F32 || node->nb[0] != 4) return 0;
        const cpu_type_funcs *tf = cpu_type_funcs_get(s0->type);
        if (!tf || !tf->to_f32) return 0;
        if (!rows_ok(s0)) return 0;
        if (s0->ne[0] != s1->ne[0]) return 0;
        if (node->ne[0] != s0->ne[1] || node->ne[1] != s1->ne[1] || node->ne[2] != s1->ne[2] ||
            node->ne[3] != s1->ne[3])
            return 0;
        return s1->ne[2] % s0->ne[2] == 0 && s1->ne[3] % s0->ne[3] == 0;
    }
    case PYG_OP_GET_ROWS:
        if (!s0 || !readable(s0) || !is_index(s1) || !writable(node)) return 0;
        return node->ne[0] == s0->ne[0] && node->ne[1] == s1->ne[0] && node->ne[2] == s1->ne[1] &&
               node->ne[3] == s1->ne[2] && s1->ne[3] == 1;
    case PYG_OP_SET_ROWS:
        if (!s0 || !readable(s1) || !is_index(s2) || !writable(node)) return 0;
        if (node->type != s0->type || !same_shape(node, s0)) return 0;
        return s1->ne[0] == node->ne[0] && s2->ne[0] == s1->ne[1] && s1->ne[2] % s2->ne[1] == 0 &&
               s1->ne[3] % s2->ne[2] == 0 && s2->ne[3] == 1 && node->ne[2] == s1->ne[2] &&
               node->ne[3] == s1->ne[3];
    case PYG_OP_FLASH_ATTN_EXT: {
        if (!is_float(s0) || !is_float(s1) || !is_float(s2) || node->type != PYG_TYPE_F32) return 0;
        const int64_t D = s0->ne[0], n_q = s0->ne[1], H = s0->ne[2], B = s0->ne[3];
        const int64_t n_kv = s1->ne[1], H_kv = s1->ne[2];
        if (s1->ne[0] != D || s2->ne[1] != n_kv || s2->ne[2] != H_kv || H % H_kv != 0) return 0;
        if (B % s1->ne[3] != 0 || B % s2->ne[3] != 0) return 0;
        if (node->ne[0] != s2->ne[0] || node->ne[1] != H || node->ne[2] != n_q || node->ne[3] != B) return 0;
        if (s3) {
            if (s3->type != PYG_TYPE_F32 && s3->type != PYG_TYPE_F16) return 0;
            if (s3->ne[0] != n_kv || s3->ne[1] < n_q || H % s3->ne[2] != 0 || B % s3->ne[3] != 0) return 0;
        }
        return 1;
    }
    default:
        return 0;
    }
}

/* ------------------------------------------------------------------ plans */

static cpu_op_fn kernel_of(int32_t op) {
    switch (op) {
    case PYG_OP_CPY:
    case PYG_OP_CONT: return cpu_op_cpy;
    case PYG_OP_ADD:
    case PYG_OP_MUL: return cpu_op_binary;
    case PYG_OP_SCALE:
    case PYG_OP_SILU:
    case PYG_OP_GELU: return cpu_op_unary;
    case PYG_OP_SWIGLU: return cpu_op_swiglu;
    case PYG_OP_RMS_NORM:
    case PYG_OP_NORM: return cpu_op_norm;
    case PYG_OP_SOFT_MAX: return cpu_op_soft_max;
    case PYG_OP_ROPE: return cpu_op_rope;
    case PYG_OP_ARGMAX: return cpu_op_argmax;
    case PYG_OP_MUL_MAT: return cpu_op_mul_mat;
    case PYG_OP_GET_ROWS: return cpu_op_get_rows;
    case PYG_OP_SET_ROWS: return cpu_op_set_rows;
    case PYG_OP_FLASH_ATTN_EXT: return cpu_op_flash_attn;
    default: return NULL;
    }
}

struct cpu_plan {
    const pyg_graph *graph;
    cpu_options opt;
    int simd;
    int isa;              /* QUANT_ISA_* of the quantized mul_mat kernels */
    int n;                /* nodes that run */
    int32_t *index;       /* their indices in graph->nodes */
    int64_t *counters;    /* one work counter per node, zeroed before each compute */
    cpu_repack **rp;      /* per node: the repacked weight it holds (NULL: none) */
    const void **rpdata;  /* per node: its data, checked once when taken */
    cpu_op_fn *fn;
    size_t per_thread;    /* bytes of scratch per thread (64-multiple) */
    size_t shared;        /* bytes of shared scratch (64-multiple) */
    char *work;           /* per_thread * n_threads + shared bytes, 64-aligned */
    size_t work_size;
    /* state of one compute */
    cpu_barrier barrier;
    volatile int error;
    volatile int error_node;
};

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static void node_scratch(const pyg_tensor *node, int simd, int reference, size_t *pt, size_t *sh) {
    int64_t m = node->ne[0];
    for (int i = 0; i < PYG_MAX_SRC; i++)
        if (node->src[i] && node->src[i]->ne[0] > m) m = node->src[i]->ne[0];
    /* four row buffers for every row op (elementwise, norms, softmax, rope cos/sin) */
    *pt = (size_t)(4 * ((m + 15) & ~(int64_t)15) + 64) * sizeof(float);
    *sh = 0;
    if (node->op == PYG_OP_MUL_MAT) {
        size_t t = cpu_mul_mat_thread_size(node, simd, reference);
        if (t > *pt) *pt = t;
        *sh = cpu_mul_mat_shared_size(node, simd, reference);
    } else if (node->op == PYG_OP_FLASH_ATTN_EXT) {
        size_t t = cpu_flash_attn_thread_size(node);
        if (t > *pt) *pt = t;
    }
    *pt = round64(*pt);
    *sh = round64(*sh);
}

static int plan_size_scratch(cpu_plan *p, char *err, size_t errlen) {
    size_t pt = 0, sh = 0;
    for (int i = 0; i < p->n; i++) {
        size_t a, b;
        node_scratch(p->graph->nodes[p->index[i]], p->simd, p->opt.kernels == CPU_KERNELS_REFERENCE, &a, &b);
        if (a > pt) pt = a;
        if (b > sh) sh = b;
    }
    size_t need = pt * (size_t)p->opt.n_threads + sh;
    if (need > p->work_size || need < p->work_size / 4) {
        free(p->work);
        p->work = NULL;
        p->work_size = 0;
        if (need) {
            void *w = NULL;
            if (posix_memalign(&w, CPU_ALIGN, need) != 0 || !w) {
                snprintf(err, errlen, "cpu: cannot allocate %zu bytes of scratch for the graph", need);
                return PYG_ERR_OUT_OF_MEMORY;
            }
            p->work = w;
            p->work_size = need;
        }
    }
    p->per_thread = pt;
    p->shared = sh;
    return 0;
}

int cpu_kernels_available(void) {
    const int best = quant_isa_best();
    return best == QUANT_ISA_AVX512 ? CPU_KERNELS_AVX512 : best == QUANT_ISA_AVX2 ? CPU_KERNELS_AVX2 : CPU_KERNELS_REFERENCE;
}

/* the quantized kernels' level (QUANT_ISA_*) for these options */
static int plan_isa(const cpu_options *opt) {
    const int best = quant_isa_best();
    switch (opt->kernels) {
    case CPU_KERNELS_REFERENCE: return QUANT_ISA_REFERENCE;
    case CPU_KERNELS_AVX2: return best < QUANT_ISA_AVX2 ? best : QUANT_ISA_AVX2;
    default: return best; /* auto, avx512 (plugin.c refuses avx512 where the CPU lacks it) */
    }
}

int cpu_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}

int cpu_plan_set_options(cpu_plan *plan, const cpu_options *opt, char *err, size_t errlen) {
    if (!plan || !opt || opt->n_threads < 1) {
        snprintf(err, errlen, "cpu: invalid plan options");
        return PYG_ERR_INVALID_ARGUMENT;
    }
    plan->opt = *opt;
    plan->simd = opt->kernels != CPU_KERNELS_REFERENCE && cpu_have_avx2();
    plan->isa = plan_isa(opt);
    return plan_size_scratch(plan, err, errlen);
}

int cpu_plan_create(const pyg_graph *graph, const cpu_options *opt, cpu_plan **out, char *err, size_t errlen) {
    if (!graph || !opt || !out || graph->n_nodes < 0 || (graph->n_nodes > 0 && !graph->nodes) ||
        opt->n_threads < 1) {
        snprintf(err, errlen, "cpu: graph_plan_create: invalid graph or options");
        return PYG_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    for (int i = 0; i < graph->n_nodes; i++) {
        const pyg_tensor *t = graph->nodes[i];
        if (!t) {
            snprintf(err, errlen, "cpu: graph node %d is NULL", i);
            return PYG_ERR_INVALID_ARGUMENT;
        }
        if (t->op == PYG_OP_NONE || pyg_op_is_view(t->op)) continue;
        if (!kernel_of(t->op) || !cpu_supports_op(t)) {
            const pyg_type_traits *tr = pyg_type_get_traits(t->type);
            const pyg_type_traits *t0 = t->src[0] ? pyg_type_get_traits(t->src[0]->type) : NULL;
            snprintf(err, errlen,
                     "cpu: node %d '%.*s' (op %s, type %s, src0 type %s, ne %lld,%lld,%lld,%lld) is not supported",
                     i, PYG_MAX_NAME, t->name, pyg_op_name(t->op), tr ? tr->name : "unknown",
                     t->src[0] ? (t0 ? t0->name : "unknown") : "none", (long long)t->ne[0],
                     (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
            return PYG_ERR_UNSUPPORTED;
        }
    }
    cpu_plan *p = calloc(1, sizeof *p);
    if (!p) goto oom;
    p->graph = graph;
    p->opt = *opt;
    p->simd = opt->kernels != CPU_KERNELS_REFERENCE && cpu_have_avx2();
    p->isa = plan_isa(opt);
    p->index = malloc(sizeof(int32_t) * (size_t)(graph->n_nodes + 1));
    p->fn = malloc(sizeof(cpu_op_fn) * (size_t)(graph->n_nodes + 1));
    p->counters = calloc((size_t)(graph->n_nodes + 1), sizeof(int64_t));
    p->rp = calloc((size_t)(graph->n_nodes + 1), sizeof(cpu_repack *));
    p->rpdata = calloc((size_t)(graph->n_nodes + 1), sizeof(void *));
    if (!p->index || !p->fn || !p->counters || !p->rp || !p->rpdata) goto oom;
    for (int i = 0; i < graph->n_nodes; i++) {
        const pyg_tensor *t = graph->nodes[i];
        if (t->op == PYG_OP_NONE || pyg_op_is_view(t->op)) continue;
        p->index[p->n] = i;
        p->fn[p->n] = kernel_of(t->op);
        p->n++;
    }
    int rc = plan_size_scratch(p, err, errlen);
    if (rc) {
        cpu_plan_destroy(p);
        return rc;
    }
    *out = p;
    return 0;
oom:
    cpu_plan_destroy(p);
    snprintf(err, errlen, "cpu: out of memory creating a plan");
    return PYG_ERR_OUT_OF_MEMORY;
}

void cpu_plan_destroy(cpu_plan *plan) {
    if (!plan) return;
    free(plan->index);
    free(plan->fn);
    free(plan->counters);
    if (plan->rp)
        for (int i = 0; i < plan->n; i++) cpu_repack_release(plan->rp[i]);
    free(plan->rp);
    free(plan->rpdata);
    free(plan->work);
    free(plan);
}

/* one pool per process, created on first use */
static cpu_pool *g_pool;
static pthread_once_t g_pool_once = PTHREAD_ONCE_INIT;
static void pool_init(void) { g_pool = cpu_pool_create(); }

static void run_nodes(void *arg, int ith, int nth) {
    cpu_plan *p = arg;
    cpu_ctx ctx = {
        .ith = ith,
        .nth = nth,
        .reference = p->opt.kernels == CPU_KERNELS_REFERENCE,
        .simd = p->simd,
        .isa = p->isa,
        .wdata = p->work + p->per_thread * (size_t)ith,
        .wsize = p->per_thread,
        .shared = p->work + p->per_thread * (size_t)p->opt.n_threads,
        .shared_size = p->shared,
        .barrier = &p->barrier,
        .error = &p->error,
        .error_node = &p->error_node,
    };
    for (int i = 0; i < p->n; i++) {
        ctx.node_index = p->index[i];
        ctx.counter = &p->counters[i];
        ctx.repack = p->rpdata[i];
        p->fn[i](p->graph->nodes[p->index[i]], &ctx);
        cpu_barrier_wait(&p->barrier);
    }
}

static int check_data(const pyg_tensor *t) {
    return t->data != NULL;
}

int cpu_plan_compute(cpu_plan *plan, char *err, size_t errlen) {
    if (!plan) {
        snprintf(err, errlen, "cpu: NULL plan");
        return PYG_ERR_INVALID_ARGUMENT;
    }
    const pyg_graph *g = plan->graph;
    for (int i = 0; i < plan->n; i++) {
        const pyg_tensor *t = g->nodes[plan->index[i]];
        int ok = check_data(t);
        for (int s = 0; s < PYG_MAX_SRC && ok; s++)
            if (t->src[s] && !check_data(t->src[s])) ok = 0;
        if (!ok) {
            snprintf(err, errlen, "cpu: node %d '%.*s' (%s) or one of its sources has no data (unallocated)",
                     plan->index[i], PYG_MAX_NAME, t->name, pyg_op_name(t->op));
            return PYG_ERR_INVALID_ARGUMENT;
        }
    }
    if (plan->n == 0) return 0;
    /* repacked weights: taken (and filled or checked) at the first compute that uses them */
    for (int i = 0; i < plan->n; i++) {
        const pyg_tensor *t = g->nodes[plan->index[i]];
        if (t->op != PYG_OP_MUL_MAT || plan->opt.no_repack || !cpu_repack_eligible(t, plan->isa)) {
            plan->rpdata[i] = NULL;
            continue;
        }
        if (!plan->rp[i]) {
            plan->rp[i] = cpu_repack_acquire(t->src[0]);
            plan->rpdata[i] = NULL;
        }
        if (plan->rp[i] && !plan->rpdata[i]) plan->rpdata[i] = cpu_repack_get(plan->rp[i], t->src[0]);
    }
    pthread_once(&g_pool_once, pool_init);
    int nth = plan->opt.n_threads;
    plan->error = 0;
    plan->error_node = -1;
    memset(plan->counters, 0, sizeof(int64_t) * (size_t)plan->n);
    cpu_barrier_init(&plan->barrier, nth);
    if (!g_pool || cpu_pool_run(g_pool, nth, run_nodes, plan) != 0) {
        /* no worker threads to be had: run on the caller alone (scratch is per thread, so fine) */
        cpu_barrier_init(&plan->barrier, 1);
        run_nodes(plan, 0, 1);
    }
    if (plan->error) {
        const pyg_tensor *t = plan->error_node >= 0 ? g->nodes[plan->error_node] : NULL;
        snprintf(err, errlen, "cpu: node %d '%.*s' (%s): row index out of range", plan->error_node,
                 PYG_MAX_NAME, t ? t->name : "?", t ? pyg_op_name(t->op) : "?");
        return plan->error;
    }
    return 0;
}
