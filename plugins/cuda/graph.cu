/* plugins/cuda/graph.cu — graph plans: validation, scratch memory, launching the nodes on a stream,
 * and CUDA graphs (capture on the 2nd compute of a plan, replay from the 3rd on; the host
 * guarantees that a plan's tensors keep their addresses, so a captured graph stays valid).
 * The device option graphs=0 turns capture off. A plan keeps a copy of its device's options
 * (options.h), bound around everything it does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.cuh"
#include "plugin_internal.h"
#include "repack.h"

/* Per launch (plan->quant): writes the next launch's int8 activations (Q_OUT) / reads its own from the
 * launch before (Q_IN), in region 1 instead of 0 (Q_OUT1 / Q_IN1: a launch that does both writes the
 * other region than it reads); Q_GLU: a gate/up mat-vec pair and its swiglu as one launch; Q_QKV: a
 * layer's q/k/v mat-vecs, ropes and K/V cache writes as one launch (qkv_rope.cu). */
enum { Q_OUT = 1, Q_IN = 2, Q_OUT1 = 4, Q_IN1 = 8, Q_GLU = 16, Q_QKV = 32 };

struct pyg_graph_plan {
    pyg_device *dev;
    cuda_options opts;            /* the device's options when the plan was created */
    const pyg_graph *graph;
    int n_nodes;                  /* nodes that run a kernel */
    const pyg_tensor **nodes;
    int *group;                   /* per node: nodes launched together from here (0: done by an earlier one) */
    int *quant;                   /* per launch: Q_* bits below */
    size_t quant_off;             /* where in the scratch those activations lie (region 0) */
    size_t quant_region;          /* bytes of one region; region 1 follows region 0 */
    cuda_repack **rp;             /* per node: its repacked weights (repack.cu), or NULL; NULL: none at all */
    uint64_t rp_generation;       /* cuda_repack_ensure's cache: nothing went stale since */
    size_t sync_off, sync_bytes;  /* the zeroed words past everything else (op_ctx.sync_off) */
    void *scratch;
    size_t scratch_size;
    int n_computes;
    int graphs_failed;            /* capture failed once: launch directly from then on */
    gpuGraphExec_t exec;          /* captured graph, NULL until the 2nd compute */
};

int check_launch(op_ctx *c, const char *what) {
    gpuError_t e = gpuGetLastError();
    if (e == gpuSuccess) return PYG_OK;
    snprintf(c->err, c->errlen, "%s: kernel launch failed: %s", what, gpuGetErrorString(e));
    return PYG_ERR_DEVICE;
}

static int type_known(int32_t type) { return pyg_type_get_traits(type) != NULL; }

int32_t pyg_cuda_supports_op(pyg_device *dev, const pyg_tensor *node) {
    if (!node || !type_known(node->type)) return 0;
    cuda_options opts;
    pyg_cuda_device_options(dev, &opts);
    cuda_opts_scope bound(&opts);
    for (int i = 0; i < 4; i++)
        if (node->ne[i] < 1) return 0;
    if (pyg_tensor_nrows(node) > 0x7fffffffLL) return 0; /* rows go into one grid dimension */
    for (int i = 0; i < PYG_MAX_SRC; i++) {
        const pyg_tensor *s = node->src[i];
        if (s && (!type_known(s->type) || pyg_tensor_nrows(s) > 0x7fffffffLL)) return 0;
    }
    switch (node->op) {
    case PYG_OP_NONE: case PYG_OP_VIEW: case PYG_OP_RESHAPE: case PYG_OP_PERMUTE: case PYG_OP_TRANSPOSE:
        return 1; /* nothing runs */
    case PYG_OP_CPY: case PYG_OP_CONT: case PYG_OP_ADD: case PYG_OP_MUL: case PYG_OP_SCALE:
    case PYG_OP_SILU: case PYG_OP_GELU: case PYG_OP_SWIGLU: case PYG_OP_GET_ROWS: case PYG_OP_SET_ROWS:
    case PYG_OP_ARGMAX:
        return basic_supports(node);
    case PYG_OP_RMS_NORM: case PYG_OP_NORM: case PYG_OP_SOFT_MAX: case PYG_OP_ROPE:
        return rows_supports(node);
    case PYG_OP_MUL_MAT:
        return mul_mat_supports(node);
    case PYG_OP_FLASH_ATTN_EXT:
        return flash_attn_supports(node);
    default:
        return 0;
    }
}

