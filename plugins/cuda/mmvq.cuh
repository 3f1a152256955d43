/* plugins/cuda/mmvq.cuh — integer mat-vec for quantized weights (the decode path).
 *
 * The activation columns are first quantized to int8 in blocks of 32 (scale d = max|y|/127 and
 * s = d * sum(q), so a block's value is d*q); a weight unit is then dotted with them by 4-byte
 * integer dot products (dp4a), four weights per instruction, instead of converting every weight to
 * float: the float path runs out of issue slots long before HBM runs out of bandwidth. Error: int8
 * activations add an NMSE of about 3e-5 (the mul_mat threshold is 5e-4), as ggml's q8_1 path does.
 *
 * Host+device: plugins/cuda/test/dequant_host.cu checks every unit against a double-precision dot
 * on the CPU. Units (per row of K weights), taken by consecutive lanes so that a warp's loads cover
 * consecutive bytes (a unit per lane over whole blocks made every 2-byte load instruction touch 5 or
 * more cache lines, and the L1 request rate, not HBM, limited the kernel):
 *   q4_0, q8_0: a quarter block (4 lanes per block).
 *   q4_K: 16 of the 128 nibble bytes (8 lanes per block), plus the block head.
 *   q6_K: (block, half n, l-half lh): 4 runs of 16 weights, each half a y block, one scale each.
 * UNROLL: units a lane has in flight in the kernel loop (smaller units need more to keep HBM busy).
 */
#ifndef PYG_CUDA_MMVQ_CUH
#define PYG_CUDA_MMVQ_CUH
#include "common.cuh"

#ifdef __CUDA_ARCH__
#define PYGQ_UNROLL _Pragma("unroll")
#else
#define PYGQ_UNROLL
#endif

/* ---- byte-wise integer helpers (emulated on the host) ---- */
PYG_HD int dp4a_s8(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}

PYG_HD uint32_t vsub4(uint32_t a, uint32_t b) { /* per-byte a - b, no borrow across bytes */
#ifdef __CUDA_ARCH__
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= ((((a >> (8 * k)) & 0xff) - ((b >> (8 * k)) & 0xff)) & 0xff) << (8 * k);
    return r;
#endif
}

PYG_HD uint32_t ld_u32_a2(const uint8_t *p) { /* 4 bytes from a 2-byte aligned address */
    const uint16_t *q = (const uint16_t *)p;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}

PYG_HD int ld_i32(const int8_t *p) { return *(const int *)p; } /* 4-byte aligned */

/* 16 activation quants as 4 words, from a 16-byte aligned address (one vector load). */
PYG_HD void ld_y16(const int8_t *p, int *w) {
    const int4 v = *(const int4 *)p;
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
}

/* Quantize one block of 32 activations: q[i] = round(y[i] / d), ds = (d, d * sum q). */
PYG_HD void q8_block(const float *y, int8_t *q, float *ds) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(y[i]));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; i++) {
        const int v = (int)rintf(y[i] * id);
        q[i] = (int8_t)v;
        sum += v;
    }
    ds[0] = d;
    ds[1] = d * (float)sum;
}

/* One unit of row `row` against NC int8 columns: column c's quants at yq + c*sq, its (d, s) pairs
 * at yds + c*sd (float pairs, one per 32 activations). Adds into acc[c] for c < ncols. */
template <int T> struct mmvq;

/* (d, s) of y block b of a column: one 8-byte load (yds is 8-byte aligned, its stride even). */
PYG_HD float2 ld_ds(const float *yds, int64_t b) { return *(const float2 *)(yds + 2 * b); }

/* Byte k (runtime, < 12) of the q4_K scale field held in three words, without a local array
 * (a dynamically indexed array would go to local memory). */
PYG_HD int q4k_sbyte(uint32_t s0, uint32_t s1, uint32_t s2, int k) {
    const uint32_t w = k < 4 ? s0 : k < 8 ? s1 : s2;
    return (int)((w >> (8 * (k & 3))) & 0xff);
}

/* q4_0: four lanes per block, a unit is 4 quant bytes (weights 4q..4q+3 in the low nibbles,
 * 16+4q.. in the high ones): a warp's loads cover 8 consecutive blocks, so each 2-byte load
 * instruction touches 2 cache lines instead of 5 with a block per lane. The -8 offset term uses the
 * whole block's sum and is added by the block's first lane only. */
