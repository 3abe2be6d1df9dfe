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

/* The position s of the pair (key[s], s) that the stable sort of the n keys
 * would put at position k (0 <= k < n): the k-th in (key, position) order.
 * `scratch` holds 2n keys. Expected linear time on every input. */
int64_t ddpc_select_position(const uint64_t *key, int64_t n, int64_t k, uint64_t *scratch);

#endif
