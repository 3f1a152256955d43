/* plugins/cpu/quants_ref.c — scalar quantize / dequantize / dot products for ggml's block types.
 *
 * Quantizers reproduce ggml's reference quantizers (the ones used for model files when no
 * importance matrix is given) bit for bit: same search, same float operation order, same
 * rounding (round-half-even helper, roundf, truncating casts). Floating-point contraction into
 * FMA would change the bytes, so it is switched off for this file.
 * See quants.h for the layouts and the calling contract (n is a multiple of the block size).
 */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <float.h>
#include <string.h>
#include "quants.h"

/* Round to nearest, ties to even, for |v| < 2^22: adding 1.5*2^23 leaves the integer in the
 * low mantissa bits (the add itself rounds with the current, default, mode). */
static inline int round_even(float v) {
    float t = v + 12582912.0f;
    uint32_t b;
    memcpy(&b, &t, sizeof b);
    return (int)(b - 0x4B400000u); /* unsigned: no overflow for out-of-range or NaN input */
}

/* (int)v clamped to [lo, hi]: C's truncating conversion where it is defined; NaN gives lo.
 * For the values ggml's quantizers produce from finite input it equals their plain casts. */
static inline int trunc_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* roundf (half away from zero) into int8, saturating; NaN gives 0 */
static inline int8_t round_i8(float v) {
    const float r = roundf(v);
    return r >= 127.0f ? 127 : r <= -128.0f ? -128 : r == r ? (int8_t)r : 0;
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* ------------------------------------------------------------------ 32-element blocks */

/* the element of largest magnitude, first one on ties, with its sign (0 for all-zero) */
static inline float signed_absmax(const float *x, int n) {
    float amax = 0.0f, v = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (a > amax) { amax = a; v = x[j]; }
    }
    return v;
}

