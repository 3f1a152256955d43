/* plugins/cpu/quants.c — the quantized types' function tables for the CPU plugin.
 *
 * Two tables per type: the scalar one and, on x86 CPUs with AVX2+FMA+F16C, one whose vec_dot is
 * the SIMD kernel. The choice is made once per process (CPU feature test); a test harness can force
 * the scalar tables with quant_cpu_force_scalar (the plugin's own switch is the device option
 * kernels=reference). vec_dot_ref is always scalar.
 * Every table has every slot: a quantized type can be converted both ways and dotted against its
 * vec_dot_type. See quants.h for the layouts and the calling contract.
 */
#include <stdlib.h>
#include "quants.h"

static int g_force_scalar;

void quant_cpu_force_scalar(int on) { g_force_scalar = on != 0; }

int quant_cpu_has_avx2(void) {
    static int cached = -1; /* benign race: every thread computes the same value */
    int v = cached;
    if (v < 0) {
        v = 0;
#ifdef QUANT_HAVE_X86
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            __builtin_cpu_supports("f16c");
#endif
        cached = v;
    }
    return v && !g_force_scalar;
}

#define FUNCS(T, VT, DOT, REF) \
    { quant_##T##_to_f32, quant_##T##_from_f32, PYG_TYPE_##VT, DOT, REF }
#define FUNCS_Q(T, FROM, VT, DOT, REF) { quant_##T##_to_f32, FROM, PYG_TYPE_##VT, DOT, REF }

static const cpu_type_funcs scalar_tables[] = {
    FUNCS(q4_0, Q8_0, quant_vec_dot_q4_0_q8_0_ref, quant_vec_dot_q4_0_q8_0_ref),
    FUNCS(q4_1, Q8_1, quant_vec_dot_q4_1_q8_1_ref, quant_vec_dot_q4_1_q8_1_ref),
    FUNCS(q5_0, Q8_0, quant_vec_dot_q5_0_q8_0_ref, quant_vec_dot_q5_0_q8_0_ref),
    FUNCS(q5_1, Q8_1, quant_vec_dot_q5_1_q8_1_ref, quant_vec_dot_q5_1_q8_1_ref),
    FUNCS(q8_0, Q8_0, quant_vec_dot_q8_0_q8_0_ref, quant_vec_dot_q8_0_q8_0_ref),
    FUNCS(q8_1, Q8_1, quant_vec_dot_q8_1_q8_1_ref, quant_vec_dot_q8_1_q8_1_ref),
    FUNCS(q4_K, Q8_K, quant_vec_dot_q4_K_q8_K_ref, quant_vec_dot_q4_K_q8_K_ref),
    FUNCS(q5_K, Q8_K, quant_vec_dot_q5_K_q8_K_ref, quant_vec_dot_q5_K_q8_K_ref),
    FUNCS(q6_K, Q8_K, quant_vec_dot_q6_K_q8_K_ref, quant_vec_dot_q6_K_q8_K_ref),
    FUNCS(q8_K, Q8_K, quant_vec_dot_q8_K_q8_K_ref, quant_vec_dot_q8_K_q8_K_ref),
};

#ifdef QUANT_HAVE_X86
static const cpu_type_funcs avx2_tables[] = {
    FUNCS(q4_0, Q8_0, quant_vec_dot_q4_0_q8_0_avx2, quant_vec_dot_q4_0_q8_0_ref),
    FUNCS(q4_1, Q8_1, quant_vec_dot_q4_1_q8_1_avx2, quant_vec_dot_q4_1_q8_1_ref),
    FUNCS(q5_0, Q8_0, quant_vec_dot_q5_0_q8_0_avx2, quant_vec_dot_q5_0_q8_0_ref),
    FUNCS(q5_1, Q8_1, quant_vec_dot_q5_1_q8_1_avx2, quant_vec_dot_q5_1_q8_1_ref),
    FUNCS_Q(q8_0, quant_q8_0_from_f32_avx2, Q8_0, quant_vec_dot_q8_0_q8_0_avx2, quant_vec_dot_q8_0_q8_0_ref),
    FUNCS(q8_1, Q8_1, quant_vec_dot_q8_1_q8_1_ref, quant_vec_dot_q8_1_q8_1_ref),
    FUNCS(q4_K, Q8_K, quant_vec_dot_q4_K_q8_K_avx2, quant_vec_dot_q4_K_q8_K_ref),
    FUNCS(q5_K, Q8_K, quant_vec_dot_q5_K_q8_K_avx2, quant_vec_dot_q5_K_q8_K_ref),
    FUNCS(q6_K, Q8_K, quant_vec_dot_q6_K_q8_K_avx2, quant_vec_dot_q6_K_q8_K_ref),
    FUNCS_Q(q8_K, quant_q8_K_from_f32_avx2, Q8_K, quant_vec_dot_q8_K_q8_K_ref, quant_vec_dot_q8_K_q8_K_ref),
};
#endif

static int table_index(int32_t type) {
    switch (type) {
    case PYG_TYPE_Q4_0: return 0;
    case PYG_TYPE_Q4_1: return 1;
    case PYG_TYPE_Q5_0: return 2;
    case PYG_TYPE_Q5_1: return 3;
    case PYG_TYPE_Q8_0: return 4;
    case PYG_TYPE_Q8_1: return 5;
    case PYG_TYPE_Q4_K: return 6;
    case PYG_TYPE_Q5_K: return 7;
    case PYG_TYPE_Q6_K: return 8;
    case PYG_TYPE_Q8_K: return 9;
    default: return -1;
    }
}

const cpu_type_funcs *cpu_quant_funcs_get(int32_t type) {
    const int i = table_index(type);
    if (i < 0) return NULL;
#ifdef QUANT_HAVE_X86
    if (quant_cpu_has_avx2()) return &avx2_tables[i];
#endif
    return &scalar_tables[i];
}

/* ---- multi-row dot products: a loop over vec_dot where no dedicated kernel exists ---- */

#define MULTI_LOOP(T)                                                                         \
    static void multi_loop_##T(int64_t n, float *s, const void *x, const void *y,            \
                               size_t y_stride, int ny) {                                     \
        const cpu_type_funcs *f = cpu_quant_funcs_get(PYG_TYPE_##T);                          \
        for (int k = 0; k < ny; k++) f->vec_dot(n, s + k, x, (const char *)y + (size_t)k * y_stride); \
    }
MULTI_LOOP(Q4_0) MULTI_LOOP(Q4_1) MULTI_LOOP(Q5_0) MULTI_LOOP(Q5_1) MULTI_LOOP(Q8_0)
MULTI_LOOP(Q8_1) MULTI_LOOP(Q4_K) MULTI_LOOP(Q5_K) MULTI_LOOP(Q6_K) MULTI_LOOP(Q8_K)
#undef MULTI_LOOP

quant_vec_dot_multi_fn cpu_quant_vec_dot_multi_get(int32_t type) {
#ifdef QUANT_HAVE_X86
    if (quant_cpu_has_avx2()) {
        switch (type) {
        case PYG_TYPE_Q4_0: return quant_vec_dot_multi_q4_0_q8_0_avx2;
        case PYG_TYPE_Q8_0: return quant_vec_dot_multi_q8_0_q8_0_avx2;
        case PYG_TYPE_Q4_K: return quant_vec_dot_multi_q4_K_q8_K_avx2;
        case PYG_TYPE_Q5_K: return quant_vec_dot_multi_q5_K_q8_K_avx2;
        case PYG_TYPE_Q6_K: return quant_vec_dot_multi_q6_K_q8_K_avx2;
        default: break;
        }
    }
#endif
    switch (type) {
    case PYG_TYPE_Q4_0: return multi_loop_Q4_0;
    case PYG_TYPE_Q4_1: return multi_loop_Q4_1;
    case PYG_TYPE_Q5_0: return multi_loop_Q5_0;
    case PYG_TYPE_Q5_1: return multi_loop_Q5_1;
    case PYG_TYPE_Q8_0: return multi_loop_Q8_0;
    case PYG_TYPE_Q8_1: return multi_loop_Q8_1;
    case PYG_TYPE_Q4_K: return multi_loop_Q4_K;
    case PYG_TYPE_Q5_K: return multi_loop_Q5_K;
    case PYG_TYPE_Q6_K: return multi_loop_Q6_K;
    case PYG_TYPE_Q8_K: return multi_loop_Q8_K;
    default: return NULL;
    }
}

/* ---- AVX-512 detection and the kernel sets per instruction-set level ---- */

int quant_cpu_has_avx512(void) {
    static int cached = -1;
    int v = cached;
    if (v < 0) {
        v = 0;
#ifdef QUANT_HAVE_X86
        if (quant_cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            v = __builtin_cpu_supports("avx512vnni") ? 2 : 1;
#endif
        cached = v;
    }
    return v;
}

int quant_isa_best(void) {
    if (quant_cpu_has_avx512()) return QUANT_ISA_AVX512;
    if (quant_cpu_has_avx2()) return QUANT_ISA_AVX2;
    return QUANT_ISA_REFERENCE;
}

static void multi_ref_loop(quant_vec_dot_fn dot, int64_t n, float *s, const void *x, const void *y, size_t ys,
                           int ny) {
    for (int k = 0; k < ny; k++) dot(n, s + k, x, (const char *)y + (size_t)k * ys);
}
#define MULTI_REF(T)                                                                               \
    static void multi_ref_##T(int64_t n, float *s, const void *x, const void *y, size_t ys, int ny) { \
        multi_ref_loop(scalar_tables[table_index(PYG_TYPE_##T)].vec_dot, n, s, x, y, ys, ny);     \
    }
MULTI_REF(Q4_0) MULTI_REF(Q4_1) MULTI_REF(Q5_0) MULTI_REF(Q5_1) MULTI_REF(Q8_0)
MULTI_REF(Q8_1) MULTI_REF(Q4_K) MULTI_REF(Q5_K) MULTI_REF(Q6_K) MULTI_REF(Q8_K)
#undef MULTI_REF

static quant_vec_dot_multi_fn multi_ref_get(int32_t type) {
    switch (type) {
    case PYG_TYPE_Q4_0: return multi_ref_Q4_0;
    case PYG_TYPE_Q4_1: return multi_ref_Q4_1;
    case PYG_TYPE_Q5_0: return multi_ref_Q5_0;
    case PYG_TYPE_Q5_1: return multi_ref_Q5_1;
    case PYG_TYPE_Q8_0: return multi_ref_Q8_0;
    case PYG_TYPE_Q8_1: return multi_ref_Q8_1;
    case PYG_TYPE_Q4_K: return multi_ref_Q4_K;
    case PYG_TYPE_Q5_K: return multi_ref_Q5_K;
    case PYG_TYPE_Q6_K: return multi_ref_Q6_K;
    case PYG_TYPE_Q8_K: return multi_ref_Q8_K;
    default: return NULL;
    }
}

int quant_mm_kernels_get(int32_t type, int isa, quant_mm_kernels *k) {
    const int i = table_index(type);
    if (i < 0) return -1;
    const int best = quant_isa_best();
    if (isa > best) isa = best;
    k->dot = scalar_tables[i].vec_dot;
    k->rows4 = NULL;
    k->multi = multi_ref_get(type);
#ifdef QUANT_HAVE_X86
    if (isa >= QUANT_ISA_AVX2) {
        k->dot = avx2_tables[i].vec_dot;
        k->multi = cpu_quant_vec_dot_multi_get(type);
        if (type == PYG_TYPE_Q4_0) k->rows4 = quant_vec_dot_rows4_q4_0_q8_0_avx2;
    }
    if (isa >= QUANT_ISA_AVX512) {
        const int vnni = quant_cpu_has_avx512() >= 2;
        quant_vec_dot_fn d = NULL;
        switch (type) {
        case PYG_TYPE_Q4_0: d = vnni ? quant_vec_dot_q4_0_q8_0_avx512vnni : quant_vec_dot_q4_0_q8_0_avx512bw; break;
        case PYG_TYPE_Q8_0: d = vnni ? quant_vec_dot_q8_0_q8_0_avx512vnni : quant_vec_dot_q8_0_q8_0_avx512bw; break;
        case PYG_TYPE_Q4_K: d = vnni ? quant_vec_dot_q4_K_q8_K_avx512vnni : quant_vec_dot_q4_K_q8_K_avx512bw; break;
        case PYG_TYPE_Q6_K: d = vnni ? quant_vec_dot_q6_K_q8_K_avx512vnni : quant_vec_dot_q6_K_q8_K_avx512bw; break;
        default: break;
        }
        if (d) { /* the AVX-512 dot for every position: no AVX2 rows4/multi mixed in */
            k->dot = d;
            k->rows4 = NULL;
            k->multi = NULL;
        }
    }
#else
    (void)isa;
#endif
    return 0;
}
