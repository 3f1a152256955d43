#version 450
// One-column q4_0 mat-vec on the weights' repacked copy (option matvec_rp; vk_repack.c's header has the
// layout), the CUDA plugin's decode structure (mmv_rp.cuh): activations in registers, weights streamed.
// A workgroup of W invocations (specialization constant 1, a multiple of 32) owns 8 rows; invocation t
// owns blocks u = j W + t (j < J, specialization bits 8..10) of K: consecutive invocations, consecutive
// blocks, so one 16-byte load per row and block reads W 16-byte words in a row of the copy, and one
// 16-byte load brings the block's 8 scales. The weight loads are issued first; then the invocation
// quantizes its own blocks of the f32 activations to int8 (mul_mat_vec3w's quantization: amax / 127,
// round to even) and dots them with OpSDot. The 8 rows' sums meet by subgroupAdd, then through shared
// memory across the subgroups. Binding 0 is the copy; slot 0's parameters still describe the weight
// (ne0 = K, ne1 = M); ex[0] = workgroups, ex[1] = where the scales start (16-byte words).
// Built with RP_GLU (mul_mat_vec_rpg, with matvec_rp where a model's gate and up read one column: vk_fuse.c):
// a = W_a x (binding 0, W_a's copy) and b = W_b x (binding 2, W_b's copy, the same shape), 4 rows of each per
// workgroup (the same 8 sums per invocation), and sw = silu(a) * b (the elementwise swiglu's arithmetic):
// slot 4 = sw, slot 3 = a, binding 6 = b (extras 2..7), all written. One stage where there were two.
// Built with RP_EPI (mul_mat_vec_rpe, option fuse_rope_mv: a layer's q, k and v in decode, vk_rope_mv.c): the
// product y (slot 4, still written) goes on in the same dispatch, ex[2] bit 0: through a normal-mode rope of
// head size ex[6] (the rope's parameters at words 80.., ex[3..5] log2(base) and its correction dims, the
// position in slot 2) into binding 6 (f32, contiguous, offset ex[8]); bit 1: the result (roped or not) into
// row idx[0] (slot 3) of a 2-D cache at binding 7 (offset ex[14], type ex[15], nb0 / nb1 ex[16] / ex[17]).
// A rope pair is two adjacent rows of one workgroup (rows start at multiples of 8, the head size is even):
// each of the pair's invocations sums its partner's row too. The rope's arithmetic is rope.comp's (rope_cs.glsl).
// Built with RP_NORM (mul_mat_vec_rpn, option fold_norm: a layer's o and down projections, vk_mv_epi.c): besides y
// (slot 4), what the next rms_norm's readers need to read that norm without waiting for it. With r (slot 2) the
// residual the graph adds to y next and w (slot 3) the norm's weight, each workgroup owns elements [8 rg, 8 rg + 8) of
// b = (r + y) * w and writes into its region of the plan's scratch (binding 6, M a multiple of 32): their int8 quants
// (words 2 rg, 2 rg + 1: the layout a reader's unit of 32 takes as q8-in's), their scale amax / 127 (float word
// M / 4 + rg) and the sum of the 8 squares (r + y)^2 (word M / 4 + M / 8 + rg). No workgroup waits for another: a
// reader (fold-in, below) sums the M / 8 squares itself and scales its sums by 1 / rms. The add, norm and mul nodes
// still run in their own dispatch, beside the readers, and write every result (R9).
// Built with RP_NWR as well (option fold_nodes, vk_norm_in.c's fold_write; picked by specialization bit 17): the nodes
// that dispatch wrote are written here instead, and it is not run. The RP_NORM build writes a = r + y into binding 7
// (f32, offset ex[14]) and, after its quants, scales and squares, a and w as floats (words M / 2 + e and 3 M / 2 + e).
// The norm's first reader (the RP_EPI or RP_GLU build with fold-in) writes n = a / rms into binding 8 (offset ex[20])
// and n * w into binding 9 (offset ex[26]), its invocation j of all (rg W + t) element j: the plan takes it only
// where its workgroups cover the row. Those are norm_mul_reg's products, from the same a, w and squares its own sums
// are scaled by.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128, local_size_x_id = 1) in;
layout(constant_id = 0) const uint SPEC = 0u;   // src0 type (q4_0, q4_K, q6_K) | blocks per invocation J << 8
// RP_LIT=J (the _q0j1 / _q0j2 builds, option rp_lit): q4_0 with J blocks per invocation as literals, not derived from
// the specialization, so that glslc sizes the private arrays and unrolls their loops here (specialization-sized arrays
// and loops stay dynamic in the module: the 8-row build with R derived from it was 15% slower on the H100)
#ifdef RP_LIT
const uint TY = TY_Q4_0;
const uint J = RP_LIT;
#else
const uint TY = SPEC & 255u;
const uint J = (SPEC >> 8) & 7u;
#endif
const uint NS = TY == TY_Q4_K ? 4u : (TY == TY_Q6_K || TY == TY_Q4_1) ? 2u : 1u;   // 16-byte scale words per unit and 8 rows
// sums per workgroup: 8 (H100: 16 were 20% slower in a 7b decode); the plain and RP_EPI builds with RP_ROWS=4u
// (mul_mat_vec_rp4 / _rpe4, option rp_rows=4): 4, twice the workgroups over the same rows (the scales' 16-byte word
// still covers 8). A literal, not a specialization: R derived from one made the NVIDIA driver's 8-row code 15% slower
// in a 7b decode and its float sums differ by an ulp from the RP_EPI build's.
#ifndef RP_ROWS
#define RP_ROWS 8u
#endif
const uint R = RP_ROWS;
const uint NH = TY == TY_Q6_K ? J * R : 1u;      // q6_K: 8-byte high-bit words per invocation
layout(std430, binding = 0) readonly buffer Rq { uvec4 rq[]; };
layout(std430, binding = 0) readonly buffer Rh { uvec2 rh[]; };   // q6_K's high-bit plane
#ifdef RP_GLU
const uint RA = 4u;                              // rows of W_a (then as many of W_b) per workgroup
layout(std430, binding = 2) readonly buffer Rq2 { uvec4 rq2[]; };
layout(std430, binding = 2) readonly buffer Rh2 { uvec2 rh2[]; };
layout(std430, binding = 3) buffer O3 { uint o3[]; };
layout(std430, binding = 6) buffer O6 { uint o6[]; };
#else
const uint RA = R;
#endif
#ifdef RP_NORM
layout(std430, binding = 6) buffer Sc { uint scu[]; };
shared float red[16];
#ifdef RP_NWR
layout(std430, binding = 7) writeonly buffer A7 { uint a7[]; };
#endif
#endif
#ifdef RP_EPI
#include "rope_cs.glsl"
layout(std430, binding = 6) buffer O6 { uint o6[]; };
layout(std430, binding = 7) buffer C7w { uint c7w[]; };
layout(std430, binding = 7) buffer C7h { uint16_t c7h[]; };
#endif
layout(std430, binding = 1) readonly buffer S1v { vec4 s1v[]; };
#if defined(RP_GLU) || defined(RP_EPI)
// norm-in (specialization bit 11, option rp_norm_in; vk_norm_in.c): the activations are a fused norm's result
// m = rms_norm(x [+ r]) * w, recomputed here from its inputs so that the dispatch runs beside the norm's, not a stage
// after it: binding 1 holds x; r (bit 12) at binding 8 and w at binding 9, their offsets at extras 20 and 26, eps at
// extra word NEPS. Each invocation quantizes (x + r) * w for its units and sums (x + r)^2 over them; the workgroup,
// whose invocations cover the row once, meets the squares with its row sums and scales those by 1 / rms.
const uint NIN = (SPEC >> 11) & 1u, NIR = (SPEC >> 12) & 1u;
layout(std430, binding = 8) readonly buffer Nr { vec4 nrv[]; };
layout(std430, binding = 9) readonly buffer Nw { vec4 nwv[]; };
#ifdef RP_GLU
const uint NEPS = 8u;
#else
const uint NEPS = 7u;
#endif
// fold-in (specialization bit 16, option fold_norm; vk_norm_in.c): the activations are the same norm's result, and
// binding 1 is the region a mul_mat_vec_rpn before the norm wrote (RP_NORM above): b = (x + r) * w as int8 with a
// scale per 8, then the squares of x + r per 8. Each workgroup sums the K / 8 squares (eps at NEPS) and scales its
// row sums by 1 / rms as norm-in does; it reads nothing the norm dispatch writes, so the two share a stage.
const uint QPS = (SPEC >> 16) & 1u;
#ifdef RP_NWR
layout(std430, binding = 8) writeonly buffer Nn8 { uint nn8[]; };
layout(std430, binding = 9) writeonly buffer Nm9 { uint nm9[]; };
#endif
#else
const uint NIN = 0u, NIR = 0u, QPS = 0u;
#endif
// q8-in (specialization bit 13, option mv_q8; vk_norm_in.c): binding 1 is the fused norm dispatch's int8 copy of the
// activations (norm_mul_reg.comp's Q8_OUT, one row: K / 4 words of quants, then (d, sum) per block of 32), read as
// quant_unit's result: the same quantization of the same floats, so the same bytes, in a fifth of the reads
const uint QIN = (SPEC >> 13) & 1u;
layout(std430, binding = 1) readonly buffer S1q { uvec4 s1q[]; };
uint qk4 = 0u;                                   // q8-in: K / 4, where the copy's (d, sum) pairs start (words)
float nss = 0.0;                                 // norm-in: this invocation's sum of (x + r)^2
uint nrb = 0u, nwb = 0u;                         // norm-in: r's and w's first vec4 in their bindings

