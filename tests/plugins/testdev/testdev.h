/* tests/plugins/testdev/testdev.h — a test plugin that behaves like a GPU (internal header).
 *
 * libpyggml-testdev.so implements plugin ABI 1.0 on the CPU, but the way a discrete GPU does:
 * its buffers are memory the host may not touch (buffer_get_info gives host_ptr = NULL unless the
 * test declares PYG_CAP_HOST_MEMORY), every stream is a worker thread draining a FIFO of commands
 * with injected latency, events are points in those FIFOs, and a stream wait blocks the worker,
 * never the host. Nodes run through the CPU plugin's kernels (plugins/cpu, cpu_compute.h), so
 * results are bitwise those of the CPU plugin.
 *
 * Sanitizer mode (PYGGML_SANITIZE=1 at init, or option "sanitize" = "1") decides at enqueue time,
 * with vector clocks, whether every access is ordered after the conflicting accesses still pending
 * on other streams (see sanitize.c). The verdict does not depend on timing: a missing wait fails
 * even when the latency happened to hide it.
 *
 * Locking: one global mutex (td.mu) guards every field below that more than one thread touches;
 * one condition variable (td.cv) is broadcast on every state change. Copies and kernels run with
 * the mutex released. */
#ifndef PYGGML_TESTDEV_H
#define PYGGML_TESTDEV_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include "pyggml/pyggml.h"
#include "cpu_compute.h"

#define TD_MAX_DEVICES 8
#define TD_MSG 1024
#define TD_SNAPSHOT_MAX (256ull << 20) /* larger async writes are not compared (memory) */

/* ---------------------------------------------------------------- errors */

struct pyg_error {
    int32_t code;
    int is_static;           /* 1: the out-of-memory singleton, destroy is a no-op */
    char msg[];
};

