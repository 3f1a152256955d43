// Shared by every pyggml Vulkan compute shader.
// Bindings 0..3 = src[0..3], 4 = dst, 5 = the dispatch's parameter block (uniform) (see vk_internal.h:
// VKP_* word offsets). Tensor data is read through 32-bit and 16-bit views of the same binding,
// addressed in bytes relative to the binding start (tensor offsets need only 2-byte alignment).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require

layout(std430, binding = 0) readonly buffer S0w { uint s0w[]; };
layout(std430, binding = 0) readonly buffer S0h { uint16_t s0h[]; };
layout(std430, binding = 1) readonly buffer S1w { uint s1w[]; };
layout(std430, binding = 1) readonly buffer S1h { uint16_t s1h[]; };
layout(std430, binding = 2) readonly buffer S2w { uint s2w[]; };
layout(std430, binding = 2) readonly buffer S2h { uint16_t s2h[]; };
layout(std430, binding = 3) readonly buffer S3w { uint s3w[]; };
layout(std430, binding = 3) readonly buffer S3h { uint16_t s3h[]; };
layout(std430, binding = 4) buffer Dw { uint dw[]; };
layout(std430, binding = 4) buffer Dh { uint16_t dh[]; };
// The parameter block is a uniform buffer (the constant cache on GPUs: every invocation reads the
// same words) of VKP_PARAM_WORDS 32-bit words, viewed as std140 uvec4s.
layout(std140, binding = 5) uniform Params { uvec4 p4[32]; };
uint pw(uint i) { return p4[i >> 2][i & 3u]; }

#define TY_F32 0u
#define TY_F16 1u
#define TY_Q4_0 2u
#define TY_Q4_1 3u
#define TY_Q8_0 8u
#define TY_Q4_K 12u
#define TY_Q6_K 14u
#define TY_I32 26u
#define TY_BF16 30u
#define TY_I64 27u

// parameter block layout: tensor slot t (0..3 src, 4 dst) at word 16*t
uint t_off(uint t) { return pw(16u * t); }
uint t_type(uint t) { return pw(16u * t + 1u); }
uint t_ne(uint t, uint i) { return pw(16u * t + 4u + i); }
uint t_nb(uint t, uint i) { return pw(16u * t + 8u + i); }
int op_i(uint i) { return int(pw(80u + i)); }
float op_f(uint i) { return uintBitsToFloat(pw(80u + i)); }
uint ex_u(uint i) { return pw(96u + i); }
float ex_f(uint i) { return uintBitsToFloat(pw(96u + i)); }
#define P_TOTAL 127u

// linear workgroup id across a (x, y, z) dispatch folded by the host
uint wg_linear() {
    return gl_WorkGroupID.x + gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
}

uint rd32(uint s, uint o) {
    switch (s) {
    case 0u: return s0w[o >> 2];
    case 1u: return s1w[o >> 2];
    case 2u: return s2w[o >> 2];
    case 3u: return s3w[o >> 2];
    default: return dw[o >> 2];
    }
}
uint rd16(uint s, uint o) {
    switch (s) {
    case 0u: return uint(s0h[o >> 1]);
    case 1u: return uint(s1h[o >> 1]);
    case 2u: return uint(s2h[o >> 1]);
    case 3u: return uint(s3h[o >> 1]);
    default: return uint(dh[o >> 1]);
    }
}
uint rd8(uint s, uint o) {
    uint w = rd16(s, o & ~1u);
    return ((o & 1u) != 0u) ? (w >> 8) : (w & 0xFFu);
}
float half_at(uint s, uint o) { return unpackHalf2x16(rd16(s, o)).x; }

// f32 -> f16 bits, round to nearest even (bit-exact with F16C / numpy)
uint f32_to_f16(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint e = (x >> 23) & 0xFFu;
    uint m = x & 0x7FFFFFu;
    if (e == 0xFFu) return sign | 0x7C00u | (m != 0u ? 0x200u | (m >> 13) : 0u);
    int ee = int(e) - 127 + 15;
    if (ee >= 31) return sign | 0x7C00u;
    if (ee <= 0) {
        if (ee < -10) return sign;
        m |= 0x800000u;
        uint shift = uint(14 - ee);
        uint h = m >> shift;
        uint rem = m & ((1u << shift) - 1u);
        uint half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (h & 1u) != 0u)) h += 1u;
        return sign | h;
    }
    uint h = (uint(ee) << 10) | (m >> 13);
    uint rem = m & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h += 1u;
    return sign | h;
}