void quant_q4_0_from_f32(const float *x, void *vy, int64_t n) {
    blk_q4_0 *y = vy;
    for (int64_t b = 0; b < n / QK_32; b++, x += QK_32) {
        const float d = signed_absmax(x, QK_32) / -8.0f;  /* the extreme maps to -8 */
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = quant_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            const int lo = trunc_clamp(x[j] * id + 8.5f, 0, 15), hi = trunc_clamp(x[j + 16] * id + 8.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void quant_q4_0_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q4_0 *x = vx;
    for (int64_t b = 0; b < n / QK_32; b++, y += QK_32) {
        const float d = quant_f16_to_f32(x[b].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[b].qs[j] & 0xf) - 8) * d;
            y[j + 16] = (float)((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

static inline void minmax(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

void quant_q4_1_from_f32(const float *x, void *vy, int64_t n) {
    blk_q4_1 *y = vy;
    for (int64_t b = 0; b < n / QK_32; b++, x += QK_32) {
        float mn, mx;
        minmax(x, QK_32, &mn, &mx);
        const float d = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = quant_f32_to_f16(d);
        y[b].m = quant_f32_to_f16(mn);
        for (int j = 0; j < 16; j++) {
            const int lo = trunc_clamp((x[j] - mn) * id + 0.5f, 0, 15);
            const int hi = trunc_clamp((x[j + 16] - mn) * id + 0.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void quant_q4_1_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q4_1 *x = vx;
    for (int64_t b = 0; b < n / QK_32; b++, y += QK_32) {
        const float d = quant_f16_to_f32(x[b].d), m = quant_f16_to_f32(x[b].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[b].qs[j] & 0xf) * d + m;
            y[j + 16] = (float)(x[b].qs[j] >> 4) * d + m;
        }
    }
}

void quant_q5_0_from_f32(const float *x, void *vy, int64_t n) {
    blk_q5_0 *y = vy;
    for (int64_t b = 0; b < n / QK_32; b++, x += QK_32) {
        const float d = signed_absmax(x, QK_32) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[b].d = quant_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            const int lo = trunc_clamp(x[j] * id + 16.5f, 0, 31), hi = trunc_clamp(x[j + 16] * id + 16.5f, 0, 31);
            y[b].qs[j] = (uint8_t)((lo & 0xf) | ((hi & 0xf) << 4));
            qh |= (uint32_t)(lo >> 4) << j;
            qh |= (uint32_t)(hi >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) y[b].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

static inline uint32_t load_qh(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void quant_q5_0_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q5_0 *x = vx;
    for (int64_t b = 0; b < n / QK_32; b++, y += QK_32) {
        const float d = quant_f16_to_f32(x[b].d);
        const uint32_t qh = load_qh(x[b].qh);
        for (int j = 0; j < 16; j++) {
            int lo = (x[b].qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

void quant_q5_1_from_f32(const float *x, void *vy, int64_t n) {
    blk_q5_1 *y = vy;
    for (int64_t b = 0; b < n / QK_32; b++, x += QK_32) {
        float mn, mx;
        minmax(x, QK_32, &mn, &mx);
        const float d = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[b].d = quant_f32_to_f16(d);
        y[b].m = quant_f32_to_f16(mn);
        for (int j = 0; j < 16; j++) {
            /* ggml casts to uint8 without clamping: finite input stays within 0..31 */
            const int lo = trunc_clamp((x[j] - mn) * id + 0.5f, 0, 31);
            const int hi = trunc_clamp((x[j + 16] - mn) * id + 0.5f, 0, 31);
            y[b].qs[j] = (uint8_t)((lo & 0xf) | ((hi & 0xf) << 4));
            qh |= (uint32_t)((lo >> 4) & 1) << j;
            qh |= (uint32_t)((hi >> 4) & 1) << (j + 16);
        }
        for (int k = 0; k < 4; k++) y[b].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

void quant_q5_1_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q5_1 *x = vx;
    for (int64_t b = 0; b < n / QK_32; b++, y += QK_32) {
        const float d = quant_f16_to_f32(x[b].d), m = quant_f16_to_f32(x[b].m);
        const uint32_t qh = load_qh(x[b].qh);
        for (int j = 0; j < 16; j++) {
            int lo = (x[b].qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

static inline float absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    return amax;
}

/* 1 when any of x[0..n) is NaN or +-inf. */
static inline int any_non_finite(const float *x, int n) {
    int bad = 0;
    for (int j = 0; j < n; j++) bad |= !(fabsf(x[j]) <= FLT_MAX);
    return bad;
}

/* Activation blocks (q8_0 / q8_1 / q8_K, what mul_mat quantizes its f32 input to) with a NaN or
 * an inf get a NaN scale and zero quants, so every dot product that reads the block is NaN, as in
 * the f32 path (ggml leaves this undefined; a max-abs search may skip a NaN and give finite
 * output). An inf therefore gives NaN too, where the f32 path gives inf or NaN. */
void quant_q8_0_from_f32(const float *x, void *vy, int64_t n) {
    blk_q8_0 *y = vy;
    for (int64_t b = 0; b < n / QK_32; b++, x += QK_32) {
        if (any_non_finite(x, QK_32)) {
            memset(&y[b], 0, sizeof y[b]);
            y[b].d = quant_f32_to_f16(NAN);
            continue;
        }
        const float d = absmax(x, QK_32) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = quant_f32_to_f16(d);
        for (int j = 0; j < QK_32; j++) y[b].qs[j] = round_i8(x[j] * id);
    }
}

void quant_q8_0_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q8_0 *x = vx;
    for (int64_t b = 0; b < n / QK_32; b++, y += QK_32) {
        const float d = quant_f16_to_f32(x[b].d);
        for (int j = 0; j < QK_32; j++) y[j] = (float)x[b].qs[j] * d;
    }
}

void quant_q8_1_from_f32(const float *x, void *vy, int64_t n) {
    blk_q8_1 *y = vy;
    for (int64_t b = 0; b < n / QK_32; b++, x += QK_32) {
        if (any_non_finite(x, QK_32)) {
            memset(&y[b], 0, sizeof y[b]);
            y[b].d = y[b].s = quant_f32_to_f16(NAN);
            continue;
        }
        const float d = absmax(x, QK_32) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        y[b].d = quant_f32_to_f16(d);
        for (int j = 0; j < QK_32; j++) {
            y[b].qs[j] = round_i8(x[j] * id);
            sum += y[b].qs[j];
        }
        y[b].s = quant_f32_to_f16((float)sum * d);
    }
}

void quant_q8_1_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q8_1 *x = vx;
    for (int64_t b = 0; b < n / QK_32; b++, y += QK_32) {
        const float d = quant_f16_to_f32(x[b].d);
        for (int j = 0; j < QK_32; j++) y[j] = (float)x[b].qs[j] * d;
    }
}

/* ------------------------------------------------------------------ K-quants: helpers */

#define GROUP_EPS 1e-15f

/* Scale for a group of n values on the signed grid -nmax..nmax-1 (q6_K's sub-blocks): start
 * from the grid that maps the largest magnitude onto -nmax, weight each value by x^2, and try
 * 18 nearby grid stretches (nmax +- 0.1*k), keeping the one with the best weighted
 * least-squares fit. Writes L[i] = q + nmax and returns the scale. */
static float fit_signed_grid(int n, int nmax, const float *x, int8_t *L) {
    const float vmax = signed_absmax(x, n);
    if (fabsf(vmax) < GROUP_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float iscale = -nmax / vmax;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, round_even(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)k) / vmax;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, round_even(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, round_even(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Scale and offset for a group of n values on the unsigned grid 0..nmax (q4_K's sub-blocks):
 * x ~ scale*L - min_out. Starts from the min..max grid, then tries nstep+1 grid stretches
 * (nmax + rmin + rdelta*k) and refits scale and min by weighted least squares for each,
 * keeping the lowest weighted squared error. */
static float fit_affine_grid(int n, int nmax, const float *x, const float *w, uint8_t *L,
                             float *min_out, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float mn = x[0], mx = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0.0f) mn = 0.0f;
    if (mx == mn) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *min_out = -mn;
        return 0.0f;
    }
    float iscale = (float)nmax / (mx - mn);
    float scale = 1.0f / iscale;
    float best_err = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = imax(0, imin(nmax, round_even(iscale * (x[i] - mn))));
        L[i] = (uint8_t)l;
        float diff = scale * (float)l + mn - x[i];
        best_err += w[i] * (diff * diff);
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (mx - mn);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, round_even(iscale * (x[i] - mn))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0.0f) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0.0f) {
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0.0f;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                err += w[i] * (diff * diff);
            }
            if (err < best_err) {
                memcpy(L, Laux, (size_t)n);
                best_err = err;
                scale = this_scale;
                mn = this_min;
            }
        }
    }
    *min_out = -mn;
    return scale;
}

/* q4_K's 12 scale bytes: sub-blocks 0..3 keep their 6-bit scale in bytes 0..3 and min in 4..7;
 * sub-blocks 4..7 put the low 4 bits of scale/min in bytes 8..11 (low/high nibble) and their
 * top 2 bits in the top bits of bytes 0..3 (scale) and 4..7 (min). */
static inline void q4_K_get_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* ------------------------------------------------------------------ q4_K / q5_K */

/* The shared part of q4_K and q5_K quantization of one super-block: per 32-element sub-block an
 * affine fit on 0..nmax (weights av_x + |x|), the 8 scales and mins packed to 6 bits against
 * the block's d/dmin, then every value re-quantized with the stored scales into L (0..nmax). */
static void kquant_affine_block(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out,
                                uint16_t *dmin_out, uint8_t s[12], uint8_t L[QK_SUPER]) {
    uint8_t Laux[32];
    float w[32], mins[8], scales[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_affine_grid(32, nmax, xs, w, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)round_even(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)round_even(inv_min * mins[j]);
        if (ls > 63) ls = 63;
        if (lm > 63) lm = 63;
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = quant_f32_to_f16(max_scale / 63.0f);
    *dmin_out = quant_f32_to_f16(max_min / 63.0f);
    const float D = quant_f16_to_f32(*d_out), DM = quant_f16_to_f32(*dmin_out);
    /* re-quantize each sub-block against the scales actually stored */
    for (int j = 0; j < 8; j++) {
        int sc, m;
        q4_K_get_scale_min(j, s, &sc, &m);
        const float d = D * (float)sc;
        if (d == 0.0f) continue;
        const float dm = DM * (float)m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)imax(0, imin(nmax, round_even((x[32 * j + i] + dm) / d)));
    }
}

void quant_q4_K_from_f32(const float *x, void *vy, int64_t n) {
    blk_q4_K *y = vy;
    uint8_t L[QK_SUPER];
    for (int64_t b = 0; b < n / QK_SUPER; b++, x += QK_SUPER) {
        kquant_affine_block(x, 15, -1.0f, 20, &y[b].d, &y[b].dmin, y[b].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[b].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

void quant_q5_K_from_f32(const float *x, void *vy, int64_t n) {
    blk_q5_K *y = vy;
    uint8_t L[QK_SUPER];
    for (int64_t b = 0; b < n / QK_SUPER; b++, x += QK_SUPER) {
        kquant_affine_block(x, 31, -0.5f, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
        /* low 4 bits as q4_K; bit 4 of element 64c + l in qh[l] bit 2c, of 64c + 32 + l in bit 2c+1 */
        memset(y[b].qh, 0, sizeof y[b].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int e0 = L[64 * c + l], e1 = L[64 * c + 32 + l];
                y[b].qs[32 * c + l] = (uint8_t)((e0 & 0xf) | ((e1 & 0xf) << 4));
                y[b].qh[l] |= (uint8_t)(((e0 >> 4) << (2 * c)) | ((e1 >> 4) << (2 * c + 1)));
            }
    }
}

void quant_q5_K_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q5_K *x = vx;
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        const float D = quant_f16_to_f32(x[b].d), DM = quant_f16_to_f32(x[b].dmin);
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = x[b].qs + 32 * c;
            int sc, m;
            q4_K_get_scale_min(2 * c, x[b].scales, &sc, &m);
            const float d1 = D * (float)sc, m1 = DM * (float)m;
            q4_K_get_scale_min(2 * c + 1, x[b].scales, &sc, &m);
            const float d2 = D * (float)sc, m2 = DM * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] & 0xf) + (((x[b].qh[l] >> (2 * c)) & 1) << 4)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((q[l] >> 4) + (((x[b].qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
        }
    }
}

void quant_q4_K_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q4_K *x = vx;
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        const float D = quant_f16_to_f32(x[b].d), DM = quant_f16_to_f32(x[b].dmin);
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = x[b].qs + 32 * c;
            int sc, m;
            q4_K_get_scale_min(2 * c, x[b].scales, &sc, &m);
            const float d1 = D * (float)sc, m1 = DM * (float)m;
            q4_K_get_scale_min(2 * c + 1, x[b].scales, &sc, &m);
            const float d2 = D * (float)sc, m2 = DM * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* ------------------------------------------------------------------ q6_K */

void quant_q6_K_from_f32(const float *x, void *vy, int64_t n) {
    blk_q6_K *y = vy;
    int8_t L[QK_SUPER];
    float scales[16];
    for (int64_t b = 0; b < n / QK_SUPER; b++, x += QK_SUPER) {
        float max_scale = 0.0f, max_abs = 0.0f;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_signed_grid(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs < GROUP_EPS) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[b].d = quant_f32_to_f16(1.0f / iscale);
        for (int j = 0; j < 16; j++) y[b].scales[j] = (int8_t)imax(-128, imin(127, round_even(iscale * scales[j])));
        const float D = quant_f16_to_f32(y[b].d);
        for (int j = 0; j < 16; j++) {
            const float d = D * (float)y[b].scales[j];
            if (d == 0.0f) continue;
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = (int8_t)(imax(-32, imin(31, round_even(x[16 * j + i] / d))) + 32);
        }
        /* per 128 elements: ql[l] = e[l] | e[l+64] << 4, ql[l+32] = e[l+32] | e[l+96] << 4,
         * qh[l] = the top 2 bits of e[l], e[l+32], e[l+64], e[l+96] from low to high */
        for (int h = 0; h < 2; h++) {
            const uint8_t *e = (const uint8_t *)L + 128 * h;
            uint8_t *ql = y[b].ql + 64 * h, *qh = y[b].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((e[l] & 0xf) | ((e[l + 64] & 0xf) << 4));
                ql[l + 32] = (uint8_t)((e[l + 32] & 0xf) | ((e[l + 96] & 0xf) << 4));
                qh[l] = (uint8_t)((e[l] >> 4) | ((e[l + 32] >> 4) << 2) | ((e[l + 64] >> 4) << 4) |
                                  ((e[l + 96] >> 4) << 6));
            }
        }
    }
}

/* the 256 values of a q6_K block, minus the offset 32 (-32..31), in element order */
static inline void q6_K_decode(const blk_q6_K *x, int8_t v[QK_SUPER]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        int8_t *o = v + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void quant_q6_K_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q6_K *x = vx;
    int8_t v[QK_SUPER];
    for (int64_t b = 0; b < n / QK_SUPER; b++, y += QK_SUPER) {
        const float D = quant_f16_to_f32(x[b].d);
        q6_K_decode(&x[b], v);
        for (int j = 0; j < 16; j++) {
            const float d = D * (float)x[b].scales[j];
            for (int i = 0; i < 16; i++) y[16 * j + i] = d * (float)v[16 * j + i];
        }
    }
}

/* ------------------------------------------------------------------ q8_K */

void quant_q8_K_from_f32(const float *x, void *vy, int64_t n) {
    blk_q8_K *y = vy;
    for (int64_t b = 0; b < n / QK_SUPER; b++, x += QK_SUPER) {
        if (any_non_finite(x, QK_SUPER)) {
            memset(&y[b], 0, sizeof y[b]);
            y[b].d = NAN;
            continue;
        }
        const float vmax = signed_absmax(x, QK_SUPER);
        if (vmax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float iscale = -127.0f / vmax;
        for (int j = 0; j < QK_SUPER; j++) y[b].qs[j] = (int8_t)imax(-128, imin(127, round_even(iscale * x[j])));
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[b].qs[16 * j + i];
            y[b].bsums[j] = (int16_t)sum;
        }
        y[b].d = 1.0f / iscale;
    }
}

void quant_q8_K_to_f32(const void *vx, float *y, int64_t n) {
    const blk_q8_K *x = vx;
    for (int64_t b = 0; b < n / QK_SUPER; b++, y += QK_SUPER)
        for (int j = 0; j < QK_SUPER; j++) y[j] = x[b].d * (float)x[b].qs[j];
}

/* ------------------------------------------------------------------ scalar dot products */

void quant_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q4_0 *x = vx;
    const blk_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_32; b++) {
        int si = 0;
        for (int j = 0; j < 16; j++)
            si += ((x[b].qs[j] & 0xf) - 8) * y[b].qs[j] + ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
        sum += (float)si * (quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d));
    }
    *s = sum;
}

void quant_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q4_1 *x = vx;
    const blk_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_32; b++) {
        int si = 0;
        for (int j = 0; j < 16; j++)
            si += (x[b].qs[j] & 0xf) * y[b].qs[j] + (x[b].qs[j] >> 4) * y[b].qs[j + 16];
        /* sum(d q + m) * dy qy = d dy sum(q qy) + m * (dy sum(qy)) and dy sum(qy) is y's s */
        sum += (float)si * (quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d)) +
               quant_f16_to_f32(x[b].m) * quant_f16_to_f32(y[b].s);
    }
    *s = sum;
}

void quant_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q5_0 *x = vx;
    const blk_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_32; b++) {
        const uint32_t qh = load_qh(x[b].qh);
        int si = 0;
        for (int j = 0; j < 16; j++) {
            int lo = ((x[b].qs[j] & 0xf) | (int)((qh >> j) & 1) << 4) - 16;
            int hi = ((x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - 16;
            si += lo * y[b].qs[j] + hi * y[b].qs[j + 16];
        }
        sum += (float)si * (quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d));
    }
    *s = sum;
}

void quant_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q5_1 *x = vx;
    const blk_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_32; b++) {
        const uint32_t qh = load_qh(x[b].qh);
        int si = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (x[b].qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            si += lo * y[b].qs[j] + hi * y[b].qs[j + 16];
        }
        sum += (float)si * (quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d)) +
               quant_f16_to_f32(x[b].m) * quant_f16_to_f32(y[b].s);
    }
    *s = sum;
}

void quant_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q8_0 *x = vx;
    const blk_q8_0 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_32; b++) {
        int si = 0;
        for (int j = 0; j < QK_32; j++) si += x[b].qs[j] * y[b].qs[j];
        sum += (float)si * (quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d));
    }
    *s = sum;
}

void quant_vec_dot_q8_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q8_1 *x = vx;
    const blk_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_32; b++) {
        int si = 0;
        for (int j = 0; j < QK_32; j++) si += x[b].qs[j] * y[b].qs[j];
        sum += (float)si * (quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d));
    }
    *s = sum;
}

