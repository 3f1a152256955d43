/* plugins/vulkan/vk_plugin.c — the Vulkan plugin's ABI table: loader, devices, buffers,
 * streams (timeline-semaphore ordered submissions on one compute queue) and events.
 *
 * Streams: every submission of a stream waits for the stream's previous timeline value and
 * signals the next one, so stream order is real ordering, not just submission order.
 * Events own a timeline semaphore; event_record signals it from the stream's queue position.
 * Copies from host memory are staged into host-visible buffers at call time, so the caller's
 * memory is never read after the call returns (both ASYNC_WRITE caps are safe). */
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
    char buf[512];
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

static pyg_error *raw_buffer(pyg_device *d, uint64_t size, int host, VkBuffer *buf,
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

static pyg_error *stream_create_impl(pyg_device *d, pyg_stream **out);
static void stream_destroy_impl(pyg_stream *s);

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
    for (uint32_t i = 0; i < nq; i++)   /* prefer a compute queue without graphics */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) { d->queue_family = i; break; }
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
        .shaderFloat16 = d->float16 ? VK_TRUE : VK_FALSE, .vulkanMemoryModel = d->coopmat ? VK_TRUE : VK_FALSE };
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
        d->coopmat = d->float16 = 0;
        e12.pNext = NULL;
        e12.shaderFloat16 = e12.vulkanMemoryModel = VK_FALSE;
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
    pyg_error *e = raw_buffer(d, 256, 0, &d->dummy, &d->dummy_mem, &map, &d->mt_device);
    if (e) return e;
    d->device_mem_mapped = map != NULL;
    e = stream_create_impl(d, &d->internal);
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

static pyg_error *validation_selftest(pyg_device *d);

static const char *const k_auto_off_on[] = { "auto", "off", "on", NULL };
static const char *const k_matvec_rows[] = { "1", "2", "4", NULL };   /* 1 << index rows */
static const char *const k_gemm[] = { "auto", "tiled", "coopmat", "cm_emulated", NULL };   /* VKP_GEMM_* */
static const char *const k_gemm_tile[] = { "auto", "64", "128", NULL };
static const char *const k_fa[] = { "auto", "scalar", "coopmat", "cm_emulated", NULL };     /* the same indices */

/* Settings (vkp_options, read by plans created afterwards; README.md lists them) parsed by one
 * table; plus three actions whose value is ignored: "validation_check" (sanitizer mode: the
 * validation layer's messages since the last check, as a PYG_ERR_SANITIZER error),
 * "validation_selftest" (queue a deliberate hazard), "profile_report" (log the profile, start over). */
static const pyg_option_def k_options[] = {
    PYG_OPTION_CHOICE(vkp_options, fa_split, k_auto_off_on, "KV-split flash attention (auto: off on CPU devices)"),
    PYG_OPTION_BOOL(vkp_options, fuse, "rms_norm followed by mul as one dispatch (default 1)"),
    PYG_OPTION_CHOICE(vkp_options, norm_wg, k_auto_off_on, "workgroup-per-row norm+mul (auto: off on CPU devices)"),
    PYG_OPTION_BOOL(vkp_options, subgroups, "subgroup kernels where the device has them (0: shared-memory kernels)"),
    PYG_OPTION_BOOL(vkp_options, profile, "plugin-wide: count host work, time the dispatches of plans created after"),
    PYG_OPTION_BOOL(vkp_options, debug_drop_barriers, "test switch: plans omit compute barriers (default 0)"),
    PYG_OPTION_INT(vkp_options, matvec, 1, 2, "decode mat-vec: 2 mul_mat_vec2.comp where it applies (default), 1 the earlier kernel"),
    PYG_OPTION_CHOICE(vkp_options, matvec_rows, k_matvec_rows, "weight rows per subgroup of mul_mat_vec2 (default 2)"),
    PYG_OPTION_CHOICE(vkp_options, fa, k_fa, "prefill flash attention: auto (scalar until GPUs confirm the coopmat kernel), scalar, coopmat, cm_emulated (tests)"),
    PYG_OPTION_CHOICE(vkp_options, gemm_tile, k_gemm_tile, "cooperative-matrix GEMM tile: auto (128 where that still gives 512 workgroups, else 64), 64, 128"),
    PYG_OPTION_INT(vkp_options, gemm_v, 1, 2, "cooperative-matrix GEMM build: 2 pipelined (default), 1 the earlier one"),
    PYG_OPTION_CHOICE(vkp_options, gemm, k_gemm, "prefill GEMM: auto (cooperative matrices where the device has them), tiled, coopmat, cm_emulated (tests)"),
};

