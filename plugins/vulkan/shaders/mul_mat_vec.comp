#version 450
// dst[m, n] = sum_k src0[k, m] * src1[k, n] for small N: one subgroup per output (m, n, batch),
// lanes stride over K and reduce with subgroupAdd. No shared memory and no barrier: llvmpipe
// (lavapipe) runs barrier-free workgroups without coroutines, which is ~10x cheaper there.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint TY = 0u;   // src0 type (lets the compiler drop other paths)
layout(constant_id = 1) const uint RPW = 1u;  // rows per workgroup

// ---- fast path: rows contiguous, K % 32 == 0, src1 f32 with contiguous rows ----
// Each thread takes whole 32-element chunks (a q4_0/q8_0 block, a K-quant sub-block, or 32
// plain elements): scales are read once per chunk and quants two bytes at a time.
uint yw0;   // word index of the current y chunk
float Y(uint j) { return uintBitsToFloat(s1w[yw0 + j]); }
uint b8(uint o) { return (uint(s0h[o >> 1]) >> ((o & 1u) * 8u)) & 0xFFu; }
float h16(uint o) { return unpackHalf2x16(uint(s0h[o >> 1])).x; }

float dot_chunk(uint ra, uint c) {
    float acc = 0.0;
    if (TY == TY_F32) {
        uint w0 = (ra >> 2) + c * 32u;
        for (uint j = 0u; j < 32u; j++) acc += uintBitsToFloat(s0w[w0 + j]) * Y(j);
    } else if (TY == TY_F16) {
        uint h0 = (ra >> 1) + c * 32u;
        for (uint j = 0u; j < 32u; j++) acc += unpackHalf2x16(uint(s0h[h0 + j])).x * Y(j);
    } else if (TY == TY_BF16) {
        uint h0 = (ra >> 1) + c * 32u;
        for (uint j = 0u; j < 32u; j++) acc += uintBitsToFloat(uint(s0h[h0 + j]) << 16) * Y(j);
    } else if (TY == TY_Q4_0) {
        uint b = ra + c * 18u, q = (b + 2u) >> 1;
        for (uint j = 0u; j < 8u; j++) {
            uint w = uint(s0h[q + j]);
            acc += (float(w & 15u) - 8.0) * Y(2u * j) + (float((w >> 8) & 15u) - 8.0) * Y(2u * j + 1u)
                 + (float((w >> 4) & 15u) - 8.0) * Y(2u * j + 16u) + (float(w >> 12) - 8.0) * Y(2u * j + 17u);
        }
        acc *= h16(b);
    } else if (TY == TY_Q4_1) {   // d sum(q y) + m sum(y)
        uint b = ra + c * 20u, q = (b + 4u) >> 1;
        float ys = 0.0;
        for (uint j = 0u; j < 8u; j++) {
            uint w = uint(s0h[q + j]);
            float y0 = Y(2u * j), y1 = Y(2u * j + 1u), y2 = Y(2u * j + 16u), y3 = Y(2u * j + 17u);
            acc += float(w & 15u) * y0 + float((w >> 8) & 15u) * y1 + float((w >> 4) & 15u) * y2 + float(w >> 12) * y3;
            ys += y0 + y1 + y2 + y3;
        }
        acc = acc * h16(b) + ys * h16(b + 2u);
    } else if (TY == TY_Q8_0) {
        uint b = ra + c * 34u, q = (b + 2u) >> 1;
        for (uint j = 0u; j < 16u; j++) {
            uint w = uint(s0h[q + j]);
            acc += float(int(w << 24) >> 24) * Y(2u * j) + float(int(w << 16) >> 24) * Y(2u * j + 1u);
        }
        acc *= h16(b);
    } else if (TY == TY_Q4_K) {
        uint b = ra + (c >> 3) * 144u, sub = c & 7u;
        uint sc, mn;
        if (sub < 4u) {
            sc = b8(b + 4u + sub) & 63u;
            mn = b8(b + 8u + sub) & 63u;
        } else {
            uint a = b8(b + 8u + sub), lo = b8(b + 4u + sub), hi = b8(b + sub);
            sc = (a & 15u) | ((hi >> 6) << 4);
            mn = (a >> 4) | ((lo >> 6) << 4);
        }
        uint q = (b + 16u + 32u * (sub >> 1)) >> 1, sh = (sub & 1u) * 4u;
        float ys = 0.0;
        for (uint j = 0u; j < 16u; j++) {
            uint w = uint(s0h[q + j]);
            float y0 = Y(2u * j), y1 = Y(2u * j + 1u);
            acc += float((w >> sh) & 15u) * y0 + float((w >> (8u + sh)) & 15u) * y1;
            ys += y0 + y1;
        }
        acc = h16(b) * float(sc) * acc - h16(b + 2u) * float(mn) * ys;
    } else if (TY == TY_Q6_K) {
        uint b = ra + (c >> 3) * 210u, g = c & 7u, n = g >> 2, qq = g & 3u;
        uint ql = (b + 64u * n + (qq & 1u) * 32u) >> 1, qh = (b + 128u + 32u * n) >> 1;
        uint shl = qq >= 2u ? 4u : 0u, shh = 2u * qq;
        float a0 = 0.0, a1 = 0.0;
        for (uint j = 0u; j < 16u; j++) {
            uint wl = uint(s0h[ql + j]), wh = uint(s0h[qh + j]);
            int q0 = int(((wl >> shl) & 15u) | (((wh >> shh) & 3u) << 4)) - 32;
            int q1 = int(((wl >> (8u + shl)) & 15u) | (((wh >> (8u + shh)) & 3u) << 4)) - 32;
            float v = float(q0) * Y(2u * j) + float(q1) * Y(2u * j + 1u);
            if (j < 8u) a0 += v; else a1 += v;
        }
        int s0 = int(b8(b + 192u + 8u * n + 2u * qq)), s1 = int(b8(b + 193u + 8u * n + 2u * qq));
        s0 = s0 >= 128 ? s0 - 256 : s0;
        s1 = s1 >= 128 ? s1 - 256 : s1;
        acc = h16(b + 208u) * (float(s0) * a0 + float(s1) * a1);
    }
    return acc;
}

