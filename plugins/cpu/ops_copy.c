/* plugins/cpu/ops_copy.c — row access helpers and the data-moving ops: CPY, CONT, GET_ROWS,
 * SET_ROWS. Same-type copies move raw bytes (bit-exact); converting copies go through f32. */
#include "cpu_internal.h"

const float *cpu_load_row(const pyg_tensor *t, int64_t i1, int64_t i2, int64_t i3, float *buf) {
    const char *p = cpu_row_ptr(t, i1, i2, i3);
    const int64_t n = t->ne[0];
    const int64_t s = (int64_t)t->nb[0];
    switch (t->type) {
    case PYG_TYPE_F32:
        if (s == 4) return (const float *)p;
        for (int64_t i = 0; i < n; i++) memcpy(&buf[i], p + i * s, 4);
        return buf;
    case PYG_TYPE_F16:
        if (s == 2) {
            cpu_type_funcs_get(PYG_TYPE_F16)->to_f32(p, buf, n);
        } else {
            for (int64_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, p + i * s, 2);
                buf[i] = cpu_f16_to_f32(h);
            }
        }
        return buf;
    case PYG_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + i * s, 2);
            buf[i] = cpu_bf16_to_f32(h);
        }
        return buf;
    default: {
        const cpu_type_funcs *tf = cpu_type_funcs_get(t->type);
        if (tf && tf->to_f32) tf->to_f32(p, buf, n); /* block types: rows are contiguous (checked) */
        else memset(buf, 0, (size_t)n * sizeof(float));
        return buf;
    }
    }
}

void cpu_store_row(const pyg_tensor *t, int64_t i1, int64_t i2, int64_t i3, const float *src) {
    char *p = cpu_row_ptr(t, i1, i2, i3);
    const int64_t n = t->ne[0];
    const int64_t s = (int64_t)t->nb[0];
    switch (t->type) {
    case PYG_TYPE_F32:
        if (s == 4) {
            if ((const float *)p != src) memcpy(p, src, (size_t)n * 4);
        } else {
            for (int64_t i = 0; i < n; i++) memcpy(p + i * s, &src[i], 4);
        }
        return;
    case PYG_TYPE_F16:
        if (s == 2) {
            cpu_type_funcs_get(PYG_TYPE_F16)->from_f32(src, p, n);
        } else {
            for (int64_t i = 0; i < n; i++) {
                uint16_t h = cpu_f32_to_f16(src[i]);
                memcpy(p + i * s, &h, 2);
            }
        }
        return;
    case PYG_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = cpu_f32_to_bf16(src[i]);
            memcpy(p + i * s, &h, 2);
        }
        return;
    default: {
        const cpu_type_funcs *tf = cpu_type_funcs_get(t->type);
        if (tf && tf->from_f32) tf->from_f32(src, p, n);
        return;
    }
    }
}

/* flat row index r of t -> (i1, i2, i3) */
static inline void unflatten_row(const pyg_tensor *t, int64_t r, int64_t *i1, int64_t *i2, int64_t *i3) {
    *i1 = r % t->ne[1];
    r /= t->ne[1];
    *i2 = r % t->ne[2];
    *i3 = r / t->ne[2];
}

static inline const char *elem_ptr(const pyg_tensor *t, int64_t e) {
    int64_t i0 = e % t->ne[0];
    e /= t->ne[0];
    int64_t i1 = e % t->ne[1];
    e /= t->ne[1];
    int64_t i2 = e % t->ne[2];
    int64_t i3 = e / t->ne[2];
    return (const char *)t->data + i0 * (int64_t)t->nb[0] + i1 * (int64_t)t->nb[1] +
           i2 * (int64_t)t->nb[2] + i3 * (int64_t)t->nb[3];
}

static inline float load_elem(int32_t type, const char *p) {
    uint16_t h;
    float f;
    switch (type) {
    case PYG_TYPE_F16: memcpy(&h, p, 2); return cpu_f16_to_f32(h);
    case PYG_TYPE_BF16: memcpy(&h, p, 2); return cpu_bf16_to_f32(h);
    default: memcpy(&f, p, 4); return f;
    }
}

/* CPY (into src[1], which the node aliases) and CONT (into the node): dst = node. Elements pair
 * up in logical row-major order; shapes may differ when the element counts agree. */
