/* plugins/hip/vendor_hip.h — the CUDA plugin's gpu* names mapped onto HIP (ROCm), so that
 * the plugins/cuda sources compile with hipcc into libpyggml-hip.so. hip.mk force-includes it
 * (-include) before every source, so plugins/cuda/vendor.h sees PYG_GPU_PLUGIN_NAME and adds nothing. scripts/check_vendor_mapping.py checks that this file maps
 * every runtime call, type, constant and intrinsic the CUDA sources use.
 *
 * Warp size: the kernels are written for a LOGICAL warp of PYG_WARP_SIZE = 32 lanes: every
 * reduction shuffles with an explicit width of 32 and every "warp" index is threadIdx.x / 32. On
 * 32-wide hardware (RDNA, gfx1030 in its default wave32 mode) a logical warp is the wavefront; on
 * 64-wide hardware (CDNA: gfx90a, gfx940) a wavefront holds two logical warps, and __shfl_xor with
 * width 32 stays inside each half (xor masks < 32 never cross a 32-lane segment). Each device pass
 * is compiled per gfx arch, and the static_assert below checks the arch's real wavefront size
 * (__AMDGCN_WAVEFRONT_SIZE) is a multiple of the logical warp, so an arch where that is false fails
 * to BUILD rather than computing wrong sums. The code never relies on a warp being the whole
 * wavefront (no ballots, no warp-synchronous shared memory).
 *
 * Quirks: HIP devices declare PYG_QUIRK_NO_ASYNC_HOST_COPY | PYG_QUIRK_MULTI_DEVICE_SYNC (the
 * llama.cpp history: async copies from host memory and multi-GPU pipeline runs without per-split
 * syncs broke on ROCm). Every entry point sets the current device first (plugin.cu's SET_DEVICE):
 * ROCm's hipStreamWaitEvent, unlike CUDA's, needs the waiting stream's device to be current.
 *
 * Runtime library: the kernels library built from these sources (libpyghip-kernels.so) links
 * libamdhip64.so.5 (hipcc registers the fat binary from a static constructor at load time); the
 * plugin proper, libpyggml-hip.so (loader.c), dlopens it in plugin_init, so the plugin always loads.
 * Without an AMD GPU or the ROCm kernel driver (/dev/kfd), plugin_init answers PYG_ERR_NO_DEVICE.
 */
#ifndef PYG_HIP_VENDOR_H
#define PYG_HIP_VENDOR_H

#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>
#include <string.h>

#define PYG_GPU_PLUGIN_NAME "hip"
#define PYG_GPU_VENDOR "AMD HIP"
#define PYG_GPU_RUNTIME "HIP"
#define PYG_GPU_API "hip"
#define PYG_GPU_DRIVER_HINT "the ROCm kernel driver (amdgpu with /dev/kfd) is missing or too old for this HIP runtime"
#define PYG_GPU_BUILD_NOTE ""
#define PYG_GPU_QUIRKS (PYG_QUIRK_NO_ASYNC_HOST_COPY | PYG_QUIRK_MULTI_DEVICE_SYNC)

/* Devices are usable when their gfx arch (gcnArchName up to the first ':' feature suffix, e.g.
 * "gfx90a:sramecc+:xnack-") is one the build has code for; hip.mk passes the list. */
#ifndef PYG_HIP_ARCHS
#define PYG_HIP_ARCHS "gfx90a gfx1030"
#endif
#define PYG_GPU_BUILT_ARCHS PYG_HIP_ARCHS
static inline int pyg_hip_arch_built(const char *arch) {
    size_t n = strcspn(arch, ":");
    const char *p = PYG_HIP_ARCHS;
    while (*p) {
        while (*p == ' ') p++;
        size_t m = strcspn(p, " ");
        if (m && m == n && strncmp(p, arch, n) == 0) return 1;
        p += m;
    }
    return 0;
}
#define PYG_GPU_DEVICE_USABLE(prop) pyg_hip_arch_built((prop).gcnArchName)
#define PYG_GPU_DEVICE_ARCH(prop) ((prop).gcnArchName)

/* ---- types and constants ---- */
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipEvent_t gpuEvent_t;
typedef hipGraph_t gpuGraph_t;
typedef hipGraphExec_t gpuGraphExec_t;
typedef hipDeviceProp_t gpuDeviceProp;

