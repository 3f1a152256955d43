#version 450
// dst[m, n] = sum_k src0[k, m] * src1[k, n] on cooperative matrices (the tensor cores):
// a workgroup of 4 subgroups computes a 64 x 64 (or, built with CM_TILE=128, 128 x 128) tile of
// (weight rows, tokens); per 32-element step of K the weights are dequantized and the activations
// converted to f16 into shared memory, and each subgroup multiplies its quarter as 2x2 (4x4)
// 16x16x16 f16 products accumulated in f32.
// Results go through a per-subgroup 16x16 staging tile so the stores are bounds-checked and
// coalesced along m. The host uses it only on devices with VK_NV_cooperative_matrix, a 16x16x16
// f16/f32 subgroup shape and 32-wide subgroups (vk_caps.c, vk_matmul.c: cm_ok).
//
// Built with CM_PIPE (mul_mat_cm2*, option gemm_v=2): two shared-memory stages, the next step's
// weights and activations loaded and converted after the current step's products are issued, one
// barrier per step instead of two; and the fragment loops unrolled so the accumulators are
// registers with constant indices (without it they are a dynamically indexed array).
//
// CM_EMULATE builds mul_mat_cm_emu (option gemm=cm_emulated): the same kernel with the matrix
// primitives in plain GLSL (coopmat.glsl), so everything but the tensor-core instructions runs on
// devices without the extension (the tests on lavapipe).
#include "common.glsl"
#include "coopmat.glsl"
layout(local_size_x = 128, local_size_x_id = 1) in;   // 4 subgroups (the host passes 4 x the subgroup size)
layout(constant_id = 0) const uint TY = 0u;
#ifndef CM_TILE
#define CM_TILE 64                              // -DCM_TILE=128: mul_mat_cm128 (option gemm_tile)
#endif
#define BM uint(CM_TILE)
#define BN uint(CM_TILE)
#define FR (uint(CM_TILE) / 32u)                // 16x16 fragments per side of a subgroup's quarter
#define BK 32u
#define LD (BK + 8u)                            // row stride in halves: 80 bytes, 16-byte aligned
#ifdef CM_PIPE
#extension GL_EXT_control_flow_attributes : require
#define NST 2u                                  // shared-memory stages
#define UNROLL [[unroll]]
#else
#define NST 1u
#define UNROLL
#endif
shared HALF As[NST * BM * LD];                  // weights, [stage][m][k]
shared HALF Bs[NST * BN * LD];                  // activations, [stage][n][k]
shared float Cs[4u * 256u];                     // a 16x16 result tile per subgroup

uint ldw(uint o) {   // 32-bit word at a 2-byte aligned byte offset of src0
    uint a = s0w[o >> 2], b = s0w[(o >> 2) + 1u];
    return (o & 2u) != 0u ? (a >> 16) | (b << 16) : a;
}

// 16 elements (half h of the 32 at k0) of the weight row at byte ra into As row r (from element o0)
void load_a16(uint o0, uint r, uint h, uint ra, uint k0, bool valid) {
    uint o = o0 + r * LD;
    if (!valid) {
        for (uint i = 0u; i < 16u; i++) As[o + 16u * h + i] = TO_HALF(0.0);
        return;
    }
    if (TY == TY_Q4_0) {   // half h = quant bytes 8h..8h+7: elements 8h.. (low) and 16+8h.. (high)
        uint b = ra + (k0 >> 5) * 18u;
        float d = half_at(0u, b);
        uint w0 = ldw(b + 2u + 8u * h), w1 = ldw(b + 6u + 8u * h);
        for (uint i = 0u; i < 8u; i++) {
            uint q = ((i < 4u ? w0 : w1) >> (8u * (i & 3u))) & 255u;
            As[o + 8u * h + i] = TO_HALF(d * (float(q & 15u) - 8.0));
            As[o + 16u + 8u * h + i] = TO_HALF(d * (float(q >> 4) - 8.0));
        }
    } else if (TY == TY_Q8_0) {
        uint b = ra + (k0 >> 5) * 34u;
        float d = half_at(0u, b);
        for (uint j = 0u; j < 4u; j++) {
            uint w = ldw(b + 2u + 16u * h + 4u * j);
            for (uint i = 0u; i < 4u; i++)
                As[o + 16u * h + 4u * j + i] = TO_HALF(d * float(int(w << (24u - 8u * i)) >> 24));
        }
    } else {   // q4_K: sub-block sb of block k0 / 256, elements 16h..16h+15 of it
        uint b = ra + (k0 >> 8) * 144u, sb = (k0 >> 5) & 7u;
        uint sc, mn;
        if (sb < 4u) {
            sc = rd8(0u, b + 4u + sb) & 63u;
            mn = rd8(0u, b + 8u + sb) & 63u;
        } else {
            uint a = rd8(0u, b + 8u + sb);
            sc = (a & 15u) | ((rd8(0u, b + sb) >> 6) << 4);
            mn = (a >> 4) | ((rd8(0u, b + 4u + sb) >> 6) << 4);
        }
        float d = half_at(0u, b) * float(sc), m = half_at(0u, b + 2u) * float(mn);
        uint sh = (sb & 1u) * 4u, qb = b + 16u + 32u * (sb >> 1) + 16u * h;
        for (uint j = 0u; j < 4u; j++) {
            uint w = ldw(qb + 4u * j);
            for (uint i = 0u; i < 4u; i++)
                As[o + 16u * h + 4u * j + i] = TO_HALF(d * float((w >> (8u * i + sh)) & 15u) - m);
        }
    }
}

