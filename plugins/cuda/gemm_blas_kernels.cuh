/* plugins/cuda/gemm_blas_kernels.cuh — the conversion kernels of the cuBLAS GEMM path, included
 * once by gemm_blas.cu after its plan types and GB_ constants (and by its host test through it):
 * max|x| partials and the scaled f16/bf16 conversion of the activations, the weights dequantized
 * 32 at a time into f16 rows, plain-type weights converted, staged results copied into dst.
 * Element functions are PYG_HD so the host test runs them as loops. */
#pragma once

/* src1 (f32, any strides) read in groups of 8 consecutive k; group g = kg + KG * column. */
struct gb_bsrc {
    const char *p;
    int64_t nb0, nb1, nb2, nb3;
    int64_t K, N, B2, KG;      /* KG = Kp / 8: groups per column, the pitch's tail reads zeros */
    int vec;                   /* 16-byte loads possible (nb0 == 4, aligned rows) */
};

PYG_HD int64_t gb_load8(const gb_bsrc &s, int64_t g, float v[8]) {
    const int64_t kg = g % s.KG, col = g / s.KG;
    const int64_t nn = col % s.N, bt = col / s.N;
    const char *base = s.p + nn * s.nb1 + (bt % s.B2) * s.nb2 + (bt / s.B2) * s.nb3;
    const int64_t k0 = kg * 8;
    if (s.vec && k0 + 8 <= s.K) {
        const float4 x = ((const float4 *)(base + k0 * 4))[0], y = ((const float4 *)(base + k0 * 4))[1];
        v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
        v[4] = y.x; v[5] = y.y; v[6] = y.z; v[7] = y.w;
    } else {
        for (int t = 0; t < 8; t++) v[t] = k0 + t < s.K ? *(const float *)(base + (k0 + t) * s.nb0) : 0.0f;
    }
    return col * s.KG * 8 + k0; /* index of v[0] in the copy (row pitch Kp = 8 KG) */
}

/* Power of two s with max|x| / s in [2^14, 2^15): x / s fits f16 (max 65504) with room for rounding
 * and uses its whole range, so neither large activations overflow nor tiny ones fall into f16's
 * subnormals. 1 when max|x| is 0 or not finite (inf/NaN then propagate as in f32). */
PYG_HD float gb_scale_for_max(float amax) {
    if (!(amax > 0.0f) || amax > 3.0e38f) return 1.0f;
    int e = 0;
    frexpf(amax / 32768.0f, &e); /* amax / 2^15 = f * 2^e, f in [0.5, 1) */
    if (e < -100) e = -100;      /* keep 1/s finite */
    return ldexpf(1.0f, e);
}

__global__ void __launch_bounds__(GB_THREADS) k_gb_absmax(gb_bsrc s, int64_t groups, float *part) {
    __shared__ float sh[32];
    float m = 0.0f;
    for (int64_t g = (int64_t)blockIdx.x * GB_THREADS + threadIdx.x; g < groups; g += (int64_t)gridDim.x * GB_THREADS) {
        float v[8];
        gb_load8(s, g, v);
#pragma unroll
        for (int t = 0; t < 8; t++) m = fmaxf(m, fabsf(v[t]));
    }
    m = block_max(m, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = m;
}

template <int MODE>
PYG_HD uint16_t gb_to16(float v) {
    if (MODE == GB_F16) {
        const gpu_half h = gpu_float2half(v);
        uint16_t u;
        memcpy(&u, &h, 2);
        return u;
    }
    return f32_to_bf16_bits(v);
}

/* Group g of src1 -> [B3][B2][N][Kp] in the GEMM's type (k >= K zero), times inv (f16: 1/s). */
template <int MODE>
PYG_HD void gb_convert_b_group(const gb_bsrc &s, int64_t g, float inv, void *out) {
    float v[8];
    const int64_t o = gb_load8(s, g, v); /* a multiple of 8: 16/32-byte aligned stores */
    if (MODE == GB_TF32) {
        float *d = (float *)out + o;
        ((float4 *)d)[0] = make_float4(v[0], v[1], v[2], v[3]);
        ((float4 *)d)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        uint16_t h[8];
        for (int t = 0; t < 8; t++) h[t] = gb_to16<MODE>(v[t] * inv);
        uint4 w;
        w.x = h[0] | ((uint32_t)h[1] << 16);
        w.y = h[2] | ((uint32_t)h[3] << 16);
        w.z = h[4] | ((uint32_t)h[5] << 16);
        w.w = h[6] | ((uint32_t)h[7] << 16);
        *(uint4 *)((uint16_t *)out + o) = w;
    }
}

/* GB_F16: s from the partial maxima of k_gb_absmax; block 0 stores alpha = s, beta = 0 for the GEMM
 * (device pointer mode). */
template <int MODE>
__global__ void __launch_bounds__(GB_THREADS) k_gb_convert_b(gb_bsrc s, int64_t groups, const float *part,
                                                             int nparts, float *alpha_beta, void *out) {
    float inv = 1.0f;
    if (MODE == GB_F16) {
        __shared__ float sh[32];
        float m = 0.0f;
        for (int i = threadIdx.x; i < nparts; i += GB_THREADS) m = fmaxf(m, part[i]);
        m = block_max(m, sh);
        const float sc = gb_scale_for_max(m);
        inv = 1.0f / sc; /* exact: a power of two */
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            alpha_beta[0] = sc;
            alpha_beta[1] = 0.0f;
        }
    }
    for (int64_t g = (int64_t)blockIdx.x * GB_THREADS + threadIdx.x; g < groups; g += (int64_t)gridDim.x * GB_THREADS)
        gb_convert_b_group<MODE>(s, g, inv, out);
}

