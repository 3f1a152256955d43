#version 450
// flash attention, one workgroup per (query row, head, batch): KV in chunks of 64 positions,
// one score per thread, online softmax; each thread owns output dims d = t, t+64, ...
// Masked-out keys (mask -inf) cost no K reads, and a chunk whose keys are all masked skips its
// V pass: decode over a mostly empty KV cache reads only the cells in use.
// MODE 1 (decode: few query rows, long KV): each workgroup takes one split of ex[3] keys and
// writes its partial softmax state (max M, sum L, unnormalised acc[Dv]) to the plan's scratch;
// MODE 2 merges a row's ex[2] partials into dst (one workgroup per row).
// Built with FA_V2 (flash_attn2, option fa_v=2, devices with subgroup arithmetic): the chunk's 64
// scores by 8 invocations per key (each a strided eighth of the row, so a subgroup's loads cover a
// few whole rows instead of one word of each of 32 rows), summed through shared memory, and the
// softmax max / sum through subgroup reductions (2 barriers each instead of 7).
#include "common.glsl"
#ifdef FA_V2
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint MODE = 0u;
layout(std430, binding = 6) buffer Scratch { float sc[]; };
#define MAXD 512u
shared float qs[MAXD];
shared float ps[64];
shared float red[64];
#ifdef FA_V2
shared float mvs[64];                                   // the chunk's additive mask terms
shared float part[512];                                 // partial dots [key][eighth]
#endif

float wg_reduce(float v, bool is_max) {
#ifdef FA_V2   // subgroup partials, then every invocation folds them (the barriers also publish ps[])
    float g = is_max ? subgroupMax(v) : subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = g;
    barrier();
    g = red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) g = is_max ? max(g, red[i]) : g + red[i];
    barrier();
    return g;
