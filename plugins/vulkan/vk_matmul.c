/* plugins/vulkan/vk_matmul.c — which kernel runs a MUL_MAT node.
 *
 *   N = 1, q4_0 leaf  mul_mat_vec_rp.comp on the weight's repacked copy (option matvec_rp, the default, and q4_K /
 *                     q6_K leaves with matvec_rp_k, the default; vk_repack.c;
 *                     vk_fuse.c runs a gate, an up and their swiglu as one mul_mat_vec_rpg), else
 *   N <= 4 (decode)   mul_mat_vec3.comp for q4_0/q8_0 (option matvec=3, where its layout conditions
 *                     hold: activations staged in shared memory, 8 << matvec_rows rows per
 *                     workgroup: 16 by default), else
 *                     mul_mat_vec2.comp: wide loads, NR rows per subgroup (option matvec=2, the
 *                     default, and 3, where its layout conditions hold), else mul_mat_vec.comp (matvec=1)
 *   N > 4 (prefill)   mul_mat_cm.comp: cooperative-matrix tiles (64 or 128 square: gemm_tile; pipelined
 *                     build mul_mat_cm2*, or mul_mat_cm3.comp's 16-byte tile stores: gemm_v) on the tensor cores where the device
 *                     has VK_NV_cooperative_matrix with a 16x16x16 f16 -> f32 shape (option gemm=auto
 *                     or coopmat), else the 64x64 tiled mul_mat.comp (gemm=tiled, and every device
 *                     without the extension: lavapipe); gemm_v=4: mul_mat_cm4.comp in the configuration
 *                     gemm_cfg names (vkp_gemm_cfgs below)
 * Every choice is logged once per plan at debug level ("mul_mat 'name': kernel"), which is how the
 * tests see the selection. */
#include <stdio.h>
#include <string.h>
#include "vk_internal.h"

/* mul_mat_cm4.comp's configurations (gemm_v=4, option gemm_cfg; the shader's header says what each
 * field does): tile M x N, K step, subgroups along M x N, k-groups, shared-memory stages, register
 * prefetch. Named TMxTN.kBK.wWMxWN, then .ks2 (two k-groups), .s1 (one stage), .np (no prefetch). */
typedef struct { uint8_t bm, bn, bk, wm, wn, ks, st, pf; } vkp_gemm_cfg;
static const vkp_gemm_cfg vkp_gemm_cfgs[] = {
    { 64, 64, 32, 2, 2, 1, 2, 1 },  { 64, 64, 32, 2, 2, 1, 2, 0 },  { 64, 64, 64, 2, 2, 1, 2, 1 },
    { 64, 64, 64, 2, 2, 2, 2, 1 },  { 64, 64, 32, 2, 2, 2, 2, 1 },  { 32, 64, 64, 1, 2, 1, 2, 1 },
    { 128, 64, 32, 2, 2, 1, 2, 1 }, { 64, 128, 32, 2, 2, 1, 2, 1 }, { 128, 128, 32, 2, 2, 1, 2, 1 },
    { 128, 128, 32, 2, 4, 1, 2, 1 }, { 128, 128, 32, 2, 2, 1, 1, 1 }, { 64, 64, 64, 2, 2, 2, 1, 1 },
    { 128, 128, 64, 2, 4, 1, 2, 1 }, { 64, 128, 64, 2, 2, 1, 2, 1 }, { 128, 64, 64, 2, 2, 1, 2, 1 },
    { 128, 128, 64, 2, 2, 1, 2, 1 },   /* (64 x 64 per subgroup: with gemm_bg, two stages fit 48 KiB) */
    /* eight subgroups on one k64 stage (NVIDIA's 48 KiB): the auto tiles with two k-groups, 64x128 as 32x32 blocks,
     * and 128x128 as the auto tile's 32x64 blocks */
    { 64, 128, 64, 2, 2, 2, 1, 1 },  { 128, 64, 64, 2, 2, 2, 1, 1 },  { 64, 128, 64, 2, 4, 1, 1, 1 },
    { 128, 128, 64, 4, 2, 1, 1, 1 },
};
const char *const vkp_gemm_cfg_names[] = {   /* "auto", then vkp_gemm_cfgs' names in order */
    "auto", "64x64.k32.w2x2", "64x64.k32.w2x2.np", "64x64.k64.w2x2", "64x64.k64.w2x2.ks2", "64x64.k32.w2x2.ks2",
    "32x64.k64.w1x2", "128x64.k32.w2x2", "64x128.k32.w2x2", "128x128.k32.w2x2", "128x128.k32.w2x4",
    "128x128.k32.w2x2.s1", "64x64.k64.w2x2.ks2.s1", "128x128.k64.w2x4", "64x128.k64.w2x2", "128x64.k64.w2x2",
    "128x128.k64.w2x2", "64x128.k64.w2x2.ks2.s1", "128x64.k64.w2x2.ks2.s1", "64x128.k64.w2x4.s1", "128x128.k64.w4x2.s1",
    NULL,
};
#define VKP_GEMM_CFGS ((int)(sizeof vkp_gemm_cfgs / sizeof vkp_gemm_cfgs[0]))

static uint32_t lg2(uint32_t v) { uint32_t r = 0; while (v > 1) { v >>= 1; r++; } return r; }

/* the configuration's name (the debug log's kernel name: tests compare it with the option's value) */
static void gemm_cfg_name(const vkp_gemm_cfg *c, int parts, char *buf, size_t n) {
    static const char *const dg[] = { "", ".dnl", ".dnm", ".dmo", ".dsk", ".dmj" };   /* option debug_gemm_parts */
    snprintf(buf, n, "mul_mat_cm4 %ux%u.k%u.w%ux%u%s%s%s%s", c->bm, c->bn, c->bk, c->wm, c->wn, c->ks == 2 ? ".ks2" : "",
             c->st == 1 ? ".s1" : "", c->pf ? "" : ".np", dg[parts >= 0 && parts <= 5 ? parts : 0]);
}

/* specialization constant 0 of mul_mat_cm4.comp: the weight type | the configuration << 8 | the
 * measurement switch debug_gemm_parts << 20 (vkp_mul_mat_setup adds cm_acc=f16* << 23, gemm_dq's 16-byte f16 rows << 24,
 * gemm_b16's f16 activations << 25, gemm_bg's fragments of them from global memory << 26 and log2 of cm_acc's steps per
 * f16 sum << 27) */
