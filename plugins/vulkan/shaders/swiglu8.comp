#version 450
// swiglu(a, b) = silu(a) * b over contiguous f32 tensors of one shape, 8 elements an invocation (two vec4 loads
// of each operand, vk_graph.c checks: f32, rows back to back, ne0 a multiple of 8, every binding offset on 16
// bytes): elementwise.comp's E_SWIGLU2 with the same arithmetic (silu from common.glsl), so the same f32 values.
// ex[0]: invocations (elements / 8). Built with B16 (swiglu8_b16, option swiglu8=2): it also writes the f16 copy
// a mul_mat_cm4 GEMM reads as its activations (gemm_b16; binding 6: 8 halves a 16-byte word, in the order of the
// elements, which dequant.comp's conversion of the f32 result would write: the same bytes), and writes the f32
// result only where ex[1] != 0 (vk_graph.c: something else reads it, or it is a graph output).
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Av { vec4 av[]; };
layout(std430, binding = 1) readonly buffer Bv { vec4 bv[]; };
layout(std430, binding = 4) writeonly buffer Ov { vec4 ov[]; };
#ifdef B16
layout(std430, binding = 6) writeonly buffer Hv { uvec4 hv[]; };
#endif

void main() {
    uint u = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (u >= ex_u(0u)) return;
    uint a0 = (t_off(0u) >> 4) + 2u * u, b0 = (t_off(1u) >> 4) + 2u * u, o0 = (t_off(4u) >> 4) + 2u * u;
    vec4 x0 = av[a0], x1 = av[a0 + 1u], y0 = bv[b0], y1 = bv[b0 + 1u];
    vec4 r0, r1;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        r0[c] = silu(x0[c]) * y0[c];
        r1[c] = silu(x1[c]) * y1[c];
    }
#ifdef B16
    if (ex_u(1u) != 0u) { ov[o0] = r0; ov[o0 + 1u] = r1; }
    hv[u] = uvec4(packHalf2x16(r0.xy), packHalf2x16(r0.zw), packHalf2x16(r1.xy), packHalf2x16(r1.zw));
#else
    ov[o0] = r0;
    ov[o0 + 1u] = r1;
#endif
}
