#version 450
// Prefill flash attention on cooperative matrices, second build (option fa_cm=2, the default where
// its layout holds): flash_attn_cm.comp's two passes over 64-key chunks for 32 query rows of one head
// (pass 1 the softmax statistics, pass 2 P = exp(S - max) / sum and O += P V, so the output
// accumulators never rescale), with its loads and its skipping rebuilt:
//  - K and V are f16 rows read as 16-byte words (host-checked: unit element stride, 16-byte aligned
//    rows, heads, batches and offsets; vk_attn.c), all of a chunk's loads issued together into
//    registers before the chunk's first barrier (the first build read one element per load through
//    ldf, D = 128 wide whatever D was, and only then looked at the mask);
//  - V is transposed in registers (8 keys x 8 dimensions per invocation) and stored as 16-byte words
//    of V^T, P as two 16-byte words per invocation: every shared tile is packed f16 in uvec4s and the
//    matrix loads take them through the uvec4 overloads (as mul_mat_cm3.comp);
//  - the mask of an invocation's 16 keys is read once per chunk and pass (two 16-byte words for an f16
//    mask with 16-byte aligned rows), and pass 1 records which chunks have an unmasked (row, key)
//    pair: pass 2 skips the others without a load or a barrier (causal prefill: about half);
//  - the softmax state and scores stay in registers (unrolled loops).
// D = Dv <= 128 and a multiple of 16, no softcap, 32-wide subgroups with shuffles.
// CM_EMULATE builds flash_attn_cm2_emu (option fa=cm_emulated: the tests on lavapipe).
// FA_SPLIT builds flash_attn_cm2s (and _emu; option fa_cm_wgs, vk_attn.c): the keys in ex[3] splits of ex[4]
// chunks, a workgroup per (query block, split, head, batch), both passes over its split's chunks alone; it writes
// each query row's partial record (max M, sum L, L times its normalized output: flash_attn.comp's unnormalized
// accumulators) to the plan's scratch at binding 6, and flash_attn.comp's merge pass (MODE 2) combines a row's
// splits. A causal prefill's last query blocks then no longer walk every chunk twice in one workgroup.
#include "common.glsl"
#include "coopmat.glsl"
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128, local_size_x_id = 1) in;
#ifdef CM_EMULATE
layout(constant_id = 0) const uint DMAX = 128u;  // D rounded up to 64 or 128 (lavapipe's 32 KiB of shared memory)
#define WGMIN 32u                                // the smallest workgroup the host allows (4 subgroups of 8)
uint pack_h2(float a, float b) { return f32_to_f16(a) | (f32_to_f16(b) << 16); }
#else
#define DMAX 128u                                // literal strides for the matrix loads
#define WGMIN 128u
uint pack_h2(float a, float b) { return packHalf2x16(vec2(a, b)); }
#endif
#define BQ 32u
#define BKV 64u
#define LDQ4 (DMAX / 8u + 1u)                    // Q and K rows in shared memory, in 16-byte words
#define LDV4 (BKV / 8u + 1u)                     // V^T rows (one per dimension, BKV keys), in 16-byte words
#define LDS (BQ + 4u)                            // S columns: one per key, BQ queries (floats)
#define LDP4 (BKV / 8u + 1u)                     // P rows, in 16-byte words
#define KR (BKV * 16u / WGMIN)                   // K words per invocation and chunk, at most (D <= 128)
#define VB (128u / WGMIN)                        // 8 x 8 V blocks per invocation and chunk, at most
#define RMAX (4u * BQ / WGMIN)                   // query rows per invocation in the softmax
#define NOPEN 1024u                              // chunks whose pass-1 verdict is kept (NOPEN / 32 words)
layout(std430, binding = 1) readonly buffer S1v { uvec4 s1v[]; };
layout(std430, binding = 2) readonly buffer S2v { uvec4 s2v[]; };
layout(std430, binding = 3) readonly buffer S3v { uvec4 s3v[]; };
// every shared variable a multiple of 16 bytes (coopmat.glsl: alignment)
shared uvec4 Qs[BQ * LDQ4];
shared uvec4 KV4[DMAX * LDV4];                   // K rows [key][word], then V^T [dim][key word] (>= BKV * LDQ4 for DMAX >= 64)
shared float Ss[BKV * LDS];                      // S column-major [key][query]; at the end the output tiles' staging
shared uvec4 Ps4[BQ * LDP4];                     // P row-major [query][key word]
shared uint any_open[4];                         // [0]: the last chunk with an unmasked (row, key) pair
shared uint open_bits[NOPEN / 32u];              // pass 1's verdict per chunk
#ifdef FA_SPLIT
layout(std430, binding = 6) writeonly buffer Part { float part[]; };   // [row][split] records of D + 2 floats
shared float row_l[BQ];                          // each query row's sum L, for its output's scale
#endif

#include "fa_cm_mask.glsl"

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    uint nq = t_ne(0u, 1u), H = t_ne(0u, 2u), D = t_ne(0u, 0u), nkv = t_ne(1u, 1u);
    uint nqb = (nq + BQ - 1u) / BQ;
    uint qb = w % nqb; w /= nqb;