template <> struct mmvq<PYG_TYPE_Q4_0> {
    static constexpr int UNROLL = 8;
    static PYG_HD int64_t units(int64_t K) { return K / 8; }
    template <int NC>
    static PYG_HD void unit(const char *row, int64_t u, const int8_t *yq, const float *yds, int64_t sq, int64_t sd,
                            int ncols, float *acc) {
        const int64_t b = u >> 2;
        const int q = (int)(u & 3);
        const uint8_t *blk = (const uint8_t *)row + b * 18;
        const float dw = f16_bits_to_f32(*(const uint16_t *)blk);
        const uint32_t w = ld_u32_a2(blk + 2 + 4 * q);
        PYGQ_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) break;
            const int8_t *y = yq + c * sq + b * 32 + 4 * q;
            const float2 ds = ld_ds(yds + c * sd, b);
            int s = dp4a_s8((int)(w & 0x0f0f0f0fu), ld_i32(y), 0);
            s = dp4a_s8((int)((w >> 4) & 0x0f0f0f0fu), ld_i32(y + 16), s);
            acc[c] += dw * (ds.x * (float)s - (q == 0 ? 8.0f * ds.y : 0.0f));
        }
    }
};

/* q8_0: four lanes per block, a unit is 8 quant bytes. */
template <> struct mmvq<PYG_TYPE_Q8_0> {
    static constexpr int UNROLL = 4;
    static PYG_HD int64_t units(int64_t K) { return K / 8; }
    template <int NC>
    static PYG_HD void unit(const char *row, int64_t u, const int8_t *yq, const float *yds, int64_t sq, int64_t sd,
                            int ncols, float *acc) {
        const int64_t b = u >> 2;
        const int q = (int)(u & 3);
        const uint8_t *blk = (const uint8_t *)row + b * 34;
        const float dw = f16_bits_to_f32(*(const uint16_t *)blk);
        const uint32_t w0 = ld_u32_a2(blk + 2 + 8 * q), w1 = ld_u32_a2(blk + 6 + 8 * q);
        PYGQ_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) break;
            const int2 yv = *(const int2 *)(yq + c * sq + b * 32 + 8 * q);
            const int s = dp4a_s8((int)w1, yv.y, dp4a_s8((int)w0, yv.x, 0));
            acc[c] += dw * yds[c * sd + 2 * b] * (float)s;
        }
    }
};

/* q4_K: eight lanes per block, a unit is 16 bytes of nibbles (j = 2g + h: weights 64g+16h+t in the
 * low nibbles, sub-block 2g, and 64g+32+16h+t in the high ones, sub-block 2g+1, t < 16), read as one
 * 16-byte load; the block's 16-byte head (d, dmin, the 12 scale bytes) is one more 16-byte load, the
 * same address for the block's 8 lanes. A warp's loads cover 4 consecutive blocks. The min term
 * needs the sum of the unit's own 16 activations: one dp4a against ones per word. */
