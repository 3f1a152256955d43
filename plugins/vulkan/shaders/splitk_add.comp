#version 450
// The second pass of a GEMM over K splits (option gemm_splitk; mul_mat_cm4.comp wrote split 0's sums into the result,
// slot 4, and split s's at binding 6 as [s - 1][i3][i2][n][m]): adds the ex[1] partials into the result, in split order
// (the same sums, in the same order, whichever workgroup finished first). One invocation per element, ex[0] of them.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 6) readonly buffer Pk { float pkf[]; };

void main() {
    uint u = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (u >= ex_u(0u)) return;
    uint M = t_ne(4u, 0u), N = t_ne(4u, 1u), B2 = t_ne(4u, 2u);
    uint m = u % M, r = u / M, n = r % N;
    r /= N;
    uint i2 = r % B2, i3 = r / B2;
    uint o = t_at(4u, m, n, i2, i3) >> 2;
    float v = uintBitsToFloat(dw[o]);
    for (uint s = 0u; s < ex_u(1u); s++) v += pkf[s * ex_u(0u) + u];
    dw[o] = floatBitsToUint(v);
}
