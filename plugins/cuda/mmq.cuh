/* plugins/cuda/mmq.cuh — the prefill int8 GEMM over repacked weights (repack.cuh): dst[m, c] =
 * sum_k W[m, k] X[c, k] with X quantized to int8 in blocks of 32 (mmq_yd: scale d, and the sums of the
 * block's first and last 16 quants) and W read from its quant blocks as they are: no dequantized copy.
 *
 * Tensor cores: mma.sync m16n8k32 s8 (m16n8k16 for q6_K, whose scales change every 16 weights). A
 * block's integer dot product is turned into its float contribution with two FMAs per output: the
 * accumulator input of the mma is MMQ_BIAS (1.5 * 2^23 as float bits) minus the block's zero-point
 * correction (8 * sum for q4_0, 32 * sum per half for q6_K), so the result read as a float is exactly
 * 1.5 * 2^23 + dot; X's scales are rounded up to 21 significant bits so that d * 1.5 * 2^23 is exact, and
 * fma(d, f, -d * 1.5 * 2^23) = d * dot with one rounding; then acc = fma(w_scale, that, acc). q4_K adds
 * its min term (one more FMA). No integer-to-float conversions.
 *
 * Tiles: 128 rows x BN columns per block of 8 warps (2 x 4, 64 x BN/4 each: 4 x NT mma tiles, BN = 32 NT:
 * 128, or 64 where 128 would leave multiprocessors idle), k steps
 * of 128 through a 3-stage cp.async pipeline in shared memory (quants and raw scales as they lie; the
 * weight scales of a stage are converted to floats once, by all threads, before it is used). Rows are
 * padded to 128 in the repacked layout and X's columns to 128 (zeros) in the scratch, so tile loads
 * need no bounds; a K that is not a multiple of 128 (q4_0/q8_0) zero-fills the tail.
 * Host test: plugins/cuda/test/rp_host.cu runs mmq_body on emulated blocks (simt_host.h).
 */
#ifndef PYG_CUDA_MMQ_CUH
#define PYG_CUDA_MMQ_CUH
#include "simt.cuh"
#include "repack.cuh"

#define MMQ_BM 128
#define MMQ_BN 128               /* the widest column tile (NT = 4); columns are padded to it */
#define MMQ_BK 128
#define MMQ_THREADS 256
#define MMQ_STAGES 3
#define MMQ_BIAS 0x4B400000      /* 12582912.0f as bits */
#define MMQ_BIASF 12582912.0f
#define MMQ_B_PITCH 144          /* bytes per X column in a stage (128 + 16: conflict-free 32-bit reads) */
#define MMQ_BS_PITCH 48          /* bytes per X column of block scales in a stage (4 x 8 + 16) */

/* One block of 32 quantized activations: d (21 significant bits) and the sums of quants 0-15 / 16-31. */
struct mmq_yd {
    float d;
    int sums; /* low 16 bits: sum of q[0..15], high 16: sum of q[16..31] (signed) */
};

struct mmq_args {
    rq_w w;
    const int8_t *yq;       /* [Np][Kp] */
    const mmq_yd *yd;       /* [Np][Kp / 32] */
    int64_t Kp, Ntot, N, B2;
    float *dst;
    int64_t ds1, ds2, ds3;  /* dst strides (floats) of columns n, i2, i3; rows are dense */
};

