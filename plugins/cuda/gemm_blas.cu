/* plugins/cuda/gemm_blas.cu — mul_mat's prefill GEMM (N >= option blas_min_n, default 32) through
 * cuBLAS, opened with dlopen at first use: the plugin has no link-time dependency on cuBLAS (it
 * still exports one symbol and loads where cuBLAS is absent) and needs no cuBLAS header to build —
 * the few prototypes and enum values used are declared below.
 *
 * Per node: the activations (f32, any strides) are converted into plan scratch, the weights are
 * used where they lie when cuBLAS can read them (f16/bf16/f32 with contiguous rows) or converted /
 * dequantized into plan scratch in chunks of rows, then one strided-batched GEMM per chunk (and per
 * dim-3 batch) computes dst = W^T X with f32 accumulation, written straight into dst (or staged and
 * copied when dst's strides don't suit cuBLAS). Precision per weight type:
 *   f16, q4_0, q8_0, q4_K, q6_K: f16 x f16. f16 keeps 3 more mantissa bits than bf16 (NMSE about
 *       1e-7 instead of 3e-6) and is what the weights hold or dequantize to exactly enough; the
 *       activations' range is kept by a power-of-two scale computed on the device from max|x|
 *       (x / s fills f16's range, cuBLAS multiplies the result by s through a device-side alpha), so
 *       large activations never overflow and tiny ones keep their precision. A dequantized weight beyond f16's range (|w| > 65504: a block
 *       scale near the f16 maximum) would overflow; real models are orders of magnitude below.
 *   bf16: bf16 x bf16 (the weights as they are; activations rounded to bf16).
 *   f32: TF32 tensor cores on the f32 data in place (no conversion); f32 weights whose rows are not
 *       contiguous are converted to bf16, with bf16 activations.
 * Broadcast over dims 2, 3 (ops.h: src1 batch i uses src0 batch i / (B_i / b_i)): the r2 src1 batches
 * that share one weight batch are folded into the GEMM's N when their columns follow each other in
 * memory, else issued as r2 calls; dims 3 are a host loop.
 *
 * Scratch (sized by gemm_blas_scratch_bytes, allocated once per plan): the cuBLAS workspace (set
 * with cublasSetWorkspace, so no call allocates and a capture into a CUDA graph is safe), alpha/beta,
 * the max|x| partials, the converted activations, one chunk of converted weights, staged dst.
 * One cuBLAS handle per device, created at the first GEMM on it (a plan's first compute is never
 * captured), bound to the plan's stream and workspace before each node under a per-device mutex
 * (plans on different streams may run from different host threads).
 *
 * Not used (mul_mat.cu falls back to mul_mat_mma.cu / the FFMA GEMM) when cuBLAS cannot be opened or
 * its handle cannot be created, with the device option blas=0, and in the HIP/MUSA builds. The path
 * in use and the reason are logged once. The option blas_lib=/path/libcublas.so.N picks the library
 * (plugin-wide: it is opened once per process, so it must be set before the first GEMM plan).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <atomic>
#include <mutex>
#include "gemm_blas.h"
#include "plugin_internal.h"

#ifndef PYG_GPU_HAS_CUBLAS

/* No vendor BLAS is opened in these builds (hipBLAS/muBLAS would need their own glue). */
static std::once_flag g_logged;

size_t gemm_blas_scratch_bytes(const pyg_tensor *n) {
    (void)n;
    std::call_once(g_logged, [] {
        pyg_cuda_log(PYG_LOG_INFO, "mul_mat: no vendor BLAS in the %s build; GEMMs use the built-in kernels",
                     PYG_GPU_RUNTIME);
    });
    return 0;
}

int gemm_blas_launch(const pyg_tensor *n, op_ctx *c) {
    (void)n;
    (void)c;
    return GEMM_BLAS_DECLINED;
}

int32_t gemm_blas_set_library(const char *path, char *msg, size_t msglen) {
    (void)path;
    snprintf(msg, msglen, "option blas_lib: no vendor BLAS in the %s build", PYG_GPU_RUNTIME);
    return PYG_ERR_UNSUPPORTED;
}

#else /* PYG_GPU_HAS_CUBLAS */

#include <dlfcn.h>
#include <glob.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the slice of cuBLAS used here
 * Values from cublas_api.h / library_types.h (unchanged since CUDA 11). */
