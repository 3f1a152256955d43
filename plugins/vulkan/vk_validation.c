/* plugins/vulkan/vk_validation.c — sanitizer mode: the Khronos validation layer with
 * synchronization validation, enabled by PYGGML_VULKAN_VALIDATION=1 in the environment when the
 * plugin initialises (instance layers are fixed at vkCreateInstance, before any device exists,
 * so a device option would come too late). A debug-utils messenger records every error and
 * warning the layer reports (sync hazards are errors); device_set_option("validation_check")
 * hands them to the host as one PYG_ERR_SANITIZER error and forgets them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vk_internal.h"

#define LAYER "VK_LAYER_KHRONOS_validation"

static int g_requested = -1;     /* env read once */
static int g_active;             /* layer + messenger are in place */
static char g_why_off[200];      /* why validation is off although requested */
static uint32_t g_layer_spec;     /* the layer's Vulkan version (VkLayerProperties.specVersion), once found */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_count;         /* messages since the last check */
static char g_text[8192];        /* their beginnings, '\n'-separated */
static size_t g_len;
static VkDebugUtilsMessengerEXT g_messenger;

int vkp_validation_requested(void) {
    if (g_requested < 0) {
        const char *e = getenv("PYGGML_VULKAN_VALIDATION");
        g_requested = e && *e && strcmp(e, "0") != 0;
    }
    return g_requested;
}

int vkp_validation_active(void) { return g_active; }

/* the validation layer's Vulkan version where it is being enabled, else 0 */
uint32_t vkp_validation_layer_version(void) { return g_active ? g_layer_spec : 0; }

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
        VkDebugUtilsMessageTypeFlagsEXT types, const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)user;
    if (!(types & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT)))
        return VK_FALSE;   /* loader chatter */
    const char *id = data && data->pMessageIdName ? data->pMessageIdName : "?";
    const char *msg = data && data->pMessage ? data->pMessage : "";
    pthread_mutex_lock(&g_mu);
    g_count++;
    if (g_len + 64 < sizeof g_text) {
        int n = snprintf(g_text + g_len, sizeof g_text - g_len, "%s[%s] %.600s\n",
                         sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error " : "warning ", id, msg);
        if (n > 0) g_len += (size_t)n < sizeof g_text - g_len ? (size_t)n : sizeof g_text - g_len - 1;
    }
    pthread_mutex_unlock(&g_mu);
    vkp_log(PYG_LOG_WARN, "validation: [%s] %.400s", id, msg);
    return VK_FALSE;
}

static const char *g_layers[1] = { LAYER };
static const char *g_exts[1] = { VK_EXT_DEBUG_UTILS_EXTENSION_NAME };
static const VkValidationFeatureEnableEXT g_enables[1] = { VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT };
static VkValidationFeaturesEXT g_features = { .sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
    .enabledValidationFeatureCount = 1, .pEnabledValidationFeatures = g_enables };
static VkDebugUtilsMessengerCreateInfoEXT g_mci = { .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
    .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
    .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
    .pfnUserCallback = on_message };

/* Adds the layer, debug utils and sync validation to `ii` when requested and installed; the
 * messenger create info is chained too, so vkCreateInstance itself is checked. */
void vkp_validation_setup(PFN_vkGetInstanceProcAddr gipa, VkInstanceCreateInfo *ii) {
    if (!vkp_validation_requested()) return;
    PFN_vkEnumerateInstanceLayerProperties elp =
        (PFN_vkEnumerateInstanceLayerProperties)gipa(NULL, "vkEnumerateInstanceLayerProperties");
    uint32_t n = 0;
    int found = 0;
    if (elp && elp(&n, NULL) == VK_SUCCESS && n > 0) {
        VkLayerProperties *lp = calloc(n, sizeof *lp);
        if (lp && elp(&n, lp) == VK_SUCCESS)
            for (uint32_t i = 0; i < n; i++)
                if (strcmp(lp[i].layerName, LAYER) == 0) { found = 1; g_layer_spec = lp[i].specVersion; }
        free(lp);
    }
    if (!found) {
        snprintf(g_why_off, sizeof g_why_off, "PYGGML_VULKAN_VALIDATION is set but %s is not installed "
                 "(Debian: vulkan-validationlayers)", LAYER);
        vkp_log(PYG_LOG_WARN, "%s", g_why_off);
        return;
    }
    g_mci.pNext = ii->pNext;
    g_features.pNext = &g_mci;
    ii->pNext = &g_features;
    ii->enabledLayerCount = 1;
    ii->ppEnabledLayerNames = g_layers;
    ii->enabledExtensionCount = 1;   /* the plugin enables no other instance extension */
    ii->ppEnabledExtensionNames = g_exts;
    g_active = -1;                   /* pending the messenger */
}

