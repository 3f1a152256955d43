#version 450
// dst[m, n] = sum_k src0[k, m] * src1[k, n] on cooperative matrices (the tensor cores), the
// configurable GEMM behind gemm_v=4 / gemm_cfg (vk_gemm_cfg in vk_matmul.c names the configurations).
// Specialization constant 0 is the weight type | configuration << 8:
//   BM x BN   the workgroup's tile of (weight rows, tokens): 32, 64, 128 or 256 each
//   BK        elements of K per step and shared-memory stage: 32 or 64
//   WM x WN   subgroups along M and N, each a (BM / WM) x (BN / WN) block of 16x16 f32 accumulators
//   KS        1 or 2 groups of WM x WN subgroups splitting every step's K between them (more warps
//             on the same tile; their results are summed through shared memory at the end)
//   NST       shared-memory stages (2: the next step stored while this one multiplies, one barrier)
//   PF        register prefetch: the next step's raw weight words and activations are loaded from
//             global memory before this step's products, dequantized and stored after them, so the
//             load latency hides behind the tensor-core work (without it, as mul_mat_cm3: loaded and
//             used at once, after the products)
// Against mul_mat_cm3 also: every operand fragment is loaded from shared memory once per 16-element
// sub-step (FM + FN loads for FM x FN products, not two per product), and the weight tasks are
// whole 32-element blocks (q4_0, q4_1, q8_0: one block; q4_K: one sub-block; f16: 64 bytes), read as
// aligned 32-bit words and realigned in registers (rows need only 2-byte alignment).
// Every shared array is of 16-byte words (tests/test_vulkan_spirv.py: sized by specialization, they stay
// 16-byte aligned). Tiles in shared memory are packed f16 in 16-byte words, rows of BK / 8 + 1 words (80 or 144
// bytes: 8 rows' 16-byte pieces fall in distinct bank groups). CM_EMULATE builds the plain-GLSL
// version (coopmat.glsl) for the tests on lavapipe.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#ifdef CM4_LIT   // a literal build (option gemm_lit; vulkan.mk's CM4_LITS): the specialization and the workgroup fixed here
layout(local_size_x = CM4_WG) in;
const uint SPEC = CM4_LIT;
#else
layout(local_size_x = 128, local_size_x_id = 1) in;   // NSG subgroups (the host passes NSG x the subgroup size)
layout(constant_id = 0) const uint SPEC = 0u;
#endif
const uint TY = SPEC & 255u;
const uint BM = 32u << ((SPEC >> 8) & 3u);
const uint BN = 32u << ((SPEC >> 10) & 3u);
const uint BK = 32u << ((SPEC >> 12) & 1u);
const uint WM = 1u << ((SPEC >> 13) & 3u);
const uint WN = 1u << ((SPEC >> 15) & 3u);
const uint NST = 1u + ((SPEC >> 17) & 1u);
const uint PF = (SPEC >> 18) & 1u;
const uint KS = 1u + ((SPEC >> 19) & 1u);
// (the KHR build) the products summed in f16 accumulators, then added into the f32 ones (option cm_acc=f16*:
// on the H200 the f32-accumulating products run at ~30 TFLOPS)
const uint AH = (SPEC >> 23) & 1u;
// (with AH) the f16 sums span AHS steps before they join the f32 ones (option cm_acc: f16 1, f16x2 2, f16x4 4 (the
// default), f16x8 8): each join waits for every product in flight, so joining once per step capped the products at
// about 100 TFLOPS on the H100, and once per 4 steps at about 285 (debug_gemm_parts=5,
// bench/results/gpu-vulkan-gemm-acc-h100-20261206T1705/)
const uint AHS = 1u << ((SPEC >> 27) & 3u);
// f16 weights whose rows start on 16 bytes (option gemm_dq's copy): a task is 4 16-byte loads, stored as loaded
const uint A16 = (SPEC >> 24) & 1u;
// f16 activations in rows on 16 bytes (option gemm_b16's copy): a task is one 16-byte load, stored as loaded
const uint B16 = (SPEC >> 25) & 1u;
// (with B16; option gemm_bg) the activation fragments loaded from that copy in global memory, not staged in
// shared memory: the copy's rows are padded to whole tiles of BN tokens and BK elements (zeros), so no
// fragment reads past it; shared memory holds the weight tiles alone
const uint BG = (SPEC >> 26) & 1u;
const uint NSG = WM * WN * KS;
// Measurement switch (device option debug_gemm_parts; kernel names end in .dnl/.dnm/.dmo/.dsk; for
// scripts/vulkan_gemm_sweep.py --parts, results wrong by design): 1 no global loads after the first step (products,
// shared-memory fragment loads and barriers only), 2 no products (loads, dequantization, shared stores
// and barriers), 3 products alone on fragments loaded once (the tensor cores' rate through the extension),
// 4 every step reads the first 256 elements of K again (the same work on a small memory footprint), 5 as 3 with
// the f16 sums joining the f32 ones as in the whole GEMM (the cost of the joins: with cm_acc=f16*)
const uint DG = (SPEC >> 20) & 7u;
#define CM_NSG NSG
#include "coopmat.glsl"
layout(std430, binding = 1) readonly buffer S1q { uvec4 s1q[]; };
layout(std430, binding = 0) readonly buffer S0q { uvec4 s0q[]; };
// (option gemm_splitk) the K steps cut into ex[2] splits of ex[3] steps, a workgroup each: split 0 writes the result, split
// s > 0 its partial sums at binding 6, [s - 1][i13][i12][n][m], which splitk_add.comp then adds into it. With ex[4] set
// (option splitk_last) every split writes its sums there, [s][i13][i12][n][m] from word ex[5], and counts itself in its
// tile's counter (word tile of binding 6, zero before): the last of a tile's splits adds them in split order (splitk_add's
// sums, whichever split is last), writes the result and sets the counter back to zero for the next split GEMM.
layout(std430, binding = 6) coherent buffer Pk { float pkf[]; };
layout(std430, binding = 6) coherent buffer PkU { uint pku[]; };
shared uvec4 ks_last;                          // (x; every shared variable a multiple of 16 bytes: coopmat.glsl)
#ifdef CM_EMULATE
#define UNROLL_CM [[dont_unroll]]               // (one copy of the emulated product: lavapipe compiles it in seconds)
#else
#define UNROLL_CM [[unroll]]
#endif