/* 32 consecutive weights (unit u of a row) of a quantized row, as float. Host+device: the host test
 * (plugins/cuda/test/gemm_blas_host.cu) checks them against dequant_one. */
template <int T> PYG_HD void gb_unit32(const uint8_t *row, int64_t u, float w[32]);

template <> PYG_HD void gb_unit32<PYG_TYPE_Q4_0>(const uint8_t *row, int64_t u, float w[32]) {
    const uint8_t *blk = row + u * 18;
    const float d = f16_bits_to_f32(rd16(blk));
    for (int j = 0; j < 16; j++) {
        const uint8_t q = blk[2 + j];
        w[j] = d * (float)((q & 15) - 8);
        w[j + 16] = d * (float)((q >> 4) - 8);
    }
}

template <> PYG_HD void gb_unit32<PYG_TYPE_Q4_1>(const uint8_t *row, int64_t u, float w[32]) {
    const uint8_t *blk = row + u * 20;
    const float d = f16_bits_to_f32(rd16(blk)), m = f16_bits_to_f32(rd16(blk + 2));
    for (int j = 0; j < 16; j++) {
        const uint8_t q = blk[4 + j];
        w[j] = d * (float)(q & 15) + m;
        w[j + 16] = d * (float)(q >> 4) + m;
    }
}

template <> PYG_HD void gb_unit32<PYG_TYPE_Q8_0>(const uint8_t *row, int64_t u, float w[32]) {
    const uint8_t *blk = row + u * 34;
    const float d = f16_bits_to_f32(rd16(blk));
    for (int j = 0; j < 32; j++) w[j] = d * (float)(int8_t)blk[2 + j];
}

template <> PYG_HD void gb_unit32<PYG_TYPE_Q4_K>(const uint8_t *row, int64_t u, float w[32]) {
    const uint8_t *blk = row + (u >> 3) * Q4_K_BYTES;
    const int sub = (int)(u & 7), g = sub >> 1, hi = sub & 1;
    const float d = f16_bits_to_f32(rd16(blk)), dmin = f16_bits_to_f32(rd16(blk + 2));
    int sc, mn;
    q4k_scale_min(blk + 4, sub, &sc, &mn);
    const float ds = d * (float)sc, dm = dmin * (float)mn;
    const uint8_t *qs = blk + 16 + 32 * g;
    if (((uintptr_t)qs & 3) == 0) {
        for (int j = 0; j < 32; j += 4) {
            const uint32_t q4 = *(const uint32_t *)(qs + j) >> (4 * hi);
            for (int t = 0; t < 4; t++) w[j + t] = ds * (float)((q4 >> (8 * t)) & 15) - dm;
        }
    } else {
        for (int j = 0; j < 32; j++) w[j] = ds * (float)((qs[j] >> (4 * hi)) & 15) - dm;
    }
}

