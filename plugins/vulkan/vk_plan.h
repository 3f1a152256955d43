/* plugins/vulkan/vk_plan.h — what a plan is made of while it is built (vk_graph.c) and the node
 * fusions that decide its dispatches (vk_fuse.c). Internal to the plugin. */
#ifndef VK_PLAN_H
#define VK_PLAN_H
#include "vk_internal.h"

/* bytes [lo, hi) of one buffer a dispatch reads or writes (buf: a pyg_buffer, or the plan itself for
 * its scratch) */
typedef struct range { const pyg_buffer *buf; uint64_t lo, hi; } range;

typedef struct dispatch {
    VkPipeline pipe;
    uint32_t groups[3];
    const pyg_tensor *slot[VKP_NBIND];
    int writes_slot3;               /* fused rms_norm*w: slot 3 is the norm output, written too */
    const pyg_tensor *add_out;      /* fused add+rms_norm*w: the add's output, at binding 6 (rope_store: the rope's) */
    uint32_t out6_word;             /* its description's first extra word (0: 2) */
    const pyg_tensor *xout[3];      /* extra outputs at bindings 7, 8, 9 (fuse_rope_mv: a cache row), each described at extra
                                     * word xout_word[k]: offset, type, nb */
    uint32_t xout_word[3];
    unsigned char xout_ro[3];       /* that extra binding only read (rp_norm_in: the norm's r and w): no write range */
    int nfold;                      /* fold_norm: 1 a mul_mat_vec_rpn writing a norm's int8 input and squares into its region of
                                     * the plan's scratch (scratch_off, scratch_size; at binding 6), 2 a mat-vec reading that
                                     * region as its activations (at binding 1; slot 1 empty) */
    const pyg_tensor *fold_a;       /* fold_nodes: a mul_mat_vec_rpn's add output it may write itself (its region then has room
                                     * for a and w as floats); written once a reader takes the norm's nodes (xout[0]) */
    int fold_wr;                    /* fold_nodes: a reader writing the norm's nodes, 1 + the index of the rpn it made write a */
    int dropped;                    /* fold_nodes: the add + norm dispatch whose nodes others write: left out of the plan */
    int op;
    int shader; uint32_t spec0;     /* what runs it (profile labels) */
    uint32_t fa_split, fa_len;      /* flash attention over KV splits: splits, keys per split (0: one pass) */
    uint64_t scratch_off, scratch_size;   /* its partials in the plan's scratch buffer */
    uint64_t fa_fold;               /* flash_attn_dec (merge folded in): bytes of its row counters (0: none) */
    int dq;                         /* gemm_dq: 1 dequant.comp writing the weights as f16 rows into the scratch
                                     * (scratch_off, scratch_size: one region every such pair of the plan shares),
                                     * 2 the GEMM after it, reading them there as its slot 0 */
    int b16;                        /* gemm_b16: 1 dequant.comp writing f32 activations as f16 rows into the scratch
                                     * (b16_off, b16_size: one region every conversion of the plan shares), 2 a
                                     * GEMM reading them there as its slot 1 (after the conversion, or after an
                                     * earlier GEMM of the same activations that followed it) */
    uint64_t b16_off, b16_size;
    int q8, q8_n;                   /* mv_q8: 1 a fused norm writing its result's int8 blocks into the plan's scratch
                                     * (q8_off, q8_size: one region every such norm shares in turn; q8_n its readers),
                                     * 2 a mat-vec reading them there as its slot 1 (mul_mat_vec3q) */
    uint64_t q8_off, q8_size;
    struct vkp_repack *rp, *rp2;    /* matvec_rp: the weights' repacked copy, bound at binding 0 (mul_mat_vec_rpg: and the second
                                     * weight's at binding 2); the plan holds the references */
    uint64_t b16_rows, b16_k;       /* the copy's rows per (ne2, ne3) and row length in elements (gemm_bg: padded) */
    int ks;                         /* gemm_splitk: 1 a GEMM over K splits (their count at extra word 2) writing splits 1.. (all
                                     * of them with splitk_last) into the plan's scratch (ks_off, ks_size: one region every
                                     * split GEMM shares in turn; at binding 6), 2 the splitk_add.comp pass after it adding
                                     * them into its result (none with splitk_last: vk_splitk.c) */
    uint64_t ks_off, ks_size;
    uint64_t ks_tiles;              /* splitk_last: the split GEMM's tiles (one counter each; its last split adds the sums) */
    int span;                       /* fa_span: 1 fa_mask_span.comp writing the open chunks of a mask into the plan's scratch
                                     * (span_off, span_size; at binding 6), 2 a flash_attn_cm3 reading them there */
    uint64_t span_off, span_size;
    const pyg_graph *graph;         /* while it is built: its node's graph (gemm_splitk counts the GEMMs sharing its stage) */
} dispatch;

