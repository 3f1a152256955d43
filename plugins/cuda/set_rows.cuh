/* plugins/cuda/set_rows.cuh — one element of set_rows, shared by its own kernels (ops_basic.cu)
 * and the rope that stores its output into a KV cache in the same launch (ops_rows.cu). */
#ifndef PYG_CUDA_SET_ROWS_CUH
#define PYG_CUDA_SET_ROWS_CUH
#include "common.cuh"

__device__ __forceinline__ int64_t load_index(const char *p, int type) {
    return type == PYG_TYPE_I64 ? *(const int64_t *)p : (int64_t)*(const int32_t *)p;
}

/* dst[i0, idx[i1, i2 % ., i3 % .], i2, i3] = src[i0, i1, i2, i3] for src row `row` (rows in
 * (i1, i2, i3) order); an out-of-range index or i0 past the row writes nothing. */
__device__ __forceinline__ void set_rows_elem(const tview &d, const tview &s, const tview &idx, int64_t row,
                                              int64_t i0) {
    int64_t i1, i2, i3;
    i1 = row % s.ne[1];
    i2 = row / s.ne[1] % s.ne[2];
    i3 = row / s.ne[1] / s.ne[2];
    if (i0 >= s.ne[0]) return;
    const int64_t r = load_index(idx.data + i1 * idx.nb[0] + (i2 % idx.ne[1]) * idx.nb[1] + (i3 % idx.ne[2]) * idx.nb[2],
                                 idx.type);
    if (r < 0 || r >= d.ne[1]) return;
    char *drow = d.data + r * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    const char *srow = s.data + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
    store_plain(drow + i0 * d.nb[0], d.type, load_f(srow + i0 * s.nb[0], s.type));
}

#endif