void vkp_validation_attach(PFN_vkGetInstanceProcAddr gipa, VkInstance inst) {
    if (g_active != -1) return;
    PFN_vkCreateDebugUtilsMessengerEXT cm =
        (PFN_vkCreateDebugUtilsMessengerEXT)gipa(inst, "vkCreateDebugUtilsMessengerEXT");
    g_mci.pNext = NULL;
    if (!cm || cm(inst, &g_mci, NULL, &g_messenger) != VK_SUCCESS) {
        snprintf(g_why_off, sizeof g_why_off, "vkCreateDebugUtilsMessengerEXT failed");
        g_active = 0;
        return;
    }
    g_active = 1;
    vkp_log(PYG_LOG_INFO, "validation layer on, with synchronization validation");
}

/* "validation_check": the messages since the last check as a PYG_ERR_SANITIZER error. */
pyg_error *vkp_validation_check(void) {
    if (g_active != 1)
        return vkp_err(PYG_ERR_UNSUPPORTED, "validation is off: %s", g_why_off[0] ? g_why_off :
                       "set PYGGML_VULKAN_VALIDATION=1 before the plugin initialises");
    pyg_error *e = NULL;
    pthread_mutex_lock(&g_mu);
    if (g_count)
        e = vkp_err(PYG_ERR_SANITIZER, "validation layer reported %llu message(s):\n%s",
                    (unsigned long long)g_count, g_text);
    g_count = 0;
    g_len = 0;
    g_text[0] = 0;
    pthread_mutex_unlock(&g_mu);
    return e;
}

/* ---------------------------------------------------------------- host-access checker
 *
 * The layer sees the device side: hazards inside a command buffer and across submissions. It
 * cannot see the host: a blocking buffer_read/write/fill (a memcpy into mapped memory on
 * lavapipe and iGPUs) while queued work still touches the range -- the race a dropped host sync
 * of the scheduler causes. plugin.h makes that the host's duty ("the host guarantees no queued
 * work touches the range"), so in sanitizer mode the plugin checks it, logically rather than by
 * timing: a queued access stays pending until the host has *observed* its completion through
 * stream_synchronize, event_synchronize, a completed event_query, a stream-ordered read, or
 * transitively through a stream that waited on it. A conflicting host access then counts as a
 * violation ([PYGGML-HOST-ACCESS]) whether or not the device happened to be finished. */

static uint64_t *g_known;        /* per checked stream id: highest timeline value the host observed */
static int g_nstreams, g_capstreams;
typedef struct vdep { int waiter; uint64_t wval; int on; uint64_t onval; } vdep;
static vdep *g_deps;             /* "waiter reaching wval implies `on` reached onval" */
static int g_ndeps, g_capdeps;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...) {
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* caller holds g_mu */
    g_count++;
    if (g_len + 64 < sizeof g_text) {
        int n = snprintf(g_text + g_len, sizeof g_text - g_len, "error [PYGGML-HOST-ACCESS] %s\n", buf);
        if (n > 0) g_len += (size_t)n < sizeof g_text - g_len ? (size_t)n : sizeof g_text - g_len - 1;
    }
    vkp_log(PYG_LOG_WARN, "validation: [PYGGML-HOST-ACCESS] %s", buf);
}

int vkp_val_stream_new(void) {
    if (g_active != 1) return -1;
    pthread_mutex_lock(&g_mu);
    int id = -1;
    if (g_nstreams == g_capstreams) {
        int cap = g_capstreams ? 2 * g_capstreams : 16;
        uint64_t *n = realloc(g_known, (size_t)cap * sizeof *n);
        if (n) { g_known = n; g_capstreams = cap; }
    }
    if (g_nstreams < g_capstreams) { id = g_nstreams++; g_known[id] = 0; }
    pthread_mutex_unlock(&g_mu);
    return id;
}

