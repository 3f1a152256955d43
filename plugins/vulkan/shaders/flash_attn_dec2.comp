#version 450
// Decode flash attention, row-parallel (option fa_v=4): the CUDA plugin's k_fattn_dec structure in Vulkan.
// A workgroup of 128 invocations takes one row group -- one query row and one KV head, with all G = H / H_kv
// query heads that share it, so each K/V byte is read once per query row, not once per query head -- and
// one split of ex[3] cells; the last workgroup of a row group to finish (a counter per row group in the
// scratch, zeroed by the plan before every run) merges the ex[2] splits into dst: no second dispatch.
// A K/V row of D f16 values is read by LPR = D / 8 lanes of a subgroup, 16 bytes each: one subgroup load
// instruction covers RPW = SG / LPR whole rows, U of them in flight per lane for K and as many for V (both
// issued together). The lanes of a row sum their partial dot products by xor shuffles, so every lane of
// the row holds the score and keeps its own online softmax state (max, sum, its 8 output dims per head):
// no workgroup barrier in the loop. A cell whose mask is -inf is not read (its K/V may hold anything);
// the mask of the next step is loaded one step ahead. At the end the row groups of a subgroup merge by
// shuffles, the subgroups through shared memory, the splits through the scratch.
// Scores are kept in base-2 units (exp2). Specialization: 0 = D (32, 64, 128, 256; D / 8 <= SG),
// 1 = G | U << 8 | SG << 16 (SG the subgroup size, a divisor of 128). Host-checked (vk_attn.c): K and V
// f16 of head size D with 16-byte aligned rows, one mask plane for every head, as many V heads as K heads.
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128) in;
#ifdef FA2_LIT   // a literal build (option fa_lit: flash_attn_dec2_d128g1, a 7b's heads on a 32-wide subgroup)
const uint D = FA2_D;
const uint SPEC = FA2_LIT;
#else
layout(constant_id = 0) const uint D = 128u;
layout(constant_id = 1) const uint SPEC = 0x200401u;
#endif
const uint G = SPEC & 255u;                          // query heads per KV head (1..8)
const uint U = (SPEC >> 8) & 255u;                   // rows in flight per lane (1..4)
const uint SG = SPEC >> 16;                          // subgroup size
const uint NSG = 128u / SG;
const uint LPR = D / 8u, RPW = SG / LPR, WSTEP = U * RPW, BSTEP = NSG * WSTEP;
const float LOG2E = 1.4426950408889634;
const uint MAXGS = 1024u;                            // heads x splits of a row group (host-checked)
layout(std430, binding = 1) readonly buffer S1v { uvec4 s1v[]; };
layout(std430, binding = 2) readonly buffer S2v { uvec4 s2v[]; };
layout(std430, binding = 6) coherent buffer Scratch { float sc[]; };
layout(std430, binding = 6) coherent buffer ScratchU { uint scu[]; };
shared float s_m[NSG * G], s_l[NSG * G];
shared float s_acc[NSG * G * D];                     // each subgroup's (sum-scaled) output per head
shared float s_mw[MAXGS], s_lw[MAXGS];              // the merge: each (head, split)'s max, then weight; its sum
shared float s_inv[G];
shared uint is_last;

float mask_at(bool has_mask, uint mrow, uint j) { return has_mask ? ldf(3u, mrow + j * t_nb(3u, 0u), t_type(3u)) : 0.0; }

