/* plugins/cuda/test/gemm_blas_host.cu — the host side of the cuBLAS GEMM path (gemm_blas.cu), run
 * on a machine without a GPU (tests/test_cuda_blas.py builds and drives it):
 *
 *   gemm_blas_host decoders   the 32-weight unit decoders against dequant_one (every quant type,
 *                             random blocks), and the activation scale for f16
 *   gemm_blas_host plans      per-node plans: precision mode, in-place vs converted operands,
 *                             weight chunking, staging, broadcast folding, threshold
 *   gemm_blas_host gemm       with blas_lib=PATH naming a fake libcublas whose GEMM
 *                             computes on host memory: f32 weights (TF32 mode: operands in place,
 *                             so no kernel runs) over broadcast batches, strided rows, permuted
 *                             src1 and padded dst, against a double-precision reference
 *   gemm_blas_host scratch    prints the scratch bytes of one GEMM node (0 = path not taken)
 *
 * After the mode, KEY=VALUE arguments set the plugin's device options (options.h; blas_lib=PATH
 * too) for the whole run. Log lines go to stdout prefixed with "log: ". Exit 0 when every check
 * passed.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "gemm_blas.cu"
#include "options.cu"

void pyg_cuda_log(int32_t level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("log: [%d] ", level);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* mul_mat_mma.cu is not linked here: with FAKE_MMA=1 its TN GEMM is "available" and computed on the
 * host as gemm_blas.h specifies it, after checking the requirements the real kernel has. */
int mma_gemm_available(void) {
    const char *e = getenv("FAKE_MMA");
    return e && !strcmp(e, "1");
}

static int g_mma_calls;

int mma_gemm_tn(int f16, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int64_t sa, const void *B,
                int64_t ldb, int64_t sb, float *C, int64_t ldc, int64_t sc, int batch, const float *alpha,
                op_ctx *c) {
    if (K % 32 || (lda | ldb | sa | sb) % 8 || (((uintptr_t)A | (uintptr_t)B) & 15) || lda < K || ldb < K ||
        ldc < M || batch < 1) {
        snprintf(c->err, c->errlen, "mma_gemm_tn: requirements violated (K %lld lda %lld ldb %lld sa %lld sb %lld)",
                 (long long)K, (long long)lda, (long long)ldb, (long long)sa, (long long)sb);
        return PYG_ERR_INTERNAL;
    }
    const float al = alpha ? *alpha : 1.0f;
    const uint16_t *a16 = (const uint16_t *)A, *b16 = (const uint16_t *)B;
    for (int b = 0; b < batch; b++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    const uint16_t x = a16[b * sa + m * lda + k], y = b16[b * sb + n * ldb + k];
                    acc += (double)(f16 ? f16_bits_to_f32(x) : bf16_bits_to_f32(x)) *
                           (double)(f16 ? f16_bits_to_f32(y) : bf16_bits_to_f32(y));
                }
                C[b * sc + m + n * ldc] = al * (float)acc;
            }
    g_mma_calls++;
    return PYG_OK;
}

/* The conversion steps as host loops over gemm_blas.cu's element functions ("device" memory is host
 * memory here). */
static int host_convert_b(const pyg_tensor *b, const gb_plan &p, char *scr, op_ctx *c) {
    gb_bsrc s;
    s.p = (const char *)b->data;
    s.nb0 = (int64_t)b->nb[0]; s.nb1 = (int64_t)b->nb[1]; s.nb2 = (int64_t)b->nb[2]; s.nb3 = (int64_t)b->nb[3];
    s.K = p.K; s.N = p.N; s.B2 = p.B2; s.KG = p.Kp / 8;
    s.vec = b->nb[0] == 4 && (((uintptr_t)b->data | b->nb[1] | b->nb[2] | b->nb[3]) & 15) == 0;
    const int64_t groups = s.KG * p.N * p.B2 * p.B3;
    float inv = 1.0f;
    if (p.mode == GB_F16) {
        float m = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            float v[8];
            gb_load8(s, g, v);
            for (int t = 0; t < 8; t++) m = fmaxf(m, fabsf(v[t]));
        }
        float *ab = (float *)(scr + p.off_alpha);
        ab[0] = gb_scale_for_max(m);
        ab[1] = 0.0f;
        inv = 1.0f / ab[0];
    }
    void *out = scr + p.off_b;
    for (int64_t g = 0; g < groups; g++) {
        if (p.mode == GB_F16) gb_convert_b_group<GB_F16>(s, g, inv, out);
        else if (p.mode == GB_BF16) gb_convert_b_group<GB_BF16>(s, g, inv, out);
        else gb_convert_b_group<GB_TF32>(s, g, inv, out);
    }
    return PYG_OK;
}

