#version 450
// rms_norm fused with the mul of its result that follows it: dst = norm(src0) * src1 (src1
// broadcast), and slot 3 = the norm's own output, written too (every node is written). One
// subgroup per row as rows_sg.comp. A shader of its own: binding 3 is writable only here (the
// validation layer treats a statically written binding as written by every dispatch of a module).
#include "common.glsl"
#include "norm_add.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;
layout(constant_id = 1) const uint RPW = 1u;   // rows per workgroup = 64 / reported subgroup size
layout(std430, binding = 3) buffer N3w { uint n3w[]; };
layout(std430, binding = 3) buffer N3h { uint16_t n3h[]; };

void st3(uint o, uint ty, float v) {
    if (ty == TY_F16) n3h[o >> 1] = uint16_t(f32_to_f16(v));
    else if (ty == TY_BF16) n3h[o >> 1] = uint16_t(f32_to_bf16(v));
    else n3w[o >> 2] = floatBitsToUint(v);
}

void main() {
    uint lane = gl_SubgroupInvocationID, ns = gl_SubgroupSize;
    uint n0 = t_ne(0u, 0u), n1 = t_ne(0u, 1u), n2 = t_ne(0u, 2u);
    uint nb0 = t_nb(0u, 0u), ty = t_type(0u), dnb0 = t_nb(4u, 0u), dty = t_type(4u);
    uint nty = t_type(3u), nnb0 = t_nb(3u, 0u), wn0 = t_ne(1u, 0u), wnb0 = t_nb(1u, 0u), wty = t_type(1u);
    for (uint r = gl_SubgroupID; r < RPW; r += gl_NumSubgroups) {
        uint row = wg_linear() * RPW + r;
        if (row >= ex_u(0u)) return;
        uint i1 = row % n1, i2 = (row / n1) % n2, i3 = row / (n1 * n2);
        uint rs = t_row(0u, i1, i2, i3);
#ifdef FUSED_ADD
        uint ra = add_row(i1, i2, i3), r2 = t_row(2u, i1, i2, i3);
#define LOAD_X(k) add_load(ra, k)
#else
#define LOAD_X(k) ldf(0u, rs + (k) * nb0, ty)
#endif
        float s2 = 0.0;
        for (uint k = lane; k < n0; k += ns) {
#ifdef FUSED_ADD
            float x = add_store(ra, rs, r2, k);
#else
            float x = ldf(0u, rs + k * nb0, ty);
#endif
            s2 += x * x;
        }
        float scale = 1.0 / sqrt(subgroupAdd(s2) / float(n0) + op_f(0u));
        uint rn = t_row(3u, i1, i2, i3), rd = t_row(4u, i1, i2, i3);
        uint rw = t_row(1u, i1 % t_ne(1u, 1u), i2 % t_ne(1u, 2u), i3 % t_ne(1u, 3u));
        for (uint k = lane; k < n0; k += ns) {
            float v = LOAD_X(k) * scale;
            st3(rn + k * nnb0, nty, v);
            // the mul reads the norm as stored (rounded to its type), as the unfused pair does
            if (nty == TY_F16) v = unpackHalf2x16(f32_to_f16(v)).x;
            else if (nty == TY_BF16) v = uintBitsToFloat(f32_to_bf16(v) << 16);
            stf(rd + k * dnb0, dty, v * ldf(1u, rw + (k % wn0) * wnb0, wty));
        }
    }
}
