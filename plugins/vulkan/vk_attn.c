/* plugins/vulkan/vk_attn.c — which kernel a FLASH_ATTN_EXT node runs: tensor cores, flash_attn_dec, flash_attn.
 *
 * flash_attn_cm.comp (option fa=coopmat where the device has cooperative matrices, fa=cm_emulated
 * anywhere: the tests; fa=auto runs flash_attn.comp until GPUs confirm the kernel) takes prefill-sized query blocks: n_q >= 16, D = Dv <= 128 and a multiple
 * of 16, no softcap, its shared memory within the device's limit; everything else (decode, with its
 * KV split) stays on flash_attn.comp (vk_graph.c). The choice is logged per plan at debug level
 * ("flash_attn 'name': kernel", vkp_fa_log). Decode nodes the KV split takes run flash_attn_dec.comp
 * with fa_v=3 where its layout holds (vkp_fa_dec_setup), flash_attn_dec2.comp with fa_v=4 (vkp_fa_dec2_setup). */
#include <string.h>
#include "vk_plan.h"

#define FA_BQ 32
#define FA_BKV 64

/* flash_attn_cm.comp's shared memory: Q, K / V^T, S (f32), P, the chunk flag (16 bytes) */
static uint64_t fa_cm_shared(uint32_t dmax) {
    uint64_t half = 2;
    return FA_BQ * (dmax + 8) * half + dmax * (FA_BKV + 8) * half + FA_BKV * (FA_BQ + 4) * 4 + FA_BQ * (FA_BKV + 8) * half + 16;
}

/* the tiles flash_attn_cm2.comp and flash_attn_cm3.comp share: Q, K / V^T (16-byte words), S (f32), P, the chunk flag */
static uint64_t fa_cm_tiles_shared(uint32_t dmax) {
    return FA_BQ * (dmax / 8 + 1) * 16 + dmax * (FA_BKV / 8 + 1) * 16 + FA_BKV * (FA_BQ + 4) * 4 + FA_BQ * (FA_BKV / 8 + 1) * 16 + 16;
}

/* flash_attn_cm2.comp's: the tiles, pass 1's chunk bits (and in its FA_SPLIT build the rows' sums) */
static uint64_t fa_cm2_shared(uint32_t dmax) { return fa_cm_tiles_shared(dmax) + 128 + FA_BQ * 4; }

/* flash_attn_cm3.comp's: the tiles (K / V^T's words also stage each chunk's P V), the rows' scales and sums */
static uint64_t fa_cm3_shared(uint32_t dmax) { return fa_cm_tiles_shared(dmax) + 2 * FA_BQ * 4; }

/* t (K, V or the mask) is read in 16-byte words: unit element stride, rows, heads and batches on
 * 16-byte boundaries, and its offset within the binding (which starts on `align`) too */
static int fa_rows16(const pyg_tensor *t, uint64_t align) {
    const pyg_buffer *b; uint64_t off;
    if (t->type != PYG_TYPE_F16 || t->nb[0] != 2 || !vkp_resolve(t, &b, &off) || (off & (align - 1)) % 16) return 0;
    for (int j = 1; j < 4; j++) if (t->nb[j] % 16) return 0;
    return 1;
}

