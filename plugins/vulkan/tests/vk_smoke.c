/* plugins/vulkan/tests/vk_smoke.c — a C-only check and micro-benchmark of libpyggml-vulkan.so,
 * for machines without the Python package (e.g. a GPU box with another Python).
 * Build: cc -O2 -Iinclude plugins/vulkan/tests/vk_smoke.c -ldl -lm -o vk_smoke
 * Run:   ./vk_smoke path/to/libpyggml-vulkan.so [device index]
 * Weights are random blocks (every bit pattern is a valid block); the reference dequantizes
 * them here in double precision. Exit status 0 only when every check passes. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pyggml/pyggml.h"

static const pyg_plugin_api *A;
static pyg_device *D;
static pyg_stream *S;
static int failures;

#define CHECK(call) do { pyg_error *e_ = (call); if (e_) { \
    fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, A->error_message(e_)); \
    A->error_destroy(e_); exit(2); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static uint64_t rng_s = 88172645463325252ull;
static uint64_t rnd(void) { rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17; return rng_s; }
static float frand(void) { return (float)((rnd() >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }

static float h2f(uint16_t h) {
    uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
static uint16_t f2h(float f) {   /* truncating; only used to make test data */
    if (f == 0) return 0;
    int e; float m = frexpf(fabsf(f), &e);   /* f = m * 2^e, m in [0.5, 1) */
    int he = e + 14;
    if (he <= 0) return 0;
    return (uint16_t)((f < 0 ? 0x8000 : 0) | (he << 10) | ((int)(m * 2048) & 1023));
}

/* element k of a row of `type` at p */
static double deq(int type, const uint8_t *p, int64_t k) {
    switch (type) {
    case PYG_TYPE_F32: { float f; memcpy(&f, p + 4 * k, 4); return f; }
    case PYG_TYPE_F16: { uint16_t h; memcpy(&h, p + 2 * k, 2); return h2f(h); }
    case PYG_TYPE_Q4_0: { const uint8_t *b = p + (k / 32) * 18; int j = k % 32; uint16_t d; memcpy(&d, b, 2);
        int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4); return h2f(d) * (q - 8); }
    case PYG_TYPE_Q8_0: { const uint8_t *b = p + (k / 32) * 34; uint16_t d; memcpy(&d, b, 2);
        return h2f(d) * (int8_t)b[2 + k % 32]; }
    case PYG_TYPE_Q4_K: { const uint8_t *b = p + (k / 256) * 144; int e = k % 256, sub = e / 32, l = e % 32;
        uint16_t d, dm; memcpy(&d, b, 2); memcpy(&dm, b + 2, 2); const uint8_t *sc = b + 4;
        int s, m;
        if (sub < 4) { s = sc[sub] & 63; m = sc[sub + 4] & 63; }
        else { s = (sc[sub + 4] & 15) | ((sc[sub - 4] >> 6) << 4); m = (sc[sub + 4] >> 4) | ((sc[sub] >> 6) << 4); }
        int qb = b[16 + 32 * (sub / 2) + l]; int q = sub & 1 ? qb >> 4 : qb & 15;
        return h2f(d) * s * q - h2f(dm) * m; }
    case PYG_TYPE_Q6_K: { const uint8_t *b = p + (k / 256) * 210; int e = k % 256, n = e / 128, r = e % 128, qq = r / 32, l = r % 32;
        int ql = b[64 * n + l + (qq & 1) * 32]; ql = qq >= 2 ? ql >> 4 : ql & 15;
        int qh = (b[128 + 32 * n + l] >> (2 * qq)) & 3; int q = (ql | (qh << 4)) - 32;
        uint16_t d; memcpy(&d, b + 208, 2); return h2f(d) * (int8_t)b[192 + 8 * n + l / 16 + 2 * qq] * q; }
    }
    return NAN;
}

