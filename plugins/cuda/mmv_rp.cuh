/* plugins/cuda/mmv_rp.cuh — the decode mat-vec over repacked weights (repack.cuh): one activation
 * column, int8 activations (the mat-vec's usual q8 blocks: quants [K], (d, d * sum) per 32).
 *
 * Activations stay in registers, weights stream: a thread block of KW warps owns 8 * NB rows; warp w
 * owns a K slice of 32 * J units of 32 weights, each lane J units; the lane loads its units'
 * activations once and then, for each group of 8 rows, one 16-byte load of quants per row and unit
 * plus one 16-byte load of the 8 rows' scales per unit. Every warp load covers 512 consecutive bytes.
 * The 8 rows' per-lane partial sums are summed over the warp with 9 shuffles (warp_sum8), the KW
 * slices through shared memory. The weight loads of the first 8 rows are issued before grid_wait(),
 * so with programmatic dependent launch they overlap the kernel before this one (weights are constant;
 * the activations that kernel writes are read after the wait).
 *
 * K <= 24576 (J <= 3: KW = ceil(K / 32 / (32 J)) <= 8 warps). Up to MVR_MAX matrices of one type and
 * K run in one launch (a layer's q/k/v, gate/up): block b belongs to matrix g where blk0[g] <= b; a
 * gate/up pair can also run with its swiglu as one launch (mvr_glu_body), and a layer's q/k/v with
 * the ropes of q and k and the K/V cache writes (mvr_qkv_body).
 * Host test: plugins/cuda/test/rp_host.cu runs mvr_body on an emulated block (simt_host.h).
 */
#ifndef PYG_CUDA_MMV_RP_CUH
#define PYG_CUDA_MMV_RP_CUH
#include "simt.cuh"
#include "repack.cuh"
#include "mmvq.cuh"
#include "rope.cuh"

#ifndef MVR_MAX
#define MVR_MAX 4     /* matrices per launch */
#endif
#define MVR_MAX_KW 8  /* warps per block */

struct mvr_args {
    const int8_t *yq;                  /* the activation column's quants, K */
    const float *yds;                  /* (d, s) per 32 */
    int64_t K;
    int n;                             /* matrices */
    rq_w w[MVR_MAX];
    float *dst[MVR_MAX];               /* one float per row */
    unsigned blk0[MVR_MAX + 1];        /* first block of each matrix; blk0[n] = grid size */
};

/* a zeroed mvr_args over the activation column yq/yds of length K, for n matrices */
static inline void mvr_args_init(mvr_args &a, const int8_t *yq, const float *yds, int64_t K, int n) {
    memset(&a, 0, sizeof a);
    a.yq = yq;
    a.yds = yds;
    a.K = K;
    a.n = n;
}