static int host_convert_a(const pyg_tensor *a, const gb_plan &p, int64_t i03, int64_t m0, int64_t mc, uint16_t *out,
                          op_ctx *c) {
    const char *base = (const char *)a->data + i03 * (int64_t)a->nb[3] + m0 * (int64_t)a->nb[1];
    const int64_t nb1 = (int64_t)a->nb[1], nb2 = (int64_t)a->nb[2];
    if (is_supported_quant(a->type)) {
        const int64_t units = p.b2 * mc * (p.K / gb_dq_elems_of(a->type));
        for (int64_t g = 0; g < units; g++) {
            switch (a->type) {
            case PYG_TYPE_Q4_0: gb_dequant_unit<PYG_TYPE_Q4_0>(base, nb1, nb2, mc, p.K, g, out); break;
            case PYG_TYPE_Q4_1: gb_dequant_unit<PYG_TYPE_Q4_1>(base, nb1, nb2, mc, p.K, g, out); break;
            case PYG_TYPE_Q8_0: gb_dequant_unit<PYG_TYPE_Q8_0>(base, nb1, nb2, mc, p.K, g, out); break;
            case PYG_TYPE_Q4_K: gb_dequant_unit<PYG_TYPE_Q4_K>(base, nb1, nb2, mc, p.K, g, out); break;
            default: gb_dequant_unit<PYG_TYPE_Q6_K>(base, nb1, nb2, mc, p.K, g, out); break;
            }
        }
    } else {
        const tview v = make_view(a);
        for (int64_t e = 0; e < p.b2 * mc * p.Kp; e++) {
            if (p.mode == GB_F16) gb_convert_a_elem<GB_F16>(v, base, mc, p.Kp, e, out);
            else gb_convert_a_elem<GB_BF16>(v, base, mc, p.Kp, e, out);
        }
    }
    return PYG_OK;
}

static int host_copy_c(const pyg_tensor *n, const gb_plan &p, char *scr, op_ctx *c) {
    const tview d = make_view(n);
    for (int64_t e = 0; e < p.M * p.N * p.B2 * p.B3; e++) gb_copy_c_elem((const float *)(scr + p.off_c), d, e);
    return PYG_OK;
}

int check_launch(op_ctx *c, const char *what) {
    snprintf(c->err, c->errlen, "%s: no kernel may run in this host test", what);
    return PYG_ERR_INTERNAL;
}

static int g_fail;
#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);    \
            printf(__VA_ARGS__);                           \
            printf("\n");                                  \
            g_fail = 1;                                    \
        }                                                  \
    } while (0)

static uint32_t g_rng = 12345;
static uint32_t rnd(void) { g_rng = g_rng * 1664525u + 1013904223u; return g_rng >> 8; }
static float rndf(void) { return (float)(rnd() % 20001) / 10000.0f - 1.0f; }

/* ---------------------------------------------------------------- decoders */

