/* plugins/vulkan/vk_plugin.c — the Vulkan plugin's ABI table, errors and logging, the loader and
 * devices; streams (timeline-semaphore ordered submissions on one compute queue), events and
 * buffers are in vk_stream.c. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vk_internal.h"
#include "pyggml/options.h"

/* ---------------------------------------------------------------- errors and logging */

struct pyg_error {
    int32_t code;
    int32_t is_static;
    char msg[4096];
};

static pyg_error g_oom = { PYG_ERR_OUT_OF_MEMORY, 1, "vulkan: out of host memory creating an error" };
static const pyg_host_info *g_host;

pyg_error *vkp_err(int32_t code, const char *fmt, ...) {
    pyg_error *e = malloc(sizeof *e);
    if (!e) return &g_oom;
    e->code = code;
    e->is_static = 0;
    int n = snprintf(e->msg, sizeof e->msg, "vulkan: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg + n, sizeof e->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return e;
}

pyg_error *vkp_vk_err(VkResult r, const char *what) {
    int32_t code = PYG_ERR_DEVICE;
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY) code = PYG_ERR_OUT_OF_MEMORY;
    return vkp_err(code, "%s failed (VkResult %d)", what, (int)r);
}

void vkp_log(int32_t level, const char *fmt, ...) {
    if (!g_host || !g_host->log) return;
    char buf[2048];   /* (pipeline_stats lines run long) */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_host->log(g_host->log_user_data, level, "vulkan", buf);
}

const char *vkp_error_text(const pyg_error *e) { return e ? e->msg : ""; }
void vkp_error_free(pyg_error *e) { if (e && !e->is_static) free(e); }
static int32_t api_error_code(const pyg_error *e) { return e ? e->code : PYG_OK; }
static const char *api_error_message(const pyg_error *e) { return e ? e->msg : ""; }
static void api_error_destroy(pyg_error *e) { vkp_error_free(e); }

/* ---------------------------------------------------------------- loader and devices */

static void *g_lib;
static PFN_vkGetInstanceProcAddr g_gipa;
static VkInstance g_instance;
static vkp_instance_fns g_ifn;
static pyg_device *g_devs;
static int32_t g_ndev;
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init_done;
static pyg_error *g_init_err;   /* kept: plugin_init answers the same every time */

extern const uint32_t *vkp_shader_code(int shader, size_t *bytes);
extern const uint32_t *vkp_shader_code_spec(int shader, const uint32_t spec[2], size_t *bytes);

static pyg_error *copy_err(const pyg_error *e) {
    return e ? vkp_err(e->code, "%s", e->msg + 8) : NULL;
}

static uint32_t find_mem_type(const pyg_device *d, uint32_t bits, VkMemoryPropertyFlags want,
                              VkMemoryPropertyFlags prefer) {
    uint32_t fallback = UINT32_MAX;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++) {
        if (!(bits & (1u << i))) continue;
        VkMemoryPropertyFlags f = d->mem.memoryTypes[i].propertyFlags;
        if ((f & want) != want) continue;
        if ((f & prefer) == prefer) return i;
        if (fallback == UINT32_MAX) fallback = i;
    }
    return fallback;
}

pyg_error *vkp_raw_buffer(pyg_device *d, uint64_t size, int host, VkBuffer *buf,
                             VkDeviceMemory *mem, void **map, uint32_t *mtype_out) {
    VkBufferCreateInfo bi = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE };
    VkResult r = d->fn.vkCreateBuffer(d->dev, &bi, NULL, buf);
    if (r != VK_SUCCESS) return vkp_vk_err(r, "vkCreateBuffer");
    VkMemoryRequirements req;
    d->fn.vkGetBufferMemoryRequirements(d->dev, *buf, &req);
    /* host = 1: host-visible, host-cached preferred (staging, read-backs); host = 2: host-visible,
     * device-local preferred (plan parameter blocks: the GPU reads them, the host writes once) */
    uint32_t mt = host
        ? find_mem_type(d, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                        host == 2 ? VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT : VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
        : find_mem_type(d, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (mt == UINT32_MAX && !host) mt = find_mem_type(d, req.memoryTypeBits, 0, 0);
    if (mt == UINT32_MAX) {
        d->fn.vkDestroyBuffer(d->dev, *buf, NULL);
        return vkp_err(PYG_ERR_DEVICE, "no suitable memory type for a %s buffer", host ? "host" : "device");
    }
    VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .allocationSize = req.size, .memoryTypeIndex = mt };
    r = d->fn.vkAllocateMemory(d->dev, &ai, NULL, mem);
    if (r != VK_SUCCESS) {
        d->fn.vkDestroyBuffer(d->dev, *buf, NULL);
        return vkp_err(PYG_ERR_OUT_OF_MEMORY, "cannot allocate %llu bytes of %s memory (VkResult %d)",
                       (unsigned long long)size, host ? "host" : "device", (int)r);
    }
    r = d->fn.vkBindBufferMemory(d->dev, *buf, *mem, 0);
    if (r != VK_SUCCESS) goto fail;
    *map = NULL;
    VkMemoryPropertyFlags f = d->mem.memoryTypes[mt].propertyFlags;
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    if ((f & hv) == hv) {
        r = d->fn.vkMapMemory(d->dev, *mem, 0, VK_WHOLE_SIZE, 0, map);
        if (r != VK_SUCCESS) { if (host) goto fail; *map = NULL; }
    }
    if (mtype_out) *mtype_out = mt;
    return NULL;
fail:
    d->fn.vkFreeMemory(d->dev, *mem, NULL);
    d->fn.vkDestroyBuffer(d->dev, *buf, NULL);
    return vkp_vk_err(r, "binding/mapping buffer memory");
}