const uint WG = gl_WorkGroupSize.x;
const uint LD4 = BK / 8u + 1u;                  // row stride in 16-byte words
const uint FM = BM / WM / 16u, FN = BN / WN / CM_N;   // fragments: 16 rows (A) x CM_N columns (B, accumulators)
const uint KQ = BK / 16u / KS;                  // 16-element sub-steps per step and k-group
const uint NTA = BM * BK / 32u, TA = (NTA + WG - 1u) / WG;   // weight tasks (32 elements) per step, per invocation
const uint NTB = BN * BK / 8u, TB = (NTB + WG - 1u) / WG;    // activation tasks (8 elements)
const uint RAWN = 17u;                          // raw words per weight task (f16: 64 bytes + realignment)
shared uvec4 As[NST * BM * LD4];                // weights, [stage][m][k / 8]
shared uvec4 Bs[BG != 0u ? 1u : NST * BN * LD4];   // activations, [stage][n][k / 8] (BG: unused)
shared uvec4 Cs[NSG * 64u];                     // a 16x16 f32 tile per subgroup (results, the k-groups' sum)

uint rawa[TA * RAWN];                           // the next step's weight words, as loaded
uint infa[TA];                                  // bit 0: valid, bit 1: the block starts 2 bytes into a word
uint rawb[TB * 8u];                             // the next step's activations (f32 bits)
uint infb[TB];

uint M, N, K, bm, bn, i02, i03, i12, i13;
uint gb0, ldg;                                  // BG: the tile's first token row in the copy, its row stride (16-byte words)
bool vec;

