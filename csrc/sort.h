/* Stable sorting and selection of (key, index) pairs on the host: the
 * per-line work behind ddpc_op_sort_dim and ddpc_op_select_dim (ops_sort.c).
 * Plain C without Python, so the C unit tests check it directly. */
#ifndef DDPC_SORT_H
#define DDPC_SORT_H

#include <stdint.h>

/* Sorts the n pairs (key[k], index[k]) by key, ascending, keeping pairs with
 * equal keys in the order they came in. tmp_key and tmp_index are scratch of
 * n elements each. */
void ddpc_sort_pairs(uint64_t *key, int64_t *index, uint64_t *tmp_key, int64_t *tmp_index, int64_t n);

/* Moves to position k (0 <= k < n) the pair that the stable sort would put
 * there, i.e. the k-th in (key, index) order, given distinct indices; the
 * other pairs end up on its sides as in a partition, in no particular order.
 * Expected linear time on every input. */
void ddpc_select_pair(uint64_t *key, int64_t *index, int64_t n, int64_t k);

#endif
