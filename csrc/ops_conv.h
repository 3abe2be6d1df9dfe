/* Convolution and pooling ops over volumes of 1 to 3 spatial dims, float32
 * and float64, one checked entry point each, dispatching to host loops or
 * kernels/conv.cu. A convolution is im2col, one GEMM per group (gemm.h) and
 * a layout copy; its gradients are two GEMMs and col2im. The window
 * geometry (kernels/window.h) comes from the caller, right-aligned in its
 * three slots with a window of one tap over one element before the op's
 * spatial dims; the sizes come from the buffers' shapes. PyTorch's
 * output-size rules are applied by the caller (python/ddpc/nn/_conv.py). */
#ifndef DDPC_OPS_CONV_H
#define DDPC_OPS_CONV_H

#include "ops.h"
#include "kernels.h"

/* col [C, *kernel, N, *out] = the windows of x [N, C, *in], zeros where a
 * window reads padding: row (c, *tap) of the [C*prod(kernel), N*prod(out)]
 * matrix the convolution's GEMM takes. Uses w's stride, pad and dilation. */
ddpc_status ddpc_op_im2col(ddpc_buffer *col, const ddpc_buffer *x, const ddpc_window *w);
/* gx [N, C, *in] = the sum over windows of col's entries, each added where
 * im2col took it from (overlapping windows add up): im2col's adjoint. */
ddpc_status ddpc_op_col2im(ddpc_buffer *gx, const ddpc_buffer *col, const ddpc_window *w);
/* out and indices [P, *out] = the largest element of each window of x
 * [P, *in] and its flattened position in its volume, (d * H + h) * W + w
 * for three dims (the first largest; a NaN wins, as in PyTorch). A window
 * wholly in the padding gives -inf at -1. Uses w's kernel, stride, pad and
 * dilation, or its adaptive windows. */
ddpc_status ddpc_op_max_pool(ddpc_buffer *out, ddpc_buffer *indices, const ddpc_buffer *x, const ddpc_window *w);
/* gx [P, *in] = g [P, *out] added at the forward's indices. */
ddpc_status ddpc_op_max_pool_backward(ddpc_buffer *gx, const ddpc_buffer *g, const ddpc_buffer *indices);
/* out [P, *out] = the mean of each window of x [P, *in]: w's kernel,
 * stride, pad, count_include_pad and divisor, or its adaptive windows. */
ddpc_status ddpc_op_avg_pool(ddpc_buffer *out, const ddpc_buffer *x, const ddpc_window *w);
/* gx [P, *in] = each g [P, *out] spread evenly over its window. */
ddpc_status ddpc_op_avg_pool_backward(ddpc_buffer *gx, const ddpc_buffer *g, const ddpc_window *w);

int ddpc_conv_register(PyObject *module);

#endif
