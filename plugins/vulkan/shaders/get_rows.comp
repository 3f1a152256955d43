#version 450
// dst[:, i10, i11, i12] = src0[:, src1[i10, i11, i12], i11, i12] as f32: one thread per dst element.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= ex_u(0u)) return;
    uint d0, d1, d2, d3;
    unravel(4u, i, d0, d1, d2, d3);
    uint ity = t_type(1u);
    uint io = t_off(1u) + d1 * t_nb(1u, 0u) + d2 * t_nb(1u, 1u) + d3 * t_nb(1u, 2u);
    uint row = rd32(1u, io);   // i32, or low word of i64
    uint rb = t_row(0u, row, d2, d3);
    stf(t_at(4u, d0, d1, d2, d3), t_type(4u), deq(0u, rb, d0, t_type(0u), t_nb(0u, 0u)));
}