static uint32_t gemm_cfg_spec(const vkp_gemm_cfg *c, int type, int parts) {
    return (uint32_t)type | lg2(c->bm / 32u) << 8 | lg2(c->bn / 32u) << 10 | (c->bk == 64u) << 12 | lg2(c->wm) << 13 |
           lg2(c->wn) << 15 | (c->st == 2u) << 17 | (uint32_t)c->pf << 18 | (c->ks == 2u) << 19 | (uint32_t)parts << 20;
}

/* its shared memory: the f16 tiles (rows of BK + 8 halves) per stage and a 1 KiB staging tile per subgroup
 * (bg, gemm_bg: no activation tiles) */
static uint64_t gemm_cfg_shared_bg(const vkp_gemm_cfg *c, int bg) {
    return (uint64_t)c->st * (c->bm + (bg ? 0u : c->bn)) * (c->bk + 8u) * 2u + (uint64_t)c->wm * c->wn * c->ks * 1024u + (bg ? 16u : 0u);
}

/* What the wide-load mat-vec kernels share: rows contiguous, f32 activations whose rows start on 16
 * bytes; *o0 is the weights' offset in their binding. */
static int mv_layout_ok(const pyg_device *d, const pyg_tensor *s0, const pyg_tensor *s1, uint64_t *o0) {
    const pyg_buffer *b0 = NULL, *b1 = NULL; uint64_t o1 = 0;
    uint64_t align = d->props.limits.minStorageBufferOffsetAlignment;
    if (align % 16 && 16 % align) return 0;   /* binding starts must keep 16-byte offsets 16-byte aligned */
    if (!vkp_resolve(s0, &b0, o0) || !vkp_resolve(s1, &b1, &o1)) return 0;
    if (s1->type != PYG_TYPE_F32 || s1->nb[0] != 4 || o1 % 16 || s1->nb[1] % 16 || s1->nb[2] % 16 || s1->nb[3] % 16) return 0;
    return pyg_tensor_rows_contiguous(s0);
}

/* mul_mat_vec3.comp's: q4_0 or q8_0 (and q4_K in its int8 builds), K a multiple of its 256-element
 * units (then a row is whole 16-byte words), weight rows starting on 16 bytes. */
static int mv3_ok(const pyg_device *d, const pyg_tensor *s0, const pyg_tensor *s1, int int8) {
    uint64_t o0 = 0;
    int ty_ok = s0->type == PYG_TYPE_Q4_0 || s0->type == PYG_TYPE_Q8_0 || (int8 && s0->type == PYG_TYPE_Q4_K);
    if (!ty_ok || s0->ne[0] % 256) return 0;
    if (!mv_layout_ok(d, s0, s1, &o0)) return 0;
    return o0 % 16 == 0 && s0->nb[1] % 16 == 0 && s0->nb[2] % 16 == 0 && s0->nb[3] % 16 == 0;
}

/* mul_mat_vec2.comp's layout conditions: the shared ones, weights whose rows start on 16 bytes where
 * they are read as 16-byte words (q4_K, plain types), K a whole number of the kernel's units. */
static int mv2_ok(const pyg_device *d, const pyg_tensor *s0, const pyg_tensor *s1) {
    uint64_t o0 = 0;
    if (!mv_layout_ok(d, s0, s1, &o0)) return 0;
    int64_t K = s0->ne[0];
    switch (s0->type) {
    case PYG_TYPE_Q4_0: case PYG_TYPE_Q8_0: case PYG_TYPE_Q6_K:
        return o0 % 2 == 0 && s0->nb[1] % 2 == 0 && s0->nb[2] % 2 == 0 && s0->nb[3] % 2 == 0;
    case PYG_TYPE_Q4_K: case PYG_TYPE_F32: case PYG_TYPE_F16: case PYG_TYPE_BF16:
        if (s0->type != PYG_TYPE_Q4_K && K % (s0->type == PYG_TYPE_F32 ? 4 : 8)) return 0;
        return o0 % 16 == 0 && s0->nb[1] % 16 == 0 && s0->nb[2] % 16 == 0 && s0->nb[3] % 16 == 0;
    default:
        return 0;
    }
}

/* The coopmat GEMM: a device with the extension (vk_caps.c), f32 activations with contiguous rows, an
 * f32 destination with contiguous rows, K a multiple of its 32-element steps, weight types it
 * dequantizes, 32-wide subgroups (its 2x2 subgroup layout of a 128-invocation workgroup). */
static int cm_ok(const pyg_device *d, const pyg_tensor *n, const pyg_tensor *s0, const pyg_tensor *s1) {
    if (d->cm_broken) return 0;
    if (d->opts.gemm == VKP_GEMM_CM_EMULATED) {   /* any subgroup size from 8 (its per-lane tile share) */
        if (d->subgroup_size < 8 || d->subgroup_size > 64) return 0;
    } else if (d->opts.gemm == VKP_GEMM_TILED || !d->coopmat || d->subgroup_size != 32) {
        return 0;
    }
    if (s0->ne[0] % 32 || s1->nb[0] != 4 || s1->type != PYG_TYPE_F32) return 0;
    if (n->nb[0] != 4 || !pyg_tensor_rows_contiguous(s0)) return 0;
    switch (s0->type) {
    case PYG_TYPE_Q4_0: case PYG_TYPE_Q4_1: case PYG_TYPE_Q8_0: case PYG_TYPE_Q4_K: case PYG_TYPE_Q6_K:
    case PYG_TYPE_F32: case PYG_TYPE_F16: case PYG_TYPE_BF16:
        return 1;
    default:
        return 0;
    }
}

/* A new kernel whose pipeline the driver refuses (a compiler failure on an untested driver) is
 * logged and not chosen again on this device; the earlier kernel runs instead. */
int vkp_pipeline_usable(pyg_device *d, int shader, const uint32_t spec[2], int *disable) {
    VkPipeline p;
    pyg_error *e = vkp_get_pipeline(d, shader, spec, &p);
    if (!e) return 1;
    vkp_log(PYG_LOG_WARN, "%s: the %s pipeline failed (%s); using the earlier kernel", d->props.deviceName,
            vkp_shader_name(shader), vkp_error_text(e));
    vkp_error_free(e);
    *disable = 1;
    return 0;
}