#else
    uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (t < s) red[t] = is_max ? max(red[t], red[t + s]) : red[t] + red[t + s];
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
#endif
}

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    uint nsplit = MODE == 0u ? 1u : ex_u(2u), split = 0u;
    if (MODE == 1u) { split = w % nsplit; w /= nsplit; }
    uint nq = t_ne(0u, 1u), H = t_ne(0u, 2u);
    uint iq = w % nq; w /= nq;
    uint h = w % H; uint b = w / H;
    uint D = t_ne(0u, 0u), Dv = t_ne(2u, 0u), nkv = t_ne(1u, 1u);
    uint t = gl_LocalInvocationID.x;
    const float NEG_INF = uintBitsToFloat(0xFF800000u);
    uint RS = Dv + 2u;                                  // partial record: M, L, acc[Dv]
    uint rec0 = ((b * H + h) * nq + iq) * nsplit;
    if (MODE == 2u) {
        float mx = NEG_INF;
        for (uint s = 0u; s < nsplit; s++) mx = max(mx, sc[(rec0 + s) * RS]);
        float l = 0.0;
        for (uint s = 0u; s < nsplit; s++) {
            float ms = sc[(rec0 + s) * RS];
            l += ms == NEG_INF ? 0.0 : sc[(rec0 + s) * RS + 1u] * exp(ms - mx);
        }
        float inv = l > 0.0 ? 1.0 / l : 0.0;
        for (uint d = t; d < Dv; d += 64u) {
            float o = 0.0;
            for (uint s = 0u; s < nsplit; s++) {
                float ms = sc[(rec0 + s) * RS];
                if (ms != NEG_INF) o += sc[(rec0 + s) * RS + 2u + d] * exp(ms - mx);
            }
            stf(t_at(4u, d, h, iq, b), t_type(4u), o * inv);
        }
        return;
    }
    uint jbeg = MODE == 1u ? split * ex_u(3u) : 0u;
    uint jend = MODE == 1u ? min(nkv, jbeg + ex_u(3u)) : nkv;
    uint hk = h / (H / t_ne(1u, 2u)), hv = h / (H / t_ne(2u, 2u));
    uint bk = b % t_ne(1u, 3u), bv = b % t_ne(2u, 3u);
    uint qrow = t_row(0u, iq, h, b);
    for (uint d = t; d < D; d += 64u) qs[d] = ldf(0u, qrow + d * t_nb(0u, 0u), t_type(0u));
    barrier();
    float scale = op_f(0u), softcap = op_f(2u);
    if (softcap != 0.0) scale /= softcap;
    bool has_mask = ex_u(1u) != 0u;
    float slope = alibi_slope(op_f(1u), h, H);
    uint mrow = has_mask ? t_row(3u, iq, h % t_ne(3u, 2u), b % t_ne(3u, 3u)) : 0u;
    uint kty = t_type(1u), vty = t_type(2u), knb0 = t_nb(1u, 0u), vnb0 = t_nb(2u, 0u);
    // f16 K with contiguous, 4-byte aligned rows of even length
    bool kf16 = kty == TY_F16 && knb0 == 2u && (D & 1u) == 0u && (t_off(1u) & 3u) == 0u &&
                (t_nb(1u, 1u) & 3u) == 0u && (t_nb(1u, 2u) & 3u) == 0u && (t_nb(1u, 3u) & 3u) == 0u;
    float M = NEG_INF, L = 0.0;
    float acc[MAXD / 64u];
    for (uint i = 0u; i < MAXD / 64u; i++) acc[i] = 0.0;
    for (uint j0 = jbeg; j0 < jend; j0 += 64u) {
        uint j = j0 + t;
        float s = NEG_INF;
        float mv = 0.0;
        if (j < jend && has_mask) mv = slope * ldf(3u, mrow + j * t_nb(3u, 0u), t_type(3u));
#ifdef FA_V2
        {
            mvs[t] = j < jend ? mv : NEG_INF;
            barrier();
            uint l = t & 7u;
            for (uint r = 0u; r < 8u; r++) {
                uint kk = 8u * r + (t >> 3);
                float pd = 0.0;
                if (mvs[kk] != NEG_INF) {               // masked keys and keys past the end: no K reads
                    uint kr = t_row(1u, j0 + kk, hk, bk);
                    if (kf16) {
                        uint w0 = kr >> 2;
                        for (uint wd = l; wd < (D >> 1); wd += 8u) {
                            vec2 kv = unpackHalf2x16(s1w[w0 + wd]);
                            pd += qs[2u * wd] * kv.x + qs[2u * wd + 1u] * kv.y;
                        }
                    } else {
                        for (uint d = l; d < D; d += 8u) pd += qs[d] * ldf(1u, kr + d * knb0, kty);
                    }
                }
                part[8u * kk + l] = pd;
            }
            barrier();
            if (mvs[t] != NEG_INF) {
                float dot = 0.0;
                for (uint i = 0u; i < 8u; i++) dot += part[8u * t + i];
                s = dot * scale;
                if (softcap != 0.0) s = softcap * tanh_s(s);
                s += mv;
            }
        }
#else
        if (j < jend && mv != NEG_INF) {
            uint kr = t_row(1u, j, hk, bk);
            float dot = 0.0;
            if (kf16) {   // two halves per 32-bit load
                uint w0 = kr >> 2;
                for (uint d = 0u; d < D; d += 2u) {
                    vec2 kk = unpackHalf2x16(s1w[w0 + (d >> 1)]);
                    dot += qs[d] * kk.x + qs[d + 1u] * kk.y;
                }
            } else {
                for (uint d = 0u; d < D; d++) dot += qs[d] * ldf(1u, kr + d * knb0, kty);
            }
            s = dot * scale;
            if (softcap != 0.0) s = softcap * tanh_s(s);
            s += mv;
        }
#endif
        float mc = wg_reduce(s, true);
        if (mc == NEG_INF) continue;   // uniform: every key of the chunk is masked out
        float mn = max(M, mc);
        float pj = (mn == NEG_INF || s == NEG_INF) ? 0.0 : exp(s - mn);
        ps[t] = pj;
        float alpha = (M == NEG_INF) ? 0.0 : exp(M - mn);
        float psum = wg_reduce(pj, false);   // its barriers also publish ps[]
        L = L * alpha + psum;
        uint jn = min(64u, jend - j0);
        for (uint i = 0u; i < MAXD / 64u; i++) {
            uint d = t + 64u * i;
            if (d >= Dv) break;
            float a = acc[i] * alpha;
            for (uint jj = 0u; jj < jn; jj++) {
                float pv = ps[jj];
                if (pv != 0.0) a += pv * ldf(2u, t_row(2u, j0 + jj, hv, bv) + d * vnb0, vty);
            }
            acc[i] = a;
        }
        M = mn;
        barrier();
    }
    if (MODE == 1u) {
        uint r = (rec0 + split) * RS;
        if (t == 0u) { sc[r] = M; sc[r + 1u] = L; }
        for (uint i = 0u; i < MAXD / 64u; i++) {
            uint d = t + 64u * i;
            if (d >= Dv) break;
            sc[r + 2u + d] = acc[i];
        }
        return;
    }
    float inv = L > 0.0 ? 1.0 / L : 0.0;
    // dst [Dv, H, n_q, B]
    for (uint i = 0u; i < MAXD / 64u; i++) {
        uint d = t + 64u * i;
        if (d >= Dv) break;
        stf(t_at(4u, d, h, iq, b), t_type(4u), acc[i] * inv);
    }
}
