/* plugins/vulkan/vk_graph.c — graph plans (which nodes run: vk_supports.c).
 *
 * A plan is derived once per graph: one dispatch per compute node (pipeline, descriptor set,
 * parameter block), recorded into one command buffer that graph_plan_compute resubmits.
 * Barriers: each dispatch's read and write byte ranges are tracked since the last barrier; a
 * compute->compute barrier goes in only when a dispatch reads or writes a range written since
 * then, or writes a range read since then (the allocator reuses memory, so WAR matters too). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vk_plan.h"

/* elementwise shader specializations */
enum { E_ADD, E_MUL, E_SCALE, E_SILU, E_GELU, E_SWIGLU2, E_SWIGLU1, E_COPY };

/* ---------------------------------------------------------------- plans */



/* where a tensor's bytes live: its own buffer, or (for an in-place alias) its view source's */
int vkp_resolve(const pyg_tensor *t, const pyg_buffer **b, uint64_t *off) {
    uint64_t extra = 0;
    for (int depth = 0; t && depth < 16; depth++) {
        if (t->buffer) { *b = t->buffer; *off = t->offset + extra; return 1; }
        extra += t->view_offs;
        t = t->view_src;
    }
    return 0;
}

int vkp_disjoint(const pyg_tensor *a, const pyg_tensor *b) {
    const pyg_buffer *ba, *bb; uint64_t oa, ob;
    if (!b) return 1;
    if (!vkp_resolve(a, &ba, &oa) || !vkp_resolve(b, &bb, &ob)) return 0;
    return ba != bb || oa + pyg_tensor_nbytes(a) <= ob || ob + pyg_tensor_nbytes(b) <= oa;
}

void vkp_fold_groups(uint64_t total, uint32_t g[3]) {
    if (total == 0) total = 1;
    g[0] = total < 65535 ? (uint32_t)total : 65535;
    uint64_t rest = (total + g[0] - 1) / g[0];
    g[1] = rest < 65535 ? (uint32_t)rest : 65535;
    g[2] = (uint32_t)((rest + g[1] - 1) / g[1]);
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* rope YaRN correction dims, as ggml defines them */
static float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}


void vkp_rope_extras(const pyg_tensor *n, uint32_t ex[3]) {
    int n_dims = n->op_params[0], n_ctx_orig = n->op_params[2];
    float base = pyg_op_param_f32(n->op_params, 3);
    float beta_fast = pyg_op_param_f32(n->op_params, 7), beta_slow = pyg_op_param_f32(n->op_params, 8);
    float lo = floorf(corr_dim(n_dims, n_ctx_orig, beta_fast, base));
    float hi = ceilf(corr_dim(n_dims, n_ctx_orig, beta_slow, base));
    lo = lo > 0 ? lo : 0;
    hi = hi < n_dims - 1 ? hi : (float)(n_dims - 1);
    ex[0] = f2u((float)log2((double)base));
    ex[1] = f2u(lo);
    ex[2] = f2u(hi);
}

/* rows handled by one 64-invocation workgroup of the subgroup-per-row shaders */
uint32_t vkp_rows_per_wg(const pyg_device *d) {
    return d->subgroup_size >= 1 && d->subgroup_size <= 64 ? 64 / d->subgroup_size : 1;
}

/* An auto/off/on option: auto is on except on CPU devices (lavapipe), where more workgroups or
 * wider kernels only add overhead. */
int vkp_auto_on(const pyg_device *d, int64_t opt) {
    return opt == VKP_AUTO ? d->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU : opt == VKP_ON;
}

uint64_t vkp_dev_align(const pyg_device *d) {   /* where a binding may start */
    return d->props.limits.minStorageBufferOffsetAlignment ? d->props.limits.minStorageBufferOffsetAlignment : 16;
}

/* KV-split flash attention (option fa_split). */
static int fa_split_on(const pyg_device *d) { return vkp_auto_on(d, d->opts.fa_split); }


/* swiglu8.comp takes swiglu(a, b) (option swiglu8 >= 1): a, b and the result f32, contiguous, of one shape, rows
 * of a multiple of 8 elements, each starting 16 bytes into its binding (which starts on vkp_dev_align), and the
 * result either apart from each operand or on exactly its bytes (an invocation reads its 8 elements before it
 * writes them) */
static int swiglu8_ok(const pyg_device *d, const pyg_tensor *n) {
    const pyg_tensor *t[3] = { n, n->src[0], n->src[1] };
    if (d->opts.swiglu8 < 1 || n->op != PYG_OP_SWIGLU || !t[2] || n->ne[0] % 8) return 0;
    uint64_t align = vkp_dev_align(d), off0 = 0;
    for (int k = 0; k < 3; k++) {
        const pyg_buffer *b; uint64_t off;
        if (t[k]->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(t[k]) || !vkp_resolve(t[k], &b, &off)) return 0;
        for (int j = 0; j < 4; j++) if (t[k]->ne[j] != n->ne[j]) return 0;
        if ((off & (align - 1)) % 16) return 0;
        if (k == 0) off0 = off;
        else if (!vkp_disjoint(n, t[k]) && off != off0) return 0;
    }
    return 1;
}

/* Whether any node of g other than `except` reads t's bytes (an operand, or a view of them), or t is a graph
 * output (PYG_TENSOR_FLAG_OUTPUT: read after the graph has run): a dispatch may then skip writing t */
static int read_elsewhere(const pyg_graph *g, const pyg_tensor *t, const pyg_tensor *except) {
    if (t->flags & PYG_TENSOR_FLAG_OUTPUT) return 1;
    for (int i = 0; i < g->n_nodes; i++) {
        const pyg_tensor *n = g->nodes[i];
        if (!n || n == except || n == t) continue;
        for (const pyg_tensor *v = n->view_src; v; v = v->view_src) if (v == t) return 1;
        for (int k = 0; k < PYG_MAX_SRC; k++) {
            for (const pyg_tensor *s = n->src[k]; s; s = s->view_src) if (s == t) return 1;
        }
    }
    return 0;
}

/* gemm_b16's copy written by the dispatch w just before GEMM gm (of node mm, reading x = gm's slot 1) in place of a
 * conversion, where w produces x in the copy's layout (rows of x's ne[0] halves, none padded): swiglu8.comp
 * (swiglu8=2) as swiglu8_b16, or the fused norm on norm_mul_reg's vec4 path (norm_b16) as norm_mul_reg_b16. w's own
 * output that only the fused work reads (the swiglu's result, the norm's rms_norm output) is then written only where
 * read_elsewhere finds a reader: extra word 1 (swiglu8_b16) or 8 (norm_mul_reg_b16). *took: whether w took it. */
