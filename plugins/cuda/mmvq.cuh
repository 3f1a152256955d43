/* plugins/cuda/mmvq.cuh — integer mat-vec for quantized weights (the decode path).
 *
 * The activation columns are first quantized to int8 in blocks of 32 (scale d = max|y|/127 and
 * s = d * sum(q), so a block's value is d*q); a weight unit is then dotted with them by 4-byte
 * integer dot products (dp4a), four weights per instruction, instead of converting every weight to
 * float: the float path runs out of issue slots long before HBM runs out of bandwidth. Error: int8
 * activations add an NMSE of about 3e-5 (the mul_mat threshold is 5e-4), as ggml's q8_1 path does.
 *
 * Host+device: plugins/cuda/test/dequant_host.cu checks every unit against a double-precision dot
 * on the CPU. Units (per row of K weights):
 *   q4_0, q8_0: one block (32 weights) against one y block.
 *   q4_K: (block, g): 32 bytes of nibbles = sub-blocks 2g (low) and 2g+1 (high), 64 weights.
 *   q6_K: (block, half n, l-half lh): 4 runs of 16 weights, each half a y block, one scale each.
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

/* A block of 2 + 4*NW bytes (an f16 scale, then NW words of quants) at a 2-byte aligned address,
 * read as NW + 1 aligned words from the 4-byte boundary at or below it, the same instructions in
 * every lane (no divergence), and realigned in registers: half the load instructions of 2-byte
 * loads, each touching the same cache lines. The last word may extend 2 bytes past the block,
 * never past its 4-byte word (so never into another page). */
template <int NW>
PYG_HD void ld_block_a2(const uint8_t *blk, uint16_t *d, uint32_t *q) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)blk & ~(uintptr_t)3);
    const bool odd = ((uintptr_t)blk & 2) != 0; /* the block starts 2 bytes into a word */
    uint32_t w[NW + 1];
    PYGQ_UNROLL
    for (int i = 0; i <= NW; i++) w[i] = a[i];
    *d = (uint16_t)(odd ? w[0] >> 16 : w[0] & 0xffffu);
    PYGQ_UNROLL
    for (int i = 0; i < NW; i++) q[i] = odd ? w[i + 1] : (uint32_t)((((uint64_t)w[i + 1] << 32) | w[i]) >> 16);
}

/* 16 activation quants as 4 words, from a 16-byte aligned address (one vector load). */
PYG_HD void ld_y16(const int8_t *p, int *w) {
    const int4 v = *(const int4 *)p;
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
}

/* Quantize one block of 32 activations: q[i] = round(y[i] / d), ds = (d, d * sum q); a NaN or an inf
 * makes d NaN and every quant 0 (warp_quant_block's rule). */
PYG_HD void q8_block(const float *y, int8_t *q, float *ds) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, y[i] != y[i] ? INFINITY : fabsf(y[i]));
    const float d = amax < INFINITY ? amax / 127.0f : NAN, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; i++) {
        const float x = y[i] * id;
        const int v = x == x ? (int)rintf(x) : 0;
        q[i] = (int8_t)v;
        sum += v;
    }
    ds[0] = d;
    ds[1] = d * (float)sum;
}

/* The integer dot of a block's 32 nibbles (4 words, q4_0's order: low nibbles elements 0..15, high
 * 16..31) with 32 int8 activation quants (16-byte aligned). */
PYG_HD int nib_dot(const uint32_t w[4], const int8_t *y) {
    int ya[4], yb[4];
    ld_y16(y, ya);
    ld_y16(y + 16, yb);
    int s = 0;
    PYGQ_UNROLL
    for (int i = 0; i < 4; i++) {
        s = dp4a_s8((int)(w[i] & 0x0f0f0f0fu), ya[i], s);
        s = dp4a_s8((int)((w[i] >> 4) & 0x0f0f0f0fu), yb[i], s);
    }
    return s;
}

/* One unit of row `row` against NC int8 columns: column c's quants at yq + c*sq, its (d, s) pairs
 * at yds + c*sd (float pairs, one per 32 activations). Adds into acc[c] for c < ncols. */
template <int T> struct mmvq;

template <> struct mmvq<PYG_TYPE_Q4_0> {
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    template <int NC>
    static PYG_HD void unit(const char *row, int64_t u, const int8_t *yq, const float *yds, int64_t sq, int64_t sd,
                            int ncols, float *acc) {
        uint16_t dh;
        uint32_t w[4];
        ld_block_a2<4>((const uint8_t *)row + u * 18, &dh, w);
        const float dw = f16_bits_to_f32(dh);
        PYGQ_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) break;
            const float *ds = yds + c * sd + 2 * u;
            acc[c] += dw * (ds[0] * (float)nib_dot(w, yq + c * sq + u * 32) - 8.0f * ds[1]);
        }
    }
};

