/* plugins/cuda/repack.cuh — the repacked layout of a quantized weight matrix (made once per weight by
 * repack.cu, read by the decode mat-vec mmv_rp.cuh and the prefill int8 GEMM mmq.cuh).
 *
 * Why: ggml's blocks (18, 34, 144, 210 bytes, scales interleaved with quants) are only 2-byte
 * aligned, so a kernel reads them with many narrow loads; the H200 profile showed the int8 mat-vec
 * limited by L1 requests (89%) with HBM at 35%. Here quants and scales live apart: every row's quants
 * are one 16-byte aligned run, read with 16-byte loads, and the scales of 8 consecutive rows for one
 * block (or super-block) sit together, so one 16-byte load brings them for 8 rows.
 *
 * Per matrix of M rows x K weights (rows padded with zeros to Mp, a multiple of RQ_ROW_PAD):
 *   qs  row r at qs + r * qs_row: the 4-bit quants (q4_0, q4_K, q6_K's low 4 bits: K/2 bytes) or the
 *       8-bit ones (q8_0: K bytes), in 16-byte units of 32 weights: a q4_0 / q6_K unit is block u,
 *       byte i holding weight i (low nibble) and i + 16 (high): ggml's q4_0 order, so 32-bit word t
 *       holds weights 4t..4t+3 and 16+4t..16+4t+3 (one int8 mma fragment); a q4_K unit is 16 bytes of
 *       a super-block's 128 quant bytes, unchanged; q8_0: block u's 32 bytes.
 *   qh  (q6_K) row r at qh + r * K/4: 8 bytes per block; word 0 byte k holds the high 2 bits of
 *       weights k, 4+k, 8+k, 12+k at bits 0, 2, 4, 6; word 1 the same for weights 16..31. So the high
 *       bits of the weights in word t of the low plane are (word >> 2t) & 0x03030303.
 *   sc  scale groups of 8 rows (row group rg = r / 8, slot s = r % 8):
 *       q4_0, q8_0: per block b: 8 f16 d at ((rg * nb + b) * 8 + s) * 2.
 *       q4_K: per super-block sb, 160 bytes at (rg * nsb + sb) * 160: [4s] f16 d, f16 dmin; then for
 *             each pair g (0..3) of sub-blocks, 32 bytes at 32 + 32 g: [4s] sc[2g], sc[2g+1], m[2g],
 *             m[2g+1] (the 6-bit scales and mins, one byte each).
 *       q6_K: per super-block sb, 144 bytes at (rg * nsb + sb) * 144: [2s] f16 d; then for each block
 *             j (0..7) 16 bytes at 16 + 16 j: [2s] int8 sc[2j], sc[2j+1].
 * Bytes per weight: q4_0 18/32, q8_0 34/32, q4_K 148/256 (ggml: 144), q6_K 210/256: the same traffic.
 *
 * Host+device: plugins/cuda/test/rp_host.cu repacks on the CPU with these functions and checks every
 * weight against dequant_one.
 */
#ifndef PYG_CUDA_REPACK_CUH
#define PYG_CUDA_REPACK_CUH
#include "common.cuh"

#define RQ_ROW_PAD 128 /* rows padded to this (the GEMM's row tile; the mat-vec's 8-row groups) */

struct rq_w {
    const uint8_t *qs, *qh, *sc;
    int64_t K, M, Mp;   /* weights per row, rows, padded rows */
    int64_t qs_row;     /* bytes per row of qs */
    int type;
};

/* bytes of the three parts for a (Mp, K) matrix of `type` */
PYG_HD int64_t rq_qs_row(int type, int64_t K) { return type == PYG_TYPE_Q8_0 ? K : K / 2; }
PYG_HD int64_t rq_qh_bytes(int type, int64_t Mp, int64_t K) { return type == PYG_TYPE_Q6_K ? Mp * (K / 4) : 0; }
PYG_HD int64_t rq_group_bytes(int type) {
    return type == PYG_TYPE_Q4_K ? 160 : type == PYG_TYPE_Q6_K ? 144 : 16;
}
PYG_HD int64_t rq_groups(int type, int64_t K) { /* scale groups per row group */
    return (type == PYG_TYPE_Q4_K || type == PYG_TYPE_Q6_K) ? K / 256 : K / 32;
}
PYG_HD int64_t rq_sc_bytes(int type, int64_t Mp, int64_t K) { return Mp / 8 * rq_groups(type, K) * rq_group_bytes(type); }

