/* Special functions on single values that neither C's libm nor CUDA's math
 * library share: the inverse error function and the normal quantile, the
 * scaled complementary error function, digamma, polygamma and the Hurwitz
 * zeta function, and the modified Bessel functions I0 and I1 with their
 * exponentially scaled forms.
 * Written once for the host loops (csrc/ops_nn.c) and the CUDA kernels
 * (kernels/nn.cu), in double; float32 callers round the result once. Edge
 * values are PyTorch's. Plain C, so it compiles with cc as well as nvcc. */
#ifndef DDPC_SPECIAL_FUNCTIONS_H
#define DDPC_SPECIAL_FUNCTIONS_H

#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define DDPC_SF_PI 3.14159265358979323846
#define DDPC_SF_TWO_OVER_SQRT_PI 1.12837916709551257390
#define DDPC_SF_INV_SQRT_PI 0.56418958354775628695
#define DDPC_SF_INV_SQRT_2PI 0.39894228040143267794
#define DDPC_SF_SQRT2 1.41421356237309504880

/* exp(x * x) without the rounding of x * x, whose error exp would magnify
 * by x * x: x = hi + lo with hi of at most 24 significant bits, so hi * hi
 * is exact and exp(x * x) = exp(hi * hi) * exp(lo * (2 hi + lo)). */
static inline DDPC_HD double ddpc_exp_square(double x) {
    double hi = (double)(float)x, lo = x - hi;
    return exp(hi * hi) * exp(lo * (2 * hi + lo));
}

/* erfcx(x) = exp(x * x) * erfc(x), which stays finite and accurate for
 * large x where erfc underflows. x >= 12: the asymptotic series
 * 1 / (x sqrt(pi)) * sum_k (-1)^k (2k - 1)!! / (2 x^2)^k, summed until a
 * term is negligible (its terms shrink by (2k + 1) / (2 x^2) <= 1/10 at first);
 * below, exp(x^2) erfc(x) directly; x < 0 by erfcx(x) = 2 exp(x^2) - erfcx(-x),
 * infinite once exp(x^2) overflows. */
static inline DDPC_HD double ddpc_erfcx(double x) {
    if (isnan(x)) return x;
    if (x >= 12) {
        double inv = 1 / (2 * x * x), term = 1, sum = 1;
        for (int k = 1; k < 40 && fabs(term) > 1e-17 * sum; k++) {
            term *= -(2 * k - 1) * inv;
            sum += term;
        }
        return sum * DDPC_SF_INV_SQRT_PI / x;
    }
    if (x >= 0) return ddpc_exp_square(x) * erfc(x);
    if (x < -26.7) return INFINITY;
    return 2 * ddpc_exp_square(x) - ddpc_erfcx(-x);
}

/* The t >= 0 with erf(t) = a and erfc(t) = c, a + c = 1 (0 <= a <= 1),
 * given both so that the caller passes each exactly where it is used: a
 * where a <= 1/2, c (small in the tail) otherwise. It starts from Winitzki's
 * closed-form approximation (relative error below 2e-3 over the whole
 * range, tails included) and takes four Halley steps on f(t) = erf(t) - a,
 * whose second derivative is -2t times the first; each step triples the
 * correct digits (three fell short by an ulp far in the tail, where the
 * start is worst). In the tail f / f' is (c exp(t^2) - erfcx(t)) sqrt(pi) / 2,
 * which neither underflows nor overflows where erfc(t) and exp(-t^2) would
 * (c down to the smallest subnormal). */
