/* plugins/vulkan/vk_internal.h — shared between the Vulkan plugin's C files (hidden visibility).
 *
 * The plugin never links libvulkan: VK_NO_PROTOTYPES, and every entry point is loaded through
 * vkGetInstanceProcAddr / vkGetDeviceProcAddr after dlopen("libvulkan.so.1") in plugin_init. */
#ifndef PYGGML_VK_INTERNAL_H
#define PYGGML_VK_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>
#include <pthread.h>
#include "pyggml/pyggml.h"
#include "vk_khr_cm.h"

/* Vulkan functions the plugin uses, by level. */
#define VKP_INSTANCE_FUNCS(X) \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties) \
    X(vkCreateDevice) X(vkGetDeviceProcAddr)

#define VKP_DEVICE_FUNCS(X) \
    X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory) \
    X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) \
    X(vkFreeCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkResetCommandBuffer) \
    X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkCmdPipelineBarrier) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) \
    X(vkCmdDispatch) X(vkQueueSubmit) X(vkCreateSemaphore) X(vkDestroySemaphore) \
    X(vkWaitSemaphores) X(vkGetSemaphoreCounterValue) X(vkCreateShaderModule) \
    X(vkDestroyShaderModule) X(vkCreateComputePipelines) X(vkDestroyPipeline) \
    X(vkCreatePipelineLayout) X(vkCreateDescriptorSetLayout) X(vkCreateDescriptorPool) \
    X(vkDestroyDescriptorPool) X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) \
    X(vkDeviceWaitIdle) X(vkQueueWaitIdle) \
    X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkCmdResetQueryPool) X(vkCmdWriteTimestamp) \
    X(vkCreateEvent) X(vkDestroyEvent) X(vkCmdSetEvent) X(vkCmdResetEvent) X(vkCmdWaitEvents) \
    X(vkGetQueryPoolResults)

#define VKP_DECL(name) PFN_##name name;
typedef struct vkp_instance_fns { VKP_INSTANCE_FUNCS(VKP_DECL) } vkp_instance_fns;
typedef struct vkp_device_fns { VKP_DEVICE_FUNCS(VKP_DECL) } vkp_device_fns;
#undef VKP_DECL

/* Shaders (one SPIR-V module each, embedded at build time). */
enum {
    VKP_SH_ELEMENTWISE, VKP_SH_NORM, VKP_SH_SOFT_MAX, VKP_SH_ARGMAX, VKP_SH_ROPE, VKP_SH_GET_ROWS,
    VKP_SH_SET_ROWS, VKP_SH_MUL_MAT_VEC, VKP_SH_MUL_MAT, VKP_SH_FLASH_ATTN, VKP_SH_ROWS_SG, VKP_SH_NORM_MUL, VKP_SH_NORM_MUL_WG,
    VKP_SH_MUL_MAT_VEC2, VKP_SH_MUL_MAT_CM, VKP_SH_MUL_MAT_CM_EMU,
    VKP_SH_FLASH_ATTN_CM, VKP_SH_FLASH_ATTN_CM_EMU, VKP_SH_NORM_MUL_ADD, VKP_SH_NORM_MUL_WG_ADD,
    VKP_SH_MUL_MAT_CM128, VKP_SH_MUL_MAT_CM128_EMU, VKP_SH_MUL_MAT_CM2, VKP_SH_MUL_MAT_CM2_EMU,
    VKP_SH_MUL_MAT_CM2_128, VKP_SH_MUL_MAT_CM2_128_EMU, VKP_SH_NORM_MUL_REG, VKP_SH_NORM_MUL_REG_ADD,
    VKP_SH_MUL_MAT_VEC3, VKP_SH_MUL_MAT_CM3, VKP_SH_MUL_MAT_CM3_EMU, VKP_SH_MUL_MAT_CM3_128, VKP_SH_MUL_MAT_CM3_128_EMU,
    VKP_SH_FLASH_ATTN2, VKP_SH_FLASH_ATTN_DEC, VKP_SH_MUL_MAT_VEC3P, VKP_SH_ROPE_STORE, VKP_SH_MUL_MAT_VEC3G, VKP_SH_MUL_MAT_CM4, VKP_SH_MUL_MAT_CM4_EMU, VKP_SH_MUL_MAT_VEC3I, VKP_SH_MUL_MAT_VEC3W, VKP_SH_MUL_MAT_VEC4, VKP_SH_MUL_MAT_VEC3S, VKP_SH_MUL_MAT_VEC3N, VKP_SH_MUL_MAT_CM4_KHR,
    VKP_SH_FLASH_ATTN_CM2, VKP_SH_FLASH_ATTN_CM2_EMU, VKP_SH_DEQUANT, VKP_SH_NORM_MUL_REG_Q8, VKP_SH_NORM_MUL_REG_ADD_Q8, VKP_SH_MUL_MAT_VEC3Q, VKP_SH_REPACK, VKP_SH_MUL_MAT_VEC_RP, VKP_SH_MUL_MAT_VEC_RPG, VKP_SH_MUL_MAT_VEC_RPE, VKP_SH_MUL_MAT_VEC_RPN, VKP_SH_FLASH_ATTN_DEC2, VKP_SH_SWIGLU8, VKP_SH_SWIGLU8_B16, VKP_SH_FLASH_ATTN_CM2S, VKP_SH_FLASH_ATTN_CM2S_EMU, VKP_SH_NORM_MUL_REG_B16, VKP_SH_NORM_MUL_REG_ADD_B16, VKP_SH_FLASH_ATTN_CM3, VKP_SH_FLASH_ATTN_CM3_EMU, VKP_SH_SPLITK_ADD, VKP_SH_FA_MASK_SPAN, VKP_SH_COUNT
};
#define VKP_MAX_PIPELINES 512  /* cache slots: (shader, specialization constants) pairs; every weight type x kernel variant fits */

