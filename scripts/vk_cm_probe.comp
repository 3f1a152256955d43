#version 450
// scripts/vk_cm_probe.comp — the tensor cores' rate through VK_KHR_cooperative_matrix, per operand type, for
// scripts/vk_cm_probe.c (which builds it four times with -DV=0..3, through scripts/glslang_khr.py):
//   V=0  f16 x f16 -> f32 accumulators (16x16x16)     V=1  f16 x f16 -> f16 accumulators (16x16x16)
//   V=2  int8 x int8 -> int32 accumulators (16x16x32)
//   V=3  as 2, each 32-deep product then scaled into f32 accumulators element by element: acc[r, c] +=
//        float(p[r, c]) * sa[r] * sb[c], with (r, c) of an element read from an index matrix loaded once (the
//        element-to-lane mapping is the implementation's; a matrix of the same type maps the same way). That is the
//        step a q4_0 x q8_1 GEMM on int8 products needs per 32-element block (CUDA's MMQ does it in registers).
// Each subgroup keeps FM x FN = 2 x 2 accumulators; each of ITER steps loads 2 A and 2 B fragments from shared
// memory (filled from the input buffer once) and makes the 4 products. The results go to the output buffer, so that
// the host checks V=3 against its own arithmetic (and nothing is optimized away).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;   // 4 subgroups of 32
layout(push_constant) uniform P { uint iter; } pc;
layout(std430, binding = 0) readonly buffer In { uvec4 src[]; };     // A tiles, then B tiles, then scales
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };   // per workgroup: 4 subgroups x 4 tiles of 256

#if V <= 1
#define KD 16u
#define TA float16_t
#if V == 0
#define TC float
#else
#define TC float16_t
#endif
#else
#define KD 32u
#define TA int8_t
#define TC int32_t
#endif
#define MA coopmat<TA, gl_ScopeSubgroup, 16, KD, gl_MatrixUseA>
#define MB coopmat<TA, gl_ScopeSubgroup, KD, 16, gl_MatrixUseB>
#define MC coopmat<TC, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MF coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MI coopmat<int32_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

const uint NS = 8u;                      // shared-memory copies of the 2 + 2 fragments (steps cycle through them)
const uint FW = 32u;                     // 16-byte words per fragment: 16 x KD elements of 2 (f16) or 1 (int8) bytes,
                                         // rows (A) or columns (B) of 32 bytes, 2 words each
shared uvec4 sh[NS * 4u * FW];           // [copy][fragment: a0 a1 b0 b1][rows / columns]
shared uvec4 ss[NS * 16u];               // V=3: per copy 64 f32 scales (a0's and a1's rows, then b0's and b1's columns)
shared uvec4 sidx[64];                   // V=3: the index table, 16 x 16 int32: row * 16 + column
#if V == 3
#define ACC MF
#else
#define ACC MC
#endif
float scale(uint c, uint x) { uint i = c * 64u + x; return uintBitsToFloat(ss[i >> 2][i & 3u]); }

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint i = t; i < NS * 4u * FW; i += 128u) sh[i] = src[i];
    for (uint i = t; i < NS * 16u; i += 128u) ss[i] = src[NS * 4u * FW + i];
    for (uint i = t; i < 64u; i += 128u) sidx[i] = uvec4(4u * i, 4u * i + 1u, 4u * i + 2u, 4u * i + 3u);
    barrier();
    uint sg = gl_SubgroupID;
    ACC acc[4];
#if V == 3
    MI idx;
    coopMatLoad(idx, sidx, 0u, 4u, gl_CooperativeMatrixLayoutRowMajor);
#endif
    [[unroll]] for (uint f = 0u; f < 4u; f++) acc[f] = ACC(0);
    for (uint s = 0u; s < pc.iter; s++) {
        uint c = (s + sg) % NS;
        MA a[2]; MB b[2];
        [[unroll]] for (uint f = 0u; f < 2u; f++) {
            coopMatLoad(a[f], sh, (c * 4u + f) * FW, 2u, gl_CooperativeMatrixLayoutRowMajor);
            coopMatLoad(b[f], sh, (c * 4u + 2u + f) * FW, 2u, gl_CooperativeMatrixLayoutColumnMajor);
        }
        [[unroll]] for (uint fm = 0u; fm < 2u; fm++)
            [[unroll]] for (uint fn = 0u; fn < 2u; fn++) {
#if V == 3
                MI p = coopMatMulAdd(a[fm], b[fn], MI(0));
                [[unroll]] for (uint e = 0u; e < p.length(); e++) {
                    uint rc = uint(idx[e]);
                    acc[fm * 2u + fn][e] += float(p[e]) * scale(c, fm * 16u + (rc >> 4)) * scale(c, 32u + fn * 16u + (rc & 15u));
                }
#else
                acc[fm * 2u + fn] = coopMatMulAdd(a[fm], b[fn], acc[fm * 2u + fn]);
#endif
            }
    }
    uint o = (gl_WorkGroupID.x * 4u + sg) * 4u * 256u;
    [[unroll]] for (uint f = 0u; f < 4u; f++) {
#if V == 0 || V == 3
        coopMatStore(acc[f], dst, o + f * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
#else
        MF x = MF(acc[f]);
        coopMatStore(x, dst, o + f * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
#endif
    }
}
