// mv_int8.glsl — the int8 side of the q4_0/q8_0/q4_K mat-vecs (mul_mat_vec3i/w, mul_mat_vec4), included
// after the includer declared TY (the weight type), the shared arrays yq8 (the activations as int8,
// 8 words per block of 32) and yqd (per block: d, the sum of its quants), the activation binding
// s1v (vec4) and the WD(i) word accessor of a unit's registers. OpSDot (SPV_KHR_integer_dot_product,
// through GL_EXT_spirv_intrinsics, which the includer enables at its top) dots packed 4 x int8 words.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6018, 6019], id = 4450)
int sdot4x8(uint x, uint y, spirv_literal int packed_format);   // OpSDot, PackedVectorFormat4x8Bit

// the unit's 8 blocks dotted with the chunk's int8 activations of unit uc (q4_K: its one block of 256)
float dot_unit_i8(uvec4 wv[17], uint uc) {
    float acc = 0.0;
    if (TY == TY_Q4_K) {   // word 0: d, dmin; words 1..3: 12 bytes of 6-bit scales and mins; words 4..35: quants
        vec2 dm = unpackHalf2x16(WD(0u));
        uint s0 = WD(1u), s1 = WD(2u), s2 = WD(3u);
        [[unroll]] for (uint j = 0u; j < 8u; j++) {   // sub-block j of 32: nibble (j & 1) of quant bytes 32 (j / 2) ..
            uint sh = 8u * (j & 3u), sc, mn;
            if (j < 4u) {
                sc = (s0 >> sh) & 63u;
                mn = (s1 >> sh) & 63u;
            } else {
                uint a = (s2 >> sh) & 255u;
                sc = (a & 15u) | (((s0 >> sh) >> 6) & 3u) << 4;
                mn = (a >> 4) | (((s1 >> sh) >> 6) & 3u) << 4;
            }
            uint qw = 4u + 8u * (j >> 1), ns = 4u * (j & 1u), yw = 64u * uc + 8u * j;
            int s = 0;
            [[unroll]] for (uint k = 0u; k < 8u; k++) s += sdot4x8((WD(qw + k) >> ns) & 0x0f0f0f0fu, yq8[yw + k], 0);
            vec2 yd = yqd[8u * uc + j];   // sum(w * y) = d sc yd.x s - dmin mn yd.x yd.y
            acc += yd.x * (dm.x * float(sc) * float(s) - dm.y * float(mn) * yd.y);
        }
        return acc;
    }
    [[unroll]] for (uint b = 0u; b < 8u; b++) {
        uint o = (TY == TY_Q4_0 ? 18u : 34u) * b, wi = o >> 2;
        bool odd = (b & 1u) != 0u;
        float d = unpackHalf2x16(odd ? WD(wi) >> 16 : WD(wi)).x;
        uint yw = 64u * uc + 8u * b;
        vec2 yd = yqd[8u * uc + b];
        int s = 0;
        if (TY == TY_Q4_0) {   // word k: weights 4k..4k+3 (low nibbles), 16+4k..16+4k+3 (high)
            [[unroll]] for (uint k = 0u; k < 4u; k++) {
                uint q = odd ? WD(wi + 1u + k) : (WD(wi + k) >> 16) | (WD(wi + k + 1u) << 16);
                s += sdot4x8(q & 0x0f0f0f0fu, yq8[yw + k], 0) + sdot4x8((q >> 4) & 0x0f0f0f0fu, yq8[yw + 4u + k], 0);
            }
            acc += d * yd.x * (float(s) - 8.0 * yd.y);
        } else {
            [[unroll]] for (uint k = 0u; k < 8u; k++) {
                uint q = odd ? WD(wi + 1u + k) : (WD(wi + k) >> 16) | (WD(wi + k + 1u) << 16);
                s += sdot4x8(q, yq8[yw + k], 0);
            }
            acc += d * yd.x * float(s);
        }
    }
    return acc;
}

// block i (32 floats from vec4 index v0) of the chunk quantized into yq8 / yqd (an includer defining
// MV_ACT supplies the activations: vec4 mv_act(block, k, vec4 index))
void quant_block(uint i, uint v0) {
    vec4 x[8];
    float amax = 0.0;
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
#ifdef MV_ACT
        x[k] = mv_act(i, k, v0 + k);
#else
        x[k] = s1v[v0 + k];
#endif
        amax = max(amax, amax4(x[k]));
    }
    float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
    int sum = 0;
    [[unroll]] for (uint k = 0u; k < 8u; k++) yq8[8u * i + k] = quant4(x[k], id, sum);
    yqd[i] = vec2(d, float(sum));
}
