/* plugins/cuda/test/rp_host.cu — the repacked-weight paths of the CUDA plugin, run on the CPU:
 *   rp_host [TYPE_ID ...]      (default: q4_0 q8_0 q4_K q6_K)
 * For each type: repacks random ggml blocks with repack.cuh's job items (what k_repack runs) and checks
 * every weight of the repacked layout against dequant_one (and zeros in the padding rows); then runs
 * the kernel bodies themselves on emulated thread blocks (simt_host.h): the decode mat-vec (mmv_rp.cuh)
 * as a grouped launch of two matrices for several K (1 to 5 warps per block, 1 or 2 units per lane,
 * 1 or 2 row groups per block), the fused gate/up + swiglu launch (with its int8 output compared
 * byte for byte with q8_block) and the int8 GEMM (mmq.cuh) on a 2 x 2 grid of tiles with broadcast
 * columns and, for q4_0/q8_0, a K that is not a multiple of the 128-wide k step. Both are compared with
 * a double-precision dot of the same int8 activations; a NaN in one activation block must make the
 * outputs that read it NaN (and only those). Exit 0 when everything matches. tests/test_cuda_blas.py
 * builds and runs it. */
#define PYG_SIMT_HOST 1
#include "simt_host.h"
#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "mmv_rp.cuh"
#include "mmq.cuh"

static uint32_t g_rng = 12345;
static uint32_t rnd() { g_rng = g_rng * 1664525u + 1013904223u; return g_rng >> 8; }
static float rndf() { return (float)rnd() / 16777216.0f * 2.0f - 1.0f; } /* [-1, 1) */
static int g_fail;

#define CHECK(cond, ...)                               \
    do {                                               \
        if (!(cond)) {                                 \
            fprintf(stderr, __VA_ARGS__);              \
            fputc('\n', stderr);                       \
            if (++g_fail > 20) exit(1);                \
        }                                              \
    } while (0)

struct qinfo { int bs, bytes; };
static qinfo info(int type) {
    switch (type) {
    case PYG_TYPE_Q4_0: return { 32, 18 };
    case PYG_TYPE_Q8_0: return { 32, 34 };
    case PYG_TYPE_Q4_K: return { 256, 144 };
    default: return { 256, 210 };
    }
}

/* random f16 scale of magnitude ~2^-9 .. 2^-7 (sign allowed where ggml allows it) */
static uint16_t rnd_scale(bool positive) {
    uint16_t h = (uint16_t)(0x1800 + rnd() % 0x0800);
    if (!positive && (rnd() & 1)) h |= 0x8000;
    return h;
}

static std::vector<uint8_t> make_rows(int type, int64_t M, int64_t K) {
    const qinfo q = info(type);
    const int64_t nb = K / q.bs;
    std::vector<uint8_t> v((size_t)(M * nb * q.bytes));
    for (auto &b : v) b = (uint8_t)rnd();
    for (int64_t i = 0; i < M * nb; i++) {
        uint8_t *blk = v.data() + i * q.bytes;
        uint16_t h[2] = { rnd_scale(type == PYG_TYPE_Q4_K), rnd_scale(true) };
        const int off = type == PYG_TYPE_Q6_K ? 208 : 0;
        memcpy(blk + off, &h[0], 2);
        if (type == PYG_TYPE_Q4_K) memcpy(blk + 2, &h[1], 2);
    }
    return v;
}

struct repacked {
    std::vector<uint8_t> qs, qh, sc;
    rq_w w;
};

static void repack_host(int type, const std::vector<uint8_t> &rows, int64_t M, int64_t K, repacked &r) {
    const int64_t Mp = (M + RQ_ROW_PAD - 1) / RQ_ROW_PAD * RQ_ROW_PAD;
    r.qs.assign((size_t)(Mp * rq_qs_row(type, K)), 0xee); /* garbage: every byte must be written */
    r.qh.assign((size_t)rq_qh_bytes(type, Mp, K), 0xee);
    r.sc.assign((size_t)rq_sc_bytes(type, Mp, K), 0xee);
    r.w.qs = r.qs.data();
    r.w.qh = r.qh.empty() ? NULL : r.qh.data();
    r.w.sc = r.sc.data();
    r.w.K = K;
    r.w.M = M;
    r.w.Mp = Mp;
    r.w.qs_row = rq_qs_row(type, K);
    r.w.type = type;
    const qinfo q = info(type);
    const rq_job j = rq_job_make(rows.data(), K / q.bs * q.bytes, r.w);
    for (int64_t i = 0; i < j.units + j.groups; i++) rq_job_item(j, i);
}

