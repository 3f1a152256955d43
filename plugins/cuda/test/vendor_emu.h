/* plugins/cuda/test/vendor_emu.h — a host emulation of the little of the CUDA device model that a
 * kernel of this plugin uses, so that its logic (indexing, shuffles, barriers, block counters) runs
 * on a machine without a GPU: a block is 1D, its threads are fibers switched at barriers, warps
 * of 32 exchange shuffles through a per-warp mailbox between two warp barriers, __syncthreads is a
 * block barrier, __shared__ variables are statics (blocks run one after another, so one copy serves
 * each), and atomics are the compiler's. A host test harness under plugins/cuda/test force-includes
 * it (-include test/vendor_emu.h, as a derived build does its mapping): it defines
 * PYG_GPU_PLUGIN_NAME, so plugins/cuda/vendor.h then adds nothing.
 *
 * The emulation is faithful to what a correct kernel may rely on, not to timing: every lane of a
 * warp must reach the same shuffles (as on hardware with full masks), and a kernel that races
 * (reads shared memory before the barrier that publishes it) may pass here by luck.
 */
#ifndef PYG_VENDOR_EMU_H
#define PYG_VENDOR_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <ucontext.h>
#include <functional>
#include <vector>

#define PYG_GPU_HOST_EMU 1 /* kernels launch through emu_launch (flash_attn_dec.cu) */
#define PYG_GPU_PLUGIN_NAME "emu"
#define PYG_GPU_VENDOR "host emulation"
#define PYG_GPU_RUNTIME "EMU"
#define PYG_GPU_API "emu"
#define PYG_WARP_SIZE 32

typedef int gpuError_t;
typedef void *gpuStream_t;
#define gpuSuccess 0
#define gpuGetLastError() 0
#define gpuGetErrorString(e) "emulated"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

typedef uint16_t gpu_half; /* common.cuh's store_plain: f32 -> f16 bits, round to nearest even */
static inline gpu_half gpu_float2half(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (gpu_half)(s | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) return (gpu_half)(s | 0x7c00u);           /* overflow: inf */
    if (a < 0x38800000u) {                                              /* subnormal or zero */
        const float x = fabsf(f) * 16777216.0f;                         /* units of 2^-24 */
        return (gpu_half)(s | (uint32_t)nearbyintf(x));
    }
    const uint32_t r = a - 0x38000000u;                                 /* rebias 127 -> 15 */
    return (gpu_half)(s | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 {
    uint32_t x, y, z, w;
};
static inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return uint4{a, b, c, d}; }

/* The threads of a block are fibers (ucontext) on the calling thread, switched at barriers only:
 * deterministic, and a barrier that not every thread reaches is reported as a deadlock. */
struct emu_barrier {
    int n = 0, count = 0;
    unsigned gen = 0;
    void wait();
};

struct emu_fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    bool done = false;
    emu_barrier *waiting = nullptr;
    unsigned wait_gen = 0;
};

struct emu_block {
    emu_barrier block;
    std::vector<emu_barrier> warp;
    std::vector<uint64_t> mail; /* one word per thread */
    std::vector<emu_fiber> fib;
    ucontext_t sched;
    int cur = 0;
};

static dim3 gridDim, blockDim, threadIdx, blockIdx;
static emu_block *emu_cur;

inline void emu_barrier::wait() {
    if (++count == n) { /* the last one in releases the others */
        count = 0;
        gen++;
        return;
    }
    emu_fiber &f = emu_cur->fib[emu_cur->cur];
    f.waiting = this;
    f.wait_gen = gen;
    swapcontext(&f.ctx, &emu_cur->sched);
}

static inline void __syncthreads() { emu_cur->block.wait(); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int __popc(uint32_t v) { return __builtin_popcount(v); }
static inline int __float2int_rn(float f) { return (int)nearbyintf(f); }

template <typename T>
static inline T emu_shfl(T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a word");
    const int t = (int)threadIdx.x, w = t / PYG_WARP_SIZE;
    uint64_t box = 0;
    memcpy(&box, &v, sizeof v);
    emu_cur->mail[t] = box;
    emu_cur->warp[w].wait();
    box = emu_cur->mail[w * PYG_WARP_SIZE + (src & (PYG_WARP_SIZE - 1))];
    emu_cur->warp[w].wait(); /* everyone has read before the mailbox is reused */
    T r;
    memcpy(&r, &box, sizeof r);
    return r;
}
#define gpu_shfl_xor(v, mask) emu_shfl((v), (int)(threadIdx.x % PYG_WARP_SIZE) ^ (mask))
#define gpu_shfl(v, lane) emu_shfl((v), (lane))
static inline int gpu_any(int p) {
    int r = p != 0;
    for (int o = 1; o < PYG_WARP_SIZE; o <<= 1) r |= emu_shfl(r, (int)(threadIdx.x % PYG_WARP_SIZE) ^ o);
    return r;
}
#define gpu_exp2_fast(x) exp2f(x)

static std::function<void()> emu_body;
static void emu_entry() {
    emu_body();
    emu_cur->fib[emu_cur->cur].done = true; /* returns to uc_link: the scheduler */
}

/* Run kernel(args) over the grid, one block after another. Returns 0, or -1 on a deadlock (a
 * barrier some thread of the block never reached). */
template <typename K, typename A>
static int emu_launch(K kernel, dim3 grid, unsigned threads, const A &args) {
    gridDim = grid;
    blockDim = dim3(threads);
    emu_block blk;
    emu_cur = &blk;
    blk.block.n = (int)threads;
    blk.warp = std::vector<emu_barrier>(threads / PYG_WARP_SIZE);
    for (auto &b : blk.warp) b.n = PYG_WARP_SIZE;
    blk.mail.assign(threads, 0);
    blk.fib = std::vector<emu_fiber>(threads);
    emu_body = [&] { kernel(args); };
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                for (auto &f : blk.fib) {
                    f.stack.resize(256 * 1024);
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack.data();
                    f.ctx.uc_stack.ss_size = f.stack.size();
                    f.ctx.uc_link = &blk.sched;
                    makecontext(&f.ctx, emu_entry, 0);
                    f.done = false;
                    f.waiting = nullptr;
                }
                for (;;) {
                    bool ran = false, all_done = true;
                    for (unsigned t = 0; t < threads; t++) {
                        emu_fiber &f = blk.fib[t];
                        if (f.done) continue;
                        all_done = false;
                        if (f.waiting && f.waiting->gen == f.wait_gen) continue;
                        f.waiting = nullptr;
                        blk.cur = (int)t;
                        threadIdx = dim3(t);
                        swapcontext(&blk.sched, &f.ctx);
                        ran = true;
                    }
                    if (all_done) break;
                    if (!ran) {
                        fprintf(stderr, "emu: deadlock in block (%u,%u,%u): a barrier not every thread reached\n", x, y, z);
                        return -1;
                    }
                }
                /* a barrier left half-entered by threads that returned early would be a kernel bug */
                if (blk.block.count) {
                    fprintf(stderr, "emu: block (%u,%u,%u) ended with %d threads in a barrier\n", x, y, z, blk.block.count);
                    return -1;
                }
            }
    return 0;
}

#endif