static pyg_error *api_device_set_option(pyg_device *d, const char *key, const char *value) {
    if (!d || !key || !value) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "device_set_option: NULL argument");
    if (strcmp(key, "validation_check") == 0) return vkp_validation_check();
    if (strcmp(key, "validation_selftest") == 0) return validation_selftest(d);
    if (strcmp(key, "profile_report") == 0) return vkp_prof_report();
    pyg_error *refused = vkp_kernel_option_check(d, key, value);   /* gemm=coopmat without the extension */
    if (refused) return refused;
    char msg[600];
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
    const uint32_t *code = vkp_shader_code(shader, &bytes);
    VkShaderModuleCreateInfo mi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = bytes, .pCode = code };
    VkShaderModule mod;
    VkResult r = d->fn.vkCreateShaderModule(d->dev, &mi, NULL, &mod);
    if (r != VK_SUCCESS) { err = vkp_vk_err(r, "vkCreateShaderModule"); goto done; }
    VkSpecializationMapEntry me[2] = { { .constantID = 0, .offset = 0, .size = 4 }, { .constantID = 1, .offset = 4, .size = 4 } };
    VkSpecializationInfo si = { .mapEntryCount = 2, .pMapEntries = me, .dataSize = 8, .pData = spec };
    VkComputePipelineCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                   .module = mod, .pName = "main", .pSpecializationInfo = &si },
        .layout = d->layout };
    VkPipeline pipe;
    r = d->fn.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &pipe);
    d->fn.vkDestroyShaderModule(d->dev, mod, NULL);
    if (r != VK_SUCCESS) { err = vkp_vk_err(r, "vkCreateComputePipelines"); goto done; }
    d->pipes[d->n_pipes++] = (vkp_pipeline){ shader, { spec[0], spec[1] }, pipe };
    *out = pipe;
done:
    pthread_mutex_unlock(&d->lock);
    return err;
}

/* ---------------------------------------------------------------- streams */

void vkp_full_barrier(pyg_device *d, VkCommandBuffer cb) {
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT };
    d->fn.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                               VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

void vkp_queue_idle(pyg_device *d) {
    pthread_mutex_lock(&d->queue_lock);
    VkResult r = d->fn.vkQueueWaitIdle(d->queue);
    pthread_mutex_unlock(&d->queue_lock);
    if (r != VK_SUCCESS) vkp_log(PYG_LOG_ERROR, "vkQueueWaitIdle failed (VkResult %d)", (int)r);
}

/* Timeline semaphores come from / go back to a per-device free list (see free_sems). A recycled
 * semaphore keeps its counter; users start from its current value. */
static pyg_error *sem_get(pyg_device *d, VkSemaphore *out, uint64_t *value) {
    pthread_mutex_lock(&d->lock);
    VkSemaphore sem = d->n_free_sems ? d->free_sems[--d->n_free_sems] : VK_NULL_HANDLE;
    pthread_mutex_unlock(&d->lock);
    if (!sem) {
        VkSemaphoreTypeCreateInfo ti = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
            .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE, .initialValue = 0 };
        VkSemaphoreCreateInfo si = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti };
        VkResult r = d->fn.vkCreateSemaphore(d->dev, &si, NULL, &sem);
        if (r != VK_SUCCESS) return vkp_vk_err(r, "vkCreateSemaphore");
    }
    *value = 0;
    VkResult r = d->fn.vkGetSemaphoreCounterValue(d->dev, sem, value);
    if (r != VK_SUCCESS) return vkp_vk_err(r, "vkGetSemaphoreCounterValue");
    *out = sem;
    return NULL;
}

static void sem_put(pyg_device *d, VkSemaphore sem) {
    pthread_mutex_lock(&d->lock);
    if (d->n_free_sems == d->cap_free_sems) {
        int cap = d->cap_free_sems ? 2 * d->cap_free_sems : 16;
        VkSemaphore *n = realloc(d->free_sems, (size_t)cap * sizeof *n);
        if (n) { d->free_sems = n; d->cap_free_sems = cap; }
    }
    if (d->n_free_sems < d->cap_free_sems) d->free_sems[d->n_free_sems++] = sem;
    /* else: leak it rather than destroy it */
    pthread_mutex_unlock(&d->lock);
}

