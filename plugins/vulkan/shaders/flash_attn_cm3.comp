#version 450
// Prefill flash attention on cooperative matrices in one pass (option fa_cm=3): flash_attn_cm2.comp's loads, layouts
// and chunk skipping (32 query rows of one head a workgroup, 64-key chunks, K and V f16 rows read as 16-byte words,
// V transposed in registers, the mask of an invocation's 16 keys read once a chunk), but each chunk is read and
// multiplied once: the softmax keeps a running max and sum per row (online softmax), P = exp(S - max) goes to the
// tensor cores unnormalized, each chunk's P V lands in a fresh accumulator that is staged through shared memory, and
// every invocation folds it into the output elements it owns in registers, scaled by the row's exp(old max - new max).
// cm2 reads K and the mask twice and multiplies Q K^T twice (pass 1 for the statistics, so that its output
// accumulators never rescale). At the end the outputs are divided by the row sums.
// D = Dv <= 128 and a multiple of 16, no softcap, 32-wide subgroups with shuffles (vk_attn.c's checks for cm2).
// CM_EMULATE builds flash_attn_cm3_emu (option fa=cm_emulated: the tests on lavapipe).
// With ex[5] set (option fa_span), binding 6 holds fa_mask_span.comp's open chunks of each (mask plane, query block):
// the loop walks those alone, so the chunks every row masks (half of a causal prefill's) cost no load and no barrier.
#include "common.glsl"
#include "coopmat.glsl"
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128, local_size_x_id = 1) in;
// specialization constant 0: the emulated build's DMAX (bits 0-15), the accumulators (bits 16-17, option fa_acc): 0 f32,
// 1 each chunk's P V summed in f16 (64 products of P in [0, 1]; the outputs stay f32 across chunks), 2 Q K^T too (D
// products: scores within f16's 11 bits). On the NVIDIA driver products into f32 accumulators run at about 30 TFLOPS
// (coopmat.glsl); the emulated build rounds the f16 sums after each 16-term product.
layout(constant_id = 0) const uint SPEC0 = 128u;
const uint FAH = (SPEC0 >> 16) & 3u;
#ifdef CM_EMULATE
const uint DMAX = SPEC0 & 0xFFFFu;               // D rounded up to 64 or 128 (lavapipe's 32 KiB of shared memory)
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
#define OMAX (BQ * DMAX / WGMIN)                 // output elements per invocation, at most
layout(std430, binding = 1) readonly buffer S1v { uvec4 s1v[]; };
layout(std430, binding = 2) readonly buffer S2v { uvec4 s2v[]; };
layout(std430, binding = 3) readonly buffer S3v { uvec4 s3v[]; };
layout(std430, binding = 6) readonly buffer Sp { uvec2 span[]; };
// every shared variable a multiple of 16 bytes (coopmat.glsl: alignment)
shared uvec4 Qs[BQ * LDQ4];
shared uvec4 KV4[DMAX * LDV4];                   // K rows [key][word], then V^T [dim][key word], then P V as f32 [dim][query]
shared float Ss[BKV * LDS];                      // S column-major [key][query]
shared uvec4 Ps4[BQ * LDP4];                     // P row-major [query][key word]
shared uint any_open[4];                         // [0]: the last chunk with an unmasked (row, key) pair
shared float row_a[BQ];                          // each row's scale for the outputs this chunk: exp(old max - new max)
shared float row_l[BQ];                          // at the end: each row's sum

