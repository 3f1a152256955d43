#version 450
// add, mul, scale, silu, gelu, swiglu, cpy/cont: one thread per dst element, any strides.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;
#define E_ADD 0u
#define E_MUL 1u
#define E_SCALE 2u
#define E_SILU 3u
#define E_GELU 4u
#define E_SWIGLU2 5u
#define E_SWIGLU1 6u
#define E_COPY 7u


void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= ex_u(0u)) return;
    uint d0, d1, d2, d3;
    unravel(4u, i, d0, d1, d2, d3);
    uint ty0 = t_type(0u);
    float r;
    if (OP == E_COPY) {
        uint a0, a1, a2, a3;
        unravel(0u, i, a0, a1, a2, a3);
        r = ldf(0u, t_at(0u, a0, a1, a2, a3), ty0);
    } else if (OP == E_SWIGLU1) {
        uint nc = t_ne(4u, 0u);
        uint ia = d0, ib = d0 + nc;
        if (op_i(0u) != 0) { ia = d0 + nc; ib = d0; }
        float a = ldf(0u, t_at(0u, ia, d1, d2, d3), ty0);
        float b = ldf(0u, t_at(0u, ib, d1, d2, d3), ty0);
        r = silu(a) * b;
    } else {
        float x = ldf(0u, t_at(0u, d0, d1, d2, d3), ty0);
        if (OP == E_ADD || OP == E_MUL || OP == E_SWIGLU2) {
            uint b0 = d0 % t_ne(1u, 0u), b1 = d1 % t_ne(1u, 1u), b2 = d2 % t_ne(1u, 2u), b3 = d3 % t_ne(1u, 3u);
            float y = ldf(1u, t_at(1u, b0, b1, b2, b3), t_type(1u));
            r = OP == E_ADD ? x + y : (OP == E_MUL ? x * y : silu(x) * y);
        } else if (OP == E_SCALE) {
            r = x * op_f(0u) + op_f(1u);
        } else if (OP == E_SILU) {
            r = silu(x);
        } else {
            r = 0.5 * x * (1.0 + tanh_s(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
        }
    }
    stf(t_at(4u, d0, d1, d2, d3), t_type(4u), r);
}