static uint16_t f16_bits(float f) {
    const gpu_half h = gpu_float2half(f);
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

template <int T>
static void check_decoder(int block_bytes, int block_elems, const int *d_offs, int n_d) {
    const int nblk = 64;
    std::vector<uint8_t> row((size_t)nblk * block_bytes + 4);
    for (int off = 0; off < 2; off++) { /* aligned and 1-byte-misaligned rows */
        uint8_t *r = row.data() + off;
        for (int i = 0; i < nblk * block_bytes; i++) r[i] = (uint8_t)rnd();
        for (int b = 0; b < nblk; b++)
            for (int j = 0; j < n_d; j++) {
                const uint16_t h = f16_bits(rndf() * 0.05f);
                memcpy(r + (size_t)b * block_bytes + d_offs[j], &h, 2);
            }
        const int64_t units = (int64_t)nblk * block_elems / 32;
        int bad = 0;
        for (int64_t u = 0; u < units && !bad; u++) {
            float w[32];
            gb_unit32<T>(r, u, w);
            if constexpr (gb_dq_elems<T>() == 8) { /* the prefill dequantizer's 8-weight units, too */
                float w8[8];
                for (int q = 0; q < 4 && !bad; q++) {
                    gb_unit8<T>(r, u * 4 + q, w8);
                    for (int j = 0; j < 8; j++)
                        if (memcmp(&w8[j], &w[8 * q + j], 4) != 0) {
                            printf("FAIL unit8 type %d offset %d: unit %lld elem %d: %g != %g\n", T, off,
                                   (long long)u, 8 * q + j, w8[j], w[8 * q + j]);
                            bad = g_fail = 1;
                            break;
                        }
                }
            }
            for (int j = 0; j < 32 && !bad; j++) {
                const int64_t i = u * 32 + j;
                const float ref = dequant_one(r + (i / block_elems) * block_bytes, T, (int)(i % block_elems));
                if (w[j] != ref) {
                    printf("FAIL decoder type %d offset %d: unit %lld elem %d: %g != %g\n", T, off, (long long)u, j,
                           w[j], ref);
                    bad = g_fail = 1;
                    break;
                }
            }
        }
        if (!bad) printf("ok decoder type %d (row offset %d)\n", T, off);
    }
}

static int run_decoders(void) {
    const int q40[] = { 0 }, q41[] = { 0, 2 }, q80[] = { 0 }, q4k[] = { 0, 2 }, q6k[] = { 208 };
    check_decoder<PYG_TYPE_Q4_0>(18, 32, q40, 1);
    check_decoder<PYG_TYPE_Q4_1>(20, 32, q41, 2);
    check_decoder<PYG_TYPE_Q8_0>(34, 32, q80, 1);
    check_decoder<PYG_TYPE_Q4_K>(Q4_K_BYTES, 256, q4k, 2);
    check_decoder<PYG_TYPE_Q6_K>(Q6_K_BYTES, 256, q6k, 1);
    /* activation scale for f16: a power of two bringing max|x| into [2^14, 2^15) */
    const float cases[][2] = { { 0.0f, 1 }, { 1.0f, 1.0f / 16384 }, { 1000.0f, 1.0f / 32 }, { 32768.0f, 2 },
                               { 40000.0f, 2 }, { 65504.0f, 2 }, { 1.0e6f, 32 }, { 3.0e9f, 131072 },
                               { 1.0e-20f, 0x1p-81f }, { 1.0e-30f, 0x1p-100f }, { 1.0e-44f, 1 }, { INFINITY, 1 }, { NAN, 1 } };
    for (auto &c : cases) {
        const float s = gb_scale_for_max(c[0]);
        CHECK(s == c[1], "scale for max %g: %g, want %g", c[0], s, c[1]);
        CHECK(isfinite(1.0f / s), "1 / scale(%g) not finite", c[0]);
        if (isfinite(c[0]) && c[0] > 1e-25f) CHECK(c[0] / s >= 16384.0f && c[0] / s < 32768.0f, "max %g / scale %g", c[0], s);
    }
    /* f16 / bf16 bits of the conversion used for the GEMM operands */
    CHECK(gb_to16<GB_F16>(1.0f) == 0x3c00, "f16(1)");
    CHECK(gb_to16<GB_F16>(-2.5f) == 0xc100, "f16(-2.5)");
    CHECK(gb_to16<GB_BF16>(1.0f) == 0x3f80, "bf16(1)");
    CHECK(gb_to16<GB_BF16>(-2.5f) == 0xc020, "bf16(-2.5)");
    printf("%s decoders\n", g_fail ? "FAIL" : "ok");
    return g_fail;
}

/* ---------------------------------------------------------------- tensors */

struct owned {
    pyg_tensor t;
    std::vector<char> mem;
};

/* A tensor of `type` with ne and byte strides nb (nb = 0: contiguous), backed by host memory
 * (filled with random values for f32). */
static void make_tensor(owned &o, int type, const int64_t ne[4], const uint64_t nb_in[4], bool fill) {
    memset(&o.t, 0, sizeof o.t);
    o.t.type = type;
    const pyg_type_traits *tr = pyg_type_get_traits(type);
    uint64_t nb[4];
    nb[0] = (uint64_t)tr->type_size;
    nb[1] = (uint64_t)(ne[0] / tr->block_size) * nb[0];
    nb[2] = nb[1] * (uint64_t)ne[1];
    nb[3] = nb[2] * (uint64_t)ne[2];
    for (int i = 0; i < 4; i++) {
        o.t.ne[i] = ne[i];
        o.t.nb[i] = nb_in && nb_in[i] ? nb_in[i] : nb[i];
    }
    uint64_t bytes = (uint64_t)(ne[0] / tr->block_size) * o.t.nb[0];
    for (int i = 1; i < 4; i++) bytes += (uint64_t)(ne[i] - 1) * o.t.nb[i];
    o.mem.assign(bytes + 64, 0);
    o.t.data = (void *)(((uintptr_t)o.mem.data() + 31) & ~(uintptr_t)31);
    if (fill && tr->is_quantized) { /* random blocks with small finite f16 scales */
        const int nd = type == PYG_TYPE_Q4_K || type == PYG_TYPE_Q4_1 ? 2 : 1, doff = type == PYG_TYPE_Q6_K ? 208 : 0;
        const uint64_t nblk = bytes / (uint64_t)tr->type_size;
        uint8_t *q = (uint8_t *)o.t.data;
        for (uint64_t i = 0; i < nblk * (uint64_t)tr->type_size; i++) q[i] = (uint8_t)rnd();
        for (uint64_t bk = 0; bk < nblk; bk++)
            for (int j = 0; j < nd; j++) {
                const uint16_t h = f16_bits(rndf() * 0.02f);
                memcpy(q + bk * (uint64_t)tr->type_size + doff + 2 * j, &h, 2);
            }
    } else if (fill && (type == PYG_TYPE_F16 || type == PYG_TYPE_BF16)) {
        for (int64_t i3 = 0; i3 < ne[3]; i3++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i1 = 0; i1 < ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                        const float v = rndf();
                        const uint16_t h = type == PYG_TYPE_F16 ? f16_bits(v) : f32_to_bf16_bits(v);
                        memcpy((char *)o.t.data + i0 * o.t.nb[0] + i1 * o.t.nb[1] + i2 * o.t.nb[2] + i3 * o.t.nb[3], &h, 2);
                    }
    }
    if (fill && type == PYG_TYPE_F32) {
        for (int64_t i3 = 0; i3 < ne[3]; i3++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i1 = 0; i1 < ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < ne[0]; i0++)
                        *(float *)((char *)o.t.data + i0 * o.t.nb[0] + i1 * o.t.nb[1] + i2 * o.t.nb[2] + i3 * o.t.nb[3]) = rndf();
    }
}

static float at(const pyg_tensor &t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return *(const float *)((const char *)t.data + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]);
}

