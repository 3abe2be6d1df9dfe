/* Ops along one dim of a contiguous tensor: running (or total) sums and
 * products, and gather / scatter through an index tensor. One checked entry
 * point per op, dispatching to host loops or kernels/dim.cu. Scatters may add
 * into or reduce into their output. */
#ifndef DDPC_OPS_DIM_H
#define DDPC_OPS_DIM_H

#include "ops.h"

/* LOGSUMEXP folds by kernels/scalar_ops.h's ddpc_log_add_exp: log(sum(exp(a)))
 * with a running maximum, so no term is lost below the largest (floats only;
 * an empty fold is -inf). */
typedef enum { DDPC_FOLD_SUM = 0, DDPC_FOLD_PROD, DDPC_FOLD_LOGSUMEXP } ddpc_fold_op;
/* Flags of ddpc_op_fold_dim: CUMULATIVE keeps every running value (out has
 * a's shape) instead of the total only (a's shape without dim); REVERSE runs
 * from the end of the dim; EXCLUSIVE leaves the element itself out of its
 * running value (the first is 0 for sums, 1 for products, -inf for LOGSUMEXP). */
enum { DDPC_FOLD_CUMULATIVE = 1, DDPC_FOLD_REVERSE = 2, DDPC_FOLD_EXCLUSIVE = 4 };
/* out = a folded along `dim`; float32 and float64 accumulate in double, int64
 * exactly (wrapping on overflow), except that a float32 product that is not
 * cumulative multiplies in float32 (PyTorch's prod), on the host and on GPUs. */
ddpc_status ddpc_op_fold_dim(ddpc_buffer *out, const ddpc_buffer *a, int dim, ddpc_fold_op op, int flags);
/* out (index's shape) = a taken along `dim` at index: for dim 1,
 * out[i][j][k] = a[i][index[i][j][k]][k]. index is int64 with a's number of
 * dims and no larger than a in the others; any dtype. Indices outside
 * [0, a.shape[dim]) are an error on the host and skipped on a GPU. */
ddpc_status ddpc_op_gather_dim(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *index, int dim);
/* The reverse: out[i][index[i][j][k]][k] = src[i][j][k] (+= when
 * `accumulate`: float32, float64 or int64), src no smaller than index in any
 * dim; indices as for gather. Where indices repeat without `accumulate`, one
 * write lands. */
ddpc_status ddpc_op_scatter_dim(ddpc_buffer *out, const ddpc_buffer *src, const ddpc_buffer *index, int dim,
                                int accumulate);

/* The reductions of ddpc_op_scatter_reduce_dim (sums and means go through
 * ddpc_op_scatter_dim's accumulate). */
typedef enum { DDPC_SCATTER_PROD = 0, DDPC_SCATTER_AMAX, DDPC_SCATTER_AMIN } ddpc_scatter_reduce_op;
/* out[i][index[i][j][k]][k] = op(that element, src[i][j][k]) for every index
 * element (dim 1; likewise for any dim), in some order: the product, or the
 * larger (smaller) of the two, a NaN in either winning as in PyTorch.
 * float32, float64, int32 or int64 (products wrap); shapes and indices as
 * for scatter. */
ddpc_status ddpc_op_scatter_reduce_dim(ddpc_buffer *out, const ddpc_buffer *src, const ddpc_buffer *index, int dim,
                                       ddpc_scatter_reduce_op op);

int ddpc_dim_register(PyObject *module);

#endif