int vkp_fa_cm_split(pyg_device *d, const pyg_tensor *n, int *shader, uint32_t spec[2], uint64_t *work, uint32_t *ex,
                    uint32_t *ns_out, uint64_t *scratch) {
    const pyg_tensor *q = n->src[0], *v = n->src[2];
    int emu = *shader == VKP_SH_FLASH_ATTN_CM2_EMU || *shader == VKP_SH_FLASH_ATTN_CM3_EMU;   /* (cm3 too: the split is cm2's build) */
    if (d->opts.fa_cm_wgs <= 0 || (!emu && *shader != VKP_SH_FLASH_ATTN_CM2 && *shader != VKP_SH_FLASH_ATTN_CM3)) return 0;
    uint64_t nqb = (uint64_t)(q->ne[1] + FA_BQ - 1) / FA_BQ, base = nqb * (uint64_t)q->ne[2] * (uint64_t)q->ne[3];
    uint64_t nch = (uint64_t)(n->src[1]->ne[1] + FA_BKV - 1) / FA_BKV;
    uint64_t ns = (uint64_t)d->opts.fa_cm_wgs / base, most = (nch + 1) / 2;   /* (at least two chunks a split) */
    if (ns > most) ns = most;
    if (ns < 2) return 0;
    uint64_t cps = (nch + ns - 1) / ns;
    ns = (nch + cps - 1) / cps;
    uint64_t rows = (uint64_t)(q->ne[1] * q->ne[2] * q->ne[3]), bytes = rows * ns * ((uint64_t)v->ne[0] + 2) * 4;
    if (base * ns > UINT32_MAX || bytes > d->max_range) return 0;   /* (ns stays >= 2: cps < nch once nch >= 3) */
    int sh = emu ? VKP_SH_FLASH_ATTN_CM2S_EMU : VKP_SH_FLASH_ATTN_CM2S;
    uint32_t sp2[2] = { spec[0] & 0xFFFFu, spec[1] };   /* (cm2's build: no fa_acc bits over its DMAX) */
    if (!vkp_pipeline_usable(d, sh, sp2, &d->fa_cm2s_broken)) return 0;
    spec[0] = sp2[0];
    *shader = sh;
    *work = base * ns;
    ex[0] = (uint32_t)(base * ns);
    ex[3] = (uint32_t)ns;
    ex[4] = (uint32_t)cps;
    *ns_out = (uint32_t)ns;
    *scratch = bytes;
    return 1;
}

/* flash_attn.comp's build for the nodes flash_attn_cm does not take: fa_v=2 picks flash_attn2 where
 * the device has subgroup arithmetic (its reductions) */
int vkp_fa_scalar_shader(const pyg_device *d) {
    return d->opts.fa_v == 2 && d->subgroup_arith ? VKP_SH_FLASH_ATTN2 : VKP_SH_FLASH_ATTN;
}

/* shader (emulated: shader_emu) where its shared memory fits and the driver takes its pipeline (a refusal sets *broken):
 * its id, else 0 */
static int fa_cm_build(pyg_device *d, int shader, int shader_emu, int emulated, uint64_t shared, int *broken, const uint32_t sp[2]) {
    int sh = emulated ? shader_emu : shader;
    if (*broken || shared > d->props.limits.maxComputeSharedMemorySize || !vkp_pipeline_usable(d, sh, sp, broken)) return 0;
    return sh;
}

int vkp_fa_cm_setup(pyg_device *d, const pyg_tensor *n, uint64_t align, int *shader, uint32_t spec[2], uint64_t *work, uint32_t *ex) {
    const pyg_tensor *q = n->src[0], *v = n->src[2];
    int emulated = d->opts.fa == VKP_GEMM_CM_EMULATED;
    int ok = 0;
    int v2 = d->opts.fa_cm >= 2 && fa_rows16(n->src[1], align) && fa_rows16(v, align);   /* (cm2 and cm3: the same layout) */
    uint32_t dmax = emulated && q->ne[0] <= 64 ? 64 : 128;   /* the tensor-core build fixes 128 (literal strides) */
    float softcap = pyg_op_param_f32(n->op_params, 2);
    /* fa=auto runs flash_attn_cm where the device has cooperative matrices: since its shared arrays
     * are all 16-byte multiples it passes on the H200's NVIDIA driver (764 Vulkan tests at 8ba9c65;
     * the earlier layout put the matrix tiles 4 bytes off 16 and gave NMSE 1.16) */
    const int cm = d->opts.fa == VKP_GEMM_COOPMAT || d->opts.fa == VKP_GEMM_CM_EMULATED ||
                   (d->opts.fa == VKP_GEMM_AUTO && d->coopmat);
    if (cm && q->ne[1] >= 16 && q->ne[0] == v->ne[0] && q->ne[0] % 16 == 0 &&
        q->ne[0] <= 128 && softcap == 0.0f && d->subgroup_shuffle &&
        fa_cm_shared(dmax) <= d->props.limits.maxComputeSharedMemorySize)
        ok = emulated ? d->subgroup_size >= 8 && d->subgroup_size <= 64 : d->coopmat && d->subgroup_size == 32;
    uint32_t sp[2] = { dmax, 4 * d->subgroup_size };
    /* the third (fa_cm=3) or second build where K and V are 16-byte rows (a model's f16 cache), its shared memory
     * fits and the driver takes it; a refused pipeline falls back to the next build, the first one last */
    int sh = 0;
    /* flash_attn_cm3's specialization 0 also holds its accumulators (fa_acc) in bits 16-17 */
    uint32_t sp3[2] = { dmax | (uint32_t)(d->opts.fa_acc & 3) << 16, sp[1] };
    if (ok && v2 && d->opts.fa_cm == 3)
        sh = fa_cm_build(d, VKP_SH_FLASH_ATTN_CM3, VKP_SH_FLASH_ATTN_CM3_EMU, emulated, fa_cm3_shared(dmax), &d->fa_cm3_broken, sp3);
    if (ok && v2 && !sh)
        sh = fa_cm_build(d, VKP_SH_FLASH_ATTN_CM2, VKP_SH_FLASH_ATTN_CM2_EMU, emulated, fa_cm2_shared(dmax), &d->fa_cm2_broken, sp);
    if (ok && !sh)
        sh = fa_cm_build(d, VKP_SH_FLASH_ATTN_CM, VKP_SH_FLASH_ATTN_CM_EMU, emulated, fa_cm_shared(dmax), &d->fa_cm_broken, sp);
    ok = sh != 0;
    if (ok) {
        uint64_t wg = (uint64_t)((q->ne[1] + FA_BQ - 1) / FA_BQ) * (uint64_t)q->ne[2] * (uint64_t)q->ne[3];
        *shader = sh;
        spec[0] = sh == VKP_SH_FLASH_ATTN_CM3 || sh == VKP_SH_FLASH_ATTN_CM3_EMU ? sp3[0] : dmax;
        spec[1] = 4 * d->subgroup_size;
        *work = wg;
        ex[0] = (uint32_t)wg;
        ex[1] = n->src[3] != NULL;
        ex[2] = n->src[3] != NULL && fa_rows16(n->src[3], align);   /* flash_attn_cm2: the mask as 16-byte words */
    }
    return ok;
}

