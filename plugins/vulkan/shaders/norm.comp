#version 450
// rms_norm (MODE 0) and norm (MODE 1): one workgroup per row.
#include "common.glsl"
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint MODE = 0u;
shared float red[128];

float wg_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

void main() {
    uint row = wg_linear();
    if (row >= ex_u(0u)) return;
    uint n0 = t_ne(0u, 0u), n1 = t_ne(0u, 1u), n2 = t_ne(0u, 2u);
    uint i1 = row % n1, i2 = (row / n1) % n2, i3 = row / (n1 * n2);
    uint rs = t_row(0u, i1, i2, i3), rd = t_row(4u, i1, i2, i3);
    uint nb0 = t_nb(0u, 0u), ty = t_type(0u), dnb0 = t_nb(4u, 0u);
    uint t = gl_LocalInvocationID.x;
    float eps = op_f(0u);
    float mean = 0.0;
    if (MODE == 1u) {
        float s = 0.0;
        for (uint k = t; k < n0; k += 128u) s += ldf(0u, rs + k * nb0, ty);
        mean = wg_sum(s) / float(n0);
    }
    float s2 = 0.0;
    for (uint k = t; k < n0; k += 128u) {
        float x = ldf(0u, rs + k * nb0, ty) - mean;
        s2 += x * x;
    }
    float scale = 1.0 / sqrt(wg_sum(s2) / float(n0) + eps);
    for (uint k = t; k < n0; k += 128u)
        stf(rd + k * dnb0, t_type(4u), (ldf(0u, rs + k * nb0, ty) - mean) * scale);
}