static void check_layout(int type, const std::vector<uint8_t> &rows, const repacked &r) {
    const qinfo q = info(type);
    const int64_t row_bytes = r.w.K / q.bs * q.bytes;
    for (int64_t m = 0; m < r.w.Mp; m++)
        for (int64_t k = 0; k < r.w.K; k++) {
            const float got = rq_weight(r.w, m, k);
            const float want = m < r.w.M ? dequant_one(rows.data() + m * row_bytes + (k / q.bs) * q.bytes, type,
                                                       (int)(k % q.bs))
                                         : 0.0f;
            CHECK(got == want, "type %d: repacked weight (%lld, %lld) = %g, ggml block says %g", type, (long long)m,
                  (long long)k, got, want);
        }
}

/* ---------------------------------------------------------------- mat-vec */

/* Two repacked matrices of M[0], M[1] rows and one random activation column quantized as the mat-vecs
 * take it (with_nan: a NaN in its second block), ready in a (yq, yds, K, n = 2, w[0], w[1]). */
struct two_mats {
    repacked r[2];
    std::vector<int8_t> yq;
    std::vector<float> yds;
    mvr_args a;
    int J, KW;
};

static void two_mats_make(int type, const int64_t M[2], int64_t K, bool with_nan, two_mats &s) {
    for (int i = 0; i < 2; i++) {
        const std::vector<uint8_t> rows = make_rows(type, M[i], K);
        repack_host(type, rows, M[i], K, s.r[i]);
        check_layout(type, rows, s.r[i]);
    }
    std::vector<float> y(K);
    for (auto &v : y) v = rndf() * 3.0f;
    if (with_nan) y[33] = NAN;
    s.yq.assign(K, 0);
    s.yds.assign(K / 16, 0.0f);
    for (int64_t b = 0; b < K / 32; b++) q8_block(&y[32 * b], &s.yq[32 * b], &s.yds[2 * b]);
    s.J = mvr_units_per_lane(K);
    s.KW = mvr_warps(K, s.J);
    memset(&s.a, 0, sizeof s.a);
    s.a.yq = s.yq.data();
    s.a.yds = s.yds.data();
    s.a.K = K;
    s.a.n = 2;
    for (int i = 0; i < 2; i++) s.a.w[i] = s.r[i].w;
}

/* row m of w against the quantized column, in double; mag: the sum of |terms| */
static double int8_dot_ref(const rq_w &w, int64_t m, const two_mats &s, double *mag) {
    double ref = 0;
    *mag = 0;
    for (int64_t k = 0; k < w.K; k++) {
        const double t = (double)rq_weight(w, m, k) * s.yds[2 * (k / 32)] * s.yq[k];
        ref += t;
        *mag += fabs(t);
    }
    return ref;
}

template <int T, int J, int NB>
static void run_mvr(const mvr_args &a, int KW, unsigned blocks) {
    simt_launch(blocks, 1, KW * 32, MVR_MAX_KW * 8 * NB * sizeof(float),
                [&](HostThr &t, unsigned char *sm) { mvr_body<T, J, NB>(t, a, (float *)sm); });
}