static pyg_error *stream_create_impl(pyg_device *d, pyg_stream **out) {
    pyg_stream *s = calloc(1, sizeof *s);
    if (!s) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "stream_create");
    s->dev = d;
    VkCommandPoolCreateInfo pi = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = d->queue_family };
    VkResult r = d->fn.vkCreateCommandPool(d->dev, &pi, NULL, &s->pool);
    if (r != VK_SUCCESS) { free(s); return vkp_vk_err(r, "vkCreateCommandPool"); }
    pyg_error *e = sem_get(d, &s->timeline, &s->value);
    if (e) {
        d->fn.vkDestroyCommandPool(d->dev, s->pool, NULL);
        free(s);
        return e;
    }
    s->vid = vkp_val_stream_new();
    vkp_val_known(s->vid, s->value);
    s->open = -1;
    *out = s;
    return NULL;
}

static pyg_error *wait_value(pyg_device *d, VkSemaphore sem, uint64_t value) {
    if (value == 0) return NULL;
    VkSemaphoreWaitInfo wi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
        .pSemaphores = &sem, .pValues = &value };
    uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
    VkResult r = d->fn.vkWaitSemaphores(d->dev, &wi, UINT64_MAX);
    if (VKP_PROF) { vkp_prof.waits++; vkp_prof.wait_ns += vkp_now_ns() - t0; }
    return r == VK_SUCCESS ? NULL : vkp_vk_err(r, "waiting for queued work (vkWaitSemaphores)");
}

static uint64_t completed(pyg_stream *s) {
    uint64_t v = 0;
    if (s->dev->fn.vkGetSemaphoreCounterValue(s->dev->dev, s->timeline, &v) != VK_SUCCESS) return 0;
    return v;
}

static pyg_error *flush(pyg_stream *s);

static void stream_destroy_impl(pyg_stream *s) {
    if (!s) return;
    pyg_device *d = s->dev;
    pyg_error *e = flush(s);
    if (!e) e = wait_value(d, s->timeline, s->value);
    if (e) { vkp_log(PYG_LOG_ERROR, "stream_destroy: %s", e->msg); api_error_destroy(e); d->fn.vkDeviceWaitIdle(d->dev); }
    vkp_queue_idle(d);
    vkp_val_known(s->vid, s->value);
    for (int i = 0; i < s->n_stage; i++) {
        d->fn.vkDestroyBuffer(d->dev, s->stage[i].buf, NULL);
        d->fn.vkFreeMemory(d->dev, s->stage[i].mem, NULL);
    }
    d->fn.vkDestroyCommandPool(d->dev, s->pool, NULL);   /* frees its command buffers */
    sem_put(d, s->timeline);
    free(s->stage);
    free(s->cmds);
    free(s);
}

/* A command buffer of this stream that no pending submission uses, begun for one submission. */

static pyg_error *begin_cmd(pyg_stream *s, vkp_cmd **out) {
    pyg_device *d = s->dev;
    uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
    uint64_t done = completed(s);
    vkp_cmd *c = NULL;
    for (int i = 0; i < s->n_cmds; i++)
        if (s->cmds[i].busy_until <= done) { c = &s->cmds[i]; break; }
    if (c) {
        d->fn.vkResetCommandBuffer(c->cb, 0);
    } else {
        vkp_cmd *n = realloc(s->cmds, (size_t)(s->n_cmds + 1) * sizeof *n);
        if (!n) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "command buffer list");
        s->cmds = n;
        c = &s->cmds[s->n_cmds];
        VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
            .commandPool = s->pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
        VkResult r = d->fn.vkAllocateCommandBuffers(d->dev, &ai, &c->cb);
        if (r != VK_SUCCESS) return vkp_vk_err(r, "vkAllocateCommandBuffers");
        s->n_cmds++;
    }
    c->busy_until = UINT64_MAX;
    VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
    VkResult r = d->fn.vkBeginCommandBuffer(c->cb, &bi);
    if (VKP_PROF) { vkp_prof.recordings++; vkp_prof.record_ns += vkp_now_ns() - t0; }
    if (r != VK_SUCCESS) { c->busy_until = 0; return vkp_vk_err(r, "vkBeginCommandBuffer"); }
    *out = c;
    return NULL;
}

/* The stream's open command buffer (begun on first use). */
static pyg_error *open_cmd(pyg_stream *s, VkCommandBuffer *cb) {
    if (s->open < 0) {
        vkp_cmd *c;
        pyg_error *e = begin_cmd(s, &c);
        if (e) return e;
        s->open = (int)(c - s->cmds);
        s->open_bytes = 0;
        s->n_open_acc = 0;
    }
    *cb = s->cmds[s->open].cb;
    return NULL;
}

/* Before a copy in the open command buffer: a transfer barrier only when it touches bytes an
 * earlier copy since the last barrier wrote, or writes bytes one read. */
