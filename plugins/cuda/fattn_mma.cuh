/* plugins/cuda/fattn_mma.cuh — the prefill flash attention on tensor cores with an online softmax
 * (device option fa_mma=2): mma.sync m16n8k16 (f16 operands, f32 accumulators), whose fragment
 * layouts the PTX ISA documents, so the scores, the softmax and P.V stay in registers.
 *
 * A block takes FA2_QB = 64 consecutive queries of one (head, batch), 16 per warp, and walks the kv
 * range in tiles of FA2_KT = 64 cells through a cp.async pipeline of three stages (D = 64) or two
 * (D = 128): while a warp works on tile i, the next tiles' K rows, V rows and mask rows are on their
 * way into the other stages. Per tile and
 * warp:
 *   S = Q K^T    Q's fragments were loaded once (ldmatrix), K's come by ldmatrix from the stage;
 *                S is 16 x 64 floats, 32 per lane (rows g and g+8 of the warp's 16, g = lane / 4);
 *   softmax      scale, softcap, the mask (ALiBi slope times its value; -inf hides a cell, as do cells
 *                past n_kv), in base-2 units; a row's max over its 4 lanes by two shuffles, the
 *                running max m, the output and the row sum l rescaled by 2^(m_old - m_new);
 *   O += P V     P is S's registers rounded to f16 (the accumulator layout of two n8 tiles is the
 *                A layout of one k16 step), V's fragments by ldmatrix .trans.
 * A warp whose 16 rows see no cell of the tile (the causal future, holes in the mask) skips it; a
 * block walks no tile past the last one its rows see (fa2_live_tiles).
 * The row sums are per lane until the end (every lane of a row rescales by the same factor), then
 * summed over the row's 4 lanes; O / l is written as f32 (a row that sees nothing writes zeros).
 *
 * Requirements (the launcher checks them): D == Dv in {64, 128}; K and V f16 with 16-byte aligned
 * rows; a mask, if any, f16 with 16-byte aligned rows and ne[0] >= n_kv; Q and dst f32 with
 * contiguous rows. Body shared with the host test plugins/cuda/test/fattn_mma_host.cu (simt.cuh).
 */
#ifndef PYG_CUDA_FATTN_MMA_CUH
#define PYG_CUDA_FATTN_MMA_CUH
#include "simt.cuh"

#define FA2_QB 64    /* queries per block */
#define FA2_KT 64    /* kv cells per tile */
#define FA2_WARPS 4  /* 16 queries each */
#define FA2_THREADS (FA2_WARPS * 32)
#define FA2_NEG_INF_H 0xfc00u /* f16 -inf */

struct fa2_args : fa_views {
    int gqa, nqb;
};

/* Shared memory: Q (f16), then two stages of K, V (f16 rows) and the mask tile (f16). Row pitches
 * are 16 bytes more than the data so that the 8 rows an ldmatrix reads fall in distinct banks. */
template <int D> struct fa2_smem {
    static constexpr int NS = D == 64 ? 3 : 2; /* pipeline stages (see fa2_body) */
    static constexpr int LDH = D + 8;       /* Q, K, V row pitch (halves) */
    static constexpr int LDM = FA2_KT + 8;  /* mask row pitch (halves) */
    static constexpr size_t Q_BYTES = (size_t)FA2_QB * LDH * 2;
    static constexpr size_t KV_BYTES = (size_t)FA2_KT * LDH * 2;
    static constexpr size_t M_BYTES = (size_t)FA2_QB * LDM * 2;
    static constexpr size_t STAGE = 2 * KV_BYTES + M_BYTES;
    static constexpr size_t BYTES = Q_BYTES + NS * STAGE;
};