template <int T>
static void test_matvec(int64_t K, int NB, bool with_nan) {
    const int64_t Ms[2] = { 40, 136 };
    two_mats s;
    two_mats_make(T, Ms, K, with_nan, s);
    mvr_args &a = s.a;
    const int J = s.J, KW = s.KW;
    std::vector<float> out[2];
    unsigned blocks = 0;
    for (int i = 0; i < MVR_MAX; i++) {
        const int k = i < 2 ? i : 1;
        if (i < 2) out[i].assign((size_t)Ms[i], -12345.0f);
        a.w[i] = s.r[k].w;
        a.dst[i] = out[k].data();
        a.blk0[i] = blocks;
        if (i < 2) blocks += (unsigned)(s.r[i].w.Mp / (8 * NB));
    }
    a.blk0[MVR_MAX] = blocks;
    switch (J * 10 + NB) {
    case 11: run_mvr<T, 1, 1>(a, KW, blocks); break;
    case 12: run_mvr<T, 1, 2>(a, KW, blocks); break;
    case 21: run_mvr<T, 2, 1>(a, KW, blocks); break;
    case 22: run_mvr<T, 2, 2>(a, KW, blocks); break;
    default: CHECK(false, "test_matvec: J=%d", J); return;
    }
    for (int i = 0; i < 2; i++)
        for (int64_t m = 0; m < Ms[i]; m++) {
            double mag;
            const double ref = int8_dot_ref(s.r[i].w, m, s, &mag);
            const float got = out[i][m];
            if (with_nan) CHECK(got != got, "type %d K %lld: mat-vec row %lld of matrix %d = %g, want NaN", T,
                                (long long)K, (long long)m, i, got);
            else CHECK(fabs(got - ref) <= 1e-5 * mag + 1e-6, "type %d K %lld NB %d: mat-vec row %lld of matrix %d = "
                       "%.9g, want %.9g (magnitude %g)", T, (long long)K, NB, (long long)m, i, got, ref, mag);
        }
    fprintf(stderr, "type %d: mat-vec K %lld (J %d, %d warps, NB %d%s) ok\n", T, (long long)K, J, KW, NB,
            with_nan ? ", NaN block" : "");
}

/* gate and up mat-vecs and their swiglu in one launch (mvr_glu_body): both rows stored, silu(g) * u,
 * and with prequant the result as int8 blocks exactly as q8_block makes them */
template <int T, int J>
static void run_glu(const mvr_args &a, const mvr_glu &e, int KW, int GW, int64_t nblk) {
    void (*body)(const HostThr &, const mvr_args &, const mvr_glu &, float *) =
        GW == 1 ? mvr_glu_body<T, J, 1, HostThr> : GW == 2 ? mvr_glu_body<T, J, 2, HostThr>
        : GW == 4 ? mvr_glu_body<T, J, 4, HostThr> : mvr_glu_body<T, J, 8, HostThr>;
    simt_launch(nblk, 1, KW * GW * 32, MVR_MAX_KW * 64 * sizeof(float),
                [&](HostThr &t, unsigned char *sm) { body(t, a, e, (float *)sm); });
}

