/* Pure index math of the collectives: how a tensor is cut into ring segments
 * and shared-memory slices, and which segment each ring step moves. Kept
 * apart from the transport code so it can be unit-tested on its own. */
#ifndef DDPC_COMM_SCHEDULE_H
#define DDPC_COMM_SCHEDULE_H

#include <stddef.h>

/* Elements [lo, hi) of segment `i` when `count` elements are cut into `n`
 * nearly equal segments. */
static inline void ddpc_ring_segment(size_t count, int n, int i, size_t *lo, size_t *hi) {
    *lo = count * (size_t)i / (size_t)n;
    *hi = count * (size_t)(i + 1) / (size_t)n;
}

/* Ring of `n` at position `pos`, step `s` (0 <= s < n-1). In the
 * reduce-scatter phase a rank sends segment (pos - s) and receives and
 * reduces segment (pos - s - 1), so after n-1 steps it holds the complete
 * segment (pos + 1). In the all-gather phase it sends (pos + 1 - s) and
 * receives (pos - s), which completes every segment everywhere. */
static inline int ddpc_ring_mod_(int x, int n) { return ((x % n) + n) % n; }
static inline int ddpc_ring_rs_send(int pos, int s, int n) { return ddpc_ring_mod_(pos - s, n); }
static inline int ddpc_ring_rs_recv(int pos, int s, int n) { return ddpc_ring_mod_(pos - s - 1, n); }
static inline int ddpc_ring_ag_send(int pos, int s, int n) { return ddpc_ring_mod_(pos + 1 - s, n); }
static inline int ddpc_ring_ag_recv(int pos, int s, int n) { return ddpc_ring_mod_(pos - s, n); }

/* Elements [lo, hi) of a chunk of `m` that local rank `r` of `n` reduces in
 * shared memory: slices are whole multiples of `align_bytes` so no two ranks
 * write the same cache line. */
static inline void ddpc_shm_slice(size_t m, size_t esize, size_t align_bytes, int n, int r, size_t *lo, size_t *hi) {
    size_t line = align_bytes / esize;
    size_t per = (m + (size_t)n - 1) / (size_t)n;
    per = (per + line - 1) / line * line;
    *lo = (size_t)r * per < m ? (size_t)r * per : m;
    *hi = (size_t)(r + 1) * per < m ? (size_t)(r + 1) * per : m;
}

#endif
