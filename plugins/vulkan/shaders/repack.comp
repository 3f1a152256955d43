#version 450
// A q4_0, q4_1, q4_K or q6_K weight's repacked copy for mul_mat_vec_rp.comp (option matvec_rp; vk_repack.c's header has
// the layout): slot 0 the weight (rows ne1 of ne0 weights, 2-byte aligned blocks), binding 4 the copy,
// specialization constant 0 its type. One invocation per (group of 8 rows, unit of 32 weights): ex[0] of
// them, ex[1] = Mp (rows padded to 8, zeros). It writes the 8 rows' 16 quant bytes of the unit where they go
// in each row; q4_0: the block's 8 scales as one 16-byte word; q4_1: its 8 d, then its 8 m, as two; q4_K: the first unit of a super-block also its
// 160-byte scale group (the 8 rows' d and dmin, then per sub-block pair the 6-bit scales and mins as bytes);
// q6_K: the unit's low 4 bits as q4_0's nibbles, its high 2 bits (8 bytes) into the high-bit plane, and from the first
// unit of a super-block its 144-byte scale group (the 8 rows' f16 d, then per unit the rows' two int8 scales).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint TY = 2u;
layout(std430, binding = 4) writeonly buffer Out { uvec4 o4[]; };
layout(std430, binding = 4) writeonly buffer OutW { uint o1[]; };

// q6_K: unit u of the row at byte b (the super-block): its 32 6-bit quants (ggml's ql / qh planes) as 16 bytes of
// low nibbles (byte e: quant e, quant e + 16 in the high nibble) and 8 bytes of high bits (byte 4h + k, bits 2i: quant
// 16h + 4i + k), the CUDA plugin's layout
void q6_unit(uint b, uint u, out uvec4 lo, out uvec2 hi) {
    uint q[32];
    for (uint e = 0u; e < 32u; e++) q[e] = q6k_quant(0u, b, 32u * (u & 7u) + e);
    uint w[4] = uint[4](0u, 0u, 0u, 0u), hw[2] = uint[2](0u, 0u);
    for (uint e = 0u; e < 16u; e++) w[e >> 2] |= ((q[e] & 15u) | (q[e + 16u] & 15u) << 4) << (8u * (e & 3u));
    for (uint hh = 0u; hh < 2u; hh++)
        for (uint k = 0u; k < 4u; k++)
            for (uint i = 0u; i < 4u; i++) hw[hh] |= (q[16u * hh + 4u * i + k] >> 4) << (8u * k + 2u * i);
    lo = uvec4(w[0], w[1], w[2], w[3]);
    hi = uvec2(hw[0], hw[1]);
}

void main() {
    uint i = wg_linear() * 64u + gl_LocalInvocationID.x;
    if (i >= ex_u(0u)) return;
    uint K = t_ne(0u, 0u), M = t_ne(0u, 1u), nb = K >> 5, Mp = ex_u(1u);
    uint rg = i / nb, u = i % nb;
    uint sc[4] = uint[4](0u, 0u, 0u, 0u), mc[4] = uint[4](0u, 0u, 0u, 0u);
    for (uint s = 0u; s < 8u; s++) {
        uint r = rg * 8u + s;
        uvec4 q = uvec4(0u);
        uint d = 0u, m = 0u;
        if (TY == TY_Q6_K) {
            uvec2 hb = uvec2(0u);
            if (r < M) q6_unit(t_row(0u, r, 0u, 0u) + 210u * (u >> 3), u, q, hb);
            o4[r * (K >> 5) + u] = q;
            uint hw = Mp * (K >> 3) + r * (K >> 4) + 2u * u;   // the high-bit plane after the quants: K/4 bytes a row
            o1[hw] = hb.x;
            o1[hw + 1u] = hb.y;
            continue;
        }
        if (r < M) {
            uint b = TY == TY_Q4_K ? t_row(0u, r, 0u, 0u) + 144u * (u >> 3) + 16u + 16u * (u & 7u) - 2u
                   : TY == TY_Q4_1 ? t_row(0u, r, 0u, 0u) + 20u * u + 2u   // (then b + 2.. are the quants, as q4_0's)
                                   : t_row(0u, r, 0u, 0u) + 18u * u;
            if (TY == TY_Q4_1) { d = rd16(0u, b - 2u); m = rd16(0u, b); }
            else if (TY != TY_Q4_K) d = rd16(0u, b);
            q = uvec4(rd16(0u, b + 2u) | rd16(0u, b + 4u) << 16, rd16(0u, b + 6u) | rd16(0u, b + 8u) << 16,
                      rd16(0u, b + 10u) | rd16(0u, b + 12u) << 16, rd16(0u, b + 14u) | rd16(0u, b + 16u) << 16);
        }
        o4[r * (K >> 5) + u] = q;   // row r's quants start at r * K/2 bytes: K/32 words of 16 bytes
        sc[s >> 1] |= d << (16u * (s & 1u));
        mc[s >> 1] |= m << (16u * (s & 1u));
    }
    if (TY == TY_Q6_K) {
        if ((u & 7u) != 0u) return;
        uint g6 = Mp * (K >> 5) + Mp * (K >> 6) + (rg * (K >> 8) + (u >> 3)) * 9u;   // after both planes
        uint dw[4] = uint[4](0u, 0u, 0u, 0u), sw[32];
        for (uint x = 0u; x < 32u; x++) sw[x] = 0u;
        for (uint s = 0u; s < 8u; s++) {
            uint r = rg * 8u + s;
            if (r >= M) continue;
            uint b = t_row(0u, r, 0u, 0u) + 210u * (u >> 3);
            dw[s >> 1] |= rd16(0u, b + 208u) << (16u * (s & 1u));
            for (uint j = 0u; j < 8u; j++)   // unit j's two scales (bytes 192 + 2j, 193 + 2j) in slot s
                sw[4u * j + (s >> 1)] |= rd16(0u, b + 192u + 2u * j) << (16u * (s & 1u));
        }
        o4[g6] = uvec4(dw[0], dw[1], dw[2], dw[3]);
        for (uint j = 0u; j < 8u; j++) o4[g6 + 1u + j] = uvec4(sw[4u * j], sw[4u * j + 1u], sw[4u * j + 2u], sw[4u * j + 3u]);
        return;
    }
    if (TY == TY_Q4_1) {   // the 8 rows' d, then their m
        o4[Mp * (K >> 5) + (rg * nb + u) * 2u] = uvec4(sc[0], sc[1], sc[2], sc[3]);
        o4[Mp * (K >> 5) + (rg * nb + u) * 2u + 1u] = uvec4(mc[0], mc[1], mc[2], mc[3]);
        return;
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
            q4k_scale_min(0u, b, 2u * g, s0, m0);
            q4k_scale_min(0u, b, 2u * g + 1u, s1, m1);
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
