/* plugins/cpu/threadpool.h — a persistent pool of worker threads for the CPU kernels.
 *
 * Threads are created once (lazily, on the first run) and kept; changing the thread count
 * resizes the pool. The calling thread is worker 0. Between runs workers spin briefly, then sleep
 * on a condition variable. Runs are serialized by a mutex, so a pool may be shared by plans that
 * are computed from several host threads. */
#ifndef PYGGML_CPU_THREADPOOL_H
#define PYGGML_CPU_THREADPOOL_H

#include <stdint.h>

typedef struct cpu_pool cpu_pool;

/* A reusable barrier for the threads of one run. */
typedef struct cpu_barrier {
    int n;                         /* threads taking part */
    volatile int count;            /* arrivals in the current phase (atomic) */
    volatile int phase;            /* bumped when the last thread arrives (atomic; futex word) */
    volatile int sleepers;         /* threads blocked in the kernel on phase (atomic) */
    int spin;                      /* spins before blocking: short when threads outnumber CPUs */
} cpu_barrier;

void cpu_barrier_init(cpu_barrier *b, int n);
void cpu_barrier_wait(cpu_barrier *b);

typedef void (*cpu_pool_fn)(void *arg, int ith, int nth);

/* NULL on failure (out of memory). No thread is started yet. */
cpu_pool *cpu_pool_create(void);
/* Runs fn(arg, ith, n_threads) on n_threads threads (the caller is ith 0) and returns when all
 * are done. Returns 0, or -1 when threads could not be started (then fn ran on fewer threads:
 * never; the run is refused and nothing was called). */
int cpu_pool_run(cpu_pool *pool, int n_threads, cpu_pool_fn fn, void *arg);
void cpu_pool_destroy(cpu_pool *pool); /* NULL is a no-op; joins the workers */

#endif