#ifdef FA_SPLIT
    uint ns = ex_u(3u), split = w % ns; w /= ns;
#endif
    uint h = w % H, b = w / H;
    uint kh = h / (H / t_ne(1u, 2u)), vh = h / (H / t_ne(2u, 2u));   // GQA: K and V heads
    uint bk = b % t_ne(1u, 3u), bv = b % t_ne(2u, 3u);
    uint t = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x, sg = SG_ID;
    uint q0 = qb * BQ;
    float scale = op_f(0u);
    g_h = h; g_b = b; g_nq = nq; g_nkv = nkv; g_slope = alibi_slope(op_f(1u), h, H);
    g_mask = ex_u(1u) != 0u; g_m16 = ex_u(2u) != 0u;
    const float NEG_INF = uintBitsToFloat(0xFF800000u);
    uint DW = D / 8u;                                                  // 16-byte words per K / V row
    uint kb = (t_off(1u) + kh * t_nb(1u, 2u) + bk * t_nb(1u, 3u)) >> 4, kn1 = t_nb(1u, 1u) >> 4;
    uint vb = (t_off(2u) + vh * t_nb(2u, 2u) + bv * t_nb(2u, 3u)) >> 4, vn1 = t_nb(2u, 1u) >> 4;

    for (uint e = t; e < BQ * DW; e += WG) {   // Q rows as f16, 8 per word; rows past nq: 0
        uint r = e / DW, g = e % DW;
        uvec4 wq = uvec4(0u);
        if (q0 + r < nq) {
            uint rb = t_row(0u, q0 + r, h, b) + 8u * g * t_nb(0u, 0u);
            [[unroll]] for (uint c = 0u; c < 4u; c++)
                wq[c] = pack_h2(ldf(0u, rb + 2u * c * t_nb(0u, 0u), t_type(0u)), ldf(0u, rb + (2u * c + 1u) * t_nb(0u, 0u), t_type(0u)));
        }
        Qs[r * LDQ4 + g] = wq;
    }
    for (uint i = t; i < NOPEN / 32u; i += WG) open_bits[i] = 0u;
    // softmax: invocation t owns rows r = t / 4 + k * WG / 4 (k < RPT) and keys c0..c0+15 of each chunk
    uint c0 = (t & 3u) * 16u, RPT = BQ / (WG / 4u);
    float M[RMAX], L[RMAX];
    [[unroll]] for (uint k = 0u; k < RMAX; k++) { M[k] = NEG_INF; L[k] = 0.0; }
    ACC o[4];                                  // this subgroup's output tiles: (oi, oj) = (q / nt, q % nt), q = sg + 4i
    uint nt = D / 16u, ntiles = 2u * nt;
    [[unroll]] for (uint i = 0u; i < 4u; i++) CM_ZERO(o[i]);
    uint nch = (nkv + BKV - 1u) / BKV, nkw = BKV * DW, nvb = (BKV / 8u) * DW;
#ifdef FA_SPLIT
    uint c_beg = split * ex_u(4u), c_end = min(nch, c_beg + ex_u(4u));
#else
    uint c_beg = 0u, c_end = nch;
