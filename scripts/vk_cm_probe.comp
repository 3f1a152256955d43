#version 450
// scripts/vk_cm_probe.comp — the tensor cores' rate through VK_KHR_cooperative_matrix, per operand type and
// accumulator layout, for scripts/vk_cm_probe.c (which builds it with -DV=0..NV-1, through scripts/glslang_khr.py;
// its table VARIANTS says the same as this one):
//   V  operands -> sums       B/acc cols  FM x FN   note
//   0  f16 -> f32             16          2 x 2
//   1  f16 -> f16             16          2 x 2
//   2  int8 -> int32 (K 32)   16          2 x 2
//   3  int8 -> int32, each 32-deep product then scaled into f32 accumulators element by element: acc[r, c] +=
//      float(p[r, c]) * sa[r] * sb[c], (r, c) of an element read from an index matrix loaded once (the element-to-lane
//      mapping is the implementation's; a matrix of the same type maps the same way): what a q4_0 x q8_1 GEMM on
//      int8 products needs per 32-element block
//   4  f16 -> f32             8           2 x 4     mul_mat_cm4's KHR shape and its auto tile's count (16x8x16)
//   5  f16 -> f16             8           2 x 4
//   6  f16 -> f32             8           2 x 4     FM, FN and the workgroup size from specialization constants
//                                                   (as mul_mat_cm4 sizes its arrays)
//   7  f16 -> f32             16          4 x 4     16 accumulators
//   8  f16 -> f32             8           4 x 8     32 accumulators of 16x8 (128 f32 registers a lane)
//   9  f16 -> f16             8           4 x 8
//  10  f16 -> f32             16          2 x 2     fragments loaded once, before the loop (the products alone)
//  11  f16 -> f32             8           2 x 8     fragments loaded once (mul_mat_cm4's 64x128.k64.w2x2 subgroup in
//                                                   its debug_gemm_parts=3 loop), stored row-major into the output
//  12  as 11, each accumulator stored column-major into a shared uvec4 array (mul_mat_cm4's staging tile Cs), copied out
//  13  as 11, stored column-major into a shared float array, copied out
//  14  as 11, stored column-major into the output
//  15  as 11, stored column-major into a shared vec4 array, copied out
//  16  as 11, every subgroup's fragments from copy 0 re-laid with rows 9 16-byte words apart (mul_mat_cm4's tiles at
//      64-element steps: 64 halves and a word of padding), loaded from there
// Each subgroup keeps FM x FN accumulators; each of ITER steps loads FM A and FN B fragments from shared memory
// (filled from the input buffer once) and makes the FM x FN products. The first 8 workgroups store their results,
// which the host checks against its own arithmetic (the store depends on the workgroup, so nothing is optimized away).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_control_flow_attributes : require
#if V == 6
layout(local_size_x = 128, local_size_x_id = 1) in;   // 4 subgroups of 32 (the host passes 128)
layout(constant_id = 0) const uint FM = 1u;
layout(constant_id = 2) const uint FN = 1u;
#else
layout(local_size_x = 128) in;                         // 4 subgroups of 32
#if V == 7
const uint FM = 4u, FN = 4u;
#elif V == 8 || V == 9
const uint FM = 4u, FN = 8u;
#elif V == 4 || V == 5
const uint FM = 2u, FN = 4u;
#elif V >= 11
const uint FM = 2u, FN = 8u;
#else
const uint FM = 2u, FN = 2u;
#endif
#endif
#if V == 4 || V == 5 || V == 6 || V == 8 || V == 9 || V >= 11
#define CN 8
#else
#define CN 16
#endif
layout(push_constant) uniform P { uint iter; } pc;
layout(std430, binding = 0) readonly buffer In { uvec4 src[]; };     // fragment slots, then scales
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };   // per workgroup < 8: 4 subgroups x FM x FN tiles

#if V == 2 || V == 3
#define KD 32u
#define TA int8_t
#define TC int32_t
#else
#define KD 16u
#define TA float16_t
#if V == 1 || V == 5 || V == 9
#define TC float16_t
#else
#define TC float
#endif
#endif
#define MA coopmat<TA, gl_ScopeSubgroup, 16, KD, gl_MatrixUseA>
#define MB coopmat<TA, gl_ScopeSubgroup, KD, CN, gl_MatrixUseB>
#define MC coopmat<TC, gl_ScopeSubgroup, 16, CN, gl_MatrixUseAccumulator>
#define MF coopmat<float, gl_ScopeSubgroup, 16, CN, gl_MatrixUseAccumulator>
#define MI coopmat<int32_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

const uint NS = 4u;                      // shared-memory copies of the fragments (steps cycle through them)
const uint SL = 12u;                     // fragment slots per copy: A in 0..3, B in 4..11
const uint FW = 32u;                     // 16-byte words per slot: 16 rows (A) or up to 16 columns (B) of 32 bytes
                                         // (16 f16 or 32 int8 elements), 2 words each
shared uvec4 sh[NS * SL * FW];           // [copy][slot][rows / columns]
shared uvec4 ss[NS * 16u];               // V=3: per copy 64 f32 scales (a0's and a1's rows, then b0's and b1's columns)
shared uvec4 sidx[64];                   // V=3: the index table, 16 x 16 int32: row * 16 + column
#if V == 12
shared uvec4 cst[4u * 32u];              // a 16x8 f32 staging tile per subgroup
#elif V == 13
shared float cst[4u * 128u];
#elif V == 15
shared vec4 cst[4u * 32u];
#elif V == 16
const uint LD = 9u;                      // row stride of the re-laid tiles, in 16-byte words
shared uvec4 pad[(FM * 16u + FN * CN) * LD];   // A rows, then B columns
#endif
#if V == 3
#define ACC MF
#else
#define ACC MC
#endif
float scale(uint c, uint x) { uint i = c * 64u + x; return uintBitsToFloat(ss[i >> 2][i & 3u]); }

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint i = t; i < NS * SL * FW; i += gl_WorkGroupSize.x) sh[i] = src[i];
    for (uint i = t; i < NS * 16u; i += gl_WorkGroupSize.x) ss[i] = src[NS * SL * FW + i];
    for (uint i = t; i < 64u; i += gl_WorkGroupSize.x) sidx[i] = uvec4(4u * i, 4u * i + 1u, 4u * i + 2u, 4u * i + 3u);
    barrier();
