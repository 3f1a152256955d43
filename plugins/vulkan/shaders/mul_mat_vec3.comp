#version 450
// Mat-vec (N <= 4) for q4_0 and q8_0 weights with the activation row staged in shared memory
// (option matvec=3). A workgroup of 128 invocations computes RW (8, 16 or 32: option matvec_rows)
// neighbouring rows of one output column. K is cut into "units" of 8 blocks (256 elements: 144 bytes of q4_0, 272 of q8_0, whole
// 16-byte words when the row starts on 16 bytes); invocation t takes row t % RW and unit t / RW of
// each chunk of UC = 128 / RW units. Per chunk the workgroup first issues its weight loads (9 or
// 17 16-byte words per invocation, kept in registers: 144 or 272 bytes in flight each), then copies
// the chunk's activations (UC * 1 KiB, read from global memory once per workgroup instead of once
// per row group) into shared memory, and after one barrier each invocation dots its unit's 8
// blocks: the RW invocations of one unit read the same shared words (a broadcast). Block headers
// and quants are realigned from the registers (q4_0/q8_0 blocks are 2-byte aligned). The row sums
// meet in shared memory (one barrier), one write per row. No subgroup operations. The host picks
// it for rows it covers (vk_matmul.c: mv3_ok: K a multiple of 256, 16-byte aligned weight rows and
// activation rows); other layouts and types keep mul_mat_vec2.comp / mul_mat_vec.comp. q4_K (a unit
// is its 144-byte block of 256) runs in the int8 builds only (MV_INT8: each 32-element sub-block's
// integer dot scaled by its 6-bit scale, its min times the activation block's sum subtracted).
// Built with MV_PIPE (mul_mat_vec3p, option matvec=4): the next chunk's weight loads are issued
// before this chunk's dot (twice the registers: two units' words in flight per invocation).
// Built with MV_GLU (mul_mat_vec3g, option fuse_glu=1): a = W_a x (slot 0) and b = W_b x (slot 2,
// the same type and layout) in one dispatch, each invocation dotting its unit of both, and the
// swiglu of the two: slot 4 = silu(a) * b, slot 3 = a, binding 6 = b (extras 2..7), all written.
// Built with MV_INT8 (mul_mat_vec3i, option matvec=5, devices with shaderIntegerDotProduct): the
// chunk's activations are quantized while staged (per block of 32: d = absmax / 127, int8 quants,
// their sum; what the CUDA plugin's mat-vec reads) and each unit's blocks are dotted with
// SPV_KHR_integer_dot_product's OpSDot on packed 4 x int8 words: a quarter of the shared-memory
// bytes, no per-weight conversion to float.
// Built with MV_INT8 and MV_WHOLE (mul_mat_vec3w, option matvec=6): the whole activation row (K up to
// 16384) is quantized into shared memory once, behind the first unit's weight loads, and after that
// one barrier each invocation walks its units with the next unit's weights in flight while it dots
// the current one: no barrier in the loop (H200 at f4414cd: 7b q4_0 decode mat-vecs 2965 us per
// token against mul_mat_vec3i's 3141, so the chunk barriers were not what held them back).
// Built with MV_INT8, MV_WHOLE and MV_SWIGLU (mul_mat_vec3s, option fuse_swiglu): the activations
// are silu(gate) * up (slots 1 and 2, f32 rows of one shape), computed while the row is quantized;
// the row groups share the writing of the product (binding 6, extras 2..7: offset, type, nb), block
// b by group b mod groups (one group writing all of it made that group the dispatch's tail: H200
// at ce97664, 20 us per dispatch): a swiglu and the down projection reading it in one dispatch.
// Built with MV_INT8, MV_WHOLE and MV_NORM (mul_mat_vec3n, option fuse_norm_mv): the activations are
// rms_norm(x [+ r]) * w recomputed from the norm's inputs (slots 1, 2, 3) in the one staging pass:
// (x + r) * w is quantized (per-block int8 is scale-free) while the sum of squares accumulates, and
// 1 / rms scales each invocation's dot. The mat-vecs that read a fused norm's result run beside
// that norm dispatch (which still writes every node), not after it: one barrier stage less per
// layer norm. (A first build summed the scale as norm_mul_reg.comp does, in a pass of its own
// before the quantization, for bit-equal results: on the H200 at ce97664 that pass cost more than
// the barrier it saved, tg128 7b q4_0 200 against 228 t/s.)
// Built with MV_INT8, MV_WHOLE and MV_PREQ (mul_mat_vec3q, option mv_q8): slot 1 is the fused norm
// dispatch's int8 copy of the activations (norm_mul_reg.comp's Q8_OUT), which is staged as it is: no
// quantization, a fifth of the bytes, the same shared words as mul_mat_vec3w's.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#ifdef MV_INT8
#extension GL_EXT_spirv_intrinsics : require
#endif
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint SPEC = 0u;   // src0 type | rows per workgroup << 8
const uint TY = SPEC & 255u;
const uint RW = (SPEC >> 8) & 255u;             // 8, 16 or 32
const uint PARTS = (SPEC >> 16) & 3u;           // option debug_mv_parts (mul_mat_vec3w): 1 no activation staging, 2 no weight loads
const bool AHEAD = ((SPEC >> 18) & 1u) != 0u;   // option matvec_ahead (MV_WHOLE builds): two units in flight while the row is staged
const uint UC = 128u / RW;                      // units per chunk
const uint NW = TY == TY_Q8_0 ? 17u : 9u;       // 16-byte words per unit (q4_0: 8 blocks, q4_K: one)
layout(std430, binding = 0) readonly buffer S0q { uvec4 s0q[]; };
layout(std430, binding = 1) readonly buffer S1v { vec4 s1v[]; };
#ifdef MV_GLU
layout(std430, binding = 2) readonly buffer S2q { uvec4 s2q[]; };
layout(std430, binding = 3) buffer O3 { uint o3[]; };
layout(std430, binding = 6) buffer O6 { uint o6[]; };
shared float red_b[128];
#endif