/* Parameter block of one dispatch (binding 5, a uniform buffer), in 32-bit words: tensor slot t (0..3 = src,
 * 4 = dst) at 16*t: [0] byte offset in its binding, [1] type, [4..7] ne, [8..11] nb;
 * [80..95] the node's op_params; [96..127] per-shader extras (extra[0] = work item count). */
#define VKP_PARAM_WORDS 128
#define VKP_SLOT_DST 4
#define VKP_NBIND 5
#define VKP_BIND_SCRATCH 6  /* plan scratch (flash attention's KV-split partials), a fused add's output; dummy elsewhere */
#define VKP_BIND_Q8 7       /* mv_q8: the fused norm's int8 blocks of its result, written for the mat-vecs; dummy elsewhere */
#define VKP_NSET (VKP_NBIND + 5)   /* bindings per descriptor set: tensors, parameters, scratch, the int8 copy, two extra outputs */
#define VKP_BIND_X8 8       /* extra outputs of fused dispatches (vk_norm_fold.c); dummy elsewhere */

typedef struct vkp_pipeline {
    int shader;
    uint32_t spec[2];
    VkPipeline pipeline;
} vkp_pipeline;

/* Device options (device_set_option; the table in vk_plugin.c, README.md lists them). Plans read
 * them when they are created. Choice fields: VKP_AUTO (the device type decides), VKP_OFF, VKP_ON. */