static pyg_error *b16_writer(pyg_device *d, const pyg_graph *g, const pyg_tensor *mm, dispatch *w, uint32_t *pw,
                             const dispatch *gm, int *took) {
    const pyg_tensor *x = gm->slot[1];
    *took = 0;
    if (w->slot[VKP_SLOT_DST] != x || gm->b16_rows != (uint64_t)x->ne[1] || gm->b16_k != (uint64_t)x->ne[0]) return NULL;
    int swiglu = d->opts.swiglu8 >= 2 && w->shader == VKP_SH_SWIGLU8;
    int norm = d->opts.norm_b16 && (w->shader == VKP_SH_NORM_MUL_REG || w->shader == VKP_SH_NORM_MUL_REG_ADD) && pw[96 + 1] &&
               x->ne[0] % 4 == 0;
    if (!swiglu && !norm) return NULL;
    int sh = swiglu ? VKP_SH_SWIGLU8_B16 : w->shader == VKP_SH_NORM_MUL_REG ? VKP_SH_NORM_MUL_REG_B16 : VKP_SH_NORM_MUL_REG_ADD_B16;
    pyg_error *e = vkp_get_pipeline(d, sh, (uint32_t[2]){ 0, swiglu ? 1 : vkp_rows_per_wg(d) }, &w->pipe);
    if (e) return e;
    const pyg_tensor *own = swiglu ? x : w->slot[3];   /* (a fused norm's slot 3: the rms_norm node, which the mul reads) */
    uint32_t *word = &pw[96 + (swiglu ? 1 : 8)];
    *word = (uint32_t)read_elsewhere(g, own, swiglu ? mm : x);
    w->shader = sh;
    w->b16 = 1;
    w->b16_rows = gm->b16_rows;
    w->b16_k = gm->b16_k;
    vkp_log(PYG_LOG_DEBUG, swiglu ? "swiglu8 '%s' (the f16 activations of GEMM '%s' beside it, its f32 result %s): swiglu8_b16"
                                  : "rms_norm '%s' (the f16 activations of GEMM '%s' beside its result, its own output %s): norm_mul_reg_b16",
            own->name, mm->name, *word ? "too" : "read nowhere else, not written");
    *took = 1;
    return NULL;
}

