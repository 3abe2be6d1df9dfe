/* The classical orthogonal polynomials of torch.special at a point x and a
 * degree n, by their three-term recurrences, as PyTorch evaluates them:
 * Chebyshev's of the four kinds (T, U, V, W) and their shifted forms on
 * [0, 1], the physicists' and probabilists' Hermite polynomials (H, He),
 * Laguerre's L and Legendre's P. A negative degree gives 0; a degree that is
 * not a whole number is truncated toward zero, and one that fits no int64
 * (NaN, infinities) counts as negative, as PyTorch's conversion gives on
 * x86. Computed in double; float32 callers round once. Plain C, so it
 * compiles with cc as well as nvcc. */
#ifndef DDPC_ORTHOGONAL_POLYNOMIALS_H
#define DDPC_ORTHOGONAL_POLYNOMIALS_H

#include <math.h>
#include <stdint.h>

#include "kernels.h"

/* The kinds of Chebyshev polynomial: T, U, V (third kind) and W (fourth). */
enum { DDPC_CHEBYSHEV_T_KIND = 0, DDPC_CHEBYSHEV_U_KIND, DDPC_CHEBYSHEV_V_KIND, DDPC_CHEBYSHEV_W_KIND };

/* n as a degree: truncated, -1 where it fits no int64. */
static inline DDPC_HD int64_t ddpc_polynomial_degree_(double n) {
    return n > -9.2e18 && n < 9.2e18 ? (int64_t)n : -1;
}

/* The Chebyshev polynomial of the given kind. All four follow
 * r = 2x q - p from 1 and their own first degree (x, 2x, 2x - 1, 2x + 1);
 * at x = +-1 they have closed values, and inside (-1, 1), past a degree of
 * 6 (T) or 8 (the others), the trigonometric forms with theta = acos x
 * (cos(n theta), sin((n + 1) theta) / sin(theta),
 * cos((n + 1/2) theta) / cos(theta / 2), sin((n + 1/2) theta) / sin(theta / 2))
 * cost a few calls instead of n steps and lose nothing there. */
static inline DDPC_HD double ddpc_chebyshev_polynomial(int kind, double x, double degree) {
    int64_t n = ddpc_polynomial_degree_(degree);
    if (n < 0) return 0;
    double odd_sign = n % 2 ? -1 : 1, twice = 2 * (double)n + 1; /* (in double: 2n + 1 may not fit an int64) */
    if (fabs(x) == 1) {
        switch (kind) {
        case DDPC_CHEBYSHEV_T_KIND: return x > 0 ? 1 : odd_sign;
        case DDPC_CHEBYSHEV_U_KIND: return ((double)n + 1) * (x > 0 ? 1 : odd_sign);
        case DDPC_CHEBYSHEV_V_KIND: return x > 0 ? 1 : twice * odd_sign;
        default: return x > 0 ? twice : odd_sign;
        }
    }
    if (n > (kind == DDPC_CHEBYSHEV_T_KIND ? 6 : 8) && fabs(x) < 1) {
        double theta = acos(x);
        switch (kind) {
        case DDPC_CHEBYSHEV_T_KIND: return cos((double)n * theta);
        case DDPC_CHEBYSHEV_U_KIND: return sin(((double)n + 1) * theta) / sin(theta);
        case DDPC_CHEBYSHEV_V_KIND: return cos(((double)n + 0.5) * theta) / cos(theta / 2);
        default: return sin(((double)n + 0.5) * theta) / sin(theta / 2);
        }
    }
    if (n == 0) return 1;
    static const double first_offset[] = {0, 0, -1, 1}; /* T_1 = x; U_1, V_1, W_1 = 2x + this */
    double p = 1, q = kind == DDPC_CHEBYSHEV_T_KIND ? x : x + x + first_offset[kind];
    for (int64_t k = 2; k <= n && !isnan(q); k++) {
        double r = (x + x) * q - p;
        p = q, q = r;
    }
    return q;
}

/* The shifted Chebyshev polynomials T*, U*, V*, W* on [0, 1]: the unshifted
 * ones at 2x - 1. */
static inline DDPC_HD double ddpc_shifted_chebyshev_polynomial(int kind, double x, double degree) {
    return ddpc_chebyshev_polynomial(kind, x + x - 1, degree);
}

/* The physicists' Hermite polynomial H_n: r = 2x q - 2k p from 1 and 2x
 * (probabilists' He_n, `probabilists`: r = x q - k p from 1 and x). Past
 * degree max_n, NaN, as PyTorch's (512 for double, 128 for float32). */
static inline DDPC_HD double ddpc_hermite_polynomial(int probabilists, double x, double degree, int64_t max_n) {
    int64_t n = ddpc_polynomial_degree_(degree);
    if (n < 0) return 0;
    if (n == 0) return 1;
    double scale = probabilists ? 1 : 2, p = 1, q = scale * x;
    if (n == 1) return q;
    if (n > max_n) return NAN;
    for (int64_t k = 1; k < n; k++) {
        double r = scale * (x * q - (double)k * p);
        p = q, q = r;
    }
    return q;
}

/* Laguerre's L_n: (k + 1) L_k+1 = (2k + 1 - x) L_k - k L_k-1, from 1 and 1 - x; 1 at x = 0. */
static inline DDPC_HD double ddpc_laguerre_polynomial_l(double x, double degree) {
    int64_t n = ddpc_polynomial_degree_(degree);
    if (n < 0) return 0;
    if (x == 0 || n == 0) return 1;
    double p = 1, q = 1 - x;
    for (int64_t k = 1; k < n && !isnan(q); k++) {
        double r = ((2 * (double)k + 1) - x) * q - (double)k * p;
        p = q, q = r / ((double)k + 1);
    }
    return q;
}

/* Legendre's P_n: (k + 1) P_k+1 = (2k + 1) x P_k - k P_k-1, from 1 and x; +-1 at x = +-1. */
static inline DDPC_HD double ddpc_legendre_polynomial_p(double x, double degree) {
    int64_t n = ddpc_polynomial_degree_(degree);
    if (n < 0) return 0;
    if (fabs(x) == 1) return x > 0 || n % 2 == 0 ? 1 : -1;
    if (n == 0) return 1;
    double p = 1, q = x;
    for (int64_t k = 1; k < n && !isnan(q); k++) {
        double r = (2 * (double)k + 1) * x * q - (double)k * p;
        p = q, q = r / ((double)k + 1);
    }
    return q;
}

#endif
