/* kernels/complex_math.h, which the host loops and the kernels share, against
 * C99's <complex.h> on a grid of points over every quadrant and both axes,
 * and at the edges its own rules fix: division by 0, the square root of
 * negative reals, sgn and pow at 0, and division without overflow where
 * |c|^2 + |d|^2 would overflow. */
#include <complex.h>
#include <math.h>

#include "check.h"
#include "complex_math.h"

static ddpc_cx cx_(double complex z) {
    ddpc_cx r = {creal(z), cimag(z)};
    return r;
}

static int near_(ddpc_cx got, double complex want) {
    double scale = 1 + cabs(want);
    return fabs(got.re - creal(want)) <= 1e-12 * scale && fabs(got.im - cimag(want)) <= 1e-12 * scale;
}

#define CHECK_CX(got, want, what, z)                                                                      \
    EXPECT(near_((got), (want)), "%s at %g%+gi: %g%+gi, expected %g%+gi", what, creal(z), cimag(z),     \
           (got).re, (got).im, creal(want), cimag(want))

static void test_against_libm(void) {
    static const double parts[] = {-3.5, -1, -0.25, 0, 0.5, 1, 2.75};
    enum { NP = sizeof parts / sizeof parts[0] };
    for (int i = 0; i < NP; i++)
        for (int j = 0; j < NP; j++) {
            double complex z = CMPLX(parts[i], parts[j]), w = CMPLX(parts[j] + 0.5, -parts[i]);
            ddpc_cx x = cx_(z), y = cx_(w);
            CHECK_CX(ddpc_cx_binary(0, x, y), z + w, "add", z);
            CHECK_CX(ddpc_cx_binary(1, x, y), z - w, "sub", z);
            CHECK_CX(ddpc_cx_binary(2, x, y), z * w, "mul", z);
            CHECK_CX(ddpc_cx_binary(4, x, y), w - z, "rsub", z);
            if (cabs(w) > 0) CHECK_CX(ddpc_cx_binary(3, x, y), z / w, "div", z);
            if (cabs(z) > 0) CHECK_CX(ddpc_cx_binary(5, x, y), w / z, "rdiv", z);
            CHECK_CX(ddpc_cx_unary(0, x, 0), -z, "neg", z);
            CHECK_CX(ddpc_cx_unary(1, x, 0), conj(z), "conj", z);
            CHECK_CX(ddpc_cx_unary(2, x, 0), cexp(z), "exp", z);
            CHECK_CX(ddpc_cx_unary(4, x, 0), csqrt(z), "sqrt", z);
            CHECK_CX(ddpc_cx_unary(8, x, 0), cabs(z), "abs", z);
            CHECK_CX(ddpc_cx_unary(9, x, 0), carg(z), "angle", z);
            if (cabs(z) == 0) continue;
            CHECK_CX(ddpc_cx_unary(3, x, 0), clog(z), "log", z);
            CHECK_CX(ddpc_cx_unary(5, x, 0), 1 / z, "reciprocal", z);
            CHECK_CX(ddpc_cx_unary(6, x, 0), z / cabs(z), "sgn", z);
            static const double powers[] = {-2, -0.5, 1, 2, 2.5, 3};
            for (int k = 0; k < 6; k++)
                CHECK_CX(ddpc_cx_unary(7, x, powers[k]), cpow(z, powers[k]), "pow", z);
        }
}

static void test_edges(void) {
    ddpc_cx zero = {0, 0}, one = {1, 0}, neg_zero_im = {-4, -0.0}, r;
    r = ddpc_cx_unary(4, neg_zero_im, 0); /* sqrt(-4 - 0i) is -2i, on the branch cut's lower side */
    EXPECT(r.re == 0 && r.im == -2, "sqrt(-4-0i) = %g%+gi", r.re, r.im);
    r = ddpc_cx_unary(6, zero, 0);
    EXPECT(r.re == 0 && r.im == 0, "sgn(0) = %g%+gi", r.re, r.im);
    r = ddpc_cx_unary(7, zero, 2);
    EXPECT(r.re == 0 && r.im == 0, "0^2 = %g%+gi", r.re, r.im);
    r = ddpc_cx_unary(7, zero, 0);
    EXPECT(r.re == 1 && r.im == 0, "0^0 = %g%+gi", r.re, r.im);
    r = ddpc_cx_binary(3, one, zero);
    EXPECT(isinf(r.re) && r.re > 0 && isnan(r.im), "1 / 0 = %g%+gi", r.re, r.im);
    ddpc_cx huge = {1e300, 1e300};
    r = ddpc_cx_binary(3, huge, huge); /* |c|^2 + |d|^2 overflows; the scaled division does not */
    EXPECT(fabs(r.re - 1) < 1e-15 && fabs(r.im) < 1e-15, "huge / huge = %g%+gi", r.re, r.im);
}

int main(void) {
    test_against_libm();
    test_edges();
    return check_finish("complex math");
}