static void known_locked(int id, uint64_t v) {
    if (id < 0 || g_known[id] >= v) return;
    g_known[id] = v;
    for (int i = 0; i < g_ndeps; i++) {   /* what the stream had waited for is complete too */
        vdep dp = g_deps[i];
        if (dp.waiter != id || dp.wval > v) continue;
        g_deps[i--] = g_deps[--g_ndeps];
        known_locked(dp.on, dp.onval);
        i = -1;                           /* the list changed under us: rescan */
    }
}

void vkp_val_known(int id, uint64_t v) {
    if (id < 0) return;
    pthread_mutex_lock(&g_mu);
    known_locked(id, v);
    pthread_mutex_unlock(&g_mu);
}

void vkp_val_dep(int waiter, uint64_t wval, int on, uint64_t onval) {
    if (waiter < 0 || on < 0) return;
    pthread_mutex_lock(&g_mu);
    if (g_ndeps == g_capdeps) {
        int cap = g_capdeps ? 2 * g_capdeps : 64;
        vdep *n = realloc(g_deps, (size_t)cap * sizeof *n);
        if (n) { g_deps = n; g_capdeps = cap; }
    }
    if (g_ndeps < g_capdeps) g_deps[g_ndeps++] = (vdep){ waiter, wval, on, onval };
    pthread_mutex_unlock(&g_mu);
}

static void prune_locked(pyg_buffer *b) {
    int k = 0;
    for (int i = 0; i < b->n_acc; i++)
        if (b->acc[i].value > g_known[b->acc[i].stream]) b->acc[k++] = b->acc[i];
    b->n_acc = k;
}

void vkp_val_queued(pyg_buffer *b, uint64_t lo, uint64_t hi, int write, int stream, uint64_t value) {
    if (stream < 0 || !b || hi <= lo) return;
    pthread_mutex_lock(&g_mu);
    prune_locked(b);
    for (int i = 0; i < b->n_acc; i++) {   /* widen an entry of the same submission and kind */
        vkp_access *a = &b->acc[i];
        if (a->stream == stream && a->value == value && a->write == write && lo <= a->hi && a->lo <= hi) {
            if (lo < a->lo) a->lo = lo;
            if (hi > a->hi) a->hi = hi;
            pthread_mutex_unlock(&g_mu);
            return;
        }
    }
    if (b->n_acc == b->cap_acc) {
        int cap = b->cap_acc ? 2 * b->cap_acc : 8;
        vkp_access *n = realloc(b->acc, (size_t)cap * sizeof *n);
        if (n) { b->acc = n; b->cap_acc = cap; }
    }
    if (b->n_acc < b->cap_acc) b->acc[b->n_acc++] = (vkp_access){ lo, hi, write, stream, value };
    pthread_mutex_unlock(&g_mu);
}

/* A host access (blocking copy, fill, free) of [lo, hi): reads conflict with pending writes,
 * writes with any pending access. */
void vkp_val_host_access(pyg_buffer *b, uint64_t lo, uint64_t hi, int write, const char *what) {
    if (g_active != 1 || !b) return;
    pthread_mutex_lock(&g_mu);
    prune_locked(b);
    for (int i = 0; i < b->n_acc; i++) {
        vkp_access *a = &b->acc[i];
        if (!(write || a->write) || !(lo < a->hi && a->lo < hi)) continue;
        violation("%s of bytes [%llu, %llu) of a buffer while a queued %s of [%llu, %llu) (stream #%d, "
                  "submission %llu) has not been waited for by the host", what, (unsigned long long)lo,
                  (unsigned long long)hi, a->write ? "write" : "read", (unsigned long long)a->lo,
                  (unsigned long long)a->hi, a->stream, (unsigned long long)a->value);
        break;
    }
    pthread_mutex_unlock(&g_mu);
}

void vkp_val_buffer_free(pyg_buffer *b) {
    if (!b) return;
    if (g_active == 1) vkp_val_host_access(b, 0, UINT64_MAX, 1, "buffer_free");
    free(b->acc);
    b->acc = NULL;
    b->n_acc = b->cap_acc = 0;
}
