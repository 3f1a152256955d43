#version 450
// rms_norm / norm / soft_max / argmax with one subgroup per row (OP: 0 rms_norm, 1 norm,
// 2 soft_max, 3 argmax), reduced with subgroup operations: no shared memory and no barrier,
// which llvmpipe (lavapipe) runs far cheaper than workgroup-wide reductions. Used when the device
// has subgroup arithmetic; norm.comp / soft_max.comp / argmax.comp otherwise. Each pass over a row
// issues UN loads per invocation before it uses any (a row of 2048 is 8 memory round trips per pass
// for a subgroup of 32, not 64: a lone rms_norm row took 20.8 us on an H100 at 1b55d86, CUDA 3.1),
// and adds them in the order of the plain loop: the same bytes.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint OP = 0u;
layout(constant_id = 1) const uint RPW = 1u;   // rows per workgroup = 64 / reported subgroup size

const uint UN = 8u;   // loads in flight per invocation and pass

// x_k of row rs of slot 0 for k = k0 + u * ns (u < UN), 0 past the row
// (f32 rows: plain loads, clamped to the row's last element so that none is conditional and all UN
// issue together; the callers use only k < n0. The typed accessor's branches kept them one by one.)
void load_x(out float v[UN], uint rs, uint k0, uint ns, uint n0, uint nb0, uint ty) {
    if (ty == TY_F32) {
        [[unroll]] for (uint u = 0u; u < UN; u++) v[u] = uintBitsToFloat(s0w[(rs + min(k0 + u * ns, n0 - 1u) * nb0) >> 2]);
        return;
    }
    [[unroll]] for (uint u = 0u; u < UN; u++) {
        uint k = k0 + u * ns;
        v[u] = k < n0 ? ldf(0u, rs + k * nb0, ty) : 0.0;
    }
}

// the soft_max input: x * scale (+ slope * mask)
void load_sm(out float v[UN], uint rs, uint k0, uint ns, uint n0, uint nb0, uint ty, float scale,
             bool has_mask, float slope, uint rm, uint mnb0, uint mty) {
    if (ty == TY_F32 && !has_mask) {   // (as load_x)
        [[unroll]] for (uint u = 0u; u < UN; u++) v[u] = uintBitsToFloat(s0w[(rs + min(k0 + u * ns, n0 - 1u) * nb0) >> 2]) * scale;
        return;
    }
    [[unroll]] for (uint u = 0u; u < UN; u++) {
        uint k = k0 + u * ns;
        v[u] = 0.0;
        if (k < n0) {
            v[u] = ldf(0u, rs + k * nb0, ty) * scale;
            if (has_mask) v[u] += slope * ldf(1u, rm + k * mnb0, mty);
        }
    }
}