static pyg_error *device_open(pyg_device *d) {
    VkPhysicalDeviceVulkan12Features f12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES };
    VkPhysicalDeviceVulkan11Features f11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12 };
    VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11 };
    if (d->props.apiVersion < VK_API_VERSION_1_2)   /* before chaining 1.1/1.2 feature structs */
        return vkp_err(PYG_ERR_NO_DEVICE, "%s: Vulkan 1.2 needed", d->props.deviceName);
    g_ifn.vkGetPhysicalDeviceFeatures2(d->phys, &f2);
    if (!f12.timelineSemaphore || !f11.storageBuffer16BitAccess || !f2.features.shaderInt16)
        return vkp_err(PYG_ERR_NO_DEVICE, "%s lacks timelineSemaphore, storageBuffer16BitAccess or shaderInt16",
                       d->props.deviceName);
    VkPhysicalDeviceSubgroupProperties sg = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES };
    VkPhysicalDeviceMaintenance3Properties m3 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &sg };
    VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3 };
    g_ifn.vkGetPhysicalDeviceProperties2(d->phys, &p2);
    d->subgroup_size = sg.subgroupSize;
    d->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                        (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) && sg.subgroupSize >= 1;
    d->subgroup_hw = d->subgroup_arith;   /* option subgroups=0 forces the shared-memory kernels */
    d->subgroup_shuffle = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) && sg.subgroupSize >= 4;
    d->opts = (vkp_options){ .fa_split = VKP_AUTO, .fuse = 1, .norm_wg = VKP_AUTO, .subgroups = 1 };
    d->max_alloc = m3.maxMemoryAllocationSize;
    d->max_range = d->props.limits.maxStorageBufferRange;

    uint32_t nq = 0;
    g_ifn.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32) nq = 32;
    g_ifn.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    d->queue_family = UINT32_MAX;
#ifndef VKP_QUEUE_ANY   /* an A/B build (-DVKP_QUEUE_ANY): the first family with compute, graphics or not;
                         * on the H200 at a5eb50c no better: tg128 1b q4_0 639 vs 659 t/s, 7b 238 vs 247,
                         * pp512 7.7k vs 9.9k and 1.5k vs 2.0k, a dependent node no cheaper
                         * (bench/results/gpu-vulkan-defaults-anyq-h200-20261202T1840/anyq/) */
    for (uint32_t i = 0; i < nq; i++)   /* prefer a compute queue without graphics */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) { d->queue_family = i; break; }
#endif
    for (uint32_t i = 0; i < nq && d->queue_family == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) d->queue_family = i;
    if (d->queue_family == UINT32_MAX)
        return vkp_err(PYG_ERR_NO_DEVICE, "%s has no compute queue", d->props.deviceName);

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = d->queue_family, .queueCount = 1, .pQueuePriorities = &prio };
    vkp_caps_enable en;
    void *chain = NULL;
    vkp_caps_probe(d, g_gipa, g_instance, &en, &chain);   /* cooperative matrices (vk_caps.c) */
    VkPhysicalDeviceVulkan12Features e12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = chain, .timelineSemaphore = VK_TRUE, .storageBuffer8BitAccess = f12.storageBuffer8BitAccess,
        .shaderFloat16 = d->float16 ? VK_TRUE : VK_FALSE, .vulkanMemoryModel = d->coopmat ? VK_TRUE : VK_FALSE,
        /* with the memory model enabled, a Device-scope barrier (flash_attn_dec's memoryBarrierBuffer) is
         * valid only with this too (VUID-RuntimeSpirv-vulkanMemoryModel-06265); vk_caps.c requires it */
        .vulkanMemoryModelDeviceScope = d->coopmat ? VK_TRUE : VK_FALSE };
    VkPhysicalDeviceVulkan11Features e11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
        .pNext = &e12, .storageBuffer16BitAccess = VK_TRUE };
    VkPhysicalDeviceFeatures2 e2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &e11 };
    e2.features.shaderInt16 = VK_TRUE;
    VkDeviceCreateInfo di = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &e2,
        .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi,
        .enabledExtensionCount = en.n_exts, .ppEnabledExtensionNames = en.exts };
    VkResult r = g_ifn.vkCreateDevice(d->phys, &di, NULL, &d->dev);
    if (r != VK_SUCCESS && en.n_exts) {   /* the optional features are what failed: without them */
        vkp_log(PYG_LOG_WARN, "%s: vkCreateDevice with the optional extensions failed (VkResult %d); retrying without",
                d->props.deviceName, (int)r);
        d->coopmat = d->coopmat_khr = d->float16 = d->int_dot = d->sync2 = d->exec_props = 0;
        e12.pNext = NULL;
        e12.shaderFloat16 = e12.vulkanMemoryModel = e12.vulkanMemoryModelDeviceScope = VK_FALSE;
        di.enabledExtensionCount = 0;
        r = g_ifn.vkCreateDevice(d->phys, &di, NULL, &d->dev);
    }
    if (r != VK_SUCCESS) return vkp_vk_err(r, "vkCreateDevice");
    vkp_kernel_option_defaults(d);