typedef struct vkp_options {
    int64_t fa_split;               /* KV-split flash attention (auto: off on CPU devices such as lavapipe) */
    int64_t fuse;                   /* rms_norm + mul as one dispatch */
    int64_t fuse_glu;               /* gate and up mat-vecs and their swiglu as one dispatch (mul_mat_vec3g) */
    int64_t fuse_rope;              /* rope + the set_rows of its result into a cache as one dispatch (vk_rope_store.c) */
    int64_t fuse_rope_mv;           /* a matvec_rp mat-vec + the rope and/or cache write of its result as one dispatch (vk_mv_epi.c) */
    int64_t rp_norm_in;             /* auto/off/on: mul_mat_vec_rpe / _rpg recompute the fused norm they read (vk_norm_in.c) */
    int64_t fold_norm;              /* o/down mat-vecs write the next rms_norm's int8 input; its readers run beside it (vk_mv_epi.c) */
    int64_t fold_nodes;             /* with fold_norm: they and the norm's first reader write the add + norm's nodes (vk_norm_in.c) */
    int64_t fuse_swiglu;            /* a swiglu and the mat-vec that reads it as one dispatch (mul_mat_vec3s) */
    int64_t fuse_norm_mv;           /* auto/off/on: mat-vecs reading a fused norm recompute it beside that dispatch (mul_mat_vec3n) */
    int64_t norm_wg;                /* workgroup-per-row norm+mul kernel (auto: off on CPU devices) */
    int64_t reorder;                /* plans record independent dispatches stage by stage, one barrier between stages */
    int64_t params_dev;             /* plans' parameter blocks in device-local memory (auto: off on CPU devices) */
    int64_t subgroups;              /* subgroup kernels where the device has subgroup arithmetic */
    int64_t profile;                /* plugin-wide: count host work and time dispatches (vk_profile.c) */
    int64_t debug_drop_barriers;    /* test switch: plans omit compute barriers (sync validation must see it) */
    int64_t barrier;                /* VKP_BARRIER_*: how plans order one stage after the next (vk_graph.c) */
    /* kernel choices (vk_options.c) */
    int64_t matvec;                 /* 2: mul_mat_vec2.comp where it applies (default), 1: mul_mat_vec.comp, 3: mul_mat_vec3.comp for q4_0/q8_0 */
    int64_t matvec_rows;            /* rows per subgroup of mul_mat_vec2: 1 << this (choice 1, 2, 4; default 2) */
    int64_t gemm;                   /* VKP_GEMM_*: auto (default), tiled, coopmat, cm_emulated */
    int64_t fa;                     /* prefill flash attention, the same values (tiled = "scalar": flash_attn.comp) */
    int64_t gemm_tile;              /* mul_mat_cm's tile: 0 auto (128 where that still fills the GPU, else 64), 1: 64, 2: 128 */
    int64_t fa_v;                   /* flash_attn.comp's build: 1 (default), 2 FA_V2 (flash_attn2: eight invocations per key, subgroup reductions); 3 flash_attn_dec.comp for the KV split; 4 flash_attn_dec2.comp (row groups, subgroup shuffles); 0 (default) 4 where H = H_kv, else 3 */
    int64_t gemm_v;                 /* mul_mat_cm's build: 3 mul_mat_cm3 (default), 2 pipelined and unrolled, 1 the earlier one, 4 mul_mat_cm4 */
    int64_t gemm_cfg;               /* mul_mat_cm4's configuration: 0 auto, else 1 + an index of vkp_gemm_cfgs (vk_matmul.c) */
    int64_t norm_v;                 /* workgroup-per-row norm+mul: 2 norm_mul_reg.comp (default), 1 norm_mul_wg.comp */
    int64_t fa_wgs;                 /* KV-split flash attention: at most this many workgroups (splits = fa_wgs / rows) */
    int64_t fa_span;                /* flash_attn_cm3 walks each query block's open chunks alone (fa_mask_span.comp: vk_attn.c) */
    int64_t fa_acc;                 /* flash_attn_cm3's accumulators: 0 f32, 1 each chunk's P V in f16, 2 Q K^T too (vk_attn.c) */
    int64_t fa_cm_wgs;              /* flash_attn_cm2 over KV splits (flash_attn_cm2s) up to about this many workgroups; 0: never */
    int64_t fa_dec_wgs;             /* fa_v=4: about this many workgroups over a node's row groups (splits of at least 32 cells) */
    int64_t cm_acc;                 /* mul_mat_cm4's KHR build: products summed in f16 over 1, 2, 4 or 8 K steps (1, 2, 3 = default, 4) before the f32 sums, 0 f32 accumulators */
    int64_t fa_lit;                 /* flash_attn_dec2 from its literal build where it has the node's specialization */
    int64_t norm_b16;               /* a fused prefill norm before a gemm_b16 GEMM reading its result writes the GEMM's f16 copy */
    int64_t swiglu8;                /* prefill swiglu: 0 elementwise.comp, 1 swiglu8.comp (8 elements an invocation), 2 (default)
                                     * that and, before a gemm_b16 GEMM reading it, the GEMM's f16 copy written beside it */
    int64_t gemm_lit;               /* mul_mat_cm4_khr from its literal builds where one has the GEMM's specialization */
    int64_t gemm_splitk;            /* mul_mat_cm4 over K splits where its stage's grids have fewer workgroups than this (0: never) */
    int64_t gemm_splitk_steps;      /* the fewest K steps a split takes */
    int64_t splitk_last;            /* a split GEMM's last split per tile adds the splits (no splitk_add pass) */
    int64_t rp_lit;                 /* q4_0 mul_mat_vec_rp / _rpe / _rpg with 1 or 2 blocks per invocation from builds where those are literals */
    int64_t rp_rows;                /* mul_mat_vec_rp / _rpe rows per workgroup: 8 >> rp_rows (index of vk_plugin.c's k_rp_rows; 4: the _rp4 / _rpe4 builds) */
    int64_t cm_api;                 /* VKP_CM_API_*: the cooperative-matrix extension the GEMM's shader uses (auto, nv, khr) */
    int64_t matvec_q4_K;            /* q4_K weights in the int8 mat-vecs (mul_mat_vec3i/3w/3s/3n) */
    int64_t gemm_bg;                /* with gemm_b16: the GEMM loads activation fragments from the copy in global memory */
    int64_t gemm_b16;               /* a mul_mat_cm4 GEMM's f32 activations converted to f16 rows in the plan's scratch first: VKP_COPY_* */
    int64_t gemm_dq;                /* quantized weights of a mul_mat_cm4 GEMM dequantized to f16 in the plan's scratch first (dequant.comp): VKP_COPY_* */
    int64_t fa_cm;                  /* prefill flash attention on the tensor cores: 2 flash_attn_cm2.comp where its layout holds (default), 1 flash_attn_cm.comp */
    int64_t pipeline_stats;         /* log the driver's statistics of the pipelines compiled after it is set (vk_pipe_stats.c) */
    int64_t debug_gemm_parts;       /* measurement switch: mul_mat_cm4 runs a part of its step alone (0: whole; results wrong otherwise) */
    int64_t mv_q8;                  /* the fused norms write their result's int8 blocks; the mat-vecs reading it copy them (mul_mat_vec3q) */
    int64_t matvec_ahead;           /* the whole-row mat-vecs load two units before staging the row, not one */
    int64_t debug_mv_parts;         /* measurement switch: mul_mat_vec3w without its activation staging (1) or weight loads (2) */
    int64_t matvec_rp;              /* one-column q4_0 mat-vecs on a repacked copy of the weights (mul_mat_vec_rp, vk_repack.c) */
    int64_t matvec_rp_k;            /* with matvec_rp, q4_K weights too (K a multiple of 256) */
} vkp_options;
#define VKP_AUTO 0
enum { VKP_CM_API_AUTO, VKP_CM_API_NV, VKP_CM_API_KHR };   /* option cm_api (vk_plugin.c's k_cm_api) */
/* option barrier: a global memory barrier (default), buffer barriers on what the previous stage
 * wrote, a synchronization2 memory barrier naming storage accesses only, or (measurement only: not
 * a memory dependency, sync validation flags it) an execution dependency alone */
