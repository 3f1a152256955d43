#version 450
// Flash attention for prefill on cooperative matrices (the tensor cores): a workgroup of 4 subgroups
// takes 32 query rows of one head; keys in chunks of 64. Two passes over the keys, so the output
// accumulators never need rescaling: pass 1 computes each row's max and sum of exp (S = Q K^T on
// the matrix units, the softmax statistics in f32 with four invocations per row), pass 2
// recomputes S, forms P = exp(S - max) / sum in f16 and accumulates O += P V on the matrix units.
// A chunk whose mask is -inf for all 32 x 64 (row, key) pairs is skipped in both passes (causal
// prefill: about half of them). D = Dv <= 128 and a multiple of 16, no softcap, 32-wide subgroups
// with shuffles (vk_attn.c: fa_cm_ok); flash_attn.comp runs everything else.
// CM_EMULATE builds flash_attn_cm_emu (option fa=cm_emulated: the tests on lavapipe).
#include "common.glsl"
#include "coopmat.glsl"
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128, local_size_x_id = 1) in;
// Every matrix operation has the forms mul_mat_cm.comp runs correctly on the H200: A row-major,
// B column-major, accumulators stored column-major, all strides literal constants (the tensor-core
// build fixes DMAX at 128; the emulated one takes D rounded up to 64 or 128 as specialization
// constant 0 so that D <= 64 fits lavapipe's 32 KiB of shared memory).
#ifdef CM_EMULATE
layout(constant_id = 0) const uint DMAX = 128u;
#else
#define DMAX 128u
#endif
#define BQ 32u
#define BKV 64u
#define LDQ (DMAX + 8u)                          // Q and K rows in shared memory (halves)
#define LDV (BKV + 8u)                           // V^T rows: one per dimension, BKV keys (halves)
#define LDS (BQ + 4u)                            // S columns: one per key, BQ queries (floats)
#define LDP (BKV + 8u)                           // P rows (halves)
shared HALF Qs[BQ * LDQ];
shared HALF KVs[DMAX * LDV];                     // the chunk's K rows [key][dim], then V^T [dim][key] (DMAX * LDV >= BKV * LDQ)
shared float Ss[BKV * LDS];                      // S column-major [key][query]; at the end the output tiles' staging
shared HALF Ps[BQ * LDP];                        // P row-major [query][key]
shared uint any_open[4];                         // [0]: the last chunk with an unmasked (row, key) pair; 16 bytes
                                                 // like every shared variable here (coopmat.glsl: alignment)

uint g_h, g_b, g_nq, g_nkv;        // this workgroup's head, batch; sizes
float g_slope;

