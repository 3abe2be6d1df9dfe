/* Elementwise ops of the complex dtypes (complex64, complex128): arithmetic,
 * comparison and the unary functions ddpc supports on them. One checked entry
 * point per kind, dispatching to host loops or kernels/complex.cu; both run
 * kernels/complex_math.h. Casts and fills to and from complex dtypes are
 * ops.c's cast and fill. */
#ifndef DDPC_OPS_COMPLEX_H
#define DDPC_OPS_COMPLEX_H

#include "ops.h"

typedef enum {
    /* binary (complex_binary, complex_scalar): out = a op b */
    DDPC_CX_ADD = 0,
    DDPC_CX_SUB,
    DDPC_CX_MUL,
    DDPC_CX_DIV,
    DDPC_CX_RSUB, /* b - a */
    DDPC_CX_RDIV, /* b / a */
    DDPC_CX_EQ,   /* bool out: 1 where both parts are equal */
    DDPC_CX_NE,
    DDPC_CX_NBINARY
} ddpc_complex_binary_op;

typedef enum {
    DDPC_CX_NEG = 0,
    DDPC_CX_CONJ,
    DDPC_CX_EXP,
    DDPC_CX_LOG,
    DDPC_CX_SQRT,
    DDPC_CX_RECIPROCAL,
    DDPC_CX_SGN,
    DDPC_CX_POW, /* by the real exponent p */
    DDPC_CX_ABS, /* real out of the matching precision (float32 for complex64) */
    DDPC_CX_ANGLE,
    DDPC_CX_NUNARY
} ddpc_complex_unary_op;

/* a and b share a complex dtype, device and element count with out (bool out
 * for EQ and NE). */
ddpc_status ddpc_op_complex_binary(ddpc_complex_binary_op op, ddpc_buffer *out, const ddpc_buffer *a,
                                   const ddpc_buffer *b);
/* out = a op (re + im i). */
ddpc_status ddpc_op_complex_scalar(ddpc_complex_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, double re,
                                   double im);
/* out = f(a); p is POW's exponent. */
ddpc_status ddpc_op_complex_unary(ddpc_complex_unary_op op, ddpc_buffer *out, const ddpc_buffer *a, double p);

int ddpc_complex_register(PyObject *module);

#endif