/* random but well-scaled data of `type`, n elements */
static void fill(int type, uint8_t *p, int64_t n) {
    const pyg_type_traits *t = pyg_type_get_traits(type);
    int64_t nb = n / t->block_size;
    for (int64_t i = 0; i < nb * t->type_size; i++) p[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *b = p + i * t->type_size;
        uint16_t h;
        switch (type) {
        case PYG_TYPE_F32: { float f = frand(); memcpy(b, &f, 4); break; }
        case PYG_TYPE_F16: h = f2h(frand()); memcpy(b, &h, 2); break;
        case PYG_TYPE_Q4_0: case PYG_TYPE_Q8_0: h = f2h(0.01f + 0.05f * fabsf(frand())); memcpy(b, &h, 2); break;
        case PYG_TYPE_Q4_K: h = f2h(0.001f + 0.01f * fabsf(frand())); memcpy(b, &h, 2);
                            h = f2h(0.001f + 0.01f * fabsf(frand())); memcpy(b + 2, &h, 2); break;
        case PYG_TYPE_Q6_K: h = f2h(0.0005f + 0.002f * fabsf(frand())); memcpy(b + 208, &h, 2); break;
        }
    }
}

static void tensor(pyg_tensor *t, int type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, pyg_buffer *b, uint64_t off, const char *name) {
    memset(t, 0, sizeof *t);
    const pyg_type_traits *tr = pyg_type_get_traits(type);
    t->type = type;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2; t->ne[3] = ne3;
    t->nb[0] = (uint64_t)tr->type_size;
    t->nb[1] = (uint64_t)(ne0 / tr->block_size) * tr->type_size;
    t->nb[2] = t->nb[1] * ne1;
    t->nb[3] = t->nb[2] * ne2;
    t->buffer = b; t->offset = off;
    snprintf(t->name, sizeof t->name, "%s", name);
}

static pyg_buffer *alloc(uint64_t n) { pyg_buffer *b; CHECK(A->buffer_alloc(D, n, 0, &b)); return b; }

static double nmse(const float *got, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { double d = got[i] - ref[i]; num += d * d; den += ref[i] * ref[i]; }
    return den > 0 ? num / den : num;
}

static void report(const char *what, double e, double thr) {
    int ok = e <= thr;   /* NaN fails */
    failures += !ok;
    printf("%-4s %-44s nmse %.3g\n", ok ? "ok" : "FAIL", what, e);
}

static void run_graph(pyg_tensor **nodes, int n, int reps, double *ms) {
    pyg_graph g = { sizeof g, n, 0, (pyg_tensor *const *)nodes, (uint64_t)rnd() };
    pyg_graph_plan *plan;
    CHECK(A->graph_plan_create(D, &g, &plan));
    CHECK(A->graph_plan_compute(plan, S));
    CHECK(A->stream_synchronize(S));
    double t0 = now();
    for (int i = 0; i < reps; i++) CHECK(A->graph_plan_compute(plan, S));
    CHECK(A->stream_synchronize(S));
    if (ms) *ms = (now() - t0) * 1e3 / reps;
    A->graph_plan_destroy(plan);
}

static void test_mul_mat(int type, int64_t M, int64_t K, int64_t N, int reps) {
    const pyg_type_traits *tr = pyg_type_get_traits(type);
    uint64_t wbytes = pyg_type_row_size(type, K) * M;
    uint8_t *w = malloc(wbytes);
    float *x = malloc(sizeof(float) * K * N), *y = malloc(sizeof(float) * M * N);
    double *ref = malloc(sizeof(double) * M * N), *wd = malloc(sizeof(double) * K);
    fill(type, w, K * M);
    for (int64_t i = 0; i < K * N; i++) x[i] = frand();
    for (int64_t m = 0; m < M; m++) {
        const uint8_t *row = w + pyg_type_row_size(type, K) * m;
        for (int64_t k = 0; k < K; k++) wd[k] = deq(type, row, k);
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += wd[k] * x[n * K + k];
            ref[n * M + m] = s;
        }
    }
    pyg_buffer *bw = alloc(wbytes), *bx = alloc(4 * K * N), *by = alloc(4 * M * N);
    CHECK(A->buffer_write(bw, 0, w, wbytes));
    CHECK(A->stream_write_async(S, bx, 0, x, 4 * K * N));
    CHECK(A->buffer_fill(by, 0, 0xFF, 4 * M * N));   /* NaN poison */
    pyg_tensor tw, tx, ty;
    tensor(&tw, type, K, M, 1, 1, bw, 0, "w");
    tensor(&tx, PYG_TYPE_F32, K, N, 1, 1, bx, 0, "x");
    tensor(&ty, PYG_TYPE_F32, M, N, 1, 1, by, 0, "y");
    ty.op = PYG_OP_MUL_MAT; ty.src[0] = &tw; ty.src[1] = &tx;
    if (!A->device_supports_op(D, &ty)) { printf("skip mul_mat %s: unsupported\n", tr->name); goto out; }
    pyg_tensor *nodes[] = { &ty };
    double ms;
    run_graph(nodes, 1, reps, &ms);
    CHECK(A->stream_read_async(S, by, 0, y, 4 * M * N));
    CHECK(A->stream_synchronize(S));
    char what[96];
    snprintf(what, sizeof what, "mul_mat %s M=%lld K=%lld N=%lld", tr->name, (long long)M, (long long)K, (long long)N);
    report(what, nmse(y, ref, M * N), 5e-4);
    printf("     %8.3f ms  %8.1f GB/s weights  %8.1f GFLOP/s\n", ms, wbytes / ms / 1e6, 2.0 * M * K * N / ms / 1e6);