/* mul_mat_vec3.comp's builds for node n where its layout holds and the pipeline is usable:
 * specialization (type | rows per workgroup << 8), workgroups (one per row group and column).
 * mul_mat_vec3 has 8 << matvec_rows rows per workgroup (8, 16 or 32; default 16); its 128
 * invocations take 128 / rows units of 256 elements per chunk: 1 KiB of shared activations each.
 * mul_mat_vec3w and mul_mat_vec4 (matvec=6, 7) hold the whole row as int8 (K <= 16384);
 * mul_mat_vec4 also wants q4_0 rows back to back (a workgroup's rows are one run of bytes), a
 * subgroup size dividing its 128 invocations, and specializes on the units per row (<< 16). */
static int mv3_whole_row(int shader) {   /* mul_mat_vec3.comp's MV_WHOLE builds */
    return shader == VKP_SH_MUL_MAT_VEC3W || shader == VKP_SH_MUL_MAT_VEC3S || shader == VKP_SH_MUL_MAT_VEC3N ||
           shader == VKP_SH_MUL_MAT_VEC3Q;
}

static int mv3_plan(pyg_device *d, const pyg_tensor *n, int shader, int *broken, uint32_t spec[2], uint64_t *work) {
    const pyg_tensor *s0 = n->src[0], *s1 = n->src[1];
    uint32_t rw = 8u << d->opts.matvec_rows, sp[2] = { (uint32_t)s0->type | rw << 8, 1 };
    uint64_t shared = 128u / rw * 1024u + 512u, K = (uint64_t)s0->ne[0], wu = K / 256u;
    if (mv3_whole_row(shader) || shader == VKP_SH_MUL_MAT_VEC4) {   /* the whole row as int8 */
        if (K > 16384 || !d->int_dot) return 0;
        shared = 64u * 256u + 64u * 8u * 8u + 512u;   /* 64 units and their per-block (d, sum) */
    }
    if (shader == VKP_SH_MUL_MAT_VEC3W) sp[0] |= (uint32_t)d->opts.debug_mv_parts << 16;   /* (measurement: results wrong) */
    if (mv3_whole_row(shader)) sp[0] |= (uint32_t)(d->opts.matvec_ahead != 0) << 18;   /* two units loading while the row is staged */
    if (shader == VKP_SH_MUL_MAT_VEC4) {   /* q4_0, rows back to back, a subgroup size dividing 128 */
        if (s0->type != PYG_TYPE_Q4_0 || (uint64_t)s0->nb[1] != K / 32u * 18u) return 0;
        if (d->subgroup_size < 1 || d->subgroup_size > 128 || 128 % d->subgroup_size) return 0;
        /* the row as int8 for this K, each subgroup's chunk of units, one float per unit of the rows */
        shared = wu * 256u + wu * 64u + 128u * 9u * 16u + (uint64_t)rw * wu * 4u;
        sp[0] |= (uint32_t)wu << 16;
    }
    int int8 = shader == VKP_SH_MUL_MAT_VEC3I || mv3_whole_row(shader);   /* (q4_K: the int8 builds only, with option matvec_q4_K) */
    if (*broken || !mv3_ok(d, s0, s1, int8 && d->opts.matvec_q4_K) || shared > d->props.limits.maxComputeSharedMemorySize ||
        !vkp_pipeline_usable(d, shader, sp, broken)) return 0;
    spec[0] = sp[0];
    spec[1] = sp[1];
    *work = ((uint64_t)s0->ne[1] + rw - 1) / rw * (uint64_t)s1->ne[1] * (uint64_t)(s1->ne[2] * s1->ne[3]);
    return 1;
}

/* matvec_rp=1: y = mul_mat(W, x) for one column x (decode) as mul_mat_vec_rp on W's repacked copy (the
 * caller acquires it: vk_repack.c; W a leaf q4_0 weight it accepts), x f32 in mul_mat_vec3's activation
 * layout, y f32 with unit element stride. A workgroup per `rows` rows (8; mul_mat_vec_rpg: 4 of each weight);
 * each invocation owns J = ceil(K / 32 / 256) blocks of K, the workgroup the fewest subgroups of 32 invocations
 * covering the blocks (K = 4096: 128 invocations, one block each; 11008: 192, two each; the CUDA plugin's
 * choice). ex[0]: workgroups, ex[1]: the 16-byte word where the copy's scales start. */
static int rp_plan(pyg_device *d, const pyg_tensor *mm, int shader, int *broken, uint32_t rows, uint32_t spec[2],
                   uint64_t *work, uint32_t *ex) {
    const pyg_tensor *w = mm->src[0], *x = mm->src[1];
    if (!d->opts.matvec_rp || *broken || !d->int_dot || !d->subgroup_arith || mm->op != PYG_OP_MUL_MAT) return 0;
    if (x->ne[1] != 1 || x->ne[2] != 1 || x->ne[3] != 1 || mm->type != PYG_TYPE_F32 || mm->nb[0] != 4) return 0;
    uint64_t o0 = 0;
    if (!vkp_repack_eligible(d, w) || !mv_layout_ok(d, w, x, &o0)) return 0;
    uint64_t nb = (uint64_t)w->ne[0] / 32, J = (nb + 255) / 256, KW = (nb + 32 * J - 1) / (32 * J);
    uint64_t Mp = ((uint64_t)w->ne[1] + 7) / 8 * 8;
    int lit = d->opts.rp_lit && w->type == PYG_TYPE_Q4_0 && J <= 2 && shader != VKP_SH_MUL_MAT_VEC_RPN;   /* (the _q0j* builds) */
    uint32_t sp[2] = { (uint32_t)w->type | (uint32_t)J << 8 | (shader != VKP_SH_MUL_MAT_VEC_RPG && rows == 4 ? 1u << 14 : 0u) |
                       (lit ? 1u << 15 : 0u), (uint32_t)(32 * KW) };
    if (J < 1 || J > 3 || 32 * KW > d->props.limits.maxComputeWorkGroupSize[0] || !vkp_pipeline_usable(d, shader, sp, broken)) return 0;
    spec[0] = sp[0];
    spec[1] = sp[1];
    *work = Mp / rows;
    ex[0] = (uint32_t)*work;
    ex[1] = (uint32_t)(Mp * nb);
    return 1;
}

int vkp_mv_rp_setup(pyg_device *d, const pyg_tensor *mm, uint32_t spec[2], uint64_t *work, uint32_t *ex) {
    return rp_plan(d, mm, VKP_SH_MUL_MAT_VEC_RP, &d->mvrp_broken, 8u >> d->opts.rp_rows, spec, work, ex);
}

/* the same as `shader`, one of its builds with an epilogue (vk_mv_epi.c): mul_mat_vec_rpe, the mat-vec that ropes and/or
 * stores its result too, or mul_mat_vec_rpn, the one that writes the next rms_norm's int8 input too (fold_norm) */
