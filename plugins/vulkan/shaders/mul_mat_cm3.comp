#version 450
// dst[m, n] = sum_k src0[k, m] * src1[k, n] on cooperative matrices (the tensor cores), as
// mul_mat_cm.comp's pipelined build (64 x 64 or, with CM_TILE=128, 128 x 128 tiles of (weight rows,
// tokens), 4 subgroups each a quarter, 32-element steps of K, two shared-memory stages), with the
// tiles in shared memory as 16-byte words: per step an invocation dequantizes 16 weights or converts
// 8 activations in registers and writes them as packed f16 in one or two 16-byte stores (mul_mat_cm2
// writes every f16 on its own: 64 two-byte stores per invocation and step at 128 x 128), and reads the
// activations as 16-byte words where their rows are 16-byte aligned (ex[1]). The matrix loads take
// the tiles through the extension's uvec4 overloads (offsets and strides in 16-byte words).
// Option gemm_v=3 (vk_matmul.c); CM_EMULATE builds the plain-GLSL version for the tests on lavapipe.
#include "common.glsl"
#include "coopmat.glsl"
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128, local_size_x_id = 1) in;   // 4 subgroups (the host passes 4 x the subgroup size)
layout(constant_id = 0) const uint TY = 0u;
layout(std430, binding = 1) readonly buffer S1q { uvec4 s1q[]; };
#ifndef CM_TILE
#define CM_TILE 64
#endif
#define BM uint(CM_TILE)
#define BN uint(CM_TILE)
#define FR (uint(CM_TILE) / 32u)                // 16x16 fragments per side of a subgroup's quarter
#define BK 32u
#define LD4 5u                                  // row stride in 16-byte words: 32 halves + 8 of padding
#define NST 2u
shared uvec4 As[NST * BM * LD4];                // weights, [stage][m][k / 8]
shared uvec4 Bs[NST * BN * LD4];                // activations, [stage][n][k / 8]
shared float Cs[4u * 256u];                     // a 16x16 result tile per subgroup

uint ldw(uint o) {   // 32-bit word at a 2-byte aligned byte offset of src0
    uint a = s0w[o >> 2], b = s0w[(o >> 2) + 1u];
    return (o & 2u) != 0u ? (a >> 16) | (b << 16) : a;
}
uint pk(float a, float b) { return packHalf2x16(vec2(a, b)); }

// 16 weights of the row at byte ra for the step at k0, half h of the step's 32 elements (q4_0: the
// low and high nibbles of quant bytes 8h..8h+7, elements 8h.. and 16+8h..), into the row's words
void load_a16(uint o4, uint h, uint ra, uint k0, bool valid) {
    if (!valid) {
        As[o4 + 2u * h] = uvec4(0u);
        As[o4 + 2u * h + 1u] = uvec4(0u);
        return;
    }
    if (TY == TY_Q4_0) {
        uint b = ra + (k0 >> 5) * 18u;
        float d = half_at(0u, b);
        uint w0 = ldw(b + 2u + 8u * h), w1 = ldw(b + 6u + 8u * h);
        uvec4 lo, hi;
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            uint w = j < 2u ? w0 : w1, s = 16u * (j & 1u);
            uint q0 = (w >> s) & 255u, q1 = (w >> (s + 8u)) & 255u;
            lo[j] = pk(d * (float(q0 & 15u) - 8.0), d * (float(q1 & 15u) - 8.0));
            hi[j] = pk(d * (float(q0 >> 4) - 8.0), d * (float(q1 >> 4) - 8.0));
        }
        As[o4 + h] = lo;                        // elements 8h..8h+7
        As[o4 + 2u + h] = hi;                   // elements 16+8h..16+8h+7
        return;
    }
    float v[16];
    if (TY == TY_Q8_0) {
        uint b = ra + (k0 >> 5) * 34u;
        float d = half_at(0u, b);
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            uint w = ldw(b + 2u + 16u * h + 4u * j);
            [[unroll]] for (uint i = 0u; i < 4u; i++) v[4u * j + i] = d * float(int(w << (24u - 8u * i)) >> 24);
        }
    } else if (TY == TY_Q4_K) {   // sub-block sb of block k0 / 256, elements 16h..16h+15 of it
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
        [[unroll]] for (uint j = 0u; j < 4u; j++) {
            uint w = ldw(qb + 4u * j);
            [[unroll]] for (uint i = 0u; i < 4u; i++) v[4u * j + i] = d * float((w >> (8u * i + sh)) & 15u) - m;
        }
    } else {   // f32, f16, bf16, q6_K: element by element
        uint nb0 = t_nb(0u, 0u);
        for (uint i = 0u; i < 16u; i++) v[i] = deq(0u, ra, k0 + 16u * h + i, TY, nb0);
    }
    As[o4 + 2u * h] = uvec4(pk(v[0], v[1]), pk(v[2], v[3]), pk(v[4], v[5]), pk(v[6], v[7]));
    As[o4 + 2u * h + 1u] = uvec4(pk(v[8], v[9]), pk(v[10], v[11]), pk(v[12], v[13]), pk(v[14], v[15]));
}