PYG_HD float f16_lo(uint32_t w) { return f16_bits_to_f32((uint16_t)(w & 0xffffu)); }
PYG_HD float f16_hi(uint32_t w) { return f16_bits_to_f32((uint16_t)(w >> 16)); }
PYG_HD uint32_t u4_word(const uint4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
/* f16 number `slot` (0..7) of 8 packed in a uint4 */
PYG_HD float u4_f16(const uint4 &v, int slot) {
    const uint32_t w = u4_word(v, slot >> 1);
    return (slot & 1) ? f16_hi(w) : f16_lo(w);
}
PYG_HD uint4 ld_u4(const uint8_t *p) { return *(const uint4 *)p; }
PYG_HD uint4 zero_u4() {
    uint4 z;
    z.x = z.y = z.z = z.w = 0;
    return z;
}

/* Per type: Y (a lane's activations for one unit), Wt (one row's weights of one unit), S (8 rows'
 * scales of one unit), and the dot of one row. */
template <int T> struct mvr;

template <> struct mvr<PYG_TYPE_Q4_0> {
    struct Y { int a[4], b[4]; float d, m8s; };
    struct Wt { uint4 q; };
    struct S { uint4 d; };
    static PYG_HD void load_y(Y &y, const int8_t *yq, const float *yds, int64_t u) {
        ld_y16(yq + 32 * u, y.a);
        ld_y16(yq + 32 * u + 16, y.b);
        y.d = yds[2 * u];
        y.m8s = -8.0f * yds[2 * u + 1];
    }
    static PYG_HD void load_w(Wt &w, const rq_w &m, int64_t row, int64_t u) { w.q = ld_u4(m.qs + row * m.qs_row + 16 * u); }
    static PYG_HD void load_s(S &s, const rq_w &m, int64_t rg, int64_t u) { s.d = ld_u4(m.sc + (rg * (m.K / 32) + u) * 16); }
    static PYG_HD float dot(const Wt &w, const Y &y, const S &s, int slot) {
        int acc = 0;
PYGQ_UNROLL
        for (int i = 0; i < 4; i++) {
            const uint32_t q = u4_word(w.q, i);
            acc = dp4a_s8((int)(q & 0x0f0f0f0fu), y.a[i], acc);
            acc = dp4a_s8((int)((q >> 4) & 0x0f0f0f0fu), y.b[i], acc);
        }
        return u4_f16(s.d, slot) * (y.d * (float)acc + y.m8s);
    }
};

template <> struct mvr<PYG_TYPE_Q8_0> {
    struct Y { int v[8]; float d; };
    struct Wt { uint4 q0, q1; };
    struct S { uint4 d; };
    static PYG_HD void load_y(Y &y, const int8_t *yq, const float *yds, int64_t u) {
        ld_y16(yq + 32 * u, y.v);
        ld_y16(yq + 32 * u + 16, y.v + 4);
        y.d = yds[2 * u];
    }
    static PYG_HD void load_w(Wt &w, const rq_w &m, int64_t row, int64_t u) {
        const uint8_t *p = m.qs + row * m.qs_row + 32 * u;
        w.q0 = ld_u4(p);
        w.q1 = ld_u4(p + 16);
    }
    static PYG_HD void load_s(S &s, const rq_w &m, int64_t rg, int64_t u) { s.d = ld_u4(m.sc + (rg * (m.K / 32) + u) * 16); }
    static PYG_HD float dot(const Wt &w, const Y &y, const S &s, int slot) {
        int acc = 0;
PYGQ_UNROLL
        for (int i = 0; i < 4; i++) {
            acc = dp4a_s8((int)u4_word(w.q0, i), y.v[i], acc);
            acc = dp4a_s8((int)u4_word(w.q1, i), y.v[4 + i], acc);
        }
        return u4_f16(s.d, slot) * y.d * (float)acc;
    }
};

/* q4_K unit u: super-block u/8, 16 quant bytes 16 * (u % 8) of its 128: weights 64g + 16h + i (low
 * nibbles, sub-block 2g) and 64g + 32 + 16h + i (high, sub-block 2g+1), g = (u%8)/2, h = u%2. */
template <> struct mvr<PYG_TYPE_Q4_K> {
    struct Y { int l[4], h[4]; float dl, dh, sl, sh; };
    struct Wt { uint4 q; };
    struct S { uint4 hd0, hd1, sm0, sm1; }; /* (d, dmin) of rows 0-3 / 4-7; (sc, sc, m, m) of rows 0-3 / 4-7 */
    static PYG_HD void load_y(Y &y, const int8_t *yq, const float *yds, int64_t u) {
        const int64_t sb = u >> 3, g = (u & 7) >> 1, h = u & 1, bl = 8 * sb + 2 * g;
        const int8_t *p = yq + 256 * sb + 64 * g + 16 * h;
        ld_y16(p, y.l);
        ld_y16(p + 32, y.h);
        int sl = 0, sh = 0;
PYGQ_UNROLL
        for (int i = 0; i < 4; i++) {
            sl = dp4a_s8(0x01010101, y.l[i], sl);
            sh = dp4a_s8(0x01010101, y.h[i], sh);
        }
        y.dl = yds[2 * bl];
        y.dh = yds[2 * bl + 2];
        y.sl = y.dl * (float)sl;
        y.sh = y.dh * (float)sh;
    }
    static PYG_HD void load_w(Wt &w, const rq_w &m, int64_t row, int64_t u) { w.q = ld_u4(m.qs + row * m.qs_row + 16 * u); }
    static PYG_HD void load_s(S &s, const rq_w &m, int64_t rg, int64_t u) {
        const uint8_t *grp = m.sc + (rg * (m.K / 256) + (u >> 3)) * 160;
        s.hd0 = ld_u4(grp);
        s.hd1 = ld_u4(grp + 16);
        const uint8_t *sm = grp + 32 + 32 * ((u & 7) >> 1);
        s.sm0 = ld_u4(sm);
        s.sm1 = ld_u4(sm + 16);
    }
    static PYG_HD float dot(const Wt &w, const Y &y, const S &s, int slot) {
        int lo = 0, hi = 0;
PYGQ_UNROLL
        for (int i = 0; i < 4; i++) {
            const uint32_t q = u4_word(w.q, i);
            lo = dp4a_s8((int)(q & 0x0f0f0f0fu), y.l[i], lo);
            hi = dp4a_s8((int)((q >> 4) & 0x0f0f0f0fu), y.h[i], hi);
        }
        const uint32_t hd = u4_word(slot < 4 ? s.hd0 : s.hd1, slot & 3);
        const uint32_t sm = u4_word(slot < 4 ? s.sm0 : s.sm1, slot & 3);
        const float d = f16_lo(hd), dmin = f16_hi(hd);
        const float sc0 = (float)(sm & 0xff), sc1 = (float)((sm >> 8) & 0xff);
        const float m0 = (float)((sm >> 16) & 0xff), m1 = (float)(sm >> 24);
        return d * (sc0 * y.dl * (float)lo + sc1 * y.dh * (float)hi) - dmin * (m0 * y.sl + m1 * y.sh);
    }
};

/* q6_K unit u: block u (32 weights): 16 bytes of low nibbles, 8 bytes of high bits (repack.cuh). */
template <> struct mvr<PYG_TYPE_Q6_K> {
    struct Y { int a[4], b[4]; float d; int sa, sb; };
    struct Wt { uint4 lo; uint32_t h0, h1; };
    struct S { uint4 d, sc; };
    static PYG_HD void load_y(Y &y, const int8_t *yq, const float *yds, int64_t u) {
        ld_y16(yq + 32 * u, y.a);
        ld_y16(yq + 32 * u + 16, y.b);
        int sa = 0, sb = 0;
PYGQ_UNROLL
        for (int i = 0; i < 4; i++) {
            sa = dp4a_s8(0x01010101, y.a[i], sa);
            sb = dp4a_s8(0x01010101, y.b[i], sb);
        }
        y.sa = 32 * sa;
        y.sb = 32 * sb;
        y.d = yds[2 * u];
    }
    static PYG_HD void load_w(Wt &w, const rq_w &m, int64_t row, int64_t u) {
        w.lo = ld_u4(m.qs + row * m.qs_row + 16 * u);
        const uint64_t h = *(const uint64_t *)(m.qh + row * (m.K / 4) + 8 * u);
        w.h0 = (uint32_t)h;
        w.h1 = (uint32_t)(h >> 32);
    }
    static PYG_HD void load_s(S &s, const rq_w &m, int64_t rg, int64_t u) {
        const uint8_t *grp = m.sc + (rg * (m.K / 256) + (u >> 3)) * 144;
        s.d = ld_u4(grp);
        s.sc = ld_u4(grp + 16 + 16 * (u & 7));
    }
    static PYG_HD float dot(const Wt &w, const Y &y, const S &s, int slot) {
        int da = 0, db = 0;
PYGQ_UNROLL
        for (int i = 0; i < 4; i++) {
            const uint32_t q = u4_word(w.lo, i);
            const uint32_t qa = (q & 0x0f0f0f0fu) | (((w.h0 >> (2 * i)) & 0x03030303u) << 4);
            const uint32_t qb = ((q >> 4) & 0x0f0f0f0fu) | (((w.h1 >> (2 * i)) & 0x03030303u) << 4);
            da = dp4a_s8((int)qa, y.a[i], da);
            db = dp4a_s8((int)qb, y.b[i], db);
        }
        const uint32_t scw = u4_word(s.sc, slot >> 1) >> (16 * (slot & 1));
        const int sc0 = (int)(int8_t)(scw & 0xff), sc1 = (int)(int8_t)((scw >> 8) & 0xff);
        return u4_f16(s.d, slot) * y.d * (float)(sc0 * (da - y.sa) + sc1 * (db - y.sb));
    }
};

/* A lane's K slice: its units (u = (warp * J + j) * 32 + lane) and their activations. */
template <int T, int J> struct mvr_slice {
    int64_t u[J];
    bool ok[J];
    typename mvr<T>::Y y[J];
};

/* The quants and scales of one group of 8 rows for a lane's units. */
template <int T, int J> struct mvr_rows {
    typename mvr<T>::S s[J];
    typename mvr<T>::Wt wt[8][J];
};

/* the slice of K slice kw (a warp index) for lane `lane` */
template <int T, int J>
PYG_KB void mvr_slice_at(int kw, int lane, int64_t K, mvr_slice<T, J> &sl) {
#pragma unroll
    for (int j = 0; j < J; j++) {
        sl.u[j] = ((int64_t)kw * J + j) * 32 + lane;
        sl.ok[j] = sl.u[j] < K / 32;
    }
}

template <int T, int J, class Thr>
PYG_KB void mvr_slice_init(const Thr &t, int64_t K, mvr_slice<T, J> &sl) { mvr_slice_at<T, J>(t.warp, t.lane, K, sl); }

template <int T, int J>
PYG_KB void mvr_load_rows(const rq_w &w, int64_t rg, const mvr_slice<T, J> &sl, mvr_rows<T, J> &rw) {
#pragma unroll
    for (int j = 0; j < J; j++) {
        if (sl.ok[j]) {
            mvr<T>::load_s(rw.s[j], w, rg, sl.u[j]);
#pragma unroll
            for (int r = 0; r < 8; r++) mvr<T>::load_w(rw.wt[r][j], w, 8 * rg + r, sl.u[j]);
        }
    }
}

/* The activations: read after grid_wait (the kernel before this one writes them; the weights, which
 * callers load first, are constant). */
template <int T, int J, class Thr>
PYG_KB void mvr_load_y(const Thr &t, const int8_t *yq, const float *yds, mvr_slice<T, J> &sl) {
    t.grid_wait();
#pragma unroll
    for (int j = 0; j < J; j++)
        if (sl.ok[j]) mvr<T>::load_y(sl.y[j], yq, yds, sl.u[j]);
}

template <int T, int J>
PYG_KB void mvr_dot_rows(const mvr_slice<T, J> &sl, const mvr_rows<T, J> &rw, float acc[8]) {
#pragma unroll
    for (int r = 0; r < 8; r++) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < J; j++)
            if (sl.ok[j]) v += mvr<T>::dot(rw.wt[r][j], sl.y[j], rw.s[j], r);
        acc[r] = v;
    }
}

