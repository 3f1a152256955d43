/* plugins/vulkan/vk_caps.c — optional device features, probed before vkCreateDevice.
 *
 * Cooperative matrices (the tensor cores through Vulkan): VK_NV_cooperative_matrix with a subgroup
 * 16x16x16 shape of f16 A/B and f32 C/D, plus shaderFloat16 for the f16 tiles in shared memory and
 * vulkanMemoryModel (glslang declares it in every module that uses GL_NV_cooperative_matrix) with its
 * device scope (once the model is enabled, every module's Device-scope barrier needs it: flash_attn_dec).
 * The NV extension for every tensor-core shader, because the glslc of the build machine (Debian 12's
 * shaderc 2023.2 / glslang 11.13) knows GL_NV_cooperative_matrix but not GL_KHR_cooperative_matrix;
 * where the NV one is usable, VK_KHR_cooperative_matrix is enabled beside it when the device has
 * it with the same shape (d->coopmat_khr: mul_mat_cm4's KHR build, compiled by glslang 13 from PyPI,
 * runs there). A device lacking any piece (lavapipe lacks both) runs the tiled GEMM.
 *
 * The integer dot product (VK_KHR_shader_integer_dot_product's shaderIntegerDotProduct: OpSDot on
 * packed 4 x int8 words, which mul_mat_vec3i reads through GL_EXT_spirv_intrinsics) is enabled
 * where the device has it (NVIDIA, lavapipe); d->int_dot says so. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "vk_internal.h"

/* (VK_KHR_cooperative_matrix's names and structures: vk_khr_cm.h) */

/* The KHR extension beside the NV one (whose requirements it shares: f16, the memory model): enabled
 * where the device has its feature and a subgroup 16x16x16 f16*f16+f32 shape (d->coopmat_khr), and
 * not under a validation layer older than the extension (1.3.255): such a layer rejects its feature
 * structure in vkCreateDevice's chain (VUID-VkDeviceCreateInfo-pNext-pNext; Debian 12's 1.3.239 on an
 * H100 at 45737e2), so every validated run would report it. The NV extension serves there. */
static void probe_cm_khr(pyg_device *d, PFN_vkGetInstanceProcAddr gipa, VkInstance inst, vkp_caps_enable *en, void **pnext) {
    PFN_vkGetPhysicalDeviceFeatures2 feat2 = (PFN_vkGetPhysicalDeviceFeatures2)gipa(inst, "vkGetPhysicalDeviceFeatures2");
    vkp_cm_khr_props_fn props = (vkp_cm_khr_props_fn)gipa(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    struct vkp_cm_khr_features f = { .sType = VKP_STYPE_CM_KHR_FEATURES };
    VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f };
    if (!feat2 || !props) return;
    feat2(d->phys, &f2);
    uint32_t np = 0;
    int shape = 0;
    if (f.cooperativeMatrix && props(d->phys, &np, NULL) == VK_SUCCESS && np > 0) {
        vkp_cm_khr_props *pr = calloc(np, sizeof *pr);
        if (pr) {
            for (uint32_t i = 0; i < np; i++) pr[i].sType = VKP_STYPE_CM_KHR_PROPERTIES;
            if (props(d->phys, &np, pr) == VK_SUCCESS)
                for (uint32_t i = 0; i < np; i++) {   /* (the debug log lists them: M x N x K, A B C result types, scope) */
                    vkp_log(PYG_LOG_DEBUG, "%s: VK_KHR_cooperative_matrix shape %ux%ux%u types %d %d %d %d scope %d", d->props.deviceName,
                            pr[i].MSize, pr[i].NSize, pr[i].KSize, (int)pr[i].AType, (int)pr[i].BType, (int)pr[i].CType,
                            (int)pr[i].ResultType, (int)pr[i].scope);
                    shape |= pr[i].MSize == 16 && pr[i].NSize == 16 && pr[i].KSize == 16 && pr[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                             pr[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV && pr[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                             pr[i].ResultType == VK_COMPONENT_TYPE_FLOAT32_NV && pr[i].scope == VK_SCOPE_SUBGROUP_NV;
                }
            free(pr);
        }
    }
    vkp_log(PYG_LOG_DEBUG, "%s: VK_KHR_cooperative_matrix feature %d, 16x16x16 f16/f32 subgroup shape %d", d->props.deviceName,
            (int)f.cooperativeMatrix, shape);
    if (!shape) return;
    uint32_t lv = vkp_validation_layer_version();
    if (lv && (lv & 0x0FFFFFFFu) < (VK_MAKE_API_VERSION(0, 1, 3, 255) & 0x0FFFFFFFu)) {
        vkp_log(PYG_LOG_INFO, "%s: VK_KHR_cooperative_matrix left off: the validation layer (Vulkan %u.%u.%u) predates it",
                d->props.deviceName, VK_API_VERSION_MAJOR(lv), VK_API_VERSION_MINOR(lv), VK_API_VERSION_PATCH(lv));
        d->coopmat_khr_layer = 1;
        return;
    }
    en->cm_khr = (struct vkp_cm_khr_features){ .sType = VKP_STYPE_CM_KHR_FEATURES, .pNext = *pnext, .cooperativeMatrix = VK_TRUE };
    *pnext = &en->cm_khr;
    en->exts[en->n_exts++] = VKP_KHR_CM_EXT;
    d->coopmat_khr = 1;
}

static int has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++) if (strcmp(e[i].extensionName, name) == 0) return 1;
    return 0;
}

/* One extension's feature structure f (size bytes, its sType set; the feature the VkBool32 `at` bytes in) probed; where
 * the device has the feature, f is left asking for it alone, joins vkCreateDevice's chain (*pnext) and the extension is
 * enabled. Returns whether it was. */
static int chain_feature(PFN_vkGetPhysicalDeviceFeatures2 feat2, VkPhysicalDevice phys, void *f, size_t size, size_t at,
                         const char *ext, vkp_caps_enable *en, void **pnext) {
    VkBaseOutStructure *b = f;
    VkStructureType st = b->sType;
    memset(f, 0, size);
    b->sType = st;
    VkPhysicalDeviceFeatures2 fi = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = f };
    feat2(phys, &fi);
    VkBool32 *feature = (VkBool32 *)((char *)f + at), on = *feature;
    memset(f, 0, size);
    b->sType = st;
    if (!on) return 0;
    *feature = VK_TRUE;
    b->pNext = *pnext;
    *pnext = f;
    en->exts[en->n_exts++] = ext;
    return 1;
}