static void open_access(pyg_stream *s, VkBuffer buf, uint64_t lo, uint64_t hi, int write) {
    int hazard = s->n_open_acc == VKP_OPEN_ACC;
    for (int i = 0; i < s->n_open_acc && !hazard; i++)
        hazard = s->open_acc[i].buf == buf && s->open_acc[i].lo < hi && lo < s->open_acc[i].hi &&
                 (write || s->open_acc[i].write);
    if (hazard) {
        VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
            .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT };
        s->dev->fn.vkCmdPipelineBarrier(s->cmds[s->open].cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                        0, 1, &mb, 0, NULL, 0, NULL);
        if (VKP_PROF) vkp_prof.commands++;
        s->n_open_acc = 0;
    }
    s->open_acc[s->n_open_acc].buf = buf;
    s->open_acc[s->n_open_acc].lo = lo;
    s->open_acc[s->n_open_acc].hi = hi;
    s->open_acc[s->n_open_acc++].write = write;
}

/* Submits the open command buffer (if any) on its own. */
static pyg_error *flush(pyg_stream *s) {
    return s->open >= 0 ? vkp_submit(s, VK_NULL_HANDLE) : NULL;
}

static pyg_error *submit_impl(pyg_stream *s, VkCommandBuffer cb, VkSemaphore extra_sem, uint64_t extra_val) {
    pyg_device *d = s->dev;
    VkSemaphore ws[VKP_MAX_WAITS + 1];
    uint64_t wv[VKP_MAX_WAITS + 1];
    VkPipelineStageFlags wst[VKP_MAX_WAITS + 1];
    uint32_t nw = 0;
    if (s->value > 0) { ws[nw] = s->timeline; wv[nw] = s->value; wst[nw++] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT; }
    for (int i = 0; i < s->n_waits; i++) { ws[nw] = s->wait_sem[i]; wv[nw] = s->wait_val[i]; wst[nw++] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT; }
    VkSemaphore ss[2] = { s->timeline, extra_sem };
    uint64_t sv[2] = { s->value + 1, extra_val };
    VkTimelineSemaphoreSubmitInfo ti = { .sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
        .waitSemaphoreValueCount = nw, .pWaitSemaphoreValues = wv,
        .signalSemaphoreValueCount = extra_sem ? 2 : 1, .pSignalSemaphoreValues = sv };
    VkCommandBuffer cbs[2];
    uint32_t ncb = 0;
    int open = s->open;
    if (open >= 0) {   /* the queued copies go first; the barrier orders them before what follows */
        s->open = -1;
        uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
        vkp_full_barrier(d, s->cmds[open].cb);
        VkResult re = d->fn.vkEndCommandBuffer(s->cmds[open].cb);
        if (VKP_PROF) { vkp_prof.commands++; vkp_prof.record_ns += vkp_now_ns() - t0; }
        if (re != VK_SUCCESS) { s->cmds[open].busy_until = 0; return vkp_vk_err(re, "vkEndCommandBuffer"); }
        cbs[ncb++] = s->cmds[open].cb;
    }
    if (cb) cbs[ncb++] = cb;
    VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &ti,
        .waitSemaphoreCount = nw, .pWaitSemaphores = ws, .pWaitDstStageMask = wst,
        .commandBufferCount = ncb, .pCommandBuffers = cbs,
        .signalSemaphoreCount = extra_sem ? 2 : 1, .pSignalSemaphores = ss };
    uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
    pthread_mutex_lock(&d->queue_lock);
    VkResult r = d->fn.vkQueueSubmit(d->queue, 1, &si, VK_NULL_HANDLE);
    pthread_mutex_unlock(&d->queue_lock);
    if (VKP_PROF) { vkp_prof.submits++; vkp_prof.submit_ns += vkp_now_ns() - t0; }
    if (r != VK_SUCCESS) {
        if (open >= 0) s->cmds[open].busy_until = 0;
        return vkp_vk_err(r, "vkQueueSubmit");
    }
    s->value++;
    s->n_waits = 0;
    if (open >= 0) s->cmds[open].busy_until = s->value;
    return NULL;
}

pyg_error *vkp_submit(pyg_stream *s, VkCommandBuffer cb) { return submit_impl(s, cb, VK_NULL_HANDLE, 0); }

