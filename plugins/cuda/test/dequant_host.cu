/* plugins/cuda/test/dequant_host.cu — runs the plugin's dequantizer (common.cuh, host side) on CPU:
 *   dequant_host TYPE_ID IN.bin OUT.bin
 * IN holds whole blocks; OUT gets the f32 values. It also decodes every block through the mat-vec
 * unit decoders (mmv_decode.cuh) and the int8 dot units (mmvq.cuh, two activation columns), and
 * exits 1 if they disagree with dequant_one (the dots: with a double-precision dot against the
 * same int8 activations). tests/test_cuda_build.py compares them with the
 * gguf package's reference, so the block layouts are checked on a machine without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "common.cuh"
#include "mmv_decode.cuh"
#include "mmvq.cuh"
#include <math.h>

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s TYPE IN OUT\n", argv[0]); return 2; }
    const int type = atoi(argv[1]);
    const pyg_type_traits *tr = pyg_type_get_traits(type);
    if (!tr || !tr->is_quantized) { fprintf(stderr, "bad type\n"); return 2; }
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 2;
    std::vector<uint8_t> in;
    uint8_t buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) in.insert(in.end(), buf, buf + n);
    fclose(f);
    const size_t nblk = in.size() / (size_t)tr->type_size;
    std::vector<float> out(nblk * (size_t)tr->block_size);
    for (size_t b = 0; b < nblk; b++)
        for (int i = 0; i < tr->block_size; i++)
            out[b * tr->block_size + i] = dequant_one(in.data() + b * tr->type_size, type, i);
    /* the mat-vec decoders: every unit, placed by its runs, must equal dequant_one */
    std::vector<float> mvout(out.size(), NAN);
    const int64_t K = (int64_t)out.size();
    std::vector<uint8_t> aligned(in.size() + 16); /* 16-byte aligned copy for the q4_K uint4 loads */
    uint8_t *base = aligned.data() + ((16 - ((uintptr_t)aligned.data() & 15)) & 15);
    memcpy(base, in.data(), in.size());
    float w[32];
    for (int64_t u = 0; u < K / 32; u++) {
        int64_t kb = 0;
        int runs = 0, rl = 0, roff = 0;
#define DEC(T) { kb = mv<T>::decode((const char *)base, u, K, w); runs = mv<T>::RUNS; rl = mv<T>::RL; roff = mv<T>::ROFF; }
        switch (type) {
        case PYG_TYPE_Q4_0: DEC(PYG_TYPE_Q4_0); break;
        case PYG_TYPE_Q4_1: DEC(PYG_TYPE_Q4_1); break;
        case PYG_TYPE_Q8_0: DEC(PYG_TYPE_Q8_0); break;
        case PYG_TYPE_Q4_K: DEC(PYG_TYPE_Q4_K); break;
        case PYG_TYPE_Q6_K: DEC(PYG_TYPE_Q6_K); break;
        default: return 2;
        }
        for (int r = 0; r < runs; r++)
            for (int t = 0; t < rl; t++) mvout[kb + r * roff + t] = w[r * rl + t];
    }
    for (size_t i = 0; i < out.size(); i++) {
        if (!(mvout[i] == out[i]) && fabsf(mvout[i] - out[i]) > 1e-6f * (1.0f + fabsf(out[i]))) {
            fprintf(stderr, "mat-vec decoder mismatch at %zu: %g vs %g\n", i, mvout[i], out[i]);
            return 1;
        }
    }
    /* the int8 (dp4a) units: the row is all K weights; two pseudo-random activation columns */
    {
        std::vector<float> y(2 * K);
        uint32_t st = 12345;
        for (auto &v : y) { st = st * 1664525u + 1013904223u; v = ((float)(st >> 8) / 16777216.0f - 0.5f) * 4.0f; }
        std::vector<int8_t> yq(2 * K);
        std::vector<float> yds(2 * (K / 32) * 2);
        for (int c = 0; c < 2; c++)
            for (int64_t b = 0; b < K / 32; b++)
                q8_block(&y[c * K + b * 32], &yq[c * K + b * 32], &yds[c * (K / 16) + 2 * b]);
        double expect[2] = { 0, 0 }, mag[2] = { 0, 0 };
        for (int c = 0; c < 2; c++)
            for (int64_t i = 0; i < K; i++) {
                const double t = (double)out[i] * (double)yds[c * (K / 16) + 2 * (i / 32)] * (double)yq[c * K + i];
                expect[c] += t;
                mag[c] += fabs(t);
            }
        float acc[2] = { 0, 0 };
#define DOT(T) for (int64_t u = 0; u < mmvq<T>::units(K); u++) \
        mmvq<T>::unit<2>((const char *)base, u, yq.data(), yds.data(), K, K / 16, 2, acc);
        auto dots = [&]() {
            switch (type) {
            case PYG_TYPE_Q4_0: DOT(PYG_TYPE_Q4_0); break;
            case PYG_TYPE_Q4_1: DOT(PYG_TYPE_Q4_1); break;
            case PYG_TYPE_Q8_0: DOT(PYG_TYPE_Q8_0); break;
            case PYG_TYPE_Q4_K: DOT(PYG_TYPE_Q4_K); break;
            case PYG_TYPE_Q6_K: DOT(PYG_TYPE_Q6_K); break;
            }
        };
        dots();
        for (int c = 0; c < 2; c++) {
            if (!(fabs(acc[c] - expect[c]) <= 1e-5 * mag[c] + 1e-6)) {
                fprintf(stderr, "int8 dot mismatch (column %d): %.9g vs %.9g (magnitude %g)\n", c, acc[c], expect[c],
                        mag[c]);
                return 1;
            }
        }
        fprintf(stderr, "int8 dots ok: %.6g %.6g (expect %.6g %.6g)\n", acc[0], acc[1], expect[0], expect[1]);
        /* a NaN in an activation block: the block's scale turns NaN, its quants 0, and every
         * dot that reads it NaN (fmaxf alone dropped the NaN: the block read as zeros) */
        y[5] = NAN;
        q8_block(&y[0], &yq[0], &yds[0]);
        if (yds[0] == yds[0] || yds[1] == yds[1]) {
            fprintf(stderr, "NaN block quantized to d = %g, s = %g (want NaN, NaN)\n", yds[0], yds[1]);
            return 1;
        }
        for (int i = 0; i < 32; i++)
            if (yq[i] != 0) { fprintf(stderr, "NaN block: quant %d = %d\n", i, yq[i]); return 1; }
        acc[0] = acc[1] = 0.0f;
        dots();
        if (acc[0] == acc[0] || !(acc[1] == acc[1])) {
            fprintf(stderr, "NaN in column 0: int8 dots %g %g (want NaN, finite)\n", acc[0], acc[1]);
            return 1;
        }
    }
    f = fopen(argv[3], "wb");
    if (!f) return 2;
    fwrite(out.data(), sizeof(float), out.size(), f);
    fclose(f);
    return 0;
}