// Quantized types with four lanes per 32-element chunk (a q4_0/q8_0 block, a K-quant sub-block):
// neighbouring lanes read neighbouring bytes and y words and neighbouring chunks go to
// neighbouring lane quads, so a subgroup's loads are contiguous (coalesced on GPUs) instead of
// one chunk per lane. Each lane takes 8 of the chunk's 32 elements.
float dot_quad(uint ra, uint rb, uint K, uint lane, uint ns) {
    uint qi = lane & 3u;
    float acc = 0.0;
    for (uint c = lane >> 2; c < K / 32u; c += ns >> 2) {
        uint y = (rb >> 2) + c * 32u;
        if (TY == TY_Q4_0) {
            uint b = ra + c * 18u, q = (b + 2u + 4u * qi) >> 1;
            uint w0 = uint(s0h[q]), w1 = uint(s0h[q + 1u]);
            uint yl = y + 4u * qi, yh = yl + 16u;
            float lo = (float(w0 & 15u) - 8.0) * uintBitsToFloat(s1w[yl])
                     + (float((w0 >> 8) & 15u) - 8.0) * uintBitsToFloat(s1w[yl + 1u])
                     + (float(w1 & 15u) - 8.0) * uintBitsToFloat(s1w[yl + 2u])
                     + (float((w1 >> 8) & 15u) - 8.0) * uintBitsToFloat(s1w[yl + 3u]);
            float hi = (float((w0 >> 4) & 15u) - 8.0) * uintBitsToFloat(s1w[yh])
                     + (float(w0 >> 12) - 8.0) * uintBitsToFloat(s1w[yh + 1u])
                     + (float((w1 >> 4) & 15u) - 8.0) * uintBitsToFloat(s1w[yh + 2u])
                     + (float(w1 >> 12) - 8.0) * uintBitsToFloat(s1w[yh + 3u]);
            acc += h16(b) * (lo + hi);
        } else if (TY == TY_Q4_K) {
            uint b = ra + (c >> 3) * 144u, sub = c & 7u;
            uint sc, mn;
            if (sub < 4u) {
                sc = b8(b + 4u + sub) & 63u;
                mn = b8(b + 8u + sub) & 63u;
            } else {
                uint a = b8(b + 8u + sub), lo = b8(b + 4u + sub), hi = b8(b + sub);
                sc = (a & 15u) | ((hi >> 6) << 4);
                mn = (a >> 4) | ((lo >> 6) << 4);
            }
            uint q = (b + 16u + 32u * (sub >> 1) + 8u * qi) >> 1, sh = (sub & 1u) * 4u;
            uint y0 = y + 8u * qi;
            float a = 0.0, ys = 0.0;
            for (uint j = 0u; j < 4u; j++) {
                uint w = uint(s0h[q + j]);
                float ya = uintBitsToFloat(s1w[y0 + 2u * j]), yb = uintBitsToFloat(s1w[y0 + 2u * j + 1u]);
                a += float((w >> sh) & 15u) * ya + float((w >> (8u + sh)) & 15u) * yb;
                ys += ya + yb;
            }
            acc += h16(b) * float(sc) * a - h16(b + 2u) * float(mn) * ys;
        } else if (TY == TY_Q6_K) {
            uint b = ra + (c >> 3) * 210u, g = c & 7u, n = g >> 2, qq = g & 3u;
            uint ql = (b + 64u * n + (qq & 1u) * 32u + 8u * qi) >> 1, qh = (b + 128u + 32u * n + 8u * qi) >> 1;
            uint shl = qq >= 2u ? 4u : 0u, shh = 2u * qq;
            uint y0 = y + 8u * qi;
            float a = 0.0;
            for (uint j = 0u; j < 4u; j++) {
                uint wl = uint(s0h[ql + j]), wh = uint(s0h[qh + j]);
                int q0 = int(((wl >> shl) & 15u) | (((wh >> shh) & 3u) << 4)) - 32;
                int q1 = int(((wl >> (8u + shl)) & 15u) | (((wh >> (8u + shh)) & 3u) << 4)) - 32;
                a += float(q0) * uintBitsToFloat(s1w[y0 + 2u * j]) + float(q1) * uintBitsToFloat(s1w[y0 + 2u * j + 1u]);
            }
            int s8 = int(b8(b + 192u + 8u * n + (qi >> 1) + 2u * qq));
            s8 = s8 >= 128 ? s8 - 256 : s8;
            acc += h16(b + 208u) * float(s8) * a;
        } else {   // TY_Q8_0
            uint b = ra + c * 34u, q = (b + 2u + 8u * qi) >> 1;
            uint y0 = y + 8u * qi;
            float a = 0.0;
            for (uint j = 0u; j < 4u; j++) {
                uint w = uint(s0h[q + j]);
                a += float(int(w << 24) >> 24) * uintBitsToFloat(s1w[y0 + 2u * j])
                   + float(int(w << 16) >> 24) * uintBitsToFloat(s1w[y0 + 2u * j + 1u]);
            }
            acc += h16(b) * a;
        }
    }
    return acc;
}