int vkp_mv_rp_epi_setup(pyg_device *d, const pyg_tensor *mm, int shader, uint32_t spec[2], uint64_t *work, uint32_t *ex) {
    int *broken = shader == VKP_SH_MUL_MAT_VEC_RPE ? &d->mvrpe_broken : shader == VKP_SH_MUL_MAT_VEC_RPN ? &d->mvrpn_broken : NULL;
    return broken && rp_plan(d, mm, shader, broken, shader == VKP_SH_MUL_MAT_VEC_RPE ? 8u >> d->opts.rp_rows : 8u, spec, work, ex);
}

/* matvec_rp=1: a = mul_mat(W_a, x), b = mul_mat(W_b, x) and sw = swiglu(a, b) (a model's gate, up and their
 * swiglu in decode) as one mul_mat_vec_rpg dispatch: 4 rows of each weight per workgroup, on both repacked
 * copies (the caller acquires them). W_a and W_b of one shape, both as vkp_mv_rp_setup takes them, x shared,
 * a, b and sw f32 of one shape with unit element stride, sw = swiglu's two-tensor form. The caller checks that
 * what it writes overlaps nothing it reads or writes. */
int vkp_rp_glu_setup(pyg_device *d, const pyg_tensor *a, const pyg_tensor *b, const pyg_tensor *sw, uint32_t spec[2],
                     uint64_t *work, uint32_t *ex) {
    if (!a || !b || !sw || a->op != PYG_OP_MUL_MAT || b->op != PYG_OP_MUL_MAT || sw->op != PYG_OP_SWIGLU) return 0;
    if (sw->src[0] != a || sw->src[1] != b || a->src[1] != b->src[1] || a->src[0] == b->src[0]) return 0;
    const pyg_tensor *wa = a->src[0], *wb = b->src[0];
    if (wa->type != wb->type || sw->type != PYG_TYPE_F32 || sw->nb[0] != 4 || b->type != PYG_TYPE_F32 || b->nb[0] != 4) return 0;
    for (int i = 0; i < 4; i++) if (wa->ne[i] != wb->ne[i] || a->ne[i] != b->ne[i] || sw->ne[i] != a->ne[i]) return 0;
    if (!vkp_supports_op(d, a) || !vkp_supports_op(d, b) || !vkp_supports_op(d, sw) || !vkp_repack_eligible(d, wb)) return 0;
    return rp_plan(d, a, VKP_SH_MUL_MAT_VEC_RPG, &d->mvrpg_broken, 4, spec, work, ex);
}

/* mv_q8=1 (with matvec >= 6): y = mul_mat(W, m) where the fused norm dispatch that wrote m wrote m's
 * int8 blocks too (vk_graph.c checks its side: norm_mul_reg.comp's vec4 path, K a multiple of 256, at
 * most 4 rows) as mul_mat_vec3q, mul_mat_vec3w staging that copy instead of quantizing m: m one f32
 * column block (no batch axes) in mul_mat_vec3's activation layout. */
int vkp_mv3q_setup(pyg_device *d, const pyg_tensor *mm, uint32_t spec[2], uint64_t *work) {
    const pyg_tensor *m = mm->src[1];
    if (!d->opts.mv_q8 || d->opts.matvec < 6 || !d->int_dot || mm->op != PYG_OP_MUL_MAT) return 0;
    if (m->ne[1] > 4 || m->ne[2] != 1 || m->ne[3] != 1 || mm->src[0]->ne[2] != 1 || mm->src[0]->ne[3] != 1) return 0;
    if (!vkp_supports_op(d, mm)) return 0;
    if (d->opts.matvec_rp && m->ne[1] == 1 && vkp_repack_eligible(d, mm->src[0])) return 0;   /* (mul_mat_vec_rp reads the copy
        itself: vk_norm_in.c's vkp_rp_norm_read) */
    return mv3_plan(d, mm, VKP_SH_MUL_MAT_VEC3Q, &d->mv3q_broken, spec, work);
}

/* fuse_swiglu=1 (with matvec >= 6): sw = swiglu(a, b) and y = mul_mat(W, sw) (a model's feed-forward
 * down projection in decode) as one mul_mat_vec3s dispatch: mul_mat_vec3w reading silu(a) * b as
 * its activations (the same float operations as the elementwise swiglu, so the same bytes), the
 * workgroups of the first row group writing sw too. a, b and sw f32 of one shape with unit element
 * stride, a and b in mul_mat_vec3's activation layout, W in its weight layout, N <= 4. The caller
 * checks that what the dispatch writes (sw, y) overlaps nothing it reads or writes elsewhere. */
int vkp_swiglu_mv_setup(pyg_device *d, const pyg_tensor *sw, const pyg_tensor *mm, uint32_t spec[2], uint64_t *work) {
    if (!d->opts.fuse_swiglu || d->opts.matvec < 6 || !d->int_dot || !mm || mm->op != PYG_OP_MUL_MAT) return 0;
    if (sw->op != PYG_OP_SWIGLU || !sw->src[1] || mm->src[1] != sw || mm->src[0] == sw) return 0;
    const pyg_tensor *a = sw->src[0], *b = sw->src[1];
    if (sw->type != PYG_TYPE_F32 || sw->nb[0] != 4 || sw->ne[1] > 4) return 0;
    for (int i = 0; i < 4; i++) if (a->ne[i] != sw->ne[i] || b->ne[i] != sw->ne[i]) return 0;
    uint64_t o0 = 0;
    if (!mv_layout_ok(d, mm->src[0], a, &o0) || !mv_layout_ok(d, mm->src[0], b, &o0)) return 0;
    if (!vkp_supports_op(d, sw) || !vkp_supports_op(d, mm)) return 0;
    return mv3_plan(d, mm, VKP_SH_MUL_MAT_VEC3S, &d->mv3s_broken, spec, work);
}

/* fuse_norm_mv=1 (with matvec >= 6): y = mul_mat(W, m) where m = rms_norm(x [+ r]) * w is a fused
 * norm dispatch's result (norm_mul_reg.comp's vec4 path: the caller checks) as mul_mat_vec3n, which
 * recomputes m's column from x, r and w instead of reading it: x, r and m f32 of one shape in
 * mul_mat_vec3's activation layout, w one f32 row of K, K <= 8192 (that kernel's rows), N <= 4.
 * auto: K <= 2048 (every workgroup stages x, r and w: wider rows cost more than the barrier saved). */