static pyg_error *get_staging(pyg_stream *s, uint64_t size, vkp_staging **out) {
    pyg_device *d = s->dev;
    uint64_t done = completed(s);
    int free_small = -1;
    for (int i = 0; i < s->n_stage; i++) {
        if (s->stage[i].busy_until > done) continue;
        if (s->stage[i].size >= size) { *out = &s->stage[i]; return NULL; }
        free_small = i;
    }
    uint64_t sz = 1 << 20;
    while (sz < size) sz <<= 1;
    vkp_staging st = { .size = sz };
    pyg_error *e = raw_buffer(d, sz, 1, &st.buf, &st.mem, &st.map, NULL);
    if (e) return e;
    if (free_small >= 0) {   /* replace an idle staging buffer that is too small */
        d->fn.vkDestroyBuffer(d->dev, s->stage[free_small].buf, NULL);
        d->fn.vkFreeMemory(d->dev, s->stage[free_small].mem, NULL);
        s->stage[free_small] = st;
        *out = &s->stage[free_small];
        return NULL;
    }
    vkp_staging *n = realloc(s->stage, (size_t)(s->n_stage + 1) * sizeof *n);
    if (!n) {
        d->fn.vkDestroyBuffer(d->dev, st.buf, NULL);
        d->fn.vkFreeMemory(d->dev, st.mem, NULL);
        return vkp_err(PYG_ERR_OUT_OF_MEMORY, "staging list");
    }
    s->stage = n;
    s->stage[s->n_stage] = st;
    *out = &s->stage[s->n_stage++];
    return NULL;
}

static pyg_error *check_range(const pyg_buffer *b, uint64_t off, uint64_t size, const char *what) {
    if (!b) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "%s: NULL buffer", what);
    if (off > b->size || size > b->size - off)
        return vkp_err(PYG_ERR_INVALID_ARGUMENT, "%s: range [%llu, +%llu) outside buffer of %llu bytes", what,
                       (unsigned long long)off, (unsigned long long)size, (unsigned long long)b->size);
    return NULL;
}

#define STAGE_CHUNK (64ull << 20)

static pyg_error *write_async_impl(pyg_stream *s, pyg_buffer *dst, uint64_t off, const void *src, uint64_t size) {
    while (size > 0) {
        uint64_t n = size < STAGE_CHUNK ? size : STAGE_CHUNK;
        vkp_staging *st;
        pyg_error *e = get_staging(s, n, &st);
        if (e) return e;
        uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
        memcpy(st->map, src, n);
        if (VKP_PROF) { vkp_prof.writes++; vkp_prof.write_bytes += n; vkp_prof.memcpy_ns += vkp_now_ns() - t0; }
        VkCommandBuffer cb;
        if ((e = open_cmd(s, &cb))) return e;
        t0 = VKP_PROF ? vkp_now_ns() : 0;
        open_access(s, dst->buf, off, off + n, 1);
        VkBufferCopy reg = { .srcOffset = 0, .dstOffset = off, .size = n };
        s->dev->fn.vkCmdCopyBuffer(cb, st->buf, dst->buf, 1, &reg);
        if (VKP_PROF) { vkp_prof.commands++; vkp_prof.record_ns += vkp_now_ns() - t0; }
        st->busy_until = s->value + 1;   /* the submission that will carry the open buffer */
        vkp_val_queued(dst, off, off + n, 1, s->vid, s->value + 1);
        s->open_bytes += n;
        if (s->open_bytes >= VKP_OPEN_FLUSH && (e = flush(s))) return e;   /* large uploads stream */
        src = (const char *)src + n; off += n; size -= n;
    }
    return NULL;
}

static pyg_error *read_blocking_impl(pyg_stream *s, pyg_buffer *srcb, uint64_t off, void *dst, uint64_t size) {
    pyg_error *e = flush(s);
    if (!e) e = wait_value(s->dev, s->timeline, s->value);
    if (e) return e;
    vkp_val_known(s->vid, s->value);
    if (VKP_PROF) { vkp_prof.reads++; vkp_prof.read_bytes += size; }
    if (srcb->map) { memcpy(dst, (const char *)srcb->map + off, size); return NULL; }
    while (size > 0) {
        uint64_t n = size < STAGE_CHUNK ? size : STAGE_CHUNK;
        vkp_staging *st;
        if ((e = get_staging(s, n, &st))) return e;
        VkCommandBuffer cb;
        if ((e = open_cmd(s, &cb))) return e;
        VkBufferCopy reg = { .srcOffset = off, .dstOffset = 0, .size = n };
        s->dev->fn.vkCmdCopyBuffer(cb, srcb->buf, st->buf, 1, &reg);
        if (VKP_PROF) { vkp_prof.commands++; vkp_prof.staged_reads++; }
        if ((e = flush(s))) return e;
        st->busy_until = s->value;
        if ((e = wait_value(s->dev, s->timeline, s->value))) return e;
        memcpy(dst, st->map, n);
        dst = (char *)dst + n; off += n; size -= n;
    }
    return NULL;
}