/* GW: warps per K slice (mvr_glu_body); 0: what the launcher picks with glu_spread on */
template <int T>
static void test_glu(int64_t M, int64_t K, bool prequant, int GW = 0) {
    const int64_t Ms[2] = { M, M };
    two_mats s;
    two_mats_make(T, Ms, K, false, s);
    mvr_args &a = s.a;
    const int J = s.J, KW = s.KW;
    std::vector<float> gate(M, -1.0f), up(M, -1.0f), out(M, -1.0f);
    const int64_t nblk = (M + 31) / 32;
    std::vector<int8_t> oq(32 * nblk, 99);
    std::vector<float> ods(2 * nblk, -1.0f);
    a.dst[0] = gate.data();
    a.dst[1] = up.data();
    mvr_glu e;
    e.out = out.data();
    e.yq = prequant ? oq.data() : NULL;
    e.yds = prequant ? ods.data() : NULL;
    if (!GW) GW = mvr_glu_gw(KW, J, 8);
    if (J == 1) run_glu<T, 1>(a, e, KW, GW, nblk);
    else if (J == 2) run_glu<T, 2>(a, e, KW, GW, nblk);
    else { CHECK(false, "test_glu: J=%d", J); return; }
    for (int64_t m = 0; m < M; m++) {
        double mag[2];
        const double ref[2] = { int8_dot_ref(s.r[0].w, m, s, &mag[0]), int8_dot_ref(s.r[1].w, m, s, &mag[1]) };
        CHECK(fabs(gate[m] - ref[0]) <= 1e-5 * mag[0] + 1e-6 && fabs(up[m] - ref[1]) <= 1e-5 * mag[1] + 1e-6,
              "type %d: gate/up row %lld = %g / %g, want %g / %g", T, (long long)m, gate[m], up[m], ref[0], ref[1]);
        const float want = gate[m] / (1.0f + expf(-gate[m])) * up[m];
        CHECK(fabsf(out[m] - want) <= 1e-6f * fabsf(want) + 1e-12f, "type %d: swiglu row %lld = %g, want %g", T,
              (long long)m, out[m], want);
    }
    if (prequant)
        for (int64_t b = 0; b < nblk; b++) {
            int8_t q[32];
            float ds[2];
            q8_block(&out[32 * b], q, ds);
            CHECK(memcmp(q, &oq[32 * b], 32) == 0 && ds[0] == ods[2 * b] && ds[1] == ods[2 * b + 1],
                  "type %d: swiglu block %lld quantized as (%g, %g), want (%g, %g)", T, (long long)b, ods[2 * b],
                  ods[2 * b + 1], ds[0], ds[1]);
        }
    fprintf(stderr, "type %d: gate/up/swiglu M %lld K %lld (%d x %d warps%s) ok\n", T, (long long)M, (long long)K, KW,
            GW, prequant ? ", int8 out" : "");
}

/* A layer's q, k and v mat-vecs with the ropes and the cache writes (mvr_qkv_body): q rotated into
 * its output, k rotated into cache row idx, v into the other cache's row idx, nothing else written;
 * against double-precision dots rotated in double. n_dims < D leaves the tail of each head as it is. */
static double rope_ref(const rope_params &p, double pos, int64_t ip) { /* freq_scale 1, no YaRN */
    return pos * pow((double)p.theta_scale, (double)ip);
}

template <int T, int TV, int J, int NB>
static void run_qkv(const mvr_args &a, const mvr_qkv &e, int KW, unsigned blocks) {
    simt_launch(blocks, 1, KW * 32, MVR_MAX_KW * 8 * NB * sizeof(float),
                [&](HostThr &t, unsigned char *sm) { mvr_qkv_body<T, TV, J, NB>(t, a, e, (float *)sm); });
}