/* Fill the parameter block and the dispatch of one node; the caller checked supports_op. */
pyg_error *vkp_build_node(pyg_device *d, const pyg_tensor *n, dispatch *dp, uint32_t *p) {
    const pyg_tensor *s0 = n->src[0], *s1 = n->src[1];
    int shader = -1;
    uint32_t spec = 0, spec1 = 1;
    uint64_t work = 0;   /* workgroups */
    memset(dp->slot, 0, sizeof dp->slot);
    dp->dq = 0;
    dp->b16 = 0;
    dp->ks = 0; dp->ks_size = 0; dp->ks_tiles = 0;
    dp->scratch_size = 0;
    dp->b16_size = 0;
    dp->slot[VKP_SLOT_DST] = n;
    dp->slot[0] = s0;
    memcpy(&p[80], n->op_params, sizeof n->op_params);
    uint32_t *ex = &p[96];
    switch (n->op) {
    case PYG_OP_ADD: case PYG_OP_MUL: case PYG_OP_SCALE: case PYG_OP_SILU: case PYG_OP_GELU:
    case PYG_OP_SWIGLU: case PYG_OP_CPY: case PYG_OP_CONT:
        shader = VKP_SH_ELEMENTWISE;
        spec = n->op == PYG_OP_ADD ? E_ADD : n->op == PYG_OP_MUL ? E_MUL : n->op == PYG_OP_SCALE ? E_SCALE :
               n->op == PYG_OP_SILU ? E_SILU : n->op == PYG_OP_GELU ? E_GELU :
               n->op == PYG_OP_SWIGLU ? (s1 ? E_SWIGLU2 : E_SWIGLU1) : E_COPY;
        if (n->op == PYG_OP_ADD || n->op == PYG_OP_MUL || (n->op == PYG_OP_SWIGLU && s1)) dp->slot[1] = s1;
        ex[0] = (uint32_t)pyg_tensor_nelements(n);
        work = (ex[0] + 255) / 256;
        if (swiglu8_ok(d, n)) {   /* 8 elements an invocation (vk_graph.c's plan loop may add the f16 copy) */
            shader = VKP_SH_SWIGLU8;
            spec = 0;
            vkp_log(PYG_LOG_DEBUG, "swiglu8 '%s': swiglu8", n->name);   /* (not "swiglu '": the fusion tests' lines) */
            ex[0] /= 8;
            work = (ex[0] + 255) / 256;
        }
        break;
    case PYG_OP_RMS_NORM: case PYG_OP_NORM: case PYG_OP_SOFT_MAX: case PYG_OP_ARGMAX:
        shader = n->op == PYG_OP_SOFT_MAX ? VKP_SH_SOFT_MAX : n->op == PYG_OP_ARGMAX ? VKP_SH_ARGMAX : VKP_SH_NORM;
        spec = n->op == PYG_OP_NORM;
        if (n->op == PYG_OP_SOFT_MAX && s1) { dp->slot[1] = s1; ex[1] = 1; }
        ex[0] = (uint32_t)pyg_tensor_nrows(s0);
        work = ex[0];
        if (d->subgroup_arith) {   /* one subgroup per row, no barriers */
            shader = VKP_SH_ROWS_SG;
            spec = n->op == PYG_OP_RMS_NORM ? 0 : n->op == PYG_OP_NORM ? 1 : n->op == PYG_OP_SOFT_MAX ? 2 : 3;
            spec1 = vkp_rows_per_wg(d);
            work = (work + spec1 - 1) / spec1;
        }
        break;
    case PYG_OP_ROPE: {
        shader = VKP_SH_ROPE;
        dp->slot[1] = s1;
        if (n->src[2]) { dp->slot[2] = n->src[2]; ex[4] = 1; }
        vkp_rope_extras(n, &ex[1]);
        ex[0] = (uint32_t)(pyg_tensor_nelements(s0) / 2);
        work = (ex[0] + 255) / 256;
        break;
    }
    case PYG_OP_GET_ROWS:
        shader = VKP_SH_GET_ROWS;
        dp->slot[1] = s1;
        ex[0] = (uint32_t)pyg_tensor_nelements(n);
        work = (ex[0] + 255) / 256;
        break;
    case PYG_OP_SET_ROWS:
        shader = VKP_SH_SET_ROWS;
        dp->slot[0] = NULL;   /* src0 is the destination itself */
        dp->slot[1] = s1;
        dp->slot[2] = n->src[2];
        ex[0] = (uint32_t)pyg_tensor_nelements(s1);
        work = (ex[0] + 255) / 256;
        break;
    case PYG_OP_MUL_MAT: {
        dp->slot[1] = s1;
        uint32_t sp[2];
        if (vkp_mv_rp_setup(d, n, sp, &work, ex) && (dp->rp = vkp_repack_get(d, s0, n->name))) {   /* matvec_rp (vk_repack.c) */
            shader = VKP_SH_MUL_MAT_VEC_RP;
            spec = sp[0]; spec1 = sp[1];
            vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' (%s, M %lld N 1%s%s): mul_mat_vec_rp", n->name, pyg_type_get_traits(s0->type)->name,
                    (long long)s0->ne[1], sp[0] >> 14 & 1u ? ", 4 rows a workgroup" : "", sp[0] >> 15 & 1u ? ", literal build" : "");
            break;
        }
        uint64_t copies[4];
        pyg_error *e = vkp_mul_mat_setup(d, n, &shader, sp, &work, ex, copies, dp->graph);
        dp->b16_rows = copies[2];
        dp->b16_k = copies[3];
        dp->scratch_size = copies[0];
        dp->dq = copies[0] ? 2 : 0;   /* gemm_dq: the plan puts dequant.comp before it (vk_graph_plan) */
        dp->b16_size = copies[1];
        dp->b16 = copies[1] ? 2 : 0;  /* gemm_b16: the same for its activations */
        dp->ks = !e && vkp_is_cm4(shader) && ex[2] > 1;   /* gemm_splitk: the plan puts splitk_add.comp after it (vk_graph_plan) */
        dp->ks_tiles = dp->ks && ex[4] ? work / ex[2] : 0;   /* splitk_last: its last split per tile adds them, no pass */
        dp->ks_size = dp->ks ? (uint64_t)(ex[2] - (ex[4] ? 0 : 1)) * pyg_tensor_nelements(n) * 4 : 0;
        if (e) return e;
        spec = sp[0]; spec1 = sp[1];
        break;
    }
    case PYG_OP_FLASH_ATTN_EXT: {
        shader = VKP_SH_FLASH_ATTN;
        dp->slot[1] = s1;
        dp->slot[2] = n->src[2];
        if (n->src[3]) { dp->slot[3] = n->src[3]; ex[1] = 1; }
        dp->fa_split = 0;
        uint32_t sp[2];
        if (vkp_fa_cm_setup(d, n, vkp_dev_align(d), &shader, sp, &work, ex)) {   /* prefill on the tensor cores (vk_attn.c) */
            if (fa_split_on(d))   /* over KV splits, then the merge pass (below, in the plan) */
                vkp_fa_cm_split(d, n, &shader, sp, &work, ex, &dp->fa_split, &dp->scratch_size);
            spec = sp[0]; spec1 = sp[1];
            vkp_fa_log(n, shader, spec);
            break;
        }
        uint64_t rows = (uint64_t)(s0->ne[1] * s0->ne[2] * s0->ne[3]), nkv = (uint64_t)s1->ne[1];
        shader = vkp_fa_scalar_shader(d);   /* flash_attn.comp, or its FA_V2 build (fa_v=2) */
        ex[0] = (uint32_t)rows;
        work = rows;
        /* few query rows (decode) over a long KV: one workgroup per split of whole 64-key chunks,
         * at most fa_wgs workgroups in all, then a combine pass (or flash_attn_dec's last
         * workgroup), so the device is busy and a masked-out split costs one mask read */
        int split = rows < 1024 && nkv > 64 && fa_split_on(d);
        if (split && vkp_fa_dec2_setup(d, n, vkp_dev_align(d), &shader, sp, ex, &work, &dp->fa_split, &dp->fa_len,
                                       &dp->scratch_size, &dp->fa_fold)) {
            spec = sp[0]; spec1 = sp[1];   /* flash_attn_dec2: row groups, the merge in the last workgroup of each */
        } else if (split) {
            uint64_t cap = (uint64_t)d->opts.fa_wgs / rows, ns = (nkv + 63) / 64;
            if (cap < 2) cap = 2;
            if (ns > cap) ns = cap;
            uint64_t len = ((nkv + ns - 1) / ns + 63) / 64 * 64;
            ns = (nkv + len - 1) / len;
            if (ns > 1) {
                dp->fa_split = (uint32_t)ns;
                dp->fa_len = (uint32_t)len;
                dp->scratch_size = rows * ns * ((uint64_t)n->src[2]->ne[0] + 2) * 4;
                spec = 1;
                ex[0] = (uint32_t)(rows * ns);
                ex[2] = (uint32_t)ns;
                ex[3] = (uint32_t)len;
                work = rows * ns;
                if (vkp_fa_dec_setup(d, n, rows, ns, vkp_dev_align(d), &shader, sp, ex, &dp->scratch_size)) {
                    spec = sp[0]; spec1 = sp[1];
                    dp->fa_fold = rows * 4;   /* no merge pass; counters zeroed before each run */
                }
            }
        }
        vkp_fa_log(n, shader, 0);
        break;
    }
    default:
        return vkp_err(PYG_ERR_UNSUPPORTED, "op %s not implemented", pyg_op_name(n->op));
    }
    vkp_fold_groups(work, dp->groups);
    uint32_t specs[2] = { spec, spec1 };
    dp->shader = shader;
    dp->spec0 = spec;
    return vkp_get_pipeline(d, shader, specs, &dp->pipe);
}

/* "shader.detail": the weight type (and rows per subgroup) of the mat-mul kernels, the op of the
 * shaders several ops share, the pass of a split flash attention */