static pyg_error *api_stream_create(pyg_device *d, uint32_t flags, pyg_stream **out) {
    if (!d || !out) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_create: NULL argument");
    return stream_create_impl(d, out);
}
static void api_stream_destroy(pyg_stream *s) { stream_destroy_impl(s); }
static pyg_error *api_stream_synchronize(pyg_stream *s) {
    if (!s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_synchronize: NULL stream");
    pyg_error *e = flush(s);
    if (!e) e = wait_value(s->dev, s->timeline, s->value);
    if (!e) vkp_val_known(s->vid, s->value);
    return e;
}

/* ---------------------------------------------------------------- events */

static pyg_error *api_event_create(pyg_device *d, pyg_event **out) {
    if (!d || !out) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_create: NULL argument");
    pyg_event *ev = calloc(1, sizeof *ev);
    if (!ev) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "event_create");
    ev->dev = d;
    ev->vid = -1;
    pyg_error *e = sem_get(d, &ev->sem, &ev->value);   /* value = current: a fresh event is complete */
    if (e) { free(ev); return e; }
    *out = ev;
    return NULL;
}

static void api_event_destroy(pyg_event *ev) {
    if (!ev) return;
    pyg_error *e = wait_value(ev->dev, ev->sem, ev->value);   /* a pending signal must not outlive it */
    if (!e) vkp_val_known(ev->vid, ev->vvalue);
    api_error_destroy(e);
    sem_put(ev->dev, ev->sem);
    free(ev);
}

static pyg_error *api_event_record(pyg_event *ev, pyg_stream *s) {
    if (!ev || !s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_record: NULL argument");
    if (ev->dev != s->dev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_record: event and stream on different devices");
    pyg_error *e = submit_impl(s, VK_NULL_HANDLE, ev->sem, ev->value + 1);
    if (!e) { ev->value++; ev->vid = s->vid; ev->vvalue = s->value; }
    return e;
}

static pyg_error *api_event_query(pyg_event *ev, int32_t *done) {
    if (!ev || !done) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    uint64_t v = 0;
    VkResult r = ev->dev->fn.vkGetSemaphoreCounterValue(ev->dev->dev, ev->sem, &v);
    if (r != VK_SUCCESS) return vkp_vk_err(r, "vkGetSemaphoreCounterValue");
    *done = v >= ev->value;
    if (*done) vkp_val_known(ev->vid, ev->vvalue);
    return NULL;
}

static pyg_error *api_event_synchronize(pyg_event *ev) {
    if (!ev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_synchronize: NULL event");
    pyg_error *e = wait_value(ev->dev, ev->sem, ev->value);
    if (!e) vkp_val_known(ev->vid, ev->vvalue);
    return e;
}

static pyg_error *api_stream_wait_event(pyg_stream *s, pyg_event *ev) {
    if (!s || !ev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_wait_event: NULL argument");
    if (ev->value == 0) return NULL;
    if (ev->dev != s->dev) {   /* semaphores don't cross VkDevices: the host waits */
        pyg_error *e = wait_value(ev->dev, ev->sem, ev->value);
        if (!e) vkp_val_known(ev->vid, ev->vvalue);
        return e;
    }
    if (s->open >= 0) {   /* copies queued before the wait must not wait for the event */
        pyg_error *e = flush(s);
        if (e) return e;
    }
    for (int i = 0; i < s->n_waits; i++)
        if (s->wait_sem[i] == ev->sem) {
            if (s->wait_val[i] < ev->value) s->wait_val[i] = ev->value;
            vkp_val_dep(s->vid, s->value + 1, ev->vid, ev->vvalue);
            return NULL;
        }
    if (s->n_waits == VKP_MAX_WAITS) {   /* flush the waits into an empty submission */
        pyg_error *e = vkp_submit(s, VK_NULL_HANDLE);
        if (e) return e;
    }
    vkp_val_dep(s->vid, s->value + 1, ev->vid, ev->vvalue);   /* the next submission waits */
    s->wait_sem[s->n_waits] = ev->sem;
    s->wait_val[s->n_waits++] = ev->value;
    return NULL;
}

/* ---------------------------------------------------------------- buffers */

static pyg_error *api_buffer_alloc(pyg_device *d, uint64_t size, uint32_t flags, pyg_buffer **out) {
    if (!d || !out) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "buffer_alloc: NULL argument");
    if (flags & ~PYG_BUFFER_HOST) return vkp_err(PYG_ERR_UNSUPPORTED, "buffer_alloc: unknown flags 0x%x", flags);
    if (size > d->max_alloc)
        return vkp_err(PYG_ERR_OUT_OF_MEMORY, "buffer of %llu bytes exceeds maxMemoryAllocationSize (%llu)",
                       (unsigned long long)size, (unsigned long long)d->max_alloc);
    pyg_buffer *b = calloc(1, sizeof *b);
    if (!b) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "buffer_alloc");
    uint64_t sz = (size + 255) & ~255ull;
    if (sz == 0) sz = 256;
    pyg_error *e = raw_buffer(d, sz, (flags & PYG_BUFFER_HOST) != 0, &b->buf, &b->mem, &b->map, NULL);
    if (e) { free(b); return e; }
    b->dev = d;
    b->size = size;
    b->alloc_size = sz;
    b->flags = flags;
    pthread_mutex_lock(&d->lock);
    d->allocated += sz;
    pthread_mutex_unlock(&d->lock);
    *out = b;
    return NULL;
}

static void api_buffer_free(pyg_buffer *b) {
    if (!b) return;
    vkp_val_buffer_free(b);
    pyg_device *d = b->dev;
    d->fn.vkDestroyBuffer(d->dev, b->buf, NULL);
    d->fn.vkFreeMemory(d->dev, b->mem, NULL);
    pthread_mutex_lock(&d->lock);
    d->allocated -= b->alloc_size;
    pthread_mutex_unlock(&d->lock);
    free(b);
}

static pyg_error *api_buffer_get_info(pyg_buffer *b, pyg_buffer_info *info) {
    if (!b || !info) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "buffer_get_info: NULL argument");
    pyg_buffer_info i = { .struct_size = info->struct_size, .size = b->size, .base = NULL,
        .host_ptr = (b->flags & PYG_BUFFER_HOST) ? b->map : NULL, .flags = b->flags };
    size_t n = info->struct_size < sizeof i ? (size_t)info->struct_size : sizeof i;
    memcpy(info, &i, n);
    return NULL;
}

static pyg_error *api_buffer_write(pyg_buffer *dst, uint64_t off, const void *src, uint64_t size) {
    pyg_error *e = check_range(dst, off, size, "buffer_write");
    if (e) return e;
    if (size && !src) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "buffer_write: NULL source");
    vkp_val_host_access(dst, off, off + size, 1, "buffer_write");
    if (dst->map) { memcpy((char *)dst->map + off, src, size); return NULL; }
    pyg_device *d = dst->dev;
    pthread_mutex_lock(&d->lock);
    e = write_async_impl(d->internal, dst, off, src, size);
    if (!e) e = flush(d->internal);
    if (!e) e = wait_value(d, d->internal->timeline, d->internal->value);
    if (!e) vkp_val_known(d->internal->vid, d->internal->value);
    pthread_mutex_unlock(&d->lock);
    return e;
}

