/* tests/plugins/testdev/stress.c — drive the test device's queues from several host threads at once.
 *
 *   stress LIBPATH [ITERATIONS]      exit status 0 = every check passed
 *
 * Host thread t owns two streams on device t % n_devices. Per iteration: upload a fresh array on
 * stream A, event, stream B waits, device copy, compute sum = copy + copy (the CPU kernels), read
 * the sum back on B, event; A waits on B's event before
 * the next upload (a slot is rewritten only after its reader finished); every few iterations A
 * also waits on the last event of the neighbouring thread. The host checks every result, and at
 * the end the sanitizer (on) must have seen nothing. Built and run by tests/test_testdev.py, and
 * by hand under -fsanitize=thread to check the plugin's own locking. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pyggml/plugin.h"

#define N_THREADS 4
#define N_FLOATS 4096

static const pyg_plugin_api *api;
static int iterations = 200;
static pyg_event *last_event[N_THREADS];
static int failures;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, pyg_error *e) {
    pthread_mutex_lock(&fail_mu);
    failures++;
    fprintf(stderr, "FAIL %s: %s\n", what, e ? api->error_message(e) : "");
    pthread_mutex_unlock(&fail_mu);
    api->error_destroy(e);
}

#define CHECK(call) do { pyg_error *e_ = (call); if (e_) { fail(#call, e_); return NULL; } } while (0)

static void *host_thread(void *arg) {
    int t = (int)(long)arg;
    pyg_device *dev;
    CHECK(api->device_get(t % api->device_count(), &dev));
    pyg_stream *a, *b;
    pyg_event *up, *down;
    pyg_buffer *slot, *copy, *out;
    CHECK(api->stream_create(dev, 0, &a));
    CHECK(api->stream_create(dev, 0, &b));
    CHECK(api->event_create(dev, &up));
    CHECK(api->event_create(dev, &down));
    __atomic_store_n(&last_event[t], down, __ATOMIC_RELEASE);
    CHECK(api->buffer_alloc(dev, N_FLOATS * 4, 0, &slot));
    CHECK(api->buffer_alloc(dev, N_FLOATS * 4, 0, &copy));
    CHECK(api->buffer_alloc(dev, N_FLOATS * 4, 0, &out));
    pyg_buffer_info ci = { sizeof ci }, oi = { sizeof oi };
    CHECK(api->buffer_get_info(copy, &ci));
    CHECK(api->buffer_get_info(out, &oi));
    pyg_tensor *tc = calloc(2, sizeof *tc), *ts = tc + 1;
    for (int k = 0; k < 2; k++) {
        tc[k].type = PYG_TYPE_F32;
        tc[k].ne[0] = N_FLOATS / 4;
        tc[k].ne[1] = 4;
        tc[k].ne[2] = tc[k].ne[3] = 1;
        tc[k].nb[0] = 4;
        tc[k].nb[1] = (N_FLOATS / 4) * 4;
        tc[k].nb[2] = tc[k].nb[3] = N_FLOATS * 4;
    }
    tc->buffer = copy;
    tc->data = ci.base;
    snprintf(tc->name, sizeof tc->name, "copy");
    ts->op = PYG_OP_ADD;
    ts->src[0] = ts->src[1] = tc;
    ts->buffer = out;
    ts->data = oi.base;
    snprintf(ts->name, sizeof ts->name, "sum");
    static pyg_tensor *nodes[N_THREADS][1];
    nodes[t][0] = ts;
    pyg_graph *g = calloc(1, sizeof *g);
    g->struct_size = sizeof *g;
    g->n_nodes = 1;
    g->nodes = nodes[t];
    g->id = (uint64_t)t + 1;
    pyg_graph_plan *plan;
    CHECK(api->graph_plan_create(dev, g, &plan));
    float *x = malloc(N_FLOATS * 4), *y = malloc(N_FLOATS * 4);
    for (int it = 0; it < iterations; it++) {
        for (int i = 0; i < N_FLOATS; i++) x[i] = (float)(t * 1000003 + it * 7919 + i);
        CHECK(api->stream_write_async(a, slot, 0, x, N_FLOATS * 4));
        CHECK(api->event_record(up, a));
        CHECK(api->stream_wait_event(b, up));
        CHECK(api->stream_copy_async(b, copy, 0, slot, 0, N_FLOATS * 4));
        CHECK(api->graph_plan_compute(plan, b));
        CHECK(api->stream_read_async(b, out, 0, y, N_FLOATS * 4));
        CHECK(api->event_record(down, b));
        CHECK(api->stream_wait_event(a, down)); /* next upload after this read */
        if (it % 5 == 0) {
            pyg_event *other = __atomic_load_n(&last_event[(t + 1) % N_THREADS], __ATOMIC_ACQUIRE);
            if (other) CHECK(api->stream_wait_event(a, other));
        }
        CHECK(api->event_synchronize(down)); /* x and y may be touched again */
        for (int i = 0; i < N_FLOATS; i++)
            if (y[i] != x[i] + x[i]) {
                fail("data check", NULL);
                return NULL;
            }
    }
    CHECK(api->stream_synchronize(a));
    CHECK(api->stream_synchronize(b));
    /* the other threads may still wait on `down`: keep events, streams and buffers alive */
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIBPATH [ITERATIONS]\n", argv[0]);
        return 2;
    }
    if (argc > 2) iterations = atoi(argv[2]);
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    pyg_plugin_get_api_fn get = (pyg_plugin_get_api_fn)dlsym(lib, PYG_PLUGIN_ENTRY_NAME);
    static pyg_host_info host = { sizeof(pyg_host_info), PYG_ABI_MAJOR, PYG_ABI_MINOR, 0, NULL, NULL };
    api = get(&host);
    pyg_error *e = api->plugin_init();
    if (e) { fail("plugin_init", e); return 1; }
    pyg_device *d0;
    if ((e = api->device_get(0, &d0))) { fail("device_get", e); return 1; }
    if ((e = api->device_set_option(d0, "sanitize", "1"))) { fail("sanitize", e); return 1; }
    for (int i = 0; i < api->device_count(); i++) {
        pyg_device *d;
        api->device_get(i, &d);
        api->device_set_option(d, "copy_latency_us", i ? "50" : "20");
    }
    pthread_t th[N_THREADS];
    for (long t = 0; t < N_THREADS; t++) pthread_create(&th[t], NULL, host_thread, (void *)t);
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    if ((e = api->device_set_option(d0, "sanitize_check", "1"))) fail("sanitizer report", e);
    if (failures) return 1;
    printf("ok: %d threads x %d iterations\n", N_THREADS, iterations);
    return 0;
}
