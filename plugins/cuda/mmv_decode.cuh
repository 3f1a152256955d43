/* plugins/cuda/mmv_decode.cuh — the mat-vec unit decoders of the quantized types (see mul_mat.cu).
 * Host+device so that plugins/cuda/test/dequant_host.cu can check them against the reference
 * dequantizer on a machine without a GPU. */
#ifndef PYG_CUDA_MMV_DECODE_CUH
#define PYG_CUDA_MMV_DECODE_CUH
#include "common.cuh"

#ifdef __CUDA_ARCH__
#define PYG_UNROLL _Pragma("unroll")
#else
#define PYG_UNROLL
#endif

/* Per type: a unit is RUNS runs of RL consecutive k, starting at the returned kbase + r*ROFF. */
template <int T> struct mv;

template <> struct mv<PYG_TYPE_Q4_0> {
    static constexpr int RUNS = 2, RL = 16, ROFF = 16;
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    static PYG_HD int64_t decode(const char *row, int64_t u, int64_t, float *w) {
        const uint8_t *blk = (const uint8_t *)row + u * 18;
        const float d = f16_bits_to_f32(*(const uint16_t *)blk);
        const uint16_t *q = (const uint16_t *)(blk + 2);
PYG_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t v = q[i];
            w[2 * i] = d * (float)((int)(v & 15) - 8);
            w[2 * i + 1] = d * (float)((int)((v >> 8) & 15) - 8);
            w[16 + 2 * i] = d * (float)((int)((v >> 4) & 15) - 8);
            w[16 + 2 * i + 1] = d * (float)((int)((v >> 12) & 15) - 8);
        }
        return u * 32;
    }
};

template <> struct mv<PYG_TYPE_Q4_1> {
    static constexpr int RUNS = 2, RL = 16, ROFF = 16;
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    static PYG_HD int64_t decode(const char *row, int64_t u, int64_t, float *w) {
        const uint8_t *blk = (const uint8_t *)row + u * 20;
        const float d = f16_bits_to_f32(*(const uint16_t *)blk), m = f16_bits_to_f32(*(const uint16_t *)(blk + 2));
        const uint16_t *q = (const uint16_t *)(blk + 4);
PYG_UNROLL
        for (int i = 0; i < 8; i++) {
            const uint32_t v = q[i];
            w[2 * i] = d * (float)(v & 15) + m;
            w[2 * i + 1] = d * (float)((v >> 8) & 15) + m;
            w[16 + 2 * i] = d * (float)((v >> 4) & 15) + m;
            w[16 + 2 * i + 1] = d * (float)((v >> 12) & 15) + m;
        }
        return u * 32;
    }
};

template <> struct mv<PYG_TYPE_Q8_0> {
    static constexpr int RUNS = 1, RL = 32, ROFF = 0;
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    static PYG_HD int64_t decode(const char *row, int64_t u, int64_t, float *w) {
        const uint8_t *blk = (const uint8_t *)row + u * 34;
        const float d = f16_bits_to_f32(*(const uint16_t *)blk);
        const uint16_t *q = (const uint16_t *)(blk + 2);
PYG_UNROLL
        for (int i = 0; i < 16; i++) {
            const uint32_t v = q[i];
            w[2 * i] = d * (float)(int8_t)(v & 0xff);
            w[2 * i + 1] = d * (float)(int8_t)(v >> 8);
        }
        return u * 32;
    }
};

/* q4_K: unit j (0..7) of a block reads 16 bytes: weights 64g+16h+t (low nibbles, sub-block 2g) and
 * 64g+32+16h+t (high nibbles, sub-block 2g+1), g = j/2, h = j%2. */
template <> struct mv<PYG_TYPE_Q4_K> {
    static constexpr int RUNS = 2, RL = 16, ROFF = 32;
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    static PYG_HD int64_t decode(const char *row, int64_t u, int64_t, float *w) {
        const int64_t b = u >> 3;
        const int j = (int)(u & 7), g = j >> 1, h = j & 1;
        const uint8_t *blk = (const uint8_t *)row + b * Q4_K_BYTES;
        const uint4 q = *(const uint4 *)(blk + 16 + 32 * g + 16 * h); /* 16-byte aligned: checked on the host */
        const float d = f16_bits_to_f32(*(const uint16_t *)blk), dmin = f16_bits_to_f32(*(const uint16_t *)(blk + 2));
        int s0, m0, s1, m1;
        q4k_scale_min(blk + 4, 2 * g, &s0, &m0);
        q4k_scale_min(blk + 4, 2 * g + 1, &s1, &m1);
        const float dl = d * (float)s0, ml = dmin * (float)m0, dh = d * (float)s1, mh = dmin * (float)m1;
        const uint32_t words[4] = { q.x, q.y, q.z, q.w };
PYG_UNROLL
        for (int i = 0; i < 4; i++) {
PYG_UNROLL
            for (int k = 0; k < 4; k++) {
                const uint32_t by = (words[i] >> (8 * k)) & 0xff;
                w[4 * i + k] = dl * (float)(by & 15) - ml;
                w[16 + 4 * i + k] = dh * (float)(by >> 4) - mh;
            }
        }
        return b * 256 + 64 * g + 16 * h;
    }
};

/* q6_K: unit j (0..7): half n = j/4, l = 8*(j%4) .. +7; four runs (quarters) 32 apart. */
template <> struct mv<PYG_TYPE_Q6_K> {
    static constexpr int RUNS = 4, RL = 8, ROFF = 32;
    static PYG_HD int64_t units(int64_t K) { return K / 32; }
    static PYG_HD int64_t decode(const char *row, int64_t u, int64_t, float *w) {
        const int64_t b = u >> 3;
        const int j = (int)(u & 7), n = j >> 2, l0 = 8 * (j & 3);
        const uint8_t *blk = (const uint8_t *)row + b * Q6_K_BYTES;
        const uint16_t *qa = (const uint16_t *)(blk + 64 * n + l0);
        const uint16_t *qb = (const uint16_t *)(blk + 64 * n + 32 + l0);
        const uint16_t *qh = (const uint16_t *)(blk + 128 + 32 * n + l0);
        const int8_t *sc = (const int8_t *)(blk + 192) + 8 * n + (l0 >> 4);
        const float d = f16_bits_to_f32(*(const uint16_t *)(blk + 208));
        const float d0 = d * sc[0], d1 = d * sc[2], d2 = d * sc[4], d3 = d * sc[6];
PYG_UNROLL
        for (int i = 0; i < 4; i++) {
            const uint32_t A = qa[i], B = qb[i], H = qh[i];
PYG_UNROLL
            for (int k = 0; k < 2; k++) {
                const uint32_t a = (A >> (8 * k)) & 0xff, bb = (B >> (8 * k)) & 0xff, hh = (H >> (8 * k)) & 0xff;
                const int t = 2 * i + k;
                w[t] = d0 * (float)((int)((a & 15) | ((hh & 3) << 4)) - 32);
                w[8 + t] = d1 * (float)((int)((bb & 15) | (((hh >> 2) & 3) << 4)) - 32);
                w[16 + t] = d2 * (float)((int)((a >> 4) | (((hh >> 4) & 3) << 4)) - 32);
                w[24 + t] = d3 * (float)((int)((bb >> 4) | (((hh >> 6) & 3) << 4)) - 32);
            }
        }
        return b * 256 + 128 * n + l0;
    }
};

#endif
