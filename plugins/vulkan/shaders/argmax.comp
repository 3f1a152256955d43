#version 450
// index of the largest element per row (first on ties): one workgroup per row.
#include "common.glsl"
layout(local_size_x = 128) in;
shared float rv[128];
shared uint ri[128];

void main() {
    uint row = wg_linear();
    if (row >= ex_u(0u)) return;
    uint n0 = t_ne(0u, 0u), n1 = t_ne(0u, 1u), n2 = t_ne(0u, 2u);
    uint i1 = row % n1, i2 = (row / n1) % n2, i3 = row / (n1 * n2);
    uint rs = t_row(0u, i1, i2, i3);
    uint nb0 = t_nb(0u, 0u), ty = t_type(0u);
    uint t = gl_LocalInvocationID.x;
    float best = uintBitsToFloat(0xFF800000u);
    uint bi = 0xFFFFFFFFu;
    for (uint k = t; k < n0; k += 128u) {
        float v = ldf(0u, rs + k * nb0, ty);
        if (bi == 0xFFFFFFFFu || v > best) { best = v; bi = k; }
    }
    rv[t] = best; ri[t] = bi;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (t < s) {
            float v = rv[t + s]; uint j = ri[t + s];
            if (j != 0xFFFFFFFFu && (ri[t] == 0xFFFFFFFFu || v > rv[t] || (v == rv[t] && j < ri[t]))) {
                rv[t] = v; ri[t] = j;
            }
        }
        barrier();
    }
    if (t == 0u) {
        uint n1d = t_ne(4u, 0u);
        // dst is [n_rows] i32 laid out like the source rows: [ne1, ne2, ne3]
        dw[(t_off(4u) + i1 * t_nb(4u, 0u) + i2 * t_nb(4u, 1u) + i3 * t_nb(4u, 2u)) >> 2] = ri[0];
    }
}