/* flash_attn_dec2.comp (fa_v=4; fa_v=0, the default, where every query head has a KV head of its own): a workgroup per row group (query row, KV head: its G query heads) and split. Takes
 * K and V f16 of one head size D (32, 64, 128 or 256, D / 8 lanes per row within a subgroup) with 16-byte aligned
 * rows, as many V heads as K heads, G = H / H_kv <= 8, a mask (f16 or f32) with one plane for all heads, 128-divisible
 * subgroups with shuffles and arithmetic, and its shared memory within the device's limit. Splits: about fa_dec_wgs
 * workgroups over the row groups, at least 32 cells each, at least 2 and at most 256 and 1024 / G (the merge's shared
 * arrays), so the
 * split count follows the cells the node attends. Scratch: (max, sum, output[D]) per query row and split, then a
 * counter per row group (zeroed by the plan before each run). */
int vkp_fa_dec2_setup(pyg_device *d, const pyg_tensor *n, uint64_t align, int *shader, uint32_t spec[2], uint32_t *ex,
                      uint64_t *work, uint32_t *ns_out, uint32_t *len_out, uint64_t *scratch_size, uint64_t *counters) {
    const pyg_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->src[3];
    if ((d->opts.fa_v != 4 && d->opts.fa_v != 0) || d->fa_dec2_broken || !d->subgroup_shuffle || !d->subgroup_arith) return 0;
    uint32_t SG = d->subgroup_size;
    uint64_t D = (uint64_t)q->ne[0], H = (uint64_t)q->ne[2], Hk = (uint64_t)k->ne[2];
    if (SG < 4 || SG > 128 || 128 % SG || (D != 32 && D != 64 && D != 128 && D != 256) || D / 8 > SG) return 0;
    if (k->ne[0] != (int64_t)D || v->ne[0] != (int64_t)D || v->ne[2] != k->ne[2] || Hk == 0 || H % Hk || H / Hk > 8) return 0;
    if (d->opts.fa_v == 0 && H != Hk) return 0;   /* auto: one query head per KV head (measured; grouped heads: flash_attn_dec) */
    if (!fa_rows16(k, align) || !fa_rows16(v, align) || v->ne[1] != k->ne[1]) return 0;
    if (m && (m->ne[2] != 1 || (m->type != PYG_TYPE_F16 && m->type != PYG_TYPE_F32))) return 0;
    uint64_t G = H / Hk, U = G >= 4 ? 2 : 4, NSG = 128 / SG;
    uint64_t shared = (NSG * G * (D + 2) + 2 * 1024 + G + 1) * 4;
    if (shared > d->props.limits.maxComputeSharedMemorySize) return 0;
    uint32_t sp[2] = { (uint32_t)D, (uint32_t)(G | U << 8 | (uint64_t)SG << 16) };
    int lit = d->opts.fa_lit && sp[0] == 128u && sp[1] == VKP_FA2_LIT_SPEC;   /* flash_attn_dec2_d128g1 (vk_shaders.c) */
    if (lit) sp[1] |= 1u << 31;
    if (!vkp_pipeline_usable(d, VKP_SH_FLASH_ATTN_DEC2, sp, &d->fa_dec2_broken)) return 0;
    if (lit)   /* (worded so that it does not begin as the kernel lines do, "flash_attn '<name>'", which the tests collect) */
        vkp_log(PYG_LOG_DEBUG, "flash_attn_dec2's literal build for '%s'", n->name);
    uint64_t nkv = (uint64_t)k->ne[1], rows = (uint64_t)(q->ne[1] * q->ne[2] * q->ne[3]), rgs = rows / G;
    uint64_t ns = ((uint64_t)d->opts.fa_dec_wgs + rgs - 1) / rgs, most = (nkv + 31) / 32;
    if (ns > most) ns = most;
    if (ns > 1024 / G) ns = 1024 / G;   /* (the merge's shared arrays) */
    if (ns > 256) ns = 256;
    if (ns < 2) ns = 2;
    uint64_t len = (nkv + ns - 1) / ns;
    ns = (nkv + len - 1) / len;
    if (ns < 2 || rgs * ns > UINT32_MAX) return 0;
    *shader = VKP_SH_FLASH_ATTN_DEC2;
    spec[0] = sp[0];
    spec[1] = sp[1];
    ex[0] = (uint32_t)(rgs * ns);
    ex[2] = (uint32_t)ns;
    ex[3] = (uint32_t)len;
    ex[4] = (uint32_t)(rows * ns * (D + 2));
    *work = rgs * ns;
    *ns_out = (uint32_t)ns;
    *len_out = (uint32_t)len;
    *counters = rgs * 4;
    *scratch_size = rows * ns * (D + 2) * 4 + rgs * 4;
    return 1;
}

