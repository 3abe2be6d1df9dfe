/* The special functions of kernels/special_functions.h, bessel.h,
 * incomplete_gamma.h and orthogonal_polynomials.h, which the host loops and
 * the CUDA kernels share, against closed forms and identities: digamma and
 * polygamma at 1, 1/2 and across their recurrences and reflections, the
 * error function inverses round trip, erfcx's and the Bessel functions'
 * switch from one expansion to the other, the incomplete gamma functions
 * and zeta across their branches, the polynomials' recurrences against their
 * trigonometric forms, and the edge values (under UBSan: no degree, however
 * large or NaN, is converted out of range). */
#include <math.h>

#include "bessel.h"
#include "check.h"
#include "special_binary.h"
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

static void test_incomplete_gamma_and_zeta_(void) {
    for (double x = 0.01; x < 60; x *= 1.3) { /* P(1, x) = 1 - e^-x, P(1/2, x) = erf(sqrt x), both sides of x = a + 1 */
        EXPECT(close_(ddpc_igamma(1, x), -expm1(-x), 1e-14) && close_(ddpc_igammac(1, x), exp(-x), 1e-13), "%g", x);
        EXPECT(close_(ddpc_igamma(0.5, x), erf(sqrt(x)), 1e-14) && close_(ddpc_igammac(0.5, x), erfc(sqrt(x)), 1e-12));
    }
    /* P + Q = 1 and continuity where the algorithm changes: a = 20 and 200 at x = a, x = 1.1 and 0.5 */
    const double shapes[] = {19.999999, 20.000001, 199.99999, 200.00001, 0.3, 1.5}, points[] = {1.1, 0.5};
    for (int i = 0; i < 6; i++) {
        double a = shapes[i], x = i < 4 ? a * 1.05 : points[i - 4];
        EXPECT(close_(ddpc_igamma(a, x) + ddpc_igammac(a, x), 1, 1e-14), "P + Q at (%g, %g)", a, x);
        EXPECT(close_(ddpc_igamma(a, x * (1 + 1e-9)), ddpc_igamma(a, x), 1e-7), "P continuous at (%g, %g)", a, x);
    }
    EXPECT(ddpc_igamma(0, 2) == 1 && ddpc_igamma(3, 0) == 0 && isnan(ddpc_igamma(-1, 1)) && isnan(ddpc_igamma(0, 0)));
    EXPECT(ddpc_igamma(INFINITY, NAN) == 0 && ddpc_igammac(NAN, INFINITY) == 0 && isnan(ddpc_igamma(2, NAN)));
    EXPECT(close_(ddpc_zeta(2, 1), DDPC_SF_PI * DDPC_SF_PI / 6, 1e-15));
    EXPECT(close_(ddpc_zeta(4, 1), pow(DDPC_SF_PI, 4) / 90, 1e-15));
    for (double s = 1.25; s < 12; s += 1.1) /* zeta(s, q) - zeta(s, q + 1) = q^-s for a real s */
        for (double q = 0.05; q < 40; q *= 2.3)
            EXPECT(close_(ddpc_zeta(s, q) - ddpc_zeta(s, q + 1), pow(q, -s), 1e-12), "zeta(%g, %g)", s, q);
    EXPECT(ddpc_zeta(1, NAN) == INFINITY && isnan(ddpc_zeta(0.5, 2)) && ddpc_zeta(2, -3) == INFINITY);
    EXPECT(isnan(ddpc_zeta(2.5, -0.5)) && isnan(ddpc_zeta(2, INFINITY)) && ddpc_zeta(INFINITY, 0.5) == INFINITY);
}

