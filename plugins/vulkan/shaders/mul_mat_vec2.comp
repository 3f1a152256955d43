#version 450
// Mat-vec (N <= 4) with wide loads: each subgroup computes NR neighbouring rows of one output
// column, lanes take consecutive "units" along K (a q4_0/q8_0 block, a sixteenth of a q6_K block,
// an eighth of a q4_K block, 8 f16/bf16 or 4 f32 elements) so a subgroup's loads cover consecutive
// bytes, the unit's activations are loaded once (vec4) for all NR rows, and the row sums meet in
// subgroupAdd: no shared memory, no barrier. Weights are read as 16-byte words where their blocks
// are 16-byte aligned (q4_K, plain types) and as 32-bit words realigned in registers where blocks
// are 2-byte aligned (q4_0, q8_0, q6_K). The host picks this kernel only for layouts it covers
// (vk_matmul.c: mv2_ok); mul_mat_vec.comp (option matvec=1) covers the rest.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint SPEC = 0u;   // src0 type | rows per subgroup << 8
layout(constant_id = 1) const uint SGW = 1u;    // subgroups per workgroup (128 / reported size)
const uint TY = SPEC & 255u;
const uint NR = SPEC >> 8;
layout(std430, binding = 0) readonly buffer S0q { uvec4 s0q[]; };
layout(std430, binding = 0) readonly buffer S0v { vec4 s0v[]; };
layout(std430, binding = 1) readonly buffer S1v { vec4 s1v[]; };

// 32-bit word at byte offset o (2-byte aligned) of src0, from the two aligned words around it
uint ldw(uint o) {
    uint a = s0w[o >> 2], b = s0w[(o >> 2) + 1u];
    return (o & 2u) != 0u ? (a >> 16) | (b << 16) : a;
}
vec4 nib_lo(uint q) { return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 15u); }
vec4 nib_hi(uint q) { return vec4((uvec4(q) >> uvec4(4u, 12u, 20u, 28u)) & 15u); }
vec4 sbytes(uint q) { return vec4(ivec4(uvec4(q) << uvec4(24u, 16u, 8u, 0u)) >> 24); }
uint byte_of(uvec4 v, uint k) { return (v[k >> 2] >> ((k & 3u) * 8u)) & 255u; }
float hsum(vec4 v) { return v.x + v.y + v.z + v.w; }

uint unit_elems() {
    if (TY == TY_Q4_0 || TY == TY_Q8_0 || TY == TY_Q4_K) return 32u;   // q4_K: 16 low + 16 high nibbles
    if (TY == TY_Q6_K) return 16u;
    if (TY == TY_F32) return 4u;
    return 8u;   // f16, bf16
}

// q4_0 block c of the row at byte ra: d * sum((q - 8) * y); ysum = sum(y) of the block
float dot_q4_0(uint ra, uint c, vec4 y[8], float ysum) {
    uint b = ra + c * 18u, wi = b >> 2;
    bool odd = (b & 2u) != 0u;
    uint u0 = s0w[wi], u1 = s0w[wi + 1u], u2 = s0w[wi + 2u], u3 = s0w[wi + 3u], u4 = s0w[wi + 4u];
    float d = unpackHalf2x16(odd ? u0 >> 16 : u0).x;
    uint q[4];
    q[0] = odd ? u1 : (u0 >> 16) | (u1 << 16);
    q[1] = odd ? u2 : (u1 >> 16) | (u2 << 16);
    q[2] = odd ? u3 : (u2 >> 16) | (u3 << 16);
    q[3] = odd ? u4 : (u3 >> 16) | (u4 << 16);
    float s = 0.0;
    for (uint k = 0u; k < 4u; k++) s += dot(nib_lo(q[k]), y[k]) + dot(nib_hi(q[k]), y[4u + k]);
    return d * (s - 8.0 * ysum);
}