#define VKP_LOAD_DEV(name) \
    d->fn.name = (PFN_##name)g_ifn.vkGetDeviceProcAddr(d->dev, #name); \
    if (!d->fn.name) return vkp_err(PYG_ERR_NO_DEVICE, "device function %s missing", #name);
    VKP_DEVICE_FUNCS(VKP_LOAD_DEV)
#undef VKP_LOAD_DEV
    d->fn.vkGetDeviceQueue(d->dev, d->queue_family, 0, &d->queue);
    d->barrier2 = d->sync2 ? (PFN_vkCmdPipelineBarrier2KHR)g_ifn.vkGetDeviceProcAddr(d->dev, "vkCmdPipelineBarrier2KHR") : NULL;
    if (!d->barrier2) d->sync2 = 0;
    d->exec_props_fn = d->exec_props ? (PFN_vkGetPipelineExecutablePropertiesKHR)g_ifn.vkGetDeviceProcAddr(d->dev, "vkGetPipelineExecutablePropertiesKHR") : NULL;
    d->exec_stats_fn = d->exec_props ? (PFN_vkGetPipelineExecutableStatisticsKHR)g_ifn.vkGetDeviceProcAddr(d->dev, "vkGetPipelineExecutableStatisticsKHR") : NULL;
    if (!d->exec_props_fn || !d->exec_stats_fn) d->exec_props = 0;
    d->timestamps = qf[d->queue_family].timestampValidBits > 0 && d->props.limits.timestampPeriod > 0;
    d->ts_period = d->props.limits.timestampPeriod;
    pthread_mutex_init(&d->queue_lock, NULL);
    pthread_mutex_init(&d->lock, NULL);

    g_ifn.vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
    d->heap_size = 0;
    for (uint32_t i = 0; i < d->mem.memoryHeapCount; i++)
        if ((d->mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && d->mem.memoryHeaps[i].size > d->heap_size)
            d->heap_size = d->mem.memoryHeaps[i].size;

    VkDescriptorSetLayoutBinding b[VKP_NSET];
    for (int i = 0; i < VKP_NSET; i++)
        b[i] = (VkDescriptorSetLayoutBinding){ .binding = (uint32_t)i,
            .descriptorType = i == VKP_NBIND ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT };
    VkDescriptorSetLayoutCreateInfo dl = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .bindingCount = VKP_NSET, .pBindings = b };
    r = d->fn.vkCreateDescriptorSetLayout(d->dev, &dl, NULL, &d->dsl);
    if (r != VK_SUCCESS) return vkp_vk_err(r, "vkCreateDescriptorSetLayout");
    VkPipelineLayoutCreateInfo pl = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
        .setLayoutCount = 1, .pSetLayouts = &d->dsl };
    r = d->fn.vkCreatePipelineLayout(d->dev, &pl, NULL, &d->layout);
    if (r != VK_SUCCESS) return vkp_vk_err(r, "vkCreatePipelineLayout");

    void *map;
    pyg_error *e = vkp_raw_buffer(d, 256, 0, &d->dummy, &d->dummy_mem, &map, &d->mt_device);
    if (e) return e;
    d->device_mem_mapped = map != NULL;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)   /* (which memory the device buffers are in) */
        vkp_log(PYG_LOG_DEBUG, "%s: memory type %u: heap %u (%llu MiB%s), flags 0x%x%s", d->props.deviceName, i,
                d->mem.memoryTypes[i].heapIndex, (unsigned long long)(d->mem.memoryHeaps[d->mem.memoryTypes[i].heapIndex].size >> 20),
                d->mem.memoryHeaps[d->mem.memoryTypes[i].heapIndex].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT ? ", device-local" : "",
                (unsigned)d->mem.memoryTypes[i].propertyFlags, i == d->mt_device ? ": device buffers" : "");
    e = vkp_stream_create_impl(d, &d->internal);
    if (e) return e;
    switch (d->props.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: d->device_type = PYG_DEVICE_IGPU; break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: d->device_type = PYG_DEVICE_ACCEL; break;  /* lavapipe: not the CPU backend */
    default: d->device_type = PYG_DEVICE_GPU; break;
    }
    return NULL;
}

static pyg_error *init_impl(void) {
    g_lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) g_lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) return vkp_err(PYG_ERR_NO_DEVICE, "no Vulkan loader (dlopen libvulkan.so.1: %s)", dlerror());
    g_gipa = (PFN_vkGetInstanceProcAddr)dlsym(g_lib, "vkGetInstanceProcAddr");
    if (!g_gipa) return vkp_err(PYG_ERR_NO_DEVICE, "libvulkan.so.1 has no vkGetInstanceProcAddr");
    PFN_vkEnumerateInstanceVersion env = (PFN_vkEnumerateInstanceVersion)g_gipa(NULL, "vkEnumerateInstanceVersion");
    uint32_t ver = VK_API_VERSION_1_0;
    if (env) env(&ver);
    if (ver < VK_API_VERSION_1_2) return vkp_err(PYG_ERR_NO_DEVICE, "Vulkan loader is older than 1.2");
    PFN_vkCreateInstance ci = (PFN_vkCreateInstance)g_gipa(NULL, "vkCreateInstance");
    if (!ci) return vkp_err(PYG_ERR_NO_DEVICE, "loader has no vkCreateInstance");
    VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "pyggml",
        .pEngineName = "pyggml", .apiVersion = VK_API_VERSION_1_2 };
    VkInstanceCreateInfo ii = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
    vkp_validation_setup(g_gipa, &ii);   /* sanitizer mode: layer, debug utils, sync validation */
    VkResult r = ci(&ii, NULL, &g_instance);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return vkp_err(PYG_ERR_NO_DEVICE, "no Vulkan driver (ICD) installed");
    if (r != VK_SUCCESS) return vkp_err(PYG_ERR_NO_DEVICE, "vkCreateInstance failed (VkResult %d)", (int)r);
    vkp_validation_attach(g_gipa, g_instance);
#define VKP_LOAD_INST(name) \
    g_ifn.name = (PFN_##name)g_gipa(g_instance, #name); \
    if (!g_ifn.name) return vkp_err(PYG_ERR_NO_DEVICE, "instance function %s missing", #name);
    VKP_INSTANCE_FUNCS(VKP_LOAD_INST)
#undef VKP_LOAD_INST
    uint32_t n = 0;
    r = g_ifn.vkEnumeratePhysicalDevices(g_instance, &n, NULL);
    if (r != VK_SUCCESS || n == 0) return vkp_err(PYG_ERR_NO_DEVICE, "no Vulkan physical device");
    VkPhysicalDevice *phys = calloc(n, sizeof *phys);
    g_devs = calloc(n, sizeof *g_devs);
    if (!phys || !g_devs) { free(phys); return vkp_err(PYG_ERR_OUT_OF_MEMORY, "init"); }
    g_ifn.vkEnumeratePhysicalDevices(g_instance, &n, phys);
    char reasons[300] = "";
    for (uint32_t i = 0; i < n; i++) {
        pyg_device *d = &g_devs[g_ndev];
        memset(d, 0, sizeof *d);
        d->phys = phys[i];
        g_ifn.vkGetPhysicalDeviceProperties(d->phys, &d->props);
        pyg_error *e = device_open(d);
        if (e) {
            vkp_log(PYG_LOG_WARN, "skipping device %u: %s", i, e->msg);
            size_t l = strlen(reasons);
            snprintf(reasons + l, sizeof reasons - l, "%s%s", l ? "; " : "", e->msg + 8);
            api_error_destroy(e);
            continue;   /* a half-opened device is leaked; it is never used */
        }
        d->index = g_ndev++;
    }
    free(phys);
    if (g_ndev == 0) return vkp_err(PYG_ERR_NO_DEVICE, "no usable Vulkan device (%s)", reasons);
    return NULL;
}

static pyg_error *api_plugin_init(void) {
    pthread_mutex_lock(&g_init_lock);
    if (!g_init_done) {
        g_init_err = init_impl();
        if (g_init_err) g_ndev = 0;
        g_init_done = 1;
    }
    pyg_error *e = copy_err(g_init_err);
    pthread_mutex_unlock(&g_init_lock);
    return e;
}

static int32_t api_device_count(void) { return g_init_done ? g_ndev : 0; }

static pyg_error *api_device_get(int32_t index, pyg_device **out) {
    if (!out) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "device_get: out is NULL");
    if (index < 0 || index >= api_device_count())
        return vkp_err(PYG_ERR_INVALID_ARGUMENT, "device index %d out of range (%d devices)", index, api_device_count());
    *out = &g_devs[index];
    return NULL;
}