// f32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN
uint f32_to_bf16(float f) {
    uint u = floatBitsToUint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 64u;
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

// load element at byte offset o of slot s, plain types
float ldf(uint s, uint o, uint ty) {
    if (ty == TY_F16) return half_at(s, o);
    if (ty == TY_BF16) return uintBitsToFloat(rd16(s, o) << 16);
    if (ty == TY_I32) return float(int(rd32(s, o)));
    return uintBitsToFloat(rd32(s, o));
}
void stf(uint o, uint ty, float v) {
    if (ty == TY_F16) dh[o >> 1] = uint16_t(f32_to_f16(v));
    else if (ty == TY_BF16) dh[o >> 1] = uint16_t(f32_to_bf16(v));
    else dw[o >> 2] = floatBitsToUint(v);
}

// element k of a row starting at byte rb of slot s; nb0 = byte stride of plain types
// q4_K: sub-block j's 6-bit scale and min from the 12 scale bytes of the block at byte b of binding s (ggml's packing)
void q4k_scale_min(uint s, uint b, uint j, out uint sc, out uint mn) {
    if (j < 4u) {
        sc = rd8(s, b + 4u + j) & 63u;
        mn = rd8(s, b + 8u + j) & 63u;
    } else {
        uint a = rd8(s, b + 8u + j);
        sc = (a & 15u) | ((rd8(s, b + j) >> 6) << 4);
        mn = (a >> 4) | ((rd8(s, b + 4u + j) >> 6) << 4);
    }
}

// q6_K: the 6-bit quant (0..63; 32 is zero) of element e of the block at byte b of binding s (ggml's ql / qh planes)
uint q6k_quant(uint s, uint b, uint e) {
    uint n = e >> 7, r = e & 127u, qq = r >> 5, l = r & 31u;
    uint ql = rd8(s, b + 64u * n + l + (qq & 1u) * 32u);
    ql = qq >= 2u ? (ql >> 4) : (ql & 15u);
    return ql | (((rd8(s, b + 128u + 32u * n + l) >> (2u * qq)) & 3u) << 4);
}

// the int8 quantization of activations the integer-dot mat-vecs read (d = amax / 127, round to even): amax4 is a vec4's
// largest magnitude; quant4 packs x * id as four int8 bytes of one word and adds their sum to s
float amax4(vec4 x) { vec4 a = abs(x); return max(max(a.x, a.y), max(a.z, a.w)); }
uint quant4(vec4 x, float id, inout int s) {
    ivec4 q = clamp(ivec4(roundEven(x * id)), ivec4(-127), ivec4(127));
    s += q.x + q.y + q.z + q.w;
    return uint(q.x & 255) | uint(q.y & 255) << 8 | uint(q.z & 255) << 16 | uint(q.w & 255) << 24;
}

float deq(uint s, uint rb, uint k, uint ty, uint nb0) {
    if (ty == TY_F32 || ty == TY_F16 || ty == TY_BF16) return ldf(s, rb + k * nb0, ty);
    if (ty == TY_Q4_0) {
        uint b = rb + (k >> 5) * 18u, j = k & 31u;
        uint q = rd8(s, b + 2u + (j & 15u));
        q = j < 16u ? (q & 15u) : (q >> 4);
        return half_at(s, b) * (float(q) - 8.0);
    }
    if (ty == TY_Q4_1) {   // f16 d, f16 m, the nibbles as q4_0's: w = d q + m
        uint b = rb + (k >> 5) * 20u, j = k & 31u;
        uint q = rd8(s, b + 4u + (j & 15u));
        q = j < 16u ? (q & 15u) : (q >> 4);
        return half_at(s, b) * float(q) + half_at(s, b + 2u);
    }
    if (ty == TY_Q8_0) {
        uint b = rb + (k >> 5) * 34u, j = k & 31u;
        int q = int(rd8(s, b + 2u + j));
        q = q >= 128 ? q - 256 : q;
        return half_at(s, b) * float(q);
    }
    if (ty == TY_Q4_K) {
        uint b = rb + (k >> 8) * 144u, e = k & 255u;
        uint sub = e >> 5, l = e & 31u;
        uint qb = rd8(s, b + 16u + 32u * (sub >> 1) + l);
        uint q = (sub & 1u) != 0u ? (qb >> 4) : (qb & 15u);
        uint sc, mn;
        q4k_scale_min(s, b, sub, sc, mn);
        return half_at(s, b) * float(sc) * float(q) - half_at(s, b + 2u) * float(mn);
    }
    if (ty == TY_Q6_K) {
        uint b = rb + (k >> 8) * 210u, e = k & 255u;
        uint n = e >> 7, qq = (e & 127u) >> 5, l = e & 31u;
        int q = int(q6k_quant(s, b, e)) - 32;
        int sc = int(rd8(s, b + 192u + 8u * n + (l >> 4) + 2u * qq));
        sc = sc >= 128 ? sc - 256 : sc;
        return half_at(s, b + 208u) * float(sc) * float(q);
    }
    return 0.0;
}

// byte offset of element (i0..i3) of tensor slot t (plain types)
uint t_at(uint t, uint i0, uint i1, uint i2, uint i3) {
    return t_off(t) + i0 * t_nb(t, 0u) + i1 * t_nb(t, 1u) + i2 * t_nb(t, 2u) + i3 * t_nb(t, 3u);
}
uint t_row(uint t, uint i1, uint i2, uint i3) {
    return t_off(t) + i1 * t_nb(t, 1u) + i2 * t_nb(t, 2u) + i3 * t_nb(t, 3u);
}
void unravel(uint t, uint i, out uint i0, out uint i1, out uint i2, out uint i3) {
    uint n0 = t_ne(t, 0u), n1 = t_ne(t, 1u), n2 = t_ne(t, 2u);
    i0 = i % n0; i /= n0;
    i1 = i % n1; i /= n1;
    i2 = i % n2; i3 = i / n2;
}

float silu(float x) { return x / (1.0 + exp(-x)); }

float tanh_s(float y) {
    float a = abs(y);
    float t = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    return y < 0.0 ? -t : t;
}

// ALiBi slope for head h of n_head (max_bias > 0)
float alibi_slope(float max_bias, uint h, uint n_head) {
    if (max_bias <= 0.0) return 1.0;
    uint nl2 = 1u << uint(floor(log2(float(n_head))));
    float m0 = exp2(-max_bias / float(nl2));
    float m1 = exp2(-(max_bias / 2.0) / float(nl2));
    return h < nl2 ? pow(m0, float(h + 1u)) : pow(m1, float(2u * (h - nl2) + 1u));
}
