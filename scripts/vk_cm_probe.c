/* scripts/vk_cm_probe.c — how fast the tensor cores run through VK_KHR_cooperative_matrix for each operand type and
 * accumulator layout, and whether int8 products can be scaled element by element into f32 sums (what a GEMM on
 * q4_0 x int8 blocks needs): the builds of scripts/vk_cm_probe.comp (VARIANTS below: f16 -> f32, f16 -> f16,
 * int8 -> int32, int8 -> int32 scaled into f32, then f16 products into 16x8 and 16x16 accumulators, 4 to 32 of them
 * a subgroup, sized by literals or by specialization constants, fragments reloaded every step or loaded once), each
 * timed with timestamp queries over a few runs (median TFLOPS or TOPS) and checked against the host's own
 * arithmetic on the same data. Also lists the device's cooperative-matrix shapes and types.
 *
 *   make build/vk_cm_probe && build/vk_cm_probe [--nv] [device-substring]      (exit status 1 if a build's check fails)
 *
 * --nv: the device also created with VK_NV_cooperative_matrix enabled, as the plugin creates it (vk_caps.c), to see
 * whether having both extensions changes what the KHR builds run at (H100: it does not). Where the device has
 * VK_KHR_pipeline_executable_properties, each build's line ends with the driver's statistics (registers, local memory),
 * to set beside mul_mat_cm4_khr's (option pipeline_stats).
 *
 * Needs only libvulkan.so.1 at run time (dlopen), so the binary built here runs on the GPU machine. */
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vk_cm_probe_spv.h"   /* probe_spv[NV], probe_spv_size[NV] (the Makefile's rule) */

#include "vk_khr_cm.h"         /* VK_KHR_cooperative_matrix's names and structures (newer than Debian 12's headers) */

#define NS 4          /* the shader's copies of the fragments */
#define SL 12         /* fragment slots per copy: A 0..3, B 4..11 */
#define FW 32         /* 16-byte words per slot */
#define WGS 4096      /* workgroups of each timed run */
#define TMAX 4096     /* the most result floats of a subgroup (FM x FN x 16 x CN) */

/* the shader's variants (its header's table): K of a product, columns of B and of the sums, fragments per
 * subgroup, the sums' kind (0 f32, 1 f16, 2 int32, 3 int32 scaled into f32), sizes by specialization, fragments
 * loaded once (1: from copy subgroup % NS, 2: from copy 0) */
static const struct { const char *name; int kd, cn, fm, fn, kind, spec, once; } VARIANTS[] = {
    { "f16 x f16 -> f32 16x16x16, 2x2 acc",                16, 16, 2, 2, 0, 0, 0 },
    { "f16 x f16 -> f16 16x16x16, 2x2 acc",                16, 16, 2, 2, 1, 0, 0 },
    { "int8 x int8 -> int32 16x16x32, 2x2 acc",            32, 16, 2, 2, 2, 0, 0 },
    { "int8 x int8 -> int32, scaled into f32, 2x2 acc",     32, 16, 2, 2, 3, 0, 0 },
    { "f16 x f16 -> f32 16x8x16, 2x4 acc",                 16, 8, 2, 4, 0, 0, 0 },
    { "f16 x f16 -> f16 16x8x16, 2x4 acc",                 16, 8, 2, 4, 1, 0, 0 },
    { "f16 x f16 -> f32 16x8x16, 2x4 acc, spec. sizes",    16, 8, 2, 4, 0, 1, 0 },
    { "f16 x f16 -> f32 16x16x16, 4x4 acc",                16, 16, 4, 4, 0, 0, 0 },
    { "f16 x f16 -> f32 16x8x16, 4x8 acc",                 16, 8, 4, 8, 0, 0, 0 },
    { "f16 x f16 -> f16 16x8x16, 4x8 acc",                 16, 8, 4, 8, 1, 0, 0 },
    { "f16 x f16 -> f32 16x16x16, 2x2 acc, frags once",    16, 16, 2, 2, 0, 0, 1 },
    { "f16 x f16 -> f32 16x8x16, 2x8 acc, frags once",     16, 8, 2, 8, 0, 0, 1 },
    { "  stored via a shared uvec4 tile, column-major",     16, 8, 2, 8, 0, 0, 1 },
    { "  stored via a shared float tile, column-major",     16, 8, 2, 8, 0, 0, 1 },
    { "  stored column-major",                              16, 8, 2, 8, 0, 0, 1 },
    { "  stored via a shared vec4 tile, column-major",      16, 8, 2, 8, 0, 0, 1 },
    { "  from copy 0 re-laid in rows of 9 words",           16, 8, 2, 8, 0, 0, 2 },
};
#define V_COLMAJOR 14   /* the variant whose results lie column-major in the output */
#define NV ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))
_Static_assert(sizeof probe_spv / sizeof probe_spv[0] == NV, "vulkan.mk's VK_CM_PROBE_V lists one build per VARIANTS entry");

