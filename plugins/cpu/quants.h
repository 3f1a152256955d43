/* plugins/cpu/quants.h — ggml's quantized block formats inside the CPU plugin.
 *
 * Internal (hidden visibility). cpu_quant_funcs_get() (type_funcs.h) is the entry the rest of
 * the plugin uses; this header adds the block layouts, the f16 helpers and the multi-row dot
 * product for mat-mat kernels.
 *
 * Contract of every function here: n is a positive multiple of the type's block size (the caller
 * checks; nothing here re-checks), pointers are valid for the whole rows, and the rows do not
 * overlap. Blocks may sit at any 2-byte aligned address (q8_K: 4-byte aligned).
 *
 * Layouts are byte-for-byte those of ggml/GGUF (little-endian):
 *   q4_0  f16 d, 16 B nibbles              x = d*(q-8); element j in low nibble of qs[j],
 *                                          element j+16 in the high nibble
 *   q4_1  f16 d, f16 m, 16 B nibbles       x = d*q + m
 *   q5_0  f16 d, u32 qh, 16 B nibbles      x = d*(q-16); bit 4 of element j in qh bit j
 *   q5_1  f16 d, f16 m, u32 qh, 16 B       x = d*q + m
 *   q8_0  f16 d, 32 x i8                   x = d*q
 *   q8_1  f16 d, f16 s = d*sum(q), 32 x i8 x = d*q
 *   q4_K  f16 d, f16 dmin, 12 B 6-bit scales/mins, 128 B nibbles (super-block of 256, 8 x 32)
 *                                          x = d*sc[j]*q - dmin*m[j]
 *   q5_K  q4_K's fields + 32 B qh: bit 4 of element 64c+l in qh[l] bit 2c (64c+32+l: bit 2c+1)
 *                                          x = d*sc[j]*q - dmin*m[j], q in 0..31
 *   q6_K  128 B low nibbles, 64 B high 2-bit pairs, 16 x i8 scales, f16 d (16 x 16)
 *                                          x = d*sc[j]*(q-32)
 *   q8_K  f32 d, 256 x i8, 16 x i16 sums of 16 consecutive q   x = d*q
 */
#ifndef PYGGML_CPU_QUANTS_H
#define PYGGML_CPU_QUANTS_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "type_funcs.h"

#define QK_32 32
#define QK_SUPER 256

typedef struct { uint16_t d; uint8_t qs[16]; } blk_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[16]; } blk_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_1;
typedef struct { uint16_t d; int8_t qs[32]; } blk_q8_0;
typedef struct { uint16_t d, s; int8_t qs[32]; } blk_q8_1;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } blk_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } blk_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } blk_q6_K;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } blk_q8_K;

_Static_assert(sizeof(blk_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(blk_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(blk_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(blk_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(blk_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(blk_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(blk_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(blk_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(blk_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(blk_q8_K) == 292, "q8_K block");

/* IEEE binary16 <-> binary32. f32 -> f16 rounds to nearest, ties to even (numpy's astype),
 * overflow gives inf, NaN stays NaN (quiet). Exact in the other direction. */
/* The 12-byte q4_K/q5_K scale field as four words of bytes: w[0] = the 8 six-bit scales' bytes
 * 0..3, w[1] = scales 4..7, w[2] = mins 0..3, w[3] = mins 4..7 (each byte one value, 0..63). The
 * SIMD kernels widen these to 16-bit lanes. */
static inline void quant_k4_scales_mins_words(const uint8_t *s12, uint32_t w[4]) {
    uint32_t a, b, c;
    memcpy(&a, s12, 4);
    memcpy(&b, s12 + 4, 4);
    memcpy(&c, s12 + 8, 4);
    w[0] = a & 0x3f3f3f3fu;
    w[1] = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
    w[2] = b & 0x3f3f3f3fu;
    w[3] = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
}

static inline float quant_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0x1f) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    } else {
        float f = (float)m * 0x1p-24f; /* subnormal or zero: exact */
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    }
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

static inline uint16_t quant_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu);  /* NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00u;          /* >= 65520 rounds to inf */
    if (ax >= 0x38800000u) {                               /* normal in f16 */
        uint32_t r = ax - 0x38000000u;                     /* rebias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);                    /* ties to even */
        return sign | (uint16_t)(r >> 13);
    }
    /* below 2^-14: subnormal in f16. Adding 0.5 puts the value where one ulp is 2^-24 (the f16
     * subnormal step), so the hardware add performs the tie-to-even rounding for us. */
    float a, t;
    memcpy(&a, &ax, sizeof a);
    t = a + 0.5f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    return sign | (uint16_t)(tb - 0x3f000000u);
}

/* ---- scalar (reference) kernels, quants_ref.c ---- */
#define QUANT_DECL(T) \
    void quant_##T##_to_f32(const void *src, float *dst, int64_t n); \
    void quant_##T##_from_f32(const float *src, void *dst, int64_t n);
QUANT_DECL(q4_0) QUANT_DECL(q4_1) QUANT_DECL(q5_0) QUANT_DECL(q5_1) QUANT_DECL(q8_0)
QUANT_DECL(q8_1) QUANT_DECL(q4_K) QUANT_DECL(q5_K) QUANT_DECL(q6_K) QUANT_DECL(q8_K)
#undef QUANT_DECL

void quant_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q8_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q8_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);

/* ---- AVX2 + FMA + F16C kernels, quants_avx2.c (x86 only; call only when the CPU has them) ---- */
#if defined(__x86_64__) || defined(__i386__)
#define QUANT_HAVE_X86 1
void quant_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q5_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q6_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void quant_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y);
void quant_q8_0_from_f32_avx2(const float *src, void *dst, int64_t n);
void quant_q8_K_from_f32_avx2(const float *src, void *dst, int64_t n);
void quant_vec_dot_multi_q4_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y,
                                        size_t y_stride, int ny);
void quant_vec_dot_multi_q8_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y,
                                        size_t y_stride, int ny);
void quant_vec_dot_multi_q4_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y,
                                        size_t y_stride, int ny);