enum { VKP_BARRIER_MEMORY, VKP_BARRIER_BUFFER, VKP_BARRIER_SYNC2, VKP_BARRIER_DEBUG_EXEC, VKP_BARRIER_EVENT };
#define VKP_OFF 1
#define VKP_ON 2

struct pyg_device {
    int index;
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    vkp_device_fns fn;
    pthread_mutex_t queue_lock;     /* vkQueueSubmit is externally synchronized */
    pthread_mutex_t lock;           /* pipeline cache, internal stream, accounting */
    int32_t device_type;
    int subgroup_arith;             /* subgroup add usable in compute shaders (and option subgroups=1) */
    int subgroup_hw;                /* the device has it (subgroup_arith without the option) */
    int subgroup_shuffle;           /* subgroup shuffles usable in compute shaders */
    vkp_options opts;
    uint32_t subgroup_size;
    uint64_t max_range;             /* maxStorageBufferRange: largest tensor one binding can see */
    uint64_t max_alloc;
    uint64_t heap_size, allocated;
    uint32_t mt_device, mt_host;    /* memory type indices */
    int device_mem_mapped;          /* device-local memory is host-visible + coherent: map it */
    /* optional device features (vk_caps.c) */
    int coopmat;                    /* VK_NV_cooperative_matrix with a subgroup 16x16x16 f16*f16+f32 shape, enabled */
    int coopmat_khr;                /* VK_KHR_cooperative_matrix with the same shape, enabled too (only with coopmat) */
    int coopmat_khr_layer;          /* the device has it, but an older validation layer is on: left off (vk_caps.c) */
    int float16;                    /* shaderFloat16 enabled */
    int int_dot;                    /* shaderIntegerDotProduct enabled (VK_KHR_shader_integer_dot_product) */
    int sync2;                      /* VK_KHR_synchronization2 enabled (option barrier=sync2) */
    int exec_props;                 /* VK_KHR_pipeline_executable_properties enabled (option pipeline_stats; vk_pipe_stats.c) */
    PFN_vkGetPipelineExecutablePropertiesKHR exec_props_fn;
    PFN_vkGetPipelineExecutableStatisticsKHR exec_stats_fn;
    PFN_vkCmdPipelineBarrier2KHR barrier2;   /* its vkCmdPipelineBarrier2KHR (NULL without it) */
    int mv2_broken, mv3_broken, mv3p_broken, mv3g_broken, mv3i_broken, mv3w_broken, mv3s_broken, mv3n_broken, mv4_broken, mv3q_broken, mvrp_broken, mvrpg_broken, mvrpe_broken, mvrpn_broken, cm_broken, fa_cm_broken, fa_cm2_broken, fa_cm2s_broken, fa_cm3_broken, fa_dec_broken, fa_dec2_broken, dq_broken;   /* the driver refused that pipeline: not chosen again */
    uint32_t cm4_broken;            /* the same per mul_mat_cm4 configuration (bit: index in vkp_gemm_cfgs) */
    int timestamps;                 /* the compute queue writes timestamps (profiling) */
    float ts_period;                /* ns per timestamp tick */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    vkp_pipeline pipes[VKP_MAX_PIPELINES];
    int n_pipes;
    VkBuffer dummy;                 /* bound to unused slots */
    VkDeviceMemory dummy_mem;
    struct pyg_stream *internal;    /* for blocking copies; guarded by lock */
    VkSemaphore *free_sems;         /* recycled timeline semaphores (guarded by lock): lavapipe
                                       (Mesa 22) can crash later when a semaphore that another
                                       queue submission waited on is destroyed, so none are */
    int n_free_sems, cap_free_sems;
};

