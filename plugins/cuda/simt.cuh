/* plugins/cuda/simt.cuh — what a kernel body asks of the thread running it, so that the same body
 * runs on the GPU and, in a host test, on a CPU emulation of a thread block.
 *
 * Kernel bodies that use it (mmv_rp.cuh, mmq.cuh) are templates over a thread type `Thr` and are
 * declared PYG_KB: `__device__` in the plugin, plain `inline` host code when the test harness
 * defines PYG_SIMT_HOST (plugins/cuda/test/simt_host.h supplies its HostThr: one std::thread per GPU
 * thread, barriers for __syncthreads, and warp-wide exchanges for shuffles and mma). DevThr below is
 * the device side; a __global__ wrapper builds one and calls the body.
 *
 * Members (both sides): tid, lane, warp, nthreads; bx, by (blockIdx.x/.y); sync(); sync_or(v) (a
 * barrier returning the OR of v over the block); shfl_xor(v, m)
 * for float and int; any(v) (warp vote); mma16832 / mma16816 (int8 tensor-core products) and
 * mma_f16 (m16n8k16, f16 operands, f32 accumulators), ldsm4 / ldsm4t (ldmatrix .x4, plain and
 * .trans), only where PYG_GPU_HAS_INT8_MMA; cp16 / cp_commit / cp_wait<N> (16-byte copies global ->
 * shared, cp.async on sm_80+); grid_wait() (programmatic dependent launch: returns once the grid
 * before this one in the stream has finished and its writes are visible; a no-op without PDL).
 */
#ifndef PYG_CUDA_SIMT_CUH
#define PYG_CUDA_SIMT_CUH
#include "common.cuh"

/* The vendor header says what the device code may use beyond the common set: PYG_GPU_HAS_INT8_MMA
 * (mma.sync with s8 operands and cp.async: CUDA, sm_80 and newer at run time) and PYG_GPU_HAS_PDL
 * (griddepcontrol: CUDA, sm_90). HIP and MUSA builds define neither: their DevThr copies with plain
 * loads, has no mma (the plans never choose the int8 GEMM there) and never waits on a grid. */
#ifndef PYG_SIMT_HOST
struct DevThr {
    int tid, lane, warp, nthreads;
    int64_t bx, by;
    __device__ __forceinline__ DevThr()
        : tid((int)threadIdx.x), lane((int)threadIdx.x % PYG_WARP_SIZE), warp((int)threadIdx.x / PYG_WARP_SIZE),
          nthreads((int)blockDim.x), bx(blockIdx.x), by(blockIdx.y) {}
    __device__ __forceinline__ void sync() const { __syncthreads(); }
    /* a barrier that also returns whether v was true for some thread of the block */
    __device__ __forceinline__ bool sync_or(bool v) const { return __syncthreads_or(v) != 0; }
    __device__ __forceinline__ float shfl_xor(float v, int m) const { return gpu_shfl_xor(v, m); }
    __device__ __forceinline__ int shfl_xor(int v, int m) const { return gpu_shfl_xor(v, m); }
#ifdef PYG_GPU_HAS_INT8_MMA
    __device__ __forceinline__ bool any(bool v) const { return __any_sync(0xffffffffu, v) != 0; }
    /* d = A(16x16 f16, row) * B(16x8 f16, col) + c, f32 accumulators; words hold two halves, the
     * lower column (A) or row (B) in the low half: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..],
     * a[2] = A[g][8+2t..], a[3] = A[g+8][8+2t..]; b0 = B[2t..2t+1][g], b1 = B[8+2t..][g]; d[0] =
     * D[g][2t], d[1] = D[g][2t+1], d[2] = D[g+8][2t], d[3] = D[g+8][2t+1] (g = lane / 4, t = lane % 4). */
    __device__ __forceinline__ void mma_f16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1,
                                            const float c[4]) const {
#if __CUDA_ARCH__ >= 800
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
                       "f"(c[2]), "f"(c[3]));
#else
        (void)d, (void)a, (void)b0, (void)b1, (void)c;
        __trap();
