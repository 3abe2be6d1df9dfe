/* ddpc_parallel_for: fork-join over pthreads (see parallel.h).
 *
 * Threads are created per call: a call only splits work that takes
 * milliseconds, against tens of microseconds to start a thread, and no idle
 * pool competes with BLAS's own threads between calls. DDPC_NUM_THREADS caps
 * the count (default: the online cores, at most 8). */
#include "parallel.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 8

typedef struct {
    ddpc_range_fn fn;
    void *ctx;
    int64_t lo, hi;
} range_job_;

static void *run_range_(void *arg) {
    range_job_ *j = arg;
    j->fn(j->ctx, j->lo, j->hi);
    return NULL;
}

static int count_; /* 0: not decided yet */

static int default_count_(void) {
    const char *env = getenv("DDPC_NUM_THREADS");
    return env ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN);
}

void ddpc_set_num_threads(int n) {
    int c = n < 1 ? default_count_() : n;
    c = c < 1 ? 1 : (c > MAX_THREADS ? MAX_THREADS : c);
    __atomic_store_n(&count_, c, __ATOMIC_RELAXED);
}

int ddpc_get_num_threads(void) {
    if (!__atomic_load_n(&count_, __ATOMIC_RELAXED)) ddpc_set_num_threads(0);
    return __atomic_load_n(&count_, __ATOMIC_RELAXED);
}

void ddpc_parallel_for(int64_t n, int64_t grain, ddpc_range_fn fn, void *ctx) {
    int64_t parts = grain > 0 ? n / grain : n;
    if (parts > ddpc_get_num_threads()) parts = ddpc_get_num_threads();
    if (parts <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    range_job_ jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    int64_t step = (n + parts - 1) / parts;
    for (int64_t k = 0; k < parts; k++) {
        jobs[k] = (range_job_){fn, ctx, k * step, (k + 1) * step < n ? (k + 1) * step : n};
    }
    /* Part 0 runs on the caller; a part whose thread fails to start also runs here. */
    for (int64_t k = 1; k < parts; k++) started[k] = pthread_create(&tids[k], NULL, run_range_, &jobs[k]) == 0;
    run_range_(&jobs[0]);
    for (int64_t k = 1; k < parts; k++) {
        if (started[k])
            pthread_join(tids[k], NULL);
        else
            run_range_(&jobs[k]);
    }
}
