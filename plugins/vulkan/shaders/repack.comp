#version 450
// A q4_0 weight's repacked copy for mul_mat_vec_rp.comp (option matvec_rp; vk_repack.c's header has the
// layout): slot 0 the weight (rows ne1 of ne0 weights, 2-byte aligned blocks), binding 4 the copy.
// One invocation per (group of 8 rows, block): ex[0] of them, ex[1] = Mp (rows padded to 8, zeros).
// It writes the 8 rows' 16 quant bytes of the block where they go in each row and the 8 scales as one
// 16-byte word.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 4) writeonly buffer Out { uvec4 o4[]; };

void main() {
    uint i = wg_linear() * 64u + gl_LocalInvocationID.x;
    if (i >= ex_u(0u)) return;
    uint K = t_ne(0u, 0u), M = t_ne(0u, 1u), nb = K >> 5, Mp = ex_u(1u);
    uint rg = i / nb, u = i % nb;
    uint sc[4] = uint[4](0u, 0u, 0u, 0u);
    for (uint s = 0u; s < 8u; s++) {
        uint r = rg * 8u + s;
        uvec4 q = uvec4(0u);
        uint d = 0u;
        if (r < M) {
            uint b = t_row(0u, r, 0u, 0u) + 18u * u;
            d = rd16(0u, b);
            q = uvec4(rd16(0u, b + 2u) | rd16(0u, b + 4u) << 16, rd16(0u, b + 6u) | rd16(0u, b + 8u) << 16,
                      rd16(0u, b + 10u) | rd16(0u, b + 12u) << 16, rd16(0u, b + 14u) | rd16(0u, b + 16u) << 16);
        }
        o4[r * (K >> 5) + u] = q;   // row r's quants start at r * K/2 bytes: K/32 words of 16 bytes
        sc[s >> 1] |= d << (16u * (s & 1u));
    }
    o4[Mp * (K >> 5) + rg * nb + u] = uvec4(sc[0], sc[1], sc[2], sc[3]);
}
