#version 450
// rotary embedding (normal: adjacent pairs; neox: (i, i + n_dims/2)), YaRN as in ggml.
// One thread per rotated pair or per passed-through element pair.
// Built with ROPE_STORE (rope_store, option fuse_rope=1): the set_rows that writes this rope's
// result (x [D, H, T], viewed as [H * D, T]) into a cache is the same dispatch: slot 3 = its row
// indices (over T), slot 4 = the cache (2-D, H * D columns), and the rope's own output, still written,
// at binding 6, described by extras 8 (byte offset), 10..13 (nb). (vk_rope_store.c checks the layout.)
#include "common.glsl"
#include "rope_cs.glsl"
layout(local_size_x = 256) in;
#ifdef ROPE_STORE
layout(std430, binding = 6) buffer Out6 { uint o6[]; };
#endif

// element (ia, i1, i2, i3) of the result
void put(uint ia, uint i1, uint i2, uint i3, float v) {
#ifdef ROPE_STORE
    o6[(ex_u(8u) + ia * ex_u(10u) + i1 * ex_u(11u) + i2 * ex_u(12u) + i3 * ex_u(13u)) >> 2] = floatBitsToUint(v);
    uint row = rd32(3u, t_off(3u) + i2 * t_nb(3u, 0u));   // i32, or the low word of an i64
    stf(t_off(4u) + (ia + i1 * t_ne(0u, 0u)) * t_nb(4u, 0u) + row * t_nb(4u, 1u), t_type(4u), v);
#else
    stf(t_at(4u, ia, i1, i2, i3), t_type(4u), v);
#endif
}

void main() {
    uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (i >= ex_u(0u)) return;   // total = ne0/2 * ne1 * ne2 * ne3
    uint hd = t_ne(0u, 0u), half_hd = hd / 2u;
    uint ip = i % half_hd; uint r = i / half_hd;
    uint i1 = r % t_ne(0u, 1u); r /= t_ne(0u, 1u);
    uint i2 = r % t_ne(0u, 2u); uint i3 = r / t_ne(0u, 2u);
    uint n_dims = uint(op_i(0u));
    bool neox = (op_i(1u) & 2) != 0;
    uint ty = t_type(0u);
    uint ia, ib, i0;   // element indices of the pair, i0 = the even "dimension index" of the pair
    if (2u * ip >= n_dims) {
        ia = 2u * ip; ib = ia + 1u;
        put(ia, i1, i2, i3, ldf(0u, t_at(0u, ia, i1, i2, i3), ty));
        put(ib, i1, i2, i3, ldf(0u, t_at(0u, ib, i1, i2, i3), ty));
        return;
    }
    if (neox) { ia = ip; ib = ip + n_dims / 2u; } else { ia = 2u * ip; ib = ia + 1u; }
    i0 = 2u * ip;
    float pos = float(int(rd32(1u, t_off(1u) + i2 * t_nb(1u, 0u))));
    float ff = ex_u(4u) != 0u ? ldf(2u, t_off(2u) + ip * t_nb(2u, 0u), t_type(2u)) : 1.0;
    vec2 cs = rope_cs(pos, i0, ex_f(1u), ex_f(2u), ex_f(3u), ff);   // ex_f(1) = log2(freq_base)
    float c = cs.x, s = cs.y;
    float x0 = ldf(0u, t_at(0u, ia, i1, i2, i3), ty);
    float x1 = ldf(0u, t_at(0u, ib, i1, i2, i3), ty);
    put(ia, i1, i2, i3, x0 * c - x1 * s);
    put(ib, i1, i2, i3, x0 * s + x1 * c);
}
