/* plugins/cpu/ops_mul_mat.c — MUL_MAT for every weight type with cpu_type_funcs.
 *
 * Phase 1 converts each src1 row once into src0's vec_dot_type (or gathers strided f32 rows)
 * into the node's shared scratch (q4_0: plus per-block float scales and sums); a barrier; phase 2
 * runs one of: the q4_0 / q4_K integer GEMM over 8-row interleaved panels (batches >= 8), the
 * packed f32 GEMM (AVX2, batches of >= gemm_min_n rows), 8-row interleaved mat-vec over a
 * repacked weight (repack.c), 4-row mat-vec, one row against up to 4 columns, or vec_dot per
 * (row of src0, row of src1), the src0 rows staying in cache while they meet every src1 row. src0 broadcasts over dims 2, 3 as in ggml:
 * batch i2 of src1 uses batch i2 / (ne12 / ne02) of src0. */
#include "cpu_internal.h"
#include "quants.h"

/* Smallest batch (src1 rows) for the packed GEMM: below it the vec_dot path wins, measured on
 * Zen 3 (the GEMM repacks all of src0 per call; quantized vec_dots run on integer SIMD). */
static int64_t gemm_min_n(int32_t type) {
    switch (type) {
    case PYG_TYPE_F32: return 16;
    case PYG_TYPE_F16:
    case PYG_TYPE_BF16: return 32;
    default: return 128;
    }
}

/* Smallest batch for the q4_0 / q4_K / q8_0 integer GEMM (8 repacked weight rows x 4 activation rows). */
#ifndef QGEMM_MIN_N
#define QGEMM_MIN_N 8
#endif

typedef struct mm_plan {
    int use_gemm;
    int qgemm;          /* integer GEMM over 8-row panels: q4_0 (q8_0 activations + block sums), q4_K and q6_K (q8_K), q8_0 (q8_0) */
    int aux;            /* phase 1 also writes per-block float scales and sums of the q8_0 rows */
    int generic;        /* src0 rows strided or without vec_dot: load rows as f32, f32 dot */
    int32_t vdt;        /* type the src1 rows are converted to */
    int convert;        /* 1: src1 rows go through the shared scratch */
    size_t vdt_row;     /* bytes of one converted src1 row */
} mm_plan;

static mm_plan mm_choose(const pyg_tensor *node, int simd, int reference) {
    const pyg_tensor *s0 = node->src[0], *s1 = node->src[1];
    const cpu_type_funcs *tf0 = cpu_type_funcs_get(s0->type);
    mm_plan p = { 0 };
    const pyg_type_traits *tr0 = pyg_type_get_traits(s0->type);
    const int rows_contig = s0->nb[0] == (uint64_t)tr0->type_size;
    p.generic = !rows_contig || !tf0->vec_dot;
    if (!p.generic && !reference) {
        const cpu_type_funcs *tv = cpu_type_funcs_get(tf0->vec_dot_type);
        if (!tv || !tv->from_f32) p.generic = 1;
    }
    if (reference && !p.generic) {
        const cpu_type_funcs *tv = cpu_type_funcs_get(tf0->vec_dot_type);
        if (!tv || !tv->from_f32 || !tf0->vec_dot_ref) p.generic = 1;
    }
    p.use_gemm = simd && !reference && rows_contig && s1->ne[1] >= gemm_min_n(s0->type);
#ifdef QUANT_HAVE_X86
    p.qgemm = simd && !reference && !p.generic &&
              (s0->type == PYG_TYPE_Q4_0 || s0->type == PYG_TYPE_Q4_K || s0->type == PYG_TYPE_Q8_0 ||
               s0->type == PYG_TYPE_Q6_K) &&
              s1->ne[1] >= QGEMM_MIN_N && s0->ne[1] >= 8;
    if (p.qgemm) p.use_gemm = 0;
    /* the q4_0 8-row kernels (GEMM, and mat-vec over repacked weights) and the VNNI q8_0 GEMM read
     * the activation blocks' sums */
    p.aux = simd && !reference && !p.generic && (s0->type == PYG_TYPE_Q4_0 || (p.qgemm && s0->type == PYG_TYPE_Q8_0));
#endif
    p.vdt = (p.use_gemm || p.generic) ? PYG_TYPE_F32 : tf0->vec_dot_type;
    p.convert = !(p.vdt == PYG_TYPE_F32 && s1->type == PYG_TYPE_F32 && s1->nb[0] == 4);
    p.vdt_row = pyg_type_row_size(p.vdt, s0->ne[0]);
    return p;
}