#ifdef MV_SWIGLU   // activations silu(gate) * up: gate at slot 1, up at slot 2; the product at binding 6
layout(std430, binding = 2) readonly buffer S2v { vec4 s2v[]; };
layout(std430, binding = 6) buffer O6 { float o6[]; };
uint g_up;      // vec4 index of up's row minus gate's (mod 2^32)
uint g_out;     // byte offset of the product's column in binding 6
uint g_grp, g_ngrp;   // this workgroup's row group, of how many: it writes the product's blocks g_grp mod g_ngrp
vec4 mv_act(uint blk, uint k, uint v) {
    vec4 g = s1v[v], u = s2v[v + g_up];
    vec4 r = vec4(silu(g.x) * u.x, silu(g.y) * u.y, silu(g.z) * u.z, silu(g.w) * u.w);
    if (blk % g_ngrp == g_grp) {
        uint e = 32u * blk + 4u * k;
        [[unroll]] for (uint c = 0u; c < 4u; c++) o6[(g_out + (e + c) * ex_u(4u)) >> 2] = r[c];
    }
    return r;
}
#define MV_ACT 1
#endif

#ifdef MV_NORM   // activations rms_norm(x [+ r]) * w: x at slot 1, r at slot 2 (extra word 1: present), w at slot 3
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(std430, binding = 2) readonly buffer S2v { vec4 s2v[]; };
layout(std430, binding = 3) readonly buffer S3v { vec4 s3v[]; };
shared float red_n[128];  // per subgroup: its invocations' sums of squares
uint g_r, g_w;            // vec4 index of r's row and of w minus x's row (mod 2^32)
float g_ss;               // this invocation's share of sum(h^2)
bool g_add;
// (x + r) * w, quantized as it is: int8 quantization per block is scale-free, so the row's 1 / rms
// multiplies the finished dot product instead, and its sum of squares is taken in the same pass
vec4 mv_act(uint blk, uint k, uint v) {
    vec4 h = s1v[v];
    if (g_add) h += s2v[v + g_r];
    g_ss += dot(h, h);
    return h * s3v[v + g_w];
}
#define MV_ACT 1
#endif

#if defined(MV_INT8) && defined(MV_WHOLE)
const uint WU = 64u;        // units of the whole row (K <= 16384: host-checked)
shared uint yq8[WU * 64u];  // the row's activations as int8: 64 words per unit, 8 per block of 32
shared vec2 yqd[WU * 8u];   // per block: (d, the sum of its quants)
#elif defined(MV_INT8)
shared uint yq8[UC * 64u];  // the chunk's activations as int8: 64 words per unit, 8 per block of 32
shared vec2 yqd[UC * 8u];   // per block: (d, the sum of its quants)
#else
shared vec4 ys[UC * 64u];   // the chunk's activations: 64 vec4 per unit
#endif
shared float red[128];

vec4 nib_lo(uint q) { return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 15u); }
vec4 nib_hi(uint q) { return vec4((uvec4(q) >> uvec4(4u, 12u, 20u, 28u)) & 15u); }
vec4 sbytes(uint q) { return vec4(ivec4(uvec4(q) << uvec4(24u, 16u, 8u, 0u)) >> 24); }

// word i (32 bits) of the unit in registers
#define WD(i) wv[(i) >> 2][(i) & 3u]