// the 32-bit word at even byte o of weight task i's block (q4_K: o >= 16 its quant words), the
// raw words starting at the aligned word below the block
uint wat(uint i, uint o, uint sh) {
    uint b = i * RAWN + (o >> 2);
    uint lo = rawa[b], hi = rawa[b + 1u], mid = (lo >> 16) | (hi << 16);
    return (o & 2u) == 0u ? (sh != 0u ? mid : lo) : (sh != 0u ? hi : mid);
}
uint pk(float a, float b) { return packHalf2x16(vec2(a, b)); }
// a 4-bit quant's weight: q4_0 d (q - 8), q4_1 d q + m (dm: the block's d and, for q4_1, m)
float w4(uint q, vec2 dm) { return TY == TY_Q4_1 ? dm.x * float(q) + dm.y : dm.x * (float(q) - 8.0); }

// weight task j of the step at k0: row r = j / (BK / 32), block kb = j % (BK / 32)
void task_a(uint j, uint k0, out uint m, out uint k, out bool ok) {
    m = bm * BM + j / (BK / 32u);
    k = (DG == 4u ? k0 & 255u : k0) + 32u * (j % (BK / 32u));
    ok = j < NTA && m < M && k < K;
}

void fetch_a(uint k0) {
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint i = 0u; i < TA; i++) {
        uint m, k; bool ok;
        task_a(t + i * WG, k0, m, k, ok);
        infa[i] = 0u;
        if (!ok) continue;
        uint ra = t_row(0u, m, i02, i03), b = 0u, n = 0u, q = 0u;
        if (TY == TY_Q4_0) { b = ra + (k >> 5) * 18u; n = 5u; }
        else if (TY == TY_Q4_1) { b = ra + (k >> 5) * 20u; n = (b & 2u) != 0u ? 6u : 5u; }
        else if (TY == TY_Q8_0) { b = ra + (k >> 5) * 34u; n = 9u; }
        else if (TY == TY_Q4_K) { b = ra + (k >> 8) * 144u; n = 5u; q = b + 16u + 32u * ((k >> 6) & 3u); }
        else if (TY == TY_F16 && A16 != 0u) {
            infa[i] = 1u;
            [[unroll]] for (uint w = 0u; w < 4u; w++) {
                uvec4 x = s0q[((ra + 2u * k) >> 4) + w];
                [[unroll]] for (uint e = 0u; e < 4u; e++) rawa[i * RAWN + 4u * w + e] = x[e];
            }
            continue;
        }
        else if (TY == TY_F16) { b = ra + 2u * k; n = (b & 2u) != 0u ? 17u : 16u; }   // (the 17th word only to realign)
        else { infa[i] = 1u; continue; }        // f32, bf16, q6_K: element by element in put_a
        infa[i] = 1u | (b & 2u);
        [[unroll]] for (uint w = 0u; w < RAWN; w++)
            if (w < n) rawa[i * RAWN + w] = s0w[(b >> 2) + w];
        if (TY == TY_Q4_K)
            [[unroll]] for (uint w = 0u; w < 9u; w++)   // (the 9th word only to realign: past the block's end)
                if (w < 8u || (q & 2u) != 0u) rawa[i * RAWN + 5u + w] = s0w[(q >> 2) + w];
    }
}