size_t cpu_mul_mat_shared_size(const pyg_tensor *node, int simd, int reference) {
    mm_plan p = mm_choose(node, simd, reference);
    if (!p.convert) return 0;
    size_t aux = p.aux ? (size_t)(node->src[0]->ne[0] / QK_32) * 8 : 0;
    return (p.vdt_row + aux) * (size_t)pyg_tensor_nrows(node->src[1]);
}

size_t cpu_mul_mat_thread_size(const pyg_tensor *node, int simd, int reference) {
    mm_plan p = mm_choose(node, simd, reference);
    size_t s = (size_t)(node->src[0]->ne[0] + 16) * sizeof(float) * 2;
    if (p.use_gemm) s += cpu_gemm_wsize();
#ifdef QUANT_HAVE_X86
    if (p.qgemm)
    {
        const int32_t t = node->src[0]->type;
        const int64_t K = node->src[0]->ne[0];
        s += t == PYG_TYPE_Q4_K   ? (size_t)(K / QK_SUPER) * QUANT_Q4_KX8_BLOCK + 64
             : t == PYG_TYPE_Q6_K ? (size_t)(K / QK_SUPER) * QUANT_Q6_KX8_BLOCK + 64
             : t == PYG_TYPE_Q8_0 ? (size_t)(K / QK_32) * QUANT_Q8_0X8_BLOCK + 64
                                  : (size_t)(K / QK_32) * QUANT_Q4_0X8_BLOCK + 64;
        if (t != PYG_TYPE_Q6_K) /* the VNNI tiles' expanded panel, past the panel */
            s += quant_x8_expand_bytes(t, K / (t == PYG_TYPE_Q4_K ? QK_SUPER : QK_32)) + 64;
    }
#endif
    return s;
}

#ifdef QUANT_HAVE_X86
/* q4_0 / q4_K / q8_0 / q6_K prefill: work items are (batch, panel of 8 weight rows); a panel is the weight's
 * repacked copy (repack.c; q4_0, q4_K) or repacked here once into this thread's scratch, and is met by every
 * activation row, 4 at a time (8 with the AVX512-VNNI tiles of q4_K and q6_K). Rows past the last full panel (M % 8) go through the multi-row
 * kernel. Which kernel computes an output depends only on its position, so results do not depend
 * on the thread count. */
