/* plugins/vulkan/vk_profile.c — where a decode step's time goes (device option profile=1).
 *
 * Host side: counts and times of the plugin's own work per entry kind (submissions, command
 * buffer recordings, descriptor updates, waits, staging memcpy). Device side: plans created while
 * profiling write a timestamp after every dispatch; the deltas are summed per op. The option
 * "profile_report" logs the totals (PYG_LOG_INFO, through the host log: pyggml's "pyggml"
 * logger) and starts over. With profiling off every hook is one branch. Plugin-wide: the counters
 * are the plugin's; plans created while it is on write the timestamps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "vk_internal.h"

int vkp_prof_on = 0;
vkp_prof_counters vkp_prof;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
typedef struct gpu_acc { uint64_t ns, n, bytes; } gpu_acc;   /* device time, dispatches, operand bytes */
static gpu_acc g_op[PYG_OP_COUNT];
/* the same per shader and specialization ("mul_mat_vec2.q4_0.r2"): labels interned at plan creation */
#define MAX_LABELS 128
static char g_label[MAX_LABELS][48];
static int g_nlabel;
static gpu_acc g_lab[MAX_LABELS];

int vkp_prof_label(const char *name) {
    pthread_mutex_lock(&g_mu);
    int i = 0;
    while (i < g_nlabel && strcmp(g_label[i], name) != 0) i++;
    if (i == g_nlabel) {
        if (g_nlabel == MAX_LABELS) i = -1;
        else snprintf(g_label[g_nlabel++], sizeof g_label[0], "%s", name);
    }
    pthread_mutex_unlock(&g_mu);
    return i;
}

const char *vkp_prof_label_name(int label) {
    return label >= 0 && label < g_nlabel ? g_label[label] : "?";   /* interned names never change */
}

int vkp_profiling(void) { return vkp_prof_on > 0; }

uint64_t vkp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void vkp_prof_add_gpu(int op, int label, uint64_t ns, uint64_t bytes) {
    if (op < 0 || op >= PYG_OP_COUNT) return;
    pthread_mutex_lock(&g_mu);
    gpu_acc *a[2] = { &g_op[op], label >= 0 && label < g_nlabel ? &g_lab[label] : NULL };
    for (int i = 0; i < 2; i++) if (a[i]) { a[i]->ns += ns; a[i]->bytes += bytes; a[i]->n++; }
    pthread_mutex_unlock(&g_mu);
}

#define US(x) ((double)(x) / 1e3)

static void gpu_line(const char *kind, const char *name, gpu_acc a, uint64_t tot) {
    if (a.n)
        vkp_log(PYG_LOG_INFO, "profile %s: %-28s %6llu dispatches %10.1f us total %8.2f us each %5.1f%% %8.1f GB/s",
                kind, name, (unsigned long long)a.n, US(a.ns), US(a.ns) / (double)a.n,
                tot ? 100.0 * (double)a.ns / (double)tot : 0.0, a.ns ? (double)a.bytes / (double)a.ns : 0.0);
}

pyg_error *vkp_prof_report(void) {
    if (!vkp_profiling()) return vkp_err(PYG_ERR_UNSUPPORTED, "profiling is off: set the device option profile=1 first");
    vkp_prof_counters c = vkp_prof;
    memset(&vkp_prof, 0, sizeof vkp_prof);
    gpu_acc ops[PYG_OP_COUNT], labs[MAX_LABELS];
    pthread_mutex_lock(&g_mu);
    int nlab = g_nlabel;   /* labels are kept across reports (plans keep their ids) */
    memcpy(ops, g_op, sizeof ops);
    memcpy(labs, g_lab, sizeof labs);
    memset(g_op, 0, sizeof g_op);
    memset(g_lab, 0, sizeof g_lab);
    pthread_mutex_unlock(&g_mu);
    uint64_t n = c.plan_computes ? c.plan_computes : 1;
    vkp_log(PYG_LOG_INFO, "profile: %llu plan computes, %llu submits (%.1f us host), %llu command buffers recorded "
            "(%llu commands, %.1f us), %llu descriptor updates, %llu host waits (%.1f us), "
            "%llu async writes (%llu bytes, staging memcpy %.1f us), %llu reads (%llu bytes, %llu submits through "
            "a staging copy), plan_compute %.1f us",
            (unsigned long long)c.plan_computes, (unsigned long long)c.submits, US(c.submit_ns),
            (unsigned long long)c.recordings, (unsigned long long)c.commands, US(c.record_ns),
            (unsigned long long)c.descriptor_updates, (unsigned long long)c.waits, US(c.wait_ns),
            (unsigned long long)c.writes, (unsigned long long)c.write_bytes, US(c.memcpy_ns),
            (unsigned long long)c.reads, (unsigned long long)c.read_bytes, (unsigned long long)c.staged_reads,
            US(c.compute_ns));
    vkp_log(PYG_LOG_INFO, "profile per plan compute: %.2f submits, %.2f recordings, %.1f commands, %.1f us submit, "
            "%.1f us waiting", (double)c.submits / n, (double)c.recordings / n, (double)c.commands / n,
            US(c.submit_ns) / n, US(c.wait_ns) / n);
    uint64_t tot = 0;
    for (int i = 0; i < PYG_OP_COUNT; i++) tot += ops[i].ns;
    for (int i = 0; i < PYG_OP_COUNT; i++) gpu_line("gpu", pyg_op_name(i), ops[i], tot);
    for (int i = 0; i < nlab; i++) gpu_line("shader", g_label[i], labs[i], tot);
    if (tot) vkp_log(PYG_LOG_INFO, "profile gpu: total %.1f us, %.1f us per plan compute", US(tot), US(tot) / n);
    return NULL;
}