/* The matrix block t.bx belongs to, and the first of the 8 NB rows it owns there (*r0). */
template <int NB, class Thr>
PYG_KB int mvr_block_matrix(const Thr &t, const mvr_args &a, int64_t *r0) {
    int g = 0;
#pragma unroll
    for (int i = 1; i < MVR_MAX; i++)
        if (i < a.n && t.bx >= (int64_t)a.blk0[i]) g = i;
    *r0 = (t.bx - (int64_t)a.blk0[g]) * 8 * NB;
    return g;
}

/* The lane's partial sums of rows [r0, r0 + 8 NB) of matrix w (of type T). */
template <int T, int J, int NB, class Thr>
PYG_KB void mvr_rows_sums(const Thr &t, const mvr_args &a, const rq_w &w, int64_t r0, float acc[NB][8]) {
    mvr_slice<T, J> sl;
    mvr_slice_init(t, a.K, sl);
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        mvr_rows<T, J> rw;
        mvr_load_rows(w, (r0 >> 3) + nb, sl, rw);
        if (nb == 0) mvr_load_y(t, a.yq, a.yds, sl);
        mvr_dot_rows(sl, rw, acc[nb]);
    }
}

/* The lane's partial sums of the 8 NB rows this block owns: rows [*r0, *r0 + 8 NB) of the matrix
 * it returns (from the block index). The matrices are of type T, or with T2 != T some of type T2
 * (a launch's blocks then take either form: each block's matrix is of one type). */