static void mul_mat_x8_gemm(const pyg_tensor *node, cpu_ctx *ctx, const mm_plan *p, const cpu_rows *b) {
    const pyg_tensor *s0 = node->src[0], *s1 = node->src[1];
    const int q4k = s0->type == PYG_TYPE_Q4_K, q8 = s0->type == PYG_TYPE_Q8_0, q6k = s0->type == PYG_TYPE_Q6_K;
    const int64_t K = s0->ne[0], M = s0->ne[1], nb = K / (q4k || q6k ? QK_SUPER : QK_32);
    const size_t gb = q4k ? QUANT_Q4_KX8_BLOCK : q6k ? QUANT_Q6_KX8_BLOCK : q8 ? QUANT_Q8_0X8_BLOCK : QUANT_Q4_0X8_BLOCK;
    const int64_t N = s1->ne[1], B2 = s1->ne[2], B3 = s1->ne[3];
    const int64_t r2 = B2 / s0->ne[2], r3 = B3 / s0->ne[3];
    const int64_t npc = (M + 7) / 8, nchunks = npc * B2 * B3;
    const float *aux = (const float *)(ctx->shared + p->vdt_row * (size_t)(N * B2 * B3));
    char *panel = (char *)(((uintptr_t)ctx->wdata + (size_t)(K + 16) * sizeof(float) * 2 + 63) & ~(uintptr_t)63);
    quant_mm_kernels qk;
    quant_mm_kernels_get(s0->type, QUANT_ISA_AVX2, &qk);
    /* AVX512-VNNI tiles take 8 activation rows at a time (same panels, same results) */
    const int vnni = ctx->isa >= QUANT_ISA_AVX512 && quant_cpu_has_avx512() >= 2;
    const int ncol = vnni ? QUANT_GEMM_VNNI_NC : 4;
    for (int64_t c = cpu_next_chunk(ctx); c < nchunks; c = cpu_next_chunk(ctx)) {
        const int64_t bi = c / npc, m0 = (c % npc) * 8;
        const int64_t i2 = bi % B2, i3 = bi / B2, j2 = i2 / r2, j3 = i3 / r3;
        char *dbase = (char *)node->data + i2 * (int64_t)node->nb[2] + i3 * (int64_t)node->nb[3];
        const char *ybase = b->base + (size_t)i2 * b->s2 + (size_t)i3 * b->s3;
        const int64_t rbase = N * (i2 + B2 * i3); /* activation row index of column 0 (aux) */
        if (m0 + 8 <= M) {
            const char *pa = panel;
            if (ctx->repack && !q8 && !q6k) /* the weight's cached copy (src0 then has one batch) */
                pa = (const char *)ctx->repack + (size_t)(m0 / 8) * (size_t)nb * gb;
            else if (q6k)
                quant_q6_K_repack8(cpu_row_ptr(s0, m0, j2, j3), (size_t)s0->nb[1], nb, panel);
            else if (q8)
                quant_q8_0_repack8_avx2(cpu_row_ptr(s0, m0, j2, j3), (size_t)s0->nb[1], nb, panel);
            else if (q4k)
                quant_q4_K_repack8_avx2(cpu_row_ptr(s0, m0, j2, j3), (size_t)s0->nb[1], nb, panel);
            else
                quant_q4_0_repack8_avx2(cpu_row_ptr(s0, m0, j2, j3), (size_t)s0->nb[1], nb, panel);
            if (vnni && !q6k) { /* the values as bytes, once per panel (past the panel in the scratch) */
                char *ex = (char *)(((uintptr_t)panel + (size_t)nb * gb + 63) & ~(uintptr_t)63);
                if (q4k) quant_q4_Kx8_expand_vnni(nb, pa, ex);
                else if (q8) quant_q8_0x8_expand_vnni(nb, pa, ex);
                else quant_q4_0x8_expand_vnni(nb, pa, ex);
                pa = ex;
            }
            for (int64_t n = 0; n < N; n += ncol) {
                const int nc = N - n < ncol ? (int)(N - n) : ncol;
                const void *y[QUANT_GEMM_VNNI_NC];
                const float *dy[QUANT_GEMM_VNNI_NC];
                const int32_t *s8[QUANT_GEMM_VNNI_NC];
                float *dst[QUANT_GEMM_VNNI_NC];
                for (int k = 0; k < nc; k++) {
                    y[k] = ybase + (size_t)(n + k) * b->s1;
                    dst[k] = (float *)(dbase + (n + k) * (int64_t)node->nb[1]) + m0;
                    if (!q4k && !q6k && (!q8 || vnni)) {
                        dy[k] = aux + (size_t)(rbase + n + k) * nb * 2;
                        s8[k] = (const int32_t *)(dy[k] + nb);
                    }
                }
                if (vnni) {
                    if (q4k) quant_q4_Kx8_gemm8_vnni(nb, pa, y, dst, nc);
                    else if (q6k) quant_q6_Kx8_gemm8_vnni(nb, pa, y, dst, nc);
                    else quant_q_x8_gemm8_vnni(s0->type, nb, pa, y, dy, s8, dst, nc); /* q4_0, q8_0 */
                } else if (q4k)
                    quant_q4_Kx8_gemm4_avx2(nb, pa, y, dst, nc);
                else if (q6k)
                    quant_q6_Kx8_gemm4_avx2(nb, pa, y, dst, nc);
                else if (q8)
                    quant_q8_0x8_gemm4_avx2(nb, pa, y, dst, nc);
                else
                    quant_q4_0x8_gemm4_avx2(nb, pa, y, dy, s8, dst, nc);
            }
        } else {
            for (int64_t m = m0; m < M; m++) {
                const char *x = cpu_row_ptr(s0, m, j2, j3);
                for (int64_t n = 0; n < N; n += QUANT_MULTI_MAX) {
                    const int ny = N - n < QUANT_MULTI_MAX ? (int)(N - n) : QUANT_MULTI_MAX;
                    float r[QUANT_MULTI_MAX];
                    qk.multi(K, r, x, ybase + (size_t)n * b->s1, b->s1, ny);
                    for (int k = 0; k < ny; k++) ((float *)(dbase + (n + k) * (int64_t)node->nb[1]))[m] = r[k];
                }
            }
        }
    }
}
#endif

