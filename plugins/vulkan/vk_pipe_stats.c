/* plugins/vulkan/vk_pipe_stats.c — option pipeline_stats: what the driver says about each pipeline it compiles
 * (VK_KHR_pipeline_executable_properties), one INFO line per pipeline executable, so that a GPU run shows what the
 * timings alone cannot: the registers a kernel takes, its shared memory, spills to local memory, as the driver
 * names and counts them (the names and the set differ from driver to driver; nothing here interprets them).
 *
 * The statistics exist only for pipelines created with VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR, so the option
 * covers the pipelines compiled after it is set; the device's pipeline cache keeps those made before (one per
 * shader and specialization), which are not compiled again. A device without the extension refuses the option
 * (vk_options.c). */
#include <stdio.h>
#include <string.h>
#include "vk_internal.h"

/* "name=value" of one statistic into buf (at most n bytes, always terminated) */
static void stat_text(const VkPipelineExecutableStatisticKHR *s, char *buf, size_t n) {
    switch (s->format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: snprintf(buf, n, "%s=%s", s->name, s->value.b32 ? "yes" : "no"); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: snprintf(buf, n, "%s=%lld", s->name, (long long)s->value.i64); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: snprintf(buf, n, "%s=%llu", s->name, (unsigned long long)s->value.u64); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: snprintf(buf, n, "%s=%g", s->name, s->value.f64); break;
    default: snprintf(buf, n, "%s=?", s->name); break;
    }
}

VkPipelineCreateFlags vkp_pipe_stats_flags(const pyg_device *d) {
    return d->opts.pipeline_stats && d->exec_props ? VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR : 0;
}

/* Logs pipe's statistics (created with vkp_pipe_stats_flags(d) set): "pipeline <shader> (spec 0x.., 0x..) <executable>:
 * name=value, ...". A query the driver fails is logged as such; nothing here fails the pipeline. */
void vkp_pipe_stats_log(pyg_device *d, int shader, const uint32_t spec[2], VkPipeline pipe) {
    if (!vkp_pipe_stats_flags(d)) return;
    VkPipelineInfoKHR pi = { .sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = pipe };
    VkPipelineExecutablePropertiesKHR props[8];
    uint32_t ne = 8;
    for (uint32_t i = 0; i < ne; i++) props[i] = (VkPipelineExecutablePropertiesKHR){ .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR };
    VkResult r = d->exec_props_fn(d->dev, &pi, &ne, props);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        vkp_log(PYG_LOG_WARN, "pipeline %s (spec 0x%x, 0x%x): vkGetPipelineExecutablePropertiesKHR failed (VkResult %d)",
                vkp_shader_name(shader), spec[0], spec[1], (int)r);
        return;
    }
    for (uint32_t x = 0; x < ne; x++) {
        VkPipelineExecutableInfoKHR ei = { .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = pipe, .executableIndex = x };
        VkPipelineExecutableStatisticKHR st[32];
        uint32_t ns = 32;
        for (uint32_t i = 0; i < ns; i++) st[i] = (VkPipelineExecutableStatisticKHR){ .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR };
        r = d->exec_stats_fn(d->dev, &ei, &ns, st);
        if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
            vkp_log(PYG_LOG_WARN, "pipeline %s (spec 0x%x, 0x%x) %s: vkGetPipelineExecutableStatisticsKHR failed (VkResult %d)",
                    vkp_shader_name(shader), spec[0], spec[1], props[x].name, (int)r);
            continue;
        }
        char line[1700];   /* (vkp_log's line holds 2047 bytes) */
        size_t at = 0;
        line[0] = 0;
        for (uint32_t i = 0; i < ns && at + 2 < sizeof line; i++) {
            char one[320];
            stat_text(&st[i], one, sizeof one);
            int k = snprintf(line + at, sizeof line - at, "%s%s", i ? ", " : "", one);
            if (k < 0 || (size_t)k >= sizeof line - at) { at = sizeof line - 1; break; }   /* (the line is full: cut there) */
            at += (size_t)k;
        }
        vkp_log(PYG_LOG_INFO, "pipeline %s (spec 0x%x, 0x%x) %s, subgroup %u: %s%s", vkp_shader_name(shader), spec[0], spec[1],
                props[x].name, props[x].subgroupSize, line, r == VK_INCOMPLETE ? ", ..." : "");
    }
}
