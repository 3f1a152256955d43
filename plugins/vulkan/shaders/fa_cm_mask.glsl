// The prefill attention builds' shared helpers (flash_attn_cm2.comp, flash_attn_cm3.comp): the workgroup's head, batch
// and sizes as globals, the additive mask terms of 16 keys for a query row, an f16 number of a 16-byte word.
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
