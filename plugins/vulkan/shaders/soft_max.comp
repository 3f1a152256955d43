#version 450
// softmax(x*scale + slope*mask) over ne[0]: one workgroup per row.
#include "common.glsl"
layout(local_size_x = 128) in;
shared float red[128];

float wg_reduce(float v, bool is_max) {
    uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (t < s) red[t] = is_max ? max(red[t], red[t + s]) : red[t] + red[t + s];
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
    uint nb0 = t_nb(0u, 0u), ty = t_type(0u), dnb0 = t_nb(4u, 0u), dty = t_type(4u);
    bool has_mask = ex_u(1u) != 0u;
    uint rm = 0u, mnb0 = 0u, mty = 0u;
    if (has_mask) {
        rm = t_row(1u, i1, i2 % t_ne(1u, 2u), i3 % t_ne(1u, 3u));
        mnb0 = t_nb(1u, 0u);
        mty = t_type(1u);
    }
    float scale = op_f(0u);
    float slope = alibi_slope(op_f(1u), i2, n2);
    uint t = gl_LocalInvocationID.x;
    float mx = uintBitsToFloat(0xFF800000u);
    for (uint k = t; k < n0; k += 128u) {
        float v = ldf(0u, rs + k * nb0, ty) * scale;
        if (has_mask) v += slope * ldf(1u, rm + k * mnb0, mty);
        mx = max(mx, v);
    }
    mx = wg_reduce(mx, true);
    float sum = 0.0;
    for (uint k = t; k < n0; k += 128u) {
        float v = ldf(0u, rs + k * nb0, ty) * scale;
        if (has_mask) v += slope * ldf(1u, rm + k * mnb0, mty);
        sum += exp(v - mx);
    }
    sum = wg_reduce(sum, false);
    float inv = 1.0 / sum;
    for (uint k = t; k < n0; k += 128u) {
        float v = ldf(0u, rs + k * nb0, ty) * scale;
        if (has_mask) v += slope * ldf(1u, rm + k * mnb0, mty);
        stf(rd + k * dnb0, dty, exp(v - mx) * inv);
    }
}
