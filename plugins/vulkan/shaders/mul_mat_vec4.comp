#version 450
// Mat-vec (N <= 4) for q4_0 weights with coalesced weight loads (option matvec=7). mul_mat_vec3's
// invocations each load their own 144-byte unit (8 blocks), so one 16-byte load instruction of a
// subgroup touches 32 units of 16 rows, 32 cache lines for 512 bytes. Here a subgroup loads a chunk
// of SG consecutive units (SG = the subgroup size) of the workgroup's rows -- which are contiguous
// in memory (host-checked), so the chunk is one run of SG * 144 bytes -- lane l taking 16-byte words
// l, l + SG, ...: every load instruction reads SG consecutive words. The words go through the
// subgroup's own region of shared memory (stored as loaded, read back a unit per lane: 144-byte
// stride, an odd number of 16-byte words, no bank conflict), synchronized within the subgroup only.
// The next chunk's loads are in flight while this one is stored, read and dotted.
// The activation row (K <= 16384, host-checked; the shared arrays sized for the node's K) is
// quantized to int8 blocks of 32 into shared memory once, behind the first chunk's loads, as in
// mul_mat_vec3w (mv_int8.glsl), and each unit is dotted with OpSDot. Unit g of the workgroup's rows (g = row * units per row + unit) writes its dot into
// part[g]; after the last barrier invocation r < RW sums its row's units and writes the row.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint SPEC = 0u;   // src0 type (q4_0) | rows per workgroup << 8 | units per row << 16
const uint TY = SPEC & 255u;
const uint RW = (SPEC >> 8) & 255u;             // 8, 16 or 32
const uint WU = SPEC >> 16;                     // units (256 elements) per row: K / 256, at most 64
const uint NW = 9u;                             // 16-byte words per unit (q4_0: 8 blocks of 18 bytes)
layout(std430, binding = 0) readonly buffer S0q { uvec4 s0q[]; };
layout(std430, binding = 1) readonly buffer S1v { vec4 s1v[]; };

shared uint yq8[WU * 64u];        // the row's activations as int8: 64 words per unit, 8 per block of 32
shared vec2 yqd[WU * 8u];         // per block: (d, the sum of its quants)
shared uvec4 stage[128u * NW];    // each subgroup's chunk as loaded: SG units of NW words
shared float part[RW * WU];       // the dot of each unit of the workgroup's rows

#define WD(i) wv[(i) >> 2][(i) & 3u]
#include "mv_int8.glsl"

// chunk c (units c * sg .. c * sg + sg - 1 of the workgroup's nu) as lane l loads it: words l + j * sg
void load_chunk(out uvec4 w[NW], uint base, uint c, uint sg, uint l, uint nu) {
    uint q0 = c * sg * NW + l, end = nu * NW;
    [[unroll]] for (uint j = 0u; j < NW; j++) {
        uint q = q0 + j * sg;
        w[j] = q < end ? s0q[base + q] : uvec4(0u);
    }
}

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;   // uniform per workgroup: before any barrier
    uint M = t_ne(0u, 1u), N = t_ne(1u, 1u), B2 = t_ne(1u, 2u), K = t_ne(0u, 0u);
    uint MG = (M + RW - 1u) / RW;
    uint m0 = (w % MG) * RW; w /= MG;
    uint n = w % N; w /= N;
    uint i12 = w % B2, i13 = w / B2;
    uint i02 = i12 / (B2 / t_ne(0u, 2u)), i03 = i13 / (t_ne(1u, 3u) / t_ne(0u, 3u));
    uint t = gl_LocalInvocationIndex;
    uint upr = K >> 8, rows = min(RW, M - m0), nu = rows * upr;
    uint base = t_row(0u, m0, i02, i03) >> 4;   // 16-byte aligned, rows back to back (host-checked)
    uint yb = t_row(1u, n, i12, i13) >> 4;
    uint sg = gl_SubgroupSize, l = gl_SubgroupInvocationID, s = gl_SubgroupID, ns = gl_NumSubgroups;
    uint st = s * sg * NW;                      // this subgroup's staging words
    uint nch = (nu + sg - 1u) / sg;
    uvec4 cur[NW], nxt[NW];
    load_chunk(cur, base, s, sg, l, nu);        // in flight while the row is quantized
    for (uint i = t; i < upr * 8u; i += 128u) quant_block(i, yb + 8u * i);
    barrier();
    for (uint c = s; c < nch; c += ns) {        // uniform per subgroup
        load_chunk(nxt, base, c + ns, sg, l, nu);
        [[unroll]] for (uint j = 0u; j < NW; j++) stage[st + l + j * sg] = cur[j];
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        uvec4 wv[17];
        [[unroll]] for (uint j = 0u; j < 17u; j++) wv[j] = j < NW ? stage[st + l * NW + j] : uvec4(0u);
        subgroupMemoryBarrierShared();
        subgroupBarrier();                      // every lane has its unit before the next chunk is stored
        uint g = c * sg + l;
        if (g < nu) part[g] = dot_unit_i8(wv, g % upr);
        cur = nxt;
    }
    barrier();
    if (t < rows) {
        float v = 0.0;
        for (uint u = 0u; u < upr; u++) v += part[t * upr + u];
        stf(t_at(4u, m0 + t, n, i12, i13), t_type(4u), v);
    }
}