/* 6-bit quant (0..63) of weight i (0..255) of a q6_K block (ggml layout) */
PYG_HD int q6k_quant(const uint8_t *blk, int i) {
    const int n = i >> 7, r = i & 127, quarter = r >> 5, l = r & 31;
    const uint8_t lo = blk[64 * n + l + ((quarter & 1) ? 32 : 0)];
    return ((quarter & 2) ? (lo >> 4) : (lo & 15)) | (((blk[128 + 32 * n + l] >> (2 * quarter)) & 3) << 4);
}

/* Unit u (32 weights) of source row `src` (NULL: a padding row, zeros) into its repacked place. */
PYG_HD void rq_unit(int type, const uint8_t *src, int64_t u, uint8_t *qs_row, uint8_t *qh_row) {
    switch (type) {
    case PYG_TYPE_Q4_0:
        for (int i = 0; i < 16; i++) qs_row[16 * u + i] = src ? src[18 * u + 2 + i] : 0;
        break;
    case PYG_TYPE_Q8_0:
        for (int i = 0; i < 32; i++) qs_row[32 * u + i] = src ? src[34 * u + 2 + i] : 0;
        break;
    case PYG_TYPE_Q4_K:
        for (int i = 0; i < 16; i++) qs_row[16 * u + i] = src ? src[(u >> 3) * Q4_K_BYTES + 16 + 16 * (u & 7) + i] : 0;
        break;
    case PYG_TYPE_Q6_K: {
        int q[32];
        const uint8_t *blk = src ? src + (u >> 3) * Q6_K_BYTES : NULL;
        for (int e = 0; e < 32; e++) q[e] = blk ? q6k_quant(blk, (int)(u & 7) * 32 + e) : 0;
        for (int e = 0; e < 16; e++) qs_row[16 * u + e] = (uint8_t)((q[e] & 15) | ((q[e + 16] & 15) << 4));
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++) {
                int b = 0;
                for (int i = 0; i < 4; i++) b |= (q[16 * h + 4 * i + k] >> 4) << (2 * i);
                qh_row[8 * u + 4 * h + k] = (uint8_t)b;
            }
        break;
    }
    default:
        break;
    }
}

/* Scale group `grp` of one row group: rows[s] is source row s of the group (NULL past M). */
PYG_HD void rq_scale_group(int type, const uint8_t *const rows[8], int64_t grp, uint8_t *dst) {
    for (int s = 0; s < 8; s++) {
        const uint8_t *r = rows[s];
        switch (type) {
        case PYG_TYPE_Q4_0: case PYG_TYPE_Q8_0: {
            const int64_t bs = type == PYG_TYPE_Q4_0 ? 18 : 34;
            dst[2 * s] = r ? r[grp * bs] : 0;
            dst[2 * s + 1] = r ? r[grp * bs + 1] : 0;
            break;
        }
        case PYG_TYPE_Q4_K: {
            const uint8_t *b = r ? r + grp * Q4_K_BYTES : NULL;
            for (int i = 0; i < 4; i++) dst[4 * s + i] = b ? b[i] : 0; /* d, dmin */
            for (int g = 0; g < 4; g++) {
                int s0 = 0, m0 = 0, s1 = 0, m1 = 0;
                if (b) {
                    q4k_scale_min(b + 4, 2 * g, &s0, &m0);
                    q4k_scale_min(b + 4, 2 * g + 1, &s1, &m1);
                }
                uint8_t *o = dst + 32 + 32 * g + 4 * s;
                o[0] = (uint8_t)s0; o[1] = (uint8_t)s1; o[2] = (uint8_t)m0; o[3] = (uint8_t)m1;
            }
            break;
        }
        case PYG_TYPE_Q6_K: {
            const uint8_t *b = r ? r + grp * Q6_K_BYTES : NULL;
            dst[2 * s] = b ? b[208] : 0;
            dst[2 * s + 1] = b ? b[209] : 0;
            for (int j = 0; j < 8; j++) {
                dst[16 + 16 * j + 2 * s] = b ? b[192 + 2 * j] : 0;
                dst[16 + 16 * j + 2 * s + 1] = b ? b[192 + 2 * j + 1] : 0;
            }
            break;
        }
        default:
            break;
        }
    }
}