#define PROP_FITS(p, field) ((p)->struct_size >= offsetof(pyg_device_props, field) + sizeof((p)->field))

static pyg_error *api_device_get_props(pyg_device *d, pyg_device_props *p) {
    if (!d || !p) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "device_get_props: NULL argument");
    if (PROP_FITS(p, name)) p->name = "vulkan";
    if (PROP_FITS(p, description)) p->description = d->props.deviceName;
    if (PROP_FITS(p, type)) p->type = d->device_type;
    if (PROP_FITS(p, caps))
        p->caps = PYG_CAP_ASYNC_COMPUTE | PYG_CAP_EVENTS | PYG_CAP_ASYNC_WRITE_PINNED |
                  PYG_CAP_ASYNC_WRITE_PAGEABLE | PYG_CAP_HOST_BUFFER;
    if (PROP_FITS(p, quirks)) p->quirks = 0;
    if (PROP_FITS(p, memory_total)) p->memory_total = d->heap_size;
    if (PROP_FITS(p, alignment)) {
        uint64_t a = d->props.limits.minStorageBufferOffsetAlignment;
        p->alignment = a < 16 ? 16 : a;
    }
    if (PROP_FITS(p, max_alloc)) p->max_alloc = d->max_alloc;
    return NULL;
}

static pyg_error *api_device_memory(pyg_device *d, uint64_t *free_b, uint64_t *total_b) {
    if (!d) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "device_memory: NULL device");
    pthread_mutex_lock(&d->lock);
    uint64_t used = d->allocated;
    pthread_mutex_unlock(&d->lock);
    if (total_b) *total_b = d->heap_size;
    if (free_b) *free_b = d->heap_size > used ? d->heap_size - used : 0;
    return NULL;
}


static const char *const k_auto_off_on[] = { "auto", "off", "on", NULL };
static const char *const k_matvec_rows[] = { "1", "2", "4", NULL };   /* 1 << index rows */
static const char *const k_gemm[] = { "auto", "tiled", "coopmat", "cm_emulated", NULL };   /* VKP_GEMM_* */
static const char *const k_cm_api[] = { "auto", "nv", "khr", NULL };   /* VKP_CM_API_* */
static const char *const k_cm_acc[] = { "f32", "f16", "f16x2", "f16x4", "f16x8", NULL };   /* index: vkp_options.cm_acc */
static const char *const k_fa_acc[] = { "f32", "pv16", "f16", NULL };   /* index: vkp_options.fa_acc */
static const char *const k_rp_rows[] = { "8", "4", NULL };   /* index: vkp_options.rp_rows */
static const char *const k_copy[] = { "auto", "0", "1", NULL };   /* index: vkp_options.gemm_dq, gemm_b16 (VKP_COPY_*) */
static const char *const k_gemm_tile[] = { "auto", "64", "128", NULL };
static const char *const k_fa[] = { "auto", "scalar", "coopmat", "cm_emulated", NULL };     /* the same indices */
static const char *const k_barrier[] = { "memory", "buffer", "sync2", "debug_exec", "event", NULL };   /* VKP_BARRIER_* */

/* Settings (vkp_options, read by plans created afterwards; README.md lists them) parsed by one
 * table; plus three actions whose value is ignored: "validation_check" (sanitizer mode: the
 * validation layer's messages since the last check, as a PYG_ERR_SANITIZER error),
 * "validation_selftest" (queue a deliberate hazard), "profile_report" (log the profile, start over). */
