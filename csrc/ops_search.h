/* Binary search in sorted lines (searchsorted, bucketize) and running extremes
 * along a dim (cummax, cummin), for every dtype. One checked entry point per
 * op, dispatching to host loops or kernels/search.cu; both order elements by
 * kernels.h's sort keys, as the sort op does. */
#ifndef DDPC_OPS_SEARCH_H
#define DDPC_OPS_SEARCH_H

#include "ops.h"

/* out (int64 or int32, values' shape) = for each element of `values`, the
 * position in its line of `sorted` where it would be inserted to keep the line
 * sorted: before equal elements, or after them with `right` (kernels.h's
 * ddpc_search_sorted gives the NaN rules). `sorted` is 1-d (one line for all
 * values) or has values' leading dims (one line per row of values); `sorter`
 * is NULL or an int64 tensor of sorted's shape whose lines order an unsorted
 * `sorted`. values and sorted share a dtype and device. */
ddpc_status ddpc_op_searchsorted(ddpc_buffer *out, const ddpc_buffer *sorted, const ddpc_buffer *values,
                                 const ddpc_buffer *sorter, int right);
/* values (a's dtype and shape) and indices (int64) = the running maximum
 * (minimum without want_max) of a along `dim` and where it was taken, as
 * PyTorch's cummax / cummin: NaN propagates, ties take the latest index. */
ddpc_status ddpc_op_cum_extreme(ddpc_buffer *values, ddpc_buffer *indices, const ddpc_buffer *a, int dim,
                                int want_max);

int ddpc_search_register(PyObject *module);

#endif