template <int T, int T2, int J, int NB, class Thr>
PYG_KB int mvr_block_rows(const Thr &t, const mvr_args &a, float acc[NB][8], int64_t *r0) {
    const int g = mvr_block_matrix<NB>(t, a, r0);
    if (T == T2 || a.w[g].type == T) mvr_rows_sums<T, J, NB>(t, a, a.w[g], *r0, acc);
    else mvr_rows_sums<T2, J, NB>(t, a, a.w[g], *r0, acc);
    return g;
}

/* Rows [r0, r0 + 8 NB) of matrix g (r0 from the block index); sh: MVR_MAX_KW * 8 * NB floats. */
template <int T, int J, int NB, class Thr>
PYG_KB void mvr_body(const Thr &t, const mvr_args &a, float *sh) {
    float acc[NB][8];
    int64_t r0;
    const int g = mvr_block_rows<T, T, J, NB>(t, a, acc, &r0);
    const rq_w &w = a.w[g];
    const int KW = t.nthreads / 32;
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        const float v = warp_sum8(t, acc[nb]);
        const int idx = warp_sum8_index(t.lane);
        if ((t.lane & 3) == 0) {
            const int64_t row = r0 + 8 * nb + idx;
            if (KW == 1) {
                if (row < w.M) a.dst[g][row] = v;
            } else {
                sh[t.warp * 8 * NB + 8 * nb + idx] = v;
            }
        }
    }
    if (KW > 1) {
        t.sync();
        if (t.tid < 8 * NB) {
            float v = 0.0f;
            for (int k = 0; k < KW; k++) v += sh[k * 8 * NB + t.tid];
            const int64_t row = r0 + t.tid;
            if (row < w.M) a.dst[g][row] = v;
        }
    }
}