void quant_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q4_K *x = vx;
    const blk_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m, si = 0;
            q4_K_get_scale_min(j, x[b].scales, &sc, &m);
            const uint8_t *q = x[b].qs + 32 * (j >> 1);
            const int8_t *q8 = y[b].qs + 32 * j;
            const int shift = (j & 1) * 4;
            for (int l = 0; l < 32; l++) si += ((q[l] >> shift) & 0xf) * q8[l];
            sumi += sc * si;
            summ += m * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        }
        sum += y[b].d * (quant_f16_to_f32(x[b].d) * (float)sumi - quant_f16_to_f32(x[b].dmin) * (float)summ);
    }
    *s = sum;
}

void quant_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q5_K *x = vx;
    const blk_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m, si = 0;
            q4_K_get_scale_min(j, x[b].scales, &sc, &m);
            const uint8_t *q = x[b].qs + 32 * (j >> 1);
            const int8_t *q8 = y[b].qs + 32 * j;
            const int shift = (j & 1) * 4;
            for (int l = 0; l < 32; l++)
                si += (((q[l] >> shift) & 0xf) | (((x[b].qh[l] >> j) & 1) << 4)) * q8[l];
            sumi += sc * si;
            summ += m * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        }
        sum += y[b].d * (quant_f16_to_f32(x[b].d) * (float)sumi - quant_f16_to_f32(x[b].dmin) * (float)summ);
    }
    *s = sum;
}

void quant_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q6_K *x = vx;
    const blk_q8_K *y = vy;
    int8_t v[QK_SUPER];
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        int sumi = 0;
        q6_K_decode(&x[b], v);
        for (int j = 0; j < 16; j++) {
            int si = 0;
            for (int i = 16 * j; i < 16 * j + 16; i++) si += v[i] * y[b].qs[i];
            sumi += x[b].scales[j] * si;
        }
        sum += y[b].d * quant_f16_to_f32(x[b].d) * (float)sumi;
    }
    *s = sum;
}

void quant_vec_dot_q8_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q8_K *x = vx;
    const blk_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        int si = 0;
        for (int j = 0; j < QK_SUPER; j++) si += x[b].qs[j] * y[b].qs[j];
        sum += x[b].d * y[b].d * (float)si;
    }
    *s = sum;
}