typedef int blas_status; /* cublasStatus_t: 0 = success */
typedef struct blas_context_opaque *blas_handle; /* cublasHandle_t */
enum {
    BLAS_OP_N = 0, BLAS_OP_T = 1,                           /* cublasOperation_t */
    BLAS_R_32F = 0, BLAS_R_16F = 2, BLAS_R_16BF = 14,       /* cudaDataType */
    BLAS_COMPUTE_32F = 68, BLAS_COMPUTE_32F_FAST_TF32 = 77, /* cublasComputeType_t */
    BLAS_GEMM_DEFAULT = -1,                                 /* cublasGemmAlgo_t */
    BLAS_POINTER_MODE_HOST = 0, BLAS_POINTER_MODE_DEVICE = 1,
    BLAS_DEFAULT_MATH = 0,                                  /* cublasMath_t */
    BLAS_PROP_MAJOR = 0, BLAS_PROP_MINOR = 1, BLAS_PROP_PATCH = 2, /* libraryPropertyType */
};

struct blas_api {
    blas_status (*create)(blas_handle *);                        /* cublasCreate_v2 */
    blas_status (*destroy)(blas_handle);                         /* cublasDestroy_v2 */
    blas_status (*set_stream)(blas_handle, gpuStream_t);         /* cublasSetStream_v2 */
    blas_status (*set_workspace)(blas_handle, void *, size_t);   /* cublasSetWorkspace_v2 */
    blas_status (*set_math_mode)(blas_handle, int);              /* cublasSetMathMode */
    blas_status (*set_pointer_mode)(blas_handle, int);           /* cublasSetPointerMode_v2 */
    blas_status (*gemm)(blas_handle, int transa, int transb, int m, int n, int k, const void *alpha,
                        const void *A, int Atype, int lda, long long strideA, const void *B, int Btype, int ldb,
                        long long strideB, const void *beta, void *C, int Ctype, int ldc, long long strideC,
                        int batch, int compute, int algo); /* cublasGemmStridedBatchedEx */
    blas_status (*get_property)(int, int *);                     /* cublasGetProperty (optional) */
    const char *(*status_string)(blas_status);                   /* cublasGetStatusString (optional) */
};

#define GB_WORKSPACE ((size_t)32 << 20)   /* cuBLAS's recommendation for Hopper */
#define GB_MIN_CHUNK_ROWS 1024            /* never fewer rows per chunk (GEMM efficiency) */
#define GB_MAX_PARTS 1024                 /* blocks of the max|x| pass */
#define GB_THREADS 256
#define GB_MAX_DEV 64

enum { GB_F16 = 1, GB_BF16 = 2, GB_TF32 = 3 };

/* ---------------------------------------------------------------- settings and the library */

/* The settings are device options (options.h): blas, blas_min_n, blas_chunk_mb, read through
 * cuda_opts() for the plan being created or run. The library is process-wide. */
static int blas_disabled(void) {
    if (cuda_opts()->blas) return 0;
    static std::once_flag logged;
    std::call_once(logged, [] {
        pyg_cuda_log(PYG_LOG_INFO, "mul_mat: cuBLAS off (option blas=0); GEMMs use the built-in kernels");
    });
    return 1;
}
static int64_t blas_min_n(void) { return cuda_opts()->blas_min_n; }
static size_t blas_chunk_bytes(void) { return (size_t)cuda_opts()->blas_chunk_mb << 20; }

static std::mutex g_lib_mu;
static std::atomic<int> g_lib_state(0); /* 0 not tried, 1 open, -1 unavailable */
static blas_api g_blas;
static char g_lib_path[512];            /* option blas_lib; "" = search (under g_lib_mu) */

int32_t gemm_blas_set_library(const char *path, char *msg, size_t msglen) {
    std::lock_guard<std::mutex> lk(g_lib_mu);
    if (g_lib_state.load(std::memory_order_relaxed) != 0) {
        snprintf(msg, msglen, "option blas_lib: cuBLAS was already looked for (at the first GEMM plan); "
                              "set blas_lib before creating one");
        return PYG_ERR_INVALID_ARGUMENT;
    }
    if (strlen(path) >= sizeof g_lib_path) {
        snprintf(msg, msglen, "option blas_lib: path longer than %zu bytes", sizeof g_lib_path - 1);
        return PYG_ERR_INVALID_ARGUMENT;
    }
    snprintf(g_lib_path, sizeof g_lib_path, "%s", path);
    return PYG_OK;
}

static int is_file(const char *p) { return access(p, R_OK) == 0; }

/* dlopen `dir`/`name` (or `name` through the loader's search path when dir is NULL). In a directory,
 * libcublasLt from the same directory is opened first, so libcublas's dependency on it resolves even
 * where that directory is not on the loader path. */
