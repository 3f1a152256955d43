#version 450
// dst[:, idx[i1, i2 % ., i3 % .], i2, i3] = src1[:, i1, i2, i3]: one thread per src1 element.
// Slots: 1 = values, 2 = indices (i32 or i64), 4 = dst (aliases src0).
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= ex_u(0u)) return;
    uint a0, a1, a2, a3;
    unravel(1u, i, a0, a1, a2, a3);
    uint j1 = a2 % t_ne(2u, 1u), j2 = a3 % t_ne(2u, 2u);
    uint io = t_off(2u) + a1 * t_nb(2u, 0u) + j1 * t_nb(2u, 1u) + j2 * t_nb(2u, 2u);
    uint row = rd32(2u, io);
    float v = ldf(1u, t_at(1u, a0, a1, a2, a3), t_type(1u));
    stf(t_at(4u, a0, row, a2, a3), t_type(4u), v);
}
