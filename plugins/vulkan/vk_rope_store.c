/* plugins/vulkan/vk_rope_store.c — a rope and the set_rows that writes its result into a KV cache as
 * one dispatch (rope.comp's ROPE_STORE build, option fuse_rope, default 1
 * since the H200 call at a5eb50c: tg128 1b q4_0 662 vs 659 t/s, 7b 252 vs 247, and with the A/B
 * queue build 664 vs 639, 249 vs 238; within 1% at 7942149, before the arena waited to reuse bytes).
 *
 * The pattern is a model's k rope followed by its cache write (pyggml/models/llama.py): x = rope(.)
 * f32, contiguous, [D, H, T, 1]; s = set_rows(cache, view of x as [H * D, T], idx [T]) into a 2-D
 * cache of H * D columns, the next compute node after the rope. The dispatch reads the rope's
 * operands and idx and writes the cache and x (other nodes may read x): the cache must overlap
 * none of them. */
#include "vk_internal.h"

int vkp_rope_store_fusable(pyg_device *d, const pyg_tensor *x, const pyg_tensor *s) {
    if (!d->opts.fuse_rope || x->op != PYG_OP_ROPE || !s || s->op != PYG_OP_SET_ROWS) return 0;
    const pyg_tensor *src = s->src[1], *cache = s->src[0], *idx = s->src[2];
    if (x->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(x) || x->ne[3] != 1) return 0;
    const pyg_buffer *bx, *bs, *bc, *bn; uint64_t ox, os, oc, on;
    if (!vkp_resolve(x, &bx, &ox) || !vkp_resolve(src, &bs, &os) || bx != bs || ox != os) return 0;
    if (src->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(src)) return 0;
    if (src->ne[0] != x->ne[0] * x->ne[1] || src->ne[1] != x->ne[2] || src->ne[2] != 1 || src->ne[3] != 1) return 0;
    if (cache->ne[0] != src->ne[0] || cache->ne[2] != 1 || cache->ne[3] != 1) return 0;
    if (!vkp_resolve(cache, &bc, &oc) || !vkp_resolve(s, &bn, &on) || bc != bn || oc != on) return 0;
    if (idx->ne[0] != src->ne[1] || idx->ne[1] != 1 || idx->ne[2] != 1 || idx->ne[3] != 1) return 0;
    if (!vkp_supports_op(d, x) || !vkp_supports_op(d, s)) return 0;
    return vkp_disjoint(cache, x) && vkp_disjoint(cache, x->src[0]) && vkp_disjoint(cache, x->src[1]) &&
           vkp_disjoint(cache, x->src[2]) && vkp_disjoint(cache, idx);
}
