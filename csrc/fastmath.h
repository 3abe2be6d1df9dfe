/* Branch-free float32 exp, tanh, sigmoid and normal CDF that the compiler vectorises.
 *
 * libm's expf/tanhf/erff are scalar calls (tanhf alone costs ~70 ns), which
 * made host activations 10-100x slower than the GEMMs around them. These use
 * Cody-Waite range reduction with Cephes' minimax polynomials (exp, tanh)
 * and resolve every special case with selects instead of branches (with
 * -fno-trapping-math the compiler turns them into vector blends). float64 keeps libm:
 * it is the gradient-checking precision, where accuracy matters more. */
#ifndef DDPC_FASTMATH_H
#define DDPC_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float ddpc_exp_f32(float x) {
    /* Clamped to where exp(x) is a float other than 0 or inf; the selects at
     * the end restore overflow, underflow and NaN. */
    float c = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
    /* Round-to-nearest by the 1.5 * 2^23 trick (no SSE4.1 round needed). */
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = c - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    /* n is in [-150, 128], beyond a normal float's exponents at both ends:
     * 2^n as two factors that each are normal, so results near overflow stay
     * finite and those below FLT_MIN round gradually to subnormals. */
    int32_t n1 = (int32_t)n / 2, n2 = (int32_t)n - n1;
    int32_t bits1 = (n1 + 127) << 23, bits2 = (n2 + 127) << 23;
    float scale1, scale2;
    memcpy(&scale1, &bits1, sizeof scale1);
    memcpy(&scale2, &bits2, sizeof scale2);
    y = y * scale1 * scale2;
    y = x > 88.72283905f ? INFINITY : y;
    y = x < -104.0f ? 0.0f : y;
    return x != x ? x : y;
}

static inline float ddpc_tanh_f32(float x) {
    float a = fabsf(x);
    /* Small |x|: odd polynomial (no cancellation); otherwise from exp(-2|x|). */
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    float e = ddpc_exp_f32(-2.0f * a);
    float big = (1.0f - e) / (1.0f + e);
    big = x < 0 ? -big : big;
    return a < 0.625f ? small : big;
}

static inline float ddpc_sigmoid_f32(float x) { return 1.0f / (1.0f + ddpc_exp_f32(-x)); }

/* Phi(x) = (1 + erf(x / sqrt 2)) / 2 through erfc, so the left tail keeps
 * its relative accuracy (GELU's x * Phi(x) is tiny there, not zero). erfc
 * is the Chebyshev fit of Numerical Recipes' erfcc (fractional error below
 * 1.2e-7 for every argument). */
static inline float ddpc_normal_cdf_f32(float x) {
    float z = fabsf(x) * 0.70710678118654752f;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float erfc = t * ddpc_exp_f32(p - z * z);
    return x < 0 ? 0.5f * erfc : 1.0f - 0.5f * erfc;
}

/* exp, tanh and sigmoid of T's precision, T being float or double (sizeof is
 * a constant, so one branch remains): these functions for float, libm for double. */
#define EXP_T(T, x) (sizeof(T) == 4 ? (T)ddpc_exp_f32((float)(x)) : (T)exp((double)(x)))
#define TANH_T(T, x) (sizeof(T) == 4 ? (T)ddpc_tanh_f32((float)(x)) : (T)tanh((double)(x)))
#define SIGMOID_T(T, x) (sizeof(T) == 4 ? (T)ddpc_sigmoid_f32((float)(x)) : (T)(1 / (1 + exp(-(double)(x)))))

#endif
