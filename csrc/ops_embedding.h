/* Embedding bags: the sums, means or maxima of bags of rows of a table, the
 * op behind torch's embedding_bag, with the gradients of the table and of
 * the per-sample weights. float32 and float64; one checked entry point per
 * op, dispatching to host loops or kernels/embedding.cu. */
#ifndef DDPC_OPS_EMBEDDING_H
#define DDPC_OPS_EMBEDDING_H

#include "kernels.h"
#include "ops.h"

/* The bags of one call: bag b takes the rows indices[offsets[b] ..
 * offsets[b + 1]) of the table (offsets: B + 1 int64 values, non-decreasing
 * from 0 to at most n), leaving out every row equal to padding_idx (-1:
 * none). */
typedef struct {
    const ddpc_buffer *indices; /* [n] int64 */
    const ddpc_buffer *offsets; /* [B + 1] int64 */
    const ddpc_buffer *weights; /* [n] per-sample weights (mode SUM only), or NULL */
    ddpc_bag_mode mode; /* kernels.h */
    int64_t padding_idx;
} ddpc_bags;

/* out [B, D] = each bag of rows of weight [V, D] summed (each row scaled by
 * its per-sample weight, when given), averaged, or maxed elementwise; an
 * empty bag gives zeros. For MAX, argmax [B, D] (int64) takes the row each
 * maximum came from (-1 in an empty bag); otherwise it is NULL. */
ddpc_status ddpc_op_embedding_bag(ddpc_buffer *out, ddpc_buffer *argmax, const ddpc_buffer *weight,
                                  const ddpc_bags *bags);
/* gweight [V, D] = the gradient of the table for the output gradient g
 * [B, D]: each bag's g added to its rows (scaled as the forward scaled
 * them), or for MAX at argmax. */
ddpc_status ddpc_op_embedding_bag_backward(ddpc_buffer *gweight, const ddpc_buffer *g, const ddpc_buffer *argmax,
                                           const ddpc_bags *bags);
/* gweights [n] = the gradient of the per-sample weights: entry i's row of
 * weight dotted with its bag's g (0 for padding and for entries in no bag). */
ddpc_status ddpc_op_embedding_bag_weights_backward(ddpc_buffer *gweights, const ddpc_buffer *g,
                                                   const ddpc_buffer *weight, const ddpc_bags *bags);

int ddpc_embedding_register(PyObject *module);

#endif