/* Weight element (k, m, i2, i3) of any supported type, as the reference sees it. */
static double wat(const pyg_tensor &t, int64_t k, int64_t m, int64_t i2, int64_t i3) {
    const char *row = (const char *)t.data + m * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
    const pyg_type_traits *tr = pyg_type_get_traits(t.type);
    if (tr->is_quantized)
        return dequant_one((const uint8_t *)row + (k / tr->block_size) * t.nb[0], t.type, (int)(k % tr->block_size));
    return gb_load_plain(row + k * t.nb[0], t.type);
}

struct node3 {
    owned a, b, d;
    void link() {
        d.t.op = PYG_OP_MUL_MAT;
        d.t.src[0] = &a.t;
        d.t.src[1] = &b.t;
    }
};

/* mul_mat node: weights [K, M, b2, b3] of wtype, activations [K, N, B2, B3] f32, dst [M, N, B2, B3] */
static void make_node(node3 &n, int wtype, int64_t M, int64_t K, int64_t N, int64_t b2, int64_t b3, int64_t B2,
                      int64_t B3, const uint64_t *anb = NULL, const uint64_t *bnb = NULL, const uint64_t *dnb = NULL) {
    const int64_t ane[4] = { K, M, b2, b3 }, bne[4] = { K, N, B2, B3 }, dne[4] = { M, N, B2, B3 };
    make_tensor(n.a, wtype, ane, anb, true);
    make_tensor(n.b, PYG_TYPE_F32, bne, bnb, true);
    make_tensor(n.d, PYG_TYPE_F32, dne, dnb, false);
    n.link();
}

