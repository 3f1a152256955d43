// The residual add folded into norm_mul.comp / norm_mul_wg.comp (built with -DFUSED_ADD as
// norm_mul_add / norm_mul_wg_add): x = src0 + src2 (same shapes) is the add node's output, written
// through binding 6 (its byte offset, type and strides in the parameter extras 2..7: the add node
// has no tensor slot of its own), and the norm reads it. A module of its own because a statically
// written binding counts, for the validation layer, as written by every dispatch of the module.
#ifdef FUSED_ADD
layout(std430, binding = 6) buffer A6w { uint a6w[]; };
layout(std430, binding = 6) buffer A6h { uint16_t a6h[]; };
uint add_row(uint i1, uint i2, uint i3) { return ex_u(2u) + i1 * ex_u(5u) + i2 * ex_u(6u) + i3 * ex_u(7u); }
// element k of the row: src0 + src2 stored as the add node's type, and that stored value returned
float add_store(uint ra, uint r0, uint r2, uint k) {
    float x = ldf(0u, r0 + k * t_nb(0u, 0u), t_type(0u)) + ldf(2u, r2 + k * t_nb(2u, 0u), t_type(2u));
    uint o = ra + k * ex_u(4u), ty = ex_u(3u);
    if (ty == TY_F16) { uint h = f32_to_f16(x); a6h[o >> 1] = uint16_t(h); return unpackHalf2x16(h).x; }
    if (ty == TY_BF16) { uint h = f32_to_bf16(x); a6h[o >> 1] = uint16_t(h); return uintBitsToFloat(h << 16); }
    a6w[o >> 2] = floatBitsToUint(x);
    return x;
}
// the same element read back (the invocation that stored it: an in-place add may have overwritten src0)
float add_load(uint ra, uint k) {
    uint o = ra + k * ex_u(4u), ty = ex_u(3u);
    if (ty == TY_F16) return unpackHalf2x16(uint(a6h[o >> 1])).x;
    if (ty == TY_BF16) return uintBitsToFloat(uint(a6h[o >> 1]) << 16);
    return uintBitsToFloat(a6w[o >> 2]);
}
#endif