static void *open_one(const char *dir, const char *name, char *err, size_t errlen) {
    char path[1024];
    if (dir) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (!is_file(path)) return NULL;
        if (strncmp(name, "libcublas", 9) == 0) {
            char lt[1024];
            snprintf(lt, sizeof lt, "%s/libcublasLt%s", dir, name + 9);
            if (is_file(lt)) dlopen(lt, RTLD_NOW | RTLD_LOCAL); /* kept open: libcublas needs it */
        }
    } else {
        snprintf(path, sizeof path, "%s", name);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        const char *msg = e ? e : path;
        size_t l = strlen(msg);
        if (l >= errlen) l = errlen - 1;
        memcpy(err, msg, l);
        err[l] = 0;
        pyg_cuda_log(PYG_LOG_DEBUG, "cuBLAS: %s", err);
    }
    return h;
}

/* Directories where CUDA toolkits keep libcublas, newest toolkit first. */
static int cuda_lib_dirs(char dirs[][512], int max) {
    static const char *targets[] = { "targets/x86_64-linux/lib", "targets/sbsa-linux/lib" }; /* x86-64, arm64 */
    const char *roots[8];
    int nr = 0;
    const char *h = getenv("CUDA_HOME"), *p = getenv("CUDA_PATH");
    if (h && *h) roots[nr++] = h;
    if (p && *p) roots[nr++] = p;
    roots[nr++] = "/usr/local/cuda";
    int n = 0;
    for (int i = 0; i < nr && n + 3 <= max; i++) {
        snprintf(dirs[n++], 512, "%s/lib64", roots[i]);
        for (int t = 0; t < 2; t++) snprintf(dirs[n++], 512, "%s/%s", roots[i], targets[t]);
    }
    glob_t g;
    if (glob("/usr/local/cuda-*", 0, NULL, &g) == 0) {
        for (size_t i = g.gl_pathc; i-- > 0 && n + 3 <= max;) { /* glob sorts ascending: newest last */
            for (int t = 0; t < 2; t++) snprintf(dirs[n++], 512, "%s/%s", g.gl_pathv[i], targets[t]);
            snprintf(dirs[n++], 512, "%s/lib64", g.gl_pathv[i]);
        }
        globfree(&g);
    }
    return n;
}

#define GB_SYM(field, name, required)                                                             \
    do {                                                                                          \
        *(void **)&g_blas.field = dlsym(lib, name);                                               \
        if (required && !g_blas.field) {                                                          \
            snprintf(missing, sizeof missing, "%s", name);                                        \
        }                                                                                         \
    } while (0)

static int lib_open(void) {
    char err[sizeof g_lib_path + 32] = "";
    void *lib = NULL;
    const char *explicit_path = g_lib_path;
    if (explicit_path && *explicit_path) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s", explicit_path);
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = 0;
            lib = open_one(dir, slash + 1, err, sizeof err);
            if (!lib && !err[0]) snprintf(err, sizeof err, "%s: no such file", explicit_path);
        } else {
            lib = open_one(NULL, dir, err, sizeof err);
        }
    } else {
        static const char *names[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so" };
        char dirs[32][512];
        const int nd = cuda_lib_dirs(dirs, 32);
        for (int i = 0; i < 3 && !lib; i++) {
            lib = open_one(NULL, names[i], err, sizeof err);
            for (int d = 0; d < nd && !lib; d++) lib = open_one(dirs[d], names[i], err, sizeof err);
        }
    }
    if (!lib) {
        pyg_cuda_log(PYG_LOG_INFO,
                     "mul_mat: cuBLAS not found (libcublas.so.13/.12 on the loader path, in $CUDA_HOME and "
                     "/usr/local/cuda*; last error: %s); GEMMs use the built-in tensor-core kernel",
                     err[0] ? err : "none found");
        return 0;
    }
    char missing[128] = "";
    GB_SYM(create, "cublasCreate_v2", 1);
    GB_SYM(destroy, "cublasDestroy_v2", 1);
    GB_SYM(set_stream, "cublasSetStream_v2", 1);
    GB_SYM(set_workspace, "cublasSetWorkspace_v2", 1);
    GB_SYM(set_math_mode, "cublasSetMathMode", 1);
    GB_SYM(set_pointer_mode, "cublasSetPointerMode_v2", 1);
    GB_SYM(gemm, "cublasGemmStridedBatchedEx", 1);
    GB_SYM(get_property, "cublasGetProperty", 0);
    GB_SYM(status_string, "cublasGetStatusString", 0);
    Dl_info info;
    const char *where = (g_blas.create && dladdr((void *)g_blas.create, &info) && info.dli_fname) ? info.dli_fname
                                                                                                 : "libcublas";
    if (missing[0]) {
        pyg_cuda_log(PYG_LOG_WARN, "mul_mat: %s lacks %s (cuBLAS older than 11?); GEMMs use the built-in kernels",
                     where, missing);
        return 0;
    }
    int v[3] = { 0, 0, 0 };
    if (g_blas.get_property)
        for (int i = 0; i < 3; i++) g_blas.get_property(BLAS_PROP_MAJOR + i, &v[i]);
    pyg_cuda_log(PYG_LOG_INFO, "mul_mat: GEMMs with N >= %lld through cuBLAS %d.%d.%d (%s)", (long long)blas_min_n(),
                 v[0], v[1], v[2], where);
    return 1;
}

