/* plugins/cuda/test/simt_host.h — a CPU emulation of GPU thread blocks, so that the kernel bodies of
 * simt.cuh (templates over a thread type) run unchanged in a host test: one std::thread per GPU
 * thread, a barrier for sync(), warp-wide exchanges (through a per-warp buffer and barrier) for
 * shuffles and the int8 mma, and synchronous copies for cp16. Slow, but every lane computes what the
 * GPU lane would, so indexing, fragment layouts and reductions are checked without a GPU.
 *
 * The mma fragment layouts follow the PTX ISA (mma.m16n8k32 / m16n8k16 with .s8 operands, m16n8k16
 * with .f16 operands, ldmatrix .x4 with and without .trans), written out independently of the
 * kernels that use them: see mma_ref, mma_f16_ref and ldsm below.
 *
 * Include after defining PYG_SIMT_HOST (before any plugin header).
 */
#ifndef PYG_SIMT_HOST_H
#define PYG_SIMT_HOST_H
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

struct HostBarrier {
    std::mutex m;
    std::condition_variable cv;
    int n = 0, count = 0;
    long gen = 0;
    void wait() {
        std::unique_lock<std::mutex> l(m);
        const long g = gen;
        if (++count == n) {
            count = 0;
            gen++;
            cv.notify_all();
        } else {
            cv.wait(l, [&] { return gen != g; });
        }
    }
};

struct HostWarp {
    HostBarrier bar;
    uint32_t x[32][8]; /* per-lane exchange words */
};

struct HostBlock {
    HostBarrier bar;
    int or_flag = 0; /* sync_or: written and read between barriers */
    std::vector<HostWarp> warps;
    std::vector<unsigned char> smem;
};

/* D (16x8 s32) += A (16xK s8, row-major) * B (Kx8 s8, col-major) with the lanes' fragments as the PTX
 * ISA lays them out; K = 32 (a: 4 words, b: 2) or 16 (a: 2 words, b: 1). g = lane/4, t = lane%4:
 *   A: word 0 = A[g][4t..4t+3], word 1 = A[g+8][4t..]; K=32 adds word 2 = A[g][16+4t..], word 3 = A[g+8][16+4t..]
 *   B: word 0 = B[4t..4t+3][g]; K=32 adds word 1 = B[16+4t..][g]
 *   D: d0 = D[g][2t], d1 = D[g][2t+1], d2 = D[g+8][2t], d3 = D[g+8][2t+1]  */
inline void mma_ref(int K, const uint32_t a[32][4], const uint32_t b[32][2], int lane, int d[4]) {
    int8_t A[16][32], B[32][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            A[g][4 * t + i] = (int8_t)(a[l][0] >> (8 * i));
            A[g + 8][4 * t + i] = (int8_t)(a[l][1] >> (8 * i));
            B[4 * t + i][g] = (int8_t)(b[l][0] >> (8 * i));
            if (K == 32) {
                A[g][16 + 4 * t + i] = (int8_t)(a[l][2] >> (8 * i));
                A[g + 8][16 + 4 * t + i] = (int8_t)(a[l][3] >> (8 * i));
                B[16 + 4 * t + i][g] = (int8_t)(b[l][1] >> (8 * i));
            }
        }
    }
    const int g = lane / 4, t = lane % 4;
    const int rows[4] = { g, g, g + 8, g + 8 }, cols[4] = { 2 * t, 2 * t + 1, 2 * t, 2 * t + 1 };
    for (int i = 0; i < 4; i++) {
        int s = 0;
        for (int k = 0; k < K; k++) s += (int)A[rows[i]][k] * (int)B[k][cols[i]];
        d[i] += s;
    }
}

/* an IEEE half's bits as a float (written out here, apart from the plugin's own conversion) */
inline float host_half(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const float s = (h & 0x8000) ? -1.0f : 1.0f;
    if (e == 0) return s * (float)m * (1.0f / 16777216.0f);
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * ldexpf(1.0f + (float)m / 1024.0f, e - 15);
}