// dequantize the fetched weights into stage st
void put_a(uint k0, uint st) {
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint i = 0u; i < TA; i++) {
        uint j = t + i * WG;
        if (j >= NTA) continue;
        uint o4 = st * BM * LD4 + (j / (BK / 32u)) * LD4 + 4u * (j % (BK / 32u));
        uint sh = infa[i] & 2u;
        uvec4 o[4];
        if ((infa[i] & 1u) == 0u) {
            o[0] = o[1] = o[2] = o[3] = uvec4(0u);
        } else if (TY == TY_Q4_0 || TY == TY_Q4_1) {   // q4_0: f16 d, bytes 2..17 (element e low nibble of byte e,
            // 16 + e its high one); q4_1: f16 d, f16 m, then the same nibbles at bytes 4..19
            vec2 dm = unpackHalf2x16(wat(i, 0u, sh));
            uint q0 = TY == TY_Q4_1 ? 4u : 2u;
            [[unroll]] for (uint w = 0u; w < 4u; w++) {
                uint qw = wat(i, q0 + 4u * w, sh);
                uint b0 = qw & 255u, b1 = (qw >> 8) & 255u, b2 = (qw >> 16) & 255u, b3 = qw >> 24;
                uvec2 l = uvec2(pk(w4(b0 & 15u, dm), w4(b1 & 15u, dm)), pk(w4(b2 & 15u, dm), w4(b3 & 15u, dm)));
                uvec2 h = uvec2(pk(w4(b0 >> 4, dm), w4(b1 >> 4, dm)), pk(w4(b2 >> 4, dm), w4(b3 >> 4, dm)));
                // word w holds elements 4w..4w+3: half (w & 1) of 16-byte word w / 2
                if ((w & 1u) == 0u) { o[w >> 1].xy = l; o[2u + (w >> 1)].xy = h; }
                else { o[w >> 1].zw = l; o[2u + (w >> 1)].zw = h; }
            }
        } else if (TY == TY_Q8_0) {
            float d = unpackHalf2x16(wat(i, 0u, sh)).x;
            [[unroll]] for (uint w = 0u; w < 8u; w++) {
                uint qw = wat(i, 2u + 4u * w, sh);
                uvec2 p = uvec2(pk(d * float(int(qw << 24) >> 24), d * float(int(qw << 16) >> 24)),
                                pk(d * float(int(qw << 8) >> 24), d * float(int(qw) >> 24)));
                if ((w & 1u) == 0u) o[w >> 1].xy = p; else o[w >> 1].zw = p;
            }
        } else if (TY == TY_Q4_K) {   // sub-block sb of the 256-element block: scale, min from bytes 4..15
            uint sb = ((k0 >> 5) + j % (BK / 32u)) & 7u;
            vec2 dm = unpackHalf2x16(wat(i, 0u, sh));
            uint s4 = wat(i, 4u, sh), s8 = wat(i, 8u, sh), s12 = wat(i, 12u, sh);
            uint sc, mn;
            if (sb < 4u) {
                sc = (s4 >> (8u * sb)) & 63u;
                mn = (s8 >> (8u * sb)) & 63u;
            } else {
                uint a = (s12 >> (8u * (sb - 4u))) & 255u;
                sc = (a & 15u) | (((s4 >> (8u * (sb - 4u))) & 255u) >> 6 << 4);
                mn = (a >> 4) | (((s8 >> (8u * (sb - 4u))) & 255u) >> 6 << 4);
            }
            float d = dm.x * float(sc), mm = dm.y * float(mn);
            uint ns = (sb & 1u) * 4u;
            [[unroll]] for (uint w = 0u; w < 8u; w++) {
                uint qw = (wat(i, 20u + 4u * w, sh) >> ns) & 0x0F0F0F0Fu;   // raw words 5.. hold the quants
                uvec2 p = uvec2(pk(d * float(qw & 15u) - mm, d * float((qw >> 8) & 15u) - mm),
                                pk(d * float((qw >> 16) & 15u) - mm, d * float(qw >> 24) - mm));
                if ((w & 1u) == 0u) o[w >> 1].xy = p; else o[w >> 1].zw = p;
            }
        } else if (TY == TY_F16 && A16 != 0u) {
            [[unroll]] for (uint w = 0u; w < 4u; w++)
                o[w] = uvec4(rawa[i * RAWN + 4u * w], rawa[i * RAWN + 4u * w + 1u], rawa[i * RAWN + 4u * w + 2u], rawa[i * RAWN + 4u * w + 3u]);
        } else if (TY == TY_F16) {
            [[unroll]] for (uint w = 0u; w < 4u; w++)
                o[w] = uvec4(wat(i, 16u * w, sh), wat(i, 16u * w + 4u, sh), wat(i, 16u * w + 8u, sh), wat(i, 16u * w + 12u, sh));
        } else {
            uint m, k; bool ok;
            task_a(j, k0, m, k, ok);
            uint ra = t_row(0u, m, i02, i03), nb0 = t_nb(0u, 0u);
            [[unroll]] for (uint w = 0u; w < 4u; w++) {
                float v[8];
                [[unroll]] for (uint e = 0u; e < 8u; e++) v[e] = deq(0u, ra, k + 8u * w + e, TY, nb0);
                o[w] = uvec4(pk(v[0], v[1]), pk(v[2], v[3]), pk(v[4], v[5]), pk(v[6], v[7]));
            }
        }
        [[unroll]] for (uint w = 0u; w < 4u; w++) As[o4 + w] = o[w];
    }
}

