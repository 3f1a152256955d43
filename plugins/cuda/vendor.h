/* plugins/cuda/vendor.h — the one place that names the vendor GPU runtime: CUDA's mapping.
 *
 * Every runtime call in the plugin sources goes through a gpu* name defined here, so that other
 * builds of the same sources can map these names onto their own runtime. Keep this list short:
 * adding a runtime call means adding it here (and in every derived build's mapping). Device-side
 * intrinsics used by the kernels are listed at the end.
 */
#ifndef PYG_CUDA_VENDOR_H
#define PYG_CUDA_VENDOR_H

/* A derived build brings its own mapping and force-includes it before any source (its make
 * fragment passes -include <its header>); that header defines PYG_GPU_PLUGIN_NAME, so this file
 * then adds nothing. Every mapping defines the same gpu* names, plus:
 *   PYG_GPU_PLUGIN_NAME, PYG_GPU_VENDOR, PYG_GPU_RUNTIME (used in messages),
 *   PYG_GPU_API (runtime call prefix in messages), PYG_GPU_DRIVER_HINT, PYG_GPU_BUILD_NOTE,
 *   PYG_GPU_QUIRKS (the PYG_QUIRK_* bits its devices declare),
 *   PYG_WARP_SIZE (the kernels' logical warp: 32 lanes everywhere), and optionally
 *   PYG_GPU_HAS_WMMA (nvcuda::wmma) and PYG_GPU_HAS_CUBLAS (gemm_blas.cu may open cuBLAS). */
#ifndef PYG_GPU_PLUGIN_NAME

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define PYG_GPU_PLUGIN_NAME "cuda"
#define PYG_GPU_VENDOR "NVIDIA CUDA"
#define PYG_GPU_RUNTIME "CUDA"
#define PYG_GPU_API "cuda" /* prefix of runtime call names in error messages */
#define PYG_GPU_DRIVER_HINT "the NVIDIA driver (libcuda.so.1) is missing or older than this CUDA runtime"
#define PYG_GPU_BUILD_NOTE ""
#define PYG_GPU_QUIRKS 0ull /* none: CUDA takes every fast path */

/* ---- types and constants ---- */
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaEvent_t gpuEvent_t;
typedef cudaGraph_t gpuGraph_t;
typedef cudaGraphExec_t gpuGraphExec_t;
typedef cudaDeviceProp gpuDeviceProp;

#define gpuSuccess cudaSuccess
#define gpuErrorNotReady cudaErrorNotReady
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuErrorInsufficientDriver cudaErrorInsufficientDriver
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuHostAllocDefault cudaHostAllocDefault
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal

/* ---- runtime calls (the complete list used by the plugin) ---- */
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuSetDevice cudaSetDevice
#define gpuDeviceCanAccessPeer cudaDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess cudaDeviceEnablePeerAccess
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc cudaHostAlloc
#define gpuFreeHost cudaFreeHost
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyPeerAsync cudaMemcpyPeerAsync
#define gpuMemset cudaMemset
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent(s, e) cudaStreamWaitEvent((s), (e), 0)
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiate(exec, graph) cudaGraphInstantiate((exec), (graph), 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphDestroy cudaGraphDestroy
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuFuncSetMaxDynamicSharedMemory(f, bytes) \
    cudaFuncSetAttribute((f), cudaFuncAttributeMaxDynamicSharedMemorySize, (bytes))

/* ---- device side ---- */
#define PYG_WARP_SIZE 32
#define gpu_shfl_xor(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask), PYG_WARP_SIZE)
#define gpu_shfl(v, lane) __shfl_sync(0xffffffffu, (v), (lane), PYG_WARP_SIZE)
#define gpu_any(p) __any_sync(0xffffffffu, (p)) /* nonzero when p is, on any lane of the warp */
/* 2^x by the special-function unit (ex2.approx.ftz: 2 ulp; -inf gives 0) */
static __device__ __forceinline__ float gpu_exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
typedef __half gpu_half;
#define gpu_half2float __half2float
#define gpu_float2half __float2half_rn
typedef __nv_bfloat16 gpu_bf16;
#define gpu_float2bf16 __float2bfloat16_rn
#define PYG_GPU_HAS_WMMA 1 /* nvcuda::wmma (<mma.h>) with bf16 inputs: mul_mat_mma.cu */
#define PYG_GPU_HAS_CUBLAS 1 /* gemm_blas.cu opens cuBLAS at run time */
#define PYG_GPU_HAS_INT8_MMA 1 /* mma.sync with s8 operands and cp.async (simt.cuh; the device needs sm_80) */
#define PYG_GPU_HAS_PDL 1 /* programmatic dependent launch (sm_90): gpu_launch_pdl, griddepcontrol.wait */

/* Launch k with programmatic stream serialization: it may start while the kernel before it in the
 * stream finishes; it must call griddepcontrol.wait (DevThr::grid_wait) before reading anything that
 * kernel writes, and write nothing before it. */
template <typename... P, typename... A>
static inline gpuError_t gpu_launch_pdl(void (*k)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t s,
                                        A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, args...);
}

#endif /* no derived build's mapping */
#endif /* PYG_CUDA_VENDOR_H */
