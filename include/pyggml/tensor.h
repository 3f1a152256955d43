/* pyggml/tensor.h — the tensor and graph descriptors that cross the plugin ABI.
 *
 * Ownership: the host (pyggml's scheduler) allocates and owns every pyg_tensor and pyg_graph.
 * A plugin reads them during the call that receives them and, for a graph plan, for as long as
 * the plan lives: the host keeps every descriptor of the plan alive and unchanged, every field
 * including `buffer`, `offset` and `data`, until graph_plan_destroy; between computes only the
 * bytes inside the buffers change (so a plugin may derive anything from the descriptors once,
 * addresses included: CUDA graphs). A plugin never writes a descriptor.
 *
 * Memory layout: ne[i] elements along dim i, nb[i] bytes between neighbours along dim i
 * (nb[0] = type_size for plain types; for block types ne[0] % block_size == 0 and nb[0] is the
 * block's byte size, nb[1] the row stride). Unused trailing dims have ne = 1.
 */
#ifndef PYGGML_TENSOR_H
#define PYGGML_TENSOR_H

#include <stdint.h>
#include <stddef.h>
#include "pyggml/types.h"
#include "pyggml/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PYG_MAX_DIMS 4
#define PYG_MAX_SRC 6
#define PYG_MAX_OP_PARAMS 16  /* 32-bit words */
#define PYG_MAX_NAME 64

typedef struct pyg_buffer pyg_buffer; /* opaque, plugin-owned; see plugin.h */

/* Tensor flags (bit mask). */
#define PYG_TENSOR_FLAG_INPUT  (1u << 0) /* written by the host before each compute */
#define PYG_TENSOR_FLAG_OUTPUT (1u << 1) /* a node whose bytes are read after the graph has run (by the
                                          * host, or by another split): a plugin that fuses nodes must
                                          * still write it; never reused by the allocator. The scheduler
                                          * sets it on graph-plan nodes (for a view another split reads:
                                          * on the node it views) */
#define PYG_TENSOR_FLAG_WEIGHT (1u << 2) /* constant data uploaded once */
#define PYG_TENSOR_FLAG_STATE  (1u << 3) /* persistent, written by the graph (KV cache) */

typedef struct pyg_tensor {
    int32_t type;                      /* pyg_type (required) */
    int32_t op;                        /* pyg_op; PYG_OP_NONE for leaves */
    int64_t ne[PYG_MAX_DIMS];          /* elements per dim, ne[0] fastest; >= 1 */
    uint64_t nb[PYG_MAX_DIMS];         /* byte strides, in any order (views may
                                          transpose: nb[0] need not be the element size) */
    int32_t op_params[PYG_MAX_OP_PARAMS]; /* per-op parameters, layout in ops.h; unused words 0 */
    uint32_t flags;                    /* PYG_TENSOR_FLAG_*: hints about the data's role, never
                                          needed to compute the node */
    int32_t reserved0;                 /* zero */
    struct pyg_tensor *src[PYG_MAX_SRC]; /* operands (optional per op; NULL = absent); host-owned */
    struct pyg_tensor *view_src;       /* for views and in-place ops: the tensor whose memory
                                          this one aliases (NULL otherwise); host-owned */
    uint64_t view_offs;                /* byte offset into view_src's memory */
    pyg_buffer *buffer;                /* buffer holding the data (NULL before allocation);
                                          owned by the plugin that allocated it, borrowed here */
    uint64_t offset;                   /* byte offset of the data inside `buffer` */
    void *data;                        /* device address of the data (buffer base + offset) for
                                          plugins whose buffers have one (CPU, CUDA); NULL where a
                                          buffer has no address space (Vulkan: use buffer+offset) */
    char name[PYG_MAX_NAME];           /* NUL-terminated, may be empty; for messages and traces */
    void *reserved[4];                 /* zero; room for 1.x additions */
} pyg_tensor;

/* A graph: nodes in an order where every operand precedes its users.
 * `id` identifies the graph's topology and addresses: two calls with the same id describe
 * the same nodes at the same addresses, so a plugin may reuse what it derived from them. */
typedef struct pyg_graph {
    uint64_t struct_size;              /* sizeof(pyg_graph) as the host knows it */
    int32_t n_nodes;
    int32_t reserved0;
    pyg_tensor *const *nodes;          /* n_nodes pointers, host-owned, may include leaves
                                          (PYG_OP_NONE) and view nodes (pyg_op_is_view): plugins
                                          run neither */
    uint64_t id;                       /* host-assigned, unique per distinct graph in a process */
} pyg_graph;

/* ---- helpers (static inline: a plugin that uses them exports nothing) ---- */

static inline int64_t pyg_tensor_nelements(const pyg_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

static inline int64_t pyg_tensor_nrows(const pyg_tensor *t) {
    return t->ne[1] * t->ne[2] * t->ne[3];
}

/* Bytes spanned by the tensor's data: the offset of its last element (block) plus that element's
 * size, honouring strides in any order (a transposed view, whose nb[0] is the row stride, spans
 * less than ne[0] * nb[0]). 0 for an unknown type. */
static inline uint64_t pyg_tensor_nbytes(const pyg_tensor *t) {
    const pyg_type_traits *tr = pyg_type_get_traits(t->type);
    if (!tr) return 0;
    uint64_t n = (uint64_t)tr->type_size + (uint64_t)(t->ne[0] / tr->block_size - 1) * t->nb[0];
    for (int i = 1; i < PYG_MAX_DIMS; i++) n += (uint64_t)(t->ne[i] - 1) * t->nb[i];
    return n;
}

/* Rows laid out back to back, no gaps, dims in order. */
static inline int pyg_tensor_is_contiguous(const pyg_tensor *t) {
    const pyg_type_traits *tr = pyg_type_get_traits(t->type);
    if (!tr || t->nb[0] != (uint64_t)tr->type_size) return 0;
    uint64_t expect = (uint64_t)(t->ne[0] / tr->block_size) * t->nb[0];
    for (int i = 1; i < PYG_MAX_DIMS; i++) {
        if (t->ne[i] != 1 && t->nb[i] != expect) return 0;
        expect *= (uint64_t)t->ne[i];
    }
    return 1;
}

/* Each row (dim 0) is contiguous; rows may be strided. */
static inline int pyg_tensor_rows_contiguous(const pyg_tensor *t) {
    const pyg_type_traits *tr = pyg_type_get_traits(t->type);
    return tr && t->nb[0] == (uint64_t)tr->type_size;
}

#ifdef __cplusplus
}
#endif
#endif /* PYGGML_TENSOR_H */