pyg_error *td_error(int32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
pyg_error *td_oom(void);
int32_t td_error_code(const pyg_error *e);
const char *td_error_msg(const pyg_error *e);
void td_error_free(pyg_error *e);
/* Log through host->log. Never calls the host while td.mu is held, nor from a worker thread (the
 * host's callback may need a lock of its own, e.g. Python's GIL, held by a thread that waits for
 * td.mu or for that worker): such a message is queued and delivered by the next td_unlock of a
 * host thread (every entry point takes the lock, so the next call on the plugin delivers it). */
void td_log(int32_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void td_lock(void);
void td_unlock(void);
void td_mark_worker(void);

/* ---------------------------------------------------------------- vector clocks */

/* v[i] = the last command of timeline (stream) i that is known to be ordered before this point. */
typedef struct td_clock {
    uint64_t *v;
    int n;
} td_clock;

uint64_t td_clock_get(const td_clock *c, int i);
int td_clock_set(td_clock *c, int i, uint64_t seq);      /* 0, or -1 out of memory */
int td_clock_join(td_clock *dst, const td_clock *src);   /* dst = max(dst, src) */
int td_clock_copy(td_clock *dst, const td_clock *src);
void td_clock_free(td_clock *c);

/* ---------------------------------------------------------------- sanitizer records */

/* One access still pending: a byte range that timeline `tl` reads or writes in command `seq`. */
typedef struct td_access {
    uint64_t lo, hi;          /* [lo, hi) bytes in the buffer (or host addresses) */
    int write;
    int tl;                   /* stream id */
    uint64_t seq;             /* command that makes it */
    char what[160];           /* "stream_write_async", "compute node 'ffn_out' (mul_mat)" ... */
    struct td_access *next;
} td_access;

typedef struct td_alist {
    td_access *head;
    int n;
} td_alist;

/* ---------------------------------------------------------------- objects */

/* How blocking host copies are built (see hostcopy.c). */
typedef enum td_blocking_copies {
    TD_BLOCKING_COMPLETE,     /* done for every queue when the call returns (the contract) */
    TD_BLOCKING_STAGED,       /* CUDA's pageable cudaMemcpy on the legacy stream: returns once the
                                 source is staged; the bytes land later on the default queue */
} td_blocking_copies;

typedef struct td_config {
    uint64_t caps, quirks;
    int64_t copy_latency_us, launch_latency_us, node_latency_us;
    td_blocking_copies blocking_copies;
    int pageable_async;       /* 1: queued copies from/to ordinary host memory never block;
                                 0 (CUDA): a read into it blocks until done, a write from it of
                                 more than staging_bytes blocks until the stream reaches it */
    uint64_t staging_bytes;
    uint64_t memory_total, alignment;
    int n_threads, reference;
    const char *name;         /* interned, never freed */
    const char *description;  /* interned, never freed */
} td_config;

struct pyg_device {
    int index;
    char label[48];           /* "testdev:0", for messages */
    td_config cfg;            /* under td.mu */
    uint64_t allocated;       /* device bytes in live buffers */
    pthread_mutex_t exec_mu;  /* serializes the device's streams when MULTI_STREAM is off */
    struct pyg_stream *dflt;  /* the runtime's default queue (hostcopy.c); NULL until first used */
};

#define TD_BUFFER_MAGIC 0x7464627566u

struct pyg_buffer {
    uint64_t magic;
    int id;
    pyg_device *dev;
    uint32_t flags;
    uint8_t *base;
    uint64_t size;
    int inflight;             /* queued commands that touch it */
    td_alist acc;             /* sanitizer: pending accesses */
    struct pyg_buffer *next;  /* registry of live buffers */
};

typedef enum td_cmd_kind {
    TD_CMD_WRITE,    /* host -> buffer */
    TD_CMD_READ,     /* buffer -> host */
    TD_CMD_COPY,     /* buffer -> buffer */
    TD_CMD_COMPUTE,
    TD_CMD_RECORD,
    TD_CMD_WAIT,
} td_cmd_kind;

/* The longest a staged landing waits for the host to drain its queue before it lands anyway. */
#define TD_HOLD_MAX_US 2000000

typedef struct td_cmd {
    td_cmd_kind kind;
    uint64_t seq;
    int64_t latency_us;
    int serialize;            /* device without MULTI_STREAM: hold dev->exec_mu while running */
    uint8_t *dst;
    const uint8_t *src;
    uint64_t size;
    uint8_t *snapshot;        /* sanitizer: host bytes of an async write, taken at enqueue */
    uint8_t *owned;           /* a staged copy of the source, freed with the command */
    int hold;                 /* a staged landing: runs only once the host drains its queue (or
                                 TD_HOLD_MAX_US passed), so work queued meanwhile on a stream reads
                                 the old bytes whatever the load on the machine */
    pyg_graph_plan *plan;
    struct pyg_stream *wait_stream;
    uint64_t wait_seq;
    pyg_buffer *bufs[2];      /* inflight counts to drop on completion */
    char what[96];
    struct td_cmd *next;
} td_cmd;

struct pyg_stream {
    int id;                   /* timeline index in clocks */
    pyg_device *dev;
    pthread_t thread;
    int thread_started;
    td_cmd *head, *tail;
    uint64_t enq;             /* last command queued */
    uint64_t done;            /* last command completed (FIFO: all before it too) */
    uint64_t drain_target;    /* the host waits for the commands up to this one (td_host_drain) */
    int quit, destroyed;
    td_clock clock;           /* what is ordered before the next command queued here */
    pyg_error *err;           /* first asynchronous failure, reported once */
    uint64_t last_compute;    /* seq of the last compute (PYG_QUIRK_MULTI_DEVICE_SYNC check) */
    int hidden;               /* a device's default queue: never handed to the host */
    uint64_t quirk_reported;
};

struct pyg_event {
    pyg_device *dev;
    struct pyg_stream *stream; /* NULL: never recorded (counts as completed) */
    uint64_t seq;
    td_clock clock;            /* the recording stream's clock at the record */
};

/* A range a compute touches (precomputed per plan). */
typedef struct td_range {
    pyg_buffer *buf;
    uint64_t lo, hi;
    int write;
    char what[160];
} td_range;

struct pyg_graph_plan {
    pyg_device *dev;
    const pyg_graph *graph;
    cpu_plan *cp;
    pthread_mutex_t mu;        /* one compute of a plan at a time */
    int inflight;
    td_range *ranges;
    int n_ranges;
    pyg_buffer **bufs;         /* distinct buffers it touches */
    int n_bufs;
    int last_tl;               /* stream id and seq of the last compute queued (-1: none) */
    uint64_t last_seq;
};

/* ---------------------------------------------------------------- global state */

typedef struct td_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int initialized;
    pyg_device devices[TD_MAX_DEVICES];
    int n_devices;
    int sanitize;
    int poison_reads;          /* sanitizer: fill async-read destinations with 0xff at enqueue */
    int poison_alloc;          /* fill new device buffers with 0xff */
    int trace;                 /* log every command's start and end (PYG_LOG_DEBUG "trace ...") */
    pyg_buffer *buffers;       /* live buffers */
    int next_buffer_id;
    struct pyg_stream **streams; /* by id; kept after destroy (clocks refer to the ids) */
    int n_streams, cap_streams;
    td_clock host;             /* what the host has waited for */
    td_alist hostmem;          /* sanitizer: pending accesses to ordinary host memory */
    uint64_t violations;
    char *report;              /* violation messages since the last "sanitize_check" */
    size_t report_len;
} td_state;

extern td_state td;
extern const char *td_plugin_name;

/* sanitize.c (all with td.mu held) */
int td_san_check(td_alist *l, const char *where, uint64_t lo, uint64_t hi, int write,
                 struct pyg_stream *s, const char *what, char *msg, size_t msglen);
void td_san_add(td_alist *l, uint64_t lo, uint64_t hi, int write, struct pyg_stream *s,
                uint64_t seq, const char *what);
void td_san_prune(td_alist *l);
void td_san_clear(td_alist *l);
void td_san_violation(const char *msg);  /* count, remember, log at PYG_LOG_ERROR */
int td_san_quirk_check(struct pyg_stream *s, char *msg, size_t msglen);
pyg_buffer *td_find_host_buffer(const void *p, uint64_t size);
const char *td_stream_label(int id, char *buf, size_t len);

/* queue.c: streams, events, queued copies */
pyg_error *td_stream_create(pyg_device *dev, uint32_t flags, pyg_stream **out);
void td_stream_destroy(pyg_stream *s);
pyg_error *td_stream_synchronize(pyg_stream *s);
pyg_error *td_stream_wait_event(pyg_stream *s, pyg_event *e);
pyg_error *td_event_create(pyg_device *dev, pyg_event **out);
void td_event_destroy(pyg_event *e);
pyg_error *td_event_record(pyg_event *e, pyg_stream *s);
pyg_error *td_event_query(pyg_event *e, int32_t *done);
pyg_error *td_event_synchronize(pyg_event *e);
pyg_error *td_stream_write_async(pyg_stream *s, pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size);
pyg_error *td_stream_read_async(pyg_stream *s, pyg_buffer *src, uint64_t offset, void *dst, uint64_t size);
pyg_error *td_stream_copy_async(pyg_stream *s, pyg_buffer *dst, uint64_t dst_offset, pyg_buffer *src,
                                uint64_t src_offset, uint64_t size);
/* One access a queued command makes, checked and recorded by td_enqueue. */
typedef struct td_req {
    td_alist *list;
    const char *where;        /* "buffer #3 (testdev:0, 4096 bytes)" or "host memory" */
    uint64_t lo, hi;
    int write;
    const char *what;
} td_req;
/* Queue cmd on s (td.mu held): check and record the accesses, append, and with `blocking` wait
 * until it ran. cmd->seq is set. Returns the sanitizer's verdict or the stream's pending error
 * (then cmd was not queued and is freed). */
pyg_error *td_enqueue(pyg_stream *s, td_cmd *cmd, const td_req *reqs, int nreq, int blocking);
int td_stream_valid(const pyg_stream *s);
/* td.mu held: the host waits until s has run everything queued, and is then ordered after it. */
void td_host_drain(pyg_stream *s);
/* A hidden queue of dev (its default queue); td.mu held, may drop it while starting the worker. */
pyg_error *td_stream_create_hidden(pyg_device *dev, pyg_stream **out);
void td_buffer_where(const pyg_buffer *b, char *buf, size_t len);

/* plan.c: graph plans */
pyg_error *td_graph_plan_create(pyg_device *dev, const pyg_graph *graph, pyg_graph_plan **out);
void td_graph_plan_destroy(pyg_graph_plan *plan);
pyg_error *td_graph_plan_compute(pyg_graph_plan *plan, pyg_stream *s);
int td_plan_run(pyg_graph_plan *plan, char *err, size_t errlen); /* on the worker */

/* hostcopy.c: the blocking copies */
pyg_error *td_buffer_write(pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size);
pyg_error *td_buffer_read(pyg_buffer *src, uint64_t offset, void *dst, uint64_t size);
pyg_error *td_buffer_fill(pyg_buffer *dst, uint64_t offset, uint8_t value, uint64_t size);

/* testdev.c */
int td_buffer_valid(const pyg_buffer *b);  /* with td.mu held */
int td_device_valid(const pyg_device *d);

#endif