#endif
    }
    /* ldmatrix .x4 from shared memory: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes
     * each) of matrix i; r[i] = M_i[lane / 4][2 (lane % 4) .. +1] (plain) or M_i[2 (lane % 4) .. +1]
     * [lane / 4] (.trans, the two halves from consecutive rows). */
    template <bool TRANS> __device__ __forceinline__ void ldsm(uint32_t r[4], const void *row) const {
#if __CUDA_ARCH__ >= 800
        const unsigned s = (unsigned)__cvta_generic_to_shared(row);
        if constexpr (TRANS)
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
        else
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
#else
        (void)r, (void)row;
        __trap();
#endif
    }
    __device__ __forceinline__ void ldsm4(uint32_t r[4], const void *row) const { ldsm<false>(r, row); }
    __device__ __forceinline__ void ldsm4t(uint32_t r[4], const void *row) const { ldsm<true>(r, row); }
    /* d = A(16x32 s8, row) * B(32x8 s8, col) + c: a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..], a[2] =
     * A[g][16+4t..], a[3] = A[g+8][16+4t..]; b0 = B[4t..4t+3][g], b1 = B[16+4t..][g]; d[0] = D[g][2t],
     * d[1] = D[g][2t+1], d[2] = D[g+8][2t], d[3] = D[g+8][2t+1] (g = lane / 4, t = lane % 4); c like d. */
    __device__ __forceinline__ void mma16832(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1,
                                             const int c[4]) const {
#if __CUDA_ARCH__ >= 800
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};"
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]),
                       "r"(c[2]), "r"(c[3]));
#else
        (void)d, (void)a, (void)b0, (void)b1, (void)c;
        __trap();
#endif
    }
    /* the k16 form: a0 = A[g][4t..4t+3], a1 = A[g+8][4t..]; b0 = B[4t..4t+3][g]; d, c as above */
    __device__ __forceinline__ void mma16816(int d[4], uint32_t a0, uint32_t a1, uint32_t b0, const int c[4]) const {
#if __CUDA_ARCH__ >= 800
        asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                     : "r"(a0), "r"(a1), "r"(b0), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
#else
        (void)d, (void)a0, (void)a1, (void)b0, (void)c;
        __trap();
#endif
    }
    /* 16 bytes global -> shared (both 16-byte aligned); zeros when !valid (src is not read then) */
    __device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) const {
#if __CUDA_ARCH__ >= 800
        const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(valid ? 16 : 0)
                     : "memory");
#else
        *(uint4 *)dst = valid ? *(const uint4 *)src : make_uint4(0, 0, 0, 0);
#endif
    }
    __device__ __forceinline__ void cp_commit() const {
#if __CUDA_ARCH__ >= 800
        asm volatile("cp.async.commit_group;" ::: "memory");
#endif
    }
    template <int N> __device__ __forceinline__ void cp_wait() const {
#if __CUDA_ARCH__ >= 800
        asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
    }
#else
    __device__ __forceinline__ void mma16832(int d[4], const uint32_t *, uint32_t, uint32_t, const int c[4]) const {
        for (int i = 0; i < 4; i++) d[i] = c[i]; /* unreachable: no int8 GEMM is planned without mma */
    }
    __device__ __forceinline__ void mma16816(int d[4], uint32_t, uint32_t, uint32_t, const int c[4]) const {
        for (int i = 0; i < 4; i++) d[i] = c[i];
    }
    __device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) const {
        uint32_t *o = (uint32_t *)dst;
        const uint32_t *p = (const uint32_t *)src;
        for (int i = 0; i < 4; i++) o[i] = valid ? p[i] : 0u;
    }
    __device__ __forceinline__ void cp_commit() const {}
    template <int N> __device__ __forceinline__ void cp_wait() const {}
#endif
    __device__ __forceinline__ void grid_wait() const {
#ifdef PYG_GPU_HAS_PDL
#if __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#endif
    }
};
#endif

/* The 9-shuffle transposing sum of 8 per-lane partials over a warp: afterwards every lane holds the
 * warp total of partial number 4*bit4 + 2*bit3 + bit2 of its lane index (lanes 4r..4r+3 with r's bits
 * reversed into that order hold the same value). */
template <class Thr>
PYG_KB float warp_sum8(const Thr &t, float acc[8]) {
    const int l = t.lane;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const bool up = (l & 16) != 0;
        const float send = up ? acc[i] : acc[i + 4], keep = up ? acc[i + 4] : acc[i];
        acc[i] = keep + t.shfl_xor(send, 16);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const bool up = (l & 8) != 0;
        const float send = up ? acc[i] : acc[i + 2], keep = up ? acc[i + 2] : acc[i];
        acc[i] = keep + t.shfl_xor(send, 8);
    }
    {
        const bool up = (l & 4) != 0;
        const float send = up ? acc[0] : acc[1], keep = up ? acc[1] : acc[0];
        acc[0] = keep + t.shfl_xor(send, 4);
    }
    acc[0] += t.shfl_xor(acc[0], 2);
    acc[0] += t.shfl_xor(acc[0], 1);
    return acc[0];
}

/* Which of the 8 partials warp_sum8 leaves in lane l. */
PYG_HD int warp_sum8_index(int l) { return 4 * ((l >> 4) & 1) + 2 * ((l >> 3) & 1) + ((l >> 2) & 1); }

#endif
