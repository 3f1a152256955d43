#version 450
// norm_mul_wg.comp rebuilt around registers (option norm_v=2, the default where norm_wg is on): one
// 256-invocation workgroup per row, and each invocation loads its elements once, all loads issued
// before any is used (a fixed, unrolled count: NV 4-element groups, rows up to 1024*NV), keeps them
// in registers across the one barrier of the reduction (subgroupAdd, then the subgroup sums in
// shared memory), and scales and stores from there. One pass over memory: the earlier kernel walked
// the row twice in dependent 256-stride loops, a memory latency per step. Invocation t owns the
// groups q = t + 256*j (elements 4q..4q+3): with every tensor f32, unit-strided and 16-byte
// aligned (the host checks and says so in extra word 1) a group is one vec4 load or store; else
// the same elements go one by one through the typed accessors (f16/bf16, odd widths, broadcast weights).
// Built with Q8_OUT (option mv_q8; the vec4 path, rows a multiple of 256, a subgroup of 8 to 64 with
// shuffles: the host checks): the product's int8 blocks of 32 too, at binding 7, row r at word
// r * (K / 4 + K / 16): K / 4 words of quants, then (d, sum of the quants) per block as two floats.
// mul_mat_vec3w's quant_block arithmetic on the same stored floats, so the mat-vecs reading the copy
// (mul_mat_vec3q) stage what they would have computed: the same bytes. A block is 8 groups of 4,
// those of invocations 8b..8b+7: its absmax and sum meet by three shuffles.
#include "common.glsl"
#include "norm_add.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S0v { vec4 s0v[]; };
layout(std430, binding = 1) readonly buffer S1v { vec4 s1v[]; };
layout(std430, binding = 2) readonly buffer S2v { vec4 s2v[]; };
layout(std430, binding = 3) buffer N3w { uint n3w[]; };
layout(std430, binding = 3) buffer N3h { uint16_t n3h[]; };
layout(std430, binding = 3) buffer N3v { vec4 n3v[]; };
layout(std430, binding = 4) buffer Dv { vec4 dv[]; };
#ifdef FUSED_ADD
layout(std430, binding = 6) buffer A6v { vec4 a6v[]; };
#endif
#ifdef Q8_OUT
#extension GL_KHR_shader_subgroup_shuffle : require
layout(std430, binding = 7) buffer Q8w { uint q8w[]; };
#endif
#ifdef B16_OUT   // (norm_mul_reg_b16, option norm_b16; the vec4 path) the result as f16 rows at binding 7 too: the copy
// a gemm_b16 GEMM reads as its activations, in dequant.comp's layout (rows of K halves back to back, in the order of
// the rows), the same bytes as its conversion of the f32 result; the norm's own output (slot 3) only where ex[8] != 0
layout(std430, binding = 7) writeonly buffer B16w { uvec2 b16w[]; };
#endif
#define NV 8u
shared float red[256];

void st3(uint o, uint ty, float v) {
    if (ty == TY_F16) n3h[o >> 1] = uint16_t(f32_to_f16(v));
    else if (ty == TY_BF16) n3h[o >> 1] = uint16_t(f32_to_bf16(v));
    else n3w[o >> 2] = floatBitsToUint(v);
}