void vkp_caps_probe(pyg_device *d, PFN_vkGetInstanceProcAddr gipa, VkInstance inst, vkp_caps_enable *en, void **pnext) {
    memset(en, 0, sizeof *en);
    d->coopmat = d->coopmat_khr = d->coopmat_khr_layer = d->int_dot = 0;
    PFN_vkEnumerateDeviceExtensionProperties enum_ext =
        (PFN_vkEnumerateDeviceExtensionProperties)gipa(inst, "vkEnumerateDeviceExtensionProperties");
    PFN_vkGetPhysicalDeviceFeatures2 feat2 = (PFN_vkGetPhysicalDeviceFeatures2)gipa(inst, "vkGetPhysicalDeviceFeatures2");
    if (!enum_ext || !feat2) return;
    uint32_t n = 0;
    if (enum_ext(d->phys, NULL, &n, NULL) != VK_SUCCESS || n == 0) return;
    VkExtensionProperties *ext = calloc(n, sizeof *ext);
    if (!ext) return;
    if (enum_ext(d->phys, NULL, &n, ext) != VK_SUCCESS) n = 0;
    int nv_cm = has_ext(ext, n, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    int khr_cm = has_ext(ext, n, VKP_KHR_CM_EXT);
    int int_dot = has_ext(ext, n, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    int sync2 = has_ext(ext, n, VK_KHR_SYNCHRONIZATION_2_EXTENSION_NAME);
    int exec_props = has_ext(ext, n, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    free(ext);
    /* option pipeline_stats: the driver's statistics of each pipeline it compiles (vk_pipe_stats.c) */
    en->exec_props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
    d->exec_props = exec_props && chain_feature(feat2, d->phys, &en->exec_props, sizeof en->exec_props,
        offsetof(VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR, pipelineExecutableInfo),
        VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME, en, pnext);
    en->idot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
    d->int_dot = int_dot && chain_feature(feat2, d->phys, &en->idot, sizeof en->idot,
        offsetof(VkPhysicalDeviceShaderIntegerDotProductFeatures, shaderIntegerDotProduct),
        VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME, en, pnext);
    /* option barrier=sync2: stage barriers that name storage accesses only */
    en->sync2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SYNCHRONIZATION_2_FEATURES_KHR;
    d->sync2 = sync2 && chain_feature(feat2, d->phys, &en->sync2, sizeof en->sync2,
        offsetof(VkPhysicalDeviceSynchronization2FeaturesKHR, synchronization2), VK_KHR_SYNCHRONIZATION_2_EXTENSION_NAME, en, pnext);
    if (!nv_cm) {
        vkp_log(PYG_LOG_DEBUG, "%s: no VK_NV_cooperative_matrix: tiled GEMM", d->props.deviceName);
        return;
    }
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cmf = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV };
    VkPhysicalDeviceVulkan12Features f12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &cmf };
    VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12 };
    feat2(d->phys, &f2);
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV cmp =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)gipa(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    int shape = 0;
    uint32_t np = 0;
    if (cmp && cmp(d->phys, &np, NULL) == VK_SUCCESS && np > 0) {
        VkCooperativeMatrixPropertiesNV *pr = calloc(np, sizeof *pr);
        if (pr) {
            for (uint32_t i = 0; i < np; i++) pr[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
            if (cmp(d->phys, &np, pr) == VK_SUCCESS)
                for (uint32_t i = 0; i < np && !shape; i++)
                    shape = pr[i].MSize == 16 && pr[i].NSize == 16 && pr[i].KSize == 16 &&
                            pr[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV && pr[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                            pr[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV && pr[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                            pr[i].scope == VK_SCOPE_SUBGROUP_NV;
            free(pr);
        }
    }
    if (!cmf.cooperativeMatrix || !f12.shaderFloat16 || !f12.vulkanMemoryModel || !f12.vulkanMemoryModelDeviceScope || !shape ||
        !d->subgroup_arith) {
        vkp_log(PYG_LOG_INFO, "%s: VK_NV_cooperative_matrix present but unusable (feature %d, shaderFloat16 %d, "
                "vulkanMemoryModel %d, its device scope %d, 16x16x16 f16/f32 subgroup shape %d, subgroup arithmetic %d): tiled GEMM",
                d->props.deviceName, (int)cmf.cooperativeMatrix, (int)f12.shaderFloat16, (int)f12.vulkanMemoryModel,
                (int)f12.vulkanMemoryModelDeviceScope, shape, d->subgroup_arith);
        return;
    }
    en->cm = (VkPhysicalDeviceCooperativeMatrixFeaturesNV){ .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .pNext = *pnext, .cooperativeMatrix = VK_TRUE };
    *pnext = &en->cm;
    en->exts[en->n_exts++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    d->coopmat = 1;
    d->float16 = 1;
    if (khr_cm) probe_cm_khr(d, gipa, inst, en, pnext);
}