/* q and k of type T, v of type TV (the kernel's T2: a Q4_K_M layer's q6_K v beside q4_K q and k) */
template <int T, int TV = T>
static void test_qkv(int64_t K, int NB, int n_dims, int ctype, int64_t slot) {
    const int64_t H = 4, Hkv = 2, D = 32, crows = 5;
    const int64_t Ms[3] = { H * D, Hkv * D, Hkv * D };
    repacked r[3];
    for (int i = 0; i < 3; i++) {
        const int ty = i == 2 ? TV : T;
        const std::vector<uint8_t> rows = make_rows(ty, Ms[i], K);
        repack_host(ty, rows, Ms[i], K, r[i]);
    }
    two_mats s; /* for its activation column (and int8_dot_ref); its matrices are not used */
    const int64_t Mdummy[2] = { 8, 8 };
    two_mats_make(T, Mdummy, K, false, s);
    const int J = s.J, KW = s.KW;
    const size_t esz = ctype == PYG_TYPE_F32 ? 4 : 2;
    std::vector<float> qout((size_t)Ms[0], -12345.0f);
    std::vector<uint8_t> kc((size_t)(crows * Ms[1] * esz), 0xa5), vc((size_t)(crows * Ms[2] * esz), 0x5a);
    const std::vector<uint8_t> kc0 = kc, vc0 = vc;
    const int32_t pos = 37;
    const int64_t idx = slot;
    mvr_args a;
    memset(&a, 0, sizeof a);
    a.yq = s.yq.data();
    a.yds = s.yds.data();
    a.K = K;
    a.n = 3;
    mvr_qkv e;
    memset(&e, 0, sizeof e);
    e.pos = &pos;
    e.ff = NULL;
    rope_params rp;
    memset(&rp, 0, sizeof rp);
    rp.n_dims = n_dims;
    rp.theta_scale = powf(10000.0f, -2.0f / (float)n_dims);
    rp.freq_scale = 1.0f;
    rp.attn_factor = 1.0f;
    e.rp = rp;
    e.D = D;
    unsigned blocks = 0;
    for (int i = 0; i < MVR_MAX; i++) {
        const int g = i < 3 ? i : 2;
        a.w[i] = r[g].w;
        a.dst[i] = g == 0 ? qout.data() : NULL;
        e.kind[i] = g == 0 ? MVR_ST_ROPE : g == 1 ? MVR_ST_ROPE_CACHE : MVR_ST_CACHE;
        uint8_t *c = g == 1 ? kc.data() : vc.data();
        e.cache[i] = (char *)c;
        e.ctype[i] = ctype;
        e.cnb0[i] = (int64_t)esz;
        e.cnb1[i] = Ms[g] * (int64_t)esz;
        e.crows[i] = crows;
        e.idx[i] = (const char *)&idx;
        e.itype[i] = PYG_TYPE_I64;
        a.blk0[i] = blocks;
        if (i < 3) blocks += (unsigned)(r[g].w.Mp / (8 * NB));
    }
    a.blk0[MVR_MAX] = blocks;
    switch (J * 10 + NB) {
    case 11: run_qkv<T, TV, 1, 1>(a, e, KW, blocks); break;
    case 12: run_qkv<T, TV, 1, 2>(a, e, KW, blocks); break;
    case 21: run_qkv<T, TV, 2, 1>(a, e, KW, blocks); break;
    case 22: run_qkv<T, TV, 2, 2>(a, e, KW, blocks); break;
    default: CHECK(false, "test_qkv: J=%d", J); return;
    }
    auto cache_at = [&](const std::vector<uint8_t> &c, int64_t M, int64_t row, int64_t col) {
        const uint8_t *p = c.data() + (row * M + col) * esz;
        float f;
        if (ctype == PYG_TYPE_F32) memcpy(&f, p, 4);
        else f = f16_bits_to_f32((uint16_t)(p[0] | p[1] << 8));
        return f;
    };
    for (int g = 0; g < 3; g++) {
        std::vector<double> want((size_t)Ms[g]), mag((size_t)Ms[g]);
        for (int64_t m = 0; m < Ms[g]; m++) {
            double mg;
            want[m] = int8_dot_ref(r[g].w, m, s, &mg);
            mag[m] = mg;
        }
        if (g < 2) /* rotate the pairs of each head's first n_dims */
            for (int64_t m = 0; m < Ms[g]; m += 2) {
                const int64_t d = m % D;
                if (d >= n_dims) continue;
                const double th = rope_ref(rp, pos, d / 2), c = cos(th), sn = sin(th);
                const double x0 = want[m], x1 = want[m + 1];
                want[m] = x0 * c - x1 * sn;
                want[m + 1] = x0 * sn + x1 * c;
                mag[m] = mag[m + 1] = mag[m] + mag[m + 1];
            }
        for (int64_t m = 0; m < Ms[g]; m++) {
            const double tol = 1e-5 * mag[m] + 1e-6 + (g > 0 && ctype == PYG_TYPE_F16 ? fabs(want[m]) / 1024.0 : 0.0);
            if (g == 0) {
                CHECK(fabs(qout[m] - want[m]) <= tol, "type %d K %lld NB %d n_dims %d: rotated q row %lld = %.9g, "
                      "want %.9g", T, (long long)K, NB, n_dims, (long long)m, qout[m], want[m]);
                continue;
            }
            const std::vector<uint8_t> &c = g == 1 ? kc : vc;
            if (slot >= 0 && slot < crows) {
                const float got = cache_at(c, Ms[g], slot, m);
                CHECK(fabs(got - want[m]) <= tol, "type %d K %lld NB %d n_dims %d: %s cache row %lld col %lld = "
                      "%.9g, want %.9g", T, (long long)K, NB, n_dims, g == 1 ? "K" : "V", (long long)slot,
                      (long long)m, got, want[m]);
            }
        }
    }
    /* every other byte of both caches as it was (all of them for an index out of range) */
    for (int g = 1; g < 3; g++) {
        const std::vector<uint8_t> &c = g == 1 ? kc : vc, &c0 = g == 1 ? kc0 : vc0;
        const size_t row_bytes = (size_t)Ms[g] * esz;
        for (int64_t rw = 0; rw < crows; rw++)
            if (rw != slot)
                CHECK(memcmp(c.data() + rw * row_bytes, c0.data() + rw * row_bytes, row_bytes) == 0,
                      "type %d: %s cache row %lld written (the token's row is %lld)", T, g == 1 ? "K" : "V",
                      (long long)rw, (long long)slot);
    }
    fprintf(stderr, "type %d (v %d): q/k/v + rope + cache K %lld (%d warps, NB %d, n_dims %d, %s cache, row %lld) ok\n",
            T, TV, (long long)K, KW, NB, n_dims, ctype == PYG_TYPE_F32 ? "f32" : "f16", (long long)slot);
}