template <int T, int NT> struct mmq_t {
    static constexpr int BN = 32 * NT;                             /* columns per block */
    static constexpr int Q8 = T == PYG_TYPE_Q8_0, Q6 = T == PYG_TYPE_Q6_K, QK = T == PYG_TYPE_Q4_K;
    static constexpr int A_PITCH = Q8 ? 144 : 80;                  /* bytes per weight row in a stage */
    static constexpr int A_CPR = Q8 ? 8 : 4;                       /* 16-byte chunks per row */
    static constexpr int AH_PITCH = 48;                            /* q6_K high bits: 32 bytes per row */
    static constexpr int ARG = QK ? 96 : Q6 ? 80 : 64;             /* raw scale bytes per 8-row group */
    static constexpr int FA_ROWS = (QK || Q6) ? 8 : 4;            /* converted scales per row */
    static constexpr int OA = 0;
    static constexpr int OAH = OA + MMQ_BM * A_PITCH;
    static constexpr int OAR = OAH + (Q6 ? MMQ_BM * AH_PITCH : 0);
    static constexpr int OB = OAR + (MMQ_BM / 8) * ARG;
    static constexpr int OBS = OB + BN * MMQ_B_PITCH;
    static constexpr int STAGE = OBS + BN * MMQ_BS_PITCH;
    static constexpr int SMEM = MMQ_STAGES * STAGE + MMQ_BM * FA_ROWS * 4;
};

PYG_HD uint32_t lds32(const unsigned char *p) { return *(const uint32_t *)p; }
PYG_HD float i2f_bits(int x) { return bits_as_f32((uint32_t)x); }

/* Stage kt (k = 128 kt ..) of the block at (m0, n0) into st: cp16 copies, committed by the caller. */
template <int T, int NT, class Thr>
PYG_KB void mmq_load(const Thr &t, const mmq_args &a, int64_t m0, int64_t n0, int kt, unsigned char *st) {
    typedef mmq_t<T, NT> Q;
    const rq_w &w = a.w;
    const int64_t k0 = (int64_t)kt * MMQ_BK, K = w.K;
    for (int c = t.tid; c < MMQ_BM * Q::A_CPR; c += MMQ_THREADS) {
        const int row = c / Q::A_CPR, ch = c % Q::A_CPR;
        const int64_t kw = Q::Q8 ? k0 + 16 * ch : k0 + 32 * ch;
        const uint8_t *src = w.qs + (m0 + row) * w.qs_row + (Q::Q8 ? k0 : k0 / 2) + 16 * ch;
        t.cp16(st + Q::OA + row * Q::A_PITCH + 16 * ch, src, kw < K);
    }
    if (Q::Q6) {
        for (int c = t.tid; c < MMQ_BM * 2; c += MMQ_THREADS) {
            const int row = c >> 1, ch = c & 1;
            t.cp16(st + Q::OAH + row * Q::AH_PITCH + 16 * ch, w.qh + (m0 + row) * (K / 4) + k0 / 4 + 16 * ch, true);
        }
    }
    constexpr int NCH = Q::ARG / 16;
    for (int c = t.tid; c < (MMQ_BM / 8) * NCH; c += MMQ_THREADS) {
        const int rgl = c / NCH, ch = c % NCH;
        const int64_t rg = m0 / 8 + rgl;
        const uint8_t *src;
        bool valid = true;
        if (Q::QK || Q::Q6) {
            const int64_t sb = k0 / 256, half = (k0 / 128) & 1;
            const uint8_t *grp = w.sc + (rg * (K / 256) + sb) * (Q::QK ? 160 : 144);
            if (Q::QK) src = ch < 2 ? grp + 16 * ch : grp + 32 + 64 * half + 16 * (ch - 2);
            else src = ch == 0 ? grp : grp + 16 + 64 * half + 16 * (ch - 1);
        } else {
            const int64_t nb = K / 32, b = k0 / 32 + ch;
            valid = b < nb;
            src = w.sc + (rg * nb + (valid ? b : 0)) * 16;
        }
        t.cp16(st + Q::OAR + rgl * Q::ARG + 16 * ch, src, valid);
    }
    for (int c = t.tid; c < Q::BN * 8; c += MMQ_THREADS) {
        const int col = c >> 3, ch = c & 7;
        t.cp16(st + Q::OB + col * MMQ_B_PITCH + 16 * ch, a.yq + (n0 + col) * a.Kp + k0 + 16 * ch, true);
    }
    for (int c = t.tid; c < Q::BN * 2; c += MMQ_THREADS) {
        const int col = c >> 1, ch = c & 1;
        const uint8_t *src = (const uint8_t *)(a.yd + (n0 + col) * (a.Kp / 32) + k0 / 32) + 16 * ch;
        t.cp16(st + Q::OBS + col * MMQ_BS_PITCH + 16 * ch, src, true);
    }
}