static PFN_vkGetInstanceProcAddr gipa;
#define IFN(name) PFN_##name name = (PFN_##name)gipa(inst, #name)

static void die(const char *what, VkResult r) { fprintf(stderr, "vk_cm_probe: %s failed (%d)\n", what, (int)r); exit(2); }
#define CK(call) do { VkResult r_ = (call); if (r_ != VK_SUCCESS) die(#call, r_); } while (0)

static float h2f(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, x;
    if (e == 0) { float f = ldexpf((float)m, -24); return s ? -f : f; }
    x = s | ((e + 112) << 23) | (m << 13);
    float f; memcpy(&f, &x, 4); return f;
}
static uint16_t f2h_small(int q4) {   /* q4 / 4 for |q4| <= 8: exact in f16 */
    if (q4 == 0) return 0;
    float f = (float)q4 / 4.0f; uint32_t x; memcpy(&x, &f, 4);
    return (uint16_t)(((x >> 16) & 0x8000) | ((((x >> 23) & 255) - 112) << 10) | ((x >> 13) & 1023));
}

/* element k of row (A) or column (B) rc of the fragment in slot `slot` of copy c (as double) */
static double elem(const uint8_t *in, int i8, int c, int slot, int rc, int k) {
    const uint8_t *p = in + ((size_t)(c * SL + slot) * FW) * 16 + (size_t)rc * 32;
    if (!i8) { uint16_t h; memcpy(&h, p + 2 * k, 2); return h2f(h); }
    return (double)(int8_t)p[k];
}
static double scl(const uint8_t *in, int c, int x) {
    float f; memcpy(&f, in + (size_t)NS * SL * FW * 16 + ((size_t)c * 64 + x) * 4, 4); return f;
}