static int profile_label(const dispatch *dp) {
    char buf[48];
    const char *sh = vkp_shader_name(dp->shader);
    const pyg_type_traits *tr;
    switch (dp->shader) {
    case VKP_SH_MUL_MAT_VEC2: case VKP_SH_MUL_MAT_VEC3: case VKP_SH_MUL_MAT_VEC3P: case VKP_SH_MUL_MAT_VEC3G:
    case VKP_SH_MUL_MAT_VEC3I: case VKP_SH_MUL_MAT_VEC3W: case VKP_SH_MUL_MAT_VEC4: case VKP_SH_MUL_MAT_VEC3S: case VKP_SH_MUL_MAT_VEC3Q:
        tr = pyg_type_get_traits((int32_t)(dp->spec0 & 255));
        snprintf(buf, sizeof buf, "%s.%s.r%u", sh, tr ? tr->name : "?", dp->spec0 >> 8 & 255);
        break;
    case VKP_SH_MUL_MAT_VEC: case VKP_SH_MUL_MAT: case VKP_SH_MUL_MAT_CM: case VKP_SH_MUL_MAT_CM_EMU:
    case VKP_SH_MUL_MAT_CM128: case VKP_SH_MUL_MAT_CM128_EMU:
        tr = pyg_type_get_traits((int32_t)dp->spec0);
        snprintf(buf, sizeof buf, "%s.%s", sh, tr ? tr->name : "?");
        break;
    case VKP_SH_FLASH_ATTN:
        snprintf(buf, sizeof buf, "%s%s", sh, dp->spec0 == 1 ? ".split" : dp->spec0 == 2 ? ".merge" : "");
        break;
    case VKP_SH_FLASH_ATTN_CM3: case VKP_SH_FLASH_ATTN_CM3_EMU: {   /* (fa_acc) */
        const char *acc = vkp_fa_acc_name(dp->shader, dp->spec0);
        snprintf(buf, sizeof buf, "%s%s%s", sh, *acc ? "." : "", acc);
        break;
    }
    case VKP_SH_NORM_MUL_ADD: case VKP_SH_NORM_MUL_WG_ADD: case VKP_SH_NORM_MUL_REG_ADD: case VKP_SH_NORM_MUL_REG_ADD_Q8:
    case VKP_SH_NORM_MUL_REG_ADD_B16:
        snprintf(buf, sizeof buf, "add+%s", sh);
        break;
    case VKP_SH_ELEMENTWISE: case VKP_SH_ROWS_SG: case VKP_SH_NORM:
        snprintf(buf, sizeof buf, "%s.%s", sh, pyg_op_name(dp->op));
        break;
    default:
        snprintf(buf, sizeof buf, "%s", sh);
    }
    return vkp_prof_label(buf);
}

void vkp_plan_destroy(pyg_graph_plan *plan) {
    if (!plan) return;
    pyg_device *d = plan->dev;
    if (plan->n_dispatch > 0) vkp_queue_idle(d);
    if (plan->pool) d->fn.vkDestroyCommandPool(d->dev, plan->pool, NULL);
    if (plan->dpool) d->fn.vkDestroyDescriptorPool(d->dev, plan->dpool, NULL);
    if (plan->pobj) vkp_api_buffer_free(plan->pobj);
    else if (plan->pbuf) d->fn.vkDestroyBuffer(d->dev, plan->pbuf, NULL);
    if (plan->pmem) d->fn.vkFreeMemory(d->dev, plan->pmem, NULL);
    if (plan->sbuf) d->fn.vkDestroyBuffer(d->dev, plan->sbuf, NULL);
    if (plan->smem) d->fn.vkFreeMemory(d->dev, plan->smem, NULL);
    free(plan->acc);
    free(plan->acc_write);
    if (plan->qpool) d->fn.vkDestroyQueryPool(d->dev, plan->qpool, NULL);
    for (int i = 0; i < plan->n_events; i++) d->fn.vkDestroyEvent(d->dev, plan->events[i], NULL);
    free(plan->events);
    for (int i = 0; i < plan->n_rps; i++) vkp_repack_release(plan->rps[i]);
    free(plan->rps);
    free(plan->ops);
    free(plan->labels);
    free(plan->bytes);
    free(plan);
}

/* Turn dispatch c (a GEMM's copy, its params p) into dequant.comp converting src to f16 rows: units of 8
 * values, rows padded to `rows` with `per_row` units each (0, 0: no padding). The caller marks it dq or b16. */
static pyg_error *as_dequant(pyg_device *d, dispatch *c, uint32_t *p, const pyg_tensor *src, uint64_t units,
                             uint32_t rows, uint32_t per_row) {
    memset(c->slot, 0, sizeof c->slot);
    c->slot[0] = src;
    c->add_out = NULL; c->writes_slot3 = 0; c->out6_word = 0; memset(c->xout, 0, sizeof c->xout); memset(c->xout_ro, 0, sizeof c->xout_ro); c->nfold = 0;
    c->fold_a = NULL; c->fold_wr = 0; c->dropped = 0;
    c->dq = 0; c->b16 = 0; c->ks = 0;
    c->shader = VKP_SH_DEQUANT;
    c->spec0 = (uint32_t)src->type;
    vkp_fold_groups((units + 127) / 128, c->groups);
    uint32_t specs[2] = { (uint32_t)src->type, 1 };
    pyg_error *e = vkp_get_pipeline(d, VKP_SH_DEQUANT, specs, &c->pipe);
    if (e) return e;
    p[96] = (uint32_t)units;
    p[97] = rows;
    p[98] = per_row;
    return NULL;
}

/* a dispatch's outputs beyond the slots, each described in its extras from its word: offset in its binding, type, nb */
static pyg_error *describe_outs(pyg_device *d, const dispatch *dp, uint32_t *p, uint64_t align) {
    const pyg_tensor *outs[4] = { dp->add_out, dp->xout[0], dp->xout[1], dp->xout[2] };
    const uint32_t words[4] = { dp->out6_word ? dp->out6_word : 2, dp->xout_word[0], dp->xout_word[1], dp->xout_word[2] };
    for (int x = 0; x < 4; x++) {
        const pyg_tensor *t = outs[x];
        if (!t) continue;
        const pyg_buffer *b; uint64_t off;
        if (!vkp_resolve(t, &b, &off) || b->dev != d) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "tensor '%s' has no buffer of this device", t->name);
        uint32_t *w = &p[96 + words[x]];
        w[0] = (uint32_t)(off & (align - 1));
        w[1] = (uint32_t)t->type;
        for (int k = 0; k < 4; k++) w[2 + k] = (uint32_t)t->nb[k];
    }
    return NULL;
}