int vkp_norm_mv_setup(pyg_device *d, const pyg_tensor *mm, const pyg_tensor *x, const pyg_tensor *r, const pyg_tensor *w,
                      uint32_t spec[2], uint64_t *work) {
    if (d->opts.fuse_norm_mv == VKP_OFF || d->opts.matvec < 6 || !d->int_dot || !d->subgroup_arith || mm->op != PYG_OP_MUL_MAT) return 0;
    const pyg_tensor *m = mm->src[1], *W = mm->src[0];
    if (d->opts.fuse_norm_mv == VKP_AUTO && m->ne[0] > 2048) return 0;   /* H200 at 38f1ca1: 7b (4096) 237 vs 253 t/s, 1b (2048) 701 vs 673 */
    if (d->opts.fuse_norm_mv == VKP_AUTO && d->opts.matvec_rp && m->ne[1] == 1 && vkp_repack_eligible(d, W)) return 0;   /* (matvec_rp's
        mul_mat_vec_rp instead: H100 at 9ac7d4c, 1b q4_0 750 against 739 t/s with fuse_norm_mv) */
    if (m->ne[0] > 8192 || m->ne[1] > 4 || d->subgroup_size < 2 || d->subgroup_size > 128 || 128 % d->subgroup_size) return 0;
    for (int i = 0; i < 4; i++) if (x->ne[i] != m->ne[i] || (r && r->ne[i] != m->ne[i])) return 0;
    if (w->type != PYG_TYPE_F32 || w->ne[0] != m->ne[0] || w->ne[1] != 1 || w->ne[2] != 1 || w->ne[3] != 1) return 0;
    uint64_t o0 = 0;
    if (!mv_layout_ok(d, W, x, &o0) || (r && !mv_layout_ok(d, W, r, &o0)) || !mv_layout_ok(d, W, w, &o0)) return 0;
    if (!vkp_supports_op(d, mm)) return 0;
    return mv3_plan(d, mm, VKP_SH_MUL_MAT_VEC3N, &d->mv3n_broken, spec, work);
}

/* fuse_glu=1: a = mul_mat(W_a, x), b = mul_mat(W_b, x) and sw = swiglu(a, b) (a model's gate, up and
 * their swiglu) as one mul_mat_vec3g dispatch: W_a and W_b of one type and shape in mul_mat_vec3's
 * layout, x shared with N <= 4, a and b f32 with unit element stride, sw of their shape. The
 * caller checks that what the dispatch writes (a, b, sw) overlaps nothing else it touches. */
int vkp_glu_setup(pyg_device *d, const pyg_tensor *a, const pyg_tensor *b, const pyg_tensor *sw,
                  uint32_t spec[2], uint64_t *work) {
    if (!d->opts.fuse_glu || a->op != PYG_OP_MUL_MAT || !b || b->op != PYG_OP_MUL_MAT || !sw) return 0;
    if (sw->op != PYG_OP_SWIGLU || sw->src[0] != a || sw->src[1] != b || a->src[1] != b->src[1]) return 0;
    const pyg_tensor *wa = a->src[0], *wb = b->src[0];
    if (wa->type != wb->type || a->src[1]->ne[1] > 4) return 0;
    for (int i = 0; i < 4; i++)
        if (wa->ne[i] != wb->ne[i] || a->ne[i] != b->ne[i] || sw->ne[i] != a->ne[i]) return 0;
    if (a->type != PYG_TYPE_F32 || b->type != PYG_TYPE_F32 || a->nb[0] != 4 || b->nb[0] != 4) return 0;
    if (!vkp_supports_op(d, a) || !vkp_supports_op(d, b) || !vkp_supports_op(d, sw) || !mv3_ok(d, wb, b->src[1], 0)) return 0;
    if (!mv3_plan(d, a, VKP_SH_MUL_MAT_VEC3G, &d->mv3g_broken, spec, work)) return 0;
    return 1;
}

/* gemm_splitk: tiles of bm rows over the other GEMMs (mul_mat) of graph g that read GEMM n's activations (the same
 * tensor through views, as many columns): independent of n, they share its barrier stage */
static uint64_t gemm_share_tiles(const pyg_graph *g, const pyg_tensor *n, uint64_t bm) {
    const pyg_tensor *x = n->src[1];
    while (x->view_src && pyg_op_is_view(x->op)) x = x->view_src;
    uint64_t tiles = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        const pyg_tensor *o = g->nodes[j], *ox = o ? o->src[1] : NULL;
        if (o == n || !o || o->op != PYG_OP_MUL_MAT || !ox || ox->ne[1] != n->src[1]->ne[1]) continue;
        while (ox->view_src && pyg_op_is_view(ox->op)) ox = ox->view_src;
        if (ox == x) tiles += ((uint64_t)o->src[0]->ne[1] + bm - 1) / bm;
    }
    return tiles;
}