#endif

    for (uint pass = 0u; pass < 2u; pass++) {
        for (uint ci = c_beg; ci < c_end; ci++) {
            uint j0 = ci * BKV;
            bool known = pass == 1u && ci < NOPEN;   // pass 1's verdict (open_bits written before a barrier since)
            if (known && (open_bits[ci >> 5] & (1u << (ci & 31u))) == 0u) continue;   // uniform
            // every load of the chunk first: the mask terms, K, and in pass 2 V
            FA_CM_LOADS(pass == 1u && bi < nvb)   // (V in pass 2 alone)
            uint chunk = pass * nch + ci + 1u;    // unique per (pass, chunk): no reset, no extra barrier
            if (open) any_open[0] = chunk;
            [[unroll]] for (uint i = 0u; i < KR; i++) {   // K rows [key][word]
                uint e = t + i * WG;
                if (e < nkw) KV4[(e / DW) * LDQ4 + e % DW] = kr[i];
            }
            barrier();
            if (!known && any_open[0] != chunk) continue;   // uniform: the whole 32 x 64 block is masked
            if (pass == 0u && t == 0u && ci < NOPEN) open_bits[ci >> 5] |= 1u << (ci & 31u);
            for (uint q = sg; q < 8u; q += 4u) {       // S tiles (2 x 4 of 16 x 16), two per subgroup
                uint si = q >> 2, sj = q & 3u;
                ACC s;
                CM_ZERO(s);
                for (uint kk = 0u; kk < D; kk += 16u)   // A = Q rows, B = K^T (column-major: K rows)
                    CM_MMA_V4(s, Qs, si * 16u * LDQ4 + kk / 8u, LDQ4, KV4, sj * 16u * LDQ4 + kk / 8u, LDQ4, true);
                CM_STORE(s, Ss, sj * 16u * LDS + si * 16u, LDS, true);   // (query, key) at key * LDS + query
            }
            barrier();
            [[unroll]] for (uint k = 0u; k < RMAX; k++) {
                if (k >= RPT) continue;
                uint r = (t >> 2) + k * (WG >> 2);
                float sv[16];
                float cmax = NEG_INF;
                [[unroll]] for (uint i = 0u; i < 16u; i++) {
                    sv[i] = a[k][i] == NEG_INF ? NEG_INF : Ss[(c0 + i) * LDS + r] * scale + a[k][i];
                    cmax = max(cmax, sv[i]);
                }
                if (pass == 0u) {   // the row's 4 invocations are neighbouring lanes of one subgroup
                    cmax = max(cmax, subgroupShuffleXor(cmax, 1u));
                    cmax = max(cmax, subgroupShuffleXor(cmax, 2u));
                    float mn = max(M[k], cmax);
                    float psum = 0.0;
                    if (mn != NEG_INF) {
                        [[unroll]] for (uint i = 0u; i < 16u; i++) psum += sv[i] == NEG_INF ? 0.0 : exp(sv[i] - mn);
                    }
                    psum += subgroupShuffleXor(psum, 1u);
                    psum += subgroupShuffleXor(psum, 2u);
                    L[k] = (M[k] == NEG_INF ? 0.0 : L[k] * exp(M[k] - mn)) + psum;
                    M[k] = mn;
                } else {
                    float inv = L[k] > 0.0 ? 1.0 / L[k] : 0.0;
                    float p[16];
                    [[unroll]] for (uint i = 0u; i < 16u; i++) p[i] = sv[i] == NEG_INF ? 0.0 : exp(sv[i] - M[k]) * inv;
                    Ps4[r * LDP4 + c0 / 8u] = uvec4(pack_h2(p[0], p[1]), pack_h2(p[2], p[3]), pack_h2(p[4], p[5]), pack_h2(p[6], p[7]));
                    Ps4[r * LDP4 + c0 / 8u + 1u] = uvec4(pack_h2(p[8], p[9]), pack_h2(p[10], p[11]), pack_h2(p[12], p[13]), pack_h2(p[14], p[15]));
                }
            }
            if (pass == 0u) {
                barrier();                             // S and K read before the next chunk overwrites them
                continue;
            }
            [[unroll]] for (uint i = 0u; i < VB; i++) {   // V^T (K is done with): block i transposed in registers
                uint bi = t + i * WG, kg = bi % 8u, dg = bi / 8u;
                if (bi < nvb) {
                    [[unroll]] for (uint c = 0u; c < 8u; c++) {   // dimension 8 dg + c, keys 8 kg .. 8 kg + 7
                        uvec4 x;
                        [[unroll]] for (uint q = 0u; q < 4u; q++)
                            x[q] = h16(vr[8u * i + 2u * q], c) | (h16(vr[8u * i + 2u * q + 1u], c) << 16);
                        KV4[(8u * dg + c) * LDV4 + kg] = x;
                    }
                }
            }
            barrier();
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint q = sg + 4u * i;   // (uniform in the subgroup)
                if (q < ntiles) {
                    uint oi = q / nt, oj = q % nt;
                    [[unroll]] for (uint kk = 0u; kk < BKV; kk += 16u)
                        CM_MMA_V4(o[i], Ps4, oi * 16u * LDP4 + kk / 8u, LDP4, KV4, oj * 16u * LDV4 + kk / 8u, LDV4, true);
                }
            }
            barrier();                                 // P and V read before the next chunk
        }
    }
#ifdef FA_SPLIT
    // the partial records: M and L from one of each row's four softmax invocations, L kept for the outputs' scale
    uint RS = D + 2u;
    [[unroll]] for (uint k = 0u; k < RMAX; k++) {
        uint r = (t >> 2) + k * (WG >> 2);
        if (k < RPT && (t & 3u) == 0u) {
            row_l[r] = L[k];
            if (q0 + r < nq) {
                uint rec = (((b * H + h) * nq + q0 + r) * ns + split) * RS;
                part[rec] = M[k];
                part[rec + 1u] = L[k];
            }
        }
    }
    barrier();
#endif
    // dst [Dv, H, n_q, B]: each subgroup stages one 16 x 16 tile at a time in Ss (column-major: (query, dim) at dim * 16 + query)
    uint lane = SG_LANE, cs = sg * 256u;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {        // (SG_SYNC is a workgroup barrier when emulated)
        uint q = sg + 4u * i;
        uint oi = q / nt, oj = q % nt;
        if (q < ntiles) CM_STORE(o[i], Ss, cs, 16u, true);
        SG_SYNC();
        for (uint e = lane; e < 256u && q < ntiles; e += SG_SIZE) {
            uint qr = q0 + oi * 16u + (e & 15u), d = oj * 16u + (e >> 4);
#ifdef FA_SPLIT
            if (qr < nq) part[(((b * H + h) * nq + qr) * ns + split) * RS + 2u + d] = Ss[cs + e] * row_l[qr - q0];
#else
            if (qr < nq) stf(t_at(4u, d, h, qr, b), t_type(4u), Ss[cs + e]);
#endif
        }
        SG_SYNC();
    }
}