template <> struct mmvq<PYG_TYPE_Q4_1> { /* sum(d q + m) y = d dy sum(q qy) + m sum(y) */
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    template <int NC>
    static PYG_HD void unit(const char *row, int64_t u, const int8_t *yq, const float *yds, int64_t sq, int64_t sd,
                            int ncols, float *acc) {
        const uint8_t *blk = (const uint8_t *)row + u * 20;
        const float dw = f16_bits_to_f32(rd16(blk)), mw = f16_bits_to_f32(rd16(blk + 2));
        uint32_t w[4];
        PYGQ_UNROLL
        for (int i = 0; i < 4; i++) w[i] = ld_u32_a2(blk + 4 + 4 * i);
        PYGQ_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) break;
            const float *ds = yds + c * sd + 2 * u;
            acc[c] += dw * ds[0] * (float)nib_dot(w, yq + c * sq + u * 32) + mw * ds[1];
        }
    }
};

template <> struct mmvq<PYG_TYPE_Q8_0> {
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    template <int NC>
    static PYG_HD void unit(const char *row, int64_t u, const int8_t *yq, const float *yds, int64_t sq, int64_t sd,
                            int ncols, float *acc) {
        uint16_t dh;
        uint32_t w[8];
        ld_block_a2<8>((const uint8_t *)row + u * 34, &dh, w);
        const float dw = f16_bits_to_f32(dh);
        PYGQ_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) break;
            const int8_t *y = yq + c * sq + u * 32;
            int yv[8];
            ld_y16(y, yv);
            ld_y16(y + 16, yv + 4);
            int s = 0;
            PYGQ_UNROLL
            for (int i = 0; i < 8; i++) s = dp4a_s8((int)w[i], yv[i], s);
            acc[c] += dw * yds[c * sd + 2 * u] * (float)s;
        }
    }
};

template <> struct mmvq<PYG_TYPE_Q4_K> {
    static PYG_HD int64_t units(int64_t K) { return K / 64; }
    template <int NC>
    static PYG_HD void unit(const char *row, int64_t u, const int8_t *yq, const float *yds, int64_t sq, int64_t sd,
                            int ncols, float *acc) {
        const int64_t b = u >> 2;
        const int g = (int)(u & 3);
        const uint8_t *blk = (const uint8_t *)row + b * Q4_K_BYTES;
        const uint4 qa = *(const uint4 *)(blk + 16 + 32 * g);      /* 16-byte aligned: checked on the host */
        const uint4 qb = *(const uint4 *)(blk + 16 + 32 * g + 16);
        const uint32_t w[8] = { qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w };
        /* the scale bytes one at a time: the whole 16-byte block head as one load measured slower
         * on the H200 (1306 against 1683 GB/s; more registers, 44% occupancy) */
        const float d = f16_bits_to_f32(*(const uint16_t *)blk), dmin = f16_bits_to_f32(*(const uint16_t *)(blk + 2));
        int s0, m0, s1, m1;
        q4k_scale_min(blk + 4, 2 * g, &s0, &m0);
        q4k_scale_min(blk + 4, 2 * g + 1, &s1, &m1);
        const int64_t yb = 8 * b + 2 * g; /* y block of the low nibbles; +1 for the high ones */
        PYGQ_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= ncols) break;
            const int8_t *ya = yq + c * sq + yb * 32;
            const float *ds = yds + c * sd + 2 * yb;
            int yl[8], yh[8];
            ld_y16(ya, yl);
            ld_y16(ya + 16, yl + 4);
            ld_y16(ya + 32, yh);
            ld_y16(ya + 48, yh + 4);
            int lo = 0, hi = 0;
            PYGQ_UNROLL
            for (int i = 0; i < 8; i++) {
                lo = dp4a_s8((int)(w[i] & 0x0f0f0f0fu), yl[i], lo);
                hi = dp4a_s8((int)((w[i] >> 4) & 0x0f0f0f0fu), yh[i], hi);
            }
            acc[c] += d * ((float)s0 * ds[0] * (float)lo + (float)s1 * ds[2] * (float)hi) -
                      dmin * ((float)m0 * ds[1] + (float)m1 * ds[3]);
        }
    }
};

template <> struct mmvq<PYG_TYPE_Q6_K> {
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