static const pyg_option_def k_options[] = {
    PYG_OPTION_CHOICE(vkp_options, fa_split, k_auto_off_on, "KV-split flash attention (auto: off on CPU devices)"),
    PYG_OPTION_BOOL(vkp_options, fuse, "rms_norm followed by mul as one dispatch (default 1)"),
    PYG_OPTION_BOOL(vkp_options, fuse_glu, "gate and up mat-vecs (q4_0/q8_0) and their swiglu as one dispatch (default 0)"),
    PYG_OPTION_BOOL(vkp_options, fuse_swiglu, "a swiglu and the q4_0/q8_0 mat-vec that reads it (a feed-forward down projection) as one dispatch, mul_mat_vec3s (default 0: slower on the H200; with matvec >= 6)"),
    PYG_OPTION_CHOICE(vkp_options, fuse_norm_mv, k_auto_off_on, "the q4_0/q8_0 mat-vecs reading a fused norm (its rms_norm*w, after an add or not) recompute it from its inputs, mul_mat_vec3n, and run beside it, not after it: auto (default) where the row is at most 2048 wide (H200: faster there, slower at 4096), on, off; with matvec >= 6, behind the register norm kernel"),
    PYG_OPTION_BOOL(vkp_options, fuse_rope, "a rope and the set_rows of its result into a KV cache as one dispatch (default 1)"),
    PYG_OPTION_CHOICE(vkp_options, norm_wg, k_auto_off_on, "workgroup-per-row norm+mul (auto: off on CPU devices)"),
    PYG_OPTION_BOOL(vkp_options, reorder, "plans record the dispatches stage by stage, independent ones between the same two barriers (default 1; 0: graph order)"),
    PYG_OPTION_CHOICE(vkp_options, params_dev, k_auto_off_on, "plans' parameter blocks in device-local memory, uploaded once (auto: off on CPU devices; off: host-visible memory)"),
    PYG_OPTION_BOOL(vkp_options, subgroups, "subgroup kernels where the device has them (0: shared-memory kernels)"),
    PYG_OPTION_BOOL(vkp_options, profile, "plugin-wide: count host work, time the dispatches of plans created after"),
    PYG_OPTION_BOOL(vkp_options, debug_drop_barriers, "test switch: plans omit compute barriers (default 0)"),
    PYG_OPTION_CHOICE(vkp_options, barrier, k_barrier, "the barrier between two stages of a plan: memory (default: one global memory barrier), buffer (buffer barriers on what the previous stage wrote), sync2 (VK_KHR_synchronization2, storage accesses only; where the device has it), debug_exec (measurement only: an execution dependency without the memory dependency), event (each stage sets an event the next one waits on, with the same memory dependency: vkCmdSetEvent / vkCmdWaitEvents)"),
    PYG_OPTION_INT(vkp_options, matvec, 1, 7, "decode mat-vec: 7 mul_mat_vec4 (q4_0 with coalesced weight loads, rows back to back, K <= 16384; else as 6), 6 mul_mat_vec3w (mul_mat_vec3i with the whole row staged once, K <= 16384; else as 5; default), 5 mul_mat_vec3i (mul_mat_vec3 on int8 activations with the integer dot product, where the device has it; else as 3), 4 mul_mat_vec3p (mul_mat_vec3 loading a chunk ahead), 3 mul_mat_vec3.comp for q4_0/q8_0, else as 2, 2 mul_mat_vec2.comp where it applies, 1 the earlier kernel"),
    PYG_OPTION_BOOL(vkp_options, matvec_q4_K, "q4_K weights in the int8 mat-vecs of matvec >= 5 (mul_mat_vec3i/3w and the norm and swiglu fusions; else mul_mat_vec2 on f32 activations): default 0, tested on lavapipe, not yet measured on a GPU"),
    PYG_OPTION_CHOICE(vkp_options, matvec_rows, k_matvec_rows, "weight rows per subgroup of mul_mat_vec2 (default 2); mul_mat_vec3 takes 8 times as many per workgroup"),
    PYG_OPTION_CHOICE(vkp_options, fa, k_fa, "prefill flash attention: auto (scalar until GPUs confirm the coopmat kernel), scalar, coopmat, cm_emulated (tests)"),
    PYG_OPTION_CHOICE(vkp_options, gemm_tile, k_gemm_tile, "cooperative-matrix GEMM tile: auto (128 where that still gives 512 workgroups, else 64), 64, 128"),
    PYG_OPTION_INT(vkp_options, fa_v, 0, 4, "decode flash attention: 0 (default) auto: 4 for nodes with a KV head per query head, else 3; 3 flash_attn_dec.comp for the KV split (merge folded in; f16 K/V, 16-byte aligned rows), other nodes as 1; 4 flash_attn_dec2.comp (a workgroup per query row and KV head, subgroup shuffles; where its layout holds, else as 1); 1 flash_attn.comp; 2 flash_attn2 (eight invocations per key, subgroup reductions; where the device has subgroup arithmetic)"),
    PYG_OPTION_INT(vkp_options, gemm_v, 0, 4, "cooperative-matrix GEMM build: 0 auto (default: 4 where the device and the build have VK_KHR_cooperative_matrix, else 3), 3 pipelined with 16-byte shared-memory stores (mul_mat_cm3), 2 pipelined, 1 the earlier one, 4 mul_mat_cm4 (its configuration: gemm_cfg)"),
    PYG_OPTION_CHOICE(vkp_options, gemm_cfg, vkp_gemm_cfg_names, "mul_mat_cm4's configuration (gemm_v=4): auto, or a name TMxTN.kBK.wWMxWN[.ks2][.s1][.np] (vk_matmul.c)"),
    PYG_OPTION_CHOICE(vkp_options, gemm_b16, k_copy, "a mul_mat_cm4 GEMM's f32 activations (from 32 tokens) converted to f16 rows in the plan's scratch by a dispatch before it (one conversion for consecutive GEMMs of the same activations), the GEMM then reading half the bytes: auto (default: on VK_KHR_cooperative_matrix; H100: q4_0 GEMMs 66-84 TFLOPS against 56-75), 0 never, 1 always"),
    PYG_OPTION_BOOL(vkp_options, gemm_bg, "with gemm_b16's copy: mul_mat_cm4 loads its activation fragments from the copy in global memory (rows padded to whole tiles), shared memory holding the weight tiles alone (two stages where one fitted): default 0, tested on lavapipe, not yet timed on a GPU"),
    PYG_OPTION_CHOICE(vkp_options, gemm_dq, k_copy, "a quantized weight of a mul_mat_cm4 GEMM (gemm_v=4 or auto on VK_KHR_cooperative_matrix; from 32 tokens) dequantized into the plan's scratch as f16 rows by a dispatch before it, the GEMM then reading f16: auto (default: the k-quants, whose blocks the GEMM would unpack per step; H200: q4_K 67-71 TFLOPS against 57-62), 0 never, 1 every quantized type"),
    PYG_OPTION_INT(vkp_options, fa_cm, 1, 3, "tensor-core prefill flash attention (fa=coopmat/auto/cm_emulated): 3 flash_attn_cm3 where K and V are f16 on 16-byte boundaries (default: one pass, online softmax, each chunk's P V folded into outputs held in registers; else 1), 2 flash_attn_cm2 there (two passes; else 1), 1 flash_attn_cm; a KV split (fa_cm_wgs) runs flash_attn_cm2s whichever of 2 and 3"),
    PYG_OPTION_INT(vkp_options, fa_cm_wgs, 0, 1048576, "prefill flash attention on the tensor cores (flash_attn_cm2) over KV splits: about this many workgroups in all (query blocks x heads x splits, each split at least two 64-key chunks), each writing its rows' partial softmax state, then flash_attn.comp's merge pass; kernel name flash_attn_cm2s; 0 never, and never where fa_split is off (default 512: the split where a prefill chunk's query blocks and heads alone give fewer than 256 workgroups, a short chunk at depth; at pp512 from an empty cache, 512 blocks, 4 splits each ran 3% slower on the H100)"),
    PYG_OPTION_INT(vkp_options, fa_wgs, 64, 65536, "KV-split flash attention for few query rows: at most this many workgroups, splits of whole 64-key chunks (default 4096)"),
    PYG_OPTION_INT(vkp_options, fa_dec_wgs, 16, 65536, "flash_attn_dec2 (fa_v=4, or 0 where it takes the node): about this many workgroups over a decode attention node's row groups, splits of at least 32 cells (default 512)"),
    PYG_OPTION_INT(vkp_options, norm_v, 1, 2, "workgroup-per-row norm+mul (norm_wg): 2 the register kernel (default), 1 the earlier one"),
    PYG_OPTION_CHOICE(vkp_options, cm_api, k_cm_api, "the extension of mul_mat_cm4's tensor-core products (gemm_v=4): auto (khr where the device and the build have it, else nv), nv (VK_NV_cooperative_matrix), khr (VK_KHR_cooperative_matrix; refused without it)"),
    PYG_OPTION_CHOICE(vkp_options, cm_acc, k_cm_acc, "mul_mat_cm4's KHR build (cm_api): products summed in f16 accumulators over 4 K steps (f16x4, the default: 256 products at 64-element steps), 8 (f16x8), 2 (f16x2) or 1 (f16), then added into the f32 ones; or f32 accumulators throughout (on the H200 about 30 TFLOPS). H100, q4_0 GEMMs at N = 512: f16x4 64-113 TFLOPS against 56-84 with f16, NMSE against float64 2.91e-5 against 2.88e-5"),
    PYG_OPTION_BOOL(vkp_options, fa_lit, "flash_attn_dec2 from its build with D = 128, one query head per KV head and 32-wide subgroups as literals where a decode attention node has those (a 7b's; glslc then folds and unrolls them in the module; default 0: not yet timed)"),
    PYG_OPTION_BOOL(vkp_options, norm_b16, "a fused layer norm (norm_mul_reg's vec4 path) whose result the next dispatch, a gemm_b16 GEMM, reads (a layer's q/k/v, gate/up) writes that GEMM's f16 copy beside its result (norm_mul_reg_b16), in place of dequant.comp's conversion, and its rms_norm output only where another node reads it or it is a graph output (default 1)"),
    PYG_OPTION_INT(vkp_options, swiglu8, 0, 2, "a swiglu of contiguous f32 tensors (prefill): 0 elementwise.comp, an element an invocation; 1 swiglu8.comp, 8 elements an invocation (the same values); 2 (default) as 1, and where the next dispatch is a gemm_b16 GEMM reading the result (the down projection) the f16 copy that GEMM reads is written beside it (swiglu8_b16), in place of dequant.comp's conversion, and the f32 result only where something else reads it or it is a graph output"),
    PYG_OPTION_INT(vkp_options, gemm_splitk, 0, 1048576, "mul_mat_cm4 over K splits, a workgroup each (up to 8 of at least gemm_splitk_steps K steps), where its grid, with the grids of the other GEMMs that read the same activations (which share its barrier stage), has fewer workgroups than this (a 1b's down and o projections: 128 workgroups of 64 x 128 alone in their stages; not its q/k/v, 192 together): all but the first split's sums go to the plan's scratch and splitk_add.comp adds them into the result after it, in split order; the kernel name ends in ' splitN' (default 256: H200 1b q4_0 pp512 +7%; 0: never)"),
    PYG_OPTION_BOOL(vkp_options, fa_span, "flash_attn_cm3 (the prefill attention, fa_cm=3) with a mask walks only each 32-row query block's key chunks between its first and last one with an unmasked key: fa_mask_span.comp finds them once per plan and mask (a dispatch that reads the mask alone, so it shares the plan's first stage), and the chunks a causal prefill masks whole cost no load and no barrier (default 0: on the H100 pp512 fell 6% on 1b, 3% on 7b q4_0)"),
    PYG_OPTION_CHOICE(vkp_options, fa_acc, k_fa_acc, "flash_attn_cm3's tensor-core sums (the prefill attention, fa_cm=3): f32 accumulators (default), pv16 (each 64-key chunk's P V summed in f16 accumulators, then converted to f32 before the outputs, which stay f32 across chunks, take it), f16 (Q K^T too: scores within f16's 11 bits). On the NVIDIA driver products into f32 accumulators run at about 30 TFLOPS; kernel names end in ' pv16' / ' f16acc'"),
    PYG_OPTION_BOOL(vkp_options, splitk_last, "with gemm_splitk, every split of a GEMM writes its sums into the plan's scratch and counts itself in its tile's counter; the tile's last split adds them in split order (splitk_add's sums, whichever split ends last) and writes the result, so the splitk_add pass and its barrier stage go (default 0: on the H100 1b pp512 fell 3.5%)"),
    PYG_OPTION_INT(vkp_options, gemm_splitk_steps, 1, 65536, "the fewest K steps (of the GEMM's tile) a split of gemm_splitk takes (default 32, which leaves a 1b's o projection, K 2048 in 32 steps of 64, whole; 16 splits it in two)"),
    PYG_OPTION_BOOL(vkp_options, gemm_lit, "mul_mat_cm4's KHR build from a build with its specialization and workgroup size as literals where one has the GEMM's (vulkan.mk's CM4_LITS: the auto configurations with gemm_b16 and cm_acc=f16x4, q4_0 direct or through gemm_dq); the kernel name ends in ' lit' (the same bytes; default 1: H100 1b q4_0 pp512 +6.5%, the q4_0 GEMM +8%)"),
    PYG_OPTION_BOOL(vkp_options, rp_lit, "q4_0's repacked mat-vecs (mul_mat_vec_rp, _rpe, _rpg; K up to 16384: 1 or 2 blocks per invocation) from builds where the type and the blocks per invocation are literals, not derived from the specialization: glslc then sizes the private arrays and unrolls their loops in the module (the same arithmetic, so the same bytes; default 0: not yet timed)"),
    PYG_OPTION_CHOICE(vkp_options, rp_rows, k_rp_rows, "rows per workgroup of the repacked one-column mat-vecs mul_mat_vec_rp and mul_mat_vec_rpe (q/k/v with their rope and cache store): 8 (default) or 4, twice the workgroups over the same rows (gate/up's mul_mat_vec_rpg has 4 of each weight already)"),
    PYG_OPTION_BOOL(vkp_options, mv_q8, "the fused layer norms (norm_mul_reg's vec4 path, rows a multiple of 256) write their result's int8 blocks of 32 too, and the q4_0/q8_0 mat-vecs reading that result (q4_K too with matvec_q4_K) stage the copy instead of quantizing it, mul_mat_vec3q: the same bytes as mul_mat_vec3w; with matvec_rp the repacked q4_0/q4_1/q6_K mat-vecs read the copy as their activations (q8-in), the same bytes (default 1: H100 at 9a180cd, 4 interleaved rounds, tg128 1b / 7b q4_0 797 / 286 t/s against 767 / 277 with 0; with matvec >= 6, where fuse_norm_mv and rp_norm_in do not apply)"),
    PYG_OPTION_BOOL(vkp_options, matvec_ahead, "the whole-row mat-vecs (mul_mat_vec3w/3n/3s) issue two units' weight loads before staging the activation row, not one: at K = 4096 every weight of an invocation is in flight at once (the same sums in the same order, so the same bytes; default 0: no faster in a model on an H100)"),
    PYG_OPTION_BOOL(vkp_options, matvec_rp, "one-column q4_0 mat-vecs (decode) on a copy of the weights repacked once per weight and device (quants of a row in 16-byte words, the scales of 8 rows together; remade when the host writes the weights' buffer): mul_mat_vec_rp, the CUDA plugin's structure (activations in registers, weights streamed); the copy doubles those weights' device memory (default 1: H100 at 9ac7d4c, tg128 7b q4_0 265 against 250 t/s, 1b 750 against 739; 0 saves the copies' memory)"),
    PYG_OPTION_BOOL(vkp_options, matvec_rp_k, "with matvec_rp, one-column q4_K and q6_K mat-vecs (K a multiple of 256) on a repacked copy too (the CUDA plugin's layouts: 8 rows' scales of a super-block together; q6_K's high bits in a plane of their own), activations quantized to int8 per 16 (q4_K) or 32 (q6_K) elements; gate/up and q/k/v take their fusions (default 1: H100 at e960257, tg128 1b / 7b q4_K 722 / 250 t/s against 471 / 121 with 0)"),
    PYG_OPTION_BOOL(vkp_options, fuse_rope_mv, "a one-column mat-vec on matvec_rp and what a layer does next with its result, the rope (q), the rope and the KV-cache write (k), or the cache write (v), as one dispatch, mul_mat_vec_rpe: a stage fewer per layer in decode (default 1)"),
    PYG_OPTION_CHOICE(vkp_options, rp_norm_in, k_auto_off_on, "with matvec_rp, a layer's q/k/v (mul_mat_vec_rpe) and gate/up (mul_mat_vec_rpg) mat-vecs reading a fused norm's result recompute it from the norm's inputs (x, r, w; the sum of squares met with the row sums) and share the norm's barrier stage instead of following it: auto (default) where the row is at most 1024 wide (H100: tg128 SmolLM2-135M q4_1 +21%; with on, 1b q4_K +7%, 1b q4_0 -3%, 7b q4_0 -21%), off, on"),
    PYG_OPTION_BOOL(vkp_options, fold_norm, "a one-column mat-vec on matvec_rp whose result the graph adds to a residual and rms-normalizes next (a layer's o and down projections) as mul_mat_vec_rpn, which also writes the int8 blocks of (r + y) * w with a scale per 8 elements and the sums of squares per 8 into the plan's scratch; the norm's q4_0/q4_1/q4_K/q6_K readers (q/k/v, gate/up) read those and scale by 1 / rms themselves, so they run beside the add + norm dispatch: a barrier stage fewer per norm"),
    PYG_OPTION_BOOL(vkp_options, fold_nodes, "with fold_norm, the o/down mat-vec (mul_mat_vec_rpn) also writes the residual add's result, and the norm's first q/k/v or gate/up reader also writes the norm's and its product's results (the elements its workgroups cover), so the add + norm dispatch is not run: the readers' stage holds the mat-vecs alone"),
    PYG_OPTION_INT(vkp_options, debug_mv_parts, 0, 2, "measurement switch for mul_mat_vec3w (matvec=6), results wrong by design: 1 the activation row is neither read nor quantized (zeros staged), 2 no weight loads (zeros dotted) (default 0: the whole mat-vec)"),
    PYG_OPTION_INT(vkp_options, debug_gemm_parts, 0, 5, "measurement switch for mul_mat_cm4 (gemm_v=4), results wrong by design: 1 no global loads after the first step, 2 no products, 3 products alone on fragments loaded once, 4 every step reads the first 256 elements of K, 5 as 3 with the f16 sums joining the f32 ones as often as in the whole GEMM (default 0: the whole GEMM)"),
    PYG_OPTION_BOOL(vkp_options, pipeline_stats, "log the driver's statistics of each pipeline compiled after it is set (VK_KHR_pipeline_executable_properties: registers, shared memory, spills, as the driver names them), one INFO line per pipeline executable; refused where the device lacks the extension (default 0)"),
    PYG_OPTION_CHOICE(vkp_options, gemm, k_gemm, "prefill GEMM: auto (cooperative matrices where the device has them), tiled, coopmat, cm_emulated (tests)"),
};