/* ---------------------------------------------------------------- int8 GEMM */

template <int T>
static void test_mmq(int64_t M, int64_t K, int NT) {
    std::vector<uint8_t> rows = make_rows(T, M, K);
    repacked r;
    repack_host(T, rows, M, K, r);
    check_layout(T, rows, r);
    const int64_t N = 70, B2 = 2, Ntot = N * B2, nan_col = 5;
    const int64_t Kp = (K + MMQ_BK - 1) / MMQ_BK * MMQ_BK, Np = (Ntot + MMQ_BN - 1) / MMQ_BN * MMQ_BN;
    std::vector<float> x((size_t)(Ntot * K));
    for (auto &v : x) v = rndf() * 2.0f;
    for (int64_t k = 0; k < K; k++) x[nan_col * K + k] *= 100.0f; /* a column with a much larger range */
    x[nan_col * K + 37] = NAN;
    std::vector<int8_t> yq((size_t)(Np * Kp), 0);
    std::vector<mmq_yd> yd((size_t)(Np * (Kp / 32)));
    for (int64_t c = 0; c < Np; c++)
        for (int64_t b = 0; b < Kp / 32; b++) {
            const int nv = c < Ntot ? (int)std::max<int64_t>(0, std::min<int64_t>(32, K - 32 * b)) : 0;
            mmq_quant_block_ref(nv ? &x[c * K + 32 * b] : NULL, nv, &yq[c * Kp + 32 * b], &yd[c * (Kp / 32) + b]);
        }
    std::vector<float> dst((size_t)(M * Ntot), -12345.0f);
    mmq_args a;
    a.w = r.w;
    a.yq = yq.data();
    a.yd = yd.data();
    a.Kp = Kp;
    a.Ntot = Ntot;
    a.N = N;
    a.B2 = B2;
    a.dst = dst.data();
    a.ds1 = M;          /* dst [B2][N][M] */
    a.ds2 = M * N;
    a.ds3 = M * N * B2;
    if (NT == 4)
        simt_launch(r.w.Mp / MMQ_BM, Np / MMQ_BN, MMQ_THREADS, mmq_t<T, 4>::SMEM,
                    [&](HostThr &t, unsigned char *sm) { mmq_body<T, 4>(t, a, sm); });
    else
        simt_launch(r.w.Mp / MMQ_BM, Np / 64, MMQ_THREADS, mmq_t<T, 2>::SMEM,
                    [&](HostThr &t, unsigned char *sm) { mmq_body<T, 2>(t, a, sm); });
    for (int64_t c = 0; c < Ntot; c++)
        for (int64_t m = 0; m < M; m++) {
            const float got = dst[c * M + m];
            if (c == nan_col) {
                CHECK(got != got, "type %d: GEMM (%lld, column %lld) = %g, want NaN", T, (long long)m, (long long)c, got);
                continue;
            }
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                const mmq_yd &d = yd[c * (Kp / 32) + k / 32];
                const double t = (double)rq_weight(r.w, m, k) * d.d * yq[c * Kp + k];
                ref += t;
                mag += fabs(t);
            }
            CHECK(fabs(got - ref) <= 2e-6 * mag + 1e-6, "type %d M %lld K %lld: GEMM (%lld, column %lld) = %.9g, "
                  "want %.9g (magnitude %g)", T, (long long)M, (long long)K, (long long)m, (long long)c, got, ref, mag);
        }
    /* the quantizer's promise: d * 1.5 * 2^23 is exact (the FMA that removes the bias relies on it) */
    for (const mmq_yd &d : yd)
        if (d.d > 0.0f) {
            const double e = (double)d.d * MMQ_BIASF;
            CHECK((double)(float)e == e, "block scale %a: d * bias %a is not exact in float", d.d, e);
        }
    fprintf(stderr, "type %d: int8 GEMM %lld x %lld x %lld columns (%d-column tiles) ok\n", T, (long long)M,
            (long long)K, (long long)Ntot, 32 * NT);
}

