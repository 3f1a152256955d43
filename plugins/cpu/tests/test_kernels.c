/* Quantized dot-product kernels of every instruction-set level against the scalar reference
 * kernels and a float64 dot of the dequantized rows, without Python:
 *   make -f plugins/cpu/tests/Makefile kernels
 * Levels the CPU lacks are reported as skipped. Exit status 1 on any mismatch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "quants.h"

static const char *names[] = { "q4_0", "q8_0", "q4_K", "q6_K", "q4_1", "q5_0", "q5_1", "q5_K" };
static const int32_t types[] = { PYG_TYPE_Q4_0, PYG_TYPE_Q8_0, PYG_TYPE_Q4_K, PYG_TYPE_Q6_K,
                                 PYG_TYPE_Q4_1, PYG_TYPE_Q5_0, PYG_TYPE_Q5_1, PYG_TYPE_Q5_K };
static const char *isa_names[] = { "reference", "avx2", "avx512" };

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

int main(void) {
    int fails = 0;
    const int best = quant_isa_best();
    printf("best level on this CPU: %s%s\n", isa_names[best],
           best == QUANT_ISA_AVX512 ? (quant_cpu_has_avx512() >= 2 ? " (VNNI)" : " (no VNNI)") : "");
    const int64_t Ks[] = { 256, 512, 4096, 32 * 9 * 8 * 3 }; /* odd block counts for the pair loops */
    for (int t = 0; t < 8; t++) {
        const cpu_type_funcs *f = cpu_quant_funcs_get(types[t]);
        const cpu_type_funcs *fv = cpu_quant_funcs_get(f->vec_dot_type);
        for (int ki = 0; ki < 4; ki++) {
            const int64_t K = Ks[ki];
            const int blk = pyg_type_get_traits(types[t])->block_size;
            if (K % blk) continue;
            const int R = 6, C = 5; /* weight rows, activation rows */
            const size_t rb = pyg_type_row_size(types[t], K), yb = pyg_type_row_size(f->vec_dot_type, K);
            float *w = malloc(sizeof(float) * K * R), *a = malloc(sizeof(float) * K * C);
            float *wd = malloc(sizeof(float) * K * R), *ad = malloc(sizeof(float) * K * C);
            char *x = malloc(rb * R), *y = malloc(yb * C);
            for (int64_t i = 0; i < K * R; i++) w[i] = frand() * (1.0f + (float)(i % 7));
            for (int64_t i = 0; i < K * C; i++) a[i] = frand();
            for (int r = 0; r < R; r++) {
                f->from_f32(w + r * K, x + r * rb, K);
                f->to_f32(x + r * rb, wd + r * K, K);
            }
            for (int c = 0; c < C; c++) {
                fv->from_f32(a + c * K, y + c * yb, K);
                fv->to_f32(y + c * yb, ad + c * K, K);
            }
            for (int isa = 0; isa <= 2; isa++) {
                if (isa > best) {
                    if (t == 0 && ki == 0) printf("SKIP %s: this CPU lacks it\n", isa_names[isa]);
                    continue;
                }
                quant_mm_kernels k;
                quant_mm_kernels_get(types[t], isa, &k);
                double worst = 0;
                for (int r = 0; r < R; r++)
                    for (int c = 0; c < C; c++) {
                        double ref = 0, mag = 0;
                        for (int64_t i = 0; i < K; i++) {
                            ref += (double)wd[r * K + i] * ad[c * K + i];
                            mag += fabs((double)wd[r * K + i] * ad[c * K + i]);
                        }
                        float got[3] = { 0, 0, 0 }, want = 0;
                        k.dot(K, &got[0], x + r * rb, y + c * yb);
                        f->vec_dot_ref(K, &want, x + r * rb, y + c * yb);
                        if (fabs((double)got[0] - want) / (mag + 1e-30) > 1e-5) {
                            printf("FAIL %s K=%lld %s: dot %g vs reference kernel %g\n", names[t], (long long)K,
                                   isa_names[isa], got[0], want);
                            fails++;
                        }
                        if (k.rows4 && r + 4 <= R) {
                            float s4[4];
                            k.rows4(K, s4, x + r * rb, rb, y + c * yb);
                            got[1] = s4[0];
                        } else {
                            got[1] = got[0];
                        }
                        if (k.multi && c + 2 <= C) {
                            float sm[2];
                            k.multi(K, sm, x + r * rb, y + c * yb, yb, 2);
                            got[2] = sm[0];
                        } else {
                            got[2] = got[0];
                        }
                        for (int g = 0; g < 3; g++) {
                            const double e = fabs(got[g] - ref) / (mag + 1e-30);
                            if (!(e <= worst)) worst = e;
                        }
                    }
                /* q4_1/q5_1 dot against q8_1, whose s = d*sum(q) is stored as f16: that rounding
                 * is the format's, so those two get a looser bound against float64 */
                const int ok = worst < (types[t] == PYG_TYPE_Q4_1 || types[t] == PYG_TYPE_Q5_1 ? 3e-4 : 1e-5);
                if (!ok) fails++;
                printf("%-4s %-5s K=%-5lld max |err|/sum|terms| = %.2e %s\n", ok ? "ok" : "FAIL", names[t], (long long)K,
                       worst, isa_names[isa]);
            }
#ifdef QUANT_HAVE_X86
            /* the AVX-512BW variants too where the CPU also has VNNI (the dispatcher then never
             * picks them) */
            quant_vec_dot_fn bw = NULL;
            switch (types[t]) {
            case PYG_TYPE_Q4_0: bw = quant_vec_dot_q4_0_q8_0_avx512bw; break;
            case PYG_TYPE_Q8_0: bw = quant_vec_dot_q8_0_q8_0_avx512bw; break;
            case PYG_TYPE_Q4_K: bw = quant_vec_dot_q4_K_q8_K_avx512bw; break;
            case PYG_TYPE_Q6_K: bw = quant_vec_dot_q6_K_q8_K_avx512bw; break;
            default: break;
            }
            if (bw && quant_cpu_has_avx512()) {
                double worst = 0;
                for (int r = 0; r < R; r++)
                    for (int c = 0; c < C; c++) {
                        double mag = 0;
                        for (int64_t i = 0; i < K; i++) mag += fabs((double)wd[r * K + i] * ad[c * K + i]);
                        float got = 0, want = 0;
                        bw(K, &got, x + r * rb, y + c * yb);
                        f->vec_dot_ref(K, &want, x + r * rb, y + c * yb);
                        const double e = fabs((double)got - want) / (mag + 1e-30);
                        if (!(e <= worst)) worst = e;
                    }
                const int ok = worst < 1e-5;
                if (!ok) fails++;
                printf("%-4s %-5s K=%-5lld max |err|/sum|terms| = %.2e avx512bw (vs the reference kernel)\n",
                       ok ? "ok" : "FAIL", names[t], (long long)K, worst);
            }
#endif
            free(w), free(a), free(wd), free(ad), free(x), free(y);
        }
    }
    printf(fails ? "%d FAILED\n" : "all passed\n", fails);
    return fails != 0;
}
