#version 450
// dst[m, n] = sum_k src0[k, m] * src1[k, n] for small N: one workgroup per (m, n, batch),
// threads stride over K, reduced with subgroup adds then across subgroups in shared memory.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint TY = 0u;   // src0 type (lets the compiler drop other paths)
shared float part[64];

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    uint M = t_ne(0u, 1u), N = t_ne(1u, 1u), B2 = t_ne(1u, 2u);
    uint m = w % M; w /= M;
    uint n = w % N; w /= N;
    uint i12 = w % B2, i13 = w / B2;
    uint i02 = i12 / (B2 / t_ne(0u, 2u)), i03 = i13 / (t_ne(1u, 3u) / t_ne(0u, 3u));
    uint K = t_ne(0u, 0u);
    uint ra = t_row(0u, m, i02, i03), rb = t_row(1u, n, i12, i13);
    uint nb0 = t_nb(0u, 0u), ynb0 = t_nb(1u, 0u), yty = t_type(1u);
    float acc = 0.0;
    for (uint k = gl_LocalInvocationID.x; k < K; k += 64u)
        acc += deq(0u, ra, k, TY, nb0) * ldf(1u, rb + k * ynb0, yty);
    acc = subgroupAdd(acc);
    if (subgroupElect()) part[gl_SubgroupID] = acc;
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        float s = 0.0;
        for (uint i = 0u; i < gl_NumSubgroups; i++) s += part[i];
        stf(t_at(4u, m, n, i12, i13), t_type(4u), s);
    }
}