/* the kernel chosen for a FLASH_ATTN_EXT node, at debug level (tests read it) */
void vkp_fa_log(const pyg_tensor *n, int shader, uint32_t spec0) {
    const pyg_tensor *q = n->src[0];
    const char *acc = vkp_fa_acc_name(shader, spec0);
    vkp_log(PYG_LOG_DEBUG, "flash_attn '%s' (D %lld, n_q %lld, n_kv %lld): %s%s%s", n->name, (long long)q->ne[0],
            (long long)q->ne[1], (long long)n->src[1]->ne[1], vkp_shader_name(shader), *acc ? " " : "", acc);
}

/* option fa_acc as flash_attn_cm3's specialization 0 holds it (bits 16-17): "pv16", "f16acc", else "" */
const char *vkp_fa_acc_name(int shader, uint32_t spec0) {
    if (shader != VKP_SH_FLASH_ATTN_CM3 && shader != VKP_SH_FLASH_ATTN_CM3_EMU) return "";
    return (spec0 >> 16 & 3) == 1 ? "pv16" : (spec0 >> 16 & 3) == 2 ? "f16acc" : "";
}

/* flash_attn_dec.comp (fa_v=3) for a node the KV split takes (ns splits of its rows): K and V f16 with
 * unit element stride and 16-byte aligned rows, heads and batches; D a multiple of 16 and Dv a power
 * of two, both 16..256. Sets the shader, its specialization (D, Dv), the counter index (ex[4], in
 * 32-bit words of the scratch, after the partials) and grows the scratch by one counter per row. */
