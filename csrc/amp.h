/* Gradient unscaling for mixed-precision training (see amp.c). */
#ifndef DDPC_AMP_H
#define DDPC_AMP_H

#include "ops.h"

/* grads[i] *= inv_scale in place; found_inf (one float32 element on the
 * gradients' device) is set to 1 if any gradient held an inf or a NaN before. */
ddpc_status ddpc_op_unscale(int n, ddpc_buffer **grads, double inv_scale, ddpc_buffer *found_inf);

int ddpc_amp_register(PyObject *module);

#endif
