/* plugins/vulkan/vk_shaders.c — the SPIR-V of every shader, compiled by glslc at build time
 * (glslc -mfmt=c writes a C initializer list) and embedded here. */
#include <stddef.h>
#include <stdint.h>
#include "vk_internal.h"

#define VKP_SPV(name) static const uint32_t spv_##name[] =
VKP_SPV(elementwise)
#include "elementwise.spv.h"
;
VKP_SPV(norm)
#include "norm.spv.h"
;
VKP_SPV(soft_max)
#include "soft_max.spv.h"
;
VKP_SPV(argmax)
#include "argmax.spv.h"
;
VKP_SPV(rope)
#include "rope.spv.h"
;
VKP_SPV(get_rows)
#include "get_rows.spv.h"
;
VKP_SPV(set_rows)
#include "set_rows.spv.h"
;
VKP_SPV(mul_mat_vec)
#include "mul_mat_vec.spv.h"
;
VKP_SPV(mul_mat)
#include "mul_mat.spv.h"
;
VKP_SPV(flash_attn)
#include "flash_attn.spv.h"
;
VKP_SPV(rows_sg)
#include "rows_sg.spv.h"
;
VKP_SPV(norm_mul)
#include "norm_mul.spv.h"
;
VKP_SPV(norm_mul_wg)
#include "norm_mul_wg.spv.h"
;
VKP_SPV(mul_mat_vec2)
#include "mul_mat_vec2.spv.h"
;
VKP_SPV(mul_mat_vec3)
#include "mul_mat_vec3.spv.h"
;
VKP_SPV(mul_mat_cm)
#include "mul_mat_cm.spv.h"
;
VKP_SPV(mul_mat_cm_emu)
#include "mul_mat_cm_emu.spv.h"
;
VKP_SPV(mul_mat_cm128)
#include "mul_mat_cm128.spv.h"
;
VKP_SPV(mul_mat_cm128_emu)
#include "mul_mat_cm128_emu.spv.h"
;
VKP_SPV(mul_mat_cm2)
#include "mul_mat_cm2.spv.h"
;
VKP_SPV(mul_mat_cm2_emu)
#include "mul_mat_cm2_emu.spv.h"
;
VKP_SPV(mul_mat_cm2_128)
#include "mul_mat_cm2_128.spv.h"
;
VKP_SPV(mul_mat_cm2_128_emu)
#include "mul_mat_cm2_128_emu.spv.h"
;
VKP_SPV(mul_mat_cm3)
#include "mul_mat_cm3.spv.h"
;
VKP_SPV(mul_mat_cm3_emu)
#include "mul_mat_cm3_emu.spv.h"
;
VKP_SPV(mul_mat_cm3_128)
#include "mul_mat_cm3_128.spv.h"
;
VKP_SPV(mul_mat_cm3_128_emu)
#include "mul_mat_cm3_128_emu.spv.h"
;
VKP_SPV(flash_attn2)
#include "flash_attn2.spv.h"
;
VKP_SPV(flash_attn_dec)
#include "flash_attn_dec.spv.h"
;
VKP_SPV(flash_attn_dec2)
#include "flash_attn_dec2.spv.h"
;
VKP_SPV(mul_mat_vec3p)
#include "mul_mat_vec3p.spv.h"
;
VKP_SPV(rope_store)
#include "rope_store.spv.h"
;
VKP_SPV(mul_mat_vec3g)
#include "mul_mat_vec3g.spv.h"
;
VKP_SPV(mul_mat_vec3i)
#include "mul_mat_vec3i.spv.h"
;
VKP_SPV(mul_mat_vec3w)
#include "mul_mat_vec3w.spv.h"
;
VKP_SPV(mul_mat_vec3s)
#include "mul_mat_vec3s.spv.h"
;
VKP_SPV(mul_mat_vec3n)
#include "mul_mat_vec3n.spv.h"
;
VKP_SPV(mul_mat_vec4)
#include "mul_mat_vec4.spv.h"
;
VKP_SPV(mul_mat_vec3q)
#include "mul_mat_vec3q.spv.h"
;
VKP_SPV(repack)
#include "repack.spv.h"
;
VKP_SPV(mul_mat_vec_rp)
#include "mul_mat_vec_rp.spv.h"
;
VKP_SPV(mul_mat_vec_rpg)
#include "mul_mat_vec_rpg.spv.h"
;
VKP_SPV(mul_mat_vec_rpe)
#include "mul_mat_vec_rpe.spv.h"
;
VKP_SPV(mul_mat_vec_rp4)
#include "mul_mat_vec_rp4.spv.h"
;
VKP_SPV(mul_mat_vec_rpe4)
#include "mul_mat_vec_rpe4.spv.h"
;
VKP_SPV(mul_mat_vec_rp_q0j1)
#include "mul_mat_vec_rp_q0j1.spv.h"
;
VKP_SPV(mul_mat_vec_rp4_q0j1)
#include "mul_mat_vec_rp4_q0j1.spv.h"
;
VKP_SPV(mul_mat_vec_rpe_q0j1)
#include "mul_mat_vec_rpe_q0j1.spv.h"
;
VKP_SPV(mul_mat_vec_rpe4_q0j1)
#include "mul_mat_vec_rpe4_q0j1.spv.h"
;
VKP_SPV(mul_mat_vec_rpg_q0j1)
#include "mul_mat_vec_rpg_q0j1.spv.h"
;
VKP_SPV(mul_mat_vec_rp_q0j2)
#include "mul_mat_vec_rp_q0j2.spv.h"
;
VKP_SPV(mul_mat_vec_rp4_q0j2)
#include "mul_mat_vec_rp4_q0j2.spv.h"
;
VKP_SPV(mul_mat_vec_rpe_q0j2)
#include "mul_mat_vec_rpe_q0j2.spv.h"
;
VKP_SPV(mul_mat_vec_rpe4_q0j2)
#include "mul_mat_vec_rpe4_q0j2.spv.h"
;
VKP_SPV(mul_mat_vec_rpg_q0j2)
#include "mul_mat_vec_rpg_q0j2.spv.h"
;
VKP_SPV(mul_mat_vec_rpn)
#include "mul_mat_vec_rpn.spv.h"
;
VKP_SPV(mul_mat_vec_rpn_nw)
#include "mul_mat_vec_rpn_nw.spv.h"
;
VKP_SPV(mul_mat_vec_rpe_nw)
#include "mul_mat_vec_rpe_nw.spv.h"
;
VKP_SPV(mul_mat_vec_rpg_nw)
#include "mul_mat_vec_rpg_nw.spv.h"
;
VKP_SPV(norm_mul_reg_q8)
#include "norm_mul_reg_q8.spv.h"
;
VKP_SPV(norm_mul_reg_add_q8)
#include "norm_mul_reg_add_q8.spv.h"
;
VKP_SPV(flash_attn_cm)
#include "flash_attn_cm.spv.h"
;
VKP_SPV(flash_attn_cm_emu)
#include "flash_attn_cm_emu.spv.h"
;
VKP_SPV(flash_attn_cm2)
#include "flash_attn_cm2.spv.h"
;
VKP_SPV(flash_attn_cm2_emu)
#include "flash_attn_cm2_emu.spv.h"
;
VKP_SPV(dequant)
#include "dequant.spv.h"
;
VKP_SPV(flash_attn_cm2s)
#include "flash_attn_cm2s.spv.h"
;
VKP_SPV(flash_attn_cm2s_emu)
#include "flash_attn_cm2s_emu.spv.h"
;
VKP_SPV(norm_mul_reg_b16)
#include "norm_mul_reg_b16.spv.h"
;
VKP_SPV(norm_mul_reg_add_b16)
#include "norm_mul_reg_add_b16.spv.h"
;
VKP_SPV(flash_attn_cm3)
#include "flash_attn_cm3.spv.h"
;
VKP_SPV(flash_attn_cm3_emu)
#include "flash_attn_cm3_emu.spv.h"
;
VKP_SPV(splitk_add)
#include "splitk_add.spv.h"
;
VKP_SPV(fa_mask_span)
#include "fa_mask_span.spv.h"
;
VKP_SPV(swiglu8)
#include "swiglu8.spv.h"
;
VKP_SPV(swiglu8_b16)
#include "swiglu8_b16.spv.h"
;
VKP_SPV(norm_mul_add)
#include "norm_mul_add.spv.h"
;
VKP_SPV(norm_mul_wg_add)
#include "norm_mul_wg_add.spv.h"
;
VKP_SPV(norm_mul_reg)
#include "norm_mul_reg.spv.h"
;
VKP_SPV(norm_mul_reg_add)
#include "norm_mul_reg_add.spv.h"
;
VKP_SPV(mul_mat_cm4)
#include "mul_mat_cm4.spv.h"
;
VKP_SPV(mul_mat_cm4_emu)
#include "mul_mat_cm4_emu.spv.h"
;
VKP_SPV(mul_mat_cm4_khr)   /* {0} where the build had no glslang 13 (scripts/glslang_khr.py): no code */
#include "mul_mat_cm4_khr.spv.h"
;
VKP_SPV(flash_attn_dec2_d128g1)   /* option fa_lit */
#include "flash_attn_dec2_d128g1.spv.h"
;
/* option gemm_lit: mul_mat_cm4's KHR build with a specialization and workgroup size as literals, per entry of
 * vulkan.mk's CM4_LITS (each {0} where the build had no glslang 13) */
