/* Integer number theory, elementwise: the greatest common divisor and least
 * common multiple (PyTorch's gcd and lcm). One checked entry point,
 * dispatching to host loops or kernels/intmath.cu; kept apart from the
 * binary-op table of ops.h, which covers every dtype while these are
 * defined for integers only. */
#ifndef DDPC_OPS_INTMATH_H
#define DDPC_OPS_INTMATH_H

#include "ops.h"

/* out = gcd(a, b) (lcm with want_lcm) elementwise; a, b and out share an
 * integer dtype (uint8, int32, int64), device and element count. The gcd is
 * non-negative and gcd(0, 0) = 0; lcm(a, b) = |a / gcd * b| (0 when either
 * is 0), wrapping on overflow. */
ddpc_status ddpc_op_gcd(ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b, int want_lcm);

int ddpc_intmath_register(PyObject *module);

#endif
