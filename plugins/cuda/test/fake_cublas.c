/* plugins/cuda/test/fake_cublas.c — a stand-in libcublas for gemm_blas_host (no GPU): the entry
 * points gemm_blas.cu resolves, with the GEMM computed on host memory in double (f32, f16 and bf16
 * operands). Built twice by tests/test_cuda_blas.py:
 *   -DFAKE_LT  -> libcublasLt.so.13 (one marker function)
 *   otherwise  -> libcublas.so.13, linked against that libcublasLt.so.13 (a DT_NEEDED that resolves
 *                 only when the loader finds libcublasLt: gemm_blas.cu opens it from the same
 *                 directory first). */
#include <stddef.h>

#ifdef FAKE_LT
int fake_lt_marker(void) { return 0; }
#else
int fake_lt_marker(void);

static int g_handle, g_pointer_mode, g_calls;
static void *g_workspace;
static size_t g_workspace_size;

int fake_gemm_calls(void) { return g_calls; }
int cublasCreate_v2(void **h) { *h = &g_handle; return fake_lt_marker(); }
int cublasDestroy_v2(void *h) { (void)h; return 0; }
int cublasSetStream_v2(void *h, void *s) { (void)h; (void)s; g_workspace = NULL; return 0; }
int cublasSetWorkspace_v2(void *h, void *w, size_t n) { (void)h; g_workspace = w; g_workspace_size = n; return 0; }
int cublasSetMathMode(void *h, int m) { (void)h; return m == 0 ? 0 : 7; }
int cublasSetPointerMode_v2(void *h, int m) { (void)h; g_pointer_mode = m; return 0; }
int cublasGetProperty(int t, int *v) { *v = t == 0 ? 13 : t == 1 ? 0 : 99; return 0; }
const char *cublasGetStatusString(int s) { return s == 7 ? "FAKE_INVALID_VALUE" : "FAKE_ERROR"; }

static double elem(const void *p, int type, long long i) {
    if (type == 0) return ((const float *)p)[i];
    const unsigned h = ((const unsigned short *)p)[i];
    union { unsigned u; float f; } v;
    if (type == 14) { v.u = h << 16; return v.f; }
    /* f16 */
    const unsigned sign = (h >> 15) & 1, e = (h >> 10) & 31, man = h & 1023;
    double x = e == 0 ? man / 1024.0 / 16384.0 : e == 31 ? (man ? 0.0 / 0.0 : 1.0 / 0.0) : (1.0 + man / 1024.0) * (double)(1 << e) / 32768.0;
    return sign ? -x : x;
}

int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
                               int at, int lda, long long sa, const void *B, int bt, int ldb, long long sb,
                               const void *beta, void *C, int ct, int ldc, long long sc, int batch, int compute,
                               int algo) {
    (void)h; (void)algo;
    if (!g_workspace || g_workspace_size < (32u << 20)) return 14; /* workspace must be set after the stream */
    /* what gemm_blas.cu may ask for: TN, A and B of one type, f32 C; TF32 compute for f32 inputs,
     * f32 compute for f16 (2) / bf16 (14) */
    if (ta != 1 || tb != 0 || at != bt || ct != 0) return 15;
    if (!((at == 0 && compute == 77) || ((at == 2 || at == 14) && compute == 68))) return 15;
    if (m < 1 || n < 1 || k < 1 || batch < 1 || lda < k || ldb < k || ldc < m) return 7;
    /* pointer mode: device pointers are host memory here, so both modes read the same way */
    const float al = *(const float *)alpha, be = *(const float *)beta;
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float *c = (float *)C + b * sc + i + (long long)j * ldc;
                double s = 0;
                for (int q = 0; q < k; q++)
                    s += elem(A, at, b * sa + (long long)i * lda + q) * elem(B, bt, b * sb + (long long)j * ldb + q);
                *c = be == 0.0f ? al * (float)s : al * (float)s + be * *c;
            }
    g_calls++;
    return 0;
}
#endif