void quant_vec_dot_multi_q5_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y,
                                        size_t y_stride, int ny);
void quant_vec_dot_multi_q6_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y,
                                        size_t y_stride, int ny);
#endif

/* 1 when the AVX2 kernels may run on this CPU (avx2, fma and f16c all present). */
int quant_cpu_has_avx2(void);
/* Test harnesses: 1 = the scalar tables from now on, as on a CPU without AVX2 (not thread-safe:
 * call before any kernel runs). */
void quant_cpu_force_scalar(int on);

/* ---- AVX-512 kernels, quants_avx512.c (x86 only; each function carries its own target
 * attribute, so the library still loads and runs on AVX2-only CPUs). _bw: AVX-512 F/BW/VL/DQ;
 * _vnni: the same plus AVX512-VNNI (vpdpbusd / vpdpwssd). ---- */
#ifdef QUANT_HAVE_X86
#define QUANT_AVX512_DECL(S) \
    void quant_vec_dot_q4_0_q8_0_##S(int64_t n, float *s, const void *x, const void *y); \
    void quant_vec_dot_q8_0_q8_0_##S(int64_t n, float *s, const void *x, const void *y); \
    void quant_vec_dot_q4_K_q8_K_##S(int64_t n, float *s, const void *x, const void *y); \
    void quant_vec_dot_q6_K_q8_K_##S(int64_t n, float *s, const void *x, const void *y);
QUANT_AVX512_DECL(avx512bw) QUANT_AVX512_DECL(avx512vnni)
#undef QUANT_AVX512_DECL
void quant_vec_dot_rows4_q4_0_q8_0_avx2(int64_t n, float *s, const void *x, size_t x_stride, const void *y);
/* q8_0, 8 rows interleaved (quants_avx2.c): per block 8 float scales, then 8 vectors of 8 rows x 4 quants */
#define QUANT_Q8_0X8_BLOCK (32 + 256)
void quant_q8_0_repack8_avx2(const void *x, size_t row_stride, int64_t nb, void *dst);
void quant_q8_0x8_gemm4_avx2(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc);
/* q4_0 with 8 rows interleaved (quants_avx2.c), for mat-vec and GEMM. repack8: 8 weight rows
 * (row_stride bytes apart), nb blocks, into nb * QUANT_Q4_0X8_BLOCK bytes: per block the 8 rows'
 * f16 scales, then 4 x 32 bytes where 32-bit lane l of vector j is bytes 4j..4j+3 of row l's
 * nibbles. gemv: dst[0..7] = the 8 rows' dots with q8_0 row y; gemm4: dst[c][0..7] for the
 * activation rows y[c], c < nc <= 4. dy / s8: the activation rows' per-block float scales and
 * 8 * block sums (quant_q8_0_block_sums_avx2). */
#define QUANT_Q4_0X8_BLOCK 144
void quant_q4_0_repack8_avx2(const void *x, size_t row_stride, int64_t nb, void *dst);
void quant_q4_0x8_gemv_avx2(int64_t nb, const void *panel, const void *y, const float *dy, const int32_t *s8,
                            float *dst);
void quant_q4_0x8_gemm4_avx2(int64_t nb, const void *panel, const void *const *y, const float *const *dy,
                             const int32_t *const *s8, float *const *dst, int nc);