out:
    A->buffer_free(bw); A->buffer_free(bx); A->buffer_free(by);
    free(w); free(x); free(y); free(ref); free(wd);
}

/* rms_norm -> mul_mat -> silu on one stream fed from another through an event */
static void test_chain_events(void) {
    const int64_t K = 256, M = 96, N = 3;
    float x[256 * 3], w[256 * 96], y[96 * 3];
    double ref[96 * 3];
    for (int i = 0; i < K * N; i++) x[i] = frand();
    for (int i = 0; i < K * M; i++) w[i] = frand();
    for (int n = 0; n < N; n++) {
        double ss = 0, xn[256];
        for (int k = 0; k < K; k++) ss += (double)x[n * K + k] * x[n * K + k];
        double sc = 1.0 / sqrt(ss / K + 1e-5);
        for (int k = 0; k < K; k++) xn[k] = x[n * K + k] * sc;
        for (int m = 0; m < M; m++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += xn[k] * w[m * K + k];
            ref[n * M + m] = s / (1 + exp(-s));
        }
    }
    pyg_buffer *b = alloc(1 << 20);
    pyg_tensor tx, tn, tw, tm, ts;
    tensor(&tx, PYG_TYPE_F32, K, N, 1, 1, b, 0, "x");
    tensor(&tn, PYG_TYPE_F32, K, N, 1, 1, b, 4096, "xn");
    tensor(&tw, PYG_TYPE_F32, K, M, 1, 1, b, 8192, "w");
    tensor(&tm, PYG_TYPE_F32, M, N, 1, 1, b, 8192 + 4 * K * M, "mm");
    tensor(&ts, PYG_TYPE_F32, M, N, 1, 1, b, 4096, "out");   /* reuses xn's memory (WAR hazard) */
    tn.op = PYG_OP_RMS_NORM; tn.src[0] = &tx; pyg_op_param_set_f32(tn.op_params, 0, 1e-5f);
    tm.op = PYG_OP_MUL_MAT; tm.src[0] = &tw; tm.src[1] = &tn;
    ts.op = PYG_OP_SILU; ts.src[0] = &tm;
    pyg_stream *up;
    pyg_event *ev;
    CHECK(A->stream_create(D, 0, &up));
    CHECK(A->event_create(D, &ev));
    int32_t done = 0;
    CHECK(A->event_query(ev, &done));
    if (!done) { printf("FAIL fresh event not complete\n"); failures++; }
    CHECK(A->stream_write_async(up, b, 8192, w, sizeof w));
    CHECK(A->stream_write_async(up, b, 0, x, sizeof x));
    CHECK(A->event_record(ev, up));
    CHECK(A->stream_wait_event(S, ev));
    pyg_tensor *nodes[] = { &tn, &tm, &ts };
    pyg_graph g = { sizeof g, 3, 0, nodes, 12345 };
    pyg_graph_plan *plan;
    CHECK(A->graph_plan_create(D, &g, &plan));
    CHECK(A->graph_plan_compute(plan, S));
    CHECK(A->stream_read_async(S, b, 4096, y, sizeof y));
    report("rms_norm->mul_mat->silu after event wait", nmse(y, ref, M * N), 1e-6);
    CHECK(A->event_synchronize(ev));
    A->graph_plan_destroy(plan);
    A->event_destroy(ev);
    A->stream_destroy(up);
    A->buffer_free(b);
}

static int last_dispatches = -1, last_barriers = -1;
static void log_cb(void *u, int32_t level, const char *plugin, const char *msg) {
    const char *p = strstr(msg, ": ");
    if (strncmp(msg, "plan for graph", 14) == 0 && p) sscanf(p + 2, "%d dispatches, %d barriers", &last_dispatches, &last_barriers);
    else fprintf(stderr, "[%s] %s\n", plugin, msg);
}