/* The stage's weight scales as floats, fA[j * 128 + row]: q4_0/q8_0 j = block: d; q4_K j = sub-block:
 * d * sc, and j + 4: -dmin * m; q6_K j = 2 * block + half: d * sc. */
template <int T, class Thr>
PYG_KB void mmq_convert(const Thr &t, const unsigned char *sar, float *fA) {
    typedef mmq_t<T, 4> Q; /* the scale part does not depend on NT */
    constexpr int NE = MMQ_BM * (Q::Q6 ? 8 : 4);
    for (int e = t.tid; e < NE; e += MMQ_THREADS) {
        const int row = e & (MMQ_BM - 1), j = e / MMQ_BM, rg = row >> 3, s = row & 7;
        const unsigned char *g = sar + rg * Q::ARG;
        if (Q::QK) {
            const float d = f16_bits_to_f32(rd16(g + 4 * s)), dmin = f16_bits_to_f32(rd16(g + 4 * s + 2));
            const unsigned char *sm = g + 32 + 32 * (j >> 1) + 4 * s;
            fA[j * MMQ_BM + row] = d * (float)sm[j & 1];
            fA[(4 + j) * MMQ_BM + row] = -dmin * (float)sm[2 + (j & 1)];
        } else if (Q::Q6) {
            const float d = f16_bits_to_f32(rd16(g + 2 * s));
            fA[j * MMQ_BM + row] = d * (float)(int8_t)g[16 + 16 * (j >> 1) + 2 * s + (j & 1)];
        } else {
            fA[j * MMQ_BM + row] = f16_bits_to_f32(rd16(g + 16 * j + 2 * s));
        }
    }
}

/* Per X column of a lane, for one block: d, -d * bias, and the mma accumulator input(s). */
struct mmq_col {
    float dy, ndyb, sy;
    int cin, cin2;
};