static int launch_node(const pyg_tensor *node, op_ctx *c) {
    switch (node->op) {
    case PYG_OP_RMS_NORM: case PYG_OP_NORM: case PYG_OP_SOFT_MAX: case PYG_OP_ROPE:
        return rows_launch(node, c);
    case PYG_OP_MUL_MAT:
        return mul_mat_launch(node, c);
    case PYG_OP_FLASH_ATTN_EXT:
        return flash_attn_launch(node, c);
    default:
        return basic_launch(node, c);
    }
}

static size_t node_scratch(const pyg_tensor *node, const pyg_device *dev, int repacked) {
    if (node->op == PYG_OP_FLASH_ATTN_EXT) return flash_attn_scratch_bytes(node, dev->n_sm);
    if (node->op == PYG_OP_MUL_MAT) return mul_mat_scratch_bytes(node, repacked, dev->cc_major * 10 + dev->cc_minor);
    return 0;
}

void pyg_cuda_plan_destroy(pyg_graph_plan *p) {
    if (!p) return;
    if (gpuSetDevice(p->dev->index) == gpuSuccess) {
        if (p->exec) gpuGraphExecDestroy(p->exec);
        if (p->scratch) gpuFree(p->scratch);
    }
    gpuGetLastError();
    if (p->rp)
        for (int i = 0; i < p->n_nodes; i++) cuda_repack_release(p->rp[i]);
    free(p->rp);
    free(p->nodes);
    free(p->group);
    free(p->quant);
    free(p);
}

/* Can x and y run in one launch, in any interleaving? Neither reads or writes bytes the other
 * writes (the planner may place y's output on an input that x reads for the last time). Each
 * node's output is its data range (a set_rows node's data is the cache it writes). */
static int independent(const pyg_tensor *x, const pyg_tensor *y) {
    if (!tensors_disjoint(x, y)) return 0;
    for (int s = 0; s < PYG_MAX_SRC; s++) {
        if (y->src[s] && y->src[s]->data && !tensors_disjoint(x, y->src[s])) return 0;
        if (x->src[s] && x->src[s]->data && !tensors_disjoint(y, x->src[s])) return 0;
    }
    return 1;
}