float dot_q8_0(uint ra, uint c, vec4 y[8]) {
    uint b = ra + c * 34u, wi = b >> 2;
    bool odd = (b & 2u) != 0u;
    uint u[9];
    for (uint k = 0u; k < 9u; k++) u[k] = s0w[wi + k];
    float d = unpackHalf2x16(odd ? u[0] >> 16 : u[0]).x;
    float s = 0.0;
    for (uint k = 0u; k < 8u; k++) s += dot(sbytes(odd ? u[k + 1u] : (u[k] >> 16) | (u[k + 1u] << 16)), y[k]);
    return d * s;
}

// q4_K unit j (0..7) of block blk: 16 bytes of quants = 16 elements of sub-block 2p (low
// nibbles) and 16 of sub-block 2p + 1 (high), p = j / 2
float dot_q4_K(uint ra, uint blk, uint j, vec4 y[8], float ylo, float yhi) {
    uint bq = (ra >> 4) + blk * 9u;
    uvec4 h = s0q[bq], q = s0q[bq + 1u + j];   // header: d, dmin, 12 scale bytes; then 8 x 16 quant bytes
    uint s0 = 2u * (j >> 1), s1 = s0 + 1u;
    uint sc0, mn0, sc1, mn1;
    // the 12 scale bytes are header bytes 4..15
    if (s0 < 4u) {
        sc0 = byte_of(h, 4u + s0) & 63u; mn0 = byte_of(h, 8u + s0) & 63u;
        sc1 = byte_of(h, 4u + s1) & 63u; mn1 = byte_of(h, 8u + s1) & 63u;
    } else {
        uint a0 = byte_of(h, 8u + s0), a1 = byte_of(h, 8u + s1);
        sc0 = (a0 & 15u) | ((byte_of(h, s0) >> 6) << 4); mn0 = (a0 >> 4) | ((byte_of(h, 4u + s0) >> 6) << 4);
        sc1 = (a1 & 15u) | ((byte_of(h, s1) >> 6) << 4); mn1 = (a1 >> 4) | ((byte_of(h, 4u + s1) >> 6) << 4);
    }
    vec2 dm = unpackHalf2x16(h.x);
    float lo = 0.0, hi = 0.0;
    for (uint k = 0u; k < 4u; k++) { lo += dot(nib_lo(q[k]), y[k]); hi += dot(nib_hi(q[k]), y[4u + k]); }
    return dm.x * (float(sc0) * lo + float(sc1) * hi) - dm.y * (float(mn0) * ylo + float(mn1) * yhi);
}

// q6_K unit: half n (128 elements) of block blk, byte group g (0..7): 4 elements in each of the
// 4 quarter rows qq of that half
float dot_q6_K(uint ra, uint blk, uint n, uint g, vec4 y[8]) {
    uint b = ra + blk * 210u;
    uint qa = ldw(b + 64u * n + 4u * g), qb = ldw(b + 64u * n + 32u + 4u * g), qh = ldw(b + 128u + 32u * n + 4u * g);
    uint sw0 = ldw(b + 192u + 8u * n), sw1 = ldw(b + 196u + 8u * n);
    float d = unpackHalf2x16(uint(s0h[(b + 208u) >> 1])).x;
    uint sb = g >> 2;   // scale index within a quarter row: elements 4g..4g+3 lie in its 16-element half sb
    float s = 0.0;
    for (uint qq = 0u; qq < 4u; qq++) {
        uint ql = ((qq & 1u) != 0u ? qb : qa) >> (qq >= 2u ? 4u : 0u);
        uint v = (ql & 0x0F0F0F0Fu) | (((qh >> (2u * qq)) & 0x03030303u) << 4);
        uint si = sb + 2u * qq;   // scale byte 8n + si
        int sc = int(((si < 4u ? sw0 : sw1) >> (8u * (si & 3u))) << 24) >> 24;
        s += float(sc) * dot(vec4((uvec4(v) >> uvec4(0u, 8u, 16u, 24u)) & 255u) - 32.0, y[qq]);
    }
    return d * s;
}