// vec4 i of the activation row starting at vec4 yb (norm-in: (x + r) * w, its squares counted before w)
vec4 act(uint yb, uint i) {
    vec4 v = s1v[yb + i];
#if defined(RP_GLU) || defined(RP_EPI)
    if (NIN != 0u) {
        if (NIR != 0u) v += nrv[nrb + i];
        nss += dot(v, v);
        v *= nwv[nwb + i];
    }
#endif
    return v;
}
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6018, 6019], id = 4450)
int sdot4x8(uint x, uint y, spirv_literal int packed_format);   // OpSDot, PackedVectorFormat4x8Bit

shared float part[512];   // R sums per subgroup (at most 64 subgroups)
shared float part_ss[64]; // norm-in: each subgroup's sum of squares
// sum r of the workgroup: its subgroups' partial sums in subgroup order (after the barrier that follows their stores)
float part_sum(uint r) {
    float v = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; s++) v += part[s * R + r];
    return v;
}

uvec4 wq[J * R];                                 // the unit's quant words of each row, as loaded
uvec4 ws[J * NS], ws2[J * NS];                   // its scale words (RP_GLU: ws2 those of W_b)
uvec2 wh[NH];                                    // q6_K: each row's high bits of the unit

// the 16-byte word of scale word k (k < NS) of unit u for row group g8 (nb units per row): q4_0 the block's 8 scales;
// q4_K its super-block's group of 10 words: k = 0, 1 the (d, dmin) of rows 0-3 / 4-7, k = 2, 3 the scale and min
// bytes of the unit's sub-block pair for rows 0-3 / 4-7; q6_K its group of 9: k = 0 the 8 rows' d, k = 1 the unit's
// two int8 scales per row
uint sc_word(uint sc0, uint g8, uint nb, uint u, uint k) {
    if (TY == TY_Q6_K) {                         // after the quants (sc0 words) and the high bits (sc0 / 2)
        uint b6 = sc0 + (sc0 >> 1) + (g8 * (nb >> 3) + (u >> 3)) * 9u;
        return k == 0u ? b6 : b6 + 1u + (u & 7u);
    }
    if (TY == TY_Q4_1) return sc0 + (g8 * nb + u) * 2u + k;   // k = 0 the 8 rows' d, k = 1 their m
    if (TY != TY_Q4_K) return sc0 + g8 * nb + u;
    uint b = sc0 + (g8 * (nb >> 3) + (u >> 3)) * 10u;
    return k < 2u ? b + k : b + 2u * ((u & 7u) >> 1) + k;
}