void cpu_op_mul_mat(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *s0 = node->src[0], *s1 = node->src[1];
    const cpu_type_funcs *tf0 = cpu_type_funcs_get(s0->type);
    const mm_plan p = mm_choose(node, ctx->simd, ctx->reference);
    const int64_t K = s0->ne[0], M = s0->ne[1];
    const int64_t N = s1->ne[1], B2 = s1->ne[2], B3 = s1->ne[3];
    const int64_t r2 = B2 / s0->ne[2], r3 = B3 / s0->ne[3];

    cpu_rows b;
    if (p.convert) {
        const cpu_type_funcs *tv = cpu_type_funcs_get(p.vdt);
        float *buf = (float *)ctx->wdata;
        int64_t lo, hi;
        cpu_split(N * B2 * B3, ctx->ith, ctx->nth, &lo, &hi);
        for (int64_t r = lo; r < hi; r++) {
            const float *x = cpu_load_row(s1, r % N, (r / N) % B2, r / (N * B2), buf);
            tv->from_f32(x, ctx->shared + (size_t)r * p.vdt_row, K);
#ifdef QUANT_HAVE_X86
            if (p.aux) {
                float *aux = (float *)(ctx->shared + p.vdt_row * (size_t)(N * B2 * B3)) + (size_t)r * (K / QK_32) * 2;
                quant_q8_0_block_sums_avx2(ctx->shared + (size_t)r * p.vdt_row, K / QK_32, aux,
                                           (int32_t *)(aux + K / QK_32));
            }
#endif
        }
        cpu_barrier_wait(ctx->barrier);
        b.base = ctx->shared;
        b.s1 = p.vdt_row;
        b.s2 = p.vdt_row * (size_t)N;
        b.s3 = p.vdt_row * (size_t)(N * B2);
    } else {
        b.base = s1->data;
        b.s1 = s1->nb[1];
        b.s2 = s1->nb[2];
        b.s3 = s1->nb[3];
    }

    if (p.use_gemm) {
        cpu_gemm_f32_avx2(node, ctx, tf0, &b);
        return;
    }
#ifdef QUANT_HAVE_X86
    if (p.qgemm) {
        mul_mat_x8_gemm(node, ctx, &p, &b);
        return;
    }
#endif

    void (*dot)(int64_t, float *, const void *, const void *) =
        ctx->reference ? tf0->vec_dot_ref : tf0->vec_dot;
    quant_mm_kernels qk;
    const int quant = !p.generic && quant_mm_kernels_get(s0->type, ctx->isa, &qk) == 0;
    if (quant) dot = qk.dot;
    const cpu_vec_ops *v = cpu_vec(ctx);
    float *row0 = (float *)ctx->wdata;
    /* src0 rows in blocks of MB (they stay in cache across the src1 rows), handed out
     * dynamically over (batch, block); with few src0 rows the src1 rows are split instead, in
     * groups of 4 so that the kernel computing a given (row, column) never depends on the thread
     * count (rows4/multi and dot may round differently) */
    /* mat-vec: long runs of rows (up to 512, a multiple of 8, about 4 chunks per thread) keep each
     * thread's weight stream sequential for the hardware prefetcher (measured: 14336x4096 mat-vec
     * 75-87% -> 95-107% of the triad going from 32 to 512 rows); the chunk size never changes which
     * kernel computes a row (groups of 4/8 rows stay aligned to multiples of 8) */
    int64_t MB = 16;
    if (N == 1) {
        MB = M / (4 * ctx->nth) / 8 * 8;
        MB = MB < 32 ? 32 : MB > 512 ? 512 : MB;
    }
    const int split_m = M >= 4 * ctx->nth || M * 4 >= N;
    int64_t n_lo = 0, n_hi = N;
    const int64_t nblk = (M + MB - 1) / MB, nchunks = split_m ? nblk * B2 * B3 : B2 * B3;
    if (!split_m) {
        int64_t g_lo, g_hi;
        cpu_split((N + 3) / 4, ctx->ith, ctx->nth, &g_lo, &g_hi);
        n_lo = g_lo * 4 < N ? g_lo * 4 : N;
        n_hi = g_hi * 4 < N ? g_hi * 4 : N;
    }
    const size_t rs0 = (size_t)s0->nb[1];
    for (int64_t c = split_m ? cpu_next_chunk(ctx) : 0; c < nchunks; c = split_m ? cpu_next_chunk(ctx) : c + 1) {
        const int64_t bi = split_m ? c / nblk : c;
        const int64_t i2 = bi % B2, i3 = bi / B2;
        const int64_t j2 = i2 / r2, j3 = i3 / r3;
        const int64_t m0 = split_m ? (c % nblk) * MB : 0;
        const int64_t m1 = split_m ? (m0 + MB < M ? m0 + MB : M) : M;
        char *dbase = (char *)node->data + i2 * (int64_t)node->nb[2] + i3 * (int64_t)node->nb[3];
        for (int64_t mb = m0; mb < m1; mb += MB) {
            const int64_t me = mb + MB < m1 ? mb + MB : m1;
            if (p.generic) { /* one conversion per src0 row, then every src1 row */
                for (int64_t m = mb; m < me; m++) {
                    const float *x = cpu_load_row(s0, m, j2, j3, row0);
                    for (int64_t n = n_lo; n < n_hi; n++) {
                        const char *y = b.base + (size_t)n * b.s1 + (size_t)i2 * b.s2 + (size_t)i3 * b.s3;
                        ((float *)(dbase + n * (int64_t)node->nb[1]))[m] = v->dot_f32(K, x, (const float *)y);
                    }
                }
                continue;
            }
#ifdef QUANT_HAVE_X86
            if (quant && N == 1 && ctx->repack && s0->type == PYG_TYPE_Q4_K) { /* mat-vec, repacked q4_K */
                const int64_t nb = K / QK_SUPER;
                const char *y = b.base + (size_t)i2 * b.s2 + (size_t)i3 * b.s3;
                for (int64_t m = mb; m < me; m += 8)
                    quant_q4_Kx8_gemv_avx2(nb, (const char *)ctx->repack + (size_t)(m / 8) * (size_t)nb * QUANT_Q4_KX8_BLOCK,
                                           y, (float *)dbase + m);
                continue;
            }
            if (quant && N == 1 && ctx->repack) { /* mat-vec over the repacked q4_0 weight */
                const int64_t nb = K / QK_32, bi_row = i2 + B2 * i3;
                const float *dy = (const float *)(ctx->shared + p.vdt_row * (size_t)(B2 * B3)) + (size_t)bi_row * nb * 2;
                const char *y = b.base + (size_t)i2 * b.s2 + (size_t)i3 * b.s3;
                for (int64_t m = mb; m < me; m += 8)
                    quant_q4_0x8_gemv_avx2(nb, (const char *)ctx->repack + (size_t)(m / 8) * (size_t)nb * QUANT_Q4_0X8_BLOCK,
                                           y, dy, (const int32_t *)(dy + nb), (float *)dbase + m);
                continue;
            }
#endif
            if (quant && N == 1 && qk.rows4) { /* mat-vec: four weight rows per activation load */
                const char *y = b.base + (size_t)i2 * b.s2 + (size_t)i3 * b.s3;
                float *d = (float *)dbase;
                int64_t m = mb;
                for (; m + 4 <= me; m += 4) qk.rows4(K, &d[m], cpu_row_ptr(s0, m, j2, j3), rs0, y);
                for (; m < me; m++) dot(K, &d[m], cpu_row_ptr(s0, m, j2, j3), y);
                continue;
            }
            if (quant && qk.multi && n_hi - n_lo > 1) { /* one weight row against up to 4 columns */
                for (int64_t m = mb; m < me; m++) {
                    const char *x = cpu_row_ptr(s0, m, j2, j3);
                    for (int64_t n = n_lo; n < n_hi; n += QUANT_MULTI_MAX) {
                        const int ny = n_hi - n < QUANT_MULTI_MAX ? (int)(n_hi - n) : QUANT_MULTI_MAX;
                        float r[QUANT_MULTI_MAX];
                        qk.multi(K, r, x, b.base + (size_t)n * b.s1 + (size_t)i2 * b.s2 + (size_t)i3 * b.s3, b.s1, ny);
                        for (int k = 0; k < ny; k++) ((float *)(dbase + (n + k) * (int64_t)node->nb[1]))[m] = r[k];
                    }
                }
                continue;
            }
            for (int64_t n = n_lo; n < n_hi; n++) {
                const char *y = b.base + (size_t)n * b.s1 + (size_t)i2 * b.s2 + (size_t)i3 * b.s3;
                float *d = (float *)(dbase + n * (int64_t)node->nb[1]);
                for (int64_t m = mb; m < me; m++) dot(K, &d[m], cpu_row_ptr(s0, m, j2, j3), y);
            }
        }
    }
}