/* A plan (vk_graph.c builds it, records it once, resubmits it) */
struct pyg_graph_plan {
    pyg_device *dev;
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkDescriptorPool dpool;
    VkBuffer pbuf;                  /* parameter blocks: pmem (host-visible), or pobj's (device-local) */
    VkDeviceMemory pmem;
    pyg_buffer *pobj;
    int n_dispatch, n_barriers;
    range *acc; int n_acc;          /* sanitizer mode: byte ranges a compute reads (lo..hi) and writes */
    unsigned char *acc_write;
    VkBuffer sbuf;                  /* scratch: KV-split partials of flash attention (device memory) */
    VkDeviceMemory smem;
    VkQueryPool qpool;              /* profiling: a timestamp before the first and after each dispatch */
    int *ops;                       /* profiling: op of each dispatch */
    int *labels;                    /* profiling: its shader label (vkp_prof_label) */
    uint64_t *bytes;                /* profiling: operand bytes of each dispatch (GB/s) */
    VkSemaphore ts_sem; uint64_t ts_val;   /* the submission whose timestamps are not read yet */
    VkEvent *events; int n_events;  /* barrier=event: one per stage boundary, reset at the end of each run */
    struct vkp_repack **rps; int n_rps;   /* matvec_rp: the repacked copies its dispatches read (one reference each) */
};

#define VKP_RPD (VKP_NBIND + 9)   /* byte ranges per dispatch at most: slots, add_out, xout, up to five scratch regions */

/* t: one row of n f32, contiguous (t may be NULL: 0) */
static inline int vkp_row_f32(const pyg_tensor *t, int64_t n) {
    return t && t->type == PYG_TYPE_F32 && pyg_tensor_is_contiguous(t) && t->ne[0] == n && pyg_tensor_nelements(t) == n;
}

/* vk_stages.c: what a dispatch reads and writes (VKP_RPD ranges at most; returns how many), and the barrier
 * stages of nd dispatches from their ranges (fills level, returns the number of stages) */
int vkp_dispatch_ranges(const pyg_graph_plan *plan, const dispatch *dp, range *my, unsigned char *myw);
/* whether dispatch dp writes into t's bytes (any output it writes: not its read-only extra bindings) */
int vkp_dispatch_writes_into(const dispatch *dp, const pyg_tensor *t);
/* whether dispatch dp reads or writes any of t's bytes (its slots, a fused add's output, its extra bindings) */
int vkp_dispatch_touches(const dispatch *dp, const pyg_tensor *t);
int vkp_plan_levels(const pyg_device *d, int nd, const range *rg, const unsigned char *rgw, const int *nrg, int *level);
/* helpers of vk_graph.c */
void vkp_fold_groups(uint64_t total, uint32_t g[3]);    /* workgroups over x, y, z (65535 each) */
int vkp_auto_on(const pyg_device *d, int64_t opt);      /* an auto/off/on option: auto is on except on CPU devices */
uint64_t vkp_dev_align(const pyg_device *d);            /* where a binding may start */
/* the parameter block and dispatch of one node (the caller checked supports_op) */
pyg_error *vkp_build_node(pyg_device *d, const pyg_tensor *n, dispatch *dp, uint32_t *p);
/* a ROPE node's extras: log2(freq_base) and the YaRN correction dims lo, hi (as floats' bits) */
void vkp_rope_extras(const pyg_tensor *n, uint32_t ex[3]);