static inline DDPC_HD double ddpc_inverse_erf_(double a, double c) {
    if (c == 0) return INFINITY;
    const double w = 0.147, b = 2 / (DDPC_SF_PI * w);
    double l = log(c) + log1p(a); /* log(1 - a^2) = log(c (1 + a)) */
    double h = b + l / 2;
    double t = sqrt(sqrt(h * h - l / w) - h);
    double log_c = log(c);
    for (int i = 0; i < 4; i++) {
        double step = a <= 0.5 ? (erf(t) - a) / (DDPC_SF_TWO_OVER_SQRT_PI * exp(-t * t))
                               : (exp(log_c + t * t) - ddpc_erfcx(t)) / DDPC_SF_TWO_OVER_SQRT_PI;
        t -= step / (1 + t * step);
        if (fabs(step) < 1e-9 * t) break; /* the next step would be below 1e-24 t */
    }
    return t;
}

/* erfinv(y) for y in [-1, 1]: +-inf at +-1, NaN outside. 1 - |y| is exact
 * where it is used (|y| > 1/2). */
static inline DDPC_HD double ddpc_erfinv(double y) {
    double a = fabs(y);
    if (!(a <= 1)) return NAN;
    return copysign(ddpc_inverse_erf_(a, 1 - a), y);
}

/* The standard normal quantile: the x with Phi(x) = p, for p in [0, 1]
 * (-inf at 0, inf at 1, NaN outside). Phi(x) = erfc(-x / sqrt 2) / 2, so
 * x = -sqrt 2 * t with erfc(t) = 2p below 1/2 and sqrt 2 * t with
 * erfc(t) = 2 - 2p above; every argument handed on is exact where it is used. */
static inline DDPC_HD double ddpc_ndtri(double p) {
    if (!(p >= 0 && p <= 1)) return NAN;
    if (p < 0.5) return -DDPC_SF_SQRT2 * ddpc_inverse_erf_(1 - 2 * p, 2 * p);
    return DDPC_SF_SQRT2 * ddpc_inverse_erf_(2 * p - 1, 2 - 2 * p);
}

/* sin(pi x)^2, with x reduced by the nearest integer first, which is
 * exact, so that it is 0 at the integers and accurate near them. */
static inline DDPC_HD double ddpc_sin_pi_squared_(double x) {
    double s = sin(DDPC_SF_PI * (x - rint(x)));
    return s * s;
}

/* digamma(x) = d/dx log Gamma(x), as PyTorch: -inf at +0 and inf at -0, NaN
 * at the negative integers and -inf. Negative x by the reflection
 * psi(x) = psi(1 - x) - pi / tan(pi x); then the recurrence
 * psi(x) = psi(x + 1) - 1/x up to x >= 10, where the asymptotic series
 * log x - 1/(2x) - sum_k B_2k / (2k x^2k) (Bernoulli numbers B_2k) is exact
 * to double precision with seven terms. */
static inline DDPC_HD double ddpc_digamma(double x) {
    if (x == 0) return copysign(INFINITY, -x);
    if (x < 0) {
        if (x == trunc(x)) return NAN;
        double r = x - rint(x); /* tan has period pi: pi x reduced exactly, small near the poles */
        return ddpc_digamma(1 - x) - DDPC_SF_PI / tan(DDPC_SF_PI * r);
    }
    double shift = 0;
    for (; x < 10; x += 1) shift -= 1 / x;
    if (isinf(x)) return x;
    double z = 1 / (x * x);
    double series = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 -
                    z * (691.0 / 32760 - z * (1.0 / 12)))))));
    return shift + log(x) - 0.5 / x - series;
}

/* q^-s for a whole number s >= 1 by repeated squaring: a few products
 * instead of pow's logarithm and exponential, within a few ulp for the s of
 * polygamma's orders (0 where q^s overflows, inf where it underflows, as pow). */
static inline DDPC_HD double ddpc_inverse_power_(double q, double s) {
    double power = 1, base = q;
    for (uint64_t e = (uint64_t)s; e; e >>= 1, base *= base)
        if (e & 1) power *= base;
    return 1 / power;
}

/* q^-s: by squaring for a whole s below 2^31 (polygamma's orders), else by pow. */
static inline DDPC_HD double ddpc_zeta_term_(double q, double s) {
    return s == floor(s) && s < 2147483648.0 ? ddpc_inverse_power_(q, s) : pow(q, -s);
}