// activation task j: token c = j / (BK / 8), 8 elements from k0 + 8 (j % (BK / 8))
void fetch_b(uint k0) {
    if (BG != 0u) return;
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint i = 0u; i < TB; i++) {
        uint j = t + i * WG, n = bn * BN + j / (BK / 8u), k = (DG == 4u ? k0 & 255u : k0) + 8u * (j % (BK / 8u));
        bool ok = j < NTB && n < N && k < K;
        infb[i] = ok ? 1u : 0u;
        if (!ok) continue;
        if (B16 != 0u) {
            uvec4 x = s1q[(t_row(1u, n, i12, i13) >> 4) + (k >> 3)];
            [[unroll]] for (uint e = 0u; e < 4u; e++) rawb[i * 8u + e] = x[e];
            continue;
        }
        uint w = (t_row(1u, n, i12, i13) >> 2) + k;   // in 32-bit words
        if (vec) {
            uvec4 x0 = s1q[w >> 2], x1 = s1q[(w >> 2) + 1u];
            [[unroll]] for (uint e = 0u; e < 4u; e++) { rawb[i * 8u + e] = x0[e]; rawb[i * 8u + 4u + e] = x1[e]; }
        } else {
            [[unroll]] for (uint e = 0u; e < 8u; e++) rawb[i * 8u + e] = s1w[w + e];
        }
    }
}

void put_b(uint st) {
    if (BG != 0u) return;
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint i = 0u; i < TB; i++) {
        uint j = t + i * WG;
        if (j >= NTB) continue;
        uvec4 r = uvec4(0u);
        if (infb[i] != 0u && B16 != 0u) {
            r = uvec4(rawb[i * 8u], rawb[i * 8u + 1u], rawb[i * 8u + 2u], rawb[i * 8u + 3u]);
        } else if (infb[i] != 0u) {
            vec4 x0 = uintBitsToFloat(uvec4(rawb[i * 8u], rawb[i * 8u + 1u], rawb[i * 8u + 2u], rawb[i * 8u + 3u]));
            vec4 x1 = uintBitsToFloat(uvec4(rawb[i * 8u + 4u], rawb[i * 8u + 5u], rawb[i * 8u + 6u], rawb[i * 8u + 7u]));
            r = uvec4(pk(x0.x, x0.y), pk(x0.z, x0.w), pk(x1.x, x1.y), pk(x1.z, x1.w));
        }
        Bs[st * BN * LD4 + (j / (BK / 8u)) * LD4 + j % (BK / 8u)] = r;
    }
}

// a subgroup's operand fragments of one 16-element sub-step into fa[FM], fb[FN]: its rows of the weight
// tile at stage offset ao, its columns of the activation tile at bo, sub-step word offset kk
// (BG: bo is the step's first word in the copy's rows of the tile)
#define LOAD_FRAGS(ao, bo, kk) \
    UNROLL_CM for (uint i = 0u; i < FM; i++) CM_LOAD_V4(fa[i], As, (ao) + (wm + 16u * i) * LD4 + (kk), LD4, false); \
    if (BG != 0u) { UNROLL_CM for (uint j = 0u; j < FN; j++) CM_LOAD_V4(fb[j], s1q, (bo) + (wn + CM_N * j) * ldg + (kk), ldg, true); } \
    else { UNROLL_CM for (uint j = 0u; j < FN; j++) CM_LOAD_V4(fb[j], Bs, (bo) + (wn + CM_N * j) * LD4 + (kk), LD4, true); }
// one product into the f32 sums (the emulation reads its operands where the fragments lie: Bs or the copy)
#ifdef CM_EMULATE
#define MAD_AB(acc_, fa_, fb_) if (BG != 0u) { CM_MAD_V4(acc_, As, fa_, s1q, fb_, true); } else { CM_MAD_V4(acc_, As, fa_, Bs, fb_, true); }
#else
#define MAD_AB(acc_, fa_, fb_) CM_MAD_V4(acc_, As, fa_, Bs, fb_, true)
#endif

