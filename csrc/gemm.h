/* GEMM: out = op(a) @ op(b) (+ bias broadcast over rows), row-major float32
 * or float64, on the host through numpy's BLAS-backed dot and on a GPU
 * through cuBLAS on the device's compute stream. */
#ifndef DDPC_GEMM_H
#define DDPC_GEMM_H

#include "buffer.h"

/* a is [M,K] ([K,M] when trans_a), b is [K,N] ([N,K] when trans_b), out is
 * [M,N]; bias (NULL for none) holds N elements added to every row. When
 * `accumulate`, the product is added to out's current contents instead
 * (bias must then be NULL). Needs the GIL on the host (numpy releases it
 * around the BLAS call itself). */
ddpc_status ddpc_op_gemm(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b, int trans_a, int trans_b,
                         const ddpc_buffer *bias, int accumulate);

int ddpc_gemm_register(PyObject *module);

#endif