void main() {
    uint row = wg_linear();
    if (row >= ex_u(0u)) return;   // the same for the whole workgroup
    uint t = gl_LocalInvocationID.x;
    uint n0 = t_ne(0u, 0u), n1 = t_ne(0u, 1u), n2 = t_ne(0u, 2u);
    uint nb0 = t_nb(0u, 0u), ty = t_type(0u), dnb0 = t_nb(4u, 0u), dty = t_type(4u);
    uint nty = t_type(3u), nnb0 = t_nb(3u, 0u), wn0 = t_ne(1u, 0u), wnb0 = t_nb(1u, 0u), wty = t_type(1u);
    uint i1 = row % n1, i2 = (row / n1) % n2, i3 = row / (n1 * n2);
    uint rs = t_row(0u, i1, i2, i3), rn = t_row(3u, i1, i2, i3), rd = t_row(4u, i1, i2, i3);
    uint rw = t_row(1u, i1 % t_ne(1u, 1u), i2 % t_ne(1u, 2u), i3 % t_ne(1u, 3u));
#ifdef FUSED_ADD
    uint ra = add_row(i1, i2, i3), r2 = t_row(2u, i1, i2, i3);
#endif
    bool v4 = ex_u(1u) != 0u;
    vec4 x[NV], w[NV];
    float s2 = 0.0;
    [[unroll]] for (uint j = 0u; j < NV; j++) {
        uint q = t + 256u * j;
        x[j] = vec4(0.0);
        w[j] = vec4(0.0);
        if (4u * q >= n0) continue;
        if (v4) {
            x[j] = s0v[(rs >> 4) + q];
#ifdef FUSED_ADD
            x[j] += s2v[(r2 >> 4) + q];
            a6v[(ra >> 4) + q] = x[j];
#endif
            w[j] = s1v[(rw >> 4) + q];
        } else {
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                uint k = 4u * q + c;
                if (k >= n0) break;
#ifdef FUSED_ADD
                x[j][c] = add_store(ra, rs, r2, k);   // the add's output as stored (its type's rounding)
#else
                x[j][c] = ldf(0u, rs + k * nb0, ty);
#endif
                w[j][c] = ldf(1u, rw + (k % wn0) * wnb0, wty);
            }
        }
        s2 += dot(x[j], x[j]);
    }
    s2 = subgroupAdd(s2);
    if (subgroupElect()) red[gl_SubgroupID] = s2;
    barrier();
    float tot = 0.0;
    for (uint s = gl_SubgroupInvocationID; s < gl_NumSubgroups; s += gl_SubgroupSize) tot += red[s];
    tot = subgroupAdd(tot);
    float scale = 1.0 / sqrt(tot / float(n0) + op_f(0u));
    [[unroll]] for (uint j = 0u; j < NV; j++) {
        uint q = t + 256u * j;
        if (4u * q >= n0) continue;
        vec4 v = x[j] * scale;
        if (v4) {
#ifdef B16_OUT
            if (ex_u(8u) != 0u) n3v[(rn >> 4) + q] = v;
#else
            n3v[(rn >> 4) + q] = v;
#endif
            vec4 m = v * w[j];
            dv[(rd >> 4) + q] = m;
#ifdef B16_OUT
            b16w[row * (n0 >> 2) + q] = uvec2(packHalf2x16(m.xy), packHalf2x16(m.zw));
#endif
#ifdef Q8_OUT   // (uniform per 64 invocations: K / 4 is a multiple of 64)
            float amax = amax4(m);
            amax = max(amax, subgroupShuffleXor(amax, 1u));
            amax = max(amax, subgroupShuffleXor(amax, 2u));
            amax = max(amax, subgroupShuffleXor(amax, 4u));
            float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
            int s = 0;
            uint qw = quant4(m, id, s);
            s += subgroupShuffleXor(s, 1u);
            s += subgroupShuffleXor(s, 2u);
            s += subgroupShuffleXor(s, 4u);
            uint qb = row * ((n0 >> 2) + (n0 >> 4));
            q8w[qb + q] = qw;
            if ((q & 7u) == 0u) {
                q8w[qb + (n0 >> 2) + 2u * (q >> 3)] = floatBitsToUint(d);
                q8w[qb + (n0 >> 2) + 2u * (q >> 3) + 1u] = floatBitsToUint(float(s));
            }
#endif
        } else {
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                uint k = 4u * q + c;
                if (k >= n0) break;
                float vc = v[c];
                st3(rn + k * nnb0, nty, vc);
                // the mul reads the norm as stored (rounded to its type), as the unfused pair does
                if (nty == TY_F16) vc = unpackHalf2x16(f32_to_f16(vc)).x;
                else if (nty == TY_BF16) vc = uintBitsToFloat(f32_to_bf16(vc) << 16);
                stf(rd + k * dnb0, dty, vc * w[j][c]);
            }
        }
    }
}