void cpu_op_cpy(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *src = node->src[0];
    const pyg_tensor *dst = node;
    const pyg_type_traits *trs = pyg_type_get_traits(src->type), *trd = pyg_type_get_traits(dst->type);
    const int64_t ne0 = dst->ne[0], nrows = pyg_tensor_nrows(dst);
    const int same_shape = src->ne[0] == dst->ne[0] && src->ne[1] == dst->ne[1] &&
                           src->ne[2] == dst->ne[2] && src->ne[3] == dst->ne[3];
    const int same_ne0 = src->ne[0] == dst->ne[0];

    /* both contiguous and same type: one memcpy split across threads */
    if (src->type == dst->type && pyg_tensor_is_contiguous(src) && pyg_tensor_is_contiguous(dst)) {
        const int64_t nbytes = (int64_t)pyg_type_row_size(dst->type, ne0) * nrows;
        int64_t lo, hi;
        cpu_split((nbytes + 63) / 64, ctx->ith, ctx->nth, &lo, &hi);
        lo *= 64;
        hi = hi * 64 < nbytes ? hi * 64 : nbytes;
        if (hi > lo) memcpy((char *)dst->data + lo, (const char *)src->data + lo, (size_t)(hi - lo));
        return;
    }

    int64_t r0, r1;
    cpu_split(nrows, ctx->ith, ctx->nth, &r0, &r1);
    float *buf = (float *)ctx->wdata;
    float *buf2 = buf + ((ne0 + 15) & ~(int64_t)15);
    for (int64_t r = r0; r < r1; r++) {
        int64_t d1, d2, d3;
        unflatten_row(dst, r, &d1, &d2, &d3);
        char *dp = cpu_row_ptr(dst, d1, d2, d3);
        if (same_ne0) {
            int64_t s1, s2, s3;
            if (same_shape) {
                s1 = d1, s2 = d2, s3 = d3;
            } else {
                unflatten_row(src, r, &s1, &s2, &s3);
            }
            const char *sp = cpu_row_ptr(src, s1, s2, s3);
            if (src->type == dst->type) {
                if (trd->block_size > 1 || (src->nb[0] == dst->nb[0] && dst->nb[0] == (uint64_t)trd->type_size)) {
                    memcpy(dp, sp, pyg_type_row_size(dst->type, ne0));
                } else {
                    const int ts = trd->type_size;
                    for (int64_t i = 0; i < ne0; i++)
                        memcpy(dp + i * (int64_t)dst->nb[0], sp + i * (int64_t)src->nb[0], (size_t)ts);
                }
                continue;
            }
            cpu_store_row(dst, d1, d2, d3, cpu_load_row(src, s1, s2, s3, buf));
            continue;
        }
        /* shapes differ along dim 0: gather element by element (plain source types only) */
        const int64_t e0 = r * ne0;
        if (src->type == dst->type && trd->block_size == 1) {
            for (int64_t i = 0; i < ne0; i++)
                memcpy(dp + i * (int64_t)dst->nb[0], elem_ptr(src, e0 + i), (size_t)trs->type_size);
            continue;
        }
        for (int64_t i = 0; i < ne0; i++) buf2[i] = load_elem(src->type, elem_ptr(src, e0 + i));
        cpu_store_row(dst, d1, d2, d3, buf2);
    }
}

static inline int64_t load_index(const pyg_tensor *idx, int64_t i0, int64_t i1, int64_t i2) {
    const char *p = (const char *)idx->data + i0 * (int64_t)idx->nb[0] + i1 * (int64_t)idx->nb[1] +
                    i2 * (int64_t)idx->nb[2];
    if (idx->type == PYG_TYPE_I64) {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* dst[:, i, j, k] = src0[:, idx[i, j, k], j % src0.ne2, k % src0.ne3] */
void cpu_op_get_rows(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *src = node->src[0], *idx = node->src[1];
    const int64_t n = node->ne[1], n2 = node->ne[2], n3 = node->ne[3];
    const int64_t nrows = n * n2 * n3;
    int64_t r0, r1;
    cpu_split(nrows, ctx->ith, ctx->nth, &r0, &r1);
    float *buf = (float *)ctx->wdata;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i = r % n, j = (r / n) % n2, k = r / (n * n2);
        const int64_t row = load_index(idx, i, j, k);
        if (row < 0 || row >= src->ne[1]) {
            cpu_set_error(ctx, PYG_ERR_INVALID_ARGUMENT);
            memset(buf, 0, (size_t)node->ne[0] * sizeof(float));
            cpu_store_row(node, i, j, k, buf);
            continue;
        }
        const int64_t s2 = j % src->ne[2], s3 = k % src->ne[3];
        if (src->type == node->type && src->nb[0] == node->nb[0] &&
            node->nb[0] == (uint64_t)pyg_type_get_traits(node->type)->type_size) {
            memcpy(cpu_row_ptr(node, i, j, k), cpu_row_ptr(src, row, s2, s3),
                   pyg_type_row_size(node->type, node->ne[0]));
        } else {
            cpu_store_row(node, i, j, k, cpu_load_row(src, row, s2, s3, buf));
        }
    }
}

/* node (aliases src0)[:, idx[i, j % c.ne1, k % c.ne2], j, k] = src1[:, i, j, k] */
void cpu_op_set_rows(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *src = node->src[1], *idx = node->src[2];
    const int64_t n = src->ne[1], n2 = src->ne[2], n3 = src->ne[3];
    const int64_t nrows = n * n2 * n3;
    int64_t r0, r1;
    cpu_split(nrows, ctx->ith, ctx->nth, &r0, &r1);
    float *buf = (float *)ctx->wdata;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i = r % n, j = (r / n) % n2, k = r / (n * n2);
        const int64_t row = load_index(idx, i, j % idx->ne[1], k % idx->ne[2]);
        if (row < 0 || row >= node->ne[1]) {
            cpu_set_error(ctx, PYG_ERR_INVALID_ARGUMENT);
            continue;
        }
        if (src->type == node->type && src->nb[0] == node->nb[0] &&
            node->nb[0] == (uint64_t)pyg_type_get_traits(node->type)->type_size) {
            memcpy(cpu_row_ptr(node, row, j, k), cpu_row_ptr(src, i, j, k),
                   pyg_type_row_size(node->type, node->ne[0]));
        } else {
            cpu_store_row(node, row, j, k, cpu_load_row(src, i, j, k, buf));
        }
    }
}