/* What a layer's q/k/v launch does with each matrix's rows (mvr_qkv_body), per matrix g: */
#define MVR_ST_ROPE 0       /* the row pair (2i, 2i + 1) of a head rotated, into dst[g] (the rope's output) */
#define MVR_ST_ROPE_CACHE 1 /* rotated, into cache row idx[0] (the K write; the rope's own output is dead) */
#define MVR_ST_CACHE 2      /* the sum into cache row idx[0] (the V write) */
struct mvr_qkv {
    int kind[MVR_MAX];
    char *cache[MVR_MAX];          /* the cache's data; column `row` of cache row r at r * cnb1 + row * cnb0 */
    int ctype[MVR_MAX];            /* f32, f16 or bf16 */
    int64_t cnb0[MVR_MAX], cnb1[MVR_MAX], crows[MVR_MAX];
    const char *idx[MVR_MAX];      /* the set_rows index of the one token (an index outside [0, crows) writes nothing) */
    int itype[MVR_MAX];            /* i32 or i64 */
    const int32_t *pos;            /* the token's position */
    const float *ff;               /* frequency factors (rp.has_ff) */
    rope_params rp;                /* normal (not neox) pairs, n_dims even, <= D */
    int64_t D;                     /* rows per head */
};

PYG_HD void mvr_qkv_store(const mvr_qkv &e, int g, float *dst, int64_t row, float v, float partner) {
    const int kind = e.kind[g];
    float y = v;
    if (kind != MVR_ST_CACHE) {
        const int64_t d = row % e.D;
        if (d < e.rp.n_dims) {
            float c, s;
            rope_cs(e.rp, (float)e.pos[0], d / 2, e.ff, &c, &s);
            y = (d & 1) ? partner * s + v * c : v * c - partner * s; /* (x0, x1) -> (x0 c - x1 s, x0 s + x1 c) */
        }
    }
    if (kind == MVR_ST_ROPE) {
        dst[row] = y;
        return;
    }
    const int64_t r = e.itype[g] == PYG_TYPE_I64 ? *(const int64_t *)e.idx[g] : (int64_t)*(const int32_t *)e.idx[g];
    if (r >= 0 && r < e.crows[g]) store_plain(e.cache[g] + r * e.cnb1[g] + row * e.cnb0[g], e.ctype[g], y);
}

/* mvr_body for a layer's q, k and v (one activation column, one token): the same sums, then each
 * row goes where e says -- q rotated into the rope's output, k rotated into the K cache, v into the
 * V cache -- so the two rope launches and the cache writes of a decode layer need no launch of their
 * own. The sums of a block's 8 NB rows meet in shared memory, where each row finds its pair's.
 * With T2 != T the matrices are of either type (a Q4_K_M layer's q4_K q and k with its q6_K v). */
template <int T, int T2, int J, int NB, class Thr>
PYG_KB void mvr_qkv_body(const Thr &t, const mvr_args &a, const mvr_qkv &e, float *sh) {
    float acc[NB][8];
    int64_t r0;
    const int g = mvr_block_rows<T, T2, J, NB>(t, a, acc, &r0);
    const rq_w &w = a.w[g];
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        const float v = warp_sum8(t, acc[nb]);
        if ((t.lane & 3) == 0) sh[t.warp * 8 * NB + 8 * nb + warp_sum8_index(t.lane)] = v;
    }
    t.sync();
    if (t.tid < 8 * NB) {
        const int KW = t.nthreads / 32;
        float v = 0.0f, vp = 0.0f; /* the pair's sum in the same order as its own thread's */
        for (int k = 0; k < KW; k++) {
            v += sh[k * 8 * NB + t.tid];
            vp += sh[k * 8 * NB + (t.tid ^ 1)];
        }
        const int64_t row = r0 + t.tid;
        if (row < w.M) mvr_qkv_store(e, g, a.dst[g], row, v, vp);
    }
}