#ifndef MV_INT8
// the unit's 8 blocks dotted with the shared activations from vec4 index y0
float dot_unit(uvec4 wv[17], uint y0) {
    float acc = 0.0;
    [[unroll]] for (uint b = 0u; b < 8u; b++) {
        uint o = (TY == TY_Q4_0 ? 18u : 34u) * b, wi = o >> 2;   // block start in bytes, its word
        bool odd = (b & 1u) != 0u;                               // 18b and 34b are 2 mod 4 for odd b
        float d = unpackHalf2x16(odd ? WD(wi) >> 16 : WD(wi)).x;
        uint yb = y0 + 8u * b;
        if (TY == TY_Q4_0) {
            float s = 0.0;
            vec4 ysum = vec4(0.0);
            [[unroll]] for (uint k = 0u; k < 4u; k++) {
                uint q = odd ? WD(wi + 1u + k) : (WD(wi + k) >> 16) | (WD(wi + k + 1u) << 16);
                vec4 ya = ys[yb + k], yc = ys[yb + 4u + k];
                s += dot(nib_lo(q), ya) + dot(nib_hi(q), yc);
                ysum += ya + yc;
            }
            acc += d * (s - 8.0 * (ysum.x + ysum.y + ysum.z + ysum.w));
        } else {
            float s = 0.0;
            [[unroll]] for (uint k = 0u; k < 8u; k++) {
                uint q = odd ? WD(wi + 1u + k) : (WD(wi + k) >> 16) | (WD(wi + k + 1u) << 16);
                s += dot(sbytes(q), ys[yb + k]);
            }
            acc += d * s;
        }
    }
    return acc;
}
#endif

#ifdef MV_INT8
#include "mv_int8.glsl"
#endif

// unit u of the row starting at 16-byte word rq into registers (zeros where idle)
void load_unit(out uvec4 wv[17], uint rq, uint u, bool busy) {   // (debug_mv_parts=2: no loads)
    [[unroll]] for (uint j = 0u; j < 17u; j++) wv[j] = uvec4(0u);
    if (busy && PARTS != 2u) {
        [[unroll]] for (uint j = 0u; j < NW; j++) wv[j] = s0q[rq + NW * u + j];
    }
}
#ifdef MV_GLU
void load_unit_b(out uvec4 wv[17], uint rq, uint u, bool busy) {   // the same from W_b
    [[unroll]] for (uint j = 0u; j < 17u; j++) wv[j] = uvec4(0u);
    if (busy) {
        [[unroll]] for (uint j = 0u; j < NW; j++) wv[j] = s2q[rq + NW * u + j];
    }
}
#endif

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;   // uniform per workgroup: before any barrier
    uint M = t_ne(0u, 1u), N = t_ne(1u, 1u), B2 = t_ne(1u, 2u), K = t_ne(0u, 0u);
    uint MG = (M + RW - 1u) / RW;
    uint m0 = (w % MG) * RW; w /= MG;
    uint n = w % N; w /= N;
    uint i12 = w % B2, i13 = w / B2;
    uint i02 = i12 / (B2 / t_ne(0u, 2u)), i03 = i13 / (t_ne(1u, 3u) / t_ne(0u, 3u));
    uint t = gl_LocalInvocationIndex, r = t % RW, uc = t / RW;
    bool live = m0 + r < M;
    uint rq = t_row(0u, live ? m0 + r : m0, i02, i03) >> 4;   // the host checked 16-byte alignment
#ifdef MV_GLU
    uint rqb = t_row(2u, live ? m0 + r : m0, i02, i03) >> 4;
    float acc_b = 0.0;
#endif
    uint yb = t_row(1u, n, i12, i13) >> 4;
#ifdef MV_SWIGLU
    g_up = (t_row(2u, n, i12, i13) >> 4) - yb;
    g_out = ex_u(2u) + n * ex_u(5u) + i12 * ex_u(6u) + i13 * ex_u(7u);
    g_grp = m0 / RW;
    g_ngrp = MG;
#endif
#ifdef MV_NORM
    g_add = ex_u(1u) != 0u;
    g_r = g_add ? (t_row(2u, n, i12, i13) >> 4) - yb : 0u;
    g_w = (t_row(3u, 0u, 0u, 0u) >> 4) - yb;
    g_ss = 0.0;
#endif
    uint nunits = K >> 8;
    float acc = 0.0;
    uvec4 wv[17];
#ifdef MV_WHOLE   // the row quantized once, then every unit of this invocation without a barrier
    uvec4 wn[17];
    load_unit(wv, rq, uc, live && uc < nunits);   // in flight while the row is staged
    if (AHEAD) load_unit(wn, rq, uc + UC, live && uc + UC < nunits);   // (and the next: K = 4096 has two)