template <> struct mmvq<PYG_TYPE_Q4_K> {
    static constexpr int UNROLL = 4;
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    template <int NC>
    static PYG_HD void unit(const char *row, int64_t u, const int8_t *yq, const float *yds, int64_t sq, int64_t sd,
                            int ncols, float *acc) {
        const int64_t b = u >> 3;
        const int j = (int)(u & 7), g = j >> 1, h = j & 1;
        const uint8_t *blk = (const uint8_t *)row + b * Q4_K_BYTES;
        const uint4 hd = *(const uint4 *)blk;                         /* 16-byte aligned: checked on the host */
        const uint4 qv = *(const uint4 *)(blk + 16 + 16 * j);
        const uint32_t w[4] = { qv.x, qv.y, qv.z, qv.w };
        const float d = f16_bits_to_f32((uint16_t)(hd.x & 0xffff)), dmin = f16_bits_to_f32((uint16_t)(hd.x >> 16));
        int s0, m0, s1, m1;
        if (g < 2) { /* sub-blocks 2g, 2g+1 < 4: 6-bit fields in bytes j and j + 4 */
            s0 = q4k_sbyte(hd.y, hd.z, hd.w, 2 * g) & 63;
            m0 = q4k_sbyte(hd.y, hd.z, hd.w, 2 * g + 4) & 63;
            s1 = q4k_sbyte(hd.y, hd.z, hd.w, 2 * g + 1) & 63;
            m1 = q4k_sbyte(hd.y, hd.z, hd.w, 2 * g + 5) & 63;
        } else {
            const int k0 = 2 * g, k1 = 2 * g + 1;
            const int a0 = q4k_sbyte(hd.y, hd.z, hd.w, k0 + 4), a1 = q4k_sbyte(hd.y, hd.z, hd.w, k1 + 4);
            s0 = (a0 & 0x0f) | ((q4k_sbyte(hd.y, hd.z, hd.w, k0 - 4) >> 6) << 4);
            m0 = (a0 >> 4) | ((q4k_sbyte(hd.y, hd.z, hd.w, k0) >> 6) << 4);
            s1 = (a1 & 0x0f) | ((q4k_sbyte(hd.y, hd.z, hd.w, k1 - 4) >> 6) << 4);
            m1 = (a1 >> 4) | ((q4k_sbyte(hd.y, hd.z, hd.w, k1) >> 6) << 4);
        }
        const int64_t yb = 8 * b + 2 * g; /* y block of the low nibbles; +1 for the high ones */
        PYGQ_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) break;
            const int8_t *ya = yq + c * sq + yb * 32 + 16 * h;
            int yl[4], yh[4];
            ld_y16(ya, yl);
            ld_y16(ya + 32, yh);
            int lo = 0, hi = 0, sl = 0, sh = 0;
            PYGQ_UNROLL
            for (int i = 0; i < 4; i++) {
                lo = dp4a_s8((int)(w[i] & 0x0f0f0f0fu), yl[i], lo);
                hi = dp4a_s8((int)((w[i] >> 4) & 0x0f0f0f0fu), yh[i], hi);
                sl = dp4a_s8(0x01010101, yl[i], sl);
                sh = dp4a_s8(0x01010101, yh[i], sh);
            }
            const float dl = yds[c * sd + 2 * yb], dh = yds[c * sd + 2 * yb + 2];
            acc[c] += d * ((float)s0 * dl * (float)lo + (float)s1 * dh * (float)hi) -
                      dmin * ((float)m0 * dl * (float)sl + (float)m1 * dh * (float)sh);
        }
    }
};

template <> struct mmvq<PYG_TYPE_Q6_K> {
    static constexpr int UNROLL = 2;
    static PYG_HD int64_t units(int64_t K) { return K / 64; }
    template <int NC>
    static PYG_HD void unit(const char *row, int64_t u, const int8_t *yq, const float *yds, int64_t sq, int64_t sd,
                            int ncols, float *acc) {
        const int64_t b = u >> 2;
        const int n = (int)((u >> 1) & 1), lh = (int)(u & 1);
        const uint8_t *blk = (const uint8_t *)row + b * Q6_K_BYTES;
        const uint8_t *qla = blk + 64 * n + 16 * lh, *qlb = qla + 32, *qh = blk + 128 + 32 * n + 16 * lh;
        const int8_t *sc = (const int8_t *)(blk + 192) + 8 * n + lh;
        const float d = f16_bits_to_f32(*(const uint16_t *)(blk + 208));
        int32_t q[4][4]; /* [quarter][word]: signed bytes q - 32 */
        PYGQ_UNROLL
        for (int i = 0; i < 4; i++) {
            const uint32_t A = ld_u32_a2(qla + 4 * i), B = ld_u32_a2(qlb + 4 * i), H = ld_u32_a2(qh + 4 * i);
            q[0][i] = (int32_t)vsub4((A & 0x0f0f0f0fu) | ((H << 4) & 0x30303030u), 0x20202020u);
            q[1][i] = (int32_t)vsub4((B & 0x0f0f0f0fu) | ((H << 2) & 0x30303030u), 0x20202020u);
            q[2][i] = (int32_t)vsub4(((A >> 4) & 0x0f0f0f0fu) | (H & 0x30303030u), 0x20202020u);
            q[3][i] = (int32_t)vsub4(((B >> 4) & 0x0f0f0f0fu) | ((H >> 2) & 0x30303030u), 0x20202020u);
        }
        const int64_t yb = 8 * b + 4 * n; /* y block of quarter 0; quarter r is yb + r */
        PYGQ_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) break;
            const int8_t *y = yq + c * sq + yb * 32 + 16 * lh;
            const float *ds = yds + c * sd + 2 * yb;
            float t = 0.0f;
            PYGQ_UNROLL
            for (int r = 0; r < 4; r++) {
                int yv[4];
                ld_y16(y + 32 * r, yv);
                int s = 0;
                PYGQ_UNROLL
                for (int i = 0; i < 4; i++) s = dp4a_s8(q[r][i], yv[i], s);
                t += (float)sc[2 * r] * ds[2 * r] * (float)s;
            }
            acc[c] += d * t;
        }
    }
};

#endif