pyg_error *pyg_cuda_plan_create(pyg_device *dev, const pyg_graph *graph, pyg_graph_plan **out) {
    if (!dev || !graph || !out) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: NULL argument");
    if (graph->n_nodes < 0 || (graph->n_nodes > 0 && !graph->nodes))
        return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: bad node list");
    pyg_graph_plan *p = (pyg_graph_plan *)calloc(1, sizeof *p);
    if (!p) return pyg_cuda_error(PYG_ERR_OUT_OF_MEMORY, "graph_plan_create: out of host memory");
    p->dev = dev;
    p->graph = graph;
    pyg_cuda_device_options(dev, &p->opts);
    cuda_opts_scope bound(&p->opts);
    p->nodes = (const pyg_tensor **)calloc((size_t)graph->n_nodes + 1, sizeof(pyg_tensor *));
    p->group = (int *)calloc((size_t)graph->n_nodes + 1, sizeof(int));
    p->quant = (int *)calloc((size_t)graph->n_nodes + 1, sizeof(int));
    if (!p->nodes || !p->group || !p->quant) {
        free(p->nodes);
        free(p->group);
        free(p->quant);
        free(p);
        return pyg_cuda_error(PYG_ERR_OUT_OF_MEMORY, "graph_plan_create: out of host memory");
    }
    size_t scratch = 0;
    for (int i = 0; i < graph->n_nodes; i++) {
        const pyg_tensor *n = graph->nodes[i];
        if (!n) { pyg_cuda_plan_destroy(p); return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "node %d is NULL", i); }
        if (n->op == PYG_OP_NONE || pyg_op_is_view(n->op)) continue;
        if (!pyg_cuda_supports_op(dev, n)) {
            pyg_error *e = pyg_cuda_error(PYG_ERR_UNSUPPORTED, "node %d '%s': op %s (type %s) is not supported", i,
                                          n->name, pyg_op_name(n->op),
                                          pyg_type_get_traits(n->type) ? pyg_type_get_traits(n->type)->name : "?");
            pyg_cuda_plan_destroy(p);
            return e;
        }
        if (!n->data) {
            pyg_cuda_plan_destroy(p);
            return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "node %d '%s' has no data address", i, n->name);
        }
        for (int s = 0; s < PYG_MAX_SRC; s++) {
            if (n->src[s] && !n->src[s]->data) {
                pyg_cuda_plan_destroy(p);
                return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "node %d '%s': operand %d has no data address", i,
                                      n->name, s);
            }
        }
        cuda_repack *rp = NULL;
        if (p->opts.repack && n->op == PYG_OP_MUL_MAT && cuda_repack_eligible(n)) {
            if (!p->rp) p->rp = (cuda_repack **)calloc((size_t)graph->n_nodes + 1, sizeof(cuda_repack *));
            if (!p->rp) {
                pyg_cuda_plan_destroy(p);
                return pyg_cuda_error(PYG_ERR_OUT_OF_MEMORY, "graph_plan_create: out of host memory");
            }
            rp = p->rp[p->n_nodes] = cuda_repack_acquire(dev, n); /* NULL: ggml's blocks for this one */
        }
        size_t need = node_scratch(n, dev, rp != NULL);
        if (need > scratch) scratch = need;
        if (n->op == PYG_OP_FLASH_ATTN_EXT) {
            const size_t sb = flash_attn_sync_bytes(n, dev->n_sm);
            if (sb > p->sync_bytes) p->sync_bytes = sb;
        }
        p->nodes[p->n_nodes++] = n;
    }
    /* adjacent decode mat-vecs over the same activation column: one launch (mul_mat.cu) */
    /* and rms_norm followed by mul(norm, weight row), with the add before it when the norm reads
     * the sum: one kernel (ops_rows.cu) */
    for (int i = 0; i < p->n_nodes;) {
        int g = 1;
        if (i + 2 < p->n_nodes && rows_can_fuse_add(p->nodes[i], p->nodes[i + 1], p->nodes[i + 2])) g = 3;
        else if (i + 1 < p->n_nodes && rows_can_fuse_mul(p->nodes[i], p->nodes[i + 1])) g = 2;
        else if (i + 2 < p->n_nodes && rows_can_rope_store(p->nodes[i], p->nodes[i + 1]) &&
                 basic_can_pair_set_rows(p->nodes[i + 1], p->nodes[i + 2]) && independent(p->nodes[i], p->nodes[i + 2]) &&
                 independent(p->nodes[i + 1], p->nodes[i + 2]) && tensors_disjoint(p->nodes[i + 1], p->nodes[i]) &&
                 tensors_disjoint(p->nodes[i + 1], p->nodes[i]->src[0]) && tensors_disjoint(p->nodes[i + 1], p->nodes[i]->src[1]))
            g = 3;
        else if (i + 1 < p->n_nodes && independent(p->nodes[i], p->nodes[i + 1]) &&
                 (rows_can_pair_rope(p->nodes[i], p->nodes[i + 1]) || basic_can_pair_set_rows(p->nodes[i], p->nodes[i + 1])))
            g = 2;
        else if (qkv_rope_can(p->nodes, p->n_nodes, i, p->rp, graph)) {
            g = 7; /* q/k/v, their ropes and the cache writes: one launch */
            p->quant[i] |= Q_QKV;
        } else {
            while (i + g < p->n_nodes && g < 4 && mul_mat_can_group(p->nodes[i], p->nodes[i + g])) g++;
            if (g == 2 && i + 2 < p->n_nodes && p->rp &&
                mul_mat_can_glu(p->nodes[i], p->nodes[i + 1], p->nodes[i + 2], p->rp[i], p->rp[i + 1])) {
                g = 3; /* gate, up and their swiglu: one launch */
                p->quant[i] |= Q_GLU;
            }
        }
        p->group[i] = g;
        i += g;
    }
    size_t quant_need = 0;
    int regions = 1;
    /* a launch whose one output row is the next launch's mat-vec activation column also writes it
     * as int8 blocks (add+norm+mul groups, swiglu alone or fused with its gate/up mat-vecs, a flash
     * attention's merge): the mat-vec skips its quantize kernel */
    for (int i = 0; i < p->n_nodes; i += p->group[i]) {
        const int j = i + p->group[i];
        if (j >= p->n_nodes || p->nodes[j]->op != PYG_OP_MUL_MAT) continue;
        const pyg_tensor *n = p->nodes[i];
        const pyg_tensor *prod = p->group[i] == 3 && n->op == PYG_OP_ADD && rows_can_prequant_add(p->nodes[i + 2])
                                     ? p->nodes[i + 2]
                                 : (p->quant[i] & Q_GLU) ? p->nodes[i + 2] /* swiglu_can_prequant: mul_mat_can_glu */
                                 : p->group[i] == 1 && (swiglu_can_prequant(n) || flash_attn_can_prequant(n, dev->n_sm))
                                     ? n
                                     : NULL;
        if (prod && mul_mat_can_prequant(prod, p->nodes[j], p->rp && p->rp[j])) {
            const int other = (p->quant[i] & Q_IN) && !(p->quant[i] & Q_IN1); /* it reads region 0: write 1 */
            p->quant[i] |= Q_OUT | (other ? Q_OUT1 : 0);
            p->quant[j] |= Q_IN | (other ? Q_IN1 : 0);
            if (other) regions = 2;
            /* the blocks lie past what any producer uses of the scratch itself (a flash
             * attention's split partials), so both ends find them at quant_off */
            const size_t own = n->op == PYG_OP_FLASH_ATTN_EXT ? flash_attn_scratch_bytes(n, dev->n_sm) : 0;
            const size_t off = (own + 255) & ~(size_t)255;
            if (off > p->quant_off) p->quant_off = off;
            const size_t K = (size_t)p->nodes[j]->src[1]->ne[0];
            const size_t need = ((K + 255) & ~(size_t)255) + K / 32 * 2 * sizeof(float);
            if (need > quant_need) quant_need = need;
        }
    }
    p->quant_region = (quant_need + 255) & ~(size_t)255;
    if (quant_need && p->quant_off + regions * p->quant_region > scratch) scratch = p->quant_off + regions * p->quant_region;
    if (p->sync_bytes) {
        p->sync_off = (scratch + 255) & ~(size_t)255;
        scratch = p->sync_off + p->sync_bytes;
    }
    if (scratch) {
        gpuError_t e = gpuSetDevice(dev->index);
        if (e == gpuSuccess) e = gpuMalloc(&p->scratch, scratch);
        /* the sync words start at zero; the memset runs on the default stream, which the plugin's
         * non-blocking streams do not wait for: wait for it here */
        if (e == gpuSuccess && p->sync_bytes) e = gpuMemset((char *)p->scratch + p->sync_off, 0, p->sync_bytes);
        if (e == gpuSuccess && p->sync_bytes) e = gpuStreamSynchronize(0);
        if (e != gpuSuccess) {
            pyg_cuda_plan_destroy(p);
            return pyg_cuda_gpu_error(e, "cudaMalloc (plan scratch)");
        }
        p->scratch_size = scratch;
    }
    *out = p;
    return NULL;
}