static int lib_ready(void) {
    const int s = g_lib_state.load(std::memory_order_acquire);
    if (s) return s > 0;
    std::lock_guard<std::mutex> lk(g_lib_mu);
    if (!g_lib_state.load(std::memory_order_relaxed))
        g_lib_state.store(lib_open() ? 1 : -1, std::memory_order_release);
    return g_lib_state.load(std::memory_order_relaxed) > 0;
}

static const char *status_str(blas_status s) {
    const char *m = g_blas.status_string ? g_blas.status_string(s) : NULL;
    return m ? m : "cuBLAS error";
}

/* One handle per device: created on first use with the device current, never destroyed (the
 * plugin lives until process exit, and the runtime may be torn down before static destructors). */
struct blas_dev {
    std::mutex mu;        /* held from binding the stream to the last GEMM of a node */
    blas_handle h;
    int state;            /* 0 not created, 1 ok, -1 creation failed (built-in kernels from then on) */
};
static blas_dev g_dev[GB_MAX_DEV];

static blas_handle dev_handle_locked(int device) {
    blas_dev &d = g_dev[device];
    if (d.state == 0) {
        blas_handle h = NULL;
        blas_status st = g_blas.create(&h);
        if (st == 0) st = g_blas.set_math_mode(h, BLAS_DEFAULT_MATH);
        if (st != 0) {
            if (h) g_blas.destroy(h);
            gpuGetLastError();
            d.state = -1;
            pyg_cuda_log(PYG_LOG_WARN, "mul_mat: cuBLAS handle for device %d failed: %s (status %d); GEMMs use the "
                         "built-in kernels on it", device, status_str(st), st);
        } else {
            d.h = h;
            d.state = 1;
        }
    }
    return d.state == 1 ? d.h : NULL;
}

/* ---------------------------------------------------------------- per-node plan */

enum { GB_BLAS = 1, GB_MMA = 2 }; /* who runs the GEMM: cuBLAS, or our WMMA kernel (mul_mat_mma.cu) */

struct gb_plan {
    int backend;               /* GB_BLAS, GB_MMA */
    int mode;                  /* GB_F16, GB_BF16, GB_TF32 (cuBLAS only) */
    int a_conv, b_conv, c_stage, merge;
    int blas_type;             /* BLAS_R_* of the GEMM's A and B */
    size_t es;                 /* bytes per element of A and B as the GEMM reads them */
    int64_t M, N, K, b2, b3, B2, B3, r2, r3;
    int64_t Kp;                /* row pitch of converted operands: K rounded up to 32, zero-filled */
    int64_t mc;                /* weight rows per converted chunk (M when in place) */
    int64_t lda, sa2;          /* A in place: elements between rows, between dim-2 batches */
    int64_t ldb, sb2, sb3;     /* B (in place or converted), elements */
    int64_t ldc, sc2, sc3;     /* C (dst or staged), floats */
    size_t off_alpha, off_part, off_b, off_a, off_c, total;
};

static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }
static int fits_int(int64_t v) { return v >= 1 && v <= INT_MAX; }

/* cuBLAS can read t where it lies: elements of `es` bytes, dense rows, strides in whole elements,
 * a leading dimension >= min_ld that fits an int. */
static int in_place_ok(const pyg_tensor *t, size_t es, int64_t min_ld) {
    if (t->nb[0] != es) return 0;
    if (((uint64_t)(uintptr_t)t->data | t->nb[1] | t->nb[2] | t->nb[3]) % es) return 0;
    const int64_t ld = (int64_t)(t->nb[1] / es);
    return ld >= min_ld && fits_int(ld);
}