/* Where the fused gate/up + swiglu launch writes its result (mvr_glu_body). */
struct mvr_glu {
    float *out;      /* silu(gate) * up, one float per row */
    int8_t *yq;      /* NULL, or the result also as the next mat-vec's int8 activations (M % 32 == 0) */
    float *yds;
};

/* A layer's gate and up mat-vecs (a.w[0], a.w[1], one activation column) and the swiglu that reads
 * them, as one launch: block b owns rows [32 b, 32 b + 32) of both (8 groups of 8 rows: gate's 4,
 * then up's 4), stores both rows (other nodes may read them), then silu(gate) * up, and with e.yq the
 * 32 results as one int8 block for the down mat-vec (warp 0, a lane per row). The block has KW * GW
 * warps: warp w takes K slice w % KW of the 8 / GW groups from (w / KW) * 8 / GW on, so with GW > 1
 * the groups' weight loads are in flight in several warps at once instead of one after another in
 * each (a 1b model's gate/up had 4 warps per multiprocessor, 37% of the H200's bandwidth).
 * sh: MVR_MAX_KW * 64 floats. */
template <int T, int J, int GW, class Thr>
PYG_KB void mvr_glu_body(const Thr &t, const mvr_args &a, const mvr_glu &e, float *sh) {
    static_assert(GW == 1 || GW == 2 || GW == 4 || GW == 8, "GW divides the 8 row groups");
    constexpr int P = 8 / GW; /* groups per warp */
    const int64_t r0 = t.bx * 32;
    const int KW = t.nthreads / 32 / GW, kw = t.warp % KW, b0 = (t.warp / KW) * P;
    mvr_slice<T, J> sl;
    mvr_slice_at<T, J>(kw, t.lane, a.K, sl);
    float acc[P][8];
#pragma unroll
    for (int p = 0; p < P; p++) {
        const int b = b0 + p; /* matrix b / 4, row group b % 4 */
        mvr_rows<T, J> rw;
        mvr_load_rows(a.w[b >> 2], (r0 >> 3) + (b & 3), sl, rw);
        if (p == 0) mvr_load_y(t, a.yq, a.yds, sl);
        mvr_dot_rows(sl, rw, acc[p]);
    }
#pragma unroll
    for (int p = 0; p < P; p++) {
        const float v = warp_sum8(t, acc[p]);
        if ((t.lane & 3) == 0) sh[kw * 64 + 8 * (b0 + p) + warp_sum8_index(t.lane)] = v;
    }
    t.sync();
    if (t.warp == 0) {
        float gate = 0.0f, up = 0.0f;
        for (int k = 0; k < KW; k++) {
            gate += sh[k * 64 + t.lane];
            up += sh[k * 64 + 32 + t.lane];
        }
        const int64_t row = r0 + t.lane;
        const float r = gate / (1.0f + expf(-gate)) * up; /* ops_basic.cu's silu_f(gate) * up */
        if (row < a.w[0].M) {
            a.dst[0][row] = gate;
            a.dst[1][row] = up;
            e.out[row] = r; /* last: it may overwrite the gate or up row (the planner's in-place reuse) */
        }
        if (e.yq) quant_block32(t, r, e.yq, e.yds, r0 / 32);
    }
}

/* Units per lane and warps per block for K. 0 when K is beyond this kernel (K > 24576: with 4 units
 * per lane the q8_0 and q4_K forms spill registers, measured with ptxas -v for sm_90). */
static inline int mvr_units_per_lane(int64_t K) {
    const int64_t nu = K / 32;
    const int64_t J = (nu + 32 * MVR_MAX_KW - 1) / (32 * MVR_MAX_KW);
    return J >= 1 && J <= 3 ? (int)J : 0;
}
static inline int mvr_warps(int64_t K, int J) { return (int)((K / 32 + 32 * J - 1) / (32 * J)); }
/* The gate/up launch's warps per K slice (mvr_glu_body's GW) for KW slices of J units per lane: the
 * most of 8, 4, 2 up to `most` (device option glu_spread) that keeps the block at 512 threads; 1 with
 * J > 1 (ptxas spills the q8_0 and K-quant forms there at 512 threads' 128 registers). */
static inline int mvr_glu_gw(int KW, int J, int most) {
    int gw = 1;
    if (J == 1)
        for (int g = 2; g <= 8 && g <= most; g *= 2)
            if (KW * g * 32 <= 512) gw = g;
    return gw;
}

#endif