static pyg_error *api_buffer_read(pyg_buffer *src, uint64_t off, void *dst, uint64_t size) {
    pyg_error *e = check_range(src, off, size, "buffer_read");
    if (e) return e;
    if (size && !dst) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "buffer_read: NULL destination");
    vkp_val_host_access(src, off, off + size, 0, "buffer_read");
    if (src->map) {
        if (VKP_PROF) { vkp_prof.reads++; vkp_prof.read_bytes += size; }
        memcpy(dst, (const char *)src->map + off, size);
        return NULL;
    }
    pyg_device *d = src->dev;
    pthread_mutex_lock(&d->lock);
    e = read_blocking_impl(d->internal, src, off, dst, size);
    pthread_mutex_unlock(&d->lock);
    return e;
}

static pyg_error *api_buffer_fill(pyg_buffer *dst, uint64_t off, uint8_t value, uint64_t size) {
    pyg_error *e = check_range(dst, off, size, "buffer_fill");
    if (e) return e;
    if (dst->map) {   /* (the unmapped path checks in buffer_write) */
        vkp_val_host_access(dst, off, off + size, 1, "buffer_fill");
        memset((char *)dst->map + off, value, size);
        return NULL;
    }
    uint64_t chunk = size < (4u << 20) ? size : (4u << 20);
    void *tmp = malloc(chunk ? chunk : 1);
    if (!tmp) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "buffer_fill");
    memset(tmp, value, chunk);
    for (uint64_t done = 0; done < size && !e; done += chunk) {
        uint64_t n = size - done < chunk ? size - done : chunk;
        e = api_buffer_write(dst, off + done, tmp, n);
    }
    free(tmp);
    return e;
}