pyg_error *vkp_plan_create(pyg_device *d, const pyg_graph *g, pyg_graph_plan **out) {
    pyg_error *e = NULL;
    int nn = g->n_nodes;
    int cap = (nn > 0 ? nn : 1) * 4;   /* (a GEMM: up to two conversions first, gemm_splitk's pass after) */
    dispatch *dps = calloc((size_t)cap, sizeof *dps);
    unsigned char *done = calloc((size_t)(nn > 0 ? nn : 1), 1);   /* nodes a dispatch took ahead of their place */
    uint32_t *params = NULL;
    pyg_graph_plan *plan = calloc(1, sizeof *plan);
    if (!dps || !plan || !done) { e = vkp_err(PYG_ERR_OUT_OF_MEMORY, "graph_plan_create"); goto fail; }
    plan->dev = d;
    const uint64_t align = vkp_dev_align(d);
    const uint64_t ualign = d->props.limits.minUniformBufferOffsetAlignment > align ? d->props.limits.minUniformBufferOffsetAlignment : align;
    const uint64_t pstride = ((VKP_PARAM_WORDS * 4 + ualign - 1) / ualign) * ualign;
    params = calloc((size_t)cap, (size_t)pstride);
    if (!params) { e = vkp_err(PYG_ERR_OUT_OF_MEMORY, "graph_plan_create"); goto fail; }

    /* one dispatch per compute node (two for a KV-split flash attention) */
    int nd = 0;
    uint64_t scratch_total = 0, dq_size = 0, b16_size = 0;
    const pyg_tensor *b16_src = NULL;   /* what the b16 region holds while only its readers have run since */
    uint64_t b16_rows = 0, b16_k = 0;   /* and in which layout (gemm_bg pads it to the GEMM's tiles) */
    int norm_src = -1;   /* the last fused norm on norm_mul_reg.comp's vec4 path */
    for (int i = 0; i < nn; i++) {
        const pyg_tensor *n = g->nodes[i];
        if (!n) { e = vkp_err(PYG_ERR_INVALID_ARGUMENT, "graph node %d is NULL", i); goto fail; }
        if (n->op == PYG_OP_NONE || pyg_op_is_view(n->op) || done[i]) continue;
        if (!vkp_supports_op(d, n)) {
            e = vkp_err(PYG_ERR_UNSUPPORTED, "node '%s' (%s, type %d) is not supported by this device", n->name, pyg_op_name(n->op), n->type);
            goto fail;
        }
        uint32_t *p = (uint32_t *)((char *)params + (size_t)nd * pstride);
        dps[nd].rp = dps[nd].rp2 = NULL;
        dps[nd].graph = g;   /* (gemm_splitk) */
        e = vkp_plan_node(d, g, &i, dps, nd, p, norm_src, done);
        for (int k = 0; k < 2; k++) {   /* the plan holds the copies' references */
            struct vkp_repack *r = k ? dps[nd].rp2 : dps[nd].rp;
            if (!r) continue;
            struct vkp_repack **np = realloc(plan->rps, (size_t)(plan->n_rps + 1) * sizeof *np);
            if (!np) { vkp_repack_release(r); if (!e) e = vkp_err(PYG_ERR_OUT_OF_MEMORY, "graph_plan_create"); }
            else { plan->rps = np; plan->rps[plan->n_rps++] = r; }
        }
        if (e) goto fail;
        if (dps[nd].b16 != 2) b16_src = NULL;
        for (int s = 0; s < VKP_NBIND; s++) {
            const pyg_tensor *t = dps[nd].slot[s];
            if (!t) continue;
            const pyg_buffer *b; uint64_t off;
            if (!vkp_resolve(t, &b, &off)) { e = vkp_err(PYG_ERR_INVALID_ARGUMENT, "tensor '%s' has no buffer", t->name); goto fail; }
            if (b->dev != d) { e = vkp_err(PYG_ERR_INVALID_ARGUMENT, "tensor '%s' is in another device's buffer", t->name); goto fail; }
            p[16 * s + 0] = (uint32_t)(off & (align - 1));
            p[16 * s + 1] = (uint32_t)t->type;
            for (int k = 0; k < 4; k++) { p[16 * s + 4 + k] = (uint32_t)t->ne[k]; p[16 * s + 8 + k] = (uint32_t)t->nb[k]; }
        }
        if ((e = describe_outs(d, &dps[nd], p, align))) goto fail;
        if (dps[nd].fold_wr &&   /* fold_nodes: the mul_mat_vec_rpn it made write the add's result */
            (e = describe_outs(d, &dps[dps[nd].fold_wr - 1], (uint32_t *)((char *)params + (size_t)(dps[nd].fold_wr - 1) * pstride), align)))
            goto fail;
        if (dps[nd].shader == VKP_SH_NORM_MUL_REG || dps[nd].shader == VKP_SH_NORM_MUL_REG_ADD)
            p[96 + 1] = vkp_norm_vec4_ok(p, dps[nd].add_out != NULL, align);
        if ((dps[nd].shader == VKP_SH_NORM_MUL_REG || dps[nd].shader == VKP_SH_NORM_MUL_REG_ADD) && p[96 + 1]) {
            norm_src = nd;   /* mat-vecs reading its result may recompute it, or copy its int8 blocks (vk_fuse.c) */
            uint64_t K = (uint64_t)dps[nd].slot[VKP_SLOT_DST]->ne[0], rows = p[96];
            if (d->opts.mv_q8 && K % 256 == 0 && rows <= 4 && d->subgroup_shuffle && d->subgroup_size >= 8 && d->subgroup_size <= 64) {
                dps[nd].q8 = 1;   /* (its Q8_OUT build once a mat-vec reads the copy: below) */
                dps[nd].q8_size = rows * (K + K / 4);
            }
        }
        if (dps[nd].writes_slot3 && dps[nd].op == PYG_OP_RMS_NORM)   /* which kernel (tests read it) */
            vkp_log(PYG_LOG_DEBUG, "rms_norm '%s' (fused%s): %s%s", dps[nd].slot[3]->name, dps[nd].add_out ? " with add" : "",
                    vkp_shader_name(dps[nd].shader), dps[nd].shader == VKP_SH_NORM_MUL_REG || dps[nd].shader == VKP_SH_NORM_MUL_REG_ADD
                    ? (p[96 + 1] ? " vec4" : " scalar") : "");
        nd++;
        if (dps[nd - 1].b16 == 2) {   /* gemm_b16: dequant.comp on the f32 activations first, unless it just ran on them */
            const pyg_tensor *x = dps[nd - 1].slot[1];
            if (x != b16_src && nd >= 2) {   /* the dispatch just before it may write the copy itself */
                int took = 0;
                if ((e = b16_writer(d, g, g->nodes[i], &dps[nd - 2], (uint32_t *)((char *)params + (size_t)(nd - 2) * pstride),
                                    &dps[nd - 1], &took))) goto fail;
                if (took) { b16_src = x; b16_rows = dps[nd - 1].b16_rows; b16_k = dps[nd - 1].b16_k; }
            }
            if (x != b16_src || dps[nd - 1].b16_rows != b16_rows || dps[nd - 1].b16_k != b16_k) {
                dispatch *c = &dps[nd - 1];
                uint32_t *pg_ = (uint32_t *)((char *)params + (size_t)nd * pstride);
                dps[nd] = *c;
                memcpy(pg_, p, (size_t)pstride);
                uint64_t units = c->b16_k / 8 * c->b16_rows * (uint64_t)(x->ne[2] * x->ne[3]);
                memcpy(p, p + 16, 16 * sizeof *p);   /* its slot 0: the activations */
                if ((e = as_dequant(d, c, p, x, units, (uint32_t)c->b16_rows, (uint32_t)(c->b16_k / 8)))) goto fail;
                c->b16 = 1;
                b16_src = x;
                b16_rows = c->b16_rows;
                b16_k = c->b16_k;
                p = pg_;
                nd++;
            }
            dispatch *gm = &dps[nd - 1];
            uint64_t K = gm->b16_k, R = gm->b16_rows;   /* (K, ne1 but padded to whole tiles under gemm_bg) */
            gm->slot[1] = NULL;   /* its slot 1: the copy, f16 rows of K back to back */
            p[16] = 0;
            p[17] = PYG_TYPE_F16;
            p[24] = 2; p[25] = (uint32_t)(2 * K); p[26] = (uint32_t)(2 * K * R);
            p[27] = (uint32_t)(2 * K * R * (uint64_t)x->ne[2]);
            p[96 + 1] = 1;   /* (16-byte rows) */
            if (gm->b16_size > b16_size) b16_size = gm->b16_size;
        }
        if (dps[nd - 1].dq == 2) {   /* gemm_dq: dequant.comp first, the GEMM after it reading the f16 copy */
            dispatch *q = &dps[nd - 1], *gm = &dps[nd];
            uint32_t *pg_ = (uint32_t *)((char *)params + (size_t)nd * pstride);
            *gm = *q;
            memcpy(pg_, p, (size_t)pstride);
            const pyg_tensor *w = q->slot[0];
            uint64_t K = (uint64_t)w->ne[0], units = K / 8 * (uint64_t)(w->ne[1] * w->ne[2] * w->ne[3]);
            if ((e = as_dequant(d, q, p, w, units, 0, 0))) goto fail;
            q->dq = 1;
            gm->slot[0] = NULL;   /* its slot 0: the scratch, f16 rows of K back to back */
            pg_[0] = 0;
            pg_[1] = PYG_TYPE_F16;
            pg_[8] = 2; pg_[9] = (uint32_t)(2 * K); pg_[10] = (uint32_t)(2 * K * (uint64_t)w->ne[1]);
            pg_[11] = (uint32_t)(2 * K * (uint64_t)(w->ne[1] * w->ne[2]));
            if (q->scratch_size > dq_size) dq_size = q->scratch_size;
            p = pg_;   /* (the GEMM's parameters, for its split pass below) */
            nd++;
        }
        if (dps[nd - 1].ks == 1 && !dps[nd - 1].ks_tiles) {   /* gemm_splitk: the pass adding its splits (vk_splitk.c) */
            if ((e = vkp_splitk_pass(d, &dps[nd - 1], p, &dps[nd], (uint32_t *)((char *)params + (size_t)nd * pstride), pstride))) goto fail;
            nd++;
            continue;
        }
        if (dps[nd - 1].nfold == 1) {   /* fold_norm: its int8 copy and sums of squares, a region of its own */
            dps[nd - 1].scratch_off = scratch_total;
            scratch_total += (dps[nd - 1].scratch_size + align - 1) / align * align;
            continue;
        }
        if ((e = vkp_fa_span(d, dps, &nd, params, pstride, align, &scratch_total))) goto fail;   /* (fa_span) */
        if (dps[nd - 1].fa_split) {   /* the combine pass: same operands, reads the partials */
            dispatch *a = &dps[nd - 1], *c = &dps[nd];
            a->scratch_off = scratch_total;
            scratch_total += (a->scratch_size + align - 1) / align * align;
            if (a->fa_fold) continue;   /* flash_attn_dec merges in its last workgroup */
            *c = *a;
            uint32_t *pc = (uint32_t *)((char *)params + (size_t)nd * pstride);
            memcpy(pc, p, (size_t)pstride);
            const pyg_tensor *q = a->slot[0];   /* a workgroup per query row (the split pass's work: rows or query blocks) */
            uint32_t rows = (uint32_t)(q->ne[1] * q->ne[2] * q->ne[3]);
            pc[96] = rows;
            pc[96 + 2] = a->fa_split;   /* (the merge's split count; flash_attn_cm2s keeps its mask flag there) */
            vkp_fold_groups(rows, c->groups);
            uint32_t specs[2] = { 2, 1 };
            c->spec0 = 2;
            c->shader = VKP_SH_FLASH_ATTN;   /* (both builds' partials merge in flash_attn.comp) */
            if ((e = vkp_get_pipeline(d, VKP_SH_FLASH_ATTN, specs, &c->pipe))) goto fail;
            nd++;
        }
    }
    {   /* fold_nodes: the add + norm dispatches whose nodes other dispatches write are left out */
        int kept = 0;
        for (int i = 0; i < nd; i++) {
            if (dps[i].dropped) continue;
            if (kept != i) {
                dps[kept] = dps[i];
                memcpy((char *)params + (size_t)kept * pstride, (char *)params + (size_t)i * pstride, (size_t)pstride);
            }
            kept++;
        }
        nd = kept;
    }
    plan->n_dispatch = nd;
    uint64_t q8_size = 0;   /* mv_q8: the norms whose int8 copy a mat-vec reads write it (one region they share in turn) */
    for (int i = 0; i < nd; i++) {
        if (dps[i].q8 != 1) continue;
        if (!dps[i].q8_n) { dps[i].q8 = 0; continue; }
        dps[i].shader = dps[i].shader == VKP_SH_NORM_MUL_REG ? VKP_SH_NORM_MUL_REG_Q8 : VKP_SH_NORM_MUL_REG_ADD_Q8;
        if ((e = vkp_get_pipeline(d, dps[i].shader, (uint32_t[2]){ 0, vkp_rows_per_wg(d) }, &dps[i].pipe))) goto fail;
        vkp_log(PYG_LOG_DEBUG, "rms_norm '%s': int8 copy for %d mat-vec(s)", dps[i].slot[3]->name, dps[i].q8_n);
        if (dps[i].q8_size > q8_size) q8_size = dps[i].q8_size;
    }
    if (q8_size > 0) {
        for (int i = 0; i < nd; i++) if (dps[i].q8) { dps[i].q8_off = scratch_total; dps[i].q8_size = q8_size; }
        scratch_total += (q8_size + align - 1) / align * align;
    }
    uint64_t ks_cnt = 0;   /* gemm_splitk: one region the split GEMMs share; splitk_last's counters at its start */
    vkp_splitk_layout(dps, nd, params, pstride, align, &scratch_total, &ks_cnt);
    if (dq_size > 0) {   /* one region every dequant / GEMM pair shares (their stages keep them in order) */
        for (int i = 0; i < nd; i++) if (dps[i].dq) { dps[i].scratch_off = scratch_total; dps[i].scratch_size = dq_size; }
        scratch_total += (dq_size + align - 1) / align * align;
    }
    if (b16_size > 0) {   /* the same for the activations' copies */
        for (int i = 0; i < nd; i++) if (dps[i].b16) { dps[i].b16_off = scratch_total; dps[i].b16_size = b16_size; }
        scratch_total += (b16_size + align - 1) / align * align;
    }
    if (scratch_total > 0) {
        void *smap;
        if ((e = vkp_raw_device_buffer(d, scratch_total, &plan->sbuf, &plan->smem, &smap))) goto fail;
    }

    /* parameter blocks, written once: device-local memory where params_dev is on (auto: GPUs),
     * uploaded here (on the H200 a host-visible block cost a trivial dispatch 10 us: every
     * dependent read of it a trip over the bus), else one host-visible buffer */
    {
        uint64_t psize = (uint64_t)(nd > 0 ? nd : 1) * pstride;
        if (vkp_auto_on(d, d->opts.params_dev)) {
            if ((e = vkp_api_buffer_alloc(d, psize, 0, &plan->pobj))) goto fail;
            plan->pbuf = plan->pobj->buf;
            if ((e = vkp_api_buffer_write(plan->pobj, 0, params, (uint64_t)nd * pstride))) goto fail;
        } else {
            void *map;
            if ((e = vkp_raw_host_buffer(d, psize, &plan->pbuf, &plan->pmem, &map))) goto fail;
            memcpy(map, params, (size_t)((uint64_t)nd * pstride));
        }
    }

    /* descriptor sets (vk_descriptors.c) */
    VkDescriptorSet *sets = NULL;
    if ((e = vkp_plan_descriptors(d, plan, dps, nd, pstride, &sets))) goto fail;

    /* record once; graph_plan_compute resubmits (SIMULTANEOUS_USE: a new compute may be queued
     * while the previous one still runs; the stream's timeline orders them) */
    {
        VkCommandPoolCreateInfo pi = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = d->queue_family };
        VkResult r = d->fn.vkCreateCommandPool(d->dev, &pi, NULL, &plan->pool);
        if (r != VK_SUCCESS) { free(sets); e = vkp_vk_err(r, "vkCreateCommandPool"); goto fail; }
        VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
            .commandPool = plan->pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
        r = d->fn.vkAllocateCommandBuffers(d->dev, &ai, &plan->cb);
        VkCommandBufferBeginInfo bgi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            .flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT };
        if (r == VK_SUCCESS) r = d->fn.vkBeginCommandBuffer(plan->cb, &bgi);
        if (r != VK_SUCCESS) { free(sets); e = vkp_vk_err(r, "recording the plan"); goto fail; }
        int nfill = 0;   /* flash_attn_dec's row counters and splitk_last's tile counters start at 0 in every run */
        for (int i = 0; i < nd; i++)
            if (dps[i].fa_fold) {
                d->fn.vkCmdFillBuffer(plan->cb, plan->sbuf, dps[i].scratch_off + dps[i].scratch_size - dps[i].fa_fold, dps[i].fa_fold, 0);
                nfill++;
            }
        for (int i = 0; i < nd && ks_cnt; i++)
            if (dps[i].ks) { d->fn.vkCmdFillBuffer(plan->cb, plan->sbuf, dps[i].ks_off, ks_cnt, 0); nfill++; break; }
        if (nfill) {
            VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT };
            d->fn.vkCmdPipelineBarrier(plan->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
        }
        if (VKP_PROF && d->timestamps && nd > 0) {
            VkQueryPoolCreateInfo qi = { .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = (uint32_t)nd + 1 };
            plan->ops = calloc((size_t)nd, sizeof *plan->ops);
            plan->labels = calloc((size_t)nd, sizeof *plan->labels);
            plan->bytes = calloc((size_t)nd, sizeof *plan->bytes);
            if (plan->ops && plan->bytes && plan->labels && d->fn.vkCreateQueryPool(d->dev, &qi, NULL, &plan->qpool) == VK_SUCCESS) {
                d->fn.vkCmdResetQueryPool(plan->cb, plan->qpool, 0, (uint32_t)nd + 1);
                d->fn.vkCmdWriteTimestamp(plan->cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, plan->qpool, 0);
            } else {
                plan->qpool = VK_NULL_HANDLE;
            }
        }
        if (vkp_validation_active()) {
            plan->acc = calloc((size_t)nd * VKP_RPD + 1, sizeof *plan->acc);   /* (every range of every dispatch, at most) */
            plan->acc_write = calloc((size_t)nd * VKP_RPD + 1, 1);
            if (!plan->acc || !plan->acc_write) { free(sets); e = vkp_err(PYG_ERR_OUT_OF_MEMORY, "plan"); goto fail; }
        }
        /* what each dispatch reads and writes: the tensor slots, a fused add's output, its scratch
         * (flash attention's partials, marked written by the split and the merge alike) */
        const int RPD = VKP_RPD;
        range *rg = calloc((size_t)nd * RPD + 1, sizeof *rg);
        unsigned char *rgw = calloc((size_t)nd * RPD + 1, 1);
        int *nrg = calloc((size_t)nd + 1, sizeof *nrg), *level = calloc((size_t)nd + 1, sizeof *level);
        int *order = calloc((size_t)nd + 1, sizeof *order), *cnt = calloc((size_t)nd + 2, sizeof *cnt);   /* stages <= nd */
        if (!rg || !rgw || !nrg || !level || !order || !cnt) {
            free(rg); free(rgw); free(nrg); free(level); free(order); free(cnt); free(sets);
            e = vkp_err(PYG_ERR_OUT_OF_MEMORY, "plan"); goto fail;
        }
        for (int i = 0; i < nd; i++) {
            nrg[i] = vkp_dispatch_ranges(plan, &dps[i], rg + (size_t)i * RPD, rgw + (size_t)i * RPD);
            for (int a = 0; plan->acc && a < nrg[i]; a++) {   /* (the sanitizer checks pyg_buffers: not the plan's scratch) */
                if (rg[(size_t)i * RPD + a].buf == (const pyg_buffer *)(const void *)plan) continue;
                plan->acc_write[plan->n_acc] = rgw[(size_t)i * RPD + a];
                plan->acc[plan->n_acc++] = rg[(size_t)i * RPD + a];
            }
        }
        int nstage = vkp_plan_levels(d, nd, rg, rgw, nrg, level);
        if (d->opts.barrier == VKP_BARRIER_EVENT && nstage > 1) {   /* one event per stage boundary */
            plan->events = calloc((size_t)nstage, sizeof *plan->events);
            VkEventCreateInfo eci = { .sType = VK_STRUCTURE_TYPE_EVENT_CREATE_INFO };
            while (plan->events && plan->n_events < nstage - 1 &&
                   d->fn.vkCreateEvent(d->dev, &eci, NULL, &plan->events[plan->n_events]) == VK_SUCCESS)
                plan->n_events++;
            if (plan->n_events < nstage - 1) {
                free(rg); free(rgw); free(nrg); free(level); free(order); free(cnt); free(sets);
                e = vkp_err(PYG_ERR_OUT_OF_MEMORY, "barrier=event: %d events", nstage - 1);
                goto fail;
            }
        }
        for (int i = 0; i < nd; i++) cnt[level[i] + 1]++;   /* stable counting sort by stage */
        for (int l = 0; l < nstage; l++) cnt[l + 1] += cnt[l];
        for (int i = 0; i < nd; i++) order[cnt[level[i]]++] = i;
        int stage0 = 0;   /* where the current stage starts in order[] */
        char stage_line[512] = "";   /* profiling: each stage's kernels at debug level (where barriers fall) */
        size_t sl = 0;
        for (int k = 0; k < nd; k++) {
            int i = order[k];
            if (plan->qpool && k > 0 && level[i] != level[order[k - 1]]) {
                vkp_log(PYG_LOG_DEBUG, "plan for graph %llu, stage %d: %s", (unsigned long long)g->id, level[order[k - 1]], stage_line);
                sl = 0; stage_line[0] = 0;
            }
            if (plan->qpool && sl + 1 < sizeof stage_line) {
                int w = snprintf(stage_line + sl, sizeof stage_line - sl, "%s%s", sl ? " " : "", vkp_prof_label_name(profile_label(&dps[i])));
                if (w > 0) sl += (size_t)w;
            }
            if (k > 0 && level[i] != level[order[k - 1]]) {
                if (!d->opts.debug_drop_barriers && (e = vkp_stage_barrier(d, plan, rg, rgw, nrg, RPD, order, stage0, k))) {
                    free(rg); free(rgw); free(nrg); free(level); free(order); free(cnt); free(sets);
                    goto fail;
                }
                stage0 = k;
            }
            d->fn.vkCmdBindPipeline(plan->cb, VK_PIPELINE_BIND_POINT_COMPUTE, dps[i].pipe);
            d->fn.vkCmdBindDescriptorSets(plan->cb, VK_PIPELINE_BIND_POINT_COMPUTE, d->layout, 0, 1, &sets[i], 0, NULL);
            d->fn.vkCmdDispatch(plan->cb, dps[i].groups[0], dps[i].groups[1], dps[i].groups[2]);
            if (plan->qpool) {   /* the profile's k-th interval is this dispatch */
                plan->ops[k] = dps[i].op;
                plan->labels[k] = profile_label(&dps[i]);
                plan->bytes[k] = 0;
                for (int s = 0; s < VKP_NBIND; s++)
                    if (dps[i].slot[s]) plan->bytes[k] += pyg_tensor_nbytes(dps[i].slot[s]);
                d->fn.vkCmdWriteTimestamp(plan->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, plan->qpool, (uint32_t)k + 1);
            }
        }
        if (plan->qpool && nd > 0)
            vkp_log(PYG_LOG_DEBUG, "plan for graph %llu, stage %d: %s", (unsigned long long)g->id, level[order[nd - 1]], stage_line);
        free(rg); free(rgw); free(nrg); free(level); free(order); free(cnt);
        vkp_full_barrier(d, plan->cb);
        for (int i = 0; i < plan->n_events; i++)   /* (after the full barrier: no wait on them is in progress) */
            d->fn.vkCmdResetEvent(plan->cb, plan->events[i], VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT);
        r = d->fn.vkEndCommandBuffer(plan->cb);
        free(sets);
        if (r != VK_SUCCESS) { e = vkp_vk_err(r, "vkEndCommandBuffer"); goto fail; }
    }
    vkp_log(PYG_LOG_DEBUG, "plan for graph %llu: %d dispatches, %d barriers, parameters in %s memory", (unsigned long long)g->id,
            plan->n_dispatch, plan->n_barriers, plan->pobj ? "device-local" : "host-visible");
    free(dps); free(params); free(done);
    *out = plan;
    return NULL;
