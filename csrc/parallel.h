/* Splitting large host loops across the machine's cores.
 *
 * Elementwise host ops are memory-bound and the optimizer steps touch every
 * parameter byte several times, so one core cannot saturate memory bandwidth.
 * ddpc_parallel_for splits [0, n) into contiguous ranges, runs them on
 * short-lived threads plus the caller, and joins. Small n runs inline. */
#ifndef DDPC_PARALLEL_H
#define DDPC_PARALLEL_H

#include <stdint.h>

typedef void (*ddpc_range_fn)(void *ctx, int64_t lo, int64_t hi);

/* Calls fn(ctx, lo, hi) over disjoint ranges covering [0, n), each at least
 * `grain` long, concurrently. Falls back to one inline call when threads are
 * unavailable. Touches no Python object, so it runs with the GIL released. */
void ddpc_parallel_for(int64_t n, int64_t grain, ddpc_range_fn fn, void *ctx);

/* Threads ddpc_parallel_for may use: DDPC_NUM_THREADS, else the online cores,
 * until ddpc_set_num_threads changes it (n < 1 restores that default). */
int ddpc_get_num_threads(void);
void ddpc_set_num_threads(int n);

#endif
