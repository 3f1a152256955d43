#version 450
// A q4_0 or q4_K weight's repacked copy for mul_mat_vec_rp.comp (option matvec_rp; vk_repack.c's header has
// the layout): slot 0 the weight (rows ne1 of ne0 weights, 2-byte aligned blocks), binding 4 the copy,
// specialization constant 0 its type. One invocation per (group of 8 rows, unit of 32 weights): ex[0] of
// them, ex[1] = Mp (rows padded to 8, zeros). It writes the 8 rows' 16 quant bytes of the unit where they go
// in each row; q4_0: the block's 8 scales as one 16-byte word; q4_K: the first unit of a super-block also its
// 160-byte scale group (the 8 rows' d and dmin, then per sub-block pair the 6-bit scales and mins as bytes).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint TY = 2u;
layout(std430, binding = 4) writeonly buffer Out { uvec4 o4[]; };

// q4_K sub-block j's 6-bit scale and min from the block's 12 scale bytes at byte offset sb (ggml's packing)
uint kbyte(uint sb, uint i) { return rd8(0u, sb + i); }
void scale_min(uint sb, uint j, out uint sc, out uint mn) {
    if (j < 4u) {
        sc = kbyte(sb, j) & 63u;
        mn = kbyte(sb, j + 4u) & 63u;
    } else {
        sc = (kbyte(sb, j + 4u) & 15u) | ((kbyte(sb, j - 4u) >> 6) << 4);
        mn = (kbyte(sb, j + 4u) >> 4) | ((kbyte(sb, j) >> 6) << 4);
    }
}

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
            uint b = TY == TY_Q4_K ? t_row(0u, r, 0u, 0u) + 144u * (u >> 3) + 16u + 16u * (u & 7u) - 2u
                                   : t_row(0u, r, 0u, 0u) + 18u * u;
            if (TY != TY_Q4_K) d = rd16(0u, b);
            q = uvec4(rd16(0u, b + 2u) | rd16(0u, b + 4u) << 16, rd16(0u, b + 6u) | rd16(0u, b + 8u) << 16,
                      rd16(0u, b + 10u) | rd16(0u, b + 12u) << 16, rd16(0u, b + 14u) | rd16(0u, b + 16u) << 16);
        }
        o4[r * (K >> 5) + u] = q;   // row r's quants start at r * K/2 bytes: K/32 words of 16 bytes
        sc[s >> 1] |= d << (16u * (s & 1u));
    }
    if (TY != TY_Q4_K) {
        o4[Mp * (K >> 5) + rg * nb + u] = uvec4(sc[0], sc[1], sc[2], sc[3]);
        return;
    }
    if ((u & 7u) != 0u) return;
    uint g0 = Mp * (K >> 5) + (rg * (K >> 8) + (u >> 3)) * 10u;   // the scale group (16-byte words)
    uint hd[8], sm[32];
    for (uint s = 0u; s < 8u; s++) {
        uint r = rg * 8u + s;
        hd[s] = 0u;
        for (uint g = 0u; g < 4u; g++) sm[g * 8u + s] = 0u;
        if (r >= M) continue;
        uint b = t_row(0u, r, 0u, 0u) + 144u * (u >> 3);
        hd[s] = rd16(0u, b) | rd16(0u, b + 2u) << 16;   // d, dmin
        for (uint g = 0u; g < 4u; g++) {
            uint s0, m0, s1, m1;
            scale_min(b + 4u, 2u * g, s0, m0);
            scale_min(b + 4u, 2u * g + 1u, s1, m1);
            sm[g * 8u + s] = s0 | s1 << 8 | m0 << 16 | m1 << 24;
        }
    }
    o4[g0] = uvec4(hd[0], hd[1], hd[2], hd[3]);
    o4[g0 + 1u] = uvec4(hd[4], hd[5], hd[6], hd[7]);
    for (uint g = 0u; g < 4u; g++) {
        o4[g0 + 2u + 2u * g] = uvec4(sm[g * 8u], sm[g * 8u + 1u], sm[g * 8u + 2u], sm[g * 8u + 3u]);
        o4[g0 + 3u + 2u * g] = uvec4(sm[g * 8u + 4u], sm[g * 8u + 5u], sm[g * 8u + 6u], sm[g * 8u + 7u]);
    }
}