typedef struct { uint32_t spec, wg; const uint32_t *code; size_t bytes; } vkp_cm4_lit;
#include "cm4_lit.h"

/* the literal build of mul_mat_cm4_khr for specialization spec (bit 31 clear) and wg invocations, or NULL */
static const vkp_cm4_lit *cm4_lit_find(uint32_t spec, uint32_t wg) {
    for (size_t i = 0; i < sizeof vkp_cm4_lits / sizeof vkp_cm4_lits[0]; i++)
        if (vkp_cm4_lits[i].spec == spec && vkp_cm4_lits[i].wg == wg && vkp_cm4_lits[i].bytes > sizeof(uint32_t)) return &vkp_cm4_lits[i];
    return NULL;
}

int vkp_cm4_lit_has(uint32_t spec, uint32_t wg) { return cm4_lit_find(spec, wg) != NULL; }

const uint32_t *vkp_shader_code(int shader, size_t *bytes) {
#define VKP_CASE(id, name) case id: *bytes = sizeof spv_##name; return spv_##name;
    switch (shader) {
    VKP_CASE(VKP_SH_ELEMENTWISE, elementwise)
    VKP_CASE(VKP_SH_NORM, norm)
    VKP_CASE(VKP_SH_SOFT_MAX, soft_max)
    VKP_CASE(VKP_SH_ARGMAX, argmax)
    VKP_CASE(VKP_SH_ROPE, rope)
    VKP_CASE(VKP_SH_GET_ROWS, get_rows)
    VKP_CASE(VKP_SH_SET_ROWS, set_rows)
    VKP_CASE(VKP_SH_MUL_MAT_VEC, mul_mat_vec)
    VKP_CASE(VKP_SH_MUL_MAT, mul_mat)
    VKP_CASE(VKP_SH_FLASH_ATTN, flash_attn)
    VKP_CASE(VKP_SH_ROWS_SG, rows_sg)
    VKP_CASE(VKP_SH_NORM_MUL, norm_mul)
    VKP_CASE(VKP_SH_NORM_MUL_WG, norm_mul_wg)
    VKP_CASE(VKP_SH_MUL_MAT_VEC2, mul_mat_vec2)
    VKP_CASE(VKP_SH_MUL_MAT_VEC3, mul_mat_vec3)
    VKP_CASE(VKP_SH_MUL_MAT_CM, mul_mat_cm)
    VKP_CASE(VKP_SH_MUL_MAT_CM_EMU, mul_mat_cm_emu)
    VKP_CASE(VKP_SH_MUL_MAT_CM128, mul_mat_cm128)
    VKP_CASE(VKP_SH_MUL_MAT_CM128_EMU, mul_mat_cm128_emu)
    VKP_CASE(VKP_SH_MUL_MAT_CM2, mul_mat_cm2)
    VKP_CASE(VKP_SH_MUL_MAT_CM2_EMU, mul_mat_cm2_emu)
    VKP_CASE(VKP_SH_MUL_MAT_CM2_128, mul_mat_cm2_128)
    VKP_CASE(VKP_SH_MUL_MAT_CM2_128_EMU, mul_mat_cm2_128_emu)
    VKP_CASE(VKP_SH_MUL_MAT_CM3, mul_mat_cm3)
    VKP_CASE(VKP_SH_MUL_MAT_CM3_EMU, mul_mat_cm3_emu)
    VKP_CASE(VKP_SH_MUL_MAT_CM3_128, mul_mat_cm3_128)
    VKP_CASE(VKP_SH_MUL_MAT_CM3_128_EMU, mul_mat_cm3_128_emu)
    VKP_CASE(VKP_SH_FLASH_ATTN2, flash_attn2)
    VKP_CASE(VKP_SH_FLASH_ATTN_DEC, flash_attn_dec)
    VKP_CASE(VKP_SH_FLASH_ATTN_DEC2, flash_attn_dec2)
    VKP_CASE(VKP_SH_MUL_MAT_VEC3P, mul_mat_vec3p)
    VKP_CASE(VKP_SH_ROPE_STORE, rope_store)
    VKP_CASE(VKP_SH_MUL_MAT_VEC3G, mul_mat_vec3g)
    VKP_CASE(VKP_SH_MUL_MAT_VEC3I, mul_mat_vec3i)
    VKP_CASE(VKP_SH_MUL_MAT_VEC3W, mul_mat_vec3w)
    VKP_CASE(VKP_SH_MUL_MAT_VEC4, mul_mat_vec4)
    VKP_CASE(VKP_SH_MUL_MAT_VEC3Q, mul_mat_vec3q)
    VKP_CASE(VKP_SH_REPACK, repack)
    VKP_CASE(VKP_SH_MUL_MAT_VEC_RP, mul_mat_vec_rp)
    VKP_CASE(VKP_SH_MUL_MAT_VEC_RPG, mul_mat_vec_rpg)
    VKP_CASE(VKP_SH_MUL_MAT_VEC_RPE, mul_mat_vec_rpe)
    VKP_CASE(VKP_SH_MUL_MAT_VEC_RPN, mul_mat_vec_rpn)
    VKP_CASE(VKP_SH_NORM_MUL_REG_Q8, norm_mul_reg_q8)
    VKP_CASE(VKP_SH_NORM_MUL_REG_ADD_Q8, norm_mul_reg_add_q8)
    VKP_CASE(VKP_SH_MUL_MAT_VEC3S, mul_mat_vec3s)
    VKP_CASE(VKP_SH_MUL_MAT_VEC3N, mul_mat_vec3n)
    VKP_CASE(VKP_SH_MUL_MAT_CM4, mul_mat_cm4)
    VKP_CASE(VKP_SH_MUL_MAT_CM4_EMU, mul_mat_cm4_emu)
    case VKP_SH_MUL_MAT_CM4_KHR:
        if (sizeof spv_mul_mat_cm4_khr == sizeof(uint32_t)) { *bytes = 0; return NULL; }   /* the {0} placeholder */
        *bytes = sizeof spv_mul_mat_cm4_khr; return spv_mul_mat_cm4_khr;
    VKP_CASE(VKP_SH_FLASH_ATTN_CM, flash_attn_cm)
    VKP_CASE(VKP_SH_FLASH_ATTN_CM_EMU, flash_attn_cm_emu)
    VKP_CASE(VKP_SH_FLASH_ATTN_CM2, flash_attn_cm2)
    VKP_CASE(VKP_SH_FLASH_ATTN_CM2_EMU, flash_attn_cm2_emu)
    VKP_CASE(VKP_SH_DEQUANT, dequant)
    VKP_CASE(VKP_SH_FLASH_ATTN_CM2S, flash_attn_cm2s)
    VKP_CASE(VKP_SH_FLASH_ATTN_CM2S_EMU, flash_attn_cm2s_emu)
    VKP_CASE(VKP_SH_NORM_MUL_REG_B16, norm_mul_reg_b16)
    VKP_CASE(VKP_SH_NORM_MUL_REG_ADD_B16, norm_mul_reg_add_b16)
    VKP_CASE(VKP_SH_FLASH_ATTN_CM3, flash_attn_cm3)
    VKP_CASE(VKP_SH_FLASH_ATTN_CM3_EMU, flash_attn_cm3_emu)
    VKP_CASE(VKP_SH_SWIGLU8, swiglu8)
    VKP_CASE(VKP_SH_SPLITK_ADD, splitk_add)
    VKP_CASE(VKP_SH_FA_MASK_SPAN, fa_mask_span)
    VKP_CASE(VKP_SH_SWIGLU8_B16, swiglu8_b16)
    VKP_CASE(VKP_SH_NORM_MUL_ADD, norm_mul_add)
    VKP_CASE(VKP_SH_NORM_MUL_WG_ADD, norm_mul_wg_add)
    VKP_CASE(VKP_SH_NORM_MUL_REG, norm_mul_reg)
    VKP_CASE(VKP_SH_NORM_MUL_REG_ADD, norm_mul_reg_add)
    default: *bytes = 0; return NULL;
    }
#undef VKP_CASE
}