/* ---------------------------------------------------------------- plans */

static int run_plans(void) {
    gb_plan p;
    node3 n;
    make_node(n, PYG_TYPE_F16, 256, 128, 32, 1, 1, 1, 1);
    CHECK(gb_plan_make(&n.d.t, &p, GB_BLAS) && p.mode == GB_F16 && !p.a_conv && p.b_conv && !p.c_stage && p.lda == 128,
          "f16 weights: in place, f16 activations");
    CHECK(p.total >= GB_WORKSPACE + (size_t)32 * 128 * 2, "f16 scratch holds workspace + activations");
    make_node(n, PYG_TYPE_F16, 256, 128, 31, 1, 1, 1, 1);
    CHECK(!gb_plan_make(&n.d.t, &p, GB_BLAS), "N = 31 stays below the default threshold");
    make_node(n, PYG_TYPE_BF16, 256, 128, 40, 1, 1, 1, 1);
    CHECK(gb_plan_make(&n.d.t, &p, GB_BLAS) && p.mode == GB_BF16 && !p.a_conv && p.b_conv, "bf16 weights: in place");
    make_node(n, PYG_TYPE_F32, 256, 128, 40, 1, 1, 1, 1);
    CHECK(gb_plan_make(&n.d.t, &p, GB_BLAS) && p.mode == GB_TF32 && !p.a_conv && !p.b_conv && !p.c_stage && p.total ==
          GB_WORKSPACE + 256 + al256(GB_MAX_PARTS * 4), "f32 weights: TF32, nothing converted");
    { /* f32 weights seen transposed (nb0 != 4): converted to bf16 */
        const uint64_t anb[4] = { 256 * 4, 4, 0, 0 };
        make_node(n, PYG_TYPE_F32, 256, 128, 40, 1, 1, 1, 1, anb);
        n.a.t.nb[2] = n.a.t.nb[3] = 128 * 256 * 4;
        CHECK(gb_plan_make(&n.d.t, &p, GB_BLAS) && p.mode == GB_BF16 && p.a_conv && p.b_conv && p.mc == 256,
              "transposed f32 weights: bf16");
    }
    { /* q4_K output head: chunks of rows, each <= 128 MiB of f16 */
        const int64_t M = 128256, K = 4096;
        node3 q;
        const int64_t ane[4] = { K, M, 1, 1 }, bne[4] = { K, 512, 1, 1 }, dne[4] = { M, 512, 1, 1 };
        memset(&q.a.t, 0, sizeof q.a.t);
        q.a.t.type = PYG_TYPE_Q4_K;
        for (int i = 0; i < 4; i++) q.a.t.ne[i] = ane[i];
        q.a.t.nb[0] = Q4_K_BYTES;
        q.a.t.nb[1] = (uint64_t)(K / 256) * Q4_K_BYTES;
        q.a.t.nb[2] = q.a.t.nb[3] = q.a.t.nb[1] * (uint64_t)M;
        q.a.t.data = (void *)(uintptr_t)0x10000;
        make_tensor(q.b, PYG_TYPE_F32, bne, NULL, false);
        make_tensor(q.d, PYG_TYPE_F32, dne, NULL, false);
        q.link();
        CHECK(gb_plan_make(&q.d.t, &p, GB_BLAS) && p.mode == GB_F16 && p.a_conv && p.mc < M && p.mc % 128 == 0 &&
              (size_t)p.mc * K * 2 <= blas_chunk_bytes() && p.mc >= GB_MIN_CHUNK_ROWS, "q4_K head: chunked (mc %lld)",
              (long long)p.mc);
    }
    { /* broadcast: B2 = 3 * b2 with contiguous operands folds into N; a padded dst does not */
        make_node(n, PYG_TYPE_F16, 64, 64, 32, 2, 1, 6, 1);
        CHECK(gb_plan_make(&n.d.t, &p, GB_BLAS) && p.r2 == 3 && p.merge, "r2 = 3 folded into N");
        const uint64_t dnb[4] = { 4, 64 * 4, 64 * 32 * 4 + 64, 0 };
        make_node(n, PYG_TYPE_F16, 64, 64, 32, 2, 1, 6, 1, NULL, NULL, dnb);
        CHECK(gb_plan_make(&n.d.t, &p, GB_BLAS) && p.r2 == 3 && !p.merge && !p.c_stage, "padded dst: r2 calls");
        const uint64_t tnb[4] = { 32 * 4, 4, 0, 0 }; /* dst seen transposed: staged */
        make_node(n, PYG_TYPE_F16, 32, 64, 32, 1, 1, 1, 1, NULL, NULL, tnb);
        CHECK(gb_plan_make(&n.d.t, &p, GB_BLAS) && p.c_stage && p.ldc == 32, "transposed dst: staged");
    }
    /* our WMMA kernel (no cuBLAS): no TF32, 16-byte-aligned in-place weights with K % 32 == 0, pitch Kp */
    make_node(n, PYG_TYPE_F32, 256, 128, 40, 1, 1, 1, 1);
    CHECK(gb_plan_make(&n.d.t, &p, GB_MMA) && p.mode == GB_BF16 && p.a_conv && p.b_conv && p.off_alpha == 0 &&
          p.total < GB_WORKSPACE, "mma: f32 weights to bf16, no cuBLAS workspace");
    make_node(n, PYG_TYPE_F16, 256, 128, 40, 1, 1, 1, 1);
    CHECK(gb_plan_make(&n.d.t, &p, GB_MMA) && !p.a_conv && p.lda == 128, "mma: aligned f16 weights in place");
    make_node(n, PYG_TYPE_F16, 256, 67, 40, 1, 1, 1, 1);
    CHECK(gb_plan_make(&n.d.t, &p, GB_MMA) && p.a_conv && p.Kp == 96 && p.ldb == 96 && p.sb2 == 40 * 96,
          "mma: K = 67 padded to 96");
    CHECK(gb_plan_make(&n.d.t, &p, GB_BLAS) && !p.a_conv && p.lda == 67 && p.ldb == 96, "blas: K = 67 in place");
    printf("%s plans\n", g_fail ? "FAIL" : "ok");
    return g_fail;
}