// the additive term of score (query row iq, key j): mask * ALiBi slope, 0 without a mask, -inf for
// masked keys and for rows or keys past the ends
float additive(uint iq, uint j) {
    if (iq >= g_nq || j >= g_nkv) return uintBitsToFloat(0xFF800000u);
    if (ex_u(1u) == 0u) return 0.0;
    return g_slope * ldf(3u, t_row(3u, iq, g_h % t_ne(3u, 2u), g_b % t_ne(3u, 3u)) + j * t_nb(3u, 0u), t_type(3u));
}

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    uint nq = t_ne(0u, 1u), H = t_ne(0u, 2u), D = t_ne(0u, 0u), nkv = t_ne(1u, 1u);
    uint nqb = (nq + BQ - 1u) / BQ;
    uint qb = w % nqb; w /= nqb;
    uint h = w % H, b = w / H;
    uint kh = h / (H / t_ne(1u, 2u)), vh = h / (H / t_ne(2u, 2u));   // GQA: K and V heads
    uint bk = b % t_ne(1u, 3u), bv = b % t_ne(2u, 3u);
    uint t = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x, sg = SG_ID;
    uint q0 = qb * BQ;
    float scale = op_f(0u);
    g_h = h; g_b = b; g_nq = nq; g_nkv = nkv; g_slope = alibi_slope(op_f(1u), h, H);
    const float NEG_INF = uintBitsToFloat(0xFF800000u);

    for (uint e = t; e < BQ * DMAX; e += WG) {   // Q rows (f32) as f16; rows past nq and dims past D: 0
        uint r = e / DMAX, d = e % DMAX;
        float v = (q0 + r < nq && d < D) ? ldf(0u, t_row(0u, q0 + r, h, b) + d * t_nb(0u, 0u), t_type(0u)) : 0.0;
        Qs[r * LDQ + d] = TO_HALF(v);
    }
    // softmax statistics: invocation t owns rows r = t / 4 + k * WG / 4 (k < RPT: one row on GPUs, 4
    // where the workgroup has 32 invocations) and keys c0..c0+15 of each chunk of them
    uint c0 = (t & 3u) * 16u, RPT = BQ / (WG / 4u);
    float M[4], L[4];
    for (uint k = 0u; k < 4u; k++) { M[k] = NEG_INF; L[k] = 0.0; }
    ACC o[4];                                    // this subgroup's output tiles: (oi, oj) = (q / nt, q % nt), q = sg + 4i
    uint nt = D / 16u, ntiles = 2u * nt;
    [[unroll]] for (uint i = 0u; i < 4u; i++) CM_ZERO(o[i]);
    uint nch = (nkv + BKV - 1u) / BKV;

    for (uint pass = 0u; pass < 2u; pass++) {
        for (uint j0 = 0u; j0 < nkv; j0 += BKV) {
            bool open = false;
            for (uint k = 0u; k < RPT && !open; k++)
                for (uint i = 0u; i < 16u && !open; i++) open = additive(q0 + (t >> 2) + k * (WG >> 2), j0 + c0 + i) != NEG_INF;
            uint chunk = pass * nch + j0 / BKV + 1u;   // unique per (pass, chunk): no reset, no extra barrier
            if (open) any_open[0] = chunk;
            for (uint e = t; e < BKV * DMAX; e += WG) {   // K rows of the chunk
                uint c = e / DMAX, d = e % DMAX, j = j0 + c;
                KVs[c * LDQ + d] = TO_HALF((j < nkv && d < D) ? ldf(1u, t_row(1u, j, kh, bk) + d * t_nb(1u, 0u), t_type(1u)) : 0.0);
            }
            barrier();
            if (any_open[0] != chunk) continue;           // uniform: the whole 32 x 64 block is masked
            for (uint q = sg; q < 8u; q += 4u) {       // S tiles (2 x 4 of 16 x 16), two per subgroup
                uint si = q >> 2, sj = q & 3u;
                ACC s;
                CM_ZERO(s);
                for (uint kk = 0u; kk < D; kk += 16u)   // A = Q rows, B = K^T (column-major: K rows)
                    CM_MMA(s, Qs, si * 16u * LDQ + kk, LDQ, KVs, sj * 16u * LDQ + kk, LDQ, true);
                CM_STORE(s, Ss, sj * 16u * LDS + si * 16u, LDS, true);   // (query, key) at key * LDS + query
            }
            barrier();
            for (uint k = 0u; k < RPT; k++) {
                uint r = (t >> 2) + k * (WG >> 2);
                float sv[16];
                float cmax = NEG_INF;
                for (uint i = 0u; i < 16u; i++) {
                    float a = additive(q0 + r, j0 + c0 + i);
                    sv[i] = a == NEG_INF ? NEG_INF : Ss[(c0 + i) * LDS + r] * scale + a;
                    cmax = max(cmax, sv[i]);
                }
                if (pass == 0u) {   // the row's 4 invocations are neighbouring lanes of one subgroup
                    cmax = max(cmax, subgroupShuffleXor(cmax, 1u));
                    cmax = max(cmax, subgroupShuffleXor(cmax, 2u));
                    float mn = max(M[k], cmax);
                    float psum = 0.0;
                    if (mn != NEG_INF)
                        for (uint i = 0u; i < 16u; i++) psum += sv[i] == NEG_INF ? 0.0 : exp(sv[i] - mn);
                    psum += subgroupShuffleXor(psum, 1u);
                    psum += subgroupShuffleXor(psum, 2u);
                    L[k] = (M[k] == NEG_INF ? 0.0 : L[k] * exp(M[k] - mn)) + psum;
                    M[k] = mn;
                } else {
                    float inv = L[k] > 0.0 ? 1.0 / L[k] : 0.0;
                    for (uint i = 0u; i < 16u; i++)
                        Ps[r * LDP + c0 + i] = TO_HALF(sv[i] == NEG_INF ? 0.0 : exp(sv[i] - M[k]) * inv);
                }
            }
            if (pass == 0u) {
                barrier();                             // S read before the next chunk overwrites it
                continue;
            }
            for (uint e = t; e < BKV * DMAX; e += WG) {   // V^T of the chunk (K is done with)
                uint c = e / DMAX, d = e % DMAX, j = j0 + c;
                KVs[d * LDV + c] = TO_HALF((j < nkv && d < D) ? ldf(2u, t_row(2u, j, vh, bv) + d * t_nb(2u, 0u), t_type(2u)) : 0.0);
            }
            barrier();
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint q = sg + 4u * i;   // (uniform in the subgroup)
                if (q < ntiles) {
                    uint oi = q / nt, oj = q % nt;
                    [[unroll]] for (uint kk = 0u; kk < BKV; kk += 16u)
                        CM_MMA(o[i], Ps, oi * 16u * LDP + kk, LDP, KVs, oj * 16u * LDV + kk, LDV, true);
                }
            }
            barrier();                                 // P and V read before the next chunk
        }
    }
    // dst [Dv, H, n_q, B]: each subgroup stages one 16 x 16 tile at a time in Ss (column-major: (query, dim) at dim * 16 + query)
    uint lane = SG_LANE, cs = sg * 256u;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {        // (SG_SYNC is a workgroup barrier when emulated)
        uint q = sg + 4u * i;
        uint oi = q / nt, oj = q % nt;
        if (q < ntiles) CM_STORE(o[i], Ss, cs, 16u, true);
        SG_SYNC();
        for (uint e = lane; e < 256u && q < ntiles; e += SG_SIZE) {
            uint qr = q0 + oi * 16u + (e & 15u), d = oj * 16u + (e >> 4);
            if (qr < nq) stf(t_at(4u, d, h, qr, b), t_type(4u), Ss[cs + e]);
        }
        SG_SYNC();
    }
}