// weights (dequantized) and activations (as f16) of the 32-element step at k0 into stage st
void load_step(uint k0, uint st, uint M, uint N, uint bm, uint bn, uint i02, uint i03, uint i12, uint i13, uint nb0,
               uint t, uint WG) {
    uint ao = st * BM * LD, bo = st * BN * LD;
    if (TY == TY_Q4_0 || TY == TY_Q8_0 || TY == TY_Q4_K) {
        for (uint task = t; task < 2u * BM; task += WG) {
            uint r = task >> 1, m = bm * BM + r;
            load_a16(ao, r, task & 1u, m < M ? t_row(0u, m, i02, i03) : 0u, k0, m < M);
        }
    } else {
        for (uint e = t; e < BM * BK; e += WG) {
            uint r = e / BK, kk = e % BK, m = bm * BM + r;
            As[ao + r * LD + kk] = TO_HALF(m < M ? deq(0u, t_row(0u, m, i02, i03), k0 + kk, TY, nb0) : 0.0);
        }
    }
    for (uint e = t; e < BN * BK; e += WG) {   // a subgroup reads 32 consecutive floats of a row
        uint c = e / BK, kk = e % BK, n = bn * BN + c;
        Bs[bo + c * LD + kk] = TO_HALF(n < N ? uintBitsToFloat(s1w[(t_row(1u, n, i12, i13) >> 2) + k0 + kk]) : 0.0);
    }
}

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    uint M = t_ne(0u, 1u), N = t_ne(1u, 1u), B2 = t_ne(1u, 2u), K = t_ne(0u, 0u);
    uint tm = (M + BM - 1u) / BM, tn = (N + BN - 1u) / BN;
    uint bm = w % tm; w /= tm;
    uint bn = w % tn; w /= tn;
    uint i12 = w % B2, i13 = w / B2;
    uint i02 = i12 / (B2 / t_ne(0u, 2u)), i03 = i13 / (t_ne(1u, 3u) / t_ne(0u, 3u));
    uint nb0 = t_nb(0u, 0u);
    uint t = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    uint sg = SG_ID, wm = (sg & 1u) * (BM / 2u), wn = (sg >> 1) * (BN / 2u);
    ACC acc[FR][FR];
    UNROLL for (uint i = 0u; i < FR; i++) UNROLL for (uint j = 0u; j < FR; j++) CM_ZERO(acc[i][j]);
    uint nk = K / BK;
#ifdef CM_PIPE
    load_step(0u, 0u, M, N, bm, bn, i02, i03, i12, i13, nb0, t, WG);
    barrier();
#endif
    for (uint s = 0u; s < nk; s++) {
        uint st = s % NST, ao = st * BM * LD, bo = st * BN * LD;
#ifndef CM_PIPE
        load_step(s * BK, 0u, M, N, bm, bn, i02, i03, i12, i13, nb0, t, WG);
        barrier();
#endif
        UNROLL for (uint kk = 0u; kk < BK; kk += 16u)
            UNROLL for (uint i = 0u; i < FR; i++) UNROLL for (uint j = 0u; j < FR; j++)
                CM_MMA(acc[i][j], As, ao + (wm + 16u * i) * LD + kk, LD, Bs, bo + (wn + 16u * j) * LD + kk, LD, true);
#ifdef CM_PIPE
        if (s + 1u < nk) load_step((s + 1u) * BK, (s + 1u) % NST, M, N, bm, bn, i02, i03, i12, i13, nb0, t, WG);
#endif
        barrier();   // (pipelined: the next stage written before it is read; this stage read before it is rewritten)
    }
    uint lane = SG_LANE, cs = sg * 256u;
    UNROLL for (uint i = 0u; i < FR; i++) UNROLL for (uint j = 0u; j < FR; j++) {
        CM_STORE(acc[i][j], Cs, cs, 16u, true);   // (m, n) at cs + n * 16 + m
        SG_SYNC();
        for (uint e = lane; e < 256u; e += SG_SIZE) {
            uint m = bm * BM + wm + 16u * i + (e & 15u), n = bn * BN + wn + 16u * j + (e >> 4);
            if (m < M && n < N) dw[t_at(4u, m, n, i12, i13) >> 2] = floatBitsToUint(Cs[cs + e]);
        }
        SG_SYNC();
    }
}
