/* plugins/cpu/ops_rows.c — row-wise ops: RMS_NORM, NORM, SOFT_MAX (mask, scale, ALiBi), ROPE
 * (normal and neox, YaRN, freq factors) and ARGMAX. */
#include <math.h>
#include "cpu_internal.h"

static inline int64_t buf_stride(const pyg_tensor *node) {
    int64_t m = node->ne[0];
    for (int i = 0; i < PYG_MAX_SRC; i++)
        if (node->src[i] && node->src[i]->ne[0] > m) m = node->src[i]->ne[0];
    return (m + 15) & ~(int64_t)15;
}

#define ROW_LOOP_BEGIN(node)                                                          \
    int64_t r0, r1;                                                                   \
    cpu_split(pyg_tensor_nrows(node), ctx->ith, ctx->nth, &r0, &r1);                  \
    for (int64_t r = r0; r < r1; r++) {                                               \
        const int64_t i1 = r % node->ne[1], i2 = (r / node->ne[1]) % node->ne[2];     \
        const int64_t i3 = r / (node->ne[1] * node->ne[2]);

#define ROW_LOOP_END }

void cpu_op_norm(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *a = node->src[0];
    const cpu_vec_ops *v = cpu_vec(ctx);
    const int64_t n = node->ne[0], stride = buf_stride(node);
    const float eps = pyg_op_param_f32(node->op_params, 0);
    float *b0 = (float *)ctx->wdata, *b1 = b0 + stride;
    ROW_LOOP_BEGIN(node)
        const float *x = cpu_load_row(a, i1, i2, i3, b0);
        float *direct = cpu_row_f32_direct(node, i1, i2, i3);
        float *z = direct ? direct : b1;
        if (node->op == PYG_OP_RMS_NORM) {
            const float mean = v->sum_sq(n, x) / (float)n;
            v->scale(n, z, x, 1.0f / sqrtf(mean + eps), 0.0f);
        } else {
            double sum = 0;
            for (int64_t i = 0; i < n; i++) sum += x[i];
            const float mean = (float)(sum / (double)n);
            v->scale(n, z, x, 1.0f, -mean);
            const float var = v->sum_sq(n, z) / (float)n;
            v->scale(n, z, z, 1.0f / sqrtf(var + eps), 0.0f);
        }
        if (!direct) cpu_store_row(node, i1, i2, i3, z);
    ROW_LOOP_END
}

/* ALiBi slope of head h (max_bias > 0), as ggml defines it */
float cpu_alibi_slope(float max_bias, int64_t h, int64_t n_head) {
    if (max_bias <= 0.0f) return 1.0f;
    const int64_t n_head_log2 = (int64_t)1 << (int64_t)floor(log2((double)n_head));
    const float m0 = powf(2.0f, -max_bias / (float)n_head_log2);
    const float m1 = powf(2.0f, -(max_bias / 2.0f) / (float)n_head_log2);
    return h < n_head_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_head_log2) + 1));
}

void cpu_op_soft_max(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *a = node->src[0], *mask = node->src[1];
    const cpu_vec_ops *v = cpu_vec(ctx);
    const int64_t n = node->ne[0], stride = buf_stride(node);
    const float scale = pyg_op_param_f32(node->op_params, 0);
    const float max_bias = pyg_op_param_f32(node->op_params, 1);
    float *b0 = (float *)ctx->wdata, *b1 = b0 + stride, *b2 = b1 + stride;
    ROW_LOOP_BEGIN(node)
        const float *x = cpu_load_row(a, i1, i2, i3, b0);
        float *w = b2;
        v->scale(n, w, x, scale, 0.0f);
        if (mask) {
            const float slope = cpu_alibi_slope(max_bias, i2, a->ne[2]);
            const float *m = cpu_load_row(mask, i1, i2 % mask->ne[2], i3 % mask->ne[3], b1);
            if (slope == 1.0f) v->add(n, w, w, m);
            else v->axpy(n, w, slope, m);
        }
        float *direct = cpu_row_f32_direct(node, i1, i2, i3);
        float *z = direct ? direct : b1;
        const float mx = v->max(n, w);
        const float sum = v->exp_sum(n, z, w, mx);
        v->scale(n, z, z, 1.0f / sum, 0.0f);
        if (!direct) cpu_store_row(node, i1, i2, i3, z);
    ROW_LOOP_END
}

/* YaRN: the dims in which rotations go from extrapolated to interpolated */
static float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