int vkp_fa_dec_setup(pyg_device *d, const pyg_tensor *n, uint64_t rows, uint64_t ns, uint64_t align,
                     int *shader, uint32_t spec[2], uint32_t *ex, uint64_t *scratch_size) {
    const pyg_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    if (d->opts.fa_v != 3 && d->opts.fa_v != 4 && d->opts.fa_v != 0) return 0;   /* (0, 4: where flash_attn_dec2 does not take it) */
    if (d->fa_dec_broken) return 0;
    uint64_t D = (uint64_t)q->ne[0], Dv = (uint64_t)v->ne[0];
    if (D % 16 || D < 16 || D > 256 || Dv < 16 || Dv > 256 || (Dv & (Dv - 1))) return 0;
    if (!fa_rows16(k, align) || !fa_rows16(v, align)) return 0;
    uint32_t sp[2] = { (uint32_t)D, (uint32_t)Dv };
    if (!vkp_pipeline_usable(d, VKP_SH_FLASH_ATTN_DEC, sp, &d->fa_dec_broken)) return 0;
    *shader = VKP_SH_FLASH_ATTN_DEC;
    spec[0] = sp[0];
    spec[1] = sp[1];
    ex[4] = (uint32_t)(rows * ns * (Dv + 2));
    *scratch_size += rows * 4;
    return 1;
}

/* fa_span (vk_plan.h): the open chunks of flash_attn_cm3's mask, found once per mask and shape by fa_mask_span.comp,
 * a workgroup per (mask plane, 32-row query block) writing (first, one past the last) chunk with an unmasked key into
 * a region of the plan's scratch; the attention reads its block's pair at binding 6 (extra word 5 set) and walks those
 * chunks alone. The pass reads the mask alone (the shapes come in its extras 3 and 4), so it lands in the plan's first
 * barrier stage and costs a stage nowhere; one pass serves every layer of a model's prefill. */
pyg_error *vkp_fa_span(pyg_device *d, dispatch *dps, int *nd, void *params, uint64_t pstride, uint64_t align, uint64_t *scratch_total) {
    dispatch *fa = &dps[*nd - 1];
    uint32_t *p = (uint32_t *)((char *)params + (size_t)(*nd - 1) * pstride);
    if (!d->opts.fa_span || fa->fa_split || (fa->shader != VKP_SH_FLASH_ATTN_CM3 && fa->shader != VKP_SH_FLASH_ATTN_CM3_EMU) ||
        !p[96 + 1] || !fa->slot[3])
        return NULL;
    const pyg_tensor *m = fa->slot[3];
    uint32_t nq = p[4 + 1], nkv = p[16 + 4 + 1], nqb = (nq + FA_BQ - 1) / FA_BQ;
    uint64_t planes = (uint64_t)(m->ne[2] * m->ne[3]), size = planes * nqb * 8;
    if (planes * nqb > 0xFFFFFFFFull) return NULL;
    for (int j = 0; j < *nd - 1; j++) {   /* a pass over the same mask and shape: its region */
        const uint32_t *pj = (const uint32_t *)((const char *)params + (size_t)j * pstride);
        if (dps[j].span == 1 && dps[j].slot[3] == m && pj[96 + 3] == nq && pj[96 + 4] == nkv) {
            fa->span = 2; fa->span_off = dps[j].span_off; fa->span_size = dps[j].span_size;
            p[96 + 5] = 1;
            return NULL;
        }
    }
    uint32_t *pn = (uint32_t *)((char *)params + (size_t)*nd * pstride);   /* the attention moves one up */
    dps[*nd] = *fa;
    memcpy(pn, p, (size_t)pstride);
    dispatch *sp = fa;
    memset(sp, 0, sizeof *sp);
    sp->slot[3] = m;
    sp->op = dps[*nd].op;
    sp->span = 1;
    sp->span_off = *scratch_total;
    sp->span_size = size;
    *scratch_total += (size + align - 1) / align * align;
    p[96 + 0] = (uint32_t)(planes * nqb);
    p[96 + 1] = nqb;   /* (p[96 + 2]: the mask as 16-byte f16 words, as the attention reads it) */
    p[96 + 3] = nq;
    p[96 + 4] = nkv;
    sp->shader = VKP_SH_FA_MASK_SPAN;
    vkp_fold_groups(planes * nqb, sp->groups);
    dispatch *a = &dps[*nd];
    a->span = 2; a->span_off = sp->span_off; a->span_size = size;
    pn[96 + 5] = 1;
    (*nd)++;
    vkp_log(PYG_LOG_DEBUG, "flash_attn_ext '%s': fa_mask_span for mask '%s' first", a->slot[VKP_SLOT_DST]->name, m->name);
    uint32_t specs[2] = { 0, 1 };
    return vkp_get_pipeline(d, VKP_SH_FA_MASK_SPAN, specs, &sp->pipe);
}
