/* The special functions of kernels/special_functions.h, which the host loops
 * and the CUDA kernels share, against closed forms and identities: digamma
 * and polygamma at 1, 1/2 and across their recurrences and reflections, the
 * error function inverses round trip, erfcx's and the Bessel functions'
 * switch from one expansion to the other, and the edge values. */
#include <math.h>

#include "check.h"
#include "special_functions.h"

#define EULER_GAMMA 0.57721566490153286061

static int close_(double got, double want, double rtol) {
    return got == want || fabs(got - want) <= rtol * fabs(want);
}

static void test_digamma_and_polygamma_(void) {
    EXPECT(close_(ddpc_digamma(1), -EULER_GAMMA, 1e-15), "digamma(1) = %.17g", ddpc_digamma(1));
    EXPECT(close_(ddpc_digamma(0.5), -EULER_GAMMA - 2 * log(2.0), 1e-15));
    for (double x = -9.75; x < 30; x += 0.5) /* psi(x + 1) = psi(x) + 1 / x: the recurrence the code crosses at 10 */
        EXPECT(close_(ddpc_digamma(x + 1) - 1 / x, ddpc_digamma(x), 1e-12), "digamma at %g", x);
    EXPECT(isinf(ddpc_digamma(0.0)) && ddpc_digamma(0.0) < 0 && ddpc_digamma(-0.0) > 0);
    EXPECT(isnan(ddpc_digamma(-3)) && isnan(ddpc_digamma(-INFINITY)) && ddpc_digamma(INFINITY) == INFINITY);
    EXPECT(close_(ddpc_polygamma(1, 1), DDPC_SF_PI * DDPC_SF_PI / 6, 1e-15));
    EXPECT(ddpc_polygamma(1, INFINITY) == 0 && isnan(ddpc_polygamma(1, -INFINITY)));
    EXPECT(isnan(ddpc_polygamma(2, INFINITY)) && ddpc_polygamma(2, -INFINITY) == -INFINITY); /* PyTorch's */
    EXPECT(close_(ddpc_polygamma(3, 0.5), pow(DDPC_SF_PI, 4), 1e-14));
    for (int n = 1; n <= 5; n++) {
        double fact = 1;
        for (int i = 2; i <= n; i++) fact *= i;
        for (double x = -12.3; x < 25; x += 0.7) {
            /* below 0 the terms of the sum cancel: the error is relative to the largest, the nearest pole's */
            double step = (n % 2 ? -fact : fact) / pow(x, n + 1), value = ddpc_polygamma(n, x);
            double scale = x < 0 ? fact / pow(fabs(x - rint(x)), n + 1) : fabs(value);
            EXPECT(fabs(ddpc_polygamma(n, x + 1) - step - value) <= 1e-13 * scale, "polygamma(%d, %g)", n, x);
        }
        EXPECT(isinf(ddpc_polygamma(n, 0)) && isinf(ddpc_polygamma(n, -4)) && isnan(ddpc_polygamma(n, NAN)));
    }
}

static void test_error_function_inverses_(void) {
    for (double y = -0.999; y < 1; y += 0.0135)
        EXPECT(close_(erf(ddpc_erfinv(y)), y, 1e-15), "erf(erfinv(%g))", y);
    for (double c = 1e-16; c < 0.5; c *= 10) { /* the tail: 1 - y, exact there, is what erfc gives back */
        double y = 1 - c;
        EXPECT(close_(erfc(ddpc_erfinv(y)), 1 - y, 1e-13), "erfinv(1 - %g)", c);
    }
    EXPECT(ddpc_erfinv(1) == INFINITY && ddpc_erfinv(-1) == -INFINITY && isnan(ddpc_erfinv(1.5)));
    for (double p = 1e-300; p < 1; p = p < 1e-3 ? p * 1e5 : p + 0.0625)
        EXPECT(close_(0.5 * erfc(-ddpc_ndtri(p) / DDPC_SF_SQRT2), p, 1e-11), "ndtri(%g)", p);
    EXPECT(ddpc_ndtri(0) == -INFINITY && ddpc_ndtri(1) == INFINITY && ddpc_ndtri(0.5) == 0 && isnan(ddpc_ndtri(2)));
}

static void test_erfcx_and_bessel_(void) {
    for (double x = -5; x < 12.5; x += 0.25)
        EXPECT(close_(ddpc_erfcx(x), exp(x * x) * erfc(x), 1e-13), "erfcx(%g)", x);
    EXPECT(ddpc_erfcx(-30) == INFINITY && ddpc_erfcx(INFINITY) == 0 && ddpc_erfcx(0) == 1);
    /* the power series and the asymptotic expansion agree across their switch at 30 */
    EXPECT(close_(ddpc_i0e(29.999999), ddpc_i0e(30), 1e-7) && close_(ddpc_i1e(-29.999999), ddpc_i1e(-30), 1e-7));
    for (double x = -40; x < 40; x += 0.5) { /* I0' = I1, by central differences of the scaled forms */
        double h = 1e-5, up = ddpc_i0e(x + h) * exp(fabs(x + h) - fabs(x));
        double down = ddpc_i0e(x - h) * exp(fabs(x - h) - fabs(x));
        EXPECT(close_((up - down) / (2 * h), ddpc_i1e(x), 1e-8), "i0'(%g)", x);
    }
    EXPECT(ddpc_i0(0) == 1 && ddpc_i1(0) == 0 && isnan(ddpc_i0(INFINITY)) && isnan(ddpc_i1(-INFINITY)));
    EXPECT(ddpc_i0(800) == INFINITY && ddpc_i1(-800) == -INFINITY);
    EXPECT(ddpc_i0e(INFINITY) == 0 && isnan(ddpc_i0(NAN)) && ddpc_i1e_derivative(0) == 0.5);
}

int main(void) {
    test_digamma_and_polygamma_();
    test_error_function_inverses_();
    test_erfcx_and_bessel_();
    return check_finish("special functions");
}
