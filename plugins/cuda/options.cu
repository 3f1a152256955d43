/* plugins/cuda/options.cu — the CUDA plugin's option table and the per-thread binding (options.h).
 * Host code only; the test harness test/gemm_blas_host.cu compiles it too. */
#include "options.h"
#include "pyggml/options.h"

const cuda_options cuda_options_defaults = {
    /* .graphs = */ 1,
    /* .fuse = */ 1,
    /* .mmvq = */ MMVQ_AUTO,
    /* .mma = */ 1,
    /* .fa_mma = */ 2,
    /* .blas = */ 1,
    /* .blas_min_n = */ 32,
    /* .blas_chunk_mb = */ 128,
    /* .write_sync = */ 1,
    /* .repack = */ 1,
    /* .mmq = */ 0,
    /* .pdl = */ 1,
    /* .mmv_nb = */ 0,
    /* .fa_decode = */ 1,
    /* .fa_sparse = */ 0,
    /* .qkv_rope = */ 1,
    /* .fa_split_cells = */ 32,
    /* .glu_spread = */ 4,
};

static const char *const k_mmvq_words[] = { "off", "auto", "all", NULL };

static const pyg_option_def k_options[] = {
    PYG_OPTION_BOOL(cuda_options, graphs, "capture plans into device graphs and replay them (default 1)"),
    PYG_OPTION_BOOL(cuda_options, fuse, "plan-time fusion and grouping of adjacent nodes (default 1)"),
    PYG_OPTION_CHOICE(cuda_options, mmvq, k_mmvq_words,
                      "int8 mat-vec for quantized weights: off (float), auto (not q6_K; default), all"),
    PYG_OPTION_BOOL(cuda_options, mma, "our tensor-core GEMMs where cuBLAS does not take a node (default 1)"),
    PYG_OPTION_INT(cuda_options, fa_mma, 0, 2, "prefill flash attention on tensor cores: 2 mma.sync with an online softmax (default; sm_80+, f16 or no mask, else 1 runs), 1 two-pass WMMA, 0 off (the FFMA kernel)"),
    PYG_OPTION_BOOL(cuda_options, blas, "prefill GEMMs through cuBLAS where it opens (default 1)"),
    PYG_OPTION_INT(cuda_options, blas_min_n, 1, INT32_MAX, "smallest N sent to the cuBLAS GEMM path (default 32)"),
    PYG_OPTION_INT(cuda_options, blas_chunk_mb, 1, 1 << 16, "converted weights per chunk, MiB (default 128)"),
    PYG_OPTION_BOOL(cuda_options, write_sync, "buffer_write complete for every queue (default 1; 0: the old race)"),
    PYG_OPTION_BOOL(cuda_options, repack, "quantized mul_mat weights read from repacked copies (default 1; 0: ggml's blocks)"),
    PYG_OPTION_BOOL(cuda_options, mmq, "mul_mat with N > 8 on the int8 GEMM over repacked weights (default 0: dequantize + cuBLAS, which measured 1.5-2.3x faster on the H200 at d007684)"),
    PYG_OPTION_BOOL(cuda_options, pdl, "decode kernels (repacked mat-vecs, add+norm, decode attention) with programmatic dependent launch, sm_90 (default 1)"),
    PYG_OPTION_INT(cuda_options, mmv_nb, 0, 2, "groups of 8 rows per repacked mat-vec block (default 0: 1)"),
    PYG_OPTION_BOOL(cuda_options, fa_decode, "decode flash attention on the split-kv kernel with the merge folded in (default 1; 0: the older split + merge kernels)"),
    PYG_OPTION_BOOL(cuda_options, fa_sparse, "that kernel's compacted-index path where n_kv <= 4096 (default 0)"),
    PYG_OPTION_BOOL(cuda_options, qkv_rope, "a decode layer's q/k/v mat-vecs, q/k ropes and K/V cache writes as one launch (default 1; needs fuse and repack)"),
    PYG_OPTION_INT(cuda_options, glu_spread, 1, 8, "the gate/up/swiglu launch's 8 row groups spread over up to this many warps per K slice (2, 4 or 8 while the block stays within 512 threads), their loads in flight at once (default 4: H200 tg128 1b q4_0 1674 t/s with 4, 1675 with 8, 1502 with 1; 1b q4_K 1576 / 1447 / 1323; 7b q4_0 538 / 526 / 531; 1: each warp loads the 8 in turn)"),
    PYG_OPTION_INT(cuda_options, fa_split_cells, 16, 4096, "the decode attention's fewest kv cells per split (default 32; 64 measured 3% slower at depth 0 on the H200): fewer cells, more splits at short contexts"),
};

int32_t cuda_options_set(cuda_options *o, const char *key, const char *value, char *msg, size_t msglen) {
    return pyg_option_set(k_options, PYG_OPTION_COUNT(k_options), o, key, value, msg, msglen);
}

static thread_local const cuda_options *t_bound;

const cuda_options *cuda_opts(void) { return t_bound ? t_bound : &cuda_options_defaults; }

cuda_opts_scope::cuda_opts_scope(const cuda_options *o) : prev_(t_bound) { t_bound = o; }
cuda_opts_scope::~cuda_opts_scope() { t_bound = prev_; }
