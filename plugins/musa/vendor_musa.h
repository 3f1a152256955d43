/* plugins/musa/vendor_musa.h — the CUDA plugin's gpu* names mapped onto MUSA (Moore Threads), so
 * that the plugins/cuda sources compile with mcc into libpyggml-musa.so. musa.mk
 * force-includes it (-include) before every source, so plugins/cuda/vendor.h adds nothing.
 *
 * NOTHING here has run on MUSA hardware or been compiled by mcc (no MUSA toolchain on our machines).
 * What is checked: scripts/check_vendor_mapping.py (every CUDA name the sources use is mapped here),
 * and a compiler: musa.mk's shim build compiles this header with nvcc through plugins/musa/shim/
 * (musa_runtime.h etc. mapping each musa* name this file uses back onto CUDA), so a misspelt or
 * missing name fails the build, and the plugin's behaviour (name "musa", declared quirks) runs on
 * NVIDIA GPUs. The names follow the MUSA runtime's CUDA-parallel naming (musaMalloc, musaStream_t,
 * musaGraphInstantiate with the CUDA 11 signature); any name the real SDK spells differently shows
 * up only on a real mcc build (see plugins/musa/README.md).
 *
 * Warp size: the kernels use a logical warp of 32 lanes (shuffles with explicit width 32), as on HIP;
 * see plugins/hip/vendor_hip.h. Quirks: PYG_QUIRK_NO_ASYNC_HOST_COPY | PYG_QUIRK_MULTI_DEVICE_SYNC;
 * every entry point sets the current device first.
 */
#ifndef PYG_MUSA_VENDOR_H
#define PYG_MUSA_VENDOR_H

#include <musa_runtime.h>
#include <musa_fp16.h>
#include <musa_bf16.h>

#define PYG_GPU_PLUGIN_NAME "musa"
#define PYG_GPU_VENDOR "Moore Threads MUSA"
#define PYG_GPU_RUNTIME "MUSA"
#define PYG_GPU_API "musa"
#define PYG_GPU_DRIVER_HINT "the MUSA driver is missing or older than this MUSA runtime"
#ifdef PYG_MUSA_SHIM
#define PYG_GPU_BUILD_NOTE " [test build: MUSA names mapped onto CUDA by plugins/musa/shim]"
#else
#define PYG_GPU_BUILD_NOTE ""
#endif
#define PYG_GPU_QUIRKS (PYG_QUIRK_NO_ASYNC_HOST_COPY | PYG_QUIRK_MULTI_DEVICE_SYNC)

/* ---- types and constants ---- */
typedef musaError_t gpuError_t;
typedef musaStream_t gpuStream_t;
typedef musaEvent_t gpuEvent_t;
typedef musaGraph_t gpuGraph_t;
typedef musaGraphExec_t gpuGraphExec_t;
typedef musaDeviceProp gpuDeviceProp;

#define gpuSuccess musaSuccess
#define gpuErrorNotReady musaErrorNotReady
#define gpuErrorMemoryAllocation musaErrorMemoryAllocation
#define gpuErrorInsufficientDriver musaErrorInsufficientDriver
#define gpuStreamNonBlocking musaStreamNonBlocking
#define gpuEventDisableTiming musaEventDisableTiming
#define gpuHostAllocDefault musaHostAllocDefault
#define gpuMemcpyHostToDevice musaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost musaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice musaMemcpyDeviceToDevice
#define gpuMemcpyDefault musaMemcpyDefault
#define gpuStreamCaptureModeThreadLocal musaStreamCaptureModeThreadLocal

/* ---- runtime calls ---- */
#define gpuGetErrorString musaGetErrorString
#define gpuGetLastError musaGetLastError
#define gpuGetDeviceCount musaGetDeviceCount
#define gpuGetDeviceProperties musaGetDeviceProperties
#define gpuSetDevice musaSetDevice
#define gpuDeviceCanAccessPeer musaDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess musaDeviceEnablePeerAccess
#define gpuMemGetInfo musaMemGetInfo
#define gpuMalloc musaMalloc
#define gpuFree musaFree
#define gpuHostAlloc musaHostAlloc
#define gpuFreeHost musaFreeHost
#define gpuMemcpy musaMemcpy
#define gpuMemcpyAsync musaMemcpyAsync
#define gpuMemcpyPeerAsync musaMemcpyPeerAsync
#define gpuMemset musaMemset
#define gpuStreamCreateWithFlags musaStreamCreateWithFlags
#define gpuStreamDestroy musaStreamDestroy
#define gpuStreamSynchronize musaStreamSynchronize
#define gpuStreamWaitEvent(s, e) musaStreamWaitEvent((s), (e), 0)
#define gpuEventCreateWithFlags musaEventCreateWithFlags
#define gpuEventDestroy musaEventDestroy
#define gpuEventRecord musaEventRecord
#define gpuEventQuery musaEventQuery
#define gpuEventSynchronize musaEventSynchronize
#define gpuStreamBeginCapture musaStreamBeginCapture
#define gpuStreamEndCapture musaStreamEndCapture
#define gpuGraphInstantiate(exec, graph) musaGraphInstantiate((exec), (graph), NULL, NULL, 0)
#define gpuGraphLaunch musaGraphLaunch
#define gpuGraphDestroy musaGraphDestroy
#define gpuGraphExecDestroy musaGraphExecDestroy
#define gpuFuncSetMaxDynamicSharedMemory(f, bytes) \
    musaFuncSetAttribute((f), musaFuncAttributeMaxDynamicSharedMemorySize, (bytes))

/* ---- device side ---- */
/* mcc's device pass defines __MUSA_ARCH__; the sources test __CUDA_ARCH__ (nvcc, in the shim build,
 * defines that itself). */
#if defined(__MUSA_ARCH__) && !defined(__CUDA_ARCH__)
#define __CUDA_ARCH__ __MUSA_ARCH__
#endif
#define PYG_WARP_SIZE 32 /* logical warp: shuffles below use an explicit width of 32 */
#define gpu_shfl_xor(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask), PYG_WARP_SIZE)
#define gpu_shfl(v, lane) __shfl_sync(0xffffffffu, (v), (lane), PYG_WARP_SIZE)
#define gpu_any(p) __any_sync(0xffffffffu, (p))
#define gpu_exp2_fast(x) exp2f(x) /* no PTX here */
typedef __half gpu_half;
#define gpu_half2float __half2float
#define gpu_float2half __float2half_rn
typedef __mt_bfloat16 gpu_bf16;
#define gpu_float2bf16 __float2bfloat16_rn
/* no PYG_GPU_HAS_WMMA: MUSA's matrix-core API is not nvcuda::wmma; mul_mat uses the FFMA GEMM. */

/* Provided by the MUSA toolchain under CUDA's names (per its CUDA-compatible device API; only
 * compile-checked through the shim, never by mcc):
 * PYG_NATIVE: __global__ __device__ __host__ __shared__ __forceinline__ __launch_bounds__ __align__
 * PYG_NATIVE: __syncthreads __float2int_rn __uint_as_float __float_as_uint __half __half2float
 * PYG_NATIVE: __float2half_rn __float2bfloat16_rn __shfl_xor_sync __shfl_sync __dp4a __vsub4
 * PYG_NATIVE: float4 uint4 int4 __attribute__ __CUDA_ARCH__
 * PYG_NATIVE: __popc __threadfence __syncthreads_or
 */

#endif /* PYG_MUSA_VENDOR_H */
