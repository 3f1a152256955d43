// The prefill attention builds' shared helpers (flash_attn_cm2.comp, flash_attn_cm3.comp): the workgroup's head, batch
// and sizes as globals, the additive mask terms of 16 keys for a query row, an f16 number of a 16-byte word, and a
// chunk's loads (FA_CM_LOADS).
// Included after the shared declarations (it reads s3v, the mask's 16-byte view).
uint g_h, g_b, g_nq, g_nkv;
float g_slope;
bool g_mask, g_m16;

// the additive terms of keys j..j+15 for query row iq: slope * mask, 0 without a mask, -inf for masked
// keys and for rows or keys past the ends
void mask16(uint iq, uint j, out float a[16]) {
    const float NEG_INF = uintBitsToFloat(0xFF800000u);
    if (iq >= g_nq || !g_mask) {
        [[unroll]] for (uint i = 0u; i < 16u; i++) a[i] = (iq < g_nq && j + i < g_nkv) ? 0.0 : NEG_INF;
        return;
    }
    uint mb = t_row(3u, iq, g_h % t_ne(3u, 2u), g_b % t_ne(3u, 3u));
    if (g_m16 && j + 16u <= g_nkv) {   // f16, 16-byte aligned row; j is a multiple of 16: 32 bytes
        uvec4 x0 = s3v[(mb >> 4) + j / 8u], x1 = s3v[(mb >> 4) + j / 8u + 1u];
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            vec2 u = unpackHalf2x16(x0[c]), v = unpackHalf2x16(x1[c]);
            a[2u * c] = g_slope * u.x;
            a[2u * c + 1u] = g_slope * u.y;
            a[8u + 2u * c] = g_slope * v.x;
            a[8u + 2u * c + 1u] = g_slope * v.y;
        }
    } else {
        [[unroll]] for (uint i = 0u; i < 16u; i++)
            a[i] = j + i < g_nkv ? g_slope * ldf(3u, mb + (j + i) * t_nb(3u, 0u), t_type(3u)) : NEG_INF;
    }
}

// f16 number c (0..7) of a 16-byte word
uint h16(uvec4 v, uint c) { return (v[c >> 1] >> ((c & 1u) * 16u)) & 0xFFFFu; }

// A chunk's loads, every one issued before any is used, inside the includer's chunk loop (j0: the chunk's first key;
// RMAX, RPT, KR, VB, DW and the K / V offsets and strides its own): a[k], the mask terms of the invocation's row k and 16
// keys from c0, and open, whether any is unmasked; kr, its 16-byte words of K rows; vr, block i the keys j0 + 8 (bi % 8)
// + 0..7 at word bi / 8 (8 dimensions) of V, loaded where VBLK (the block's condition, over bi) holds, else zeros.
#define FA_CM_LOADS(VBLK) \
    float a[RMAX][16]; \
    bool open = false; \
    [[unroll]] for (uint k = 0u; k < RMAX; k++) { \
        if (k < RPT) { \
            mask16(q0 + (t >> 2) + k * (WG >> 2), j0 + c0, a[k]); \
            [[unroll]] for (uint i = 0u; i < 16u; i++) open = open || a[k][i] != NEG_INF; \
        } \
    } \
    uvec4 kr[KR]; \
    [[unroll]] for (uint i = 0u; i < KR; i++) { \
        uint e = t + i * WG, c = e / DW, j = j0 + c; \
        kr[i] = (e < nkw && j < nkv) ? s1v[kb + j * kn1 + e % DW] : uvec4(0u); \
    } \
    uvec4 vr[8u * VB]; \
    [[unroll]] for (uint i = 0u; i < VB; i++) { \
        uint bi = t + i * WG, kg = bi % 8u, dg = bi / 8u; \
        [[unroll]] for (uint r = 0u; r < 8u; r++) { \
            uint j = j0 + 8u * kg + r; \
            vr[8u * i + r] = (VBLK && j < nkv) ? s2v[vb + j * vn1 + dg] : uvec4(0u); \
        } \
    }
