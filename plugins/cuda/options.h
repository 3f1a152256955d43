/* plugins/cuda/options.h — the device options of the CUDA plugin (and of its HIP and MUSA builds):
 * device_set_option(dev, key, value), parsed by one table (options.cu, through pyggml/options.h).
 * README.md lists them with what was measured for each.
 *
 * A plan takes a copy of its device's options when it is created and uses that copy for its whole
 * life (scratch sizes and kernel choices agree between create and compute); supports_op reads the
 * device's. The code that chooses kernels reads them through cuda_opts(): the copy that the entry
 * point being served on this thread bound with cuda_opts_scope (graph.cu binds it around
 * supports_op, plan creation and compute), or the defaults outside any entry. */
#ifndef PYG_CUDA_OPTIONS_H
#define PYG_CUDA_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

struct cuda_options {
    int64_t graphs;        /* 1: plans capture their launches into a device graph (2nd compute) and replay it */
    int64_t fuse;          /* 1: plan-time fusion and grouping of adjacent nodes (graph.cu) */
    int64_t mmvq;          /* int8 mat-vec for quantized weights: MMVQ_OFF / _AUTO (not q6_K) / _ALL */
    int64_t mma;           /* 1: our tensor-core GEMMs where cuBLAS does not take a node */
    int64_t fa_mma;        /* prefill flash attention on tensor cores: 0 off, 1 two-pass WMMA, 2 mma.sync online softmax */
    int64_t blas;          /* 1: prefill GEMMs through cuBLAS where it opens */
    int64_t blas_min_n;    /* smallest N (src1 columns) sent to the cuBLAS/converted-operand GEMM */
    int64_t blas_chunk_mb; /* converted weights per chunk, MiB */
    int64_t write_sync;    /* 1: buffer_write waits for the default stream its pageable copy runs on
                              (R13); 0 brings back the pre-fix race, for the hardware probe only */
    int64_t repack;        /* 1: quantized mul_mat weights read from repacked copies (repack.cu): the
                              decode mat-vec of mmv_rp.cuh and the int8 GEMM; 0: ggml's blocks */
    int64_t mmq;           /* 1: mul_mat with N > 8 on the int8 GEMM (mmq.cuh) over repacked weights;
                              0: dequantize + cuBLAS (gemm_blas.cu) */
    int64_t pdl;           /* 1: decode kernels launched with programmatic dependent launch (sm_90) */
    int64_t mmv_nb;        /* groups of 8 rows per repacked mat-vec block: 1 or 2; 0: the default (1) */
    int64_t fa_decode;     /* 1: decode flash attention on the split-kv kernel of flash_attn_dec.cu;
                              0: the older split + merge kernels of flash_attn.cu */
    int64_t fa_sparse;     /* 1: that kernel's compacted-index path where n_kv <= 4096 */
    int64_t qkv_rope;      /* 1 (with fuse, repack): a decode layer's q/k/v, ropes and cache writes as one launch */
    int64_t fa_split_cells; /* the decode attention's fewest kv cells per split (16..4096) */
    int64_t glu_spread;    /* the gate/up/swiglu launch's most warps per K slice (1, 2, 4, 8: mvr_glu_gw) */
};

#define MMVQ_OFF 0
#define MMVQ_AUTO 1
#define MMVQ_ALL 2

extern const cuda_options cuda_options_defaults;

/* Parse one option into `o` (the table in options.cu): a pyg_status, with the reason in msg. */
int32_t cuda_options_set(cuda_options *o, const char *key, const char *value, char *msg, size_t msglen);

/* The options in force on this thread (see above); never NULL. */
const cuda_options *cuda_opts(void);

/* Binds `o` as this thread's options for the scope's lifetime (nests; restores the previous). */
struct cuda_opts_scope {
    explicit cuda_opts_scope(const cuda_options *o);
    ~cuda_opts_scope();
    cuda_opts_scope(const cuda_opts_scope &) = delete;
    cuda_opts_scope &operator=(const cuda_opts_scope &) = delete;
  private:
    const cuda_options *prev_;
};

#endif
