/* pyggml/ops.h — the operations a graph node can hold, and the layout of their parameters.
 *
 * Conventions (ggml's): ne[0] is the fastest-varying dimension. `src[i]` are the operands;
 * the node itself is the destination. Broadcasting rule for binary ops: src[1] repeats over
 * src[0] (src[0].ne[i] % src[1].ne[i] == 0 for every i). Parameters live in the node's
 * `op_params` words; floats are stored bit-for-bit in an int32 word (read them with
 * pyg_op_param_f32). Append-only: an op id never changes meaning.
 */
#ifndef PYGGML_OPS_H
#define PYGGML_OPS_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pyg_op {
    PYG_OP_NONE = 0,      /* a leaf: input, weight or state; no computation */

    /* views: the node aliases src[0]'s memory (view_src/view_offs say where); plugins run nothing */
    PYG_OP_VIEW = 1,      /* arbitrary ne/nb/offset window into src[0] */
    PYG_OP_RESHAPE = 2,   /* same bytes, new ne; src[0] contiguous */
    PYG_OP_PERMUTE = 3,   /* params[0..3] = axis each source dim goes to */
    PYG_OP_TRANSPOSE = 4, /* swaps dims 0 and 1 */

    /* copies */
    PYG_OP_CPY = 5,       /* writes src[0] converted to src[1]'s type into src[1]; node aliases src[1];
                             shapes may differ when element counts match: elements pair up in flat
                             order (dim 0 fastest) */
    PYG_OP_CONT = 6,      /* contiguous copy of src[0], same type (or the node's type: converting copy) */

    /* elementwise */
    PYG_OP_ADD = 7,       /* src0 + src1 (broadcast) */
    PYG_OP_MUL = 8,       /* src0 * src1 (broadcast) */
    PYG_OP_SCALE = 9,     /* src0 * p.f[0] + p.f[1] */
    PYG_OP_SILU = 10,     /* x * sigmoid(x) */
    PYG_OP_GELU = 11,     /* tanh approximation: 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) */
    PYG_OP_SWIGLU = 12,   /* silu(a) * b; with src[1]: a = src0, b = src1; without: a, b = first
                             and second half of src0's rows (params[0] = 1 swaps the halves) */

    /* row-wise */
    PYG_OP_RMS_NORM = 13, /* x / sqrt(mean(x^2) + eps) over ne[0]; params f[0] = eps */
    PYG_OP_NORM = 14,     /* (x - mean) / sqrt(var + eps) over ne[0]; params f[0] = eps */
    PYG_OP_SOFT_MAX = 15, /* softmax(x*scale + mask) over ne[0]; src[1] = mask (optional, f32 or f16,
                             ne[0] equal, ne[1] >= rows, broadcast over dims 2, 3);
                             params f[0] = scale, f[1] = max_bias (ALiBi; 0 = off) */
    PYG_OP_ROPE = 16,     /* rotary embedding; src[0] = x [head_dim, n_head, n_tokens, 1],
                             src[1] = positions (i32, n_tokens), src[2] = freq factors (optional);
                             params: i[0] n_dims, i[1] mode (0 normal: adjacent pairs;
                             2 neox: pairs (i, i + n_dims/2)), i[2] n_ctx_orig,
                             f[3] freq_base, f[4] freq_scale, f[5] ext_factor,
                             f[6] attn_factor, f[7] beta_fast, f[8] beta_slow */
    PYG_OP_ARGMAX = 17,   /* index of the largest element of each row (i32, first one on ties);
                             dst [ne1, ne2, ne3, 1] */

    /* matrix */
    PYG_OP_MUL_MAT = 18,  /* dst[m, n] = sum_k src0[k, m] * src1[k, n]; src0 = weights
                             [K, M, b2, b3] any type, src1 = activations [K, N, B2, B3] f32,
                             dst f32 [M, N, B2, B3]; src0 broadcasts over dims 2, 3:
                             src1 batch i uses src0 batch i / (B_i / b_i) */
    PYG_OP_GET_ROWS = 19, /* dst[:, i] = src0[:, src1[i]] converted to f32; src1 i32 [n, b2];
                             src0 [ne0, rows, b2] any type; dst [ne0, n, b2]: batch j of src1
                             indexes batch j of src0 */
    PYG_OP_SET_ROWS = 20, /* src0[:, src2[i]] = src1[:, i] converted to src0's type; src2 i32 or i64;
                             node aliases src0 (in place); src1 [ne0, n, b2, b3] writes batch (j, k)
                             of src0; src2 [n] or [n, b2] (batch j uses row j % ne1 of src2) */
    PYG_OP_FLASH_ATTN_EXT = 21, /* src0 = q [D, n_q, H, B] f32, src1 = k [D, n_kv, H_kv, B],
                             src2 = v [Dv, n_kv, H_kv, B] (f32 or f16), src3 = mask [n_kv, >= n_q, 1|H, 1|B]
                             (f16 or f32, optional); dst f32 [Dv, H, n_q, B] (heads before tokens);
                             H % H_kv == 0 (grouped-query: q head h reads kv head
                             h / (H / H_kv)); mask dims 2, 3 repeat (index % ne); params f[0] scale, f[1] max_bias,
                             f[2] logit_softcap (0 = off) */

    PYG_OP_COUNT          /* one past the last op; grows as ops are appended */
} pyg_op;


/* RoPE modes (op_params[1]). */
#define PYG_ROPE_NORMAL 0
#define PYG_ROPE_NEOX 2

/* Op name for messages and traces ("unknown" outside the enum). */
static inline const char *pyg_op_name(int32_t op) {
    static const char *const names[] = {
        "none", "view", "reshape", "permute", "transpose", "cpy", "cont", "add", "mul", "scale",
        "silu", "gelu", "swiglu", "rms_norm", "norm", "soft_max", "rope", "argmax", "mul_mat",
        "get_rows", "set_rows", "flash_attn_ext",
    };
    return (op >= 0 && op < (int32_t)(sizeof names / sizeof names[0])) ? names[op] : "unknown";
}

/* True for ops whose node only aliases memory (no kernel runs). */
static inline int pyg_op_is_view(int32_t op) {
    return op == PYG_OP_VIEW || op == PYG_OP_RESHAPE || op == PYG_OP_PERMUTE || op == PYG_OP_TRANSPOSE;
}

static inline float pyg_op_param_f32(const int32_t *params, int i) {
    float f;
    memcpy(&f, &params[i], sizeof f);
    return f;
}

static inline void pyg_op_param_set_f32(int32_t *params, int i, float f) {
    memcpy(&params[i], &f, sizeof f);
}

#ifdef __cplusplus
}
#endif
#endif /* PYGGML_OPS_H */