template <> PYG_HD void gb_unit32<PYG_TYPE_Q6_K>(const uint8_t *row, int64_t u, float w[32]) {
    const uint8_t *blk = row + (u >> 3) * Q6_K_BYTES;
    const int sub = (int)(u & 7), n = sub >> 2, quarter = sub & 3;
    const uint8_t *ql = blk + 64 * n + ((quarter & 1) ? 32 : 0), *qh = blk + 128 + 32 * n;
    const int8_t *sc = (const int8_t *)(blk + 192) + 8 * n + 2 * quarter;
    const float d = f16_bits_to_f32(rd16(blk + 208));
    const int lshift = (quarter & 2) ? 4 : 0, hshift = 2 * quarter;
    const float d0 = d * (float)sc[0], d1 = d * (float)sc[1];
    for (int l = 0; l < 32; l++) {
        const int q = (((ql[l] >> lshift) & 15) | (((qh[l] >> hshift) & 3) << 4)) - 32;
        w[l] = (l < 16 ? d0 : d1) * (float)q;
    }
}

/* 8 consecutive bytes at p (any alignment) into b[8]: 16-bit loads where p is even. */
PYG_HD void gb_bytes8(const uint8_t *p, uint8_t b[8]) {
    if (((uintptr_t)p & 1) == 0) {
        for (int j = 0; j < 4; j++) {
            const uint16_t h = *(const uint16_t *)(p + 2 * j);
            b[2 * j] = (uint8_t)h;
            b[2 * j + 1] = (uint8_t)(h >> 8);
        }
    } else {
        for (int j = 0; j < 8; j++) b[j] = p[j];
    }
}

/* Weights 8u .. 8u + 7 of a quantized row, as float, bit for bit gb_unit32's (and dequant_one's). The
 * prefill dequantizer gives each thread 8 weights, so that a warp's loads cover a few consecutive
 * blocks and its 16-byte stores one contiguous 512-byte run (32 weights per thread strided both). */
template <int T> PYG_HD void gb_unit8(const uint8_t *row, int64_t u, float w[8]);

template <> PYG_HD void gb_unit8<PYG_TYPE_Q4_0>(const uint8_t *row, int64_t u, float w[8]) {
    const uint8_t *blk = row + (u >> 2) * 18;
    const int q = (int)(u & 3), sh = (q >> 1) * 4;
    const float d = f16_bits_to_f32(rd16(blk));
    uint8_t b[8];
    gb_bytes8(blk + 2 + (q & 1) * 8, b);
    for (int j = 0; j < 8; j++) w[j] = d * (float)(((b[j] >> sh) & 15) - 8);
}

template <> PYG_HD void gb_unit8<PYG_TYPE_Q4_1>(const uint8_t *row, int64_t u, float w[8]) {
    const uint8_t *blk = row + (u >> 2) * 20;
    const int q = (int)(u & 3), sh = (q >> 1) * 4;
    const float d = f16_bits_to_f32(rd16(blk)), m = f16_bits_to_f32(rd16(blk + 2));
    uint8_t b[8];
    gb_bytes8(blk + 4 + (q & 1) * 8, b);
    for (int j = 0; j < 8; j++) w[j] = d * (float)((b[j] >> sh) & 15) + m;
}

template <> PYG_HD void gb_unit8<PYG_TYPE_Q8_0>(const uint8_t *row, int64_t u, float w[8]) {
    const uint8_t *blk = row + (u >> 2) * 34;
    const float d = f16_bits_to_f32(rd16(blk));
    uint8_t b[8];
    gb_bytes8(blk + 2 + (u & 3) * 8, b);
    for (int j = 0; j < 8; j++) w[j] = d * (float)(int8_t)b[j];
}

template <> PYG_HD void gb_unit8<PYG_TYPE_Q4_K>(const uint8_t *row, int64_t u, float w[8]) {
    const uint8_t *blk = row + (u >> 5) * Q4_K_BYTES;
    const int sub = (int)((u >> 2) & 7), g = sub >> 1, sh = (sub & 1) * 4, q = (int)(u & 3);
    const float d = f16_bits_to_f32(rd16(blk)), dmin = f16_bits_to_f32(rd16(blk + 2));
    int sc, mn;
    q4k_scale_min(blk + 4, sub, &sc, &mn);
    const float ds = d * (float)sc, dm = dmin * (float)mn;
    uint8_t b[8];
    gb_bytes8(blk + 16 + 32 * g + 8 * q, b);
    for (int j = 0; j < 8; j++) w[j] = ds * (float)((b[j] >> sh) & 15) - dm;
}

/* Weights per dequantizer unit: 8 where gb_unit8 exists, 32 (gb_unit32) for q6_K. */
__host__ __device__ constexpr int gb_dq_elems_of(int type) { return type == PYG_TYPE_Q6_K ? 32 : 8; }
template <int T> __host__ __device__ constexpr int gb_dq_elems() { return gb_dq_elems_of(T); }

