#version 450
// Decode flash attention over KV splits with the merge folded in (option fa_v=3): one workgroup of
// 128 invocations per (query row, split of ex[3] keys), 64-key chunks; the last workgroup of a row
// to finish (an atomic counter per row in the scratch, zeroed by the plan before every run) merges
// the row's ex[2] partial states into dst, so there is no second dispatch.
// Every global load of a chunk is independent of the others and issued before its result is used
// (flash_attn.comp's V pass is one dependent load per key and output element, behind a branch):
//   scores: two invocations per key, each D/16 16-byte words of the K row (masked keys: none);
//   values: invocation t owns 8 output elements (column t % (Dv/8)) for the keys of its key group
//           (t / (Dv/8), every G-th key), one 16-byte word of V per key, summed over the key groups
//           through shared memory at the end of the split.
// Layout (host-checked, vk_attn.c): K and V f16 with unit element stride and 16-byte aligned rows,
// D a multiple of 16 and Dv a power of two, both in 16..256 (specialization constants 0 / 1).
#include "common.glsl"
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint D = 128u;
layout(constant_id = 1) const uint DV = 128u;
layout(std430, binding = 1) readonly buffer S1v { uvec4 s1v[]; };
layout(std430, binding = 2) readonly buffer S2v { uvec4 s2v[]; };
layout(std430, binding = 6) coherent buffer Scratch { float sc[]; };
layout(std430, binding = 6) coherent buffer ScratchU { uint scu[]; };
#define MAXD 256u
shared float qs[MAXD];
shared float part[128];     // the two half-row dots of each key
shared float ss[64];        // the chunk's scores (-inf: masked or past the end)
shared float red[1024];     // [key group][Dv]: 128 invocations x 8 elements
shared uint is_last;

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    uint nsplit = ex_u(2u);
    uint split = w % nsplit, row = w / nsplit;
    uint nq = t_ne(0u, 1u), H = t_ne(0u, 2u);
    uint iq = row % nq, h = (row / nq) % H, b = row / (nq * H);
    uint nkv = t_ne(1u, 1u), t = gl_LocalInvocationID.x;
    const float NEG_INF = uintBitsToFloat(0xFF800000u);
    const uint RS = DV + 2u;                              // partial record: M, L, acc[Dv]
    uint rec0 = row * nsplit;
    uint jbeg = split * ex_u(3u), jend = min(nkv, jbeg + ex_u(3u));
    uint hk = h / (H / t_ne(1u, 2u)), hv = h / (H / t_ne(2u, 2u));
    uint bk = b % t_ne(1u, 3u), bv = b % t_ne(2u, 3u);
    uint qrow = t_row(0u, iq, h, b);
    for (uint d = t; d < D; d += 128u) qs[d] = ldf(0u, qrow + d * t_nb(0u, 0u), t_type(0u));
    float scale = op_f(0u), softcap = op_f(2u);
    if (softcap != 0.0) scale /= softcap;
    bool has_mask = ex_u(1u) != 0u;
    float slope = alibi_slope(op_f(1u), h, H);
    uint mrow = has_mask ? t_row(3u, iq, h % t_ne(3u, 2u), b % t_ne(3u, 3u)) : 0u;
    uint kb = (t_off(1u) + hk * t_nb(1u, 2u) + bk * t_nb(1u, 3u)) >> 4, kn1 = t_nb(1u, 1u) >> 4;
    uint vb = (t_off(2u) + hv * t_nb(2u, 2u) + bv * t_nb(2u, 3u)) >> 4, vn1 = t_nb(2u, 1u) >> 4;
    const uint NK = D / 16u;                              // K words per invocation (half a row)
    const uint C = DV / 8u, G = 128u / C, NR = 64u / G;   // V columns, key groups, keys per group and chunk
    uint key = t >> 1, hf = t & 1u, col = t % C, kg = t / C;
    float M = NEG_INF, L = 0.0;
    float acc[8];
    for (uint i = 0u; i < 8u; i++) acc[i] = 0.0;
    barrier();                                            // qs
    for (uint j0 = jbeg; j0 < jend; j0 += 64u) {
        uint j = j0 + key;
        float mv = 0.0;
        if (j < jend && has_mask) mv = slope * ldf(3u, mrow + j * t_nb(3u, 0u), t_type(3u));
        bool live = j < jend && mv != NEG_INF;
        float dot = 0.0;
        if (live) {
            uvec4 kw[MAXD / 16u];
            uint kr = kb + j * kn1 + hf;
            for (uint i = 0u; i < NK; i++) kw[i] = s1v[kr + 2u * i];
            for (uint i = 0u; i < NK; i++) {
                uint d0 = 8u * (hf + 2u * i);
                for (uint c = 0u; c < 4u; c++) {
                    vec2 kv = unpackHalf2x16(kw[i][c]);
                    dot += qs[d0 + 2u * c] * kv.x + qs[d0 + 2u * c + 1u] * kv.y;
                }
            }
        }
        part[t] = dot;
        barrier();
        if (hf == 0u) {
            float s = NEG_INF;
            if (live) {
                s = (part[t] + part[t + 1u]) * scale;
                if (softcap != 0.0) s = softcap * tanh_s(s);
                s += mv;
            }
            ss[key] = s;
        }
        barrier();
        float mc = NEG_INF;                               // every invocation folds the 64 scores
        for (uint k = 0u; k < 64u; k++) mc = max(mc, ss[k]);
        if (mc != NEG_INF) {                              // uniform: some key of the chunk is visible
            float mn = max(M, mc);
            float alpha = M == NEG_INF ? 0.0 : exp(M - mn);
            float psum = 0.0;
            for (uint k = 0u; k < 64u; k++) psum += ss[k] == NEG_INF ? 0.0 : exp(ss[k] - mn);
            L = L * alpha + psum;
            M = mn;
            for (uint i = 0u; i < 8u; i++) acc[i] *= alpha;
            uvec4 vw[16];                                 // this invocation's keys kg + G r
            for (uint q = 0u; q < NR; q++)                // all loads first (past the end: none)
                if (j0 + kg + G * q < jend) vw[q] = s2v[vb + (j0 + kg + G * q) * vn1 + col];
            for (uint q = 0u; q < NR; q++) {
                float sk = ss[kg + G * q];
                if (sk == NEG_INF) continue;              // masked cells may hold anything
                float p = exp(sk - mn);
                for (uint c = 0u; c < 4u; c++) {
                    vec2 x = unpackHalf2x16(vw[q][c]);
                    acc[2u * c] += p * x.x;
                    acc[2u * c + 1u] += p * x.y;
                }
            }
        }
        barrier();                                        // ss, part reused by the next chunk
    }
    for (uint i = 0u; i < 8u; i++) red[kg * DV + 8u * col + i] = acc[i];
    barrier();
    uint r = (rec0 + split) * RS;
    if (t == 0u) { sc[r] = M; sc[r + 1u] = L; }
    for (uint d = t; d < DV; d += 128u) {
        float a = 0.0;
        for (uint g = 0u; g < G; g++) a += red[g * DV + d];
        sc[r + 2u + d] = a;
    }
    memoryBarrierBuffer();                                // the partial before the count
    barrier();
    if (t == 0u) is_last = atomicAdd(scu[ex_u(4u) + row], 1u) == nsplit - 1u ? 1u : 0u;
    barrier();
    if (is_last == 0u) return;
    memoryBarrierBuffer();                                // the other workgroups' partials after it
    // The merge, spread over the workgroup: the splits' maximum and weighted sum by strided shares
    // and a tree in shared memory, each split's weight exp(M_s - max) once into shared memory, then
    // every output element a sum of independent loads (a loop of dependent ones over the splits,
    // repeated per element, made the last workgroup of a row the dispatch's tail at long contexts)
    float mx = NEG_INF;
    for (uint s = t; s < nsplit; s += 128u) mx = max(mx, sc[(rec0 + s) * RS]);
    red[t] = mx;
    barrier();
    for (uint o = 64u; o > 0u; o >>= 1) {
        if (t < o) red[t] = max(red[t], red[t + o]);
        barrier();
    }
    mx = red[0];
    barrier();
    float l = 0.0;
    for (uint s = t; s < nsplit; s += 128u) {
        float ms = sc[(rec0 + s) * RS];
        l += ms == NEG_INF ? 0.0 : sc[(rec0 + s) * RS + 1u] * exp(ms - mx);
    }
    red[t] = l;
    barrier();
    for (uint o = 64u; o > 0u; o >>= 1) {
        if (t < o) red[t] += red[t + o];
        barrier();
    }
    float inv = red[0] > 0.0 ? 1.0 / red[0] : 0.0;
    float out2[2] = { 0.0, 0.0 };                         // elements t and t + 128 (Dv <= 256)
    for (uint s0 = 0u; s0 < nsplit; s0 += 512u) {
        uint s1 = min(nsplit, s0 + 512u);
        barrier();                                        // red (and the previous weights) read
        for (uint s = s0 + t; s < s1; s += 128u) {
            float ms = sc[(rec0 + s) * RS];
            red[s - s0] = ms == NEG_INF ? 0.0 : exp(ms - mx);
        }
        barrier();
        for (uint e = 0u; e < 2u; e++) {
            uint d = t + 128u * e;
            if (d >= DV) break;
            float o0 = 0.0, o1 = 0.0, o2 = 0.0, o3 = 0.0;   // four chains of independent loads
            uint s = s0;
            for (; s + 4u <= s1; s += 4u) {
                o0 += sc[(rec0 + s) * RS + 2u + d] * red[s - s0];
                o1 += sc[(rec0 + s + 1u) * RS + 2u + d] * red[s + 1u - s0];
                o2 += sc[(rec0 + s + 2u) * RS + 2u + d] * red[s + 2u - s0];
                o3 += sc[(rec0 + s + 3u) * RS + 2u + d] * red[s + 3u - s0];
            }
            for (; s < s1; s++) o0 += sc[(rec0 + s) * RS + 2u + d] * red[s - s0];
            out2[e] += (o0 + o1) + (o2 + o3);
        }
    }
    for (uint e = 0u; e < 2u; e++) {
        uint d = t + 128u * e;
        if (d < DV) stf(t_at(4u, d, h, iq, b), t_type(4u), out2[e] * inv);
    }
}