#include "fa_cm_mask.glsl"

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
    // softmax: invocation t owns rows r = t / 4 + k * WG / 4 (k < RPT) and keys c0..c0+15 of each chunk
    uint c0 = (t & 3u) * 16u, RPT = BQ / (WG / 4u);
    float M[RMAX], L[RMAX];
    [[unroll]] for (uint k = 0u; k < RMAX; k++) { M[k] = NEG_INF; L[k] = 0.0; }
    // outputs: invocation t owns elements e = t + WG i of the [dim][query] layout (query e % BQ, dim e / BQ)
    float O[OMAX];
    [[unroll]] for (uint i = 0u; i < OMAX; i++) O[i] = 0.0;
    uint nt = D / 16u, ntiles = 2u * nt, nch = (nkv + BKV - 1u) / BKV, nkw = BKV * DW, nvb = (BKV / 8u) * DW;

    uint cl = 0u, ch = nch;
    if (ex_u(5u) != 0u) {   // fa_span: the block's open chunks (fa_mask_span.comp)
        uvec2 sp = span[((h % t_ne(3u, 2u)) + t_ne(3u, 2u) * (b % t_ne(3u, 3u))) * nqb + qb];
        cl = sp.x; ch = min(sp.y, nch);
    }
    for (uint ci = cl; ci < ch; ci++) {
        uint j0 = ci * BKV;
        // every load of the chunk first: the mask terms, K and V
        FA_CM_LOADS(bi < nvb)
        uint chunk = ci + 1u;                 // unique per chunk: no reset, no extra barrier
        if (open) any_open[0] = chunk;
        [[unroll]] for (uint i = 0u; i < KR; i++) {   // K rows [key][word]
            uint e = t + i * WG;
            if (e < nkw) KV4[(e / DW) * LDQ4 + e % DW] = kr[i];
        }
        barrier();
        if (any_open[0] != chunk) continue;   // uniform: the whole 32 x 64 block is masked
        for (uint q = sg; q < 8u; q += 4u) {       // S tiles (2 x 4 of 16 x 16), two per subgroup
            uint si = q >> 2, sj = q & 3u;
            ACC s;
            if (FAH == 2u) {
                ACC_H sh;
                CM_ZERO_H(sh);
                for (uint kk = 0u; kk < D; kk += 16u) {
                    CM_MMA_V4(sh, Qs, si * 16u * LDQ4 + kk / 8u, LDQ4, KV4, sj * 16u * LDQ4 + kk / 8u, LDQ4, true);
                    CM_ROUND_H(sh);
                }
                s = CM_TO_F32(sh);
            } else {
                CM_ZERO(s);
                for (uint kk = 0u; kk < D; kk += 16u)   // A = Q rows, B = K^T (column-major: K rows)
                    CM_MMA_V4(s, Qs, si * 16u * LDQ4 + kk / 8u, LDQ4, KV4, sj * 16u * LDQ4 + kk / 8u, LDQ4, true);
            }
            CM_STORE(s, Ss, sj * 16u * LDS + si * 16u, LDS, true);   // (query, key) at key * LDS + query
        }
        barrier();
        [[unroll]] for (uint k = 0u; k < RMAX; k++) {   // the running max and sum, P = exp(S - max)
            if (k >= RPT) continue;
            uint r = (t >> 2) + k * (WG >> 2);
            float sv[16];
            float cmax = NEG_INF;
            [[unroll]] for (uint i = 0u; i < 16u; i++) {
                sv[i] = a[k][i] == NEG_INF ? NEG_INF : Ss[(c0 + i) * LDS + r] * scale + a[k][i];
                cmax = max(cmax, sv[i]);
            }
            cmax = max(cmax, subgroupShuffleXor(cmax, 1u));   // the row's 4 invocations are neighbouring lanes
            cmax = max(cmax, subgroupShuffleXor(cmax, 2u));
            float mn = max(M[k], cmax);
            float al = M[k] == NEG_INF ? 0.0 : exp(M[k] - mn);
            float p[16];
            float psum = 0.0;
            [[unroll]] for (uint i = 0u; i < 16u; i++) {
                p[i] = sv[i] == NEG_INF ? 0.0 : exp(sv[i] - mn);
                psum += p[i];
            }
            psum += subgroupShuffleXor(psum, 1u);
            psum += subgroupShuffleXor(psum, 2u);
            L[k] = L[k] * al + psum;
            M[k] = mn;
            if ((t & 3u) == 0u) row_a[r] = al;
            Ps4[r * LDP4 + c0 / 8u] = uvec4(pack_h2(p[0], p[1]), pack_h2(p[2], p[3]), pack_h2(p[4], p[5]), pack_h2(p[6], p[7]));
            Ps4[r * LDP4 + c0 / 8u + 1u] = uvec4(pack_h2(p[8], p[9]), pack_h2(p[10], p[11]), pack_h2(p[12], p[13]), pack_h2(p[14], p[15]));
        }
        [[unroll]] for (uint i = 0u; i < VB; i++) {   // V^T (K is done with: read before the last barrier)
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
        ACC pv[4];                                     // this chunk's P V: the subgroup's tiles (oi, oj) = (q / nt, q % nt), q = sg + 4i
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            uint q = sg + 4u * i;   // (uniform in the subgroup)
            CM_ZERO(pv[i]);
            if (q < ntiles) {
                uint oi = q / nt, oj = q % nt;
                if (FAH != 0u) {   // (fa_acc: the chunk's sums in f16, then as f32)
                    ACC_H ph;
                    CM_ZERO_H(ph);
                    [[unroll]] for (uint kk = 0u; kk < BKV; kk += 16u) {
                        CM_MMA_V4(ph, Ps4, oi * 16u * LDP4 + kk / 8u, LDP4, KV4, oj * 16u * LDV4 + kk / 8u, LDV4, true);
                        CM_ROUND_H(ph);
                    }
                    pv[i] = CM_TO_F32(ph);
                } else {
                    [[unroll]] for (uint kk = 0u; kk < BKV; kk += 16u)
                        CM_MMA_V4(pv[i], Ps4, oi * 16u * LDP4 + kk / 8u, LDP4, KV4, oj * 16u * LDV4 + kk / 8u, LDV4, true);
                }
            }
        }
        barrier();                                     // V^T read: its words take the tiles as f32, [dim][query]
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            uint q = sg + 4u * i;
            if (q < ntiles) {
                uint oi = q / nt, oj = q % nt;   // (query, dim) at float (oj 16 + dim) BQ + oi 16 + query
                CM_STORE_V4(pv[i], KV4, (oj * 16u * BQ + oi * 16u) / 4u, BQ / 4u, true);
            }
        }
        barrier();
        [[unroll]] for (uint i = 0u; i < OMAX; i++) {
            uint e = t + i * WG;
            if (e < BQ * D) O[i] = O[i] * row_a[e % BQ] + uintBitsToFloat(KV4[e >> 2][e & 3u]);
        }
        barrier();                                     // the staged tiles and the scales read before the next chunk
    }
    [[unroll]] for (uint k = 0u; k < RMAX; k++) {
        uint r = (t >> 2) + k * (WG >> 2);
        if (k < RPT && (t & 3u) == 0u) row_l[r] = L[k];
    }
    barrier();
    // dst [Dv, H, n_q, B]: element e of the [dim][query] layout is (query q0 + e % BQ, dim e / BQ); a row without
    // any key (sum 0) writes 0
    [[unroll]] for (uint i = 0u; i < OMAX; i++) {
        uint e = t + i * WG, r = e % BQ, d = e / BQ;
        if (e < BQ * D && q0 + r < nq) {
            float l = row_l[r];
            stf(t_at(4u, d, h, q0 + r, b), t_type(4u), l > 0.0 ? O[i] / l : 0.0);
        }
    }
}