#ifdef MV_PREQ   // (mul_mat_vec3q, option mv_q8) column n's int8 blocks as the norm dispatch wrote them (norm_mul_reg.comp's Q8_OUT)
    uint qb = n * ((K >> 2) + (K >> 4));
    for (uint i = t; i < nunits * 8u; i += 128u) {
        [[unroll]] for (uint k = 0u; k < 8u; k++) yq8[8u * i + k] = s1w[qb + 8u * i + k];
        yqd[i] = vec2(uintBitsToFloat(s1w[qb + (K >> 2) + 2u * i]), uintBitsToFloat(s1w[qb + (K >> 2) + 2u * i + 1u]));
    }
#else
    if (PARTS == 1u) {   // measurement: zeros staged, the activations neither read nor quantized
        for (uint i = t; i < nunits * 8u; i += 128u) {
            [[unroll]] for (uint k = 0u; k < 8u; k++) yq8[8u * i + k] = 0u;
            yqd[i] = vec2(0.0);
        }
    } else {
        for (uint i = t; i < nunits * 8u; i += 128u) quant_block(i, yb + 8u * i);
    }
#endif
#ifdef MV_NORM
    float ss = subgroupAdd(g_ss);
    if (subgroupElect()) red_n[gl_SubgroupID] = ss;
#endif
    barrier();
    for (uint u = uc; u < nunits; u += 2u * UC) {   // two units in flight: one dotted, one loading
        if (!AHEAD) load_unit(wn, rq, u + UC, live && u + UC < nunits);
        if (live) acc += dot_unit_i8(wv, u);
        load_unit(wv, rq, u + 2u * UC, live && u + 2u * UC < nunits);
        if (live && u + UC < nunits) acc += dot_unit_i8(wn, u + UC);
        if (AHEAD) load_unit(wn, rq, u + 3u * UC, live && u + 3u * UC < nunits);
    }
#else
#ifdef MV_PIPE
    load_unit(wv, rq, uc, live && uc < nunits);
#endif
    for (uint c0 = 0u; c0 < nunits; c0 += UC) {
        uint u = c0 + uc;
        bool busy = live && u < nunits;
#ifndef MV_PIPE
        load_unit(wv, rq, u, busy);
#endif
#ifdef MV_GLU
        uvec4 wb[17];
        load_unit_b(wb, rqb, u, busy);
#endif
        barrier();   // the previous chunk's readers are done with ys
#ifdef MV_INT8
        uint nq = min(UC, nunits - c0) * 8u;   // blocks of 32
        for (uint i = t; i < nq; i += 128u) quant_block(i, yb + 64u * c0 + 8u * i);
#else
        uint nv = min(UC, nunits - c0) * 64u;
        for (uint i = t; i < nv; i += 128u) ys[i] = s1v[yb + 64u * c0 + i];
#endif
#ifdef MV_PIPE   // the next chunk's weights in flight while this one is dotted
        uvec4 wn[17];
        load_unit(wn, rq, u + UC, live && u + UC < nunits);
#endif
        barrier();
#ifdef MV_INT8
        if (busy) acc += dot_unit_i8(wv, uc);
#else
        if (busy) acc += dot_unit(wv, 64u * uc);
#endif
#ifdef MV_GLU
        if (busy) acc_b += dot_unit(wb, 64u * uc);
#endif
#ifdef MV_PIPE
        wv = wn;
#endif
    }
#endif   // MV_WHOLE
#ifdef MV_NORM   // the row's 1 / rms: the subgroups' sums, each invocation adding them in one order
    float tot = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; s++) tot += red_n[s];
    acc *= 1.0 / sqrt(tot / float(K) + op_f(0u));
#endif
    red[t] = acc;
#ifdef MV_GLU
    red_b[t] = acc_b;
#endif
    barrier();
    if (t < RW && m0 + t < M) {
        float v = 0.0;
        for (uint j = 0u; j < UC; j++) v += red[t + RW * j];
#ifdef MV_GLU   // f32 outputs (host-checked)
        float vb = 0.0;
        for (uint j = 0u; j < UC; j++) vb += red_b[t + RW * j];
        o3[t_at(3u, m0 + t, n, i12, i13) >> 2] = floatBitsToUint(v);
        o6[(ex_u(2u) + (m0 + t) * ex_u(4u) + n * ex_u(5u) + i12 * ex_u(6u) + i13 * ex_u(7u)) >> 2] = floatBitsToUint(vb);
        v = silu(v) * vb;
#endif
        stf(t_at(4u, m0 + t, n, i12, i13), t_type(4u), v);
    }
}