static void test_bessel_j_y_k_and_airy_(void) {
    for (double x = 0.25; x < 60; x += 0.37) { /* the Wronskians J1 Y0 - J0 Y1 = 2 / (pi x), I0 K1 + I1 K0 = 1 / x */
        double w = ddpc_bessel_j1(x) * ddpc_bessel_y0(x) - ddpc_bessel_j0(x) * ddpc_bessel_y1(x);
        EXPECT(close_(w, 2 / (DDPC_SF_PI * x), 1e-13), "J, Y Wronskian at %g", x);
        if (x < 30)
            EXPECT(close_(ddpc_i0(x) * ddpc_bessel_k1(x) + ddpc_i1(x) * ddpc_bessel_k0(x), 1 / x, 1e-13), "at %g", x);
        EXPECT(close_(ddpc_bessel_k0e(x), ddpc_bessel_k0(x) * exp(x), 1e-13));
    }
    /* continuous where the approximations change: J and Y at 5 (J0 also at 1e-5), K at 2, Ai at +-2.09 */
    const double lo = 1 - 1e-12, hi = 1 + 1e-12;
    EXPECT(close_(ddpc_bessel_j0(5 * lo), ddpc_bessel_j0(5 * hi), 1e-10));
    EXPECT(close_(ddpc_bessel_j0(1e-5 * lo), ddpc_bessel_j0(1e-5 * hi), 1e-10));
    EXPECT(close_(ddpc_bessel_y1(5 * lo), ddpc_bessel_y1(5 * hi), 1e-10));
    EXPECT(close_(ddpc_bessel_k1e(2 * lo), ddpc_bessel_k1e(2 * hi), 1e-10));
    EXPECT(close_(ddpc_airy_ai(2.09 * lo), ddpc_airy_ai(2.09 * hi), 1e-10));
    EXPECT(close_(ddpc_airy_ai(-2.09 * lo), ddpc_airy_ai(-2.09 * hi), 1e-10));
    EXPECT(ddpc_bessel_j0(0) == 1 && ddpc_bessel_j1(-0.0) == 0 && ddpc_bessel_y0(0) == -INFINITY);
    EXPECT(isnan(ddpc_bessel_y1(-1)) && ddpc_bessel_k1(0) == INFINITY && isnan(ddpc_bessel_k0(-2)));
    EXPECT(isnan(ddpc_bessel_j0(INFINITY)) && isnan(ddpc_airy_ai(-INFINITY)) && ddpc_airy_ai(200) == 0);
    EXPECT(ddpc_spherical_bessel_j0(0) == 1 && ddpc_spherical_bessel_j0(INFINITY) == 0);
    EXPECT(ddpc_bessel_j1_derivative(0) == 0.5);
}

static void test_orthogonal_polynomials_(void) {
    for (int n = 0; n <= 12; n++) /* past degree 6 or 8 the trigonometric forms take over from the recurrence */
        for (double theta = 0.1; theta < 3; theta += 0.29) {
            double x = cos(theta);
            EXPECT(close_(ddpc_special_binary(DDPC_CHEBYSHEV_T, x, n, 0), cos(n * theta), 1e-12) ||
                   fabs(cos(n * theta)) < 1e-12, "T_%d(cos %g)", n, theta);
            EXPECT(fabs(ddpc_special_binary(DDPC_CHEBYSHEV_U, x, n, 0) - sin((n + 1) * theta) / sin(theta)) <
                   1e-12 * (n + 1) / sin(theta), "U_%d(cos %g)", n, theta);
            EXPECT(fabs(ddpc_special_binary(DDPC_SHIFTED_CHEBYSHEV_W, (x + 1) / 2, n, 0) -
                        sin((n + 0.5) * theta) / sin(theta / 2)) < 1e-12 * (2 * n + 1) / sin(theta / 2));
        }
    /* degrees as PyTorch converts them: truncated, negative or not a number at all 0 */
    const double degrees[] = {-1, NAN, INFINITY, -INFINITY, 1e300, -9.3e18};
    for (int op = DDPC_CHEBYSHEV_T; op < DDPC_NSPECIAL_BINARY; op++) {
        for (int i = 0; i < 6; i++) EXPECT(ddpc_special_binary(op, 0.3, degrees[i], 0) == 0, "op %d", op);
        EXPECT(ddpc_special_binary(op, 0.3, 2.9, 0) == ddpc_special_binary(op, 0.3, 2, 0), "op %d", op);
    }
    /* a huge degree outside [-1, 1]: the recurrence overflows to NaN and stops */
    EXPECT(isnan(ddpc_chebyshev_polynomial(DDPC_CHEBYSHEV_T_KIND, 3, 9e18)));
    EXPECT(ddpc_chebyshev_polynomial(DDPC_CHEBYSHEV_V_KIND, -1, 9e18) == 2 * 9e18 + 1);
    EXPECT(isnan(ddpc_special_binary(DDPC_HERMITE_HE, 0.5, 129, 1))); /* past PyTorch's float32 limit */
    EXPECT(!isnan(ddpc_special_binary(DDPC_HERMITE_HE, 0.5, 129, 0)));
    EXPECT(ddpc_legendre_polynomial_p(-1, 7) == -1 && ddpc_laguerre_polynomial_l(0, 40) == 1);
}

int main(void) {
    test_digamma_and_polygamma_();
    test_error_function_inverses_();
    test_erfcx_and_bessel_();
    test_incomplete_gamma_and_zeta_();
    test_bessel_j_y_k_and_airy_();
    test_orthogonal_polynomials_();
    return check_finish("special functions");
}
