// The decode attention's query row (binding 0) read through a coherent binding: common.glsl's ldf(0u, ...) with the
// Coherent decoration, for soft_sync (common.glsl), where no barrier invalidates a line an L1 cache kept from before.
// Included after common.glsl by flash_attn_dec.comp and flash_attn_dec2.comp.
layout(std430, binding = 0) coherent readonly buffer Q0w { uint q0w[]; };
layout(std430, binding = 0) coherent readonly buffer Q0h { uint16_t q0h[]; };
float ldq(uint o, uint ty) {
    if (ty == TY_F16) return unpackHalf2x16(uint(q0h[o >> 1])).x;
    if (ty == TY_BF16) return uintBitsToFloat(uint(q0h[o >> 1]) << 16);
    return uintBitsToFloat(q0w[o >> 2]);
}
