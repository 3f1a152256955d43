/* plugins/vulkan/vk_supports.c — which nodes the Vulkan plugin runs (supports_op): ops, types and
 * layouts its shaders take; every operand within one storage-buffer binding. */
#include "vk_internal.h"

static int is_plain(int32_t t) { return t == PYG_TYPE_F32 || t == PYG_TYPE_F16 || t == PYG_TYPE_BF16; }
static int is_weight_type(int32_t t) {
    return is_plain(t) || t == PYG_TYPE_Q4_0 || t == PYG_TYPE_Q4_1 || t == PYG_TYPE_Q8_0 || t == PYG_TYPE_Q4_K || t == PYG_TYPE_Q6_K;
}

/* Every operand must fit one storage-buffer binding and 32-bit shader indexing. */
static int fits(const pyg_device *d, const pyg_tensor *t) {
    if (!t || !pyg_type_get_traits(t->type)) return 0;
    uint64_t n = pyg_tensor_nbytes(t) + d->props.limits.minStorageBufferOffsetAlignment + 4;
    if (n > d->max_range || n > 0xFFFFFFFFull) return 0;
    for (int i = 0; i < PYG_MAX_DIMS; i++)
        if (t->ne[i] < 1 || t->ne[i] > 0x7FFFFFFF || t->nb[i] > 0xFFFFFFFFull) return 0;
    return (uint64_t)pyg_tensor_nelements(t) < 0xFFFFFFFFull;
}

/* quantized rows are read block by block: rows must be contiguous */
static int weight_ok(const pyg_device *d, const pyg_tensor *t) {
    if (!fits(d, t) || !is_weight_type(t->type)) return 0;
    return is_plain(t->type) || pyg_tensor_rows_contiguous(t);
}

int vkp_same_shape(const pyg_tensor *a, const pyg_tensor *b) {
    for (int i = 0; i < PYG_MAX_DIMS; i++) if (a->ne[i] != b->ne[i]) return 0;
    return 1;
}

