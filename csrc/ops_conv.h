/* Convolution and pooling ops over (H, W) planes, float32 and float64, one
 * checked entry point each, dispatching to host loops or kernels/conv.cu. A
 * convolution is im2col, one GEMM per group (gemm.h) and a layout copy; its
 * gradients are two GEMMs and col2im. The window geometry (kernels/window.h)
 * comes from the caller, the sizes from the buffers' shapes; PyTorch's
 * output-size rules are applied by the caller (python/ddpc/nn/_conv.py). */
#ifndef DDPC_OPS_CONV_H
#define DDPC_OPS_CONV_H

#include "ops.h"
#include "kernels.h"

/* col [C, KH, KW, N, OH, OW] = the windows of x [N, C, H, W], zeros where a
 * window reads padding: row (c, kh, kw) of the [C*KH*KW, N*OH*OW] matrix
 * the convolution's GEMM takes. Uses w's stride, pad and dilation. */
ddpc_status ddpc_op_im2col(ddpc_buffer *col, const ddpc_buffer *x, const ddpc_window *w);
/* gx [N, C, H, W] = the sum over windows of col's entries, each added where
 * im2col took it from (overlapping windows add up): im2col's adjoint. */
ddpc_status ddpc_op_col2im(ddpc_buffer *gx, const ddpc_buffer *col, const ddpc_window *w);
/* out and indices [P, OH, OW] = the largest element of each window of x
 * [P, H, W] and its position h * W + w in its plane (the first largest; a NaN
 * wins, as in PyTorch). A window wholly in the padding gives -inf at -1.
 * Uses w's kernel, stride, pad and dilation. */
ddpc_status ddpc_op_max_pool(ddpc_buffer *out, ddpc_buffer *indices, const ddpc_buffer *x, const ddpc_window *w);
/* gx [P, H, W] = g [P, OH, OW] added at the forward's indices. */
ddpc_status ddpc_op_max_pool_backward(ddpc_buffer *gx, const ddpc_buffer *g, const ddpc_buffer *indices);
/* out [P, OH, OW] = the mean of each window of x [P, H, W]: w's kernel,
 * stride, pad, count_include_pad and divisor, or its adaptive windows. */
ddpc_status ddpc_op_avg_pool(ddpc_buffer *out, const ddpc_buffer *x, const ddpc_window *w);
/* gx [P, H, W] = each g [P, OH, OW] spread evenly over its window. */
ddpc_status ddpc_op_avg_pool_backward(ddpc_buffer *gx, const ddpc_buffer *g, const ddpc_window *w);

int ddpc_conv_register(PyObject *module);

#endif