void main() {
    uint lane = gl_SubgroupInvocationID, ns = gl_SubgroupSize;
    uint n0 = t_ne(0u, 0u), n1 = t_ne(0u, 1u), n2 = t_ne(0u, 2u);
    uint nb0 = t_nb(0u, 0u), ty = t_type(0u), dnb0 = t_nb(4u, 0u), dty = t_type(4u);
    float v[UN];
    for (uint r = gl_SubgroupID; r < RPW; r += gl_NumSubgroups) {
        uint row = wg_linear() * RPW + r;
        if (row >= ex_u(0u)) return;
        uint i1 = row % n1, i2 = (row / n1) % n2, i3 = row / (n1 * n2);
        uint rs = t_row(0u, i1, i2, i3);
        if (OP == 0u || OP == 1u) {
            uint rd = t_row(4u, i1, i2, i3);
            float mean = 0.0;
            if (OP == 1u) {
                float s = 0.0;
                for (uint k0 = lane; k0 < n0; k0 += UN * ns) {
                    load_x(v, rs, k0, ns, n0, nb0, ty);
                    [[unroll]] for (uint u = 0u; u < UN; u++) if (k0 + u * ns < n0) s += v[u];
                }
                mean = subgroupAdd(s) / float(n0);
            }
            float s2 = 0.0;
            for (uint k0 = lane; k0 < n0; k0 += UN * ns) {
                load_x(v, rs, k0, ns, n0, nb0, ty);
                [[unroll]] for (uint u = 0u; u < UN; u++) {
                    float x = v[u] - mean;
                    if (k0 + u * ns < n0) s2 += x * x;
                }
            }
            float scale = 1.0 / sqrt(subgroupAdd(s2) / float(n0) + op_f(0u));
            for (uint k0 = lane; k0 < n0; k0 += UN * ns) {
                load_x(v, rs, k0, ns, n0, nb0, ty);
                [[unroll]] for (uint u = 0u; u < UN; u++) {
                    uint k = k0 + u * ns;
                    if (k < n0) stf(rd + k * dnb0, dty, (v[u] - mean) * scale);
                }
            }
        } else if (OP == 2u) {
            uint rd = t_row(4u, i1, i2, i3);
            bool has_mask = ex_u(1u) != 0u;
            uint rm = 0u, mnb0 = 0u, mty = 0u;
            if (has_mask) {
                rm = t_row(1u, i1, i2 % t_ne(1u, 2u), i3 % t_ne(1u, 3u));
                mnb0 = t_nb(1u, 0u);
                mty = t_type(1u);
            }
            float scale = op_f(0u), slope = alibi_slope(op_f(1u), i2, n2);
            float mx = uintBitsToFloat(0xFF800000u);
            for (uint k0 = lane; k0 < n0; k0 += UN * ns) {
                load_sm(v, rs, k0, ns, n0, nb0, ty, scale, has_mask, slope, rm, mnb0, mty);
                [[unroll]] for (uint u = 0u; u < UN; u++) if (k0 + u * ns < n0) mx = max(mx, v[u]);
            }
            mx = subgroupMax(mx);
            float sum = 0.0;
            for (uint k0 = lane; k0 < n0; k0 += UN * ns) {
                load_sm(v, rs, k0, ns, n0, nb0, ty, scale, has_mask, slope, rm, mnb0, mty);
                [[unroll]] for (uint u = 0u; u < UN; u++) if (k0 + u * ns < n0) sum += exp(v[u] - mx);
            }
            float inv = 1.0 / subgroupAdd(sum);
            for (uint k0 = lane; k0 < n0; k0 += UN * ns) {
                load_sm(v, rs, k0, ns, n0, nb0, ty, scale, has_mask, slope, rm, mnb0, mty);
                [[unroll]] for (uint u = 0u; u < UN; u++) {
                    uint k = k0 + u * ns;
                    if (k < n0) stf(rd + k * dnb0, dty, exp(v[u] - mx) * inv);
                }
            }
        } else {
            float best = uintBitsToFloat(0xFF800000u);
            uint bi = 0xFFFFFFFFu;
            for (uint k0 = lane; k0 < n0; k0 += UN * ns) {
                load_x(v, rs, k0, ns, n0, nb0, ty);
                [[unroll]] for (uint u = 0u; u < UN; u++) {
                    uint k = k0 + u * ns;
                    if (k < n0 && (bi == 0xFFFFFFFFu || v[u] > best)) { best = v[u]; bi = k; }
                }
            }
            float m = subgroupMax(bi == 0xFFFFFFFFu ? uintBitsToFloat(0xFF800000u) : best);
            uint cand = (bi != 0xFFFFFFFFu && best == m) ? bi : 0xFFFFFFFFu;
            uint idx = subgroupMin(cand);
            if (idx == 0xFFFFFFFFu) idx = 0u;   // row of -inf/NaN only: first element
            if (subgroupElect())
                dw[(t_off(4u) + i1 * t_nb(4u, 0u) + i2 * t_nb(4u, 1u) + i3 * t_nb(4u, 2u)) >> 2] = idx;
        }
    }
}
