/* Sampler index math: which sample indices each rank reads in an epoch.
 *
 * Plain C (no Python), so it is unit-tested on its own under AddressSanitizer.
 * Every shuffle comes from ddpc's counter-based generator (ddpc_random_bits in
 * kernels/kernels.h) through ddpc_randperm_fill, so an index list is a pure
 * function of its arguments: identical on every rank, platform and version. */
#ifndef DDPC_SAMPLER_H
#define DDPC_SAMPLER_H

#include "common.h"

/* p[0..n) = a uniformly random permutation of 0..n-1: Fisher-Yates from the
 * top, step i (n-1 down to 1) swapping p[i] with p[j], j = floor(u * (i + 1))
 * where u = ddpc_random_bits(seed, offset + i) / 2^64. */
void ddpc_randperm_fill(int64_t *p, int64_t n, uint64_t seed, uint64_t offset);

/* PyTorch's DistributedSampler sizes: per-rank count and padded/cut total. */
ddpc_status ddpc_dist_sampler_size(int64_t n, int64_t num_replicas, int64_t rank, int drop_last, int64_t *num_samples,
                                   int64_t *total);

/* out[0..num_samples) = rank's indices: positions rank, rank + R, ... of the
 * list 0..n-1 (or its permutation from seed `seed`) padded by wrapping around
 * to num_samples * R, or cut to that length with drop_last. */
ddpc_status ddpc_dist_sampler_indices(int64_t n, int64_t num_replicas, int64_t rank, int shuffle, uint64_t seed,
                                      int drop_last, int64_t *out);

/* num_samples draws from 0..n-1: uniform with replacement, or successive
 * permutations (a new one every n draws) without. out[i] is draw first + i of
 * that sequence, so a long one can be drawn a window at a time. */
ddpc_status ddpc_random_sampler_indices(int64_t n, int64_t num_samples, int replacement, uint64_t seed, int64_t first,
                                        int64_t *out);

/* Rank's share of a weighted draw of `total` indices (a multiple of R):
 * positions rank, rank + R, ... of one global draw sequence, so the ranks'
 * draws together are exactly the single-process draw. With replacement, draw
 * k picks the first i with cumsum(w)[i] > u_k * sum(w); without, the draw is
 * the `total` largest keys log(u_i) / w_i (Efraimidis-Spirakis), in key order. */
ddpc_status ddpc_weighted_sampler_indices(const double *weights, int64_t n, int64_t total, int replacement,
                                          int64_t num_replicas, int64_t rank, uint64_t seed, int64_t *out);

/* Cost balance of a step assignment: the max over ranks of a step's cost over
 * the mean, averaged over steps and at the worst step. */
typedef struct {
    double mean_ratio;
    double worst_ratio;
} ddpc_balance_stats;

/* Like ddpc_dist_sampler_indices, then each step's batch_size * R samples are
 * dealt to ranks longest-processing-time first (heaviest sample to the rank
 * with the smallest load that still has room), so every rank gets batch_size
 * samples of near-equal total cost. `balanced` and `naive` (may be NULL)
 * receive the balance of this assignment and of the plain strided one. */
ddpc_status ddpc_balanced_sampler_indices(const double *costs, int64_t n, int64_t num_replicas, int64_t rank,
                                          int64_t batch_size, int shuffle, uint64_t seed, int drop_last, int64_t *out,
                                          ddpc_balance_stats *balanced, ddpc_balance_stats *naive);

#endif