template <int T, int NT, class Thr>
PYG_KB void mmq_compute(const Thr &t, const unsigned char *st, const float *fA, int wm, int wn, float acc[4][NT][4]) {
    typedef mmq_t<T, NT> Q;
    const int g = t.lane >> 2, tq = t.lane & 3;
    const unsigned char *sA = st + Q::OA, *sB = st + Q::OB, *sBS = st + Q::OBS;
#pragma unroll
    for (int kb = 0; kb < 4; kb++) {
        uint32_t b0[NT], b1[NT];
        mmq_col cv[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const unsigned char *pb = sB + (8 * NT * wn + 8 * nt + g) * MMQ_B_PITCH + 32 * kb + 4 * tq;
            b0[nt] = lds32(pb);
            b1[nt] = lds32(pb + 16);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const unsigned char *ps = sBS + (8 * NT * wn + 8 * nt + 2 * tq + e) * MMQ_BS_PITCH + 8 * kb;
                const float d = bits_as_f32(lds32(ps));
                const int sums = (int)lds32(ps + 4);
                const int lo = (int)(int16_t)(sums & 0xffff), hi = sums >> 16;
                mmq_col &c = cv[nt][e];
                c.dy = d;
                c.ndyb = -d * MMQ_BIASF;
                c.sy = d * (float)(lo + hi);
                c.cin = Q::Q6 ? MMQ_BIAS - 32 * lo : T == PYG_TYPE_Q4_0 ? MMQ_BIAS - 8 * (lo + hi) : MMQ_BIAS;
                c.cin2 = MMQ_BIAS - 32 * hi;
            }
        }
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
            const int rA = 64 * wm + 16 * mt + g;
            const unsigned char *p0 = sA + rA * Q::A_PITCH, *p1 = p0 + 8 * Q::A_PITCH;
            uint32_t af[4];
            float s0, s1, n0 = 0.0f, n1 = 0.0f; /* row scales (rows rA, rA + 8); n: q4_K -dmin * m */
            if (Q::Q8) {
                af[0] = lds32(p0 + 32 * kb + 4 * tq);
                af[1] = lds32(p1 + 32 * kb + 4 * tq);
                af[2] = lds32(p0 + 32 * kb + 16 + 4 * tq);
                af[3] = lds32(p1 + 32 * kb + 16 + 4 * tq);
            } else if (Q::QK) {
                const int gl = kb >> 1, sh = 4 * (kb & 1);
                af[0] = (lds32(p0 + 32 * gl + 4 * tq) >> sh) & 0x0f0f0f0fu;
                af[1] = (lds32(p1 + 32 * gl + 4 * tq) >> sh) & 0x0f0f0f0fu;
                af[2] = (lds32(p0 + 32 * gl + 16 + 4 * tq) >> sh) & 0x0f0f0f0fu;
                af[3] = (lds32(p1 + 32 * gl + 16 + 4 * tq) >> sh) & 0x0f0f0f0fu;
            } else {
                const uint32_t w0 = lds32(p0 + 16 * kb + 4 * tq), w1 = lds32(p1 + 16 * kb + 4 * tq);
                af[0] = w0 & 0x0f0f0f0fu;
                af[1] = w1 & 0x0f0f0f0fu;
                af[2] = (w0 >> 4) & 0x0f0f0f0fu;
                af[3] = (w1 >> 4) & 0x0f0f0f0fu;
                if (Q::Q6) {
                    const unsigned char *h0 = st + Q::OAH + rA * Q::AH_PITCH + 8 * kb, *h1 = h0 + 8 * Q::AH_PITCH;
                    const uint32_t h0a = lds32(h0), h0b = lds32(h0 + 4), h1a = lds32(h1), h1b = lds32(h1 + 4);
                    af[0] |= ((h0a >> (2 * tq)) & 0x03030303u) << 4;
                    af[1] |= ((h1a >> (2 * tq)) & 0x03030303u) << 4;
                    af[2] |= ((h0b >> (2 * tq)) & 0x03030303u) << 4;
                    af[3] |= ((h1b >> (2 * tq)) & 0x03030303u) << 4;
                }
            }
            if (Q::Q6) { /* s: the first half's scale, n: the second half's */
                s0 = fA[(2 * kb) * MMQ_BM + rA];
                s1 = fA[(2 * kb) * MMQ_BM + rA + 8];
                n0 = fA[(2 * kb + 1) * MMQ_BM + rA];
                n1 = fA[(2 * kb + 1) * MMQ_BM + rA + 8];
            } else {
                s0 = fA[kb * MMQ_BM + rA];
                s1 = fA[kb * MMQ_BM + rA + 8];
                if (Q::QK) {
                    n0 = fA[(4 + kb) * MMQ_BM + rA];
                    n1 = fA[(4 + kb) * MMQ_BM + rA + 8];
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const mmq_col &c0 = cv[nt][0], &c1 = cv[nt][1];
                const int ci[4] = { c0.cin, c1.cin, c0.cin, c1.cin };
                int d[4];
                if (Q::Q6) {
                    const int ci2[4] = { c0.cin2, c1.cin2, c0.cin2, c1.cin2 };
                    int d2[4];
                    t.mma16816(d, af[0], af[1], b0[nt], ci);
                    t.mma16816(d2, af[2], af[3], b1[nt], ci2);
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const mmq_col &c = (i & 1) ? c1 : c0;
                        const float lo = fmaf(c.dy, i2f_bits(d[i]), c.ndyb), hi = fmaf(c.dy, i2f_bits(d2[i]), c.ndyb);
                        acc[mt][nt][i] = fmaf((i >> 1) ? s1 : s0, lo, fmaf((i >> 1) ? n1 : n0, hi, acc[mt][nt][i]));
                    }
                } else {
                    t.mma16832(d, af, b0[nt], b1[nt], ci);
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const mmq_col &c = (i & 1) ? c1 : c0;
                        float v = acc[mt][nt][i];
                        if (Q::QK) v = fmaf((i >> 1) ? n1 : n0, c.sy, v);
                        acc[mt][nt][i] = fmaf((i >> 1) ? s1 : s0, fmaf(c.dy, i2f_bits(d[i]), c.ndyb), v);
                    }
                }
            }
        }
    }
}