/* The Hurwitz zeta function zeta(s, q) = sum_k>=0 (q + k)^-s for s > 1 and
 * q not 0 or a negative integer (there it is infinite), q > 0 unless s is a
 * whole number. The first
 * terms are summed until q + k >= 10 and k >= 10; the rest by the
 * Euler-Maclaurin formula: the integral N^(1-s) / (s - 1), half the first
 * term, and sum_j B_2j / (2j)! * s (s+1) ... (s+2j-2) N^(-s-2j+1), whose
 * ratios B_2j / (2j)! are the constants below. For q < 0 and odd s the
 * first terms have both signs: the error is then relative to the largest,
 * |q - round(q)|^-s, as in Cephes' zeta. */
static inline DDPC_HD double ddpc_hurwitz_zeta_(double s, double q) {
    static const double bernoulli_over_factorial[] = {
        1.0 / 12, -1.0 / 720, 1.0 / 30240, -1.0 / 1209600, 1.0 / 47900160, -691.0 / 1307674368000.0,
        1.0 / 74724249600.0, -3617.0 / 10670622842880000.0, 43867.0 / 5109094217170944000.0,
        -174611.0 / 802857662698291200000.0,
    };
    if (q <= 0 && q == floor(q)) return INFINITY;
    double sum = 0;
    int k = 0;
    for (; k < 10 || q < 10; k++, q += 1) sum += ddpc_zeta_term_(q, s);
    /* q is now N, the first term the formula takes over */
    double term = ddpc_zeta_term_(q, s); /* N^-s, then times s (s+1) ... / N^(2j-1) */
    sum += q * term / (s - 1) + term / 2;
    double rising = s, inv_q2 = 1 / (q * q);
    term /= q;
    for (int j = 0; j < 10; j++) {
        double t = bernoulli_over_factorial[j] * rising * term;
        sum += t;
        if (fabs(t) < 1e-17 * fabs(sum)) break;
        rising *= (s + 2 * j + 1) * (s + 2 * j + 2);
        term *= inv_q2;
    }
    return sum;
}

/* torch.special.zeta(s, q), with PyTorch's (Cephes') edge values, checked
 * in its order: inf at s = 1, NaN for s < 1, inf at q = 0, a negative
 * integer or -inf, NaN for other q < 0 with s not a whole number, then NaN
 * for a NaN and at q = inf. At s = inf: inf for q < 1 (the term nearest 0,
 * |q + k|^-inf), 1 at q = 1 and, as PyTorch's and SciPy's, NaN above. */
static inline DDPC_HD double ddpc_zeta(double s, double q) {
    if (s == 1) return INFINITY;
    if (s < 1) return NAN;
    if (q <= 0) {
        if (q == floor(q)) return INFINITY;
        if (s != floor(s)) return NAN;
    }
    if (isnan(s) || isnan(q) || q == INFINITY) return NAN;
    if (isinf(s)) return q > 1 ? NAN : (q == 1 ? 1 : INFINITY);
    return ddpc_hurwitz_zeta_(s, q);
}

/* polygamma(n, x), the n-th derivative of digamma, for n >= 1:
 * (-1)^(n+1) n! zeta(n + 1, x); infinite at 0 and the negative integers.
 * Trigamma (n = 1) below 1/2 by the reflection
 * psi1(x) = pi^2 / sin(pi x)^2 - psi1(1 - x), so that a very negative x
 * costs no more than a positive one. The infinities give what PyTorch's
 * give: trigamma 0 at inf and NaN at -inf; for n >= 2 the zeta sum's NaN at
 * inf and its pole at -inf. */