static pyg_error *launch_all(pyg_graph_plan *p, pyg_stream *s) {
    char err[512];
    op_ctx c;
    c.stream = s->s;
    c.device = p->dev->index;
    c.n_sm = p->dev->n_sm;
    c.scratch = p->scratch;
    c.scratch_size = p->scratch_size;
    c.err = err;
    c.errlen = sizeof err;
    c.quant_out = c.quant_in = 0;
    c.quant_off = c.quant_in_off = 0;
    c.cc = p->dev->cc_major * 10 + p->dev->cc_minor;
    c.rp = NULL;
    c.sync_off = p->sync_off;
    c.sync_bytes = p->sync_bytes;
    for (int i = 0; i < p->n_nodes; i++) {
        err[0] = 0;
        if (p->group[i] == 0) continue; /* launched with an earlier node */
        const int op = p->nodes[i]->op;
        const int q = p->quant[i];
        c.quant_out = (q & Q_OUT) != 0;
        c.quant_in = (q & Q_IN) != 0;
        c.quant_off = p->quant_off + ((q & Q_OUT1) ? p->quant_region : 0);
        c.quant_in_off = p->quant_off + ((q & Q_IN1) ? p->quant_region : 0);
        c.rp = p->rp ? p->rp + i : NULL;
        int st = p->group[i] == 1        ? launch_node(p->nodes[i], &c)
                 : op == PYG_OP_ADD      ? rows_launch_fused_add(p->nodes[i], p->nodes[i + 1], p->nodes[i + 2], &c)
                 : op == PYG_OP_RMS_NORM ? rows_launch_fused_mul(p->nodes[i], p->nodes[i + 1], &c)
                 : op == PYG_OP_ROPE && p->group[i] == 3
                     ? rows_launch_rope_store_pair(p->nodes[i], p->nodes[i + 1], p->nodes[i + 2], &c)
                 : op == PYG_OP_ROPE     ? rows_launch_rope_pair(p->nodes[i], p->nodes[i + 1], &c)
                 : op == PYG_OP_SET_ROWS ? basic_launch_set_rows_pair(p->nodes[i], p->nodes[i + 1], &c)
                 : (q & Q_GLU)           ? mul_mat_launch_glu(p->nodes + i, &c)
                 : (q & Q_QKV)           ? mul_mat_launch_qkv_rope(p->nodes + i, &c)
                                         : mul_mat_launch_group(p->nodes + i, p->group[i], &c);
        if (st != PYG_OK)
            return pyg_cuda_error(st, "node '%s' (%s): %s", p->nodes[i]->name, pyg_op_name(p->nodes[i]->op), err);
    }
    return NULL;
}