/* Unit g (gb_dq_elems<T>() weights) of one chunk of weight rows [m0, m0 + mc) of every dim-2 batch
 * (`a` points at row m0) -> f16 [b2][mc][K]. */
template <int T>
PYG_HD void gb_dequant_unit(const char *a, int64_t nb1, int64_t nb2, int64_t mc, int64_t K, int64_t g,
                            uint16_t *out) {
    constexpr int E = gb_dq_elems<T>();
    const int64_t uk = K / E, u = g % uk, r = g / uk;
    const uint8_t *row = (const uint8_t *)(a + (r / mc) * nb2 + (r % mc) * nb1);
    float w[E];
    if constexpr (E == 8) gb_unit8<T>(row, u, w);
    else gb_unit32<T>(row, u, w);
    uint4 *d = (uint4 *)(out + r * K + u * E);
    for (int q = 0; q < E / 8; q++) {
        uint4 v;
        v.x = gb_to16<GB_F16>(w[8 * q + 0]) | ((uint32_t)gb_to16<GB_F16>(w[8 * q + 1]) << 16);
        v.y = gb_to16<GB_F16>(w[8 * q + 2]) | ((uint32_t)gb_to16<GB_F16>(w[8 * q + 3]) << 16);
        v.z = gb_to16<GB_F16>(w[8 * q + 4]) | ((uint32_t)gb_to16<GB_F16>(w[8 * q + 5]) << 16);
        v.w = gb_to16<GB_F16>(w[8 * q + 6]) | ((uint32_t)gb_to16<GB_F16>(w[8 * q + 7]) << 16);
        d[q] = v;
    }
}

template <int T>
__global__ void __launch_bounds__(GB_THREADS) k_gb_dequant_a(const char *a, int64_t nb1, int64_t nb2, int64_t mc,
                                                             int64_t K, int64_t units, uint16_t *out) {
    for (int64_t g = (int64_t)blockIdx.x * GB_THREADS + threadIdx.x; g < units; g += (int64_t)gridDim.x * GB_THREADS)
        gb_dequant_unit<T>(a, nb1, nb2, mc, K, g, out);
}

PYG_HD float gb_load_plain(const char *p, int type) {
    if (type == PYG_TYPE_F16) return f16_bits_to_f32(*(const uint16_t *)p);
    if (type == PYG_TYPE_BF16) return bf16_bits_to_f32(*(const uint16_t *)p);
    return *(const float *)p;
}

/* Element e of plain weights cuBLAS/our kernel cannot read in place (strided rows, f32 going to
 * bf16, K not a multiple of 32 for our kernel) -> [b2][mc][Kp], zeros past K. */
template <int MODE>
PYG_HD void gb_convert_a_elem(const tview &a, const char *base, int64_t mc, int64_t Kp, int64_t e, uint16_t *out) {
    const int64_t k = e % Kp, r = e / Kp;
    const char *row = base + (r / mc) * a.nb[2] + (r % mc) * a.nb[1];
    out[e] = gb_to16<MODE>(k < a.ne[0] ? gb_load_plain(row + k * a.nb[0], a.type) : 0.0f);
}

template <int MODE>
__global__ void __launch_bounds__(GB_THREADS) k_gb_convert_a(tview a, const char *base, int64_t mc, int64_t Kp,
                                                             int64_t count, uint16_t *out) {
    for (int64_t e = (int64_t)blockIdx.x * GB_THREADS + threadIdx.x; e < count; e += (int64_t)gridDim.x * GB_THREADS)
        gb_convert_a_elem<MODE>(a, base, mc, Kp, e, out);
}

/* Element e of staged C [B3][B2][N][M] -> dst with its own strides. */
PYG_HD void gb_copy_c_elem(const float *cs, const tview &d, int64_t e) {
    const int64_t M = d.ne[0], N = d.ne[1], B2 = d.ne[2];
    const int64_t m = e % M, col = e / M, nn = col % N, bt = col / N;
    *(float *)(d.data + m * d.nb[0] + nn * d.nb[1] + (bt % B2) * d.nb[2] + (bt / B2) * d.nb[3]) = cs[e];
}

__global__ void __launch_bounds__(GB_THREADS) k_gb_copy_c(const float *cs, tview d, int64_t count) {
    for (int64_t e = (int64_t)blockIdx.x * GB_THREADS + threadIdx.x; e < count; e += (int64_t)gridDim.x * GB_THREADS)
        gb_copy_c_elem(cs, d, e);
}

