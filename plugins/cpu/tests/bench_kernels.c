/* Per-kernel throughput of the quantized dot products, one thread, no scheduler:
 *   cc -O2 -Iinclude -Iplugins/cpu plugins/cpu/tests/bench_kernels.c plugins/cpu/quants*.c -lm
 * Rows of K=4096 against one activation row. "hot" = a weight set that fits in L2 (compute
 * bound); "cold" = 64 MiB of weights (memory bound). Prints GB/s of weight bytes. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "quants.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *names[] = { "q4_0", "q8_0", "q4_K", "q6_K" };
static const int32_t types[] = { PYG_TYPE_Q4_0, PYG_TYPE_Q8_0, PYG_TYPE_Q4_K, PYG_TYPE_Q6_K };

int main(int argc, char **argv) {
    const int64_t K = 4096;
    const size_t cold_bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
    float *xf = malloc(K * sizeof(float)), *w = malloc(K * sizeof(float));
    srand(1);
    for (int64_t i = 0; i < K; i++) {
        xf[i] = (float)rand() / RAND_MAX - 0.5f;
        w[i] = (float)rand() / RAND_MAX - 0.5f;
    }
    for (int t = 0; t < 4; t++) {
        const cpu_type_funcs *f = cpu_quant_funcs_get(types[t]);
        const cpu_type_funcs *fv = cpu_quant_funcs_get(f->vec_dot_type);
        const size_t rb = pyg_type_row_size(types[t], K);
        char *y = aligned_alloc(64, 1 << 16);
        fv->from_f32(xf, y, K);
        for (int pass = 0; pass < 2; pass++) {
            const size_t bytes = pass == 0 ? (256 << 10) : cold_bytes;
            const int64_t rows = bytes / rb;
            char *x = aligned_alloc(64, (rows * rb + 63) & ~63ul);
            for (int64_t r = 0; r < rows; r++) f->from_f32(w, x + r * rb, K);
            float s = 0, acc = 0;
            double best = 1e9;
            const int reps = pass == 0 ? 200 : 10;
            for (int rep = 0; rep < reps; rep++) {
                double t0 = now();
                for (int64_t r = 0; r < rows; r++) {
                    f->vec_dot(K, &s, x + r * rb, y);
                    acc += s;
                }
                double dt = now() - t0;
                if (dt < best) best = dt;
            }
            printf("%-5s %-4s %8.2f GB/s  %6.2f ns/row (%g)\n", names[t], pass ? "cold" : "hot",
                   rows * rb / best / 1e9, best / rows * 1e9, acc);
            free(x);
        }
        free(y);
    }
    return 0;
}