#if defined(CM_KHR)
// the f16 sums ph added into the f32 ones acc, and cleared
#define JOIN_H() \
    UNROLL_CM for (uint f = 0u; f < FM * FN; f++) { acc[f] += ACC(ph[f]); ph[f] = ACC_H(0.0); }
#endif

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    M = t_ne(0u, 1u); N = t_ne(1u, 1u); K = t_ne(0u, 0u);
    uint B2 = t_ne(1u, 2u);
    uint tm = (M + BM - 1u) / BM, tn = (N + BN - 1u) / BN;
    uint nsp = max(ex_u(2u), 1u), ks = w % nsp;   // K split ks of nsp
    uint klast = nsp > 1u ? ex_u(4u) : 0u;       // splitk_last
    w /= nsp;
    bm = w % tm; w /= tm;
    bn = w % tn; w /= tn;
    i12 = w % B2; i13 = w / B2;
    i02 = i12 / (B2 / t_ne(0u, 2u)); i03 = i13 / (t_ne(1u, 3u) / t_ne(0u, 3u));
    vec = ex_u(1u) != 0u;
    if (BG != 0u) { gb0 = t_row(1u, bn * BN, i12, i13) >> 4; ldg = t_nb(1u, 1u) >> 4; }
    uint sg = SG_ID, kq = sg / (WM * WN), s2 = sg % (WM * WN);
    uint wm = (s2 % WM) * (BM / WM), wn = (s2 / WM) * (BN / WN);
    ACC acc[FM * FN];
    [[unroll]] for (uint f = 0u; f < FM * FN; f++) CM_ZERO(acc[f]);
    uint nk = (K + BK - 1u) / BK, k0s = 0u;   // the split's steps and its first element of K
    if (nsp > 1u) { k0s = ks * ex_u(3u); nk = min(nk - min(nk, k0s), ex_u(3u)); k0s *= BK; }
    fetch_a(k0s); fetch_b(k0s);
    put_a(k0s, 0u); put_b(0u);
    barrier();
#if defined(CM_KHR)
    ACC_H ph[FM * FN];                          // (AH) the f16 sums of the last steps
    UNROLL_CM for (uint f = 0u; f < FM * FN; f++) ph[f] = ACC_H(0.0);