/* 2^x; x = -inf gives 0 (the device's ex2.approx: 2 ulp, the result is rounded to f16 anyway) */
PYG_HD float fa2_exp2(float x) {
#ifdef __CUDA_ARCH__
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

PYG_HD uint32_t fa2_pack_h2(float lo, float hi) {
    const gpu_half a = gpu_float2half(lo), b = gpu_float2half(hi);
    uint16_t x, y;
    memcpy(&x, &a, 2);
    memcpy(&y, &b, 2);
    return (uint32_t)x | ((uint32_t)y << 16);
}

/* Tile `tile` of K, V and the mask into stage buffers (cp.async; zeros past n_kv and past n_q). A
 * mask chunk that straddles the end of a mask row is read element by element (-inf past ne[0]). */
template <int D, class Thr>
PYG_KB void fa2_load_tile(const Thr &t, const fa2_args &a, unsigned char *stage, const char *kb, const char *vb,
                          const char *mb, int q0, int tile) {
    typedef fa2_smem<D> L;
    constexpr int CH = D / 8; /* 16-byte chunks per K/V row */
    gpu_half *Ks = (gpu_half *)stage, *Vs = (gpu_half *)(stage + L::KV_BYTES);
    const int t0 = tile * FA2_KT;
    for (int i = t.tid; i < FA2_KT * CH; i += FA2_THREADS) {
        const int r = i / CH, c = i % CH;
        const bool ok = t0 + r < a.n_kv;
        const int64_t row = ok ? t0 + r : 0;
        t.cp16(Ks + r * L::LDH + c * 8, kb + row * a.k_nb1 + c * 16, ok);
        t.cp16(Vs + r * L::LDH + c * 8, vb + row * a.v_nb1 + c * 16, ok);
    }
    if (mb) {
        uint16_t *Ms = (uint16_t *)(stage + 2 * L::KV_BYTES);
        for (int i = t.tid; i < FA2_QB * (FA2_KT / 8); i += FA2_THREADS) {
            const int r = i / (FA2_KT / 8), c = i % (FA2_KT / 8), iq = q0 + r, p = t0 + c * 8;
            uint16_t *dst = Ms + r * L::LDM + c * 8;
            const char *src = mb + (int64_t)(iq < a.n_q ? iq : 0) * a.m_nb1 + (int64_t)p * 2;
            if (iq >= a.n_q || p + 8 <= a.m_ne0) {
                t.cp16(dst, src, iq < a.n_q && p < a.n_kv);
            } else {
                for (int e = 0; e < 8; e++) {
                    uint16_t h = FA2_NEG_INF_H;
                    if (p + e < a.m_ne0) memcpy(&h, src + 2 * e, 2);
                    dst[e] = h;
                }
            }
        }
    }
}

/* The number of kv tiles this block walks: past the last tile in which one of its query rows sees a
 * cell (mask value not -inf, cell below n_kv and m_ne0) nothing is loaded. A graph sized for a
 * longer context than the cache holds (a prefill chunk run with the extent of the last chunk of its
 * group, a decode-sized extent) leaves such a tail; the scan reads the mask backwards from the end,
 * a tile of mask rows per step, and stops at the first live tile. */
template <class Thr>
PYG_KB int fa2_live_tiles(const Thr &t, const fa2_args &a, const char *mb, int q0, int ntiles) {
    const int nr = a.n_q - q0 < FA2_QB ? a.n_q - q0 : FA2_QB, lim = a.n_kv < a.m_ne0 ? a.n_kv : a.m_ne0;
    for (int nt = ntiles; nt > 0; nt--) {
        const int t0 = (nt - 1) * FA2_KT;
        bool live = false;
        for (int i = t.tid; i < nr * (FA2_KT / 8) && !live; i += FA2_THREADS) {
            const int r = i / (FA2_KT / 8), p = t0 + (i % (FA2_KT / 8)) * 8;
            if (p >= lim) continue;
            const char *src = mb + (int64_t)(q0 + r) * a.m_nb1 + (int64_t)p * 2;
            uint16_t h[8];
            if (p + 8 <= lim) {
                memcpy(h, src, 16); /* rows are 16-byte aligned (the launcher checks) */
                for (int e = 0; e < 8; e++) live = live || h[e] != FA2_NEG_INF_H;
            } else {
                for (int e = 0; p + e < lim; e++) {
                    memcpy(&h[e], src + 2 * e, 2);
                    live = live || h[e] != FA2_NEG_INF_H;
                }
            }
        }
        if (t.sync_or(live)) return nt;
    }
    return 0;
}

/* D == 64 (V3): three stages (tile i+2 is issued right after the barrier that starts tile i, into
 * the stage of tile i-1, which every warp has finished by then), the score scale folded with
 * log2(e), exp2 by ex2.approx. D == 128: two stages (three leave one block per multiprocessor
 * there). Both end a tile with a second barrier (one barrier per tile, which the three stages
 * allow, measured no faster: bench/results/attn-ab-20261201T1137/). Measured on the H200
 * (bench/results/attn-ab-20261201T0625/): 1b pp512 @ d16384 20.6k t/s with three stages against
 * 18.6k with two; 7b 5.8k against 7.1k. */
template <int D, class Thr>
PYG_KB void fa2_body(const Thr &t, const fa2_args &a, unsigned char *smem) {
    typedef fa2_smem<D> L;
    constexpr bool V3 = L::NS == 3;
    constexpr float LOG2E = 1.4426950408889634f;
    const int h = (int)t.bx, qb = (int)(t.by % a.nqb), b = (int)(t.by / a.nqb);
    const int q0 = qb * FA2_QB, hk = h / a.gqa;
    const int lane = t.lane, warp = t.warp, g = lane / 4, tq = lane % 4;
    const char *kb = a.k + (int64_t)hk * a.k_nb2 + (int64_t)(b % a.k_ne3) * a.k_nb3;
    const char *vb = a.v + (int64_t)hk * a.v_nb2 + (int64_t)(b % a.v_ne3) * a.v_nb3;
    const char *mb = a.mask ? a.mask + (int64_t)(h % a.m_ne2) * a.m_nb2 + (int64_t)(b % a.m_ne3) * a.m_nb3 : NULL;
    const float slope = a.mask ? alibi_slope(a.max_bias, h, a.H) : 0.0f;
    const float sl2 = a.scale * LOG2E, slope2 = slope * LOG2E;
    gpu_half *Qs = (gpu_half *)smem;
    int ntiles = (a.n_kv + FA2_KT - 1) / FA2_KT;
    if (mb) ntiles = fa2_live_tiles(t, a, mb, q0, ntiles);

    if (ntiles > 0) {
        fa2_load_tile<D>(t, a, smem + L::Q_BYTES, kb, vb, mb, q0, 0); /* tile 0 travels while Q is converted */
        t.cp_commit();
    }
    if (V3 && ntiles > 1) {
        fa2_load_tile<D>(t, a, smem + L::Q_BYTES + L::STAGE, kb, vb, mb, q0, 1);
        t.cp_commit();
    }
    for (int i0 = t.tid; i0 < FA2_QB * D; i0 += 8 * FA2_THREADS) { /* Q -> f16, 8 loads in flight */
        float x[8];
        #pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u * FA2_THREADS, r = i / D, d = i % D, iq = q0 + r;
            x[u] = i < FA2_QB * D && iq < a.n_q
                       ? *(const float *)(a.q + (int64_t)d * 4 + (int64_t)iq * a.q_nb1 + (int64_t)h * a.q_nb2 +
                                          (int64_t)b * a.q_nb3)
                       : 0.0f;
        }
        #pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u * FA2_THREADS;
            if (i < FA2_QB * D) Qs[(i / D) * L::LDH + i % D] = gpu_float2half(x[u]);
        }
    }
    t.sync();
    uint32_t qa[D / 16][4];
    #pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        t.ldsm4(qa[kk], Qs + (warp * 16 + (lane % 8) + 8 * ((lane / 8) & 1)) * L::LDH + kk * 16 + 8 * (lane / 16));

    float o[D / 8][4];
    #pragma unroll
    for (int j = 0; j < D / 8; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows g and g + 8 */

    for (int it = 0; it < ntiles; it++) {
        if (V3) {
            if (it + 1 < ntiles) t.template cp_wait<1>();
            else t.template cp_wait<0>();
            t.sync();
            if (it + 2 < ntiles) {
                fa2_load_tile<D>(t, a, smem + L::Q_BYTES + ((it + 2) % 3) * L::STAGE, kb, vb, mb, q0, it + 2);
                t.cp_commit();
            }
        } else {
            if (it + 1 < ntiles) {
                fa2_load_tile<D>(t, a, smem + L::Q_BYTES + ((it + 1) & 1) * L::STAGE, kb, vb, mb, q0, it + 1);
                t.cp_commit();
                t.template cp_wait<1>();
            } else {
                t.template cp_wait<0>();
            }
            t.sync();
        }
        const unsigned char *st = smem + L::Q_BYTES + (V3 ? it % 3 : it & 1) * L::STAGE;
        const gpu_half *Ks = (const gpu_half *)st, *Vs = (const gpu_half *)(st + L::KV_BYTES);
        const uint16_t *Mw = (const uint16_t *)(st + 2 * L::KV_BYTES) + warp * 16 * L::LDM;
        const int t0 = it * FA2_KT;

        /* this lane's mask words: rows g, g + 8; cells 8j + 2tq, +1 (j = 0..7) */
        uint32_t mk[2][FA2_KT / 8];
        bool live = false;
        #pragma unroll
        for (int j = 0; j < FA2_KT / 8; j++) {
            #pragma unroll
            for (int r = 0; r < 2; r++) {
                const int c = 8 * j + 2 * tq;
                uint32_t w = 0;
                if (mb) memcpy(&w, Mw + (g + 8 * r) * L::LDM + c, 4);
                if (t0 + c >= a.n_kv) w = (w & 0xffff0000u) | FA2_NEG_INF_H;
                if (t0 + c + 1 >= a.n_kv) w = (w & 0x0000ffffu) | (FA2_NEG_INF_H << 16);
                mk[r][j] = w;
                live = live || (w & 0xffffu) != FA2_NEG_INF_H || (w >> 16) != FA2_NEG_INF_H;
            }
        }
        if (t.any(live)) {
            float s[FA2_KT / 8][4];
            #pragma unroll
            for (int j = 0; j < FA2_KT / 8; j++) {
                #pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = 0.0f;
                #pragma unroll
                for (int k2 = 0; k2 < D / 32; k2++) {
                    uint32_t kf[4];
                    t.ldsm4(kf, Ks + (8 * j + lane % 8) * L::LDH + 32 * k2 + 8 * (lane / 8));
                    t.mma_f16(s[j], qa[2 * k2], kf[0], kf[1], s[j]);
                    t.mma_f16(s[j], qa[2 * k2 + 1], kf[2], kf[3], s[j]);
                }
            }
            float mx0 = -INFINITY, mx1 = -INFINITY;
            #pragma unroll
            for (int j = 0; j < FA2_KT / 8; j++) {
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const uint16_t mh = (uint16_t)(mk[e >> 1][j] >> (16 * (e & 1)));
                    float x;
                    if (V3 && a.softcap == 0.0f) {
                        x = s[j][e] * sl2 + slope2 * f16_bits_to_f32(mh);
                    } else {
                        x = s[j][e] * a.scale;
                        if (a.softcap != 0.0f) x = a.softcap * tanhf(x / a.softcap);
                        x = (x + slope * f16_bits_to_f32(mh)) * LOG2E;
                    }
                    s[j][e] = mh == FA2_NEG_INF_H ? -INFINITY : x;
                }
                mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
                mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
            }
            mx0 = fmaxf(mx0, t.shfl_xor(mx0, 1));
            mx0 = fmaxf(mx0, t.shfl_xor(mx0, 2));
            mx1 = fmaxf(mx1, t.shfl_xor(mx1, 1));
            mx1 = fmaxf(mx1, t.shfl_xor(mx1, 2));
            const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
            /* a row with nothing seen yet keeps m = -inf, its p are 0 and nothing is rescaled */
            const float c0 = n0 == -INFINITY ? 1.0f : exp2f(m0 - n0), c1 = n1 == -INFINITY ? 1.0f : exp2f(m1 - n1);
            m0 = n0;
            m1 = n1;
            l0 *= c0;
            l1 *= c1;
            #pragma unroll
            for (int j = 0; j < D / 8; j++) {
                o[j][0] *= c0;
                o[j][1] *= c0;
                o[j][2] *= c1;
                o[j][3] *= c1;
            }
            const float mm0 = m0 == -INFINITY ? 0.0f : m0, mm1 = m1 == -INFINITY ? 0.0f : m1; /* -inf - mm: -inf */
            #pragma unroll
            for (int j = 0; j < FA2_KT / 8; j++) {
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float mm = e < 2 ? m0 : m1;
                    const float p = V3 ? fa2_exp2(s[j][e] - (e < 2 ? mm0 : mm1))
                                       : s[j][e] == -INFINITY ? 0.0f : exp2f(s[j][e] - mm);
                    s[j][e] = p;
                    if (e < 2) l0 += p;
                    else l1 += p;
                }
            }
            #pragma unroll
            for (int c = 0; c < FA2_KT / 16; c++) {
                const uint32_t pa[4] = { fa2_pack_h2(s[2 * c][0], s[2 * c][1]), fa2_pack_h2(s[2 * c][2], s[2 * c][3]),
                                         fa2_pack_h2(s[2 * c + 1][0], s[2 * c + 1][1]),
                                         fa2_pack_h2(s[2 * c + 1][2], s[2 * c + 1][3]) };
                #pragma unroll
                for (int d2 = 0; d2 < D / 16; d2++) {
                    uint32_t vf[4];
                    t.ldsm4t(vf, Vs + (16 * c + (lane % 8) + 8 * ((lane / 8) & 1)) * L::LDH + 16 * d2 + 8 * (lane / 16));
                    t.mma_f16(o[2 * d2], pa, vf[0], vf[1], o[2 * d2]);
                    t.mma_f16(o[2 * d2 + 1], pa, vf[2], vf[3], o[2 * d2 + 1]);
                }
            }
        }
        t.sync(); /* two stages: this one is refilled by the next iteration's load */
    }
    t.template cp_wait<0>(); /* nothing left in flight (a block with no tile still issued tile 0) */
    l0 += t.shfl_xor(l0, 1);
    l0 += t.shfl_xor(l0, 2);
    l1 += t.shfl_xor(l1, 1);
    l1 += t.shfl_xor(l1, 2);
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        const int iq = q0 + warp * 16 + g + 8 * r;
        if (iq >= a.n_q) continue;
        const float l = r ? l1 : l0, inv = l > 0.0f ? 1.0f / l : 0.0f;
        char *orow = a.dst + (int64_t)h * a.d_nb1 + (int64_t)iq * a.d_nb2 + (int64_t)b * a.d_nb3;
        #pragma unroll
        for (int j = 0; j < D / 8; j++) {
            float *p = (float *)(orow + (int64_t)(8 * j + 2 * tq) * 4);
            p[0] = o[j][2 * r] * inv;
            p[1] = o[j][2 * r + 1] * inv;
        }
    }
}

#endif