/* barriers only where a dispatch touches a range written (or writes a range read) since the last one */
static void test_barriers(void) {
    pyg_buffer *b = alloc(1 << 16);
    pyg_tensor t[8];
    tensor(&t[0], PYG_TYPE_F32, 64, 1, 1, 1, b, 0, "a");
    tensor(&t[1], PYG_TYPE_F32, 64, 1, 1, 1, b, 256, "b");
    tensor(&t[2], PYG_TYPE_F32, 64, 1, 1, 1, b, 1024, "silu(a)");
    tensor(&t[3], PYG_TYPE_F32, 64, 1, 1, 1, b, 2048, "silu(b)");     /* independent of t[2] */
    tensor(&t[4], PYG_TYPE_F32, 64, 1, 1, 1, b, 4096, "a+b");         /* independent too */
    tensor(&t[5], PYG_TYPE_F32, 64, 1, 1, 1, b, 0, "gelu(b) into a"); /* WAR on a */
    tensor(&t[6], PYG_TYPE_F32, 64, 1, 1, 1, b, 8192, "x2");          /* RAW on silu(a) */
    t[2].op = PYG_OP_SILU; t[2].src[0] = &t[0];
    t[3].op = PYG_OP_SILU; t[3].src[0] = &t[1];
    t[4].op = PYG_OP_ADD; t[4].src[0] = &t[0]; t[4].src[1] = &t[1];
    t[5].op = PYG_OP_GELU; t[5].src[0] = &t[1];
    t[6].op = PYG_OP_MUL; t[6].src[0] = &t[2]; t[6].src[1] = &t[3];
    pyg_tensor *indep[] = { &t[2], &t[3], &t[4] };
    run_graph(indep, 3, 1, NULL);
    int ok = last_dispatches == 3 && last_barriers == 0;
    pyg_tensor *dep[] = { &t[2], &t[3], &t[4], &t[5], &t[6] };
    run_graph(dep, 5, 1, NULL);
    ok = ok && last_dispatches == 5 && last_barriers == 1;   /* one barrier covers both hazards */
    failures += !ok;
    printf("%-4s %-44s last: %d dispatches, %d barriers\n", ok ? "ok" : "FAIL", "barrier placement", last_dispatches, last_barriers);
    A->buffer_free(b);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s libpyggml-vulkan.so [device]\n", argv[0]); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    pyg_plugin_get_api_fn get = (pyg_plugin_get_api_fn)dlsym(lib, PYG_PLUGIN_ENTRY_NAME);
    static pyg_host_info host = { sizeof host, PYG_ABI_MAJOR, PYG_ABI_MINOR, 0, log_cb, NULL };
    A = get(&host);
    pyg_error *e = A->plugin_init();
    if (e) { printf("plugin_init: code %d: %s\n", A->error_code(e), A->error_message(e)); return 3; }
    int n = A->device_count(), idx = argc > 2 ? atoi(argv[2]) : 0;
    for (int i = 0; i < n; i++) {
        pyg_device *d; pyg_device_props p = { .struct_size = sizeof p };
        CHECK(A->device_get(i, &d)); CHECK(A->device_get_props(d, &p));
        printf("device %d: %s (type %d, caps 0x%llx, %.1f GiB, align %llu, max_alloc %llu)\n", i, p.description, p.type,
               (unsigned long long)p.caps, p.memory_total / 1073741824.0, (unsigned long long)p.alignment, (unsigned long long)p.max_alloc);
    }
    CHECK(A->device_get(idx, &D));
    CHECK(A->stream_create(D, 0, &S));
    test_chain_events();
    test_barriers();
    int big = getenv("VK_SMOKE_SMALL") ? 0 : 1;
    int types[] = { PYG_TYPE_F32, PYG_TYPE_F16, PYG_TYPE_Q4_0, PYG_TYPE_Q8_0, PYG_TYPE_Q4_K, PYG_TYPE_Q6_K };
    for (int i = 0; i < 6; i++) {
        test_mul_mat(types[i], 512, 1024, 1, 3);
        test_mul_mat(types[i], 300, 512, 37, 2);
        if (big) test_mul_mat(types[i], 4096, 4096, 1, 20);
        if (big) test_mul_mat(types[i], 4096, 4096, 512, 3);
    }
    A->stream_destroy(S);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