#endif
    if (DG == 3u || DG == 5u) {   // the products alone, on fragments loaded once
        FRAG_A fa[FM]; FRAG_B fb[FN];
        LOAD_FRAGS(0u, BG != 0u ? gb0 + k0s / 8u : 0u, 0u);
#if defined(CM_KHR)
        if (AH != 0u) {
            for (uint s = 0u; s < nk; s++) {
                UNROLL_CM for (uint q = 0u; q < KQ; q++)
                    UNROLL_CM for (uint i = 0u; i < FM; i++) UNROLL_CM for (uint j = 0u; j < FN; j++)
                        ph[i * FN + j] = coopMatMulAdd(fa[i], fb[j], ph[i * FN + j]);
                if (DG == 5u && ((s + 1u) % AHS == 0u || s + 1u == nk)) JOIN_H();
            }
            if (DG == 3u) JOIN_H();
        } else
#endif
        for (uint s = 0u; s < nk * KQ; s++)
            UNROLL_CM for (uint i = 0u; i < FM; i++) UNROLL_CM for (uint j = 0u; j < FN; j++)
                MAD_AB(acc[i * FN + j], fa[i], fb[j]);
        nk = 0u;
    }
    for (uint s = 0u; s < nk; s++) {
        uint st = s % NST, ao = st * BM * LD4, bo = BG != 0u ? gb0 + (k0s + s * BK) / 8u : st * BN * LD4;
        bool more = s + 1u < nk && DG != 1u;
        uint kn = k0s + (s + 1u) * BK;          // the next step's first element
        if (PF != 0u && more) { fetch_a(kn); fetch_b(kn); }
#if defined(CM_KHR)
        if (DG != 2u && AH != 0u) {   // the KQ sub-steps of AHS steps summed in f16, then into the f32 sums
            UNROLL_CM for (uint q = 0u; q < KQ; q++) {
                uint kk = 2u * (kq * KQ + q);
                FRAG_A fa[FM]; FRAG_B fb[FN];
                LOAD_FRAGS(ao, bo, kk);
                UNROLL_CM for (uint i = 0u; i < FM; i++) UNROLL_CM for (uint j = 0u; j < FN; j++)
                    ph[i * FN + j] = coopMatMulAdd(fa[i], fb[j], ph[i * FN + j]);
            }
            if ((s + 1u) % AHS == 0u || s + 1u == nk) JOIN_H();
        } else
#endif
        if (DG != 2u) UNROLL_CM for (uint q = 0u; q < KQ; q++) {
            uint kk = 2u * (kq * KQ + q);       // this sub-step's 16 elements: 2 words of a row
            FRAG_A fa[FM]; FRAG_B fb[FN];
            LOAD_FRAGS(ao, bo, kk);
            UNROLL_CM for (uint i = 0u; i < FM; i++) UNROLL_CM for (uint j = 0u; j < FN; j++)
                MAD_AB(acc[i * FN + j], fa[i], fb[j]);
        }
        if (NST == 1u) barrier();               // the one stage read before it is rewritten
        if (more) {
            if (PF == 0u) { fetch_a(kn); fetch_b(kn); }
            put_a(kn, (s + 1u) % NST); put_b((s + 1u) % NST);
        }
        barrier();   // the next stage written before it is read; (2 stages) this one read before it is rewritten
    }
    // results through a 16x16 staging tile per subgroup, stored bounds-checked and coalesced along m;
    // with two k-groups, k-group 0 adds k-group 1's tile (the same fragment of subgroup sg + WM * WN)
    // (glslang 12's optimizer crashes on a sum of two cooperative matrices, so the sum is elementwise)
    uint lane = SG_LANE, cs = sg * 64u;   // (in 16-byte words)
    UNROLL_CM for (uint i = 0u; i < FM; i++) UNROLL_CM for (uint j = 0u; j < FN; j++) {
        CM_STORE_V4(acc[i * FN + j], Cs, cs, 4u, true);   // (m, n) at float cs * 4 + n * 16 + m
        if (KS > 1u) barrier(); else { SG_SYNC(); }
        if (kq == 0u)
            for (uint e = lane; e < 16u * CM_N; e += SG_SIZE) {
                uint m = bm * BM + wm + 16u * i + (e & 15u), n = bn * BN + wn + CM_N * j + (e >> 4);
                uint x = 4u * cs + e, y = x + WM * WN * 256u;
                float v = uintBitsToFloat(Cs[x >> 2][x & 3u]) + (KS > 1u ? uintBitsToFloat(Cs[y >> 2][y & 3u]) : 0.0);
                if (m < M && n < N) {
                    if (ks == 0u && klast == 0u) dw[t_at(4u, m, n, i12, i13) >> 2] = floatBitsToUint(v);
                    else pkf[ex_u(5u) * klast + (((ks - 1u + klast) * t_ne(1u, 3u) + i13) * B2 + i12) * N * M + n * M + m] = v;
                }
            }
        if (KS > 1u) barrier(); else { SG_SYNC(); }
    }
    if (klast != 0u) {   // splitk_last: the tile's last split adds them all
        uint tile = bm + tm * (bn + tn * (i12 + B2 * i13)), t = gl_LocalInvocationIndex;
        memoryBarrierBuffer();            // the sums before the count
        barrier();
        if (t == 0u) ks_last.x = atomicAdd(pku[tile], 1u) == nsp - 1u ? 1u : 0u;
        barrier();
        if (ks_last.x == 0u) return;      // (uniform)
        memoryBarrierBuffer();            // the other splits' sums after it
        uint per = t_ne(1u, 3u) * B2 * N * M;
        for (uint e = t; e < BM * BN; e += WG) {
            uint m = bm * BM + e % BM, n = bn * BN + e / BM;
            if (m >= M || n >= N) continue;
            uint o = ex_u(5u) + (i13 * B2 + i12) * N * M + n * M + m;
            float v = pkf[o];
            for (uint s = 1u; s < nsp; s++) v += pkf[o + s * per];
            dw[t_at(4u, m, n, i12, i13) >> 2] = floatBitsToUint(v);
        }
        if (t == 0u) pku[tile] = 0u;
    }
}