// the weights (dequantized) and activations (f16) of the step at k0 into stage st
void load_step(uint k0, uint st, uint M, uint N, uint bm, uint bn, uint i02, uint i03, uint i12, uint i13,
               uint t, uint WG, bool vec) {
    uint ao = st * BM * LD4, bo = st * BN * LD4;
    for (uint task = t; task < 2u * BM; task += WG) {
        uint r = task >> 1, m = bm * BM + r;
        load_a16(ao + r * LD4, task & 1u, m < M ? t_row(0u, m, i02, i03) : 0u, k0, m < M);
    }
    for (uint task = t; task < 4u * BN; task += WG) {   // 8 activations each; a row's 4 tasks are neighbours
        uint c = task >> 2, g = task & 3u, n = bn * BN + c;
        uvec4 r = uvec4(0u);
        if (n < N) {
            uint w = (t_row(1u, n, i12, i13) >> 2) + k0 + 8u * g;   // in 32-bit words
            vec4 x0, x1;
            if (vec) {
                x0 = uintBitsToFloat(s1q[w >> 2]);
                x1 = uintBitsToFloat(s1q[(w >> 2) + 1u]);
            } else {
                x0 = uintBitsToFloat(uvec4(s1w[w], s1w[w + 1u], s1w[w + 2u], s1w[w + 3u]));
                x1 = uintBitsToFloat(uvec4(s1w[w + 4u], s1w[w + 5u], s1w[w + 6u], s1w[w + 7u]));
            }
            r = uvec4(pk(x0.x, x0.y), pk(x0.z, x0.w), pk(x1.x, x1.y), pk(x1.z, x1.w));
        }
        Bs[bo + c * LD4 + g] = r;
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
    uint t = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    bool vec = ex_u(1u) != 0u;
    uint sg = SG_ID, wm = (sg & 1u) * (BM / 2u), wn = (sg >> 1) * (BN / 2u);
    ACC acc[FR][FR];
    [[unroll]] for (uint i = 0u; i < FR; i++) [[unroll]] for (uint j = 0u; j < FR; j++) CM_ZERO(acc[i][j]);
    uint nk = K / BK;
    load_step(0u, 0u, M, N, bm, bn, i02, i03, i12, i13, t, WG, vec);
    barrier();
    for (uint s = 0u; s < nk; s++) {
        uint st = s % NST, ao = st * BM * LD4, bo = st * BN * LD4;
        [[unroll]] for (uint kk = 0u; kk < BK / 8u; kk += 2u)   // 16 elements = 2 words
            [[unroll]] for (uint i = 0u; i < FR; i++) [[unroll]] for (uint j = 0u; j < FR; j++)
                CM_MMA_V4(acc[i][j], As, ao + (wm + 16u * i) * LD4 + kk, LD4, Bs, bo + (wn + 16u * j) * LD4 + kk, LD4, true);
        if (s + 1u < nk) load_step((s + 1u) * BK, (s + 1u) % NST, M, N, bm, bn, i02, i03, i12, i13, t, WG, vec);
        barrier();   // the next stage written before it is read; this stage read before it is rewritten
    }
    uint lane = SG_LANE, cs = sg * 256u;
    [[unroll]] for (uint i = 0u; i < FR; i++) [[unroll]] for (uint j = 0u; j < FR; j++) {
        CM_STORE(acc[i][j], Cs, cs, 16u, true);   // (m, n) at cs + n * 16 + m
        SG_SYNC();
        for (uint e = lane; e < 256u; e += SG_SIZE) {
            uint m = bm * BM + wm + 16u * i + (e & 15u), n = bn * BN + wn + 16u * j + (e >> 4);
            if (m < M && n < N) dw[t_at(4u, m, n, i12, i13) >> 2] = floatBitsToUint(Cs[cs + e]);
        }
        SG_SYNC();
    }
}
