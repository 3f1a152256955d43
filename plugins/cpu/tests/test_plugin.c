/* plugins/cpu/tests/test_plugin.c — loads libpyggml-cpu.so with dlopen and checks the ABI entries
 * and a set of ops against plain C loops (double accumulation), on 1..3 threads, with the AVX2
 * ("auto") and the scalar ("reference") kernels. Run: make -f plugins/cpu/tests/Makefile */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pyggml/pyggml.h"

static const pyg_plugin_api *api;
static pyg_device *dev;
static int failures, checks;

#define CHECK(cond, ...)                                            \
    do {                                                            \
        checks++;                                                   \
        if (!(cond)) {                                              \
            failures++;                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);    \
            fprintf(stderr, __VA_ARGS__);                           \
            fprintf(stderr, "\n");                                  \
        }                                                           \
    } while (0)

static int32_t take(pyg_error *e, const char **msg) {
    static char buf[600];
    if (!e) {
        if (msg) *msg = "";
        return PYG_OK;
    }
    int32_t c = api->error_code(e);
    snprintf(buf, sizeof buf, "%s", api->error_message(e));
    if (msg) *msg = buf;
    api->error_destroy(e);
    return c;
}

/* ---------------------------------------------------------------- tensors on host memory */

static uint32_t rng = 12345;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return ((rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static pyg_tensor *tensor(int32_t type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    pyg_tensor *t = calloc(1, sizeof *t);
    const pyg_type_traits *tr = pyg_type_get_traits(type);
    t->type = type;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = ne3;
    t->nb[0] = (uint64_t)tr->type_size;
    t->nb[1] = pyg_type_row_size(type, ne0);
    t->nb[2] = t->nb[1] * (uint64_t)ne1;
    t->nb[3] = t->nb[2] * (uint64_t)ne2;
    size_t bytes = t->nb[3] * (uint64_t)ne3;
    t->data = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    memset(t->data, 0xff, bytes); /* poison: NaN for floats */
    snprintf(t->name, sizeof t->name, "t%p", (void *)t);
    return t;
}
static void fill(pyg_tensor *t, float scale) {
    int64_t n = pyg_tensor_nelements(t);
    if (t->type == PYG_TYPE_F32)
        for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] = frand() * scale;
}
/* swap dims 0 and 1 of a contiguous tensor: a non-contiguous view */
static pyg_tensor *transposed(pyg_tensor *t) {
    pyg_tensor *v = calloc(1, sizeof *v);
    *v = *t;
    v->op = PYG_OP_TRANSPOSE;
    v->ne[0] = t->ne[1], v->ne[1] = t->ne[0];
    v->nb[0] = t->nb[1], v->nb[1] = t->nb[0];
    v->src[0] = t;
    v->view_src = t;
    return v;
}
static float getf(const pyg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const char *p = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
    float f;
    memcpy(&f, p, 4);
    return f;
}
static pyg_tensor *node(int32_t op, int32_t type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                        pyg_tensor *s0, pyg_tensor *s1, pyg_tensor *s2, pyg_tensor *s3) {
    pyg_tensor *t = tensor(type, ne0, ne1, ne2, ne3);
    t->op = op;
    t->src[0] = s0, t->src[1] = s1, t->src[2] = s2, t->src[3] = s3;
    return t;
}
static void setpf(pyg_tensor *t, int i, float f) { memcpy(&t->op_params[i], &f, 4); }

static int32_t run1(pyg_tensor *n, const char **msg) {
    pyg_tensor *nodes[1] = { n };
    pyg_graph g = { sizeof g, 1, 0, nodes, 1 };
    pyg_graph_plan *plan = NULL;
    pyg_stream *s = NULL;
    int32_t c = take(api->graph_plan_create(dev, &g, &plan), msg);
    if (c) return c;
    take(api->stream_create(dev, 0, &s), NULL);
    c = take(api->graph_plan_compute(plan, s), msg);
    api->stream_destroy(s);
    api->graph_plan_destroy(plan);
    return c;
}

static double nmse_vs(const pyg_tensor *out, const double *ref) {
    int64_t n = pyg_tensor_nelements(out);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double o = ((const float *)out->data)[i];
        if (!isfinite(o)) return INFINITY;
        num += (o - ref[i]) * (o - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

/* ---------------------------------------------------------------- op checks */

static void check_mul_mat(int K, int M, int N, int B2, int b2, int trans_x, const char *tag) {
    pyg_tensor *w = tensor(PYG_TYPE_F32, K, M, b2, 1);
    fill(w, 1);
    pyg_tensor *xs = tensor(PYG_TYPE_F32, trans_x ? N : K, trans_x ? K : N, B2, 1);
    fill(xs, 1);
    pyg_tensor *x = trans_x ? transposed(xs) : xs;
    pyg_tensor *y = node(PYG_OP_MUL_MAT, PYG_TYPE_F32, M, N, B2, 1, w, x, NULL, NULL);
    const char *msg;
    int32_t c = run1(y, &msg);
    CHECK(c == 0, "mul_mat %s: %s", tag, msg);
    double *ref = malloc(sizeof(double) * (size_t)(M * N * B2));
    for (int i2 = 0; i2 < B2; i2++)
        for (int n = 0; n < N; n++)
            for (int m = 0; m < M; m++) {
                double s = 0;
                for (int k = 0; k < K; k++) s += (double)getf(w, k, m, i2 / (B2 / b2), 0) * getf(x, k, n, i2, 0);
                ref[(i2 * N + n) * M + m] = s;
            }
    double e = nmse_vs(y, ref);
    CHECK(e < 1e-10, "mul_mat %s K=%d M=%d N=%d B2=%d b2=%d: nmse %g", tag, K, M, N, B2, b2, e);
    free(ref);
}

static void check_soft_max(const char *tag) {
    const int n = 37, rows = 5, H = 4;
    pyg_tensor *x = tensor(PYG_TYPE_F32, n, rows, H, 1);
    fill(x, 3);
    pyg_tensor *mask = tensor(PYG_TYPE_F32, n, rows + 2, 1, 1);
    fill(mask, 1);
    ((float *)mask->data)[3] = -INFINITY;
    pyg_tensor *y = node(PYG_OP_SOFT_MAX, PYG_TYPE_F32, n, rows, H, 1, x, mask, NULL, NULL);
    setpf(y, 0, 0.7f);
    setpf(y, 1, 8.0f);
    const char *msg;
    CHECK(run1(y, &msg) == 0, "soft_max %s: %s", tag, msg);
    double *ref = malloc(sizeof(double) * (size_t)(n * rows * H));
    for (int h = 0; h < H; h++) {
        double slope = pow(2.0, -8.0 / 4.0 * (h + 1)); /* n_head 4 is a power of two: m0^(h+1) */
        for (int r = 0; r < rows; r++) {
            double mx = -INFINITY, v[64], sum = 0;
            for (int i = 0; i < n; i++) {
                v[i] = 0.7 * getf(x, i, r, h, 0) + slope * getf(mask, i, r, 0, 0);
                mx = v[i] > mx ? v[i] : mx;
            }
            for (int i = 0; i < n; i++) sum += (v[i] = exp(v[i] - mx));
            for (int i = 0; i < n; i++) ref[(h * rows + r) * n + i] = v[i] / sum;
        }
    }
    double e = nmse_vs(y, ref);
    CHECK(e < 1e-10, "soft_max %s: nmse %g", tag, e);
    free(ref);
}

static void check_rope_neox(const char *tag) {
    const int D = 24, H = 3, T = 5, nd = 16;
    pyg_tensor *x = tensor(PYG_TYPE_F32, D, H, T, 1);
    fill(x, 1);
    pyg_tensor *pos = tensor(PYG_TYPE_I32, T, 1, 1, 1);
    for (int t = 0; t < T; t++) ((int32_t *)pos->data)[t] = 3 * t + 1;
    pyg_tensor *y = node(PYG_OP_ROPE, PYG_TYPE_F32, D, H, T, 1, x, pos, NULL, NULL);
    y->op_params[0] = nd, y->op_params[1] = PYG_ROPE_NEOX, y->op_params[2] = 4096;
    setpf(y, 3, 10000.0f), setpf(y, 4, 1.0f), setpf(y, 5, 0.0f), setpf(y, 6, 1.0f);
    setpf(y, 7, 32.0f), setpf(y, 8, 1.0f);
    const char *msg;
    CHECK(run1(y, &msg) == 0, "rope %s: %s", tag, msg);
    double *ref = malloc(sizeof(double) * (size_t)(D * H * T));
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            double *o = ref + (t * H + h) * D;
            for (int i = 0; i < D; i++) o[i] = getf(x, i, h, t, 0);
            for (int i = 0; i < nd / 2; i++) {
                double th = (3 * t + 1) * pow(10000.0, -2.0 * i / nd);
                double a = getf(x, i, h, t, 0), b = getf(x, i + nd / 2, h, t, 0);
                o[i] = a * cos(th) - b * sin(th);
                o[i + nd / 2] = a * sin(th) + b * cos(th);
            }
        }
    double e = nmse_vs(y, ref);
    CHECK(e < 1e-10, "rope %s: nmse %g", tag, e);
    free(ref);
}

/* nkv > 64 spans several key blocks; block_mask masks keys 64..127 of query 1 entirely */
static void check_flash_attn(const char *tag, int nkv, int block_mask) {
    const int D = 40, nq = 3, H = 4, Hk = 2;
    pyg_tensor *q = tensor(PYG_TYPE_F32, D, nq, H, 1), *k = tensor(PYG_TYPE_F32, D, nkv, Hk, 1);
    pyg_tensor *v = tensor(PYG_TYPE_F32, D, nkv, Hk, 1), *m = tensor(PYG_TYPE_F32, nkv, nq, 1, 1);
    fill(q, 1), fill(k, 1), fill(v, 1), fill(m, 1);
    ((float *)m->data)[5] = -INFINITY;
    if (block_mask)
        for (int j = 64; j < 128 && j < nkv; j++) ((float *)m->data)[nkv + j] = -INFINITY;
    pyg_tensor *y = node(PYG_OP_FLASH_ATTN_EXT, PYG_TYPE_F32, D, H, nq, 1, q, k, v, m);
    setpf(y, 0, 0.3f), setpf(y, 1, 0.0f), setpf(y, 2, 0.0f);
    const char *msg;
    CHECK(run1(y, &msg) == 0, "flash_attn %s: %s", tag, msg);
    double *ref = malloc(sizeof(double) * (size_t)(D * H * nq));
    for (int iq = 0; iq < nq; iq++)
        for (int h = 0; h < H; h++) {
            double s[256], mx = -INFINITY, sum = 0;
            for (int j = 0; j < nkv; j++) {
                double d = 0;
                for (int i = 0; i < D; i++) d += (double)getf(q, i, iq, h, 0) * getf(k, i, j, h / 2, 0);
                s[j] = 0.3 * d + getf(m, j, iq, 0, 0);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < nkv; j++) sum += (s[j] = exp(s[j] - mx));
            for (int i = 0; i < D; i++) {
                double o = 0;
                for (int j = 0; j < nkv; j++) o += s[j] / sum * getf(v, i, j, h / 2, 0);
                ref[(iq * H + h) * D + i] = o;
            }
        }
    double e = nmse_vs(y, ref);
    CHECK(e < 1e-10, "flash_attn %s n_kv=%d: nmse %g", tag, nkv, e);
    free(ref);
}

static void check_add_broadcast_nc(const char *tag) {
    pyg_tensor *as = tensor(PYG_TYPE_F32, 9, 33, 2, 1); /* viewed as [33, 9, 2] */
    fill(as, 1);
    pyg_tensor *a = transposed(as);
    pyg_tensor *b = tensor(PYG_TYPE_F32, 33, 1, 2, 1);
    fill(b, 1);
    pyg_tensor *y = node(PYG_OP_ADD, PYG_TYPE_F32, 33, 9, 2, 1, a, b, NULL, NULL);
    const char *msg;
    CHECK(run1(y, &msg) == 0, "add %s: %s", tag, msg);
    double ref[33 * 9 * 2];
    for (int i2 = 0; i2 < 2; i2++)
        for (int i1 = 0; i1 < 9; i1++)
            for (int i0 = 0; i0 < 33; i0++)
                ref[(i2 * 9 + i1) * 33 + i0] = (double)getf(a, i0, i1, i2, 0) + getf(b, i0, 0, i2, 0);
    double e = nmse_vs(y, ref);
    CHECK(e == 0, "add %s: nmse %g", tag, e);
}

static void check_ops(const char *tag) {
    check_mul_mat(70, 37, 29, 1, 1, 0, tag);   /* GEMM path, ragged tiles */
    check_mul_mat(70, 37, 29, 1, 1, 1, tag);   /* GEMM with transposed activations */
    check_mul_mat(33, 7, 3, 4, 2, 0, tag);     /* vec_dot path, broadcast over dim 2 */
    check_mul_mat(300, 65, 18, 2, 1, 0, tag);  /* two K chunks in the GEMM */
    check_mul_mat(64, 8, 100, 1, 1, 0, tag);   /* GEMM split over src1 rows (few src0 rows) */
    check_mul_mat(48, 21, 20, 8, 2, 1, tag);   /* GEMM split over batches, broadcast, transposed */
    check_soft_max(tag);
    check_rope_neox(tag);
    check_flash_attn(tag, 19, 0);
    check_flash_attn(tag, 200, 1);
    check_add_broadcast_nc(tag);
}

/* ---------------------------------------------------------------- ABI checks */

static void check_abi(void) {
    const char *msg;
    CHECK(api->struct_size == sizeof(pyg_plugin_api), "struct_size %llu", (unsigned long long)api->struct_size);
    CHECK(api->abi_major == PYG_ABI_MAJOR && strcmp(api->name, "cpu") == 0, "version/name");
    CHECK(take(api->plugin_init(), &msg) == 0, "plugin_init: %s", msg);
    CHECK(api->device_count() == 1, "device_count");
    CHECK(take(api->device_get(1, &dev), NULL) == PYG_ERR_INVALID_ARGUMENT, "device_get(1) must fail");
    CHECK(take(api->device_get(0, &dev), &msg) == 0, "device_get: %s", msg);
    pyg_device_props p = { .struct_size = sizeof p };
    CHECK(take(api->device_get_props(dev, &p), &msg) == 0, "props: %s", msg);
    printf("device: %s — %s, caps 0x%llx, memory %.1f GiB\n", p.name, p.description,
           (unsigned long long)p.caps, p.memory_total / 1073741824.0);
    CHECK(p.type == PYG_DEVICE_CPU && p.alignment == 64 && (p.caps & PYG_CAP_HOST_MEMORY) &&
              !(p.caps & PYG_CAP_ASYNC_COMPUTE), "props content");

    CHECK(take(api->device_set_option(dev, "colour", "blue"), &msg) == PYG_ERR_UNSUPPORTED, "unknown key");
    CHECK(take(api->device_set_option(dev, "n_threads", "0"), &msg) == PYG_ERR_INVALID_ARGUMENT, "n_threads 0");
    CHECK(take(api->device_set_option(dev, "n_threads", "2x"), &msg) == PYG_ERR_INVALID_ARGUMENT, "n_threads 2x");
    CHECK(take(api->device_set_option(dev, "kernels", "fast"), &msg) == PYG_ERR_INVALID_ARGUMENT, "kernels fast");

    pyg_buffer *b = NULL;
    CHECK(take(api->buffer_alloc(dev, 1ull << 62, 0, &b), &msg) == PYG_ERR_OUT_OF_MEMORY, "absurd alloc");
    CHECK(take(api->buffer_alloc(dev, ~0ull, 0, &b), &msg) == PYG_ERR_OUT_OF_MEMORY, "alloc ~0");
    CHECK(take(api->buffer_alloc(dev, 1000, 0, &b), &msg) == 0, "alloc 1000: %s", msg);
    pyg_buffer_info bi = { .struct_size = sizeof bi };
    CHECK(take(api->buffer_get_info(b, &bi), NULL) == 0 && bi.base == bi.host_ptr && bi.size == 1000 &&
              ((uintptr_t)bi.base & 63) == 0, "buffer info");
    char data[1000];
    memset(data, 7, sizeof data);
    CHECK(take(api->buffer_write(b, 0, data, 1000), NULL) == 0, "write");
    CHECK(take(api->buffer_write(b, 1, data, 1000), &msg) == PYG_ERR_INVALID_ARGUMENT, "write past end");
    CHECK(take(api->buffer_read(b, ~0ull, data, 2), &msg) == PYG_ERR_INVALID_ARGUMENT, "read offset overflow");
    CHECK(take(api->buffer_fill(b, 10, 3, 20), NULL) == 0, "fill");
    CHECK(take(api->buffer_read(b, 0, data, 1000), NULL) == 0 && data[9] == 7 && data[10] == 3 && data[29] == 3 &&
              data[30] == 7, "read back");
    api->buffer_free(b);

    api->error_destroy(NULL), api->stream_destroy(NULL), api->event_destroy(NULL);
    api->buffer_free(NULL), api->graph_plan_destroy(NULL);
    pyg_event *ev = NULL;
    pyg_stream *st = NULL;
    int32_t done = 0;
    CHECK(take(api->event_create(dev, &ev), NULL) == 0 && take(api->stream_create(dev, 0, &st), NULL) == 0, "ev/st");
    CHECK(take(api->event_record(ev, st), NULL) == 0 && take(api->event_query(ev, &done), NULL) == 0 && done,
          "event");
    CHECK(take(api->stream_wait_event(st, ev), NULL) == 0 && take(api->stream_synchronize(st), NULL) == 0, "wait");
    api->event_destroy(ev), api->stream_destroy(st);

    /* an unsupported node names itself */
    pyg_tensor *x = tensor(PYG_TYPE_I8, 4, 1, 1, 1);
    pyg_tensor *y = node(PYG_OP_SILU, PYG_TYPE_I8, 4, 1, 1, 1, x, NULL, NULL, NULL);
    snprintf(y->name, sizeof y->name, "my_silu");
    CHECK(run1(y, &msg) == PYG_ERR_UNSUPPORTED && strstr(msg, "my_silu") && strstr(msg, "silu"), "unsupported: %s",
          msg);
    /* an index out of range is reported, not a crash */
    pyg_tensor *src = tensor(PYG_TYPE_F32, 8, 4, 1, 1);
    fill(src, 1);
    pyg_tensor *idx = tensor(PYG_TYPE_I32, 2, 1, 1, 1);
    ((int32_t *)idx->data)[0] = 1, ((int32_t *)idx->data)[1] = 4;
    pyg_tensor *gr = node(PYG_OP_GET_ROWS, PYG_TYPE_F32, 8, 2, 1, 1, src, idx, NULL, NULL);
    CHECK(run1(gr, &msg) == PYG_ERR_INVALID_ARGUMENT, "get_rows out of range: %s", msg);
}

/* many short computes with changing thread counts: a lost wake-up or barrier bug hangs here */
static void check_pool_stress(void) {
    pyg_tensor *a = tensor(PYG_TYPE_F32, 16, 4, 1, 1), *b = tensor(PYG_TYPE_F32, 16, 1, 1, 1);
    fill(a, 1), fill(b, 1);
    pyg_tensor *y = node(PYG_OP_ADD, PYG_TYPE_F32, 16, 4, 1, 1, a, b, NULL, NULL);
    pyg_tensor *z = node(PYG_OP_SILU, PYG_TYPE_F32, 16, 4, 1, 1, y, NULL, NULL, NULL);
    pyg_tensor *nodes[2] = { y, z };
    pyg_graph g = { sizeof g, 2, 0, nodes, 7 };
    pyg_graph_plan *plan = NULL;
    const char *msg;
    CHECK(take(api->graph_plan_create(dev, &g, &plan), &msg) == 0, "stress plan: %s", msg);
    int bad = 0;
    for (int i = 0; i < 20000 && plan; i++) {
        if (i % 5000 == 0) {
            char n[8];
            snprintf(n, sizeof n, "%d", 1 + (i / 5000) % 3);
            take(api->device_set_option(dev, "n_threads", n), NULL);
        }
        bad += take(api->graph_plan_compute(plan, NULL), NULL) != 0;
    }
    CHECK(bad == 0, "stress: %d failed computes", bad);
    float v = ((float *)z->data)[17], x = ((float *)a->data)[17] + ((float *)b->data)[1];
    CHECK(fabsf(v - x / (1.0f + expf(-x))) < 1e-5f, "stress result %g", v);
    api->graph_plan_destroy(plan);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "pyggml/plugins/libpyggml-cpu.so";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 2;
    }
    pyg_plugin_get_api_fn get = (pyg_plugin_get_api_fn)dlsym(h, PYG_PLUGIN_ENTRY_NAME);
    if (!get) {
        fprintf(stderr, "no %s in %s\n", PYG_PLUGIN_ENTRY_NAME, path);
        return 2;
    }
    pyg_host_info host = { sizeof host, PYG_ABI_MAJOR, PYG_ABI_MINOR, 0, NULL, NULL };
    api = get(&host);
    check_abi();
    const char *kernels[] = { "auto", "reference" };
    const char *threads[] = { "1", "2", "3" };
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < 3; t++) {
            char tag[64];
            snprintf(tag, sizeof tag, "[%s, %s threads]", kernels[k], threads[t]);
            take(api->device_set_option(dev, "kernels", kernels[k]), NULL);
            take(api->device_set_option(dev, "n_threads", threads[t]), NULL);
            check_ops(tag);
        }
    check_pool_stress();
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