float dot_plain(uint ra, uint u, vec4 y[8]) {
    if (TY == TY_F32) return dot(s0v[(ra >> 4) + u], y[0]);
    uvec4 w = s0q[(ra >> 4) + u];
    float s = 0.0;
    for (uint k = 0u; k < 4u; k++) {
        vec2 v = TY == TY_F16 ? unpackHalf2x16(w[k]) : vec2(uintBitsToFloat(w[k] << 16), uintBitsToFloat(w[k] & 0xFFFF0000u));
        s += dot(v, k < 2u ? (k == 0u ? y[0].xy : y[0].zw) : (k == 2u ? y[1].xy : y[1].zw));
    }
    return s;
}

void main() {
    uint M = t_ne(0u, 1u), N = t_ne(1u, 1u), B2 = t_ne(1u, 2u), K = t_ne(0u, 0u);
    uint MR = (M + NR - 1u) / NR;
    uint lane = gl_SubgroupInvocationID, ns = gl_SubgroupSize;
    uint nunits = K / unit_elems();
    for (uint sl = gl_SubgroupID; sl < SGW; sl += gl_NumSubgroups) {
        uint w = wg_linear() * SGW + sl;
        if (w >= ex_u(0u)) return;
        uint m0 = (w % MR) * NR; w /= MR;
        uint n = w % N; w /= N;
        uint i12 = w % B2, i13 = w / B2;
        uint i02 = i12 / (B2 / t_ne(0u, 2u)), i03 = i13 / (t_ne(1u, 3u) / t_ne(0u, 3u));
        uint ra0 = t_row(0u, m0, i02, i03), rs = t_nb(0u, 1u);
        uint yb = t_row(1u, n, i12, i13) >> 4;   // the host checked 16-byte alignment
        uint nr = min(NR, M - m0);
        float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
        for (uint u = lane; u < nunits; u += ns) {
            vec4 y[8];
            if (TY == TY_Q4_0 || TY == TY_Q8_0) {
                for (uint k = 0u; k < 8u; k++) y[k] = s1v[yb + 8u * u + k];
                float ys = TY == TY_Q4_0 ? hsum(y[0] + y[1] + y[2] + y[3] + y[4] + y[5] + y[6] + y[7]) : 0.0;
                for (uint r = 0u; r < NR; r++)
                    if (r < nr) acc[r] += TY == TY_Q4_0 ? dot_q4_0(ra0 + r * rs, u, y, ys) : dot_q8_0(ra0 + r * rs, u, y);
            } else if (TY == TY_Q4_K) {
                uint blk = u >> 3, j = u & 7u;
                uint y0 = yb + 64u * blk + 16u * (j >> 1) + 4u * (j & 1u);
                for (uint k = 0u; k < 4u; k++) { y[k] = s1v[y0 + k]; y[4u + k] = s1v[y0 + 8u + k]; }
                float ylo = hsum(y[0] + y[1] + y[2] + y[3]), yhi = hsum(y[4] + y[5] + y[6] + y[7]);
                for (uint r = 0u; r < NR; r++)
                    if (r < nr) acc[r] += dot_q4_K(ra0 + r * rs, blk, j, y, ylo, yhi);
            } else if (TY == TY_Q6_K) {
                uint blk = u >> 4, hn = (u >> 3) & 1u, g = u & 7u;
                uint y0 = yb + 64u * blk + 32u * hn + g;
                for (uint k = 0u; k < 4u; k++) y[k] = s1v[y0 + 8u * k];
                for (uint r = 0u; r < NR; r++)
                    if (r < nr) acc[r] += dot_q6_K(ra0 + r * rs, blk, hn, g, y);
            } else {
                if (TY == TY_F32) y[0] = s1v[yb + u];
                else { y[0] = s1v[yb + 2u * u]; y[1] = s1v[yb + 2u * u + 1u]; }
                for (uint r = 0u; r < NR; r++)
                    if (r < nr) acc[r] += dot_plain(ra0 + r * rs, u, y);
            }
        }
        for (uint r = 0u; r < NR; r++) {
            float v = subgroupAdd(acc[r]);
            if (r < nr && subgroupElect()) stf(t_at(4u, m0 + r, n, i12, i13), t_type(4u), v);
        }
    }
}
