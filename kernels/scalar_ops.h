/* Formulas on single values, written once for the host loops (csrc/ops.c,
 * csrc/ops_nn.c, csrc/ops_dim.c) and the CUDA kernels (kernels/dispatch.cuh,
 * kernels/dim.cu, kernels/nn.cu): integer division, PyTorch's integer power
 * and shifts, free of C's undefined behaviour for every input, its division
 * with rounding, its power to a number, and the log of a sum of two
 * exponentials. Plain C, so it compiles with cc as well as nvcc. */
#ifndef DDPC_SCALAR_OPS_H
#define DDPC_SCALAR_OPS_H

#include <math.h>
#include <stdint.h>

#include "kernels.h"

/* a / b for integers (b != 0: the ops refuse a zero divisor), truncating as
 * C does. INT64_MIN / -1, which C leaves undefined and x86 traps on (killing
 * the process), wraps to INT64_MIN; a narrower dtype's INT_MIN / -1, computed
 * here in int64, wraps likewise when the caller narrows it. */
static inline DDPC_HD int64_t ddpc_int_div(int64_t a, int64_t b) {
    return b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b;
}

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

/* Division with rounding, as PyTorch's (ATen's div_floor_floating and
 * div_floor_integer, and the remainder beside them). fmod is C's, exact for
 * every pair; the remainder takes the divisor's sign; the floor quotient is
 * (a - fmod(a, b)) / b stepped down where the remainder's sign differs from
 * the divisor's, so that a * b's sign survives on a zero quotient and the
 * quotient stays consistent with the remainder; the truncated quotient is
 * trunc(a / b). Each float rule is defined once for float and once for
 * double by the macro below, so float32 rounds as PyTorch's does. */
#define DDPC_DEFINE_ROUNDED_DIVISION_(T, SUFFIX)                                   \
    static inline DDPC_HD T ddpc_fmod_##SUFFIX(T a, T b) { return (T)fmod(a, b); } \
    static inline DDPC_HD T ddpc_remainder_##SUFFIX(T a, T b) {                    \
        T mod = (T)fmod(a, b);                                                     \
        return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;                   \
    }                                                                              \
    static inline DDPC_HD T ddpc_div_trunc_##SUFFIX(T a, T b) { return (T)trunc(a / b); } \
    static inline DDPC_HD T ddpc_div_floor_##SUFFIX(T a, T b) {                    \
        if (b == 0) return a / b;                                                  \
        T mod = (T)fmod(a, b), div = (a - mod) / b;                                \
        if (mod != 0 && (b < 0) != (mod < 0)) div -= (T)1;                         \
        if (div == 0) return (T)copysign((T)0, a / b);                             \
        T floored = (T)floor(div);                                                 \
        return div - floored > (T)0.5 ? floored + (T)1 : floored;                  \
    }
DDPC_DEFINE_ROUNDED_DIVISION_(float, f32)
DDPC_DEFINE_ROUNDED_DIVISION_(double, f64)
#undef DDPC_DEFINE_ROUNDED_DIVISION_

/* The integer forms, on values widened to int64. A zero divisor gives 0 (C's
 * division would trap; callers refuse it first where they can look), and
 * INT64_MIN / -1 wraps to INT64_MIN instead of overflowing. */
static inline DDPC_HD int64_t ddpc_div_trunc_int(int64_t a, int64_t b) {
    if (b == 0) return 0;
    return b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b;
}
static inline DDPC_HD int64_t ddpc_fmod_int(int64_t a, int64_t b) { return b == 0 || b == -1 ? 0 : a % b; }
static inline DDPC_HD int64_t ddpc_remainder_int(int64_t a, int64_t b) {
    int64_t mod = ddpc_fmod_int(a, b);
    return mod != 0 && (b < 0) != (mod < 0) ? mod + b : mod;
}
static inline DDPC_HD int64_t ddpc_div_floor_int(int64_t a, int64_t b) {
    int64_t q = ddpc_div_trunc_int(a, b);
    return ddpc_fmod_int(a, b) != 0 && (a < 0) != (b < 0) ? q - 1 : q;
}

/* The next number after a towards b (b itself where they are equal, NaN
 * where either is), each type's own nextafter. The integer form only lets
 * the generic loops compile: ddpc_check_binary_op refuses integer dtypes. */
static inline DDPC_HD float ddpc_nextafter_f32(float a, float b) { return nextafterf(a, b); }
static inline DDPC_HD double ddpc_nextafter_f64(double a, double b) { return nextafter(a, b); }
static inline DDPC_HD int64_t ddpc_nextafter_int(int64_t a, int64_t b) { return a == b ? b : a; }

/* x ** p for a number p, x of the float type T, as PyTorch computes it: p =
 * 0.5 through sqrt and p = -0.5 through 1 / sqrt, so (-0) ** 0.5 is -0 and
 * (-inf) ** 0.5 NaN (C's pow gives +0 and +inf); p = 1, 2, 3 and -1 as
 * products and a quotient (x * x is pow's correctly rounded square; x * x
 * * x rounds twice, as PyTorch's cube), every other p through pow. A macro,
 * so that sqrt and pow are the type's own (tgmath.h on the host, the
 * overloads in CUDA); x is evaluated more than once. */
#define DDPC_POW_NUMBER(T, x, p)                                                            \
    ((p) == (T)2 ? (x) * (x)                                                                \
     : (p) == (T)1 ? (T)(x)                                                                 \
     : (p) == (T)3 ? (x) * (x) * (x)                                                        \
     : (p) == (T)-1 ? (T)1 / (x)                                                            \
     : (p) == (T)0.5 ? (T)sqrt(x) : ((p) == (T)-0.5 ? (T)1 / (T)sqrt(x) : (T)pow((x), (p))))

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