static pyg_error *api_device_set_option(pyg_device *d, const char *key, const char *value) {
    if (!d || !key || !value) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "device_set_option: NULL argument");
    if (strcmp(key, "validation_check") == 0) return vkp_validation_check();
    if (strcmp(key, "validation_selftest") == 0) return vkp_validation_selftest(d);
    if (strcmp(key, "profile_report") == 0) return vkp_prof_report();
    pyg_error *refused = vkp_kernel_option_check(d, key, value);   /* gemm=coopmat without the extension */
    if (refused) return refused;
    char msg[1600];
    pthread_mutex_lock(&d->lock);
    int32_t st = pyg_option_set(k_options, PYG_OPTION_COUNT(k_options), &d->opts, key, value, msg, sizeof msg);
    d->subgroup_arith = d->subgroup_hw && d->opts.subgroups;
    if (st == PYG_OK && strcmp(key, "profile") == 0) vkp_prof_on = (int)d->opts.profile;
    pthread_mutex_unlock(&d->lock);
    return st == PYG_OK ? NULL : vkp_err(st, "%s", msg);
}

static int32_t api_device_supports_op(pyg_device *d, const pyg_tensor *node) {
    return (d && node) ? vkp_supports_op(d, node) : 0;
}

/* ---------------------------------------------------------------- pipelines */

