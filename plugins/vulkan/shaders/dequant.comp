#version 450
// A mul_mat's weights as f16 rows in the plan's scratch (option gemm_dq): slot 0 is the quantized
// weight (any type deq() reads), binding 6 the copy, K halves per row, rows back to back in the
// order (row, ne2, ne3); mul_mat_cm4 runs after it on the copy as an f16 weight (gemm_b16: the same for
// f32 activations, the copy then its slot 1; with gemm_bg in rows padded to whole tiles). One invocation per
// 8 weights of a row (K a multiple of 8: whole 16-byte words), ex[0] of them. q4_0, q8_0 and q4_K read
// their block's (sub-block's) scale once and the 8 quants as 16-bit words; other types element by
// element (deq).
#include "common.glsl"
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint TY = 2u;
layout(std430, binding = 6) writeonly buffer Out { uvec4 o4[]; };

void main() {
    uint u = wg_linear() * 128u + gl_LocalInvocationID.x;
    if (u >= ex_u(0u)) return;
    // ex[1], ex[2] (gemm_bg's activation copy, else 0): the copy's rows per (ne2, ne3) and its units per
    // row, past the source's ne1 and K / 8: the padding is written as zeros
    uint K = t_ne(0u, 0u), ku = ex_u(2u) != 0u ? ex_u(2u) : K / 8u, rows = ex_u(1u) != 0u ? ex_u(1u) : t_ne(0u, 1u);
    uint k0 = (u % ku) * 8u, r = u / ku;
    uint i1 = r % rows; r /= rows;
    uint i2 = r % t_ne(0u, 2u), i3 = r / t_ne(0u, 2u);
    if (i1 >= t_ne(0u, 1u) || k0 >= K) { o4[u] = uvec4(0u); return; }
    uint rb = t_row(0u, i1, i2, i3);
    float v[8];
    if (TY == TY_Q4_0) {          // block of 32: f16 d, 16 bytes; weight j: byte j % 16, low nibble below 16
        uint b = rb + (k0 >> 5) * 18u, j = k0 & 31u;
        float dd = half_at(0u, b);
        uint q0 = b + 2u + (j & 15u);   // 8 consecutive bytes from an even offset: 4 16-bit words
        for (uint c = 0u; c < 4u; c++) {
            uint w = rd16(0u, q0 + 2u * c);
            uint lo = j < 16u ? (w & 15u) : ((w >> 4) & 15u), hi = j < 16u ? ((w >> 8) & 15u) : (w >> 12);
            v[2u * c] = dd * (float(lo) - 8.0);
            v[2u * c + 1u] = dd * (float(hi) - 8.0);
        }
    } else if (TY == TY_Q8_0) {   // block of 32: f16 d, 32 int8
        uint b = rb + (k0 >> 5) * 34u, j = k0 & 31u;
        float dd = half_at(0u, b);
        for (uint c = 0u; c < 4u; c++) {
            uint w = rd16(0u, b + 2u + j + 2u * c);
            v[2u * c] = dd * float(int(w << 24) >> 24);
            v[2u * c + 1u] = dd * float(int(w << 16) >> 24);
        }
    } else if (TY == TY_Q4_K) {   // 256 elements: d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
        uint b = rb + (k0 >> 8) * 144u, e = k0 & 255u, sub = e >> 5, l = e & 31u;
        uint sc, mn;
        if (sub < 4u) {
            sc = rd8(0u, b + 4u + sub) & 63u;
            mn = rd8(0u, b + 8u + sub) & 63u;
        } else {
            uint a = rd8(0u, b + 8u + sub), lo = rd8(0u, b + 4u + sub), hi = rd8(0u, b + sub);
            sc = (a & 15u) | ((hi >> 6) << 4);
            mn = (a >> 4) | ((lo >> 6) << 4);
        }
        float dd = half_at(0u, b) * float(sc), dm = half_at(0u, b + 2u) * float(mn);
        uint q0 = b + 16u + 32u * (sub >> 1) + l, ns = (sub & 1u) * 4u;   // 8 bytes from an even offset
        for (uint c = 0u; c < 4u; c++) {
            uint w = rd16(0u, q0 + 2u * c) >> ns;
            v[2u * c] = dd * float(w & 15u) - dm;
            v[2u * c + 1u] = dd * float((w >> 8) & 15u) - dm;
        }
    } else {
        for (uint c = 0u; c < 8u; c++) v[c] = deq(0u, rb, k0 + c, TY, t_nb(0u, 0u));
    }
    o4[u] = uvec4(packHalf2x16(vec2(v[0], v[1])), packHalf2x16(vec2(v[2], v[3])),
                  packHalf2x16(vec2(v[4], v[5])), packHalf2x16(vec2(v[6], v[7])));
}