/* the module a pipeline of shader with specialization spec is made from, so that these choices stay one shader id to the
 * plan: flash_attn_dec2 with bit 31 of its second specialization word (option fa_lit) from flash_attn_dec2_d128g1;
 * mul_mat_cm4_khr with specialization bit 31 (option gemm_lit) from its literal build for the rest of the
 * specialization; with specialization bit 15 (option rp_lit) mul_mat_vec_rp / _rpe / _rpg from their q4_0 builds with J literal;
 * mul_mat_vec_rp / _rpe with bit 14 (option rp_rows=4) from their 4-row builds; mul_mat_vec_rpn / _rpe / _rpg with bit 17
 * (option fold_nodes) from their RP_NWR builds; else shader's */
const uint32_t *vkp_shader_code_spec(int shader, const uint32_t spec[2], size_t *bytes) {
    const vkp_cm4_lit *lit = shader == VKP_SH_MUL_MAT_CM4_KHR && (spec[0] >> 31) ? cm4_lit_find(spec[0] & ~(1u << 31), spec[1]) : NULL;
    if (lit) { *bytes = lit->bytes; return lit->code; }   /* option gemm_lit (vk_matmul.c sets bit 31 where one matches) */
    if (shader == VKP_SH_FLASH_ATTN_DEC2 && spec[0] == 128u && spec[1] == (VKP_FA2_LIT_SPEC | 1u << 31)) {   /* option fa_lit */
        *bytes = sizeof spv_flash_attn_dec2_d128g1;
        return spv_flash_attn_dec2_d128g1;
    }
    /* mul_mat_vec_rp, _rpe, _rpg by rows (bit 14: 4) and blocks per invocation (bit 15: J literal, from bits 8-10);
     * an empty entry: the shader's own module */
#define VKP_MOD(name) { spv_##name, sizeof spv_##name }
    static const struct { const uint32_t *code; size_t bytes; } rp_mods[3][2][3] = {   /* [rp, rpe, rpg][8, 4 rows][J: spec, 1, 2] */
        { { { 0 }, VKP_MOD(mul_mat_vec_rp_q0j1), VKP_MOD(mul_mat_vec_rp_q0j2) },
          { VKP_MOD(mul_mat_vec_rp4), VKP_MOD(mul_mat_vec_rp4_q0j1), VKP_MOD(mul_mat_vec_rp4_q0j2) } },
        { { { 0 }, VKP_MOD(mul_mat_vec_rpe_q0j1), VKP_MOD(mul_mat_vec_rpe_q0j2) },
          { VKP_MOD(mul_mat_vec_rpe4), VKP_MOD(mul_mat_vec_rpe4_q0j1), VKP_MOD(mul_mat_vec_rpe4_q0j2) } },
        { { { 0 }, VKP_MOD(mul_mat_vec_rpg_q0j1), VKP_MOD(mul_mat_vec_rpg_q0j2) }, { { 0 } } },   /* (_rpg: 4 + 4 rows always) */
    };
#undef VKP_MOD
    if (spec[0] >> 17 & 1u) {   /* option fold_nodes: the builds writing the add + norm's nodes (8 rows, J from the specialization) */
        if (shader == VKP_SH_MUL_MAT_VEC_RPN) { *bytes = sizeof spv_mul_mat_vec_rpn_nw; return spv_mul_mat_vec_rpn_nw; }
        if (shader == VKP_SH_MUL_MAT_VEC_RPE) { *bytes = sizeof spv_mul_mat_vec_rpe_nw; return spv_mul_mat_vec_rpe_nw; }
        if (shader == VKP_SH_MUL_MAT_VEC_RPG) { *bytes = sizeof spv_mul_mat_vec_rpg_nw; return spv_mul_mat_vec_rpg_nw; }
    }
    int kind = shader == VKP_SH_MUL_MAT_VEC_RP ? 0 : shader == VKP_SH_MUL_MAT_VEC_RPE ? 1 : shader == VKP_SH_MUL_MAT_VEC_RPG ? 2 : -1;
    uint32_t j = spec[0] >> 15 & 1u ? spec[0] >> 8 & 7u : 0u;   /* (rp_plan sets bit 15 for J = 1 or 2 alone) */
    if (kind >= 0 && j <= 2u) {
        const uint32_t *code = rp_mods[kind][spec[0] >> 14 & 1u][j].code;
        if (code) { *bytes = rp_mods[kind][spec[0] >> 14 & 1u][j].bytes; return code; }
    }
    return vkp_shader_code(shader, bytes);
}

