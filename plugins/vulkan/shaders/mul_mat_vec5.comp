#version 450
// Decode mat-vec for q4_0 weights, one f32 activation column (option matvec=8): the activations stay in
// registers and the weights stream, the structure of the CUDA plugin's mat-vec (mmv_rp.cuh) on ggml's
// own blocks. No shared-memory staging of the activations, no barrier before the dot products.
// A workgroup of 128 invocations takes R = 8 * RG rows: RG row groups of 8 rows, TK = 128 / RG
// invocations along K in each. A unit is a pair of q4_0 blocks (64 weights, 36 bytes: nine aligned
// 32-bit words where rows start on 4 bytes and hold whole pairs; the host checks). Invocation k of a
// row group takes units k, k + TK, ...: it loads the unit's 64 activations once (16 vec4), then the
// unit's nine words of all 8 rows (72 loads in flight before any is used), and adds the 8 float dot
// products to its 8 sums. The host picks RG so that TK is about the units per row (K = 2048: 32 units,
// RG 4; 4096: RG 2; 11008: RG 1, two rounds). The sums meet by subgroupAdd, then across the row
// group's subgroups in shared memory (one barrier); the host checks that the subgroup size divides TK.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint SPEC = 0u;   // src0 type | rows per workgroup << 8 (8, 16 or 32)
const uint RG = (SPEC >> 8) / 8u;               // row groups per workgroup
const uint TK = 128u / RG;                      // invocations along K per row group
layout(std430, binding = 1) readonly buffer S1v { vec4 s1v[]; };
shared float red[128][8];   // per subgroup (up to 128 of one invocation): its 8 rows' sums

vec4 nib_lo(uint q) { return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 15u); }
vec4 nib_hi(uint q) { return vec4((uvec4(q) >> uvec4(4u, 12u, 20u, 28u)) & 15u); }

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;   // uniform per workgroup: before the barrier
    uint M = t_ne(0u, 1u), K = t_ne(0u, 0u), nu = K >> 6;
    uint t = gl_LocalInvocationIndex, g = t / TK, k = t % TK;
    uint m0 = (w * RG + g) * 8u;
    uint w0 = t_off(0u) >> 2, rs = t_nb(0u, 1u) >> 2;   // words: weights' start, row stride
    uint y0 = t_off(1u) >> 4;                           // vec4 index of the activations
    uint row[8];
    [[unroll]] for (uint r = 0u; r < 8u; r++) row[r] = w0 + min(m0 + r, M - 1u) * rs;   // (past M: read row M-1, not written)
    float acc[8];
    [[unroll]] for (uint r = 0u; r < 8u; r++) acc[r] = 0.0;
    for (uint u = k; u < nu; u += TK) {
        vec4 x[16];
        [[unroll]] for (uint c = 0u; c < 16u; c++) x[c] = s1v[y0 + 16u * u + c];
        uint q[8][9];
        [[unroll]] for (uint r = 0u; r < 8u; r++)
            [[unroll]] for (uint j = 0u; j < 9u; j++) q[r][j] = s0w[row[r] + 9u * u + j];
        // block 0 of the pair: bytes 0-17 (d, then 16 quant bytes: low nibbles elements 0-15, high 16-31),
        // block 1: bytes 18-35; the sums of each block's activations, for the -8 offset
        vec4 s0 = x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7];
        vec4 s1 = x[8] + x[9] + x[10] + x[11] + x[12] + x[13] + x[14] + x[15];
        float xs0 = s0.x + s0.y + s0.z + s0.w, xs1 = s1.x + s1.y + s1.z + s1.w;
        [[unroll]] for (uint r = 0u; r < 8u; r++) {
            float d0 = unpackHalf2x16(q[r][0]).x, d1 = unpackHalf2x16(q[r][4] >> 16).x;
            float a0 = 0.0, a1 = 0.0;
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint qa = (q[r][i] >> 16) | (q[r][i + 1u] << 16);   // block 0's quant bytes 4i..4i+3
                uint qb = q[r][5u + i];                               // block 1's
                a0 += dot(nib_lo(qa), x[i]) + dot(nib_hi(qa), x[4u + i]);
                a1 += dot(nib_lo(qb), x[8u + i]) + dot(nib_hi(qb), x[12u + i]);
            }
            acc[r] += d0 * (a0 - 8.0 * xs0) + d1 * (a1 - 8.0 * xs1);
        }
    }
    [[unroll]] for (uint r = 0u; r < 8u; r++) {
        float s = subgroupAdd(acc[r]);
        if (subgroupElect()) red[gl_SubgroupID][r] = s;
    }
    barrier();
    if (t < 8u * RG) {   // row 8 * gg + r of the workgroup: the sums of its row group's subgroups
        uint gg = t / 8u, r = t % 8u, nsg = TK / gl_SubgroupSize;
        float v = 0.0;
        for (uint s = 0u; s < nsg; s++) v += red[gg * nsg + s][r];
        uint m = (w * RG + gg) * 8u + r;
        if (m < M) stf(t_at(4u, m, 0u, 0u, 0u), t_type(4u), v);
    }
}
