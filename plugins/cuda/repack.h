/* plugins/cuda/repack.h — the repacked-weight cache of repack.cu, as graph.cu, mul_mat.cu and
 * plugin.cu use it. */
#ifndef PYG_CUDA_REPACK_H
#define PYG_CUDA_REPACK_H
#include "repack.cuh"

struct pyg_device;
struct pyg_buffer;
struct cuda_repack; /* one repacked weight, shared by the plans that use it */

/* May node (a MUL_MAT) read a repacked copy of its weights? src0: a 2-D q4_0/q8_0/q4_K/q6_K leaf flagged
 * WEIGHT, rows contiguous, K a multiple of 32 and at most 32768. */
int cuda_repack_eligible(const pyg_tensor *node);
/* The entry for node's weights on dev (allocating its device memory on first use), one more reference;
 * NULL when not eligible or out of device memory (then the node uses ggml's blocks). */
cuda_repack *cuda_repack_acquire(const pyg_device *dev, const pyg_tensor *node);
void cuda_repack_release(cuda_repack *r);
/* Device pointers of the copy (valid while referenced). */
const rq_w *cuda_repack_weights(const cuda_repack *r);
/* Fill every entry of list[0..n) that is not filled (NULL entries skipped) on stream s, then synchronize
 * s; *seen_generation caches that nothing went stale since the last call (start it at 0). Never call
 * while s is being captured. Returns a pyg_status (message in err). */
int cuda_repack_ensure(cuda_repack *const *list, int n, uint64_t *seen_generation, gpuStream_t s, char *err,
                       size_t errlen);
/* A host write of [offset, offset + size) into buffer b (base address base), or its release (freed):
 * copies of weights inside it go stale. */
void cuda_repack_invalidate(const pyg_buffer *b, const void *base, uint64_t offset, uint64_t size, int freed);

#endif