/* cos/sin (times mscale) of every rotated pair for position p */
static void rope_cache(const pyg_tensor *node, float p, float *cs, float *sn) {
    const int32_t *ip = node->op_params;
    const int n_dims = ip[0], n_ctx_orig = ip[2];
    const float base = pyg_op_param_f32(ip, 3), freq_scale = pyg_op_param_f32(ip, 4);
    const float ext_factor = pyg_op_param_f32(ip, 5), attn_factor = pyg_op_param_f32(ip, 6);
    const float beta_fast = pyg_op_param_f32(ip, 7), beta_slow = pyg_op_param_f32(ip, 8);
    const pyg_tensor *ff = node->src[2];
    float low = 0, high = 0;
    if (ext_factor != 0.0f) {
        low = floorf(corr_dim(n_dims, n_ctx_orig, beta_fast, base));
        high = ceilf(corr_dim(n_dims, n_ctx_orig, beta_slow, base));
        if (low < 0) low = 0;
        if (high > (float)(n_dims - 1)) high = (float)(n_dims - 1);
    }
    const double step = pow((double)base, -2.0 / (double)n_dims);
    double power = 1.0; /* base^(-i0/n_dims) */
    for (int i0 = 0; i0 < n_dims; i0 += 2, power *= step) {
        double theta_extrap = (double)p * power;
        if (ff) {
            float f;
            memcpy(&f, (const char *)ff->data + (int64_t)(i0 / 2) * (int64_t)ff->nb[0], 4);
            theta_extrap /= (double)f;
        }
        double theta = (double)freq_scale * theta_extrap;
        float mscale = attn_factor;
        if (ext_factor != 0.0f) {
            float y = ((float)(i0 / 2) - low) / fmaxf(0.001f, high - low);
            float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext_factor;
            theta = theta * (1.0 - ramp) + theta_extrap * ramp;
            mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
        }
        cs[i0 / 2] = (float)cos(theta) * mscale;
        sn[i0 / 2] = (float)sin(theta) * mscale;
    }
}

void cpu_op_rope(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *a = node->src[0], *pos = node->src[1];
    const cpu_vec_ops *v = cpu_vec(ctx);
    const int64_t n = node->ne[0], stride = buf_stride(node);
    const int n_dims = node->op_params[0], neox = node->op_params[1] == PYG_ROPE_NEOX;
    const int half = n_dims / 2;
    /* cos/sin per pair, and for adjacent pairs the per-element (c, c) / (-s, s) expansions */
    float *b1 = (float *)ctx->wdata, *cs = b1 + stride, *sn = cs + stride / 2, *ce = sn + stride / 2,
          *se = ce + stride;
    int64_t cached = -1;
    ROW_LOOP_BEGIN(node)
        const int64_t tok = i2 + node->ne[2] * i3;
        if (tok != cached) {
            int32_t p;
            memcpy(&p, (const char *)pos->data + i2 * (int64_t)pos->nb[0], 4);
            rope_cache(node, (float)p, cs, sn);
            if (!neox)
                for (int i = 0; i < half; i++) {
                    ce[2 * i] = ce[2 * i + 1] = cs[i];
                    se[2 * i] = -sn[i];
                    se[2 * i + 1] = sn[i];
                }
            cached = tok;
        }
        float *direct = cpu_row_f32_direct(node, i1, i2, i3);
        float *z = direct ? direct : b1;
        const float *x = cpu_load_row(a, i1, i2, i3, z); /* converts into z when not f32 */
        if (neox) v->rot(half, z, z + half, x, x + half, cs, sn);
        else v->rot_pairs(n_dims, z, x, ce, se);
        if (z != x)
            for (int64_t i = n_dims; i < n; i++) z[i] = x[i];
        if (!direct) cpu_store_row(node, i1, i2, i3, z);
    ROW_LOOP_END
}

void cpu_op_argmax(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *a = node->src[0];
    const int64_t n = a->ne[0];
    float *b0 = (float *)ctx->wdata;
    int64_t r0, r1;
    cpu_split(pyg_tensor_nrows(a), ctx->ith, ctx->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % a->ne[1], i2 = (r / a->ne[1]) % a->ne[2], i3 = r / (a->ne[1] * a->ne[2]);
        const float *x = cpu_load_row(a, i1, i2, i3, b0);
        int32_t best = 0;
        float bv = x[0];
        for (int64_t i = 1; i < n; i++)
            if (x[i] > bv || (bv != bv && x[i] == x[i])) {
                bv = x[i];
                best = (int32_t)i;
            }
        /* output element r of the node, in its own layout */
        int64_t e = r;
        const int64_t o0 = e % node->ne[0];
        e /= node->ne[0];
        const int64_t o1 = e % node->ne[1];
        e /= node->ne[1];
        const int64_t o2 = e % node->ne[2], o3 = e / node->ne[2];
        memcpy(cpu_row_ptr(node, o1, o2, o3) + o0 * (int64_t)node->nb[0], &best, 4);
    }
}
