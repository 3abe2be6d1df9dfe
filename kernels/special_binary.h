/* The special functions of two arguments, by op code: the one switch that
 * both the host loop (csrc/ops_nn.c, ddpc_op_special_binary) and the CUDA
 * kernel (kernels/nn.cu) evaluate, so the two cannot disagree on the
 * numbering. Arguments in PyTorch's order: gammainc(a, x), zeta(s, q) and
 * the polynomials (x, n). Plain C, so it compiles with cc as well as nvcc. */
#ifndef DDPC_SPECIAL_BINARY_H
#define DDPC_SPECIAL_BINARY_H

#include "incomplete_gamma.h"
#include "kernels.h"
#include "orthogonal_polynomials.h"
#include "special_functions.h"

/* The op codes of python/ddpc/special.py. */
typedef enum {
    DDPC_GAMMAINC = 0, DDPC_GAMMAINCC, DDPC_ZETA, DDPC_CHEBYSHEV_T, DDPC_CHEBYSHEV_U, DDPC_CHEBYSHEV_V,
    DDPC_CHEBYSHEV_W, DDPC_SHIFTED_CHEBYSHEV_T, DDPC_SHIFTED_CHEBYSHEV_U, DDPC_SHIFTED_CHEBYSHEV_V,
    DDPC_SHIFTED_CHEBYSHEV_W, DDPC_HERMITE_H, DDPC_HERMITE_HE, DDPC_LAGUERRE_L, DDPC_LEGENDRE_P, DDPC_NSPECIAL_BINARY
} ddpc_special_binary_op;

/* op(a, b) in double. `single`: the result is float32, for which PyTorch
 * stops the Hermite polynomials at a lower degree. */
static inline DDPC_HD double ddpc_special_binary(int op, double a, double b, int single) {
    switch (op) {
    case DDPC_GAMMAINC: return ddpc_igamma(a, b);
    case DDPC_GAMMAINCC: return ddpc_igammac(a, b);
    case DDPC_ZETA: return ddpc_zeta(a, b);
    case DDPC_CHEBYSHEV_T: case DDPC_CHEBYSHEV_U: case DDPC_CHEBYSHEV_V: case DDPC_CHEBYSHEV_W:
        return ddpc_chebyshev_polynomial(op - DDPC_CHEBYSHEV_T, a, b);
    case DDPC_SHIFTED_CHEBYSHEV_T: case DDPC_SHIFTED_CHEBYSHEV_U: case DDPC_SHIFTED_CHEBYSHEV_V:
    case DDPC_SHIFTED_CHEBYSHEV_W:
        return ddpc_shifted_chebyshev_polynomial(op - DDPC_SHIFTED_CHEBYSHEV_T, a, b);
    case DDPC_HERMITE_H: case DDPC_HERMITE_HE:
        return ddpc_hermite_polynomial(op == DDPC_HERMITE_HE, a, b, single ? 128 : 512);
    case DDPC_LAGUERRE_L: return ddpc_laguerre_polynomial_l(a, b);
    default: return ddpc_legendre_polynomial_p(a, b);
    }
}

#endif
