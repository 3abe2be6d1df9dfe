/* Selecting elements by a mask: the positions of its non-zero elements,
 * the compaction behind masked_select, nonzero and argwhere. One checked
 * entry point dispatching to a host loop or kernels/select.cu. */
#ifndef DDPC_OPS_SELECT_H
#define DDPC_OPS_SELECT_H

#include "ops.h"

/* out (int64) = where mask (uint8, any non-zero is true) is non-zero, in
 * order: out of shape [count] takes flat indices, out of shape
 * [count, mask's ndim] coordinates. count must be the number of non-zero
 * elements (the caller counts them first: the output's size depends on the
 * data); the host refuses another count, a GPU writes the first `count`. */
ddpc_status ddpc_op_nonzero(ddpc_buffer *out, const ddpc_buffer *mask);
/* out (one int64 on mask's device) = the number of non-zero elements of mask
 * (uint8), the count ddpc_op_nonzero needs: a device-wide reduction on a GPU. */
ddpc_status ddpc_op_count_nonzero(ddpc_buffer *out, const ddpc_buffer *mask);

int ddpc_select_register(PyObject *module);

#endif