static pyg_error *api_stream_write_async(pyg_stream *s, pyg_buffer *dst, uint64_t off, const void *src, uint64_t size) {
    if (!s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: NULL stream");
    pyg_error *e = check_range(dst, off, size, "stream_write_async");
    if (e) return e;
    if (size && !src) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: NULL source");
    if (dst->dev != s->dev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: buffer of another device");
    return write_async_impl(s, dst, off, src, size);
}

static pyg_error *api_stream_read_async(pyg_stream *s, pyg_buffer *src, uint64_t off, void *dst, uint64_t size) {
    if (!s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: NULL stream");
    pyg_error *e = check_range(src, off, size, "stream_read_async");
    if (e) return e;
    if (size && !dst) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: NULL destination");
    if (src->dev != s->dev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: buffer of another device");
    return read_blocking_impl(s, src, off, dst, size);   /* no PYG_CAP_ASYNC_READ: blocks, in stream order */
}

static pyg_error *api_stream_copy_async(pyg_stream *s, pyg_buffer *dst, uint64_t doff, pyg_buffer *src, uint64_t soff, uint64_t size) {
    if (!s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_copy_async: NULL stream");
    pyg_error *e = check_range(dst, doff, size, "stream_copy_async (dst)");
    if (!e) e = check_range(src, soff, size, "stream_copy_async (src)");
    if (e) return e;
    if (dst->dev != s->dev || src->dev != s->dev)
        return vkp_err(PYG_ERR_UNSUPPORTED, "stream_copy_async between devices (no PYG_CAP_PEER_COPY)");
    if (size == 0) return NULL;
    VkCommandBuffer cb;
    if ((e = open_cmd(s, &cb))) return e;
    open_access(s, src->buf, soff, soff + size, 0);
    open_access(s, dst->buf, doff, doff + size, 1);
    VkBufferCopy reg = { .srcOffset = soff, .dstOffset = doff, .size = size };
    s->dev->fn.vkCmdCopyBuffer(cb, src->buf, dst->buf, 1, &reg);
    if (VKP_PROF) vkp_prof.commands++;
    vkp_val_queued(src, soff, soff + size, 0, s->vid, s->value + 1);
    vkp_val_queued(dst, doff, doff + size, 1, s->vid, s->value + 1);
    return NULL;
}

/* ---------------------------------------------------------------- sanitizer mode */

/* Two unordered transfer writes to the same bytes: synchronization validation must report a
 * write-after-write hazard (shows that the check can fail). */
static pyg_error *validation_selftest(pyg_device *d) {
    if (!vkp_validation_active()) return vkp_validation_check();
    pyg_buffer *b = NULL;
    pyg_error *e = api_buffer_alloc(d, 256, PYG_BUFFER_DEVICE, &b);
    if (e) return e;
    pthread_mutex_lock(&d->lock);
    pyg_stream *s = d->internal;
    VkCommandBuffer cb;
    if (!(e = open_cmd(s, &cb))) {
        d->fn.vkCmdFillBuffer(cb, b->buf, 0, 256, 1u);
        d->fn.vkCmdFillBuffer(cb, b->buf, 0, 256, 2u);   /* no barrier in between */
        e = flush(s);
    }
    if (!e) e = wait_value(d, s->timeline, s->value);
    pthread_mutex_unlock(&d->lock);
    api_buffer_free(b);
    return e;
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
    /* .stream_create = */ api_stream_create,
    /* .stream_destroy = */ api_stream_destroy,
    /* .stream_synchronize = */ api_stream_synchronize,
    /* .stream_wait_event = */ api_stream_wait_event,
    /* .event_create = */ api_event_create,
    /* .event_destroy = */ api_event_destroy,
    /* .event_record = */ api_event_record,
    /* .event_query = */ api_event_query,
    /* .event_synchronize = */ api_event_synchronize,
    /* .buffer_alloc = */ api_buffer_alloc,
    /* .buffer_free = */ api_buffer_free,
    /* .buffer_get_info = */ api_buffer_get_info,
    /* .buffer_write = */ api_buffer_write,
    /* .buffer_read = */ api_buffer_read,
    /* .buffer_fill = */ api_buffer_fill,
    /* .stream_write_async = */ api_stream_write_async,
    /* .stream_read_async = */ api_stream_read_async,
    /* .stream_copy_async = */ api_stream_copy_async,
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
    return raw_buffer(d, size, 0, buf, mem, map, NULL);
}

/* host-visible, mapped, device-local where the device has such memory (plan parameter blocks);
 * plain host memory when that allocation fails (a small BAR heap) */
pyg_error *vkp_raw_host_buffer(pyg_device *d, uint64_t size, VkBuffer *buf, VkDeviceMemory *mem, void **map) {
    pyg_error *e = raw_buffer(d, size, 2, buf, mem, map, NULL);
    if (e && api_error_code(e) == PYG_ERR_OUT_OF_MEMORY) {
        api_error_destroy(e);
        e = raw_buffer(d, size, 1, buf, mem, map, NULL);
    }
    return e;
}