pyg_error *vkp_get_pipeline(pyg_device *d, int shader, const uint32_t spec[2], VkPipeline *out) {
    pyg_error *err = NULL;
    pthread_mutex_lock(&d->lock);
    for (int i = 0; i < d->n_pipes; i++)
        if (d->pipes[i].shader == shader && d->pipes[i].spec[0] == spec[0] && d->pipes[i].spec[1] == spec[1]) {
            *out = d->pipes[i].pipeline;
            goto done;
        }
    if (d->n_pipes == VKP_MAX_PIPELINES) { err = vkp_err(PYG_ERR_INTERNAL, "pipeline cache full"); goto done; }
    size_t bytes;
    const uint32_t *code = vkp_shader_code_spec(shader, spec, &bytes);
    VkShaderModuleCreateInfo mi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = bytes, .pCode = code };
    VkShaderModule mod;
    VkResult r = d->fn.vkCreateShaderModule(d->dev, &mi, NULL, &mod);
    if (r != VK_SUCCESS) { err = vkp_vk_err(r, "vkCreateShaderModule"); goto done; }
    VkSpecializationMapEntry me[2] = { { .constantID = 0, .offset = 0, .size = 4 }, { .constantID = 1, .offset = 4, .size = 4 } };
    VkSpecializationInfo si = { .mapEntryCount = 2, .pMapEntries = me, .dataSize = 8, .pData = spec };
    VkComputePipelineCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, .flags = vkp_pipe_stats_flags(d),
        .stage = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                   .module = mod, .pName = "main", .pSpecializationInfo = &si },
        .layout = d->layout };
    VkPipeline pipe;
    r = d->fn.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &pipe);
    d->fn.vkDestroyShaderModule(d->dev, mod, NULL);
    if (r != VK_SUCCESS) { err = vkp_vk_err(r, "vkCreateComputePipelines"); goto done; }
    d->pipes[d->n_pipes++] = (vkp_pipeline){ shader, { spec[0], spec[1] }, pipe };
    vkp_pipe_stats_log(d, shader, spec, pipe);
    *out = pipe;
