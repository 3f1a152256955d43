#version 450
// norm_mul.comp with one 256-invocation workgroup per row: on GPUs a decode step has one row, and
// one subgroup walking 2048 elements is a long chain of dependent loads; here each invocation
// takes a few elements and the subgroup sums meet in shared memory (one barrier). Not used on
// CPU devices (lavapipe runs barrier workgroups as coroutines); option norm_wg=off/on forces. Kept
// as norm_v=1 next to norm_mul_reg.comp (the default workgroup kernel) until GPUs confirm that one.
#include "common.glsl"
#include "norm_add.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 256) in;
layout(std430, binding = 3) buffer N3w { uint n3w[]; };
layout(std430, binding = 3) buffer N3h { uint16_t n3h[]; };
shared float red[256];

void st3(uint o, uint ty, float v) {
    if (ty == TY_F16) n3h[o >> 1] = uint16_t(f32_to_f16(v));
    else if (ty == TY_BF16) n3h[o >> 1] = uint16_t(f32_to_bf16(v));
    else n3w[o >> 2] = floatBitsToUint(v);
}

void main() {
    uint row = wg_linear();
    if (row >= ex_u(0u)) return;
    uint t = gl_LocalInvocationID.x;
    uint n0 = t_ne(0u, 0u), n1 = t_ne(0u, 1u), n2 = t_ne(0u, 2u);
    uint nb0 = t_nb(0u, 0u), ty = t_type(0u), dnb0 = t_nb(4u, 0u), dty = t_type(4u);
    uint nty = t_type(3u), nnb0 = t_nb(3u, 0u), wn0 = t_ne(1u, 0u), wnb0 = t_nb(1u, 0u), wty = t_type(1u);
    uint i1 = row % n1, i2 = (row / n1) % n2, i3 = row / (n1 * n2);
    uint rs = t_row(0u, i1, i2, i3);
#ifdef FUSED_ADD
    uint ra = add_row(i1, i2, i3), r2 = t_row(2u, i1, i2, i3);
#define LOAD_X(k) add_load(ra, k)
#else
#define LOAD_X(k) ldf(0u, rs + (k) * nb0, ty)
#endif
    float s2 = 0.0;
    for (uint k = t; k < n0; k += 256u) {
#ifdef FUSED_ADD
        float x = add_store(ra, rs, r2, k);
#else
        float x = ldf(0u, rs + k * nb0, ty);
#endif
        s2 += x * x;
    }
    s2 = subgroupAdd(s2);
    if (subgroupElect()) red[gl_SubgroupID] = s2;
    barrier();
    float tot = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; s++) tot += red[s];
    float scale = 1.0 / sqrt(tot / float(n0) + op_f(0u));
    uint rn = t_row(3u, i1, i2, i3), rd = t_row(4u, i1, i2, i3);
    uint rw = t_row(1u, i1 % t_ne(1u, 1u), i2 % t_ne(1u, 2u), i3 % t_ne(1u, 3u));
    for (uint k = t; k < n0; k += 256u) {
        float v = LOAD_X(k) * scale;
        st3(rn + k * nnb0, nty, v);
        if (nty == TY_F16) v = unpackHalf2x16(f32_to_f16(v)).x;
        else if (nty == TY_BF16) v = uintBitsToFloat(f32_to_bf16(v) << 16);
        stf(rd + k * dnb0, dty, v * ldf(1u, rw + (k % wn0) * wnb0, wty));
    }
}