/* Our WMMA kernel reads 16-byte chunks: leading dimensions and batch strides in multiples of 8
 * elements, 16-byte aligned data, K a multiple of its 32-wide k step. */
static int mma_in_place_ok(const pyg_tensor *t, int64_t K) {
    return K % 32 == 0 && (((uint64_t)(uintptr_t)t->data | t->nb[1] | t->nb[2] | t->nb[3]) & 15) == 0;
}

static int gb_plan_make(const pyg_tensor *n, gb_plan *p, int backend) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    memset(p, 0, sizeof *p);
    p->backend = backend;
    if (!backend || (backend == GB_BLAS && blas_disabled())) return 0;
    p->M = a->ne[1]; p->K = a->ne[0]; p->N = b->ne[1];
    p->b2 = a->ne[2]; p->b3 = a->ne[3]; p->B2 = b->ne[2]; p->B3 = b->ne[3];
    if (p->N < blas_min_n() || p->b2 < 1 || p->b3 < 1) return 0;
    p->r2 = p->B2 / p->b2;
    p->r3 = p->B3 / p->b3;
    if (!fits_int(p->M) || !fits_int(p->K) || !fits_int(p->N * p->r2) || !fits_int(p->b2)) return 0;
    const int t = a->type;
    if (t == PYG_TYPE_F32) p->mode = backend == GB_BLAS && in_place_ok(a, 4, p->K) ? GB_TF32 : GB_BF16;
    else if (t == PYG_TYPE_BF16) p->mode = GB_BF16;
    else if (t == PYG_TYPE_F16 || is_supported_quant(t)) p->mode = GB_F16;
    else return 0;
    p->es = p->mode == GB_TF32 ? 4 : 2;
    p->blas_type = p->mode == GB_TF32 ? BLAS_R_32F : p->mode == GB_F16 ? BLAS_R_16F : BLAS_R_16BF;

    /* weights */
    const int a_native = p->mode == GB_TF32 || (p->mode == GB_F16 && t == PYG_TYPE_F16) ||
                         (p->mode == GB_BF16 && t == PYG_TYPE_BF16);
    p->Kp = (p->K + 31) / 32 * 32;
    p->a_conv = !(a_native && in_place_ok(a, p->es, p->K) && (backend == GB_BLAS || mma_in_place_ok(a, p->K)));
    if (!p->a_conv) {
        p->lda = (int64_t)(a->nb[1] / p->es);
        p->sa2 = (int64_t)(a->nb[2] / p->es);
        p->mc = p->M;
    } else {
        if (is_supported_quant(t) && p->K % 32) return 0;
        const size_t row = (size_t)p->b2 * (size_t)p->Kp * 2;
        int64_t mc = (int64_t)(blas_chunk_bytes() / row);
        if (mc < GB_MIN_CHUNK_ROWS) mc = GB_MIN_CHUNK_ROWS;
        mc -= mc % 128;
        p->mc = mc < p->M ? mc : p->M;
    }
    /* activations: converted (f16/bf16) or, for TF32, read in place where cuBLAS can */
    p->b_conv = !(p->mode == GB_TF32 && in_place_ok(b, 4, p->K));
    if (p->b_conv) {
        p->ldb = p->Kp;
        p->sb2 = p->N * p->Kp;
        p->sb3 = p->B2 * p->sb2;
    } else {
        p->ldb = (int64_t)(b->nb[1] / 4);
        p->sb2 = (int64_t)(b->nb[2] / 4);
        p->sb3 = (int64_t)(b->nb[3] / 4);
    }
    /* dst: written in place or staged */
    p->c_stage = !in_place_ok(n, 4, p->M);
    if (p->c_stage) {
        p->ldc = p->M;
        p->sc2 = p->N * p->M;
        p->sc3 = p->B2 * p->sc2;
    } else {
        p->ldc = (int64_t)(n->nb[1] / 4);
        p->sc2 = (int64_t)(n->nb[2] / 4);
        p->sc3 = (int64_t)(n->nb[3] / 4);
    }
    p->merge = p->r2 > 1 && p->sb2 == p->N * p->ldb && p->sc2 == p->N * p->ldc;

    const size_t nb_b = p->b_conv ? (size_t)(p->B3 * p->B2 * p->N * p->Kp) * p->es : 0;
    const size_t nb_a = p->a_conv ? (size_t)(p->b2 * p->mc * p->Kp) * 2 : 0;
    const size_t nb_c = p->c_stage ? (size_t)(p->B3 * p->B2 * p->N * p->M) * 4 : 0;
    p->off_alpha = backend == GB_BLAS ? GB_WORKSPACE : 0;
    p->off_part = p->off_alpha + 256;
    p->off_b = p->off_part + al256(GB_MAX_PARTS * sizeof(float));
    p->off_a = p->off_b + al256(nb_b);
    p->off_c = p->off_a + al256(nb_a);
    p->total = p->off_c + al256(nb_c);
    return 1;
}