#if V == 16
    for (uint i = t; i < (FM * 16u + FN * CN) * LD; i += gl_WorkGroupSize.x) {
        uint r = i / LD, w = i % LD;   // A rows 0..FM*16-1 (fragment r / 16), then B columns (fragment (r - FM*16) / CN)
        uint slot = r < FM * 16u ? r / 16u : 4u + (r - FM * 16u) / CN, rc = r < FM * 16u ? r % 16u : (r - FM * 16u) % CN;
        pad[i] = w < 2u ? sh[slot * FW + rc * 2u + w] : uvec4(0u);
    }
    barrier();
#endif
    uint sg = gl_SubgroupID;
    ACC acc[FM * FN];
#if V == 3
    MI idx;
    coopMatLoad(idx, sidx, 0u, 4u, gl_CooperativeMatrixLayoutRowMajor);
#endif
    [[unroll]] for (uint f = 0u; f < FM * FN; f++) acc[f] = ACC(0);
#if V == 16
    MA a[FM]; MB b[FN];
    [[unroll]] for (uint f = 0u; f < FM; f++) coopMatLoad(a[f], pad, f * 16u * LD, LD, gl_CooperativeMatrixLayoutRowMajor);
    [[unroll]] for (uint f = 0u; f < FN; f++) coopMatLoad(b[f], pad, (FM * 16u + f * CN) * LD, LD, gl_CooperativeMatrixLayoutColumnMajor);
#elif V == 10 || V >= 11
    MA a[FM]; MB b[FN];
    {
        uint c = sg % NS;
        [[unroll]] for (uint f = 0u; f < FM; f++) coopMatLoad(a[f], sh, (c * SL + f) * FW, 2u, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint f = 0u; f < FN; f++) coopMatLoad(b[f], sh, (c * SL + 4u + f) * FW, 2u, gl_CooperativeMatrixLayoutColumnMajor);
    }
#endif
    for (uint s = 0u; s < pc.iter; s++) {
        uint c = (s + sg) % NS;
#if V != 10 && V < 11
        MA a[FM]; MB b[FN];
        [[unroll]] for (uint f = 0u; f < FM; f++) coopMatLoad(a[f], sh, (c * SL + f) * FW, 2u, gl_CooperativeMatrixLayoutRowMajor);
        [[unroll]] for (uint f = 0u; f < FN; f++) coopMatLoad(b[f], sh, (c * SL + 4u + f) * FW, 2u, gl_CooperativeMatrixLayoutColumnMajor);
#endif
        [[unroll]] for (uint fm = 0u; fm < FM; fm++)
            [[unroll]] for (uint fn = 0u; fn < FN; fn++) {
#if V == 3
                MI p = coopMatMulAdd(a[fm], b[fn], MI(0));
                [[unroll]] for (uint e = 0u; e < p.length(); e++) {
                    uint rc = uint(idx[e]);
                    acc[fm * FN + fn][e] += float(p[e]) * scale(c, fm * 16u + (rc >> 4)) * scale(c, 32u + fn * 16u + (rc & 15u));
                }
#else
                acc[fm * FN + fn] = coopMatMulAdd(a[fm], b[fn], acc[fm * FN + fn]);
#endif
            }
    }
    if (gl_WorkGroupID.x >= 8u) return;
    uint o = (gl_WorkGroupID.x * 4u + sg) * FM * FN * (16u * CN);
    [[unroll]] for (uint f = 0u; f < FM * FN; f++) {
#if V == 12 || V == 13 || V == 15
        coopMatStore(acc[f], cst, sg * (V == 13 ? 128u : 32u), V == 13 ? 16u : 4u, gl_CooperativeMatrixLayoutColumnMajor);
        subgroupMemoryBarrierShared(); subgroupBarrier();
        for (uint e = gl_SubgroupInvocationID; e < 128u; e += gl_SubgroupSize) {
            uint x = (e >> 4) * 16u + (e & 15u);   // (row e & 15, column e >> 4), column-major in the staging tile
#if V == 12
            float v = uintBitsToFloat(cst[sg * 32u + (x >> 2)][x & 3u]);
#elif V == 15
            float v = cst[sg * 32u + (x >> 2)][x & 3u];
#else
            float v = cst[sg * 128u + x];
#endif
            dst[o + f * 128u + (e & 15u) * 8u + (e >> 4)] = v;
        }
        subgroupMemoryBarrierShared(); subgroupBarrier();
#elif V == 14
        coopMatStore(acc[f], dst, o + f * 128u, 16u, gl_CooperativeMatrixLayoutColumnMajor);
#elif V == 1 || V == 5 || V == 9 || V == 2
        MF x = MF(acc[f]);
        coopMatStore(x, dst, o + f * (16u * CN), CN, gl_CooperativeMatrixLayoutRowMajor);
#else
        coopMatStore(acc[f], dst, o + f * (16u * CN), CN, gl_CooperativeMatrixLayoutRowMajor);
#endif
    }
}