// unit u's 32 consecutive activations (q4_0, q6_K) quantized with one scale (common.glsl's quant4), returned: y[k] elements 4k..4k+3, sa / sb
// the sums of the first and the second 16 quants
float quant_unit(uint yb, uint u, out uint y[8], out int sa, out int sb) {
    if (QIN != 0u) {
        uvec4 a = s1q[2u * u], b = s1q[2u * u + 1u];
        y = uint[8](a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
        sa = 0;
        sb = 0;
        [[unroll]] for (uint k = 0u; k < 4u; k++) {
            sa = sdot4x8(y[k], 0x01010101u, 0) + sa;
            sb = sdot4x8(y[4u + k], 0x01010101u, 0) + sb;
        }
        return uintBitsToFloat(s1w[qk4 + 2u * u]);
    }
    vec4 x[8];
    float amax = 0.0;
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
        x[k] = act(yb, 8u * u + k);
        amax = max(amax, amax4(x[k]));
    }
    float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
    sa = 0;
    sb = 0;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        y[k] = quant4(x[k], id, sa);
        y[4u + k] = quant4(x[4u + k], id, sb);
    }
    return d;
}

// q4_K: unit u's two 16-element halves of the activations (sub-blocks 2g and 2g + 1 of its super-block) quantized to
// int8 each with its own scale, dotted with the R rows' nibbles: acc[r] += d (sc0 dl lo + sc1 dh hi) - dmin (m0 dl sl +
// m1 dh sh), sl / sh the sums of the quantized halves (fold-in: each half's two 8-element blocks with their own scales)
void dot_q4_K(uint yb, uint u, uint j, uint h, inout float acc[R]) {
    uint e4 = (u >> 3) * 64u + ((u & 7u) >> 1) * 16u + (u & 1u) * 4u;   // the low half's first vec4
    float dl = 0.0, dh = 0.0, msl, msh;
    vec4 dq = vec4(0.0);                                 // fold-in: the halves' two scales each (low 0, 1, high 0, 1)
    uint yl[4], yh[4];
    if (QPS != 0u) {                                     // (int8 word e is vec4 e's four elements)
        uvec4 a = s1q[e4 >> 2], b = s1q[(e4 >> 2) + 2u];
        yl = uint[4](a.x, a.y, a.z, a.w);
        yh = uint[4](b.x, b.y, b.z, b.w);
        uint sb = qk4 + (e4 >> 1);
        dq = vec4(uintBitsToFloat(s1w[sb]), uintBitsToFloat(s1w[sb + 1u]), uintBitsToFloat(s1w[sb + 4u]), uintBitsToFloat(s1w[sb + 5u]));
        ivec4 n4;
        [[unroll]] for (uint k = 0u; k < 2u; k++) {
            n4[k] = sdot4x8(yl[2u * k], 0x01010101u, 0) + sdot4x8(yl[2u * k + 1u], 0x01010101u, 0);
            n4[2u + k] = sdot4x8(yh[2u * k], 0x01010101u, 0) + sdot4x8(yh[2u * k + 1u], 0x01010101u, 0);
        }
        msl = dq.x * float(n4.x) + dq.y * float(n4.y);
        msh = dq.z * float(n4.z) + dq.w * float(n4.w);
    } else {
        vec4 x[8];
        float al = 0.0, ah = 0.0;
        [[unroll]] for (uint k = 0u; k < 4u; k++) {
            x[k] = act(yb, e4 + k);
            x[4u + k] = act(yb, e4 + 8u + k);               // 32 elements on: the high nibbles' sub-block
            al = max(al, amax4(x[k]));
            ah = max(ah, amax4(x[4u + k]));
        }
        dl = al / 127.0;
        dh = ah / 127.0;
        float il = dl > 0.0 ? 1.0 / dl : 0.0, ih = dh > 0.0 ? 1.0 / dh : 0.0;
        int sl = 0, sh = 0;
        [[unroll]] for (uint k = 0u; k < 4u; k++) {
            yl[k] = quant4(x[k], il, sl);
            yh[k] = quant4(x[4u + k], ih, sh);
        }
        msl = dl * float(sl);
        msh = dh * float(sh);
    }
    [[unroll]] for (uint r = 0u; r < R; r++) {
        uvec4 q = wq[j * R + r];
        ivec4 lh = ivec4(0);                             // lo of the half's elements 0-7, 8-15, hi of 0-7, 8-15
        [[unroll]] for (uint k = 0u; k < 4u; k++) {
            int dl4 = sdot4x8(q[k] & 0x0f0f0f0fu, yl[k], 0), dh4 = sdot4x8((q[k] >> 4) & 0x0f0f0f0fu, yh[k], 0);
            if (k < 2u) { lh.x += dl4; lh.z += dh4; } else { lh.y += dl4; lh.w += dh4; }
        }
        uint s8 = h + (r < RA ? r : r - RA);             // the row's slot among its group's 8
        bool lo4 = s8 < 4u;                              // (words picked by selects: a computed index into a private
        uint o = j * NS;                                 // array would put it in local memory)
        uvec4 hdv = r < RA ? (lo4 ? ws[o] : ws[o + 1u]) : (lo4 ? ws2[o] : ws2[o + 1u]);
        uvec4 smv = r < RA ? (lo4 ? ws[o + 2u] : ws[o + 3u]) : (lo4 ? ws2[o + 2u] : ws2[o + 3u]);
        uint hd = hdv[s8 & 3u], sm = smv[s8 & 3u];
        vec2 dm = unpackHalf2x16(hd);
        if (QPS != 0u)
            acc[r] += dm.x * (float(sm & 255u) * (dq.x * float(lh.x) + dq.y * float(lh.y)) + float((sm >> 8) & 255u) * (dq.z * float(lh.z) + dq.w * float(lh.w)))
                    - dm.y * (float((sm >> 16) & 255u) * msl + float(sm >> 24) * msh);
        else
            acc[r] += dm.x * (float(sm & 255u) * dl * float(lh.x + lh.y) + float((sm >> 8) & 255u) * dh * float(lh.z + lh.w))
                    - dm.y * (float((sm >> 16) & 255u) * msl + float(sm >> 24) * msh);
    }
}