void main() {
    // rows of the workgroup: RPW = 64 / (reported subgroup size); looping over gl_SubgroupID keeps
    // it correct whatever subgroup size the driver actually picks
    uint M = t_ne(0u, 1u), N = t_ne(1u, 1u), B2 = t_ne(1u, 2u);
    uint K = t_ne(0u, 0u);
    uint nb0 = t_nb(0u, 0u), ynb0 = t_nb(1u, 0u), yty = t_type(1u);
    uint lane = gl_SubgroupInvocationID, ns = gl_SubgroupSize;
    bool fast = ex_u(1u) != 0u;
    for (uint r = gl_SubgroupID; r < RPW; r += gl_NumSubgroups) {
        uint w = wg_linear() * RPW + r;
        if (w >= ex_u(0u)) return;
        uint m = w % M; w /= M;
        uint n = w % N; w /= N;
        uint i12 = w % B2, i13 = w / B2;
        uint i02 = i12 / (B2 / t_ne(0u, 2u)), i03 = i13 / (t_ne(1u, 3u) / t_ne(0u, 3u));
        uint ra = t_row(0u, m, i02, i03), rb = t_row(1u, n, i12, i13);
        float acc = 0.0;
        if (fast && (TY == TY_Q4_0 || TY == TY_Q8_0 || TY == TY_Q4_K || TY == TY_Q6_K) && (ns & 3u) == 0u) {
            acc = dot_quad(ra, rb, K, lane, ns);
        } else if (fast) {   // host checked the fast-path layout
            for (uint c = lane; c < K / 32u; c += ns) {
                yw0 = (rb >> 2) + c * 32u;
                acc += dot_chunk(ra, c);
            }
        } else {
            for (uint k = lane; k < K; k += ns)
                acc += deq(0u, ra, k, TY, nb0) * ldf(1u, rb + k * ynb0, yty);
        }
        acc = subgroupAdd(acc);
        if (subgroupElect()) stf(t_at(4u, m, n, i12, i13), t_type(4u), acc);
    }
}