/* ---------------------------------------------------------------- GEMM through the fake cuBLAS */

static int fake_calls(void) {
    void *h = g_lib_path[0] ? dlopen(g_lib_path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    int (*f)(void) = h ? (int (*)(void))dlsym(h, "fake_gemm_calls") : NULL;
    return f ? f() : -1;
}

static void gemm_case(const char *name, node3 &n, int want_calls, double tol = 1e-10) {
    const pyg_tensor &a = n.a.t, &b = n.b.t, &d = n.d.t;
    const size_t need = gemm_blas_scratch_bytes(&d);
    if (!need) {
        printf("FAIL %s: the cuBLAS path declined the node\n", name);
        g_fail = 1;
        return;
    }
    std::vector<char> scratch(need + 256);
    char err[512] = "";
    op_ctx c;
    memset(&c, 0, sizeof c);
    c.device = 0;
    c.scratch = (void *)(((uintptr_t)scratch.data() + 255) & ~(uintptr_t)255);
    c.scratch_size = need;
    c.err = err;
    c.errlen = sizeof err;
    const int before = fake_calls() + g_mma_calls;
    const int st = gemm_blas_launch(&d, &c);
    const int calls = fake_calls() + g_mma_calls - before;
    if (st != PYG_OK) {
        printf("FAIL %s: launch returned %d: %s\n", name, st, err);
        g_fail = 1;
        return;
    }
    const int64_t M = a.ne[1], K = a.ne[0], N = b.ne[1], r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
    double num = 0, den = 0;
    for (int64_t i3 = 0; i3 < b.ne[3]; i3++)
        for (int64_t i2 = 0; i2 < b.ne[2]; i2++)
            for (int64_t nn = 0; nn < N; nn++)
                for (int64_t m = 0; m < M; m++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++)
                        s += wat(a, k, m, i2 / r2, i3 / r3) * (double)at(b, k, nn, i2, i3);
                    const double g = at(d, m, nn, i2, i3) - s;
                    num += g * g;
                    den += s * s;
                }
    const double nmse = num / (den > 0 ? den : 1);
    CHECK(nmse < tol, "%s: nmse %g", name, nmse);
    CHECK(want_calls < 0 || calls == want_calls, "%s: %d GEMM calls, want %d", name, calls, want_calls);
    if (nmse < tol && (want_calls < 0 || calls == want_calls))
        printf("ok gemm %s (nmse %.1e, %d calls)\n", name, nmse, calls);
}

