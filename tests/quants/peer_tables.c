/* tests/quants/peer_tables.c — the f16 lookup tables that ggml-cpu's x86 quants.c reads (normally
 * filled by ggml-cpu.c), so its AVX2 dot products can be built alone as a speed peer for
 * bench/quant_dot.py (build_oracle.sh). */
#include <stdint.h>
#include <string.h>
#include <math.h>
float ggml_table_f32_f16[1 << 16];
float ggml_table_f32_e8m0_half[1 << 8];
static float h2f(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, b;
    if (e == 0x1f) b = s | 0x7f800000 | (m << 13);
    else if (e) b = s | ((e + 112) << 23) | (m << 13);
    else { float f = m * 0x1p-24f; memcpy(&b, &f, 4); b |= s; }
    float f; memcpy(&f, &b, 4); return f;
}
__attribute__((constructor)) static void init(void) {
    for (int i = 0; i < 65536; i++) ggml_table_f32_f16[i] = h2f((uint16_t)i);
}