template <int T>
static void test_type(void) {
    const int64_t k_small = 512, k_mid = 3072, k_big = 8704; /* 1, 3 and 5 warps; J = 1, 1, 2 */
    test_matvec<T>(k_small, 1, false);
    test_matvec<T>(k_mid, 2, false);
    test_matvec<T>(k_big, 1, false);
    test_matvec<T>(k_mid, 1, true);
    test_glu<T>(96, k_small, true);
    test_glu<T>(72, k_mid, false);
    test_glu<T>(96, k_mid, true, 1); /* each warp the 8 groups in turn (glu_spread 1); int8 out: M % 32 == 0 */
    test_glu<T>(40, k_mid, false, 2);
    test_glu<T>(40, k_big, false, 2); /* J 2: 5 K slices x 2 warps (the launcher runs J 2 with 1) */
    test_qkv<T>(k_small, 1, 32, PYG_TYPE_F16, 3);
    test_qkv<T>(k_mid, 2, 24, PYG_TYPE_F32, 0);
    test_qkv<T>(k_small, 2, 32, PYG_TYPE_F16, 5); /* index past the cache: no row written */
    if (T == PYG_TYPE_Q4_K) { /* Q4_K_M's q6_K v in one launch with q4_K q and k */
        test_qkv<PYG_TYPE_Q4_K, PYG_TYPE_Q6_K>(k_small, 1, 32, PYG_TYPE_F16, 3);
        test_qkv<PYG_TYPE_Q4_K, PYG_TYPE_Q6_K>(k_mid, 2, 24, PYG_TYPE_F32, 0);
        test_qkv<PYG_TYPE_Q6_K, PYG_TYPE_Q4_K>(k_small, 2, 32, PYG_TYPE_F16, 1);
    }
    const bool kq = T == PYG_TYPE_Q4_K || T == PYG_TYPE_Q6_K;
    test_mmq<T>(200, kq ? 512 : 480, 4);
    test_mmq<T>(130, kq ? 256 : 160, 2);
}

int main(int argc, char **argv) {
    std::vector<int> types;
    for (int i = 1; i < argc; i++) types.push_back(atoi(argv[i]));
    if (types.empty()) types = { PYG_TYPE_Q4_0, PYG_TYPE_Q8_0, PYG_TYPE_Q4_K, PYG_TYPE_Q6_K };
    for (int t : types) {
        switch (t) {
        case PYG_TYPE_Q4_0: test_type<PYG_TYPE_Q4_0>(); break;
        case PYG_TYPE_Q8_0: test_type<PYG_TYPE_Q8_0>(); break;
        case PYG_TYPE_Q4_K: test_type<PYG_TYPE_Q4_K>(); break;
        case PYG_TYPE_Q6_K: test_type<PYG_TYPE_Q6_K>(); break;
        default: fprintf(stderr, "unknown type %d\n", t); return 2;
        }
    }
    if (g_fail) fprintf(stderr, "%d mismatches\n", g_fail);
    return g_fail ? 1 : 0;
}