/* D (16x8 f32) += A (16x16 f16, row-major) * B (16x8 f16, col-major), f16 fragments as the PTX ISA
 * lays them out for m16n8k16 (g = lane/4, t = lane%4; a word's low half is the lower column of A or
 * the lower row of B): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][8+2t..], a3 = A[g+8][8+2t..];
 * b0 = B[2t..2t+1][g], b1 = B[8+2t..][g]; d0 = D[g][2t], d1 = D[g][2t+1], d2 = D[g+8][2t], d3 = D[g+8][2t+1] */
inline void mma_f16_ref(const uint32_t a[32][4], const uint32_t b[32][2], int lane, float d[4]) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = host_half((uint16_t)(a[l][0] >> (16 * h)));
            A[g + 8][2 * t + h] = host_half((uint16_t)(a[l][1] >> (16 * h)));
            A[g][8 + 2 * t + h] = host_half((uint16_t)(a[l][2] >> (16 * h)));
            A[g + 8][8 + 2 * t + h] = host_half((uint16_t)(a[l][3] >> (16 * h)));
            B[2 * t + h][g] = host_half((uint16_t)(b[l][0] >> (16 * h)));
            B[8 + 2 * t + h][g] = host_half((uint16_t)(b[l][1] >> (16 * h)));
        }
    }
    const int g = lane / 4, t = lane % 4;
    const int rows[4] = { g, g, g + 8, g + 8 }, cols[4] = { 2 * t, 2 * t + 1, 2 * t, 2 * t + 1 };
    for (int i = 0; i < 4; i++) {
        float s = d[i];
        for (int k = 0; k < 16; k++) s += A[rows[i]][k] * B[k][cols[i]];
        d[i] = s;
    }
}