/* q4_K with 8 rows interleaved (layout in quants_avx2.c); activations are q8_K rows. */
#define QUANT_Q4_KX8_BLOCK 1184
void quant_q4_K_repack8_avx2(const void *x, size_t row_stride, int64_t nb, void *dst);
void quant_q4_Kx8_gemv_avx2(int64_t nb, const void *panel, const void *y, float *dst);
void quant_q4_Kx8_gemm4_avx2(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc);
void quant_q8_0_block_sums_avx2(const void *y, int64_t nb, float *dy, int32_t *s8);
/* The same tiles for up to 8 activation rows with AVX512-VNNI (gemm_vnni.c; only where
 * quant_cpu_has_avx512() == 2): the same panels and activation rows, the same floats out. */
#define QUANT_GEMM_VNNI_NC 8
void quant_q4_Kx8_gemm8_vnni(int64_t nb, const void *expanded_panel, const void *const *y, float *const *dst, int nc);
/* the q4_Kx8 / q4_0x8 / q8_0x8 panels with their values as unsigned bytes, which the gemm8 tiles
 * read (gemm_vnni.c); quant_x8_expand_bytes: the expanded size of nb blocks of a type */
void quant_q4_Kx8_expand_vnni(int64_t nb, const void *panel, void *dst);
void quant_q4_0x8_expand_vnni(int64_t nb, const void *panel, void *dst);
void quant_q8_0x8_expand_vnni(int64_t nb, const void *panel, void *dst);
size_t quant_x8_expand_bytes(int32_t type, int64_t nb);
/* q4_0 / q8_0 (type) over expanded panels; dy / s8 as for quant_q4_0x8_gemm4_avx2 (q8_0 too) */
void quant_q_x8_gemm8_vnni(int32_t type, int64_t nb, const void *expanded, const void *const *y,
                           const float *const *dy, const int32_t *const *s8, float *const *dst, int nc);
/* q6_K with 8 rows interleaved (layout in gemm_q6k.c; values decoded to bytes); activations q8_K. */
#define QUANT_Q6_KX8_BLOCK 2448
void quant_q6_K_repack8(const void *x, size_t row_stride, int64_t nb, void *dst);
void quant_q6_Kx8_gemm4_avx2(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc);
void quant_q6_Kx8_gemm8_vnni(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc);
#endif
/* 1 when the AVX-512 F/BW/VL/DQ (+F16C, FMA) kernels may run; 2 when AVX512-VNNI is there too. */
int quant_cpu_has_avx512(void);


/* ---- multi-row dot product (for mul_mat with several activation rows) ----
 * s[k] = dot(x, y_k) for k < ny, where y_k = (const char *)y + k*y_stride is a row of the type's
 * vec_dot_type. One weight row is decoded once and used against all ny rows, so the weights
 * stream from memory once per ny activation rows. 1 <= ny <= QUANT_MULTI_MAX per call (callers
 * loop over larger counts). Results equal vec_dot's up to float summation order. */
#define QUANT_MULTI_MAX 4
typedef void (*quant_vec_dot_multi_fn)(int64_t n, float *s, const void *x, const void *y,
                                       size_t y_stride, int ny);
/* The fastest multi-row kernel for a quantized type (never NULL for a type that
 * cpu_quant_funcs_get knows; a generic loop over vec_dot where no special kernel exists);
 * NULL for other types. */
quant_vec_dot_multi_fn cpu_quant_vec_dot_multi_get(int32_t type);

/* ---- kernel sets for MUL_MAT, by instruction set ---- */
#define QUANT_ISA_REFERENCE 0 /* scalar C */
#define QUANT_ISA_AVX2 1      /* AVX2 + FMA + F16C */
#define QUANT_ISA_AVX512 2    /* AVX-512 F/BW/VL/DQ (VNNI where the CPU has it) */

typedef void (*quant_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
/* s[r] = dot(row r, y) for the 4 rows x + r*x_stride (r < 4) */
typedef void (*quant_vec_dot_rows4_fn)(int64_t n, float *s, const void *x, size_t x_stride, const void *y);
typedef struct quant_mm_kernels {
    quant_vec_dot_fn dot;          /* one row x one activation row (required) */
    quant_vec_dot_rows4_fn rows4;  /* four rows x one activation row (NULL: 4 calls of dot) */
    quant_vec_dot_multi_fn multi;  /* one row x up to 4 activation rows (NULL: calls of dot) */
} quant_mm_kernels;
/* The kernels of a quantized type for an instruction-set level (QUANT_ISA_*); a level the CPU
 * lacks, or a type without kernels at that level, falls back to the next lower level. Returns 0
 * and fills *k, or -1 for types that are not quantized. dot, rows4 and multi may round
 * differently for the same (row, activation row): callers choose among them by the output's
 * position only, never by the thread count. */
int quant_mm_kernels_get(int32_t type, int isa, quant_mm_kernels *k);
/* Highest QUANT_ISA_* level this CPU runs (PYGGML_CPU_NO_AVX2=1 gives REFERENCE). */
int quant_isa_best(void);

#endif