static inline DDPC_HD double ddpc_polygamma(int n, double x) {
    if (n == 1) {
        if (isnan(x) || x == -INFINITY) return NAN;
        if (x == INFINITY) return 0;
        if (x < 0.5) {
            if (x == floor(x)) return INFINITY;
            return DDPC_SF_PI * DDPC_SF_PI / ddpc_sin_pi_squared_(x) - ddpc_hurwitz_zeta_(2, 1 - x);
        }
    }
    double factorial = 1; /* inf from n = 171 on: the loop stops there */
    for (int i = 2; i <= n && factorial < INFINITY; i++) factorial *= i;
    return (n % 2 ? factorial : -factorial) * ddpc_hurwitz_zeta_(n + 1, x);
}

/* The modified Bessel functions of the first kind I0 and I1, scaled by
 * exp(-|x|) when `scaled`. For |x| < 30 the power series
 * I_nu(x) = (x/2)^nu sum_k (x^2/4)^k / (k! (k + nu)!), whose terms are
 * all positive (no cancellation; about 2 |x| + 20 of them); from 30 on the
 * asymptotic series exp(x) / sqrt(2 pi x) * sum_k (-1)^k a_k(nu) / x^k,
 * a_k(nu) = prod_{j<=k} (4 nu^2 - (2j - 1)^2) / (k! 8^k), whose smallest
 * term (near k = 2x) is below e^-60. nu is 0 or 1; I1 is odd, I0 even.
 * At +-inf the unscaled ones are NaN and the scaled ones 0, as PyTorch's. */
static inline DDPC_HD double ddpc_bessel_i_(int nu, double x, int scaled) {
    double ax = fabs(x), value;
    if (isnan(x)) return x;
    if (ax < 30) {
        double q = ax * ax / 4, term = nu ? ax / 2 : 1, sum = term;
        for (int k = 1; term > 1e-17 * sum; k++) {
            term *= q / ((double)k * (k + nu));
            sum += term;
        }
        value = scaled ? sum * exp(-ax) : sum;
    } else if (isinf(ax)) {
        value = scaled ? 0 : NAN; /* PyTorch's: Cephes' expansion takes exp(x) times 0 there */
    } else {
        double term = 1, sum = 1, mu = 4.0 * nu * nu;
        for (int k = 1; k < 80 && fabs(term) > 1e-17 * sum; k++) {
            double odd = 2 * k - 1;
            term *= -(mu - odd * odd) / (8 * k * ax);
            sum += term;
        }
        value = sum * DDPC_SF_INV_SQRT_2PI / sqrt(ax);
        /* exp(ax) in two halves: it overflows before the product does */
        if (!scaled) value = value * exp(ax / 2) * exp(ax / 2);
    }
    return nu && x < 0 ? -value : value;
}

static inline DDPC_HD double ddpc_i0(double x) { return ddpc_bessel_i_(0, x, 0); }
static inline DDPC_HD double ddpc_i0e(double x) { return ddpc_bessel_i_(0, x, 1); }
static inline DDPC_HD double ddpc_i1(double x) { return ddpc_bessel_i_(1, x, 0); }
static inline DDPC_HD double ddpc_i1e(double x) { return ddpc_bessel_i_(1, x, 1); }

/* The derivatives that take more than one line, PyTorch's formulas: I1's
 * and I1E's are 1/2 at 0, where the formula divides 0 by 0. */
static inline DDPC_HD double ddpc_erfcx_derivative(double x) {
    return 2 * x * ddpc_erfcx(x) - DDPC_SF_TWO_OVER_SQRT_PI;
}
static inline DDPC_HD double ddpc_i0e_derivative(double x) {
    return ddpc_i1e(x) - (double)((x > 0) - (x < 0)) * ddpc_i0e(x);
}
static inline DDPC_HD double ddpc_i1_derivative(double x) { return x == 0 ? 0.5 : ddpc_i0(x) - ddpc_i1(x) / x; }
static inline DDPC_HD double ddpc_i1e_derivative(double x) {
    return x == 0 ? 0.5 : ddpc_i0e(x) - ddpc_i1e(x) * ((double)((x > 0) - (x < 0)) + 1 / x);
}

#endif
