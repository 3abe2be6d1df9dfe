/* grid_sample: the input sampled at the points of a grid, as PyTorch's
 * grid_sampler_2d and grid_sampler_3d, float32 and float64, with the
 * gradients with respect to the input and the grid. One checked entry point
 * each, dispatching to host loops or kernels/grid.cu; both take each point's
 * taps from kernels/grid_sample.h. PyTorch's names and argument checks for
 * the modes live in the caller (python/ddpc/nn/_grid_sample.py). */
#ifndef DDPC_OPS_GRID_H
#define DDPC_OPS_GRID_H

#include "ops.h"
#include "kernels.h"

/* out [N, C, *out] = x [N, C, *in] sampled at grid [N, *out, dims], with
 * dims = 2 (spatial dims H, W) or 3 (D, H, W); mode, padding and
 * align_corners as in ddpc_grid_sampling. */
ddpc_status ddpc_op_grid_sample(ddpc_buffer *out, const ddpc_buffer *x, const ddpc_buffer *grid, int mode, int padding,
                                int align_corners);
/* gx [N, C, *in] and ggrid [N, *out, dims] = the gradients of grid_sample
 * for the output gradient g [N, C, *out]; gx or ggrid may be NULL when not
 * wanted. The nearest mode's grid gradient is zero. */
ddpc_status ddpc_op_grid_sample_backward(ddpc_buffer *gx, ddpc_buffer *ggrid, const ddpc_buffer *g,
                                         const ddpc_buffer *x, const ddpc_buffer *grid, int mode, int padding,
                                         int align_corners);

int ddpc_grid_register(PyObject *module);

#endif
