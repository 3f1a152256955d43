/* plugins/cuda/rope.cuh — the rotation of one pair of a rope (ggml's ROPE: normal or neox pairs,
 * frequency factors, YaRN), host+device: ops_rows.cu's rope kernels and the decode q/k/v mat-vec
 * that ropes its own output rows (mmv_rp.cuh, mvr_qkv_body) compute the same angle. */
#ifndef PYG_CUDA_ROPE_CUH
#define PYG_CUDA_ROPE_CUH
#include <math.h>
#include "common.cuh"

struct rope_params {
    int n_dims, neox, has_ff;
    float theta_scale, freq_scale, ext_factor, attn_factor, corr0, corr1;
};

/* cos and sin of pair ip's angle at `position`, both times the magnitude scale (attn_factor, and
 * YaRN's when ext_factor != 0); ff: the frequency factors (has_ff), else unused. */
PYG_HD void rope_cs(const rope_params &p, float position, int64_t ip, const float *ff, float *c, float *s) {
    float theta_extrap = position * powf(p.theta_scale, (float)ip);
    if (p.has_ff) theta_extrap /= ff[ip];
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp, mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        const float y = ((float)ip - p.corr0) / fmaxf(0.001f, p.corr1 - p.corr0);
        const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * p.ext_factor;
        theta = theta_interp * (1.0f - ramp) + theta_extrap * ramp;
        mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
    }
    *c = cosf(theta) * mscale;
    *s = sinf(theta) * mscale;
}

/* A rope node's parameters (op_params layout: include/pyggml/ops.h), with ggml's YaRN correction
 * range. Host only. */
static inline rope_params rope_params_of(const pyg_tensor *n) {
    const int32_t *p = n->op_params;
    rope_params rp;
    rp.n_dims = p[0];
    rp.neox = p[1] == PYG_ROPE_NEOX;
    rp.has_ff = n->src[2] != NULL;
    const int n_ctx_orig = p[2];
    const float freq_base = pyg_op_param_f32(p, 3);
    rp.freq_scale = pyg_op_param_f32(p, 4);
    rp.ext_factor = pyg_op_param_f32(p, 5);
    rp.attn_factor = pyg_op_param_f32(p, 6);
    const float beta_fast = pyg_op_param_f32(p, 7), beta_slow = pyg_op_param_f32(p, 8);
    rp.theta_scale = powf(freq_base, -2.0f / (float)rp.n_dims);
    const float pi = 3.14159265358979323846f;
    const float denom = 2.0f * logf(freq_base);
    const float cd_fast = (float)rp.n_dims * logf((float)n_ctx_orig / (beta_fast * 2.0f * pi)) / denom;
    const float cd_slow = (float)rp.n_dims * logf((float)n_ctx_orig / (beta_slow * 2.0f * pi)) / denom;
    rp.corr0 = fmaxf(0.0f, floorf(cd_fast));
    rp.corr1 = fminf((float)(rp.n_dims - 1), ceilf(cd_slow));
    return rp;
}

#endif