done:
    pthread_mutex_unlock(&d->lock);
    return err;
}


/* ---------------------------------------------------------------- graphs */

static pyg_error *api_graph_plan_create(pyg_device *d, const pyg_graph *g, pyg_graph_plan **out) {
    if (!d || !g || !out) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: NULL argument");
    return vkp_plan_create(d, g, out);
}
static void api_graph_plan_destroy(pyg_graph_plan *p) { vkp_plan_destroy(p); }
static pyg_error *api_graph_plan_compute(pyg_graph_plan *p, pyg_stream *s) {
    if (!p || !s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: NULL argument");
    return vkp_plan_compute(p, s);
}

/* since 1.1: no per-stream options (yet) on Vulkan. */
static pyg_error *api_stream_set_option(pyg_stream *s, const char *key, const char *value) {
    if (!s || !key || !value) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_set_option: NULL argument");
    return vkp_err(PYG_ERR_UNSUPPORTED, "unknown stream option '%.64s' (none known)", key);
}

/* ---------------------------------------------------------------- the table */

static const pyg_plugin_api g_api = {
    /* .struct_size = */ sizeof(pyg_plugin_api),
    /* .abi_major = */ PYG_ABI_MAJOR,
    /* .abi_minor = */ PYG_ABI_MINOR,
    /* .reserved0 = */ 0,
    /* .name = */ "vulkan",
    /* .version = */ "0.1.0",
    /* .error_code = */ api_error_code,
    /* .error_message = */ api_error_message,
    /* .error_destroy = */ api_error_destroy,
    /* .plugin_init = */ api_plugin_init,
    /* .device_count = */ api_device_count,
    /* .device_get = */ api_device_get,
    /* .device_get_props = */ api_device_get_props,
    /* .device_memory = */ api_device_memory,
    /* .device_set_option = */ api_device_set_option,
    /* .device_supports_op = */ api_device_supports_op,
    /* .stream_create = */ vkp_api_stream_create,
    /* .stream_destroy = */ vkp_api_stream_destroy,
    /* .stream_synchronize = */ vkp_api_stream_synchronize,
    /* .stream_wait_event = */ vkp_api_stream_wait_event,
    /* .event_create = */ vkp_api_event_create,
    /* .event_destroy = */ vkp_api_event_destroy,
    /* .event_record = */ vkp_api_event_record,
    /* .event_query = */ vkp_api_event_query,
    /* .event_synchronize = */ vkp_api_event_synchronize,
    /* .buffer_alloc = */ vkp_api_buffer_alloc,
    /* .buffer_free = */ vkp_api_buffer_free,
    /* .buffer_get_info = */ vkp_api_buffer_get_info,
    /* .buffer_write = */ vkp_api_buffer_write,
    /* .buffer_read = */ vkp_api_buffer_read,
    /* .buffer_fill = */ vkp_api_buffer_fill,
    /* .stream_write_async = */ vkp_api_stream_write_async,
    /* .stream_read_async = */ vkp_api_stream_read_async,
    /* .stream_copy_async = */ vkp_api_stream_copy_async,
    /* .graph_plan_create = */ api_graph_plan_create,
    /* .graph_plan_destroy = */ api_graph_plan_destroy,
    /* .graph_plan_compute = */ api_graph_plan_compute,
    /* .stream_set_option = */ api_stream_set_option,
};

PYG_PLUGIN_EXPORT const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host) {
    if (host && host->struct_size >= offsetof(pyg_host_info, log_user_data) + sizeof(void *)) g_host = host;
    return &g_api;
}

/* device-local scratch (plan-internal partials) */
pyg_error *vkp_raw_device_buffer(pyg_device *d, uint64_t size, VkBuffer *buf, VkDeviceMemory *mem, void **map) {
    return vkp_raw_buffer(d, size, 0, buf, mem, map, NULL);
}

/* host-visible, mapped, device-local where the device has such memory (plan parameter blocks);
 * plain host memory when that allocation fails (a small BAR heap) */
pyg_error *vkp_raw_host_buffer(pyg_device *d, uint64_t size, VkBuffer *buf, VkDeviceMemory *mem, void **map) {
    pyg_error *e = vkp_raw_buffer(d, size, 2, buf, mem, map, NULL);
    if (e && api_error_code(e) == PYG_ERR_OUT_OF_MEMORY) {
        api_error_destroy(e);
        e = vkp_raw_buffer(d, size, 1, buf, mem, map, NULL);
    }
    return e;
}