fail:
    free(dps); free(params); free(done);
    vkp_plan_destroy(plan);
    return e;
}

/* Profiling: the previous submission's timestamps (it must be done before the pool is reset by
 * the next one: the wait is part of profiling's cost, not of normal runs). */
static void profile_collect(pyg_graph_plan *plan) {
    pyg_device *d = plan->dev;
    if (!plan->ts_sem) return;
    VkSemaphoreWaitInfo wi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
        .pSemaphores = &plan->ts_sem, .pValues = &plan->ts_val };
    d->fn.vkWaitSemaphores(d->dev, &wi, UINT64_MAX);
    plan->ts_sem = VK_NULL_HANDLE;
    uint32_t n = (uint32_t)plan->n_dispatch + 1;
    uint64_t *ts = calloc(n, sizeof *ts);
    if (!ts) return;
    if (d->fn.vkGetQueryPoolResults(d->dev, plan->qpool, 0, n, n * sizeof *ts, ts, sizeof *ts,
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
        for (uint32_t i = 1; i < n; i++)
            vkp_prof_add_gpu(plan->ops[i - 1], plan->labels[i - 1], ts[i] > ts[i - 1] ? (uint64_t)((double)(ts[i] - ts[i - 1]) * d->ts_period) : 0,
                             plan->bytes[i - 1]);
    free(ts);
}

pyg_error *vkp_plan_compute(pyg_graph_plan *plan, pyg_stream *s) {
    if (s->dev != plan->dev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: stream of another device");
    if (plan->n_dispatch == 0) return NULL;
    uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
    if (plan->qpool) profile_collect(plan);
    pyg_error *e = plan->n_rps ? vkp_repack_ensure(plan->rps, plan->n_rps, s) : NULL;   /* stale copies made again first */
    if (!e) e = vkp_submit(s, plan->cb);
    if (plan->qpool && !e) { plan->ts_sem = s->timeline; plan->ts_val = s->value; }
    if (VKP_PROF) { vkp_prof.plan_computes++; vkp_prof.compute_ns += vkp_now_ns() - t0; }
    for (int i = 0; !e && i < plan->n_acc; i++)
        vkp_val_queued((pyg_buffer *)plan->acc[i].buf, plan->acc[i].lo, plan->acc[i].hi, plan->acc_write[i], s->vid, s->value);
    return e;
}