typedef struct vkp_access {          /* sanitizer mode: a queued access the host has not waited for */
    uint64_t lo, hi;
    int write;
    int stream;                     /* checked stream id (vkp_val_stream_new) */
    uint64_t value;                 /* that stream's timeline value of the submission */
} vkp_access;

struct pyg_buffer {
    vkp_access *acc; int n_acc, cap_acc;   /* sanitizer mode only (guarded by vk_validation.c) */
    pyg_device *dev;
    VkBuffer buf;
    VkDeviceMemory mem;
    uint64_t size;
    uint64_t alloc_size;
    uint32_t flags;
    void *map;                      /* persistent mapping or NULL */
    uint64_t uid;                   /* unique per process (vk_repack.c's key) */
    uint64_t gen;                   /* raised by every host write into it (atomic): repacked copies go stale */
};

typedef struct vkp_staging {        /* a host-visible buffer in flight on a stream */
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map;
    uint64_t size;
    uint64_t busy_until;            /* stream timeline value after which it is free */
} vkp_staging;

typedef struct vkp_cmd {
    VkCommandBuffer cb;
    uint64_t busy_until;
} vkp_cmd;

#define VKP_MAX_WAITS 16
#define VKP_OPEN_ACC 32
#define VKP_OPEN_FLUSH (4ull << 20)
struct pyg_stream {
    pyg_device *dev;
    VkCommandPool pool;
    VkSemaphore timeline;
    uint64_t value;                 /* last value a submission of this stream signals */
    VkSemaphore wait_sem[VKP_MAX_WAITS];
    uint64_t wait_val[VKP_MAX_WAITS];
    int n_waits;
    vkp_cmd *cmds; int n_cmds;
    vkp_staging *stage; int n_stage;
    int vid;                        /* sanitizer mode: checked stream id, -1 when off */
    /* Copies are recorded into one open command buffer that rides on the stream's next
     * submission (a plan launch, an event record, a flush before a host wait), so a decode step's
     * input writes and its plan go to the queue as one vkQueueSubmit. */
    int open;                       /* index in cmds of the open command buffer, -1 = none */
    uint64_t open_bytes;            /* staged bytes in it (flushed past VKP_OPEN_FLUSH) */
    struct { VkBuffer buf; uint64_t lo, hi; int write; } open_acc[VKP_OPEN_ACC];
    int n_open_acc;                 /* copy ranges since its last barrier */
};

struct pyg_event {
    pyg_device *dev;
    VkSemaphore sem;
    uint64_t value;                 /* the value that marks the last record; 0 = fresh */
    int vid; uint64_t vvalue;       /* sanitizer mode: recording stream and its timeline value */
};

enum { VKP_GEMM_AUTO, VKP_GEMM_TILED, VKP_GEMM_COOPMAT, VKP_GEMM_CM_EMULATED };