pyg_error *vkp_mul_mat_setup(pyg_device *d, const pyg_tensor *n, int *shader, uint32_t spec[2],
                             uint64_t *work, uint32_t *ex, uint64_t dq[4], const pyg_graph *g) {
    const pyg_tensor *s0 = n->src[0], *s1 = n->src[1];
    dq[0] = dq[1] = dq[2] = dq[3] = 0;
    uint64_t M = (uint64_t)s0->ne[1], N = (uint64_t)s1->ne[1], B = (uint64_t)(s1->ne[2] * s1->ne[3]);
    if (M * N * B > 0xFFFFFFFFull) return vkp_err(PYG_ERR_UNSUPPORTED, "mul_mat '%s' too large", n->name);
    const char *kind;
    uint32_t nr = 1u << d->opts.matvec_rows, sgw = d->subgroup_size >= 1 && d->subgroup_size <= 128 ? 128 / d->subgroup_size : 1;
    uint32_t mv2_spec[2] = { (uint32_t)s0->type | nr << 8, sgw };
    uint32_t cm_spec[2] = { (uint32_t)s0->type, 4 * d->subgroup_size };
    /* auto: 128 x 128 only where that grid still has 512 workgroups (about 4 per SM on a large GPU:
     * 7b's 4096 x 512 projections give 128 at 128 x 128, fewer than an H200's 132 SMs) */
    uint64_t tiles128 = (M + 127) / 128 * ((N + 127) / 128) * B;
    uint64_t tile = d->opts.gemm_tile ? 32u << d->opts.gemm_tile : N >= 128 && tiles128 >= 512 ? 128 : 64;
    int emu = d->opts.gemm == VKP_GEMM_CM_EMULATED, v = (int)d->opts.gemm_v;
    /* gemm_v auto (0): mul_mat_cm4's KHR build where the device and the build have it (H200 at b0da051,
     * cm_acc=f16: q4_0 GEMMs 40-43 TFLOPS at 64x64.k64.w2x2.ks2 against mul_mat_cm3's 24-31; pp512 1b
     * 12.2k t/s, 7b 2.69k against 2.01k), else mul_mat_cm3 */
    int khr = !emu && d->opts.cm_api != VKP_CM_API_NV && vkp_cm_khr_usable(d);
    if (v == 0) v = khr ? 4 : 3;
    static const int cm_shaders[3][2][2] = {   /* [gemm_v - 1][tile 128][emulated] */
        { { VKP_SH_MUL_MAT_CM, VKP_SH_MUL_MAT_CM_EMU }, { VKP_SH_MUL_MAT_CM128, VKP_SH_MUL_MAT_CM128_EMU } },
        { { VKP_SH_MUL_MAT_CM2, VKP_SH_MUL_MAT_CM2_EMU }, { VKP_SH_MUL_MAT_CM2_128, VKP_SH_MUL_MAT_CM2_128_EMU } },
        { { VKP_SH_MUL_MAT_CM3, VKP_SH_MUL_MAT_CM3_EMU }, { VKP_SH_MUL_MAT_CM3_128, VKP_SH_MUL_MAT_CM3_128_EMU } },
    };
    int cm_shader = cm_shaders[v >= 1 && v <= 3 ? v - 1 : 1][tile == 128][emu];
    /* shared memory: the f16 weight and activation tiles (rows of 40 halves; two stages from gemm_v 2)
     * and 4 KiB of staging */
    uint64_t cm_shared = (v >= 2 ? 2u : 1u) * 2u * tile * 40u * 2u + 4096u, tile_m = tile, tile_n = tile;
    int *cm_disable = &d->cm_broken, cm4_bad = 0, ci = 0;
    uint64_t cm4_dq = 0, cm4_b16 = 0, cm4_np = 0, cm4_kp = 0;   /* gemm_dq, gemm_b16: the f16 copies' bytes; the activation copy's rows, row length */
    uint64_t cm4_nsp = 1, cm4_per = 0;   /* gemm_splitk: K splits, K steps a split */
    char cm4_name[64];
    if (v == 4) {   /* mul_mat_cm4 */
        /* gemm_dq: a quantized weight dequantized into the plan's scratch as f16 rows first (dequant.comp,
         * the dispatch before), the GEMM then reading f16: from 32 tokens, K a multiple of 8 (16-byte
         * rows), the copy within one binding. auto: the k-quants (q2_K-q6_K), whose 256-element blocks
         * the GEMM would otherwise unpack every step (H200 at 09968c1, N = 512: q4_K 70.7 / 53.5 / 66.9
         * TFLOPS at 4096x4096 / 2048x8192 / 11008x4096 against 57.8 / 47.3 / 55.9 direct; q4_0 1-4% slower) */
        uint64_t dq_bytes = 2ull * (uint64_t)s0->ne[0] * M * (uint64_t)(s0->ne[2] * s0->ne[3]);
        int kquant = s0->type >= PYG_TYPE_Q2_K && s0->type <= PYG_TYPE_Q6_K;
        int want_dq = d->opts.gemm_dq == VKP_COPY_ON || (d->opts.gemm_dq == VKP_COPY_AUTO && kquant && khr);
        int use_dq = want_dq && pyg_type_get_traits(s0->type)->is_quantized && N >= 32 && s0->ne[0] % 8 == 0 &&
                     dq_bytes <= d->max_range && vkp_pipeline_usable(d, VKP_SH_DEQUANT, (uint32_t[2]){ (uint32_t)s0->type, 1 }, &d->dq_broken);
        int wtype = use_dq ? PYG_TYPE_F16 : (int)s0->type;
        /* gemm_b16: the f32 activations converted to f16 rows in the plan's scratch first (dequant.comp
         * on f32; one conversion serves the GEMMs after it on the same activations: q/k/v, gate/up),
         * the GEMM then loading a 16-byte word of 8 halves per task instead of two of floats: half the
         * activation bytes it reads again for every BM rows of weights. From 32 tokens, K a multiple of 8.
         * auto (default): on VK_KHR_cooperative_matrix (H100 at b6a4856, N = 512, 4096x4096 / 2048x8192 /
         * 11008x4096: q4_0 at 64x128.k64.w2x2 83.6 / 66.2 / 82.2 TFLOPS against 74.9 / 55.7 / 69.4;
         * pp512 1b / 7b q4_0 +3% / +9%, q4_K +10% / +7%: bench/results/gpu-vulkan-h100-20261205T0744/) */
        uint64_t b16_bytes = 2ull * (uint64_t)s1->ne[0] * N * B;
        int want_b16 = d->opts.gemm_b16 == VKP_COPY_ON || (d->opts.gemm_b16 == VKP_COPY_AUTO && khr);
        int use_b16 = want_b16 && s1->type == PYG_TYPE_F32 && N >= 32 && s1->ne[0] % 8 == 0 && b16_bytes <= d->max_range &&
                      vkp_pipeline_usable(d, VKP_SH_DEQUANT, (uint32_t[2]){ PYG_TYPE_F32, 1 }, &d->dq_broken);
        /* gemm_cfg auto on VK_KHR_cooperative_matrix: K steps of 64; past 64 tokens 64 weight rows x 128
         * tokens for 16-bit operands (a 16/32-bit weight or gemm_dq's copy, or gemm_b16's activations),
         * else 128 x 64 (H200 at 09968c1, N = 512, 4096x4096 / 2048x8192 / 11008x4096: q4_0 direct at
         * 128x64 74.7 / 55.8 / 68.7 TFLOPS against 42.8 / 42.7 / 43.8 at 64x64.k64.w2x2.ks2, f16 at 64x128
         * 63.8 / 47.8 / 55.9 against 33.6 / 31.5 / 32.5; H100 at b6a4856: q4_0 with gemm_b16 at 64x128
         * the least time of 128x64, 64x128 and 128x128.k64.w2x4 with and without it); elsewhere the two
         * square tiles by the rule above */
        int wide_n = wtype == PYG_TYPE_F16 || wtype == PYG_TYPE_BF16 || wtype == PYG_TYPE_F32 || use_b16;
        int khr_ci = wide_n && N > 64 ? 13 : 14;   /* 64x128.k64.w2x2, 128x64.k64.w2x2 */
        /* up to 2048 weight rows, 64x128 as eight subgroups' 32x32 blocks where its one stage fits (NVIDIA's 48 KiB,
         * not lavapipe's 32): H100 at 84e9b4a, q4_0 N = 512, 2048x2048 / 2048x8192 72.7 / 84.1 TFLOPS against
         * 63.4 / 74.3; from 4096 rows the four subgroups' tile stays ahead (85.6 against 113.2 at 4096x4096). Only for
         * a 16-bit weight (gemm_dq's copy, an f16 model): in the models, H100 at 6ea1509, every GEMM on 64x128.k64.w2x2
         * ran pp512 1b q4_0 (q4_0 read directly) 38.8-39.0k t/s against 36.0-37.2k, and 1b q4_K (its f16 copies)
         * 27.5-27.9k against 29.9-30.5k (bench/results/gpu-vulkan-cfg-h100-20261207T0952/) */
        if (khr_ci == 13 && M <= 2048 && wtype == PYG_TYPE_F16 && gemm_cfg_shared_bg(&vkp_gemm_cfgs[18], 0) <= d->props.limits.maxComputeSharedMemorySize)
            khr_ci = 18;   /* 64x128.k64.w2x4.s1 */
        ci = d->opts.gemm_cfg ? (int)d->opts.gemm_cfg - 1 : khr ? khr_ci : tile == 128 ? 8 : 0;
        vkp_gemm_cfg c = vkp_gemm_cfgs[ci < VKP_GEMM_CFGS ? ci : 0];
        /* gemm_bg (with the activation copy): the GEMM loads its activation fragments from the copy in
         * global memory, in rows padded to whole tiles of c.bn tokens and c.bk elements */
        int use_bg = use_b16 && d->opts.gemm_bg;
        if (gemm_cfg_shared_bg(&c, use_bg) > d->props.limits.maxComputeSharedMemorySize && c.st == 2)
            c.st = 1;   /* (lavapipe's 32 KiB, NVIDIA's 48: the same tiling with one stage; the kernel name says so) */
        cm4_np = use_bg ? (N + c.bn - 1) / c.bn * c.bn : N;
        cm4_kp = use_bg ? ((uint64_t)s1->ne[0] + c.bk - 1) / c.bk * c.bk : (uint64_t)s1->ne[0];
        if (use_bg) b16_bytes = 2ull * cm4_kp * cm4_np * B;
        if (use_bg && b16_bytes > d->max_range) use_bg = use_b16 = 0;   /* (then neither copy) */
        gemm_cfg_name(&c, (int)d->opts.debug_gemm_parts, cm4_name, sizeof cm4_name);
        /* cm_api: the KHR build where the device and the build have it (auto, khr), else the NV one */
        cm_shader = emu ? VKP_SH_MUL_MAT_CM4_EMU : khr ? VKP_SH_MUL_MAT_CM4_KHR : VKP_SH_MUL_MAT_CM4;
        static const char *const acc_names[] = { " khr", " khr f16acc", " khr f16acc2", " khr f16acc4", " khr f16acc8" };
        if (khr) strncat(cm4_name, acc_names[d->opts.cm_acc >= 0 && d->opts.cm_acc <= 4 ? d->opts.cm_acc : 0], sizeof cm4_name - strlen(cm4_name) - 1);
        if (use_dq) strncat(cm4_name, " dq", sizeof cm4_name - strlen(cm4_name) - 1);
        cm4_dq = use_dq ? dq_bytes : 0;
        if (use_b16) strncat(cm4_name, use_bg ? " b16 bg" : " b16", sizeof cm4_name - strlen(cm4_name) - 1);
        cm4_b16 = use_b16 ? b16_bytes : 0;
        cm_spec[0] = gemm_cfg_spec(&c, wtype, (int)d->opts.debug_gemm_parts) | (uint32_t)(khr && d->opts.cm_acc) << 23 |
                     (uint32_t)(khr && d->opts.cm_acc ? d->opts.cm_acc - 1 : 0) << 27 |   /* f16 sums over 1, 2, 4 or 8 K steps */
                     (uint32_t)use_dq << 24 |   /* the copy's rows start on 16 bytes: 16-byte loads */
                     (uint32_t)use_b16 << 25 |  /* f16 activations, rows on 16 bytes */
                     (uint32_t)use_bg << 26;    /* their fragments loaded from global memory */
        cm_spec[1] = (uint32_t)c.wm * c.wn * c.ks * d->subgroup_size;
        if (d->opts.gemm_lit && khr && !emu && vkp_cm4_lit_has(cm_spec[0], cm_spec[1])) {   /* the literal build (vk_shaders.c) */
            cm_spec[0] |= 1u << 31;
            strncat(cm4_name, " lit", sizeof cm4_name - strlen(cm4_name) - 1);
        }
        cm_shared = gemm_cfg_shared_bg(&c, use_bg);
        tile_m = c.bm;
        tile_n = c.bn;
        /* gemm_splitk: K cut into splits, a workgroup each, where the grid, with the other GEMMs of its stage (their rows
         * on tiles as tall: gemm_share_tiles), has fewer workgroups than the option (a 1b's down and o projections: 128
         * tiles of 64 x 128 alone in their stages, one workgroup a multiprocessor of an H100; not its q/k/v, 192 tiles
         * together), at most 8 splits of at least gemm_splitk_steps steps; all but the first split's sums go to the
         * plan's scratch and splitk_add.comp, the dispatch after it, adds them into the result (with splitk_last every
         * split's sums go there and each tile's last split adds them: vk_splitk.c) */
        uint64_t grid = (M + c.bm - 1) / c.bm * ((N + c.bn - 1) / c.bn) * B, steps = ((uint64_t)s0->ne[0] + c.bk - 1) / c.bk;
        uint64_t stage_grid = grid;
        if (d->opts.gemm_splitk > 0 && grid < (uint64_t)d->opts.gemm_splitk && g)
            stage_grid += gemm_share_tiles(g, n, c.bm) * ((N + c.bn - 1) / c.bn) * B;
        if (d->opts.gemm_splitk > 0 && stage_grid < (uint64_t)d->opts.gemm_splitk) {
            uint64_t nsp = (uint64_t)d->opts.gemm_splitk / stage_grid;
            if (nsp > steps / (uint64_t)d->opts.gemm_splitk_steps) nsp = steps / (uint64_t)d->opts.gemm_splitk_steps;
            if (nsp > 8) nsp = 8;
            if (nsp >= 2 && (nsp - 1) * M * N * B * 4 <= d->max_range && grid * nsp <= 0xFFFFFFFFull) {
                cm4_per = (steps + nsp - 1) / nsp;
                cm4_nsp = (steps + cm4_per - 1) / cm4_per;
                size_t l = strlen(cm4_name);
                snprintf(cm4_name + l, sizeof cm4_name - l, " split%u", (unsigned)cm4_nsp);
            }
        }
        cm_disable = &cm4_bad;
    }
    /* mul_mat_vec3.comp: 8 << matvec_rows rows per workgroup (8, 16 or 32; default 16); its 128
     * invocations take 128 / rows units of 256 elements per chunk: 1 KiB of shared activations each */
    int mv3_shader = d->opts.matvec == 4 ? VKP_SH_MUL_MAT_VEC3P : VKP_SH_MUL_MAT_VEC3;   /* 4: loads a chunk ahead */
    int *mv3_broken = d->opts.matvec == 4 ? &d->mv3p_broken : &d->mv3_broken;
    if (d->opts.matvec >= 5 && d->int_dot && !d->mv3i_broken) {   /* 5: int8 activations, OpSDot */
        mv3_shader = VKP_SH_MUL_MAT_VEC3I;
        mv3_broken = &d->mv3i_broken;
    }
    /* 7: mul_mat_vec4 (coalesced loads) where it applies, else as 6; 6: mul_mat_vec3w (the whole row
     * staged once) where it applies, else as 5 */
    int mv = -1;
    if (N <= 4 && d->opts.matvec == 7 && mv3_plan(d, n, VKP_SH_MUL_MAT_VEC4, &d->mv4_broken, spec, work))
        mv = VKP_SH_MUL_MAT_VEC4;
    else if (N <= 4 && d->opts.matvec >= 6 && mv3_plan(d, n, VKP_SH_MUL_MAT_VEC3W, &d->mv3w_broken, spec, work))
        mv = VKP_SH_MUL_MAT_VEC3W;
    else if (N <= 4 && d->opts.matvec >= 3 && mv3_plan(d, n, mv3_shader, mv3_broken, spec, work))
        mv = mv3_shader;
    if (mv >= 0) {
        *shader = mv;
        ex[0] = (uint32_t)*work;
        kind = vkp_shader_name(mv);
    } else if (N <= 4 && d->subgroup_arith && d->opts.matvec >= 2 && !d->mv2_broken && mv2_ok(d, s0, s1) &&
        vkp_pipeline_usable(d, VKP_SH_MUL_MAT_VEC2, mv2_spec, &d->mv2_broken)) {
        uint64_t slots = (M + nr - 1) / nr * N * B;
        *shader = VKP_SH_MUL_MAT_VEC2;
        spec[0] = (uint32_t)s0->type | nr << 8;
        spec[1] = sgw;
        ex[0] = (uint32_t)slots;
        *work = (slots + sgw - 1) / sgw;
        kind = "mul_mat_vec2";
    } else if (N <= 4 && d->subgroup_arith) {
        uint32_t rpw = vkp_rows_per_wg(d);
        *shader = VKP_SH_MUL_MAT_VEC;
        spec[0] = (uint32_t)s0->type;
        spec[1] = rpw;
        *work = (M * N * B + rpw - 1) / rpw;
        ex[0] = (uint32_t)(M * N * B);
        /* chunked fast path: whole 32-element chunks, contiguous rows, f32 activations, 4-byte
         * aligned rows (the binding start is aligned; the in-binding offsets are checked) */
        const pyg_buffer *b0 = NULL, *b1 = NULL; uint64_t o0 = 0, o1 = 0;
        int aligned = vkp_resolve(s0, &b0, &o0) && vkp_resolve(s1, &b1, &o1) && o0 % 4 == 0 && o1 % 4 == 0 &&
                      s0->nb[1] % 4 == 0 && s0->nb[2] % 4 == 0 && s0->nb[3] % 4 == 0;
        ex[1] = aligned && s0->ne[0] % 32 == 0 && pyg_tensor_rows_contiguous(s0) &&
                s1->type == PYG_TYPE_F32 && s1->nb[0] == 4;
        kind = "mul_mat_vec";
    } else if (N > 4 && cm_ok(d, n, s0, s1) && cm_shared <= d->props.limits.maxComputeSharedMemorySize &&
               !(v == 4 && (d->cm4_broken >> ci & 1u)) && vkp_pipeline_usable(d, cm_shader, cm_spec, cm_disable)) {
        *shader = cm_shader;
        spec[0] = cm_spec[0];
        spec[1] = cm_spec[1];   /* workgroup size: 4 subgroups (mul_mat_cm4: its configuration's) */
        *work = (M + tile_m - 1) / tile_m * ((N + tile_n - 1) / tile_n) * B;
        if (v == 4 && cm4_nsp > 1) {   /* gemm_splitk: a workgroup per tile and split */
            *work *= cm4_nsp;
            ex[2] = (uint32_t)cm4_nsp;
            ex[3] = (uint32_t)cm4_per;
            ex[4] = d->opts.splitk_last ? 1u : 0u;   /* its last split per tile adds the sums (vk_splitk.c) */
            ex[5] = 0;   /* (the partials' first word: vk_splitk.c sets it) */
        }
        ex[0] = (uint32_t)*work;
        uint64_t o0 = 0;
        ex[1] = mv_layout_ok(d, s0, s1, &o0);   /* mul_mat_cm3/4: activation rows read as 16-byte words */
        dq[0] = v == 4 ? cm4_dq : 0;
        dq[1] = v == 4 ? cm4_b16 : 0;
        dq[2] = v == 4 && cm4_b16 ? cm4_np : 0;
        dq[3] = v == 4 && cm4_b16 ? cm4_kp : 0;
        kind = v == 4 ? cm4_name : vkp_shader_name(cm_shader);
    } else {
        if (cm4_bad) d->cm4_broken |= 1u << ci;   /* (that configuration only: the others stay available) */
        *shader = VKP_SH_MUL_MAT;
        spec[0] = (uint32_t)s0->type;
        spec[1] = 1;
        *work = ((M + 63) / 64) * ((N + 63) / 64) * B;
        ex[0] = (uint32_t)*work;
        kind = "mul_mat";
    }
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' (%s, M %llu N %llu): %s", n->name, pyg_type_get_traits(s0->type)->name,
            (unsigned long long)M, (unsigned long long)N, kind);
    return NULL;
}