void unpack8(uvec4 r, out float f[8]) {
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        vec2 x = unpackHalf2x16(r[c]);
        f[2u * c] = x.x;
        f[2u * c + 1u] = x.y;
    }
}

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    const float NEG_INF = uintBitsToFloat(0xFF800000u);
    uint nsplit = ex_u(2u), len = ex_u(3u);
    uint split = w % nsplit, rg = w / nsplit;
    uint nq = t_ne(0u, 1u), H = t_ne(0u, 2u), Hk = t_ne(1u, 2u);
    uint hk = rg % Hk, iq = (rg / Hk) % nq, b = rg / (Hk * nq);
    uint nkv = t_ne(1u, 1u), t = gl_LocalInvocationID.x;
    uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    uint col = lane % LPR, sub = lane / LPR;
    float scale = op_f(0u), softcap = op_f(2u);
    if (softcap != 0.0) scale /= softcap;
    bool has_mask = ex_u(1u) != 0u;
    uint mrow = has_mask ? t_row(3u, iq, 0u, b % t_ne(3u, 3u)) : 0u;
    uint kb = (t_off(1u) + hk * t_nb(1u, 2u) + (b % t_ne(1u, 3u)) * t_nb(1u, 3u)) >> 4, kn1 = t_nb(1u, 1u) >> 4;
    uint vb = (t_off(2u) + hk * t_nb(2u, 2u) + (b % t_ne(2u, 3u)) * t_nb(2u, 3u)) >> 4, vn1 = t_nb(2u, 1u) >> 4;

    float q[G * 8u], slope[G];                       // this lane's 8 dims of each head's query, times the scale
    [[unroll]] for (uint g = 0u; g < G; g++) {
        uint h = hk * G + g, qrow = t_row(0u, iq, h, b);
        [[unroll]] for (uint e = 0u; e < 8u; e++) q[g * 8u + e] = ldf(0u, qrow + (col * 8u + e) * t_nb(0u, 0u), t_type(0u)) * scale;
        slope[g] = alibi_slope(op_f(1u), h, H);
    }
    float m[G], l[G], acc[G * 8u];
    [[unroll]] for (uint g = 0u; g < G; g++) {
        m[g] = NEG_INF;
        l[g] = 0.0;
        [[unroll]] for (uint e = 0u; e < 8u; e++) acc[g * 8u + e] = 0.0;
    }

    uint c0 = split * len, c1 = min(nkv, c0 + len);
    uint base = c0 + sg * WSTEP;
    float mnext[U];
    [[unroll]] for (uint u = 0u; u < U; u++) {
        uint p = base + u * RPW + sub;
        mnext[u] = p < c1 ? mask_at(has_mask, mrow, p) : NEG_INF;
    }
    for (; base < c1; base += BSTEP) {               // (uniform per subgroup: the shuffles below see every lane)
        float mv[U];
        uvec4 kr[U], vr[U];
        [[unroll]] for (uint u = 0u; u < U; u++) {   // this step's K and V rows, all issued before any is used
            uint p = base + u * RPW + sub;
            mv[u] = mnext[u];
            if (mv[u] != NEG_INF) {
                kr[u] = s1v[kb + p * kn1 + col];
                vr[u] = s2v[vb + p * vn1 + col];
            } else {
                kr[u] = uvec4(0u);
                vr[u] = uvec4(0u);
            }
        }
        [[unroll]] for (uint u = 0u; u < U; u++) {   // the next step's mask
            uint p = base + BSTEP + u * RPW + sub;
            mnext[u] = p < c1 ? mask_at(has_mask, mrow, p) : NEG_INF;
        }
        float s[U * G];
        [[unroll]] for (uint u = 0u; u < U; u++) {
            float kf[8];
            unpack8(kr[u], kf);
            [[unroll]] for (uint g = 0u; g < G; g++) {
                float x = 0.0;
                [[unroll]] for (uint e = 0u; e < 8u; e++) x += q[g * 8u + e] * kf[e];
                [[unroll]] for (uint o = LPR / 2u; o > 0u; o >>= 1) x += subgroupShuffleXor(x, o);
                if (softcap != 0.0) x = softcap * tanh_s(x);
                s[u * G + g] = mv[u] == NEG_INF ? NEG_INF : (x + slope[g] * mv[u]) * LOG2E;
            }
        }
        [[unroll]] for (uint g = 0u; g < G; g++) {
            float mx = NEG_INF;
            [[unroll]] for (uint u = 0u; u < U; u++) mx = max(mx, s[u * G + g]);
            if (mx > m[g]) {                         // a new maximum: rescale what is summed so far
                float a = m[g] == NEG_INF ? 0.0 : exp2(m[g] - mx);
                l[g] *= a;
                [[unroll]] for (uint e = 0u; e < 8u; e++) acc[g * 8u + e] *= a;
                m[g] = mx;
            }
            [[unroll]] for (uint u = 0u; u < U; u++) {
                if (s[u * G + g] == NEG_INF) continue;   // masked: its V was not read
                float p = exp2(s[u * G + g] - m[g]);
                float vf[8];
                unpack8(vr[u], vf);
                l[g] += p;
                [[unroll]] for (uint e = 0u; e < 8u; e++) acc[g * 8u + e] += p * vf[e];
            }
        }
    }
    // the row groups of the subgroup (lanes col + LPR k) merge by shuffles
    [[unroll]] for (uint o = LPR; o < SG; o <<= 1) {
        [[unroll]] for (uint g = 0u; g < G; g++) {
            float mo = subgroupShuffleXor(m[g], o), lo = subgroupShuffleXor(l[g], o);
            float mn = max(m[g], mo);
            float fa = m[g] == NEG_INF ? 0.0 : exp2(m[g] - mn), fb = mo == NEG_INF ? 0.0 : exp2(mo - mn);
            l[g] = l[g] * fa + lo * fb;
            [[unroll]] for (uint e = 0u; e < 8u; e++) {
                float ao = subgroupShuffleXor(acc[g * 8u + e], o);
                acc[g * 8u + e] = acc[g * 8u + e] * fa + ao * fb;
            }
            m[g] = mn;
        }
    }
    if (sub == 0u)
        [[unroll]] for (uint g = 0u; g < G; g++) {
            [[unroll]] for (uint e = 0u; e < 8u; e++) s_acc[(sg * G + g) * D + col * 8u + e] = acc[g * 8u + e];
            if (col == 0u) { s_m[sg * G + g] = m[g]; s_l[sg * G + g] = l[g]; }
        }
    barrier();
    // the subgroups merge into this split's record per head: (max, sum, output[D])
    const uint RS = D + 2u;
    for (uint i = t; i < G * D; i += 128u) {
        uint g = i / D, d = i % D;
        float mx = NEG_INF;
        for (uint k = 0u; k < NSG; k++) mx = max(mx, s_m[k * G + g]);
        float ls = 0.0, as = 0.0;
        for (uint k = 0u; k < NSG; k++) {
            float mk = s_m[k * G + g], f = mk == NEG_INF ? 0.0 : exp2(mk - mx);
            ls += s_l[k * G + g] * f;
            as += s_acc[(k * G + g) * D + d] * f;
        }
        uint r = ((rg * G + g) * nsplit + split) * RS;
        if (d == 0u) { sc[r] = mx; sc[r + 1u] = ls; }
        sc[r + 2u + d] = as;
    }
    memoryBarrierBuffer();                           // the record before the count
    barrier();
    if (t == 0u) is_last = atomicAdd(scu[ex_u(4u) + rg], 1u) == nsplit - 1u ? 1u : 0u;
    barrier();
    if (is_last == 0u) return;
    memoryBarrierBuffer();                           // the other workgroups' records after it
    // The merge: every (head, split)'s max and sum loaded at once into shared memory; a subgroup per head turns the
    // maxima into weights exp2(m - max) and sums 1 / sum(weight * sum); then every (head, output element) a sum of
    // independent loads. All heads at once: the tail is three memory round trips whatever G is.
    for (uint i = t; i < G * nsplit; i += 128u) {
        uint r = ((rg * G + i / nsplit) * nsplit + i % nsplit) * RS;
        s_mw[i] = sc[r];
        s_lw[i] = sc[r + 1u];
    }
    barrier();
    for (uint g = sg; g < G; g += NSG) {
        float mx = NEG_INF;
        for (uint k = lane; k < nsplit; k += SG) mx = max(mx, s_mw[g * nsplit + k]);
        mx = subgroupMax(mx);
        float ls = 0.0;
        for (uint k = lane; k < nsplit; k += SG) {
            float mk = s_mw[g * nsplit + k], f = mk == NEG_INF ? 0.0 : exp2(mk - mx);
            s_mw[g * nsplit + k] = f;
            ls += f * s_lw[g * nsplit + k];
        }
        ls = subgroupAdd(ls);
        if (subgroupElect()) s_inv[g] = ls > 0.0 ? 1.0 / ls : 0.0;
    }
    barrier();
    for (uint i = t; i < G * D; i += 128u) {
        uint g = i / D, d = i % D, r0 = (rg * G + g) * nsplit, w0 = g * nsplit;
        float o0 = 0.0, o1 = 0.0, o2 = 0.0, o3 = 0.0;   // four chains of independent loads
        uint k = 0u;
        for (; k + 4u <= nsplit; k += 4u) {
            o0 += sc[(r0 + k) * RS + 2u + d] * s_mw[w0 + k];
            o1 += sc[(r0 + k + 1u) * RS + 2u + d] * s_mw[w0 + k + 1u];
            o2 += sc[(r0 + k + 2u) * RS + 2u + d] * s_mw[w0 + k + 2u];
            o3 += sc[(r0 + k + 3u) * RS + 2u + d] * s_mw[w0 + k + 3u];
        }
        for (; k < nsplit; k++) o0 += sc[(r0 + k) * RS + 2u + d] * s_mw[w0 + k];
        stf(t_at(4u, d, hk * G + g, iq, b), t_type(4u), ((o0 + o1) + (o2 + o3)) * s_inv[g]);
    }
}
