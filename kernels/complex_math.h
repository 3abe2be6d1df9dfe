/* Complex arithmetic on (real, imaginary) pairs of doubles, shared by the host
 * loops of csrc/ops_complex.c and the kernels of kernels/complex.cu so that
 * both give the same numbers. complex64 elements are computed in double and
 * rounded once. The op codes are ddpc_complex_op (csrc/ops_complex.h). */
#ifndef DDPC_COMPLEX_MATH_H
#define DDPC_COMPLEX_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define DDPC_CX_HD __host__ __device__
#else
#define DDPC_CX_HD
#endif

typedef struct {
    double re, im;
} ddpc_cx;

/* Division by scaling with the larger part of the divisor (Smith's method), so
 * that |c|^2 + |d|^2 is never formed and does not overflow. */
static inline DDPC_CX_HD ddpc_cx ddpc_cx_div(ddpc_cx x, ddpc_cx y) {
    ddpc_cx r;
    if (fabs(y.re) >= fabs(y.im)) {
        if (y.re == 0 && y.im == 0) { /* x / 0: what each part gives divided by a real 0 */
            r.re = x.re / fabs(y.re);
            r.im = x.im / fabs(y.re);
            return r;
        }
        double q = y.im / y.re, den = y.re + y.im * q;
        r.re = (x.re + x.im * q) / den;
        r.im = (x.im - x.re * q) / den;
    } else {
        double q = y.re / y.im, den = y.re * q + y.im;
        r.re = (x.re * q + x.im) / den;
        r.im = (x.im * q - x.re) / den;
    }
    return r;
}

/* x op y for the binary codes: add, sub, mul, div, then y - x and y / x. */
static inline DDPC_CX_HD ddpc_cx ddpc_cx_binary(int op, ddpc_cx x, ddpc_cx y) {
    ddpc_cx r;
    switch (op) {
    case 0: r.re = x.re + y.re; r.im = x.im + y.im; return r;
    case 1: r.re = x.re - y.re; r.im = x.im - y.im; return r;
    case 2: r.re = x.re * y.re - x.im * y.im; r.im = x.re * y.im + x.im * y.re; return r;
    case 3: return ddpc_cx_div(x, y);
    case 4: r.re = y.re - x.re; r.im = y.im - x.im; return r;
    default: return ddpc_cx_div(y, x);
    }
}

/* Principal square root, without cancellation: the larger part comes from
 * sqrt((|z| + |re|) / 2), the other from im / (2 * that). */
static inline DDPC_CX_HD ddpc_cx ddpc_cx_sqrt(ddpc_cx z) {
    ddpc_cx r;
    if (z.re == 0 && z.im == 0) {
        r.re = 0;
        r.im = z.im;
        return r;
    }
    double t = sqrt((hypot(z.re, z.im) + fabs(z.re)) / 2);
    if (z.re >= 0) {
        r.re = t;
        r.im = z.im / (2 * t);
    } else {
        r.re = fabs(z.im) / (2 * t);
        r.im = copysign(t, z.im);
    }
    return r;
}

/* The unary codes of ddpc_complex_op: neg, conj, exp, log, sqrt, reciprocal,
 * sgn (z / |z|, 0 at 0), pow by the real p, then abs and angle (which give
 * their real result in .re). */
static inline DDPC_CX_HD ddpc_cx ddpc_cx_unary(int op, ddpc_cx z, double p) {
    ddpc_cx r;
    double a;
    switch (op) {
    case 0: r.re = -z.re; r.im = -z.im; return r;
    case 1: r.re = z.re; r.im = -z.im; return r;
    case 2: a = exp(z.re); r.re = a * cos(z.im); r.im = a * sin(z.im); return r;
    case 3: r.re = log(hypot(z.re, z.im)); r.im = atan2(z.im, z.re); return r;
    case 4: return ddpc_cx_sqrt(z);
    case 5: r.re = 1; r.im = 0; return ddpc_cx_div(r, z);
    case 6:
        a = hypot(z.re, z.im);
        if (a == 0) { r.re = 0; r.im = 0; return r; }
        r.re = z.re / a; r.im = z.im / a;
        return r;
    case 7:
        if (p == 0) { r.re = 1; r.im = 0; return r; }
        if (z.re == 0 && z.im == 0) { r.re = p > 0 ? 0 : INFINITY; r.im = 0; return r; }
        if (p == 1) return z;
        if (p == 2) { r.re = z.re * z.re - z.im * z.im; r.im = 2 * z.re * z.im; return r; }
        a = pow(hypot(z.re, z.im), p);
        r.re = a * cos(p * atan2(z.im, z.re));
        r.im = a * sin(p * atan2(z.im, z.re));
        return r;
    case 8: r.re = hypot(z.re, z.im); r.im = 0; return r;
    default: r.re = atan2(z.im, z.re); r.im = 0; return r;
    }
}

#endif