// fold-in: unit u of the producer's copy, returned: y[k] its quants 4k..4k+3 (sub-block s is words 2s, 2s + 1), m4[s]
// the sum of sub-block s's quants, and the four sub-blocks' scales
vec4 ps_unit(uint u, out uint y[8], out ivec4 m4) {
    uvec4 a = s1q[2u * u], b = s1q[2u * u + 1u];
    y = uint[8](a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
    [[unroll]] for (uint s = 0u; s < 4u; s++) m4[s] = sdot4x8(y[2u * s], 0x01010101u, 0) + sdot4x8(y[2u * s + 1u], 0x01010101u, 0);
    return uintBitsToFloat(s1q[(qk4 >> 2) + u]);
}

// q6_K: unit u's 32 activations quantized to int8 with one scale (as q4_0's), dotted with the rows' 6-bit quants (low
// nibbles | high bits << 4, biased by 32): acc[r] += d dy (sc0 (da - 32 sa) + sc1 (db - 32 sb)) over the unit's halves
void dot_q6_K(uint yb, uint u, uint j, uint h, inout float acc[R]) {
    uint y[8];
    int sa = 0, sb = 0;
    float dy = 0.0;
    vec4 dv = vec4(0.0);                                 // fold-in: the unit's four scales
    ivec4 m4 = ivec4(0);                                 // and its four 8-element sums
    if (QPS != 0u) {
        dv = ps_unit(u, y, m4);
    } else {
        dy = quant_unit(yb, u, y, sa, sb);
    }
    [[unroll]] for (uint r = 0u; r < R; r++) {
        uvec4 q = wq[j * R + r];
        uvec2 hb = wh[j * R + r];
        ivec4 ab = ivec4(0);                             // da of words 0-1, 2-3, db of words 0-1, 2-3
        [[unroll]] for (uint k = 0u; k < 4u; k++) {
            uint qa = (q[k] & 0x0f0f0f0fu) | (((hb.x >> (2u * k)) & 0x03030303u) << 4);
            uint qb = ((q[k] >> 4) & 0x0f0f0f0fu) | (((hb.y >> (2u * k)) & 0x03030303u) << 4);
            int da4 = sdot4x8(qa, y[k], 0), db4 = sdot4x8(qb, y[4u + k], 0);
            if (k < 2u) { ab.x += da4; ab.z += db4; } else { ab.y += da4; ab.w += db4; }
        }
        uint s8 = h + (r < RA ? r : r - RA);             // the row's slot among its group's 8
        uint o = j * NS;
        uint dwd = (r < RA ? ws[o] : ws2[o])[s8 >> 1] >> (16u * (s8 & 1u));
        uint scw = (r < RA ? ws[o + 1u] : ws2[o + 1u])[s8 >> 1] >> (16u * (s8 & 1u));
        int sc0 = int(scw << 24) >> 24, sc1 = int(scw << 16) >> 24;
        if (QPS != 0u) {
            vec4 t4 = dv * vec4(ab - 32 * m4);
            acc[r] += unpackHalf2x16(dwd).x * (float(sc0) * (t4.x + t4.y) + float(sc1) * (t4.z + t4.w));
        } else {
            acc[r] += unpackHalf2x16(dwd).x * dy * float(sc0 * (ab.x + ab.y - 32 * sa) + sc1 * (ab.z + ab.w - 32 * sb));
        }
    }
}

// fold-in: unit u's 32 int8 activations with a scale per 8 (ps_unit), dotted with the R
// rows' nibbles (low nibbles of word k: elements 4k..4k+3, high: 16 + 4k..): q4_0 w = dw (q - 8), q4_1 w = dw q + mw
void dot_ps(uint u, uint j, uint h, inout float acc[R]) {
    uint y[8];
    ivec4 m4;
    vec4 dv = ps_unit(u, y, m4);
    float ms = dot(dv, vec4(m4));
    [[unroll]] for (uint r = 0u; r < R; r++) {
        uvec4 q = wq[j * R + r], lo = q & 0x0f0f0f0fu, hi = (q >> 4) & 0x0f0f0f0fu;
        ivec4 s4 = ivec4(sdot4x8(lo.x, y[0], 0) + sdot4x8(lo.y, y[1], 0), sdot4x8(lo.z, y[2], 0) + sdot4x8(lo.w, y[3], 0),
                         sdot4x8(hi.x, y[4], 0) + sdot4x8(hi.y, y[5], 0), sdot4x8(hi.z, y[6], 0) + sdot4x8(hi.w, y[7], 0));
        float sd = dot(dv, vec4(s4));
        uint sl = h + (r < RA ? r : r - RA), o = j * NS;   // the row's slot among its group's 8 scales
        float dsc = unpackHalf2x16((r < RA ? ws[o] : ws2[o])[sl >> 1] >> (16u * (sl & 1u))).x;
        if (TY == TY_Q4_1) {
            uint mwd = (r < RA ? ws[o + 1u] : ws2[o + 1u])[sl >> 1] >> (16u * (sl & 1u));
            acc[r] += dsc * sd + unpackHalf2x16(mwd).x * ms;
        } else {
            acc[r] += dsc * (sd - 8.0 * ms);
        }
    }
}

void main() {
    uint rg = wg_linear();
    if (rg >= ex_u(0u)) return;   // uniform per workgroup: before the barrier
    uint K = t_ne(0u, 0u), M = t_ne(0u, 1u), nb = K >> 5, W = gl_WorkGroupSize.x, t = gl_LocalInvocationIndex;
    uint sc0 = ex_u(1u), yb = t_off(1u) >> 4;
    uint row0 = rg * RA, g8 = row0 >> 3, h = row0 & 7u;   // the first row, its group of 8 (the scales), its slot there
    if (NIN != 0u) { nrb = ex_u(20u) >> 4; nwb = ex_u(26u) >> 4; }
    qk4 = K >> 2;
    [[unroll]] for (uint j = 0u; j < J; j++) {
        uint u = j * W + t;
        bool ok = u < nb;
        [[unroll]] for (uint k = 0u; k < NS; k++) ws[j * NS + k] = ok ? rq[sc_word(sc0, g8, nb, u, k)] : uvec4(0u);
        [[unroll]] for (uint r = 0u; r < RA; r++) wq[j * R + r] = ok ? rq[(row0 + r) * nb + u] : uvec4(0u);
        if (TY == TY_Q6_K)
            [[unroll]] for (uint r = 0u; r < RA; r++) wh[j * R + r] = ok ? rh[2u * sc0 + (row0 + r) * nb + u] : uvec2(0u);
#ifdef RP_GLU
        [[unroll]] for (uint k = 0u; k < NS; k++) ws2[j * NS + k] = ok ? rq2[sc_word(sc0, g8, nb, u, k)] : uvec4(0u);
        [[unroll]] for (uint r = 0u; r < RA; r++) wq[j * R + RA + r] = ok ? rq2[(row0 + r) * nb + u] : uvec4(0u);
        if (TY == TY_Q6_K)
            [[unroll]] for (uint r = 0u; r < RA; r++) wh[j * R + RA + r] = ok ? rh2[2u * sc0 + (row0 + r) * nb + u] : uvec2(0u);
#endif
    }
    // fold-in: this invocation's share of the producer's K / 8 squares (at most 4 J: W >= K / 32 / J), loaded here with
    // the weights and summed after the dots (summed as loaded, each load's wait stalled the dots behind it: H100)
    float pv[4u * J];
    if (QPS != 0u)
        [[unroll]] for (uint q = 0u; q < 4u * J; q++) {
            uint g = q * W + t;
            pv[q] = g < (K >> 3) ? uintBitsToFloat(s1w[(K >> 2) + (K >> 3) + g]) : 0.0;
        }
#if defined(RP_NWR) && !defined(RP_NORM)
    uint ei = rg * W + t;                                // fold_nodes: this invocation's element of the norm's row
    float ea = 0.0, ew = 0.0;
    if (ei < K) { ea = uintBitsToFloat(s1w[(K >> 1) + ei]); ew = uintBitsToFloat(s1w[(K >> 1) + K + ei]); }
#endif
#ifdef RP_NORM
    float rr = 0.0, rw = 0.0;                            // this invocation's element of r and of w (t < 8), loaded early
    if (t < R && rg * R + t < M) { rr = uintBitsToFloat(s2w[(t_off(2u) >> 2) + rg * R + t]); rw = uintBitsToFloat(s3w[(t_off(3u) >> 2) + rg * R + t]); }
#endif
    float acc[R];
    [[unroll]] for (uint r = 0u; r < R; r++) acc[r] = 0.0;
    [[unroll]] for (uint j = 0u; j < J; j++) {
        uint u = j * W + t;
        if (u >= nb) continue;
        if (TY == TY_Q4_K) {
            dot_q4_K(yb, u, j, h, acc);
            continue;
        }
        if (TY == TY_Q6_K) {
            dot_q6_K(yb, u, j, h, acc);
            continue;
        }
        if (QPS != 0u) {
            dot_ps(u, j, h, acc);
            continue;
        }
        uint y[8];
        int sa, sb;
        float d = quant_unit(yb, u, y, sa, sb);
        float m8 = 8.0 * float(sa + sb), ms = d * float(sa + sb);
        [[unroll]] for (uint r = 0u; r < R; r++) {
            uvec4 q = wq[j * R + r];
            int s = 0;
            [[unroll]] for (uint k = 0u; k < 4u; k++)   // word k: weights 4k..4k+3 (low nibbles), 16+4k.. (high)
                s += sdot4x8(q[k] & 0x0f0f0f0fu, y[k], 0) + sdot4x8((q[k] >> 4) & 0x0f0f0f0fu, y[4u + k], 0);
            uint sl = h + (r < RA ? r : r - RA), o = j * NS;   // the row's slot among its group's 8 scales
            float dsc = unpackHalf2x16((r < RA ? ws[o] : ws2[o])[sl >> 1] >> (16u * (sl & 1u))).x;
            if (TY == TY_Q4_1) {   // w = dw q + mw: d dw sum(q y) + d mw sum(y)
                uint mwd = (r < RA ? ws[o + 1u] : ws2[o + 1u])[sl >> 1] >> (16u * (sl & 1u));
                acc[r] += dsc * d * float(s) + unpackHalf2x16(mwd).x * ms;
            } else {               // w = dw (q - 8)
                acc[r] += dsc * d * (float(s) - m8);
            }
        }
    }
    [[unroll]] for (uint r = 0u; r < R; r++) acc[r] = subgroupAdd(acc[r]);
    if (subgroupElect()) [[unroll]] for (uint r = 0u; r < R; r++) part[gl_SubgroupID * R + r] = acc[r];
    if (QPS != 0u) [[unroll]] for (uint q = 0u; q < 4u * J; q++) nss += pv[q];
    if (NIN != 0u || QPS != 0u) {
        float ss = subgroupAdd(nss);
        if (subgroupElect()) part_ss[gl_SubgroupID] = ss;
    }
    barrier();
    float nsc = 1.0;                                      // norm-in: 1 / rms of x + r (norm_mul_reg's arithmetic)
#if defined(RP_GLU) || defined(RP_EPI)
    if (NIN != 0u || QPS != 0u) {
        float tot = 0.0;
        for (uint s = 0u; s < gl_NumSubgroups; s++) tot += part_ss[s];
        nsc = 1.0 / sqrt(tot / float(K) + ex_f(NEPS));
    }
#ifdef RP_NWR
    if (ei < K) {
        float nv = ea * nsc;
        nn8[(ex_u(20u) >> 2) + ei] = floatBitsToUint(nv);
        nm9[(ex_u(26u) >> 2) + ei] = floatBitsToUint(nv * ew);
    }
#endif
#endif
#ifdef RP_GLU
    if (t < RA) {
        float va = part_sum(t) * nsc, vb = part_sum(RA + t) * nsc;
        uint row = row0 + t;
        if (row < M) {
            o3[(t_off(3u) >> 2) + row] = floatBitsToUint(va);
            o6[(ex_u(2u) >> 2) + row] = floatBitsToUint(vb);
            dw[(t_off(4u) >> 2) + row] = floatBitsToUint(silu(va) * vb);
        }
    }
#elif defined(RP_NORM)
    if (t < R) {
        float v = part_sum(t), ra = 0.0, rb = 0.0;
        uint row = rg * R + t;
        if (row < M) {
            dw[(t_off(4u) >> 2) + row] = floatBitsToUint(v);
            ra = rr + v;                                  // (r + y: the add's two operands, in either order)
            rb = ra * rw;
#ifdef RP_NWR
            a7[(ex_u(14u) >> 2) + row] = floatBitsToUint(ra);
            scu[(M >> 1) + row] = floatBitsToUint(ra);
            scu[(M >> 1) + M + row] = floatBitsToUint(rw);
#endif
        }
        red[t] = rb;
        red[R + t] = ra * ra;
    }
    barrier();
    if (t == 0u) {   // the workgroup's 8 elements of b as int8 (the readers' quantization), their scale, their squares
        float amax = 0.0, ss = 0.0;
        for (uint r = 0u; r < R; r++) { amax = max(amax, abs(red[r])); ss += red[R + r]; }
        float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
        int qs = 0;
        scu[2u * rg] = quant4(vec4(red[0], red[1], red[2], red[3]), id, qs);
        scu[2u * rg + 1u] = quant4(vec4(red[4], red[5], red[6], red[7]), id, qs);
        scu[(M >> 2) + rg] = floatBitsToUint(d);
        scu[(M >> 2) + (M >> 3) + rg] = floatBitsToUint(ss);
    }
#elif defined(RP_EPI)
    if (t < R) {
        float v = part_sum(t) * nsc, vp = part_sum(t ^ 1u) * nsc;   // this row's sum and its rope partner's (row ^ 1)
        uint row = rg * R + t, mode = ex_u(2u);
        if (row < M) {
            dw[(t_off(4u) >> 2) + row] = floatBitsToUint(v);
            float o = v;
            if ((mode & 1u) != 0u) {
                uint ia = row % ex_u(6u), i0 = ia & ~1u;
                if (i0 < uint(op_i(0u))) {
                    float pos = float(int(rd32(2u, t_off(2u))));
                    vec2 cs = rope_cs(pos, i0, ex_f(3u), ex_f(4u), ex_f(5u), 1.0);
                    float x0 = (ia & 1u) == 0u ? v : vp, x1 = (ia & 1u) == 0u ? vp : v;
                    o = (ia & 1u) == 0u ? x0 * cs.x - x1 * cs.y : x0 * cs.y + x1 * cs.x;
                }
                o6[(ex_u(8u) >> 2) + row] = floatBitsToUint(o);
            }
            if ((mode & 2u) != 0u) {
                uint at = ex_u(14u) + row * ex_u(16u) + rd32(3u, t_off(3u)) * ex_u(17u), ty = ex_u(15u);
                if (ty == TY_F16) c7h[at >> 1] = uint16_t(f32_to_f16(o));
                else if (ty == TY_BF16) c7h[at >> 1] = uint16_t(f32_to_bf16(o));
                else c7w[at >> 2] = floatBitsToUint(o);
            }
        }
    }
#else
    if (t < R) {
        float v = part_sum(t);
        uint row = rg * R + t;
        if (row < M) dw[(t_off(4u) >> 2) + row] = floatBitsToUint(v);
    }
#endif
}