#include "gemm_blas_kernels.cuh"  /* the conversion kernels */

static unsigned gb_blocks(int64_t items, int64_t cap) {
    int64_t b = (items + GB_THREADS - 1) / GB_THREADS;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

/* ---------------------------------------------------------------- host entry points */

/* cuBLAS where it opens, else our WMMA kernel on the converted operands, else none (FFMA GEMM). */
static int gb_backend(void) {
    if (!blas_disabled() && lib_ready()) return GB_BLAS;
    return mma_gemm_available() ? GB_MMA : 0;
}

size_t gemm_blas_scratch_bytes(const pyg_tensor *n) {
    gb_plan p;
    if (!gb_plan_make(n, &p, GB_MMA)) return 0; /* shape checks first: cuBLAS opens at the first real GEMM */
    if (!gb_plan_make(n, &p, gb_backend())) return 0;
    return p.total;
}

#define GB_CALL(expr, what)                                                                         \
    do {                                                                                            \
        const blas_status st_ = (expr);                                                             \
        if (st_ != 0) {                                                                             \
            snprintf(c->err, c->errlen, "mul_mat: %s failed: %s (status %d)", what, status_str(st_), st_); \
            return PYG_ERR_DEVICE;                                                                  \
        }                                                                                           \
    } while (0)

static int gpu_convert_b(const pyg_tensor *b, const gb_plan &p, char *scr, op_ctx *c) {
    gb_bsrc s;
    s.p = (const char *)b->data;
    s.nb0 = (int64_t)b->nb[0]; s.nb1 = (int64_t)b->nb[1]; s.nb2 = (int64_t)b->nb[2]; s.nb3 = (int64_t)b->nb[3];
    s.K = p.K; s.N = p.N; s.B2 = p.B2; s.KG = p.Kp / 8;
    s.vec = b->nb[0] == 4 && (((uintptr_t)b->data | b->nb[1] | b->nb[2] | b->nb[3]) & 15) == 0;
    const int64_t groups = s.KG * p.N * p.B2 * p.B3;
    float *ab = (float *)(scr + p.off_alpha), *part = (float *)(scr + p.off_part);
    void *out = scr + p.off_b;
    const unsigned grid = gb_blocks(groups, 8192);
    if (p.mode == GB_F16) {
        const unsigned np = gb_blocks(groups, GB_MAX_PARTS);
        k_gb_absmax<<<np, GB_THREADS, 0, c->stream>>>(s, groups, part);
        k_gb_convert_b<GB_F16><<<grid, GB_THREADS, 0, c->stream>>>(s, groups, part, (int)np, ab, out);
    } else if (p.mode == GB_BF16) {
        k_gb_convert_b<GB_BF16><<<grid, GB_THREADS, 0, c->stream>>>(s, groups, part, 0, ab, out);
    } else {
        k_gb_convert_b<GB_TF32><<<grid, GB_THREADS, 0, c->stream>>>(s, groups, part, 0, ab, out);
    }
    return check_launch(c, "mul_mat (GEMM: convert activations)");
}

/* Rows [m0, m0 + mc) of every dim-2 batch of weight batch i03 -> scratch [b2][mc][Kp], the GEMM's type. */
static int gpu_convert_a(const pyg_tensor *a, const gb_plan &p, int64_t i03, int64_t m0, int64_t mc, uint16_t *out,
                         op_ctx *c) {
    const char *base = (const char *)a->data + i03 * (int64_t)a->nb[3] + m0 * (int64_t)a->nb[1];
    const int64_t nb1 = (int64_t)a->nb[1], nb2 = (int64_t)a->nb[2];
    if (is_supported_quant(a->type)) { /* K % 32 == 0: Kp == K */
        const int64_t units = p.b2 * mc * (p.K / gb_dq_elems_of(a->type));
        const unsigned grid = gb_blocks(units, 65535);
        switch (a->type) {
        case PYG_TYPE_Q4_0: k_gb_dequant_a<PYG_TYPE_Q4_0><<<grid, GB_THREADS, 0, c->stream>>>(base, nb1, nb2, mc, p.K, units, out); break;
        case PYG_TYPE_Q4_1: k_gb_dequant_a<PYG_TYPE_Q4_1><<<grid, GB_THREADS, 0, c->stream>>>(base, nb1, nb2, mc, p.K, units, out); break;
        case PYG_TYPE_Q8_0: k_gb_dequant_a<PYG_TYPE_Q8_0><<<grid, GB_THREADS, 0, c->stream>>>(base, nb1, nb2, mc, p.K, units, out); break;
        case PYG_TYPE_Q4_K: k_gb_dequant_a<PYG_TYPE_Q4_K><<<grid, GB_THREADS, 0, c->stream>>>(base, nb1, nb2, mc, p.K, units, out); break;
        default: k_gb_dequant_a<PYG_TYPE_Q6_K><<<grid, GB_THREADS, 0, c->stream>>>(base, nb1, nb2, mc, p.K, units, out); break;
        }
    } else {
        const int64_t count = p.b2 * mc * p.Kp;
        const unsigned grid = gb_blocks(count, 65535);
        if (p.mode == GB_F16)
            k_gb_convert_a<GB_F16><<<grid, GB_THREADS, 0, c->stream>>>(make_view(a), base, mc, p.Kp, count, out);
        else
            k_gb_convert_a<GB_BF16><<<grid, GB_THREADS, 0, c->stream>>>(make_view(a), base, mc, p.Kp, count, out);
    }
    return check_launch(c, "mul_mat (GEMM: convert weights)");
}

static int gpu_copy_c(const pyg_tensor *n, const gb_plan &p, char *scr, op_ctx *c) {
    const int64_t count = p.M * p.N * p.B2 * p.B3;
    k_gb_copy_c<<<gb_blocks(count, 65535), GB_THREADS, 0, c->stream>>>((const float *)(scr + p.off_c), make_view(n),
                                                                      count);
    return check_launch(c, "mul_mat (GEMM: copy result)");
}

/* The steps around the GEMM calls, each a kernel launch; plugins/cuda/test/gemm_blas_host.cu swaps in
 * host loops over the same element functions to run whole nodes on a machine without a GPU. */
struct gb_steps {
    int (*convert_b)(const pyg_tensor *b, const gb_plan &p, char *scr, op_ctx *c);
    int (*convert_a)(const pyg_tensor *a, const gb_plan &p, int64_t i03, int64_t m0, int64_t mc, uint16_t *out,
                     op_ctx *c);
    int (*copy_c)(const pyg_tensor *n, const gb_plan &p, char *scr, op_ctx *c);
};
static gb_steps g_steps = { gpu_convert_b, gpu_convert_a, gpu_copy_c };

/* The node's GEMMs (after the activations are converted): per weight batch i03 and chunk of rows,
 * per src1 dim-3 batch (and per broadcast sub-batch where they don't fold into N). */
static int run_gemms(const pyg_tensor *n, const gb_plan &p, char *scr, blas_handle h, op_ctx *c) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    static const float one = 1.0f, zero = 0.0f;
    const float *ab = (const float *)(scr + p.off_alpha);
    const void *alpha = p.mode == GB_F16 ? (const void *)ab : (const void *)&one;
    const void *beta = p.mode == GB_F16 ? (const void *)(ab + 1) : (const void *)&zero;
    const int compute = p.mode == GB_TF32 ? BLAS_COMPUTE_32F_FAST_TF32 : BLAS_COMPUTE_32F;
    const char *bbase = p.b_conv ? scr + p.off_b : (const char *)b->data;
    char *cbase = p.c_stage ? scr + p.off_c : (char *)n->data;
    const int64_t bs2 = p.sb2 * (int64_t)p.es, bs3 = p.sb3 * (int64_t)p.es; /* bytes */
    const int64_t cs2 = p.sc2 * 4, cs3 = p.sc3 * 4;
    const int64_t ncols = p.merge ? p.N * p.r2 : p.N;
    const int nsub = (p.r2 == 1 || p.merge) ? 1 : (int)p.r2;
    uint16_t *aconv = (uint16_t *)(scr + p.off_a);
    int st;
    for (int64_t i03 = 0; i03 < p.b3; i03++) {
        for (int64_t m0 = 0; m0 < p.M; m0 += p.mc) {
            const int64_t mc = p.mc < p.M - m0 ? p.mc : p.M - m0;
            const void *aptr;
            int64_t lda, sa;
            if (p.a_conv) {
                if ((st = g_steps.convert_a(a, p, i03, m0, mc, aconv, c)) != PYG_OK) return st;
                aptr = aconv;
                lda = p.Kp;
                sa = mc * p.Kp;
            } else {
                aptr = (const char *)a->data + i03 * (int64_t)a->nb[3] + m0 * (int64_t)a->nb[1];
                lda = p.lda;
                sa = p.sa2;
            }
            for (int64_t i13 = i03 * p.r3; i13 < (i03 + 1) * p.r3; i13++) {
                for (int j = 0; j < nsub; j++) {
                    const char *bp = bbase + i13 * bs3 + j * bs2;
                    char *cp = cbase + i13 * cs3 + j * cs2 + m0 * 4;
                    if (p.backend == GB_MMA) {
                        /* zero-padded to Kp on both sides (in place only when K % 32 == 0) */
                        st = mma_gemm_tn(p.mode == GB_F16, mc, ncols, p.Kp, aptr, lda, sa, bp, p.ldb, p.r2 * p.sb2,
                                         (float *)cp, p.ldc, p.r2 * p.sc2, (int)p.b2,
                                         p.mode == GB_F16 ? ab : NULL, c);
                        if (st != PYG_OK) return st;
                        continue;
                    }
                    GB_CALL(g_blas.gemm(h, BLAS_OP_T, BLAS_OP_N, (int)mc, (int)ncols, (int)p.K, alpha, aptr,
                                        p.blas_type, (int)lda, (long long)sa, bp, p.blas_type, (int)p.ldb,
                                        (long long)(p.r2 * p.sb2), beta, cp, BLAS_R_32F, (int)p.ldc,
                                        (long long)(p.r2 * p.sc2), (int)p.b2, compute, BLAS_GEMM_DEFAULT),
                            "cublasGemmStridedBatchedEx");
                }
            }
        }
    }
    if (p.c_stage && (st = g_steps.copy_c(n, p, scr, c)) != PYG_OK) return st;
    return PYG_OK;
}