/* the shader's file name (profile labels) */
const char *vkp_shader_name(int shader) {
    static const char *names[VKP_SH_COUNT] = {
        [VKP_SH_ELEMENTWISE] = "elementwise", [VKP_SH_NORM] = "norm", [VKP_SH_SOFT_MAX] = "soft_max",
        [VKP_SH_ARGMAX] = "argmax", [VKP_SH_ROPE] = "rope", [VKP_SH_GET_ROWS] = "get_rows",
        [VKP_SH_SET_ROWS] = "set_rows", [VKP_SH_MUL_MAT_VEC] = "mul_mat_vec", [VKP_SH_MUL_MAT] = "mul_mat",
        [VKP_SH_FLASH_ATTN] = "flash_attn", [VKP_SH_ROWS_SG] = "rows_sg", [VKP_SH_NORM_MUL] = "norm_mul",
        [VKP_SH_NORM_MUL_WG] = "norm_mul_wg", [VKP_SH_MUL_MAT_VEC2] = "mul_mat_vec2", [VKP_SH_MUL_MAT_CM] = "mul_mat_cm",
        [VKP_SH_MUL_MAT_CM_EMU] = "mul_mat_cm_emu", [VKP_SH_FLASH_ATTN_CM] = "flash_attn_cm",
        [VKP_SH_FLASH_ATTN_CM_EMU] = "flash_attn_cm_emu", [VKP_SH_NORM_MUL_ADD] = "norm_mul",
        [VKP_SH_NORM_MUL_WG_ADD] = "norm_mul_wg", [VKP_SH_MUL_MAT_CM128] = "mul_mat_cm128",
        [VKP_SH_MUL_MAT_CM128_EMU] = "mul_mat_cm128_emu", [VKP_SH_MUL_MAT_CM2] = "mul_mat_cm2",
        [VKP_SH_MUL_MAT_CM2_EMU] = "mul_mat_cm2_emu", [VKP_SH_MUL_MAT_CM2_128] = "mul_mat_cm2_128",
        [VKP_SH_MUL_MAT_CM2_128_EMU] = "mul_mat_cm2_128_emu", [VKP_SH_NORM_MUL_REG] = "norm_mul_reg",
        [VKP_SH_NORM_MUL_REG_ADD] = "norm_mul_reg", [VKP_SH_MUL_MAT_VEC3] = "mul_mat_vec3",
        [VKP_SH_MUL_MAT_CM3] = "mul_mat_cm3", [VKP_SH_MUL_MAT_CM3_EMU] = "mul_mat_cm3_emu",
        [VKP_SH_MUL_MAT_CM3_128] = "mul_mat_cm3_128", [VKP_SH_MUL_MAT_CM3_128_EMU] = "mul_mat_cm3_128_emu",
        [VKP_SH_FLASH_ATTN2] = "flash_attn2", [VKP_SH_FLASH_ATTN_DEC] = "flash_attn_dec", [VKP_SH_FLASH_ATTN_DEC2] = "flash_attn_dec2",
        [VKP_SH_MUL_MAT_VEC3P] = "mul_mat_vec3p", [VKP_SH_ROPE_STORE] = "rope_store",
        [VKP_SH_MUL_MAT_VEC3G] = "mul_mat_vec3g", [VKP_SH_MUL_MAT_VEC3I] = "mul_mat_vec3i",
        [VKP_SH_MUL_MAT_VEC3W] = "mul_mat_vec3w", [VKP_SH_MUL_MAT_VEC4] = "mul_mat_vec4", [VKP_SH_MUL_MAT_VEC3Q] = "mul_mat_vec3q",
        [VKP_SH_NORM_MUL_REG_Q8] = "norm_mul_reg_q8", [VKP_SH_NORM_MUL_REG_ADD_Q8] = "norm_mul_reg_q8",
        [VKP_SH_MUL_MAT_VEC3S] = "mul_mat_vec3s", [VKP_SH_MUL_MAT_VEC3N] = "mul_mat_vec3n", [VKP_SH_MUL_MAT_CM4] = "mul_mat_cm4", [VKP_SH_MUL_MAT_CM4_EMU] = "mul_mat_cm4_emu",
        [VKP_SH_MUL_MAT_CM4_KHR] = "mul_mat_cm4_khr", [VKP_SH_FLASH_ATTN_CM2] = "flash_attn_cm2",
        [VKP_SH_FLASH_ATTN_CM2_EMU] = "flash_attn_cm2_emu", [VKP_SH_DEQUANT] = "dequant", [VKP_SH_SWIGLU8] = "swiglu8", [VKP_SH_FLASH_ATTN_CM3] = "flash_attn_cm3", [VKP_SH_FLASH_ATTN_CM3_EMU] = "flash_attn_cm3_emu", [VKP_SH_SPLITK_ADD] = "splitk_add", [VKP_SH_FA_MASK_SPAN] = "fa_mask_span", [VKP_SH_NORM_MUL_REG_B16] = "norm_mul_reg_b16", [VKP_SH_NORM_MUL_REG_ADD_B16] = "norm_mul_reg_b16", [VKP_SH_FLASH_ATTN_CM2S] = "flash_attn_cm2s", [VKP_SH_FLASH_ATTN_CM2S_EMU] = "flash_attn_cm2s_emu", [VKP_SH_SWIGLU8_B16] = "swiglu8_b16",
        [VKP_SH_REPACK] = "repack", [VKP_SH_MUL_MAT_VEC_RP] = "mul_mat_vec_rp", [VKP_SH_MUL_MAT_VEC_RPG] = "mul_mat_vec_rpg", [VKP_SH_MUL_MAT_VEC_RPE] = "mul_mat_vec_rpe", [VKP_SH_MUL_MAT_VEC_RPN] = "mul_mat_vec_rpn",
    };
    return shader >= 0 && shader < VKP_SH_COUNT && names[shader] ? names[shader] : "?";
}
