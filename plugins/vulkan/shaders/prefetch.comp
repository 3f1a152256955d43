#version 450
// A mat-vec's weights brought into L2 one stage early (option prefetch_mb; vk_prefetch.c): one 32-bit load
// per 32-byte sector of slot 0's first ex[0] sectors (binding 0: the weight, or its repacked copy), four
// sectors per invocation and step, a grid-stride loop. Nothing is written: ex[1] is 0, so the store that
// keeps the loads alive never happens.
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
    uint n = ex_u(0u), base = t_off(0u) >> 2;
    uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z * 1024u;
    uint acc = 0u;
    for (uint i = wg_linear() * 1024u + gl_LocalInvocationID.x; i < n; i += stride) {
        uint a = s0w[base + 8u * i];
        uint b = i + 256u < n ? s0w[base + 8u * (i + 256u)] : 0u;
        uint c = i + 512u < n ? s0w[base + 8u * (i + 512u)] : 0u;
        uint e = i + 768u < n ? s0w[base + 8u * (i + 768u)] : 0u;
        acc ^= a ^ b ^ c ^ e;
    }
    if (ex_u(1u) != 0u && acc == ex_u(2u)) dw[0] = acc;
}
