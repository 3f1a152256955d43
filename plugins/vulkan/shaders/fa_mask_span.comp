#version 450
// The open chunks of a prefill attention mask (option fa_span; vk_attn.c): for each mask plane p (ne2 x ne3) and block
// qb of 32 query rows, the first and one past the last 64-key chunk with a key some row of the block does not mask,
// written as a uvec2 into binding 6 at (p * blocks + qb) (0, 0 where every key is masked). flash_attn_cm3 then walks
// only those chunks: the chunks outside hold -inf terms alone, whose weights are 0, so skipping them leaves every sum
// as it was. Slot 3 is the mask (f32 or f16); ex[0] = workgroups (planes x blocks), ex[1] = blocks, ex[2] = the mask
// as f16 16-byte words, ex[3] / ex[4] the query rows and keys the attention takes (Q's and K's ne1). A workgroup per
// (plane, block); invocation t takes (row, chunk) pairs t, t + 256, ... and folds its open chunks into two shared
// counters with atomicMin / atomicMax (the same result in any order).
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(std430, binding = 6) writeonly buffer Sp { uvec2 span[]; };
layout(std430, binding = 3) readonly buffer S3v { uvec4 s3v[]; };
shared uint lo_s, hi_s;

void main() {
    uint w = wg_linear(), t = gl_LocalInvocationID.x;
    if (w >= ex_u(0u)) return;   // uniform per workgroup: before the barriers
    uint nqb = ex_u(1u), qb = w % nqb, p = w / nqb;
    uint nq = ex_u(3u), nkv = ex_u(4u), nch = (nkv + 63u) / 64u, ne2 = t_ne(3u, 2u);
    uint i2 = p % ne2, i3 = p / ne2, q0 = qb * 32u;
    if (t == 0u) { lo_s = 0xFFFFFFFFu; hi_s = 0u; }
    barrier();
    uint lo = 0xFFFFFFFFu, hi = 0u;
    for (uint e = t; e < 32u * nch; e += 256u) {
        uint r = e % 32u, c = e / 32u, iq = q0 + r;
        if (iq >= nq) continue;
        uint mb = t_row(3u, iq, i2, i3), j0 = c * 64u;
        bool open = false;
        if (ex_u(2u) != 0u && j0 + 64u <= nkv) {   // f16 rows on 16 bytes: 8 words of 8 keys
            [[unroll]] for (uint k = 0u; k < 8u; k++) {
                uvec4 x = s3v[(mb >> 4) + j0 / 8u + k];
                [[unroll]] for (uint h = 0u; h < 4u; h++)
                    open = open || (x[h] & 0xFFFFu) != 0xFC00u || (x[h] >> 16) != 0xFC00u;
            }
        } else {
            for (uint j = j0; j < min(j0 + 64u, nkv); j++) {
                float v = ldf(3u, mb + j * t_nb(3u, 0u), t_type(3u));
                open = open || !(isinf(v) && v < 0.0);
            }
        }
        if (open) { lo = min(lo, c); hi = max(hi, c + 1u); }
    }
    if (hi > 0u) { atomicMin(lo_s, lo); atomicMax(hi_s, hi); }
    barrier();
    if (t == 0u) span[w] = hi_s > 0u ? uvec2(lo_s, hi_s) : uvec2(0u, 0u);
}
