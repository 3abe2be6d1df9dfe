/* Formulas on single values, written once for the host loops (csrc/ops.c,
 * csrc/ops_nn.c, csrc/ops_dim.c) and the CUDA kernels (kernels/dispatch.cuh,
 * kernels/dim.cu, kernels/nn.cu): PyTorch's integer power and shifts, free of
 * C's undefined behaviour for every input, its power to a number, and the log
 * of a sum of two exponentials. Plain C, so it compiles with cc as well as
 * nvcc. */
#ifndef DDPC_SCALAR_OPS_H
#define DDPC_SCALAR_OPS_H

#include <math.h>
#include <stdint.h>

#include "kernels.h"

/* base ** e by squaring, wrapping modulo 2**64 (unsigned arithmetic cannot
 * overflow); the caller's truncation to a narrower dtype then wraps as
 * PyTorch's integer pow does. A negative e gives what PyTorch's does: 1 for
 * base 1, -1 or 1 for base -1 (odd or even e), 0 for any other base. */
static inline DDPC_HD int64_t ddpc_int_pow(int64_t base, int64_t e) {
    if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
    uint64_t r = 1, b = (uint64_t)base;
    for (; e; e >>= 1, b *= b)
        if (e & 1) r *= b;
    return (int64_t)r;
}

/* x << s for an integer dtype `bits` wide (x and s its values, widened to
 * int64): the bits shifted out are lost, and a count outside [0, bits) gives
 * 0, as PyTorch. The shift is done on unsigned bits (shifting a negative
 * value left is undefined in C). */
static inline DDPC_HD int64_t ddpc_shift_left(int64_t x, int64_t s, int bits) {
    return (uint64_t)s >= (uint64_t)bits ? 0 : (int64_t)((uint64_t)x << s);
}

/* x >> s, arithmetic (the sign fills in); a count outside [0, bits) shifts
 * everything out: -1 for a negative x, else 0, as PyTorch. A negative x is
 * shifted through its complement, whose right shift C defines. */
static inline DDPC_HD int64_t ddpc_shift_right(int64_t x, int64_t s, int bits) {
    int64_t k = (uint64_t)s >= (uint64_t)bits ? 63 : s;
    return x < 0 ? ~(~x >> k) : x >> k;
}

/* x ** p for a number p, x of the float type T, as PyTorch computes it: p =
 * 0.5 through sqrt and p = -0.5 through 1 / sqrt, so (-0) ** 0.5 is -0 and
 * (-inf) ** 0.5 NaN (C's pow gives +0 and +inf), every other p through pow.
 * A macro, so that sqrt and pow are the type's own (tgmath.h on the host,
 * the overloads in CUDA). */
#define DDPC_POW_NUMBER(T, x, p) \
    ((p) == (T)0.5 ? (T)sqrt(x) : ((p) == (T)-0.5 ? (T)1 / (T)sqrt(x) : (T)pow((x), (p))))

/* log(exp(a) + exp(b)) without overflow or underflow: the larger plus
 * log1p of the smaller's share. An infinite larger value or a -inf smaller
 * one is the result as it stands; NaN in either gives NaN. */
static inline DDPC_HD double ddpc_log_add_exp(double a, double b) {
    if (a != a || b != b) return a + b;
    double hi = a > b ? a : b, lo = a > b ? b : a;
    if (hi == INFINITY || lo == -INFINITY) return hi;
    return hi + log1p(exp(lo - hi));
}

#endif
