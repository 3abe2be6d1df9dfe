/* Stable sort along one dim of a contiguous tensor: the permutation (and,
 * when asked, the sorted values) in PyTorch's order, for every dtype. One
 * checked entry point dispatching to host loops or kernels/sort.cu; and, on
 * the host, the selection of one sorted position per line without sorting. */
#ifndef DDPC_OPS_SORT_H
#define DDPC_OPS_SORT_H

#include "ops.h"

/* indices (int64, a's shape) = where each element of a sorted along `dim`
 * came from, and values (NULL, or a's dtype and shape) = those elements.
 * Stable: equal elements keep their order, ascending or descending. NaN is
 * the largest value (last ascending, first descending) and -0 equals +0, as
 * in PyTorch. */
ddpc_status ddpc_op_sort_dim(ddpc_buffer *indices, ddpc_buffer *values, const ddpc_buffer *a, int dim,
                             int descending);

/* indices (int64, one per line: a's shape without `dim`) = where the element
 * at stable sorted position positions[line] (ascending, int64, one per line)
 * of each line along `dim` came from: what ddpc_op_sort_dim's indices hold at
 * that position, in expected linear time instead of a sort. Host only. */
ddpc_status ddpc_op_select_dim(ddpc_buffer *indices, const ddpc_buffer *a, int dim, const ddpc_buffer *positions);

int ddpc_sort_register(PyObject *module);

#endif