/* vk_descriptors.c: the plan's descriptor pool (plan->dpool) and one set per dispatch, bound as the dispatches say;
 * *out: the sets (the caller frees the array; the pool owns them) */
pyg_error *vkp_plan_descriptors(pyg_device *d, pyg_graph_plan *plan, const dispatch *dps, int nd, uint64_t pstride,
                                VkDescriptorSet **out);
/* vk_barrier.c: the barrier (option barrier) after the dispatches order[k0..k1) of one stage, given every
 * dispatch's byte ranges (rpd per dispatch: rg, written or not: rgw, how many: nrg) */
pyg_error *vkp_stage_barrier(pyg_device *d, pyg_graph_plan *plan, const range *rg, const unsigned char *rgw, const int *nrg,
                             int rpd, const int *order, int k0, int k1);
/* vk_fuse.c: dispatch dps[nd] for graph node *ip and the nodes fused into it (*ip moves to the
 * last of them; dps[nd].op names the op profiles count it under). norm_src: the last earlier
 * dispatch that is a fused norm mat-vecs may recompute (fuse_norm_mv), or -1. done[0..n_nodes):
 * nodes a dispatch took ahead of their place (fuse_rope_mv sets them; the caller skips them). */
pyg_error *vkp_plan_node(pyg_device *d, const pyg_graph *g, int *ip, dispatch *dps, int nd, uint32_t *p, int norm_src,
                         unsigned char *done);
/* vk_splitk.c: gemm_splitk's splitk_add pass after GEMM gm (params pg) as dispatch c (params pc), and the scratch region
 * the split GEMMs share (*cnt_bytes: splitk_last's counters at its start, which the plan zeroes before each run) */
pyg_error *vkp_splitk_pass(pyg_device *d, const dispatch *gm, const uint32_t *pg, dispatch *c, uint32_t *pc, uint64_t pstride);
void vkp_splitk_layout(dispatch *dps, int nd, void *params, uint64_t pstride, uint64_t align, uint64_t *scratch_total,
                       uint64_t *cnt_bytes);
/* vk_attn.c: fa_span for the dispatch just built, dps[nd - 1] (params at params + (nd - 1) * pstride): where it is a
 * flash_attn_cm3 with a mask, it reads the open chunks that an earlier fa_mask_span dispatch of the same mask and shape
 * found, or one is put before it (*nd grows; its region from *scratch_total) */
pyg_error *vkp_fa_span(pyg_device *d, dispatch *dps, int *nd, void *params, uint64_t pstride, uint64_t align, uint64_t *scratch_total);
/* vk_mv_epi.c: dispatch dp, just built as mul_mat_vec_rp for node i, also does what the graph does next with its
 * result where it can (fuse_rope_mv: a rope and/or a cache write; fold_norm: the int8 input of the norm after it);
 * marks the nodes it took in done. */
void vkp_mv_epilogue(pyg_device *d, const pyg_graph *g, int i, unsigned char *done, dispatch *dp, uint32_t *p);
/* vk_norm_in.c: dispatch dp (mul_mat_vec_rp, _rpe or _rpg, just built) reading the result of the fused norm dispatch
 * dps[ns] recomputes it from the norm's inputs instead (rp_norm_in; _rpe and _rpg: it then shares the norm's stage), or
 * else reads the int8 copy that norm writes (mv_q8); 1 where it does either */
int vkp_rp_norm_read(pyg_device *d, dispatch *dps, int nd, int ns, dispatch *dp, uint32_t *p);
/* norm_mul_reg.comp's vec4 path for a fused norm's filled parameter block (extra word 1) */
uint32_t vkp_norm_vec4_ok(const uint32_t *p, int add, uint64_t align);
/* vk_fuse.c: whether a fused norm of rows this wide runs on norm_mul_reg.comp (norm_wg on, norm_v=2, up to 8192) */
int vkp_norm_reg_on(const pyg_device *d, int64_t width);
#endif
