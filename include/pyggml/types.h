/* pyggml/types.h — element types and their block layout.
 *
 * Type ids are the GGUF/ggml type ids, so a tensor read from a GGUF file keeps its id
 * unchanged. Ids that pyggml does not know yet are absent from the traits table (their
 * block size reads 0) and every entry point must reject them with PYG_ERR_UNSUPPORTED.
 * Append-only: ids never change meaning.
 */
#ifndef PYGGML_TYPES_H
#define PYGGML_TYPES_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pyg_type {
    PYG_TYPE_F32  = 0,
    PYG_TYPE_F16  = 1,
    PYG_TYPE_Q4_0 = 2,
    PYG_TYPE_Q4_1 = 3,
    PYG_TYPE_Q5_0 = 6,
    PYG_TYPE_Q5_1 = 7,
    PYG_TYPE_Q8_0 = 8,
    PYG_TYPE_Q8_1 = 9,
    PYG_TYPE_Q2_K = 10,
    PYG_TYPE_Q3_K = 11,
    PYG_TYPE_Q4_K = 12,
    PYG_TYPE_Q5_K = 13,
    PYG_TYPE_Q6_K = 14,
    PYG_TYPE_Q8_K = 15,
    PYG_TYPE_I8   = 24,
    PYG_TYPE_I16  = 25,
    PYG_TYPE_I32  = 26,
    PYG_TYPE_I64  = 27,
    PYG_TYPE_F64  = 28,
    PYG_TYPE_BF16 = 30,
    PYG_TYPE_COUNT = 40 /* one past the largest id the traits table can hold */
} pyg_type;

/* Block layout of one type: `block_size` elements are stored in `type_size` bytes.
 * Plain types have block_size 1. A row of ne0 elements takes ne0/block_size*type_size
 * bytes and ne0 must be a multiple of block_size. */
typedef struct pyg_type_traits {
    const char *name;    /* lower-case name as in GGUF tools ("q4_K"); NULL = unknown id */
    int32_t block_size;  /* elements per block; 0 = unknown id */
    int32_t type_size;   /* bytes per block */
    int32_t is_quantized;
} pyg_type_traits;

/* K-quant super-block size (elements). */
#define PYG_QK_K 256
/* Block size of the 32-element quant families (q4_0, q8_0 ...). */
#define PYG_QK32 32

/* Traits by type id; NULL for ids outside the table or unknown to it. Header-only (a switch, so
 * C and C++ compile it alike): a plugin that uses it exports nothing and links nothing. */
static inline const pyg_type_traits *pyg_type_get_traits(int32_t type) {
    static const pyg_type_traits f32 = { "f32", 1, 4, 0 }, f16 = { "f16", 1, 2, 0 },
        q4_0 = { "q4_0", 32, 2 + 16, 1 }, q4_1 = { "q4_1", 32, 2 + 2 + 16, 1 },
        q5_0 = { "q5_0", 32, 2 + 4 + 16, 1 }, q5_1 = { "q5_1", 32, 2 + 2 + 4 + 16, 1 },
        q8_0 = { "q8_0", 32, 2 + 32, 1 }, q8_1 = { "q8_1", 32, 2 + 2 + 32, 1 },
        q2_k = { "q2_K", 256, 256 / 16 + 256 / 4 + 2 + 2, 1 },
        q3_k = { "q3_K", 256, 256 / 8 + 256 / 4 + 12 + 2, 1 },
        q4_k = { "q4_K", 256, 2 + 2 + 12 + 256 / 2, 1 },
        q5_k = { "q5_K", 256, 2 + 2 + 12 + 256 / 8 + 256 / 2, 1 },
        q6_k = { "q6_K", 256, 256 / 2 + 256 / 4 + 256 / 16 + 2, 1 },
        q8_k = { "q8_K", 256, 4 + 256 + 256 / 16 * 2, 1 },
        i8 = { "i8", 1, 1, 0 }, i16 = { "i16", 1, 2, 0 }, i32 = { "i32", 1, 4, 0 },
        i64 = { "i64", 1, 8, 0 }, f64 = { "f64", 1, 8, 0 }, bf16 = { "bf16", 1, 2, 0 };
    switch (type) {
    case PYG_TYPE_F32: return &f32;
    case PYG_TYPE_F16: return &f16;
    case PYG_TYPE_Q4_0: return &q4_0;
    case PYG_TYPE_Q4_1: return &q4_1;
    case PYG_TYPE_Q5_0: return &q5_0;
    case PYG_TYPE_Q5_1: return &q5_1;
    case PYG_TYPE_Q8_0: return &q8_0;
    case PYG_TYPE_Q8_1: return &q8_1;
    case PYG_TYPE_Q2_K: return &q2_k;
    case PYG_TYPE_Q3_K: return &q3_k;
    case PYG_TYPE_Q4_K: return &q4_k;
    case PYG_TYPE_Q5_K: return &q5_k;
    case PYG_TYPE_Q6_K: return &q6_k;
    case PYG_TYPE_Q8_K: return &q8_k;
    case PYG_TYPE_I8: return &i8;
    case PYG_TYPE_I16: return &i16;
    case PYG_TYPE_I32: return &i32;
    case PYG_TYPE_I64: return &i64;
    case PYG_TYPE_F64: return &f64;
    case PYG_TYPE_BF16: return &bf16;
    default: return NULL;
    }
}

/* Bytes taken by ne0 elements of `type` laid out contiguously (ne0 % block_size == 0). */
static inline size_t pyg_type_row_size(int32_t type, int64_t ne0) {
    const pyg_type_traits *t = pyg_type_get_traits(type);
    return t ? (size_t)(ne0 / t->block_size) * (size_t)t->type_size : 0;
}

#ifdef __cplusplus
}
#endif
#endif /* PYGGML_TYPES_H */