/* Block (bx, by): rows 128 bx.., columns BN by..; smem: mmq_t<T, NT>::SMEM bytes. */
template <int T, int NT, class Thr>
PYG_KB void mmq_body(const Thr &t, const mmq_args &a, unsigned char *smem) {
    typedef mmq_t<T, NT> Q;
    const int64_t m0 = t.bx * MMQ_BM, n0 = t.by * Q::BN;
    const int wm = t.warp & 1, wn = t.warp >> 1;
    float *fA = (float *)(smem + MMQ_STAGES * Q::STAGE);
    float acc[4][NT][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;
    const int nk = (int)((a.w.K + MMQ_BK - 1) / MMQ_BK);
    t.grid_wait();
#pragma unroll
    for (int s = 0; s < MMQ_STAGES - 1; s++) {
        if (s < nk) mmq_load<T, NT>(t, a, m0, n0, s, smem + s * Q::STAGE);
        t.cp_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        t.template cp_wait<MMQ_STAGES - 2>();
        t.sync();
        const unsigned char *st = smem + (kt % MMQ_STAGES) * Q::STAGE;
        mmq_convert<T>(t, st + Q::OAR, fA);
        const int nx = kt + MMQ_STAGES - 1;
        if (nx < nk) mmq_load<T, NT>(t, a, m0, n0, nx, smem + (nx % MMQ_STAGES) * Q::STAGE);
        t.cp_commit();
        t.sync();
        mmq_compute<T, NT>(t, st, fA, wm, wn, acc);
    }
    const int g = t.lane >> 2, tq = t.lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int64_t col = n0 + 8 * NT * wn + 8 * nt + 2 * tq + e;
            if (col >= a.Ntot) continue;
            const int64_t n = col % a.N, rest = col / a.N;
            float *out = a.dst + n * a.ds1 + (rest % a.B2) * a.ds2 + (rest / a.B2) * a.ds3;
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t row = m0 + 64 * wm + 16 * mt + g + 8 * h;
                    if (row < a.w.M) out[row] = acc[mt][nt][2 * h + e];
                }
            }
        }
    }
}

/* A column's block of 32 quantized for the GEMM (host+device: the host test uses it): d = max|x| / 127
 * rounded up to 21 significant bits (a NaN or an inf anywhere in the block: d = NaN, so every product with it is
 * NaN, as in the float paths), q = round(x / d). */
PYG_HD float mmq_block_scale(float amax) {
    if (!(amax < INFINITY)) return NAN; /* NaN or inf in the block */
    float d = amax / 127.0f;
    uint32_t u = f32_as_bits(d);
    u = (u + 7u) & ~7u; /* round up to 21 significant bits: d * 1.5 * 2^23 is exact */
    return bits_as_f32(u);
}

/* The quantizer of the int8 GEMM for one block, sequentially (k_mmq_quantize in mul_mat_rp.cu does the
 * same with one lane per value): n valid values (the rest zero). */
PYG_HD void mmq_quant_block_ref(const float *x, int n, int8_t q[32], mmq_yd *yd) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, x[i] != x[i] ? INFINITY : fabsf(x[i]));
    const float d = mmq_block_scale(amax);
    const float id = d > 0.0f ? 1.0f / d : 0.0f; /* d NaN: 0 */
    int lo = 0, hi = 0;
    for (int i = 0; i < 32; i++) {
        const float v = i < n ? x[i] * id : 0.0f;
        const int qi = v == v ? (int)rintf(v) : 0;
        q[i] = (int8_t)qi;
        (i < 16 ? lo : hi) += qi;
    }
    yd->d = d;
    yd->sums = (lo & 0xffff) | (hi << 16);
}

#endif