int main(int argc, char **argv) {
    int nv = 0, has_exec = 0;   /* has_exec: VK_KHR_pipeline_executable_properties (each build's registers, local memory) */
    const char *want_name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--nv")) nv = 1;
        else want_name = argv[i];
    }
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW);
    if (!lib) { fprintf(stderr, "vk_cm_probe: no libvulkan.so.1 (%s)\n", dlerror()); return 2; }
    gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    VkInstance inst = VK_NULL_HANDLE;
    PFN_vkCreateInstance vkCreateInstance = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
    VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_3 };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
    CK(vkCreateInstance(&ici, NULL, &inst));
    IFN(vkEnumeratePhysicalDevices); IFN(vkGetPhysicalDeviceProperties); IFN(vkGetPhysicalDeviceQueueFamilyProperties);
    IFN(vkCreateDevice); IFN(vkGetDeviceProcAddr); IFN(vkGetPhysicalDeviceMemoryProperties);
    IFN(vkEnumerateDeviceExtensionProperties);
    vkp_cm_khr_props_fn cmprops = (vkp_cm_khr_props_fn)gipa(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    uint32_t n = 0;
    CK(vkEnumeratePhysicalDevices(inst, &n, NULL));
    VkPhysicalDevice pds[16], pd = VK_NULL_HANDLE;
    if (n > 16) n = 16;
    CK(vkEnumeratePhysicalDevices(inst, &n, pds));
    VkPhysicalDeviceProperties props;
    for (uint32_t i = 0; i < n && !pd; i++) {
        vkGetPhysicalDeviceProperties(pds[i], &props);
        uint32_t ne = 0;
        vkEnumerateDeviceExtensionProperties(pds[i], NULL, &ne, NULL);
        VkExtensionProperties *ex = calloc(ne, sizeof *ex);
        vkEnumerateDeviceExtensionProperties(pds[i], NULL, &ne, ex);
        int has = 0, has_nv = 0, has_ex = 0;
        for (uint32_t j = 0; j < ne; j++) {
            has |= !strcmp(ex[j].extensionName, VKP_KHR_CM_EXT);
            has_nv |= !strcmp(ex[j].extensionName, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
            has_ex |= !strcmp(ex[j].extensionName, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
        }
        free(ex);
        if (has && (!nv || has_nv) && (!want_name || strstr(props.deviceName, want_name))) { pd = pds[i]; has_exec = has_ex; }
    }
    if (!pd || !cmprops) { fprintf(stderr, "vk_cm_probe: no device with VK_KHR_cooperative_matrix%s%s%s\n", nv ? " and VK_NV_cooperative_matrix" : "",
                                   want_name ? " named like " : "", want_name ? want_name : ""); return 2; }
    printf("device: %s (driver %u.%u)%s\n", props.deviceName, props.driverVersion >> 22, (props.driverVersion >> 14) & 255,
           nv ? ", VK_NV_cooperative_matrix enabled too" : "");
    uint32_t ncm = 0;
    cmprops(pd, &ncm, NULL);
    vkp_cm_khr_props *cm = calloc(ncm, sizeof *cm);
    for (uint32_t i = 0; i < ncm; i++) cm[i].sType = VKP_STYPE_CM_KHR_PROPERTIES;
    cmprops(pd, &ncm, cm);
    for (uint32_t i = 0; i < ncm; i++)
        printf("shape %ux%ux%u A %d B %d C %d R %d scope %d\n", cm[i].MSize, cm[i].NSize, cm[i].KSize, cm[i].AType, cm[i].BType,
               cm[i].CType, cm[i].ResultType, cm[i].scope);
    free(cm);

    uint32_t nq = 0, qf = UINT32_MAX;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, NULL);
    VkQueueFamilyProperties qp[32];
    if (nq > 32) nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qp);
    for (uint32_t i = 0; i < nq && qf == UINT32_MAX; i++) if (qp[i].queueFlags & VK_QUEUE_COMPUTE_BIT) qf = i;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = qf, .queueCount = 1, .pQueuePriorities = &prio };
    VkPhysicalDeviceCooperativeMatrixFeaturesNV nvf = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .cooperativeMatrix = VK_TRUE };
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exf = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pNext = nv ? &nvf : NULL, .pipelineExecutableInfo = VK_TRUE };
    struct vkp_cm_khr_features cmf = { .sType = VKP_STYPE_CM_KHR_FEATURES, .pNext = has_exec ? (void *)&exf : (nv ? (void *)&nvf : NULL),
        .cooperativeMatrix = VK_TRUE };
    VkPhysicalDeviceVulkan12Features f12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &cmf,
        .shaderFloat16 = VK_TRUE, .shaderInt8 = VK_TRUE, .vulkanMemoryModel = VK_TRUE, .vulkanMemoryModelDeviceScope = nv ? VK_TRUE : VK_FALSE };
    VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12 };
    const char *exts[3] = { VKP_KHR_CM_EXT };
    uint32_t next = 1;
    if (nv) exts[next++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    if (has_exec) exts[next++] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f2, .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &qci, .enabledExtensionCount = next, .ppEnabledExtensionNames = exts };
    VkDevice dev;
    CK(vkCreateDevice(pd, &dci, NULL, &dev));
    PFN_vkGetDeviceProcAddr gdpa = vkGetDeviceProcAddr;
