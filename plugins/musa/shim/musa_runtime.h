/* plugins/musa/shim/musa_runtime.h — TEST SHIM, not MUSA: maps the musa* runtime names that
 * plugins/musa/vendor_musa.h uses back onto CUDA, so nvcc can compile the MUSA plugin (musa.mk's
 * shim build) on machines without the MUSA SDK. Only names listed here exist for the MUSA build:
 * a name vendor_musa.h uses but this shim lacks fails that build. Keep it a pure renaming (no
 * behaviour of its own beyond argument adaptation), so that what runs is the plugin's logic. */
#ifndef PYG_MUSA_SHIM_RUNTIME_H
#define PYG_MUSA_SHIM_RUNTIME_H
#include <cuda_runtime.h>

typedef cudaError_t musaError_t;
typedef cudaStream_t musaStream_t;
typedef cudaEvent_t musaEvent_t;
typedef cudaGraph_t musaGraph_t;
typedef cudaGraphExec_t musaGraphExec_t;
typedef cudaGraphNode_t musaGraphNode_t;
typedef cudaDeviceProp musaDeviceProp;

#define musaSuccess cudaSuccess
#define musaErrorNotReady cudaErrorNotReady
#define musaErrorMemoryAllocation cudaErrorMemoryAllocation
#define musaErrorInsufficientDriver cudaErrorInsufficientDriver
#define musaStreamNonBlocking cudaStreamNonBlocking
#define musaEventDisableTiming cudaEventDisableTiming
#define musaHostAllocDefault cudaHostAllocDefault
#define musaMemcpyHostToDevice cudaMemcpyHostToDevice
#define musaMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define musaMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define musaMemcpyDefault cudaMemcpyDefault
#define musaStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define musaFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize

#define musaGetErrorString cudaGetErrorString
#define musaGetLastError cudaGetLastError
#define musaGetDeviceCount cudaGetDeviceCount
#define musaGetDeviceProperties cudaGetDeviceProperties
#define musaSetDevice cudaSetDevice
#define musaDeviceCanAccessPeer cudaDeviceCanAccessPeer
#define musaDeviceEnablePeerAccess cudaDeviceEnablePeerAccess
#define musaMemGetInfo cudaMemGetInfo
#define musaMalloc cudaMalloc
#define musaFree cudaFree
#define musaHostAlloc cudaHostAlloc
#define musaFreeHost cudaFreeHost
#define musaMemcpy cudaMemcpy
#define musaMemcpyAsync cudaMemcpyAsync
#define musaMemcpyPeerAsync cudaMemcpyPeerAsync
#define musaMemset cudaMemset
#define musaStreamCreateWithFlags cudaStreamCreateWithFlags
#define musaStreamDestroy cudaStreamDestroy
#define musaStreamSynchronize cudaStreamSynchronize
#define musaStreamWaitEvent cudaStreamWaitEvent
#define musaEventCreateWithFlags cudaEventCreateWithFlags
#define musaEventDestroy cudaEventDestroy
#define musaEventRecord cudaEventRecord
#define musaEventQuery cudaEventQuery
#define musaEventSynchronize cudaEventSynchronize
#define musaStreamBeginCapture cudaStreamBeginCapture
#define musaStreamEndCapture cudaStreamEndCapture
#define musaGraphLaunch cudaGraphLaunch
#define musaGraphDestroy cudaGraphDestroy
#define musaGraphExecDestroy cudaGraphExecDestroy
#define musaFuncSetAttribute cudaFuncSetAttribute

/* MUSA keeps the CUDA 11 signature (error node, log buffer); CUDA 12 takes flags. */
static inline musaError_t musaGraphInstantiate(musaGraphExec_t *exec, musaGraph_t graph, musaGraphNode_t *err_node,
                                               char *log, size_t log_size) {
    (void)log_size;
    if (err_node) *err_node = NULL;
    if (log && log_size) log[0] = 0;
    return cudaGraphInstantiate(exec, graph, 0);
}

#endif