#define gpuSuccess hipSuccess
#define gpuErrorNotReady hipErrorNotReady
#define gpuErrorMemoryAllocation hipErrorOutOfMemory /* cudaErrorMemoryAllocation */
#define gpuErrorInsufficientDriver hipErrorInsufficientDriver
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuHostAllocDefault hipHostMallocDefault
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal

/* ---- runtime calls ---- */
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuSetDevice hipSetDevice
#define gpuDeviceCanAccessPeer hipDeviceCanAccessPeer
#define gpuDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc hipHostMalloc /* cudaHostAlloc; hipHostAlloc is deprecated */
#define gpuFreeHost hipHostFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyPeerAsync hipMemcpyPeerAsync
#define gpuMemset hipMemset
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent(s, e) hipStreamWaitEvent((s), (e), 0)
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiate(exec, graph) hipGraphInstantiate((exec), (graph), NULL, NULL, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphDestroy hipGraphDestroy
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuFuncSetMaxDynamicSharedMemory(f, bytes) \
    hipFuncSetAttribute((const void *)(f), hipFuncAttributeMaxDynamicSharedMemorySize, (bytes))

/* ---- device side ---- */
#define PYG_WARP_SIZE 32 /* logical warp; see the top of this file */
#if defined(__HIP_DEVICE_COMPILE__)
#if !defined(__AMDGCN_WAVEFRONT_SIZE)
#error "hipcc did not define __AMDGCN_WAVEFRONT_SIZE for this device pass"
#endif
static_assert(__AMDGCN_WAVEFRONT_SIZE % PYG_WARP_SIZE == 0,
              "the kernels' 32-lane logical warps must tile this arch's wavefront");
/* The CUDA sources split host and device code of __host__ __device__ helpers on __CUDA_ARCH__;
 * hipcc's device pass has __HIP_DEVICE_COMPILE__ instead. Defined after every HIP header. */
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 1
#endif
#endif
#define gpu_shfl_xor(v, mask) __shfl_xor((v), (mask), PYG_WARP_SIZE)
#define gpu_shfl(v, lane) __shfl((v), (lane), PYG_WARP_SIZE)
#define gpu_any(p) __any(p) /* over the whole wavefront (both logical warps): callers only need "some lane" */
#define gpu_exp2_fast(x) exp2f(x)
typedef __half gpu_half;
#define gpu_half2float __half2float
#define gpu_float2half __float2half_rn
typedef hip_bfloat16 gpu_bf16;
#define gpu_float2bf16(x) hip_bfloat16(x) /* round to nearest even */
/* no PYG_GPU_HAS_WMMA: HIP has no nvcuda::wmma (rocWMMA is a separate library); mul_mat uses the
 * FFMA GEMM for every N. */

/* CUDA SIMD intrinsics HIP does not provide, by their CUDA definitions. */
__device__ __forceinline__ int pyg_hip_dp4a(int a, int b, int c) { /* c + sum of 4 signed byte products */
#if defined(__gfx90a__) || defined(__gfx1030__) || defined(__gfx940__) || defined(__gfx906__) || \
    defined(__gfx908__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}
__device__ __forceinline__ unsigned int pyg_hip_vsub4(unsigned int a, unsigned int b) { /* per byte, mod 256 */
    return ((a | 0x80808080u) - (b & 0x7f7f7f7fu)) ^ ((a ^ ~b) & 0x80808080u);
}
#define __dp4a pyg_hip_dp4a
#define __vsub4 pyg_hip_vsub4

/* Provided by HIP with CUDA's meaning (compiled by hip.mk; checked by check_vendor_mapping.py):
 * PYG_NATIVE: __global__ __device__ __host__ __shared__ __forceinline__ __launch_bounds__ __align__
 * PYG_NATIVE: __syncthreads __float2int_rn __uint_as_float __float_as_uint __half __half2float
 * PYG_NATIVE: __float2half_rn float4 uint4 int4 __attribute__ __CUDA_ARCH__
 * PYG_NATIVE: __popc __threadfence __syncthreads_or
 */

#endif /* PYG_HIP_VENDOR_H */