pyg_error *pyg_cuda_plan_compute(pyg_graph_plan *p, pyg_stream *s) {
    if (!p || !s) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: NULL argument");
    if (s->dev != p->dev)
        return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: stream of device %d, plan of device %d",
                              s->dev->index, p->dev->index);
    gpuError_t e = gpuSetDevice(p->dev->index);
    if (e != gpuSuccess) return pyg_cuda_gpu_error(e, "cudaSetDevice");
    if (p->n_nodes == 0) return NULL;
    cuda_opts_scope bound(&p->opts);
    if (p->rp) { /* repacked weights filled before any launch (never inside a capture) */
        char err[256];
        const int st = cuda_repack_ensure(p->rp, p->n_nodes, &p->rp_generation, s->s, err, sizeof err);
        if (st != PYG_OK) return pyg_cuda_error(st, "%s", err);
    }
    const int graphs = p->opts.graphs && !p->graphs_failed;
    if (p->exec && graphs) {
        p->n_computes++;
        e = gpuGraphLaunch(p->exec, s->s);
        return pyg_cuda_gpu_error(e, "cudaGraphLaunch");
    }
    if (!graphs || p->n_computes == 0) {
        p->n_computes++;
        return launch_all(p, s);
    }
    /* 2nd compute: capture the launches into a device graph, then replay it */
    e = gpuStreamBeginCapture(s->s, gpuStreamCaptureModeThreadLocal);
    if (e != gpuSuccess) {
        gpuGetLastError();
        p->graphs_failed = 1;
        pyg_cuda_log(PYG_LOG_WARN, "graph capture unavailable (%s); launching nodes directly", gpuGetErrorString(e));
        p->n_computes++;
        return launch_all(p, s);
    }
    pyg_error *le = launch_all(p, s);
    gpuGraph_t g = NULL;
    e = gpuStreamEndCapture(s->s, &g);
    if (le) {
        if (g) gpuGraphDestroy(g);
        gpuGetLastError();
        return le;
    }
    gpuGraphExec_t exec = NULL;
    if (e == gpuSuccess && g) e = gpuGraphInstantiate(&exec, g);
    if (g) gpuGraphDestroy(g);
    if (e != gpuSuccess || !exec) {
        gpuGetLastError();
        p->graphs_failed = 1;
        pyg_cuda_log(PYG_LOG_WARN, "graph capture failed (%s); launching nodes directly", gpuGetErrorString(e));
        p->n_computes++;
        return launch_all(p, s);
    }
    p->exec = exec;
    p->n_computes++;
    e = gpuGraphLaunch(p->exec, s->s);
    return pyg_cuda_gpu_error(e, "cudaGraphLaunch");
}