static int run_gemm(void) {
    node3 n;
    make_node(n, PYG_TYPE_F32, 70, 67, 40, 1, 1, 1, 1);
    gemm_case("plain", n, 1);
    make_node(n, PYG_TYPE_F32, 33, 64, 32, 2, 1, 6, 2); /* r2 = 3, r3 = 2 over contiguous operands: folded */
    gemm_case("broadcast-folded", n, 2);
    make_node(n, PYG_TYPE_F32, 33, 64, 32, 1, 2, 4, 2); /* weights broadcast to every dim-2 batch */
    gemm_case("broadcast-b2-1", n, 2);
    { /* weight rows with a stride (lda > K) and dim-3 weight batches */
        const uint64_t anb[4] = { 4, (64 + 5) * 4, (64 + 5) * 4 * 33, (64 + 5) * 4 * 33 * 2 };
        make_node(n, PYG_TYPE_F32, 33, 64, 36, 2, 2, 2, 4, anb);
        gemm_case("strided-weights", n, 4);
    }
    { /* src1 permuted: the columns of the B2 batches interleave, so broadcast batches go one call each */
        const int64_t K = 48, N = 34, B2 = 4;
        const uint64_t bnb[4] = { 4, (uint64_t)(K * 4 * B2), (uint64_t)(K * 4), (uint64_t)(K * 4 * N * B2) };
        make_node(n, PYG_TYPE_F32, 40, K, N, 2, 1, B2, 1, NULL, bnb);
        gemm_case("permuted-src1", n, 2);
    }
    { /* dst with padding between dim-2 batches: no folding */
        const int64_t M = 40, N = 32;
        const uint64_t dnb[4] = { 4, (uint64_t)(M * 4), (uint64_t)(M * N * 4 + 128), (uint64_t)((M * N * 4 + 128) * 6) };
        make_node(n, PYG_TYPE_F32, M, 64, N, 2, 1, 6, 1, NULL, NULL, dnb);
        gemm_case("padded-dst", n, 3);
    }
    { /* dst rows with a stride (ldc > M) */
        const int64_t M = 40, N = 33;
        const uint64_t dnb[4] = { 4, (uint64_t)((M + 7) * 4), 0, 0 };
        make_node(n, PYG_TYPE_F32, M, 64, N, 1, 1, 1, 1, NULL, NULL, dnb);
        n.d.t.nb[2] = n.d.t.nb[3] = (uint64_t)((M + 7) * 4 * N);
        gemm_case("strided-dst", n, 1);
    }
    printf("%s gemm\n", g_fail ? "FAIL" : "ok");
    return g_fail;
}

/* Whole nodes of every weight type through gemm_blas_launch with the conversion steps on the host:
 * with the fake cuBLAS (blas_lib=PATH) or, with blas=0 and FAKE_MMA=1, the host model of our WMMA
 * kernel. Run with blas_chunk_mb=1 to split the big weights. */