int32_t vkp_supports_op(pyg_device *d, const pyg_tensor *n) {
    if (n->op == PYG_OP_NONE || pyg_op_is_view(n->op)) return 1;
    const pyg_tensor *s0 = n->src[0], *s1 = n->src[1], *s2 = n->src[2], *s3 = n->src[3];
    if (!s0 || !fits(d, n)) return 0;
    for (int i = 0; i < 4; i++) if (n->src[i] && !fits(d, n->src[i])) return 0;
    switch (n->op) {
    case PYG_OP_ADD: case PYG_OP_MUL:
        if (!s1 || !is_plain(s0->type) || !is_plain(s1->type) || !is_plain(n->type) || !vkp_same_shape(n, s0)) return 0;
        for (int i = 0; i < 4; i++) if (s0->ne[i] % s1->ne[i]) return 0;
        return 1;
    case PYG_OP_SCALE: case PYG_OP_SILU: case PYG_OP_GELU:
        return is_plain(s0->type) && is_plain(n->type) && vkp_same_shape(n, s0);
    case PYG_OP_SWIGLU:
        if (!is_plain(s0->type) || !is_plain(n->type)) return 0;
        if (s1) return is_plain(s1->type) && vkp_same_shape(s0, s1) && vkp_same_shape(n, s0);
        return s0->ne[0] == 2 * n->ne[0] && s0->ne[1] == n->ne[1] && s0->ne[2] == n->ne[2] && s0->ne[3] == n->ne[3];
    case PYG_OP_CPY: case PYG_OP_CONT:
        if (n->op == PYG_OP_CPY && (!s1 || s1->type != n->type)) return 0;
        return is_plain(s0->type) && is_plain(n->type) && pyg_tensor_nelements(s0) == pyg_tensor_nelements(n);
    case PYG_OP_RMS_NORM: case PYG_OP_NORM:
        return is_plain(s0->type) && is_plain(n->type) && vkp_same_shape(n, s0);
    case PYG_OP_SOFT_MAX:
        if (!is_plain(s0->type) || !is_plain(n->type) || !vkp_same_shape(n, s0)) return 0;
        if (s1 && (!is_plain(s1->type) || s1->ne[0] != s0->ne[0] || s1->ne[1] < s0->ne[1] ||
                   s0->ne[2] % s1->ne[2] || s0->ne[3] % s1->ne[3])) return 0;
        return 1;
    case PYG_OP_ROPE: {
        int32_t n_dims = n->op_params[0], mode = n->op_params[1];
        if (mode != PYG_ROPE_NORMAL && mode != PYG_ROPE_NEOX) return 0;
        if (!is_plain(s0->type) || !is_plain(n->type) || !vkp_same_shape(n, s0)) return 0;
        if (n_dims <= 0 || n_dims % 2 || n_dims > s0->ne[0] || s0->ne[0] % 2) return 0;
        if (!s1 || s1->type != PYG_TYPE_I32 || s1->ne[0] < s0->ne[2]) return 0;
        if (s2 && (s2->type != PYG_TYPE_F32 || s2->ne[0] < n_dims / 2)) return 0;
        return 1;
    }
    case PYG_OP_ARGMAX:
        return is_plain(s0->type) && n->type == PYG_TYPE_I32 && n->ne[0] == s0->ne[1] &&
               n->ne[1] == s0->ne[2] && n->ne[2] == s0->ne[3];   /* dst [ne1, ne2, ne3, 1] */
    case PYG_OP_MUL_MAT:
        if (!s1 || !weight_ok(d, s0) || !is_plain(s1->type) || n->type != PYG_TYPE_F32) return 0;
        if (s0->ne[0] != s1->ne[0] || n->ne[0] != s0->ne[1] || n->ne[1] != s1->ne[1] ||
            n->ne[2] != s1->ne[2] || n->ne[3] != s1->ne[3]) return 0;
        return s1->ne[2] % s0->ne[2] == 0 && s1->ne[3] % s0->ne[3] == 0;
    case PYG_OP_GET_ROWS:
        if (!s1 || !weight_ok(d, s0) || s1->type != PYG_TYPE_I32 || !is_plain(n->type)) return 0;
        return n->ne[0] == s0->ne[0] && n->ne[1] == s1->ne[0] && n->ne[2] == s1->ne[1] && n->ne[3] == s1->ne[2] &&
               s0->ne[2] == s1->ne[1] && s0->ne[3] == s1->ne[2];
    case PYG_OP_SET_ROWS:
        if (!s1 || !s2 || !is_plain(n->type) || !is_plain(s1->type)) return 0;
        if (s2->type != PYG_TYPE_I32 && s2->type != PYG_TYPE_I64) return 0;
        if (s1->ne[0] != n->ne[0] || s1->ne[2] != n->ne[2] || s1->ne[3] != n->ne[3] || s2->ne[0] != s1->ne[1]) return 0;
        return s1->ne[2] % s2->ne[1] == 0 && s1->ne[3] % s2->ne[2] == 0;
    case PYG_OP_FLASH_ATTN_EXT:
        if (!s1 || !s2 || s0->type != PYG_TYPE_F32 || !is_plain(s1->type) || !is_plain(s2->type) || n->type != PYG_TYPE_F32) return 0;
        if (s0->ne[0] > 512 || s2->ne[0] > 512 || s1->ne[0] != s0->ne[0] || s1->ne[1] != s2->ne[1]) return 0;
        if (s0->ne[2] % s1->ne[2] || s0->ne[2] % s2->ne[2]) return 0;
        if (n->ne[0] != s2->ne[0] || n->ne[1] != s0->ne[2] || n->ne[2] != s0->ne[1] || n->ne[3] != s0->ne[3]) return 0;
        if (s3 && (!is_plain(s3->type) || s3->ne[0] != s1->ne[1] || s3->ne[1] < s0->ne[1] ||
                   s0->ne[2] % s3->ne[2] || s0->ne[3] % s3->ne[3])) return 0;
        return 1;
    default:
        return 0;
    }
}