#define DFN(name) PFN_##name name = (PFN_##name)gdpa(dev, #name)
    DFN(vkGetDeviceQueue); DFN(vkCreateBuffer); DFN(vkGetBufferMemoryRequirements); DFN(vkAllocateMemory);
    DFN(vkBindBufferMemory); DFN(vkMapMemory); DFN(vkCreateShaderModule); DFN(vkCreateDescriptorSetLayout);
    DFN(vkCreatePipelineLayout); DFN(vkCreateComputePipelines); DFN(vkCreateDescriptorPool); DFN(vkAllocateDescriptorSets);
    DFN(vkUpdateDescriptorSets); DFN(vkCreateCommandPool); DFN(vkAllocateCommandBuffers); DFN(vkBeginCommandBuffer);
    DFN(vkCmdBindPipeline); DFN(vkCmdBindDescriptorSets); DFN(vkCmdPushConstants); DFN(vkCmdDispatch); DFN(vkEndCommandBuffer);
    DFN(vkQueueSubmit); DFN(vkQueueWaitIdle); DFN(vkCreateQueryPool); DFN(vkCmdResetQueryPool); DFN(vkCmdWriteTimestamp);
    DFN(vkGetQueryPoolResults); DFN(vkResetCommandBuffer);
    VkQueue q;
    vkGetDeviceQueue(dev, qf, 0, &q);

    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    VkBuffer buf[2]; void *map[2];
    const VkDeviceSize size[2] = { (VkDeviceSize)(NS * SL * FW + NS * 16) * 16, (VkDeviceSize)8 * 4 * TMAX * 4 };
    for (int b = 0; b < 2; b++) {
        VkBufferCreateInfo bi = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size[b], .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT };
        CK(vkCreateBuffer(dev, &bi, NULL, &buf[b]));
        VkMemoryRequirements mr;
        vkGetBufferMemoryRequirements(dev, buf[b], &mr);
        uint32_t want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, mt = UINT32_MAX;
        for (uint32_t i = 0; i < mp.memoryTypeCount && mt == UINT32_MAX; i++)
            if ((mr.memoryTypeBits >> i & 1) && (mp.memoryTypes[i].propertyFlags & want) == want) mt = i;
        VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = mr.size, .memoryTypeIndex = mt };
        VkDeviceMemory mem;
        CK(vkAllocateMemory(dev, &ai, NULL, &mem));
        CK(vkBindBufferMemory(dev, buf[b], mem, 0));
        CK(vkMapMemory(dev, mem, 0, size[b], 0, &map[b]));
    }
    VkDescriptorSetLayoutBinding lb[2] = {
        { 0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL },
        { 1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL } };
    VkDescriptorSetLayoutCreateInfo dli = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 2, .pBindings = lb };
    VkDescriptorSetLayout dsl;
    CK(vkCreateDescriptorSetLayout(dev, &dli, NULL, &dsl));
    VkPushConstantRange pcr = { VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 };
    VkPipelineLayoutCreateInfo pli = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1, .pSetLayouts = &dsl,
        .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr };
    VkPipelineLayout pl;
    CK(vkCreatePipelineLayout(dev, &pli, NULL, &pl));
    VkDescriptorPoolSize ps = { VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2 };
    VkDescriptorPoolCreateInfo dpi = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &ps };
    VkDescriptorPool dp;
    CK(vkCreateDescriptorPool(dev, &dpi, NULL, &dp));
    VkDescriptorSetAllocateInfo dsa = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = dp, .descriptorSetCount = 1, .pSetLayouts = &dsl };
    VkDescriptorSet ds;
    CK(vkAllocateDescriptorSets(dev, &dsa, &ds));
    VkDescriptorBufferInfo dbi[2] = { { buf[0], 0, VK_WHOLE_SIZE }, { buf[1], 0, VK_WHOLE_SIZE } };
    VkWriteDescriptorSet w[2];
    for (int b = 0; b < 2; b++)
        w[b] = (VkWriteDescriptorSet){ .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = ds, .dstBinding = (uint32_t)b,
            .descriptorCount = 1, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &dbi[b] };
    vkUpdateDescriptorSets(dev, 2, w, 0, NULL);
    VkCommandPoolCreateInfo cpi = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = qf };
    VkCommandPool cp;
    CK(vkCreateCommandPool(dev, &cpi, NULL, &cp));
    VkCommandBufferAllocateInfo cai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = cp, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
    VkCommandBuffer cb;
    CK(vkAllocateCommandBuffers(dev, &cai, &cb));
    VkQueryPoolCreateInfo qpi = { .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2 };
    VkQueryPool qpool;
    CK(vkCreateQueryPool(dev, &qpi, NULL, &qpool));

    int bad = 0;
    uint8_t *in = map[0];
    srand(7);
    for (int v = 0; v < NV; v++) {
        int kd = VARIANTS[v].kd, cn = VARIANTS[v].cn, fm_n = VARIANTS[v].fm, fn_n = VARIANTS[v].fn, kind = VARIANTS[v].kind;
        int i8 = kind >= 2;
        /* the data: f16 values q / 4 (q in -8..8) or int8 -8..7 (A) and -127..127 (B); scales 2^-k */
        for (int c = 0; c < NS; c++)
            for (int f = 0; f < SL; f++)
                for (int e = 0; e < 512; e++) {
                    uint8_t *p = in + ((size_t)(c * SL + f) * FW) * 16;
                    if (!i8) { if (e < 256) { uint16_t h = f2h_small(rand() % 17 - 8); memcpy(p + 2 * e, &h, 2); } }
                    else p[e] = (uint8_t)(int8_t)(f < 4 ? rand() % 16 - 8 : rand() % 255 - 127);
                }
        for (int i = 0; i < NS * 64; i++) { float s = ldexpf(1.0f + (float)(rand() % 8) / 8.0f, -(rand() % 6)); memcpy(in + (size_t)NS * SL * FW * 16 + 4 * (size_t)i, &s, 4); }
        VkShaderModuleCreateInfo smi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = probe_spv_size[v], .pCode = probe_spv[v] };
        VkShaderModule sm;
        CK(vkCreateShaderModule(dev, &smi, NULL, &sm));
        uint32_t sv[3] = { (uint32_t)fm_n, 128, (uint32_t)fn_n };   /* (variants with spec: FM, the workgroup size, FN) */
        VkSpecializationMapEntry sme[3] = { { 0, 0, 4 }, { 1, 4, 4 }, { 2, 8, 4 } };
        VkSpecializationInfo spi = { 3, sme, sizeof sv, sv };
        VkComputePipelineCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, .layout = pl,
            .flags = has_exec ? VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR : 0,
            .stage = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = sm, .pName = "main",
                       .pSpecializationInfo = VARIANTS[v].spec ? &spi : NULL } };
        VkPipeline pipe;
        CK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &pci, NULL, &pipe));
        char stats[512] = "";
        if (has_exec) {   /* the driver's statistics of the one executable, as "name=value" pairs (numbers only) */
            PFN_vkGetPipelineExecutableStatisticsKHR exstats = (PFN_vkGetPipelineExecutableStatisticsKHR)gdpa(dev, "vkGetPipelineExecutableStatisticsKHR");
            VkPipelineExecutableInfoKHR ei = { .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = pipe, .executableIndex = 0 };
            VkPipelineExecutableStatisticKHR st[16];
            uint32_t ns = 16;
            for (uint32_t i = 0; i < ns; i++) st[i] = (VkPipelineExecutableStatisticKHR){ .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR };
            if (exstats && exstats(dev, &ei, &ns, st) >= 0)
                for (uint32_t i = 0, at = 0; i < ns && at + 80 < sizeof stats; i++)
                    if (st[i].format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR || st[i].format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR)
                        at += (uint32_t)snprintf(stats + at, sizeof stats - at, "%s%s=%llu", at ? ", " : "; ", st[i].name,
                                                 (unsigned long long)st[i].value.u64);
        }
        double best[7]; int nrun = 0;
        uint32_t iter = 64, wgs = WGS;
        for (int run = -2; run < 7; run++) {   /* two to size the run, six timed, then one with the check's counts */
            uint32_t it = run == 6 ? 24 : iter, g = run == 6 ? 8 : wgs;
            VkCommandBufferBeginInfo bb = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
            CK(vkResetCommandBuffer(cb, 0));
            CK(vkBeginCommandBuffer(cb, &bb));
            vkCmdResetQueryPool(cb, qpool, 0, 2);
            vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
            vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, NULL);
            vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &it);
            vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, qpool, 0);
            vkCmdDispatch(cb, g, 1, 1);
            vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qpool, 1);
            CK(vkEndCommandBuffer(cb));
            VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb };
            CK(vkQueueSubmit(q, 1, &si, VK_NULL_HANDLE));
            CK(vkQueueWaitIdle(q));
            uint64_t ts[2];
            CK(vkGetQueryPoolResults(dev, qpool, 0, 2, sizeof ts, ts, 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
            double sec = (double)(ts[1] - ts[0]) * props.limits.timestampPeriod * 1e-9;
            if (run < 0) {   /* aim at about 40 ms */
                double want = iter * 0.040 / (sec > 1e-6 ? sec : 1e-6);
                iter = want > 1e6 ? 1000000u : want < 64 ? 64u : (uint32_t)want;
            } else if (run < 6) {
                double ops = (double)g * 4 * fm_n * fn_n * it * 2.0 * 16 * cn * kd;
                best[nrun++] = ops / sec * 1e-12;
            }
        }
        for (int i = 0; i < nrun; i++) for (int j = i + 1; j < nrun; j++) if (best[j] < best[i]) { double t = best[i]; best[i] = best[j]; best[j] = t; }
        /* the check: every workgroup's subgroup s, tile (fm, fn) after 24 steps, copy c = (step + s) % NS (fragments
         * loaded once: s % NS throughout, or copy 0) */
        const float *out = map[1];
        double maxerr = 0;
        for (int g = 0; g < 8; g++)
            for (int s = 0; s < 4; s++)
                for (int fm = 0; fm < fm_n; fm++)
                    for (int fn = 0; fn < fn_n; fn++)
                        for (int r = 0; r < 16; r++)
                            for (int col = 0; col < cn; col++) {
                                double ref = 0;
                                for (int st = 0; st < 24; st++) {
                                    int c = VARIANTS[v].once == 2 ? 0 : VARIANTS[v].once ? s % NS : (st + s) % NS;
                                    double dot = 0;
                                    for (int k = 0; k < kd; k++) dot += elem(in, i8, c, fm, r, k) * elem(in, i8, c, 4 + fn, col, k);
                                    ref += kind == 3 ? dot * scl(in, c, fm * 16 + r) * scl(in, c, 32 + fn * 16 + col) : dot;
                                }
                                size_t base = ((size_t)(g * 4 + s) * fm_n * fn_n + fm * fn_n + fn) * 16 * cn;
                                double got = out[base + (v == V_COLMAJOR ? (size_t)col * 16 + r : (size_t)r * cn + col)];
                                double err = fabs(got - ref) / (fabs(ref) > 1 ? fabs(ref) : 1);
                                if (err > maxerr) maxerr = err;
                            }
        /* f16 sums of values q / 4 over 24 x 16 terms: within f16 rounding; the f32 and int32 ones exact; the scaled
         * int8 sums within float rounding */
        int ok = maxerr <= (kind == 3 ? 1e-5 : kind == 1 ? 1e-2 : 0);
        bad |= !ok;
        printf("V%-2d %-50s %8.1f T/s median of %d (min %.1f, max %.1f), %u steps x %u workgroups; check: max rel. error %.3g %s%s\n",
               v, VARIANTS[v].name, best[nrun / 2], nrun, best[0], best[nrun - 1], iter, wgs, maxerr, ok ? "ok" : "WRONG", stats);
        fflush(stdout);
    }
    return bad;
}