static int run_pipeline(void) {
    g_steps.convert_b = host_convert_b;
    g_steps.convert_a = host_convert_a;
    g_steps.copy_c = host_copy_c;
    const double tol = 5e-5; /* f16/bf16 rounding of both operands: ~1e-7 / ~3e-6 */
    node3 n;
    const int types[] = { PYG_TYPE_Q4_0, PYG_TYPE_Q4_1, PYG_TYPE_Q8_0, PYG_TYPE_Q4_K, PYG_TYPE_Q6_K, PYG_TYPE_F16, PYG_TYPE_BF16,
                          PYG_TYPE_F32 };
    for (int t : types) {
        char name[64];
        snprintf(name, sizeof name, "%s-plain", pyg_type_get_traits(t)->name);
        make_node(n, t, 70, 256, 40, 1, 1, 1, 1);
        gemm_case(name, n, -1, tol);
        snprintf(name, sizeof name, "%s-broadcast", pyg_type_get_traits(t)->name);
        make_node(n, t, 130, 512, 33, 2, 1, 4, 2); /* r2 = 2 folded, r3 = 2 */
        gemm_case(name, n, -1, tol);
        { /* src1 seen transposed: nb0 = N * 4 */
            const int64_t K = 256, N = 36;
            const uint64_t bnb[4] = { (uint64_t)N * 4, 4, (uint64_t)(K * N * 4), (uint64_t)(K * N * 4 * 2) };
            snprintf(name, sizeof name, "%s-transposed-src1", pyg_type_get_traits(t)->name);
            make_node(n, t, 48, K, N, 1, 1, 2, 1, NULL, bnb);
            gemm_case(name, n, -1, tol);
        }
        { /* dst seen transposed: staged and copied */
            const int64_t M = 40, N = 32;
            const uint64_t dnb[4] = { (uint64_t)N * 4, 4, (uint64_t)(M * N * 4), 0 };
            snprintf(name, sizeof name, "%s-transposed-dst", pyg_type_get_traits(t)->name);
            make_node(n, t, M, 256, N, 1, 1, 1, 1, NULL, NULL, dnb);
            gemm_case(name, n, -1, tol);
        }
        snprintf(name, sizeof name, "%s-chunks", pyg_type_get_traits(t)->name);
        make_node(n, t, 2100, 256, 32, 1, 1, 1, 1); /* with CHUNK_MB=1 converted weights go in 3 chunks */
        gemm_case(name, n, -1, tol);
    }
    for (int t : { PYG_TYPE_F16, PYG_TYPE_BF16, PYG_TYPE_F32 }) { /* K not a multiple of 32 */
        char name[64];
        snprintf(name, sizeof name, "%s-odd-k", pyg_type_get_traits(t)->name);
        make_node(n, t, 50, 67, 40, 1, 1, 1, 1);
        gemm_case(name, n, -1, tol);
    }
    { /* activations far beyond f16's range, and tiny ones: the power-of-two scale */
        make_node(n, PYG_TYPE_Q8_0, 64, 256, 40, 1, 1, 1, 1);
        for (size_t i = 0; i < (size_t)(256 * 40); i++) ((float *)n.b.t.data)[i] *= 1.0e6f;
        gemm_case("q8_0-huge-activations", n, -1, tol);
        make_node(n, PYG_TYPE_F16, 64, 256, 40, 1, 1, 1, 1);
        for (size_t i = 0; i < (size_t)(256 * 40); i++) ((float *)n.b.t.data)[i] *= 1.0e-7f;
        gemm_case("f16-tiny-activations", n, -1, tol);
    }
    printf("%s pipeline\n", g_fail ? "FAIL" : "ok");
    return g_fail;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s decoders|plans|gemm|pipeline|scratch [KEY=VALUE ...]\n", argv[0]);
        return 2;
    }
    static cuda_options opts = cuda_options_defaults;
    for (int i = 2; i < argc; i++) {
        char key[64], msg[700];
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq - argv[i] >= (long)sizeof key) {
            fprintf(stderr, "not KEY=VALUE: %s\n", argv[i]);
            return 2;
        }
        snprintf(key, sizeof key, "%.*s", (int)(eq - argv[i]), argv[i]);
        const int32_t st = !strcmp(key, "blas_lib") ? gemm_blas_set_library(eq + 1, msg, sizeof msg)
                                                    : cuda_options_set(&opts, key, eq + 1, msg, sizeof msg);
        if (st != PYG_OK) {
            fprintf(stderr, "%s\n", msg);
            return 2;
        }
    }
    cuda_opts_scope bound(&opts);
    if (!strcmp(argv[1], "decoders")) return run_decoders();
    if (!strcmp(argv[1], "plans")) return run_plans();
    if (!strcmp(argv[1], "gemm")) return run_gemm();
    if (!strcmp(argv[1], "pipeline")) return run_pipeline();
    if (!strcmp(argv[1], "scratch")) {
        node3 n;
        make_node(n, PYG_TYPE_F32, 64, 64, 64, 1, 1, 1, 1);
        printf("scratch %zu\n", gemm_blas_scratch_bytes(&n.d.t));
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
