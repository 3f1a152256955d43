/* plugins/vulkan/vk_attn.c — which kernel a FLASH_ATTN_EXT node runs: tensor cores, flash_attn_dec, flash_attn.
 *
 * flash_attn_cm.comp (option fa=coopmat where the device has cooperative matrices, fa=cm_emulated
 * anywhere: the tests; fa=auto runs flash_attn.comp until GPUs confirm the kernel) takes prefill-sized query blocks: n_q >= 16, D = Dv <= 128 and a multiple
 * of 16, no softcap, its shared memory within the device's limit; everything else (decode, with its
 * KV split) stays on flash_attn.comp (vk_graph.c). The choice is logged per plan at debug level
 * ("flash_attn 'name': kernel", vkp_fa_log). Decode nodes the KV split takes run flash_attn_dec.comp
 * with fa_v=3 where its layout holds (vkp_fa_dec_setup). */
#include "vk_internal.h"

#define FA_BQ 32
#define FA_BKV 64

/* flash_attn_cm.comp's shared memory: Q, K / V^T, S (f32), P, the chunk flag (16 bytes) */
static uint64_t fa_cm_shared(uint32_t dmax) {
    uint64_t half = 2;
    return FA_BQ * (dmax + 8) * half + dmax * (FA_BKV + 8) * half + FA_BKV * (FA_BQ + 4) * 4 + FA_BQ * (FA_BKV + 8) * half + 16;
}

/* flash_attn_cm2.comp's: Q, K / V^T (16-byte words), S (f32), P, the chunk flag, pass 1's chunk bits */
static uint64_t fa_cm2_shared(uint32_t dmax) {
    return FA_BQ * (dmax / 8 + 1) * 16 + dmax * (FA_BKV / 8 + 1) * 16 + FA_BKV * (FA_BQ + 4) * 4 + FA_BQ * (FA_BKV / 8 + 1) * 16 + 16 + 128;
}

/* t (K, V or the mask) is read in 16-byte words: unit element stride, rows, heads and batches on
 * 16-byte boundaries, and its offset within the binding (which starts on `align`) too */
static int fa_rows16(const pyg_tensor *t, uint64_t align) {
    const pyg_buffer *b; uint64_t off;
    if (t->type != PYG_TYPE_F16 || t->nb[0] != 2 || !vkp_resolve(t, &b, &off) || (off & (align - 1)) % 16) return 0;
    for (int j = 1; j < 4; j++) if (t->nb[j] % 16) return 0;
    return 1;
}

/* flash_attn.comp's build for the nodes flash_attn_cm does not take: fa_v=2 picks flash_attn2 where
 * the device has subgroup arithmetic (its reductions) */
int vkp_fa_scalar_shader(const pyg_device *d) {
    return d->opts.fa_v == 2 && d->subgroup_arith ? VKP_SH_FLASH_ATTN2 : VKP_SH_FLASH_ATTN;
}

int vkp_fa_cm_setup(pyg_device *d, const pyg_tensor *n, uint64_t align, int *shader, uint32_t spec[2], uint64_t *work, uint32_t *ex) {
    const pyg_tensor *q = n->src[0], *v = n->src[2];
    int emulated = d->opts.fa == VKP_GEMM_CM_EMULATED;
    int ok = 0;
    int v2 = d->opts.fa_cm == 2 && fa_rows16(n->src[1], align) && fa_rows16(v, align);
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
    /* the second build where K and V are 16-byte rows (a model's f16 cache), its shared memory fits and
     * the driver takes it; a refused pipeline falls back to the first build */
    int sh = 0;
    if (ok && v2 && !d->fa_cm2_broken && fa_cm2_shared(dmax) <= d->props.limits.maxComputeSharedMemorySize &&
        (emulated ? d->subgroup_size >= 8 : 1) &&
        vkp_pipeline_usable(d, emulated ? VKP_SH_FLASH_ATTN_CM2_EMU : VKP_SH_FLASH_ATTN_CM2, sp, &d->fa_cm2_broken))
        sh = emulated ? VKP_SH_FLASH_ATTN_CM2_EMU : VKP_SH_FLASH_ATTN_CM2;
    else if (ok && !d->fa_cm_broken && vkp_pipeline_usable(d, emulated ? VKP_SH_FLASH_ATTN_CM_EMU : VKP_SH_FLASH_ATTN_CM, sp, &d->fa_cm_broken))
        sh = emulated ? VKP_SH_FLASH_ATTN_CM_EMU : VKP_SH_FLASH_ATTN_CM;
    ok = sh != 0;
    if (ok) {
        uint64_t wg = (uint64_t)((q->ne[1] + FA_BQ - 1) / FA_BQ) * (uint64_t)q->ne[2] * (uint64_t)q->ne[3];
        *shader = sh;
        spec[0] = dmax;
        spec[1] = 4 * d->subgroup_size;
        *work = wg;
        ex[0] = (uint32_t)wg;
        ex[1] = n->src[3] != NULL;
        ex[2] = n->src[3] != NULL && fa_rows16(n->src[3], align);   /* flash_attn_cm2: the mask as 16-byte words */
    }
    return ok;
}

/* the kernel chosen for a FLASH_ATTN_EXT node, at debug level (tests read it) */
void vkp_fa_log(const pyg_tensor *n, int shader) {
    const pyg_tensor *q = n->src[0];
    vkp_log(PYG_LOG_DEBUG, "flash_attn '%s' (D %lld, n_q %lld, n_kv %lld): %s", n->name, (long long)q->ne[0],
            (long long)q->ne[1], (long long)n->src[1]->ne[1], vkp_shader_name(shader));
}

/* flash_attn_dec.comp (fa_v=3) for a node the KV split takes (ns splits of its rows): K and V f16 with
 * unit element stride and 16-byte aligned rows, heads and batches; D a multiple of 16 and Dv a power
 * of two, both 16..256. Sets the shader, its specialization (D, Dv), the counter index (ex[4], in
 * 32-bit words of the scratch, after the partials) and grows the scratch by one counter per row. */
int vkp_fa_dec_setup(pyg_device *d, const pyg_tensor *n, uint64_t rows, uint64_t ns, uint64_t align,
                     int *shader, uint32_t spec[2], uint32_t *ex, uint64_t *scratch_size) {
    const pyg_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    if (d->opts.fa_v != 3 || d->fa_dec_broken) return 0;
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