/* errors (vk_plugin.c) */
pyg_error *vkp_err(int32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
pyg_error *vkp_vk_err(VkResult r, const char *what);
void vkp_log(int32_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *vkp_error_text(const pyg_error *e);
void vkp_error_free(pyg_error *e);

/* pipelines (vk_plugin.c): created once per (shader, specialization constants 0 and 1), cached */
pyg_error *vkp_get_pipeline(pyg_device *d, int shader, const uint32_t spec[2], VkPipeline *out);
/* submit one recorded command buffer on a stream (waits + timeline signal), after the stream's
 * open command buffer of queued copies if it has one */
pyg_error *vkp_submit(pyg_stream *s, VkCommandBuffer cb);
void vkp_full_barrier(pyg_device *d, VkCommandBuffer cb);  /* everything -> everything incl. host */
/* Before destroying objects a submission used: lavapipe (Mesa 22) still touches a submission's
 * objects after signalling its semaphores, so a semaphore wait alone is not enough there. */
void vkp_queue_idle(pyg_device *d);
/* host-visible, mapped buffer (plan parameter blocks); caller destroys buffer and memory */
/* vk_stream.c: the ABI's stream, event and buffer entries (the table is in vk_plugin.c) */
pyg_error *vkp_api_buffer_alloc(pyg_device *d, uint64_t size, uint32_t flags, pyg_buffer **out);
pyg_error *vkp_api_buffer_fill(pyg_buffer *dst, uint64_t off, uint8_t value, uint64_t size);
void vkp_api_buffer_free(pyg_buffer *b);
pyg_error *vkp_api_buffer_get_info(pyg_buffer *b, pyg_buffer_info *info);
pyg_error *vkp_api_buffer_read(pyg_buffer *src, uint64_t off, void *dst, uint64_t size);
pyg_error *vkp_api_buffer_write(pyg_buffer *dst, uint64_t off, const void *src, uint64_t size);
pyg_error *vkp_api_event_create(pyg_device *d, pyg_event **out);
void vkp_api_event_destroy(pyg_event *ev);
pyg_error *vkp_api_event_query(pyg_event *ev, int32_t *done);
pyg_error *vkp_api_event_record(pyg_event *ev, pyg_stream *s);
pyg_error *vkp_api_event_synchronize(pyg_event *ev);
pyg_error *vkp_api_stream_copy_async(pyg_stream *s, pyg_buffer *dst, uint64_t doff, pyg_buffer *src, uint64_t soff, uint64_t size);
pyg_error *vkp_api_stream_create(pyg_device *d, uint32_t flags, pyg_stream **out);
void vkp_api_stream_destroy(pyg_stream *s);
pyg_error *vkp_api_stream_read_async(pyg_stream *s, pyg_buffer *src, uint64_t off, void *dst, uint64_t size);
pyg_error *vkp_api_stream_synchronize(pyg_stream *s);
pyg_error *vkp_api_stream_wait_event(pyg_stream *s, pyg_event *ev);
pyg_error *vkp_api_stream_write_async(pyg_stream *s, pyg_buffer *dst, uint64_t off, const void *src, uint64_t size);
pyg_error *vkp_stream_create_impl(pyg_device *d, pyg_stream **out);
void vkp_stream_destroy_impl(pyg_stream *s);
pyg_error *vkp_validation_selftest(pyg_device *d);
/* a buffer and its memory (vk_plugin.c): host 0 device-local; 1 host-visible, host-cached preferred;
 * 2 host-visible, device-local preferred; map is set for host memory; mtype_out may be NULL */
pyg_error *vkp_raw_buffer(pyg_device *d, uint64_t size, int host, VkBuffer *buf, VkDeviceMemory *mem, void **map, uint32_t *mtype_out);

pyg_error *vkp_raw_device_buffer(pyg_device *d, uint64_t size, VkBuffer *buf, VkDeviceMemory *mem, void **map);
pyg_error *vkp_raw_host_buffer(pyg_device *d, uint64_t size, VkBuffer *buf, VkDeviceMemory *mem, void **map);

/* sanitizer mode (vk_validation.c): PYGGML_VULKAN_VALIDATION=1 at plugin_init */
int vkp_validation_requested(void);
void vkp_validation_setup(PFN_vkGetInstanceProcAddr gipa, VkInstanceCreateInfo *ii);
void vkp_validation_attach(PFN_vkGetInstanceProcAddr gipa, VkInstance inst);
pyg_error *vkp_validation_check(void);   /* NULL, or PYG_ERR_SANITIZER with the messages */
int vkp_validation_active(void);
uint32_t vkp_validation_layer_version(void);   /* its Vulkan version where the layer is on, else 0 */
/* host-access checker (sanitizer mode; every call is a no-op when it is off) */
int vkp_val_stream_new(void);
void vkp_val_known(int stream, uint64_t value);          /* the host observed stream >= value */
void vkp_val_dep(int waiter, uint64_t wval, int on, uint64_t onval);
void vkp_val_queued(pyg_buffer *b, uint64_t lo, uint64_t hi, int write, int stream, uint64_t value);
void vkp_val_host_access(pyg_buffer *b, uint64_t lo, uint64_t hi, int write, const char *what);
void vkp_val_buffer_free(pyg_buffer *b);

/* profiling (vk_profile.c): device option "profile" (plugin-wide); option "profile_report" logs and restarts */
typedef struct vkp_prof_counters {
    uint64_t plan_computes, compute_ns;     /* graph_plan_compute calls, host ns inside them */
    uint64_t submits, submit_ns;            /* vkQueueSubmit */
    uint64_t recordings, commands, record_ns; /* command buffers recorded at run time, their commands */
    uint64_t descriptor_updates;            /* sets written (vkUpdateDescriptorSets) */
    uint64_t waits, wait_ns;                /* host waits on timeline semaphores */
    uint64_t writes, write_bytes, memcpy_ns; /* stream_write_async / staging */
    uint64_t reads, read_bytes;
    uint64_t staged_reads;                  /* read chunks copied through staging: one submit each */
} vkp_prof_counters;
extern int vkp_prof_on;                     /* option profile (plugin-wide) */
extern vkp_prof_counters vkp_prof;          /* updated without locks: approximate under threads */
int vkp_profiling(void);
uint64_t vkp_now_ns(void);
void vkp_prof_add_gpu(int op, int label, uint64_t ns, uint64_t bytes);   /* bytes: operands touched */
int vkp_prof_label(const char *name);       /* interned per-shader label id (-1: table full) */
const char *vkp_prof_label_name(int label); /* its name ("?" for -1) */
const char *vkp_shader_name(int shader);    /* vk_shaders.c */
/* option pipeline_stats (vk_pipe_stats.c): the flags a pipeline is created with, and the log of its statistics after */
VkPipelineCreateFlags vkp_pipe_stats_flags(const pyg_device *d);
void vkp_pipe_stats_log(pyg_device *d, int shader, const uint32_t spec[2], VkPipeline pipe);
pyg_error *vkp_prof_report(void);
#define VKP_PROF (vkp_prof_on > 0)

/* optional features (vk_caps.c): query before vkCreateDevice, chain what to enable into its pNext */
typedef struct vkp_caps_enable {
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm;
    VkPhysicalDeviceShaderIntegerDotProductFeatures idot;
    VkPhysicalDeviceSynchronization2FeaturesKHR sync2;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exec_props;
    struct vkp_cm_khr_features cm_khr;   /* (vk_khr_cm.h) */
    const char *exts[6]; uint32_t n_exts;
} vkp_caps_enable;
int vkp_cm_khr_usable(const pyg_device *d);   /* vk_options.c */
const uint32_t *vkp_shader_code(int shader, size_t *bytes);   /* vk_shaders.c: NULL where the build has none */
void vkp_caps_probe(pyg_device *d, PFN_vkGetInstanceProcAddr gipa, VkInstance inst, vkp_caps_enable *en, void **pnext);
/* the kernel-choice options (vk_options.c): their defaults, and the refusal of a value this device
 * cannot honour (NULL when the table may take it) */
void vkp_kernel_option_defaults(pyg_device *d);
pyg_error *vkp_kernel_option_check(pyg_device *d, const char *key, const char *value);

/* repacked q4_0 weights for mul_mat_vec_rp (vk_repack.c; the layout is in its header) */
struct vkp_repack;
uint64_t vkp_buffer_new_uid(void);
void vkp_buffer_written(pyg_buffer *b);           /* a host write into b: its repacked copies go stale */
void vkp_repack_buffer_freed(const pyg_buffer *b);
int vkp_repack_eligible(const pyg_device *d, const pyg_tensor *w);
/* the shared copy of weight w (one more reference), made on first use; NULL with *err set on failure,
 * NULL without it where w is not eligible */
struct vkp_repack *vkp_repack_acquire(pyg_device *d, const pyg_tensor *w, pyg_error **err);
/* the same, where a failure only logs a warning naming mul_mat node `node` (the caller runs another kernel) */
struct vkp_repack *vkp_repack_get(pyg_device *d, const pyg_tensor *w, const char *node);
void vkp_repack_release(struct vkp_repack *r);
VkBuffer vkp_repack_buffer(const struct vkp_repack *r, uint64_t *size);
/* before a plan runs on s: every stale copy of list[0..n) made again on s (then s synchronized) */
pyg_error *vkp_repack_ensure(struct vkp_repack *const *list, int n, pyg_stream *s);

/* graph (vk_graph.c, vk_matmul.c) */
int vkp_resolve(const pyg_tensor *t, const pyg_buffer **b, uint64_t *off);   /* buffer and offset of t's bytes */
int vkp_disjoint(const pyg_tensor *a, const pyg_tensor *b);   /* no byte in common (b NULL: 1; either without bytes: 0) */
uint32_t vkp_rows_per_wg(const pyg_device *d);   /* rows of a 64-invocation subgroup-per-row workgroup */
/* dq[0]: gemm_dq chose the f16 copy of the weights: its bytes (else 0); dq[1]: gemm_b16 the f16 copy of
 * the activations, dq[2] its rows per (ne2, ne3) and dq[3] its row length in elements (gemm_bg: padded) */
pyg_error *vkp_mul_mat_setup(pyg_device *d, const pyg_tensor *n, int *shader, uint32_t spec[2], uint64_t *work, uint32_t *ex,
                             uint64_t dq[4], const pyg_graph *g);   /* g: n's graph, or NULL (gemm_splitk counts the GEMMs
                             that share its stage) */
/* vk_matmul.c: 1 when the pipeline can be created; else logged, *disable set, 0 */
int vkp_pipeline_usable(pyg_device *d, int shader, const uint32_t spec[2], int *disable);
enum { VKP_COPY_AUTO, VKP_COPY_OFF, VKP_COPY_ON };   /* options gemm_dq (auto: the k-quants) and gemm_b16: auto, 0, 1 */
#define VKP_FA2_LIT_SPEC 0x200401u   /* flash_attn_dec2_d128g1's (D = 128 aside): G = 1, U = 4, 32-wide subgroups (vulkan.mk) */
int vkp_cm4_lit_has(uint32_t spec, uint32_t wg);   /* option gemm_lit: a literal mul_mat_cm4_khr build for it (vk_shaders.c) */
/* shader is one of mul_mat_cm4.comp's builds (NV, emulated, KHR) */
static inline int vkp_is_cm4(int shader) {
    return shader == VKP_SH_MUL_MAT_CM4 || shader == VKP_SH_MUL_MAT_CM4_EMU || shader == VKP_SH_MUL_MAT_CM4_KHR;
}
extern const char *const vkp_gemm_cfg_names[];   /* option gemm_cfg's values (vk_matmul.c) */
/* vk_attn.c: 1 when FLASH_ATTN_EXT node n runs on flash_attn_cm2.comp or flash_attn_cm.comp (shader, spec, work, ex filled) */
int vkp_fa_scalar_shader(const pyg_device *d);   /* flash_attn.comp or its FA_V2 build (option fa_v) */
/* fa_v=3: flash_attn_dec.comp for a KV-split node where its layout holds (vk_attn.c) */
int vkp_fa_dec_setup(pyg_device *d, const pyg_tensor *n, uint64_t rows, uint64_t ns, uint64_t align,
                     int *shader, uint32_t spec[2], uint32_t *ex, uint64_t *scratch_size);
/* fa_v=4: flash_attn_dec2.comp for a decode node of nkv > 64 cells where its layout holds (vk_attn.c): the shader, its
 * specialization, ex[0..4], its workgroups, splits and cells per split, the scratch bytes and the row counters' bytes at
 * their end */
int vkp_fa_dec2_setup(pyg_device *d, const pyg_tensor *n, uint64_t align, int *shader, uint32_t spec[2], uint32_t *ex,
                      uint64_t *work, uint32_t *ns, uint32_t *len, uint64_t *scratch_size, uint64_t *counters);
void vkp_fa_log(const pyg_tensor *n, int shader, uint32_t spec0);
const char *vkp_fa_acc_name(int shader, uint32_t spec0);   /* option fa_acc in flash_attn_cm3's kernel name: "pv16", "f16acc", "" */
int vkp_mv_rp_setup(pyg_device *d, const pyg_tensor *mm, uint32_t spec[2], uint64_t *work, uint32_t *ex);   /* matvec_rp */
int vkp_mv_rp_epi_setup(pyg_device *d, const pyg_tensor *mm, int shader, uint32_t spec[2], uint64_t *work,
                        uint32_t *ex);   /* fuse_rope_mv, fold_norm: mul_mat_vec_rpe / _rpn */
int vkp_rp_glu_setup(pyg_device *d, const pyg_tensor *a, const pyg_tensor *b, const pyg_tensor *sw, uint32_t spec[2],
                     uint64_t *work, uint32_t *ex);   /* matvec_rp: gate, up and their swiglu (mul_mat_vec_rpg) */
int vkp_mv3q_setup(pyg_device *d, const pyg_tensor *mm, uint32_t spec[2], uint64_t *work);
int vkp_norm_mv_setup(pyg_device *d, const pyg_tensor *mm, const pyg_tensor *x, const pyg_tensor *r, const pyg_tensor *w,
                      uint32_t spec[2], uint64_t *work);
int vkp_swiglu_mv_setup(pyg_device *d, const pyg_tensor *sw, const pyg_tensor *mm, uint32_t spec[2], uint64_t *work);
int vkp_glu_setup(pyg_device *d, const pyg_tensor *a, const pyg_tensor *b, const pyg_tensor *sw,
                  uint32_t spec[2], uint64_t *work);   /* fuse_glu (vk_matmul.c) */
int vkp_rope_store_fusable(pyg_device *d, const pyg_tensor *x, const pyg_tensor *s);   /* fuse_rope (vk_rope_store.c) */   /* the kernel a FLASH_ATTN_EXT node got (debug log) */
int vkp_fa_cm_setup(pyg_device *d, const pyg_tensor *n, uint64_t align, int *shader, uint32_t spec[2], uint64_t *work, uint32_t *ex);
/* flash_attn_cm2 (its shader in *shader, from vkp_fa_cm_setup) over KV splits where fa_cm_wgs asks for them: *shader,
 * ex and *work become flash_attn_cm2s's, *ns its splits (a merge pass follows), *scratch the partials' bytes */
int vkp_fa_cm_split(pyg_device *d, const pyg_tensor *n, int *shader, uint32_t spec[2], uint64_t *work, uint32_t *ex,
                    uint32_t *ns, uint64_t *scratch);
int32_t vkp_supports_op(pyg_device *d, const pyg_tensor *node);   /* vk_supports.c */
int vkp_same_shape(const pyg_tensor *a, const pyg_tensor *b);
pyg_error *vkp_plan_create(pyg_device *d, const pyg_graph *g, pyg_graph_plan **out);
void vkp_plan_destroy(pyg_graph_plan *plan);
pyg_error *vkp_plan_compute(pyg_graph_plan *plan, pyg_stream *s);

#endif