int gemm_blas_launch(const pyg_tensor *n, op_ctx *c) {
    gb_plan p;
    if (!gb_plan_make(n, &p, GB_MMA)) return GEMM_BLAS_DECLINED; /* shape checks (no library opened) */
    int backend = gb_backend();
    if (backend == GB_BLAS && (c->device < 0 || c->device >= GB_MAX_DEV)) backend = mma_gemm_available() ? GB_MMA : 0;
    if (!gb_plan_make(n, &p, backend)) return GEMM_BLAS_DECLINED;
    if (!c->scratch || c->scratch_size < p.total) {
        /* planned for another backend (cuBLAS handle failed after the plan was sized): fit if we can */
        if (backend != GB_BLAS || !mma_gemm_available() || !gb_plan_make(n, &p, GB_MMA) || !c->scratch ||
            c->scratch_size < p.total)
            return GEMM_BLAS_DECLINED;
        backend = GB_MMA;
    }
    char *scr = (char *)c->scratch;
    int st;
    if (backend == GB_MMA) {
        if (p.b_conv && (st = g_steps.convert_b(n->src[1], p, scr, c)) != PYG_OK) return st;
        return run_gemms(n, p, scr, NULL, c);
    }
    blas_dev &d = g_dev[c->device];
    std::lock_guard<std::mutex> lk(d.mu);
    blas_handle h = dev_handle_locked(c->device);
    if (!h) { /* no handle on this device: our kernel, if the plan's scratch fits its layout */
        gb_plan q;
        if (!mma_gemm_available() || !gb_plan_make(n, &q, GB_MMA) || c->scratch_size < q.total) return GEMM_BLAS_DECLINED;
        if (q.b_conv && (st = g_steps.convert_b(n->src[1], q, scr, c)) != PYG_OK) return st;
        return run_gemms(n, q, scr, NULL, c);
    }
    if (p.b_conv && (st = g_steps.convert_b(n->src[1], p, scr, c)) != PYG_OK) return st;
    /* cublasSetStream resets the workspace to cuBLAS's own pool: set the workspace after it */
    GB_CALL(g_blas.set_stream(h, c->stream), "cublasSetStream");
    GB_CALL(g_blas.set_workspace(h, scr, GB_WORKSPACE), "cublasSetWorkspace");
    GB_CALL(g_blas.set_pointer_mode(h, p.mode == GB_F16 ? BLAS_POINTER_MODE_DEVICE : BLAS_POINTER_MODE_HOST),
            "cublasSetPointerMode");
    return run_gemms(n, p, scr, h, c);
}

#endif /* PYG_GPU_HAS_CUBLAS */