/* The repack of one matrix as independent items (the kernel runs one per thread): items [0, units)
 * are the units (row i / (K/32), unit i % (K/32)), the rest the scale groups of each row group. */
struct rq_job {
    const uint8_t *src;   /* ggml rows */
    int64_t nb1, M;       /* source row stride, rows */
    rq_w w;               /* destination (written through) */
    int64_t units, groups;
};

PYG_HD rq_job rq_job_make(const void *src, int64_t nb1, const rq_w &w) {
    rq_job j;
    j.src = (const uint8_t *)src;
    j.nb1 = nb1;
    j.M = w.M;
    j.w = w;
    j.units = w.Mp * (w.K / 32);
    j.groups = w.Mp / 8 * rq_groups(w.type, w.K);
    return j;
}

PYG_HD void rq_job_item(const rq_job &j, int64_t i) {
    const rq_w &w = j.w;
    if (i < j.units) {
        const int64_t nu = w.K / 32, r = i / nu, u = i % nu;
        rq_unit(w.type, r < j.M ? j.src + r * j.nb1 : NULL, u, (uint8_t *)w.qs + r * w.qs_row,
                w.qh ? (uint8_t *)w.qh + r * (w.K / 4) : NULL);
    } else {
        const int64_t ng = rq_groups(w.type, w.K), g = i - j.units, rg = g / ng, grp = g % ng;
        const uint8_t *rows[8];
        for (int s = 0; s < 8; s++) rows[s] = 8 * rg + s < j.M ? j.src + (8 * rg + s) * j.nb1 : NULL;
        rq_scale_group(w.type, rows, grp, (uint8_t *)w.sc + (rg * ng + grp) * rq_group_bytes(w.type));
    }
}

/* Weight (r, k) from the repacked layout (the reference the host test compares the kernels with,
 * and that it checks against dequant_one). */
PYG_HD float rq_weight(const rq_w &w, int64_t r, int64_t k) {
    const int64_t rg = r >> 3, s = r & 7;
    const uint8_t *q = w.qs + r * w.qs_row;
    switch (w.type) {
    case PYG_TYPE_Q4_0: case PYG_TYPE_Q8_0: {
        const int64_t b = k >> 5, e = k & 31;
        const float d = f16_bits_to_f32(rd16(w.sc + ((rg * (w.K / 32) + b) * 8 + s) * 2));
        if (w.type == PYG_TYPE_Q8_0) return d * (float)(int8_t)q[k];
        const uint8_t by = q[16 * b + (e & 15)];
        return d * (float)((e < 16 ? (by & 15) : (by >> 4)) - 8);
    }
    case PYG_TYPE_Q4_K: {
        const int64_t sb = k >> 8, i = k & 255, g = i >> 6, hi = (i >> 5) & 1, l = i & 31;
        const uint8_t *grp = w.sc + (rg * (w.K / 256) + sb) * 160;
        const float d = f16_bits_to_f32(rd16(grp + 4 * s)), dmin = f16_bits_to_f32(rd16(grp + 4 * s + 2));
        const uint8_t *sm = grp + 32 + 32 * g + 4 * s;
        const uint8_t by = q[128 * sb + 32 * g + l];
        const int qv = hi ? (by >> 4) : (by & 15);
        return d * (float)sm[hi] * (float)qv - dmin * (float)sm[2 + hi];
    }
    case PYG_TYPE_Q6_K: {
        const int64_t b = k >> 5, e = k & 31, sb = k >> 8, j = b & 7;
        const uint8_t *grp = w.sc + (rg * (w.K / 256) + sb) * 144;
        const float d = f16_bits_to_f32(rd16(grp + 2 * s));
        const int8_t sc = (int8_t)grp[16 + 16 * j + 2 * s + (e >> 4)];
        const uint8_t lo = q[16 * b + (e & 15)];
        const int l4 = e < 16 ? (lo & 15) : (lo >> 4);
        const uint8_t hb = w.qh[r * (w.K / 4) + 8 * b + 4 * (e >> 4) + (e & 3)];
        const int h2 = (hb >> (2 * ((e & 15) >> 2))) & 3;
        return d * (float)sc * (float)((l4 | (h2 << 4)) - 32);
    }
    default:
        return 0.0f;
    }
}

#endif
