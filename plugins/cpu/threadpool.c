/* plugins/cpu/threadpool.c — persistent workers, condition-variable wake-up, spinning barrier. */
#include "threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define CPU_PAUSE() __asm__ __volatile__("yield")
#else
#define CPU_PAUSE() ((void)0)
#endif

/* Spins before a waiting thread yields or sleeps: short, since the machine may be shared. */
#define SPIN_BEFORE_YIELD 2000
#define SPIN_BEFORE_SLEEP 20000
#ifndef BARRIER_YIELDS
#define BARRIER_YIELDS 100
#endif

typedef struct worker {
    cpu_pool *pool;
    int index;                /* 1 .. n_workers */
    int start_generation;     /* generation when started: runs before it are not its own */
    pthread_t thread;
} worker;

struct cpu_pool {
    pthread_mutex_t run_lock;  /* one run at a time */
    pthread_mutex_t lock;      /* guards the fields below together with cond */
    pthread_cond_t cond;       /* workers sleep here between runs */
    pthread_cond_t done_cond;  /* the caller sleeps here waiting for workers */
    worker *workers;
    int n_workers;             /* started threads (not counting the caller) */
    volatile int generation;   /* bumped per run (atomic) */
    volatile int n_active;     /* threads taking part in the current run, caller included */
    volatile int pending;      /* workers of the current run not yet finished (atomic) */
    volatile int stop;
    cpu_pool_fn fn;
    void *arg;
};

static int online_cpus(void) {
    static int n = 0;
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    return n;
}

/* Pauses a waiting thread spins before yielding: long when every thread has a CPU, short when
 * threads outnumber CPUs (then the spinner only delays the thread it waits for). */
static int spin_budget(int nth) {
    return nth <= online_cpus() ? SPIN_BEFORE_SLEEP : 16;
}

/* Block while *addr == val (spurious returns allowed); wake every blocked thread. */
static void futex_wait_while(volatile int *addr, int val) {
#if defined(__linux__)
    syscall(SYS_futex, (int *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)addr, (void)val;
    sched_yield();
#endif
}
static void futex_wake_all(volatile int *addr) {
#if defined(__linux__)
    syscall(SYS_futex, (int *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

void cpu_barrier_init(cpu_barrier *b, int n) {
    b->n = n;
    b->count = 0;
    b->phase = 0;
    b->sleepers = 0;
    /* with more threads than CPUs a spinning thread only delays the one it waits for */
    b->spin = n <= online_cpus() ? SPIN_BEFORE_YIELD : 16;
}

void cpu_barrier_wait(cpu_barrier *b) {
    if (b->n <= 1) return;
    int phase = __atomic_load_n(&b->phase, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == b->n) {
        __atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&b->phase, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&b->sleepers, __ATOMIC_SEQ_CST)) futex_wake_all(&b->phase);
        return;
    }
    for (int spins = 0; spins < b->spin; spins++) {
        if (__atomic_load_n(&b->phase, __ATOMIC_ACQUIRE) != phase) return;
        CPU_PAUSE();
    }
    /* then give the CPU away a few times (cheap when the other thread is merely preempted) */
    for (int y = 0; y < BARRIER_YIELDS; y++) {
        if (__atomic_load_n(&b->phase, __ATOMIC_ACQUIRE) != phase) return;
        sched_yield();
    }
    __atomic_add_fetch(&b->sleepers, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&b->phase, __ATOMIC_SEQ_CST) == phase) futex_wait_while(&b->phase, phase);
    __atomic_sub_fetch(&b->sleepers, 1, __ATOMIC_SEQ_CST);
}

static void *worker_main(void *p) {
    worker *w = p;
    cpu_pool *pool = w->pool;
    int seen = w->start_generation;
    for (;;) {
        /* wait for a new generation: spin, then sleep */
        int spins = 0;
        const int budget = spin_budget(pool->n_active);
        while (__atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE) == seen &&
               !__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE)) {
            if (++spins < budget) {
                CPU_PAUSE();
                continue;
            }
            if (spins < budget + BARRIER_YIELDS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&pool->lock);
            while (pool->generation == seen && !pool->stop) pthread_cond_wait(&pool->cond, &pool->lock);
            pthread_mutex_unlock(&pool->lock);
        }
        if (__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE)) break;
        seen = __atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE);
        int nth = pool->n_active;
        if (w->index < nth) pool->fn(pool->arg, w->index, nth);
        /* every worker acknowledges every run, so none can lag into the next one */
        if (__atomic_sub_fetch(&pool->pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done_cond);
            pthread_mutex_unlock(&pool->lock);
        }
    }
    return NULL;
}

cpu_pool *cpu_pool_create(void) {
    cpu_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pthread_mutex_init(&pool->run_lock, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->cond, NULL);
    pthread_cond_init(&pool->done_cond, NULL);
    return pool;
}

static void stop_workers(cpu_pool *pool) {
    pthread_mutex_lock(&pool->lock);
    __atomic_store_n(&pool->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < pool->n_workers; i++) pthread_join(pool->workers[i].thread, NULL);
    free(pool->workers);
    pool->workers = NULL;
    pool->n_workers = 0;
    pool->stop = 0;
}

/* Called under run_lock with no run in flight. */
static int ensure_workers(cpu_pool *pool, int n) {
    if (pool->n_workers == n) return 0;
    stop_workers(pool);
    if (n == 0) return 0;
    pool->workers = calloc((size_t)n, sizeof *pool->workers);
    if (!pool->workers) return -1;
    for (int i = 0; i < n; i++) {
        worker *w = &pool->workers[i];
        w->pool = pool;
        w->index = i + 1;
        w->start_generation = pool->generation;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pool->n_workers = i;
            stop_workers(pool);
            return -1;
        }
        pool->n_workers = i + 1;
    }
    return 0;
}

int cpu_pool_run(cpu_pool *pool, int n_threads, cpu_pool_fn fn, void *arg) {
    if (n_threads < 1) n_threads = 1;
    pthread_mutex_lock(&pool->run_lock);
    if (n_threads == 1) {
        fn(arg, 0, 1);
        pthread_mutex_unlock(&pool->run_lock);
        return 0;
    }
    /* the workers only grow: runs with fewer threads leave the extra ones idle (they wake and
     * acknowledge each run), so Schedulers with different thread counts (per stream) taking
     * turns do not restart threads on every run */
    if (pool->n_workers < n_threads - 1 && ensure_workers(pool, n_threads - 1) != 0) {
        pthread_mutex_unlock(&pool->run_lock);
        return -1;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->n_active = n_threads;
    __atomic_store_n(&pool->pending, pool->n_workers, __ATOMIC_RELEASE);
    pthread_mutex_lock(&pool->lock);
    __atomic_add_fetch(&pool->generation, 1, __ATOMIC_ACQ_REL);
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->lock);

    fn(arg, 0, n_threads);

    const int budget = spin_budget(n_threads);
    for (int spins = 0; __atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE) != 0; spins++) {
        if (spins < budget) {
            CPU_PAUSE();
            continue;
        }
        if (spins < budget + BARRIER_YIELDS) {
            sched_yield();
            continue;
        }
        pthread_mutex_lock(&pool->lock);
        while (__atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE) != 0)
            pthread_cond_wait(&pool->done_cond, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->run_lock);
    return 0;
}

void cpu_pool_destroy(cpu_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->run_lock);
    stop_workers(pool);
    pthread_mutex_unlock(&pool->run_lock);
    pthread_mutex_destroy(&pool->run_lock);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->cond);
    pthread_cond_destroy(&pool->done_cond);
    free(pool);
}