struct HostThr {
    int tid, lane, warp, nthreads;
    int64_t bx, by;
    HostBlock *blk;
    HostWarp &w() const { return blk->warps[warp]; }
    void sync() const { blk->bar.wait(); }
    bool sync_or(bool v) const {
        blk->bar.wait(); /* every thread is past the previous call's read and reset */
        if (v) {
            std::lock_guard<std::mutex> l(blk->bar.m);
            blk->or_flag = 1;
        }
        blk->bar.wait();
        const bool r = blk->or_flag != 0;
        blk->bar.wait();
        if (tid == 0) blk->or_flag = 0;
        return r;
    }
    uint32_t xchg(uint32_t v, int src) const {
        HostWarp &hw = w();
        hw.x[lane][0] = v;
        hw.bar.wait();
        const uint32_t r = hw.x[src][0];
        hw.bar.wait();
        return r;
    }
    float shfl_xor(float v, int m) const {
        uint32_t u;
        memcpy(&u, &v, 4);
        u = xchg(u, lane ^ m);
        float r;
        memcpy(&r, &u, 4);
        return r;
    }
    int shfl_xor(int v, int m) const { return (int)xchg((uint32_t)v, lane ^ m); }
    void mma(int K, int d[4], const uint32_t *a, const uint32_t *b, const int *c) const {
        HostWarp &hw = w();
        for (int i = 0; i < (K == 32 ? 4 : 2); i++) hw.x[lane][i] = a[i];
        for (int i = 0; i < (K == 32 ? 2 : 1); i++) hw.x[lane][4 + i] = b[i];
        hw.bar.wait();
        uint32_t A[32][4] = {}, B[32][2] = {};
        for (int l = 0; l < 32; l++) {
            for (int i = 0; i < 4; i++) A[l][i] = hw.x[l][i];
            for (int i = 0; i < 2; i++) B[l][i] = hw.x[l][4 + i];
        }
        hw.bar.wait();
        for (int i = 0; i < 4; i++) d[i] = c[i];
        mma_ref(K, A, B, lane, d);
    }
    void mma16832(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const int c[4]) const {
        const uint32_t b[2] = { b0, b1 };
        const int cc[4] = { c[0], c[1], c[2], c[3] }; /* d may alias c */
        mma(32, d, a, b, cc);
    }
    void mma16816(int d[4], uint32_t a0, uint32_t a1, uint32_t b0, const int c[4]) const {
        const uint32_t a[2] = { a0, a1 }, b[1] = { b0 };
        const int cc[4] = { c[0], c[1], c[2], c[3] };
        mma(16, d, a, b, cc);
    }
    bool any(bool v) const {
        HostWarp &hw = w();
        hw.x[lane][0] = v ? 1u : 0u;
        hw.bar.wait();
        bool r = false;
        for (int l = 0; l < 32; l++) r = r || hw.x[l][0] != 0;
        hw.bar.wait();
        return r;
    }
    void mma_f16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4]) const {
        HostWarp &hw = w();
        for (int i = 0; i < 4; i++) hw.x[lane][i] = a[i];
        hw.x[lane][4] = b0;
        hw.x[lane][5] = b1;
        hw.bar.wait();
        uint32_t A[32][4], B[32][2];
        for (int l = 0; l < 32; l++) {
            for (int i = 0; i < 4; i++) A[l][i] = hw.x[l][i];
            for (int i = 0; i < 2; i++) B[l][i] = hw.x[l][4 + i];
        }
        hw.bar.wait();
        float dd[4] = { c[0], c[1], c[2], c[3] }; /* d may alias c */
        mma_f16_ref(A, B, lane, dd);
        for (int i = 0; i < 4; i++) d[i] = dd[i];
    }
    /* ldmatrix .x4: lanes 8i..8i+7 address the rows of matrix i (16 bytes each); plain: r[i] =
     * M_i[lane/4][2(lane%4)..+1]; trans: r[i] = (M_i[2(lane%4)][lane/4], M_i[2(lane%4)+1][lane/4]) */
    void ldsm(uint32_t r[4], const void *row, bool trans) const {
        HostWarp &hw = w();
        const uint64_t p = (uint64_t)(uintptr_t)row;
        if (p % 16) { fprintf(stderr, "ldmatrix: row address not 16-byte aligned\n"); abort(); }
        hw.x[lane][0] = (uint32_t)p;
        hw.x[lane][1] = (uint32_t)(p >> 32);
        hw.bar.wait();
        const unsigned char *rows[32];
        for (int l = 0; l < 32; l++) rows[l] = (const unsigned char *)(uintptr_t)((uint64_t)hw.x[l][0] | ((uint64_t)hw.x[l][1] << 32));
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) {
            if (!trans) {
                memcpy(&r[i], rows[8 * i + g] + 4 * t, 4);
            } else {
                uint16_t lo, hi;
                memcpy(&lo, rows[8 * i + 2 * t] + 2 * g, 2);
                memcpy(&hi, rows[8 * i + 2 * t + 1] + 2 * g, 2);
                r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
            }
        }
        hw.bar.wait();
    }
    void ldsm4(uint32_t r[4], const void *row) const { ldsm(r, row, false); }
    void ldsm4t(uint32_t r[4], const void *row) const { ldsm(r, row, true); }
    void cp16(void *dst, const void *src, bool valid) const {
        if (valid) memcpy(dst, src, 16);
        else memset(dst, 0, 16);
    }
    void cp_commit() const {}
    template <int N> void cp_wait() const {}
    void grid_wait() const {}
};

/* Run body(thr, smem) for every thread of every block of a (gx, gy) grid of `threads`-thread blocks
 * with `smem_bytes` of shared memory per block (blocks one after another). */
inline void simt_launch(int64_t gx, int64_t gy, int threads, size_t smem_bytes,
                        const std::function<void(HostThr &, unsigned char *)> &body) {
    for (int64_t by = 0; by < gy; by++) {
        for (int64_t bx = 0; bx < gx; bx++) {
            HostBlock blk;
            blk.bar.n = threads;
            blk.warps = std::vector<HostWarp>((size_t)(threads + 31) / 32);
            for (auto &hw : blk.warps) hw.bar.n = 32;
            blk.smem.assign(smem_bytes + 16, 0xcd); /* garbage, as on the GPU */
            unsigned char *sm = blk.smem.data() + ((16 - ((uintptr_t)blk.smem.data() & 15)) & 15);
            std::vector<std::thread> th;
            for (int i = 0; i < threads; i++) {
                th.emplace_back([&, i] {
                    HostThr t{ i, i % 32, i / 32, threads, bx, by, &blk };
                    body(t, sm);
                });
            }
            for (auto &x : th) x.join();
        }
    }
}

#endif
