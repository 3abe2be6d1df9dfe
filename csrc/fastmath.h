/* Branch-free float32 exp, log, sin, cos, tan, atan, tanh, sigmoid and normal CDF that the compiler vectorises.
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

/* A host loop compiled three times, for AVX-512, AVX2 and the build's
 * baseline, the CPU choosing at load time: four and two times the lanes of
 * the baseline for the same operations, so the same results. */
#define DDPC_ROW_TARGETS __attribute__((target_clones("avx512f", "avx2", "default")))

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

/* log by Cephes' logf: x = m 2^e with m in [sqrt(1/2), sqrt 2), log(m) from a
 * minimax polynomial in m - 1, e log 2 added in two parts. The exponent and
 * mantissa come from the bits (subnormals scaled by 2^23 first); zero,
 * negatives, infinity and NaN by selects. */
static inline float ddpc_log_f32(float x) {
    int tiny = x < 1.17549435e-38f;
    float v = tiny ? x * 8388608.0f : x;
    int32_t bits;
    memcpy(&bits, &v, sizeof bits);
    int32_t e = ((bits >> 23) & 0xff) - 126 - (tiny ? 23 : 0);
    int32_t mbits = (bits & 0x007fffff) | 0x3f000000; /* m in [1/2, 1) */
    float m;
    memcpy(&m, &mbits, sizeof m);
    int low = m < 0.707106781186547524f;
    e -= low;
    float f = (low ? m + m : m) - 1.0f;
    float z = f * f;
    float p = 7.0376836292e-2f;
    p = p * f - 1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f - 1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f - 1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f - 2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    float fe = (float)e;
    float y = p * f * z - 2.12194440e-4f * fe - 0.5f * z;
    y = f + y + 0.693359375f * fe;
    y = x == INFINITY ? INFINITY : y;
    y = x == 0 ? -INFINITY : y;
    return x < 0 || x != x ? NAN : y;
}

/* sin (cosine = 0) or cos (1) for |x| <= DDPC_TRIG_F32_LIMIT: |x| less a
 * multiple q of pi/2 (q = |x| 2/pi rounded), in double with pi/2 in two
 * parts, the first of 32 bits so that q times it is exact: the remainder is
 * right to about 1e-20, so the result keeps its relative accuracy also next
 * to a zero of sin or cos. Then Cephes' sinf or cosf polynomial of the
 * remainder as the quadrant q (one more for cos) says, with its sign. All in
 * selects and float arithmetic (no integer quadrant), which GCC vectorises
 * for AVX2 and AVX-512. Larger |x|, infinities and NaN give a wrong value
 * here: ddpc_trig_rows_f32 takes libm's for those. */
#define DDPC_TRIG_F32_LIMIT 4096.0f

/* The remainder r of |x| (0 beyond the limit) less q pi/2, q = |x| 2/pi
 * rounded, in double with pi/2 in two parts; *q gets q. */
static inline float ddpc_trig_reduce_f32_(float x, float *q) {
    float a = fabsf(x);
    float ac = a <= DDPC_TRIG_F32_LIMIT ? a : 0.0f;
    float qf = floorf(ac * 0.636619772367581343f + 0.5f);
    double qd = qf;
    *q = qf;
    return (float)(((double)ac - qd * 1.5707963267341256) - qd * 6.077100506506192e-11);
}

/* Cephes' sinf and cosf polynomials, for |r| <= pi/4. */
static inline float ddpc_sin_poly_f32_(float r) {
    float z = r * r;
    return ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
}

static inline float ddpc_cos_poly_f32_(float r) {
    float z = r * r;
    return ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z - 0.5f * z +
           1.0f;
}

static inline float ddpc_sincos_f32(float x, int cosine) {
    float qf;
    float r = ddpc_trig_reduce_f32_(x, &qf);
    float qc = qf + (float)cosine;
    float quadrant = qc - 4.0f * floorf(qc * 0.25f); /* 0, 1, 2 or 3 */
    float odd = quadrant - 2.0f * floorf(quadrant * 0.5f);
    float v = odd != 0.0f ? ddpc_cos_poly_f32_(r) : ddpc_sin_poly_f32_(r);
    /* sin is odd, down to the sign of a zero: sin(-0) is -0 */
    int flip = (quadrant >= 2.0f) ^ (!cosine & (signbit(x) != 0));
    return flip ? -v : v;
}

/* tan for |x| <= DDPC_TRIG_F32_LIMIT, with ddpc_sincos_f32's reduction:
 * tan(r) = sin(r) / cos(r) in an even quadrant, -cos(r) / sin(r) in an odd
 * one; tan is odd. */
static inline float ddpc_tan_f32(float x) {
    float qf;
    float r = ddpc_trig_reduce_f32_(x, &qf);
    float odd = qf - 2.0f * floorf(qf * 0.5f);
    float s = ddpc_sin_poly_f32_(r), c = ddpc_cos_poly_f32_(r);
    float v = odd != 0.0f ? -c / s : s / c;
    return signbit(x) ? -v : v;
}

/* atan by Cephes' atanf: |x| above tan(3 pi / 8) as pi/2 - atan(1/|x|),
 * above tan(pi / 8) as pi/4 + atan((|x| - 1) / (|x| + 1)), then an odd
 * polynomial; the sign of x restored (atan(-0) is -0), NaN passed on. */
static inline float ddpc_atan_f32(float x) {
    float a = fabsf(x);
    int big = a > 2.414213562373095f, mid = a > 0.4142135623730950f;
    float y0 = big ? 1.570796326794897f : (mid ? 0.7853981633974483f : 0.0f);
    float t = big ? -1.0f / a : (mid ? (a - 1.0f) / (a + 1.0f) : a);
    float z = t * t;
    float p = 8.05374449538e-2f;
    p = p * z - 1.38776856032e-1f;
    p = p * z + 1.99777106478e-1f;
    p = p * z - 3.33329491539e-1f;
    float y = y0 + (p * z * t + t);
    y = a == INFINITY ? 1.570796326794897f : y;
    y = x != x ? x : y;
    return signbit(x) ? -y : y;
}

/* One block of ddpc_trig_rows_f32 (restrict-qualified, so it vectorises);
 * whether an element lies beyond the polynomial's range. Both are inlined
 * always, so that a DDPC_ROW_TARGETS caller compiles them for its targets. */
static inline __attribute__((always_inline)) int ddpc_trig_block_f32_(float *restrict out, const float *restrict a,
                                                                      int64_t m, int kind) {
    int beyond = 0;
    for (int64_t k = 0; k < m; k++) {
        out[k] = kind == 2 ? ddpc_tan_f32(a[k]) : ddpc_sincos_f32(a[k], kind);
        beyond |= !(fabsf(a[k]) <= DDPC_TRIG_F32_LIMIT);
    }
    return beyond;
}

/* o = sin(a) (kind 0), cos(a) (1) or tan(a) (2) over n floats (o may be
 * a): the polynomials over a block, then libm's for the block's elements
 * beyond their range. */
static inline __attribute__((always_inline)) void ddpc_trig_rows_f32(float *o, const float *a, int64_t n, int kind) {
    float block[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        if (ddpc_trig_block_f32_(block, a + i0, m, kind))
            for (int64_t k = 0; k < m; k++)
                if (!(fabsf(a[i0 + k]) <= DDPC_TRIG_F32_LIMIT))
                    block[k] = kind == 2 ? tanf(a[i0 + k]) : kind ? cosf(a[i0 + k]) : sinf(a[i0 + k]);
        memcpy(o + i0, block, (size_t)m * sizeof *o);
    }
}

/* exp, tanh and sigmoid of T's precision, T being float or double (sizeof is
 * a constant, so one branch remains): these functions for float, libm for double. */
#define EXP_T(T, x) (sizeof(T) == 4 ? (T)ddpc_exp_f32((float)(x)) : (T)exp((double)(x)))
#define TANH_T(T, x) (sizeof(T) == 4 ? (T)ddpc_tanh_f32((float)(x)) : (T)tanh((double)(x)))
#define SIGMOID_T(T, x) (sizeof(T) == 4 ? (T)ddpc_sigmoid_f32((float)(x)) : (T)(1 / (1 + exp(-(double)(x)))))
#define LOG_T(T, x) (sizeof(T) == 4 ? (T)ddpc_log_f32((float)(x)) : (T)log((double)(x)))
#define ATAN_T(T, x) (sizeof(T) == 4 ? (T)ddpc_atan_f32((float)(x)) : (T)atan((double)(x)))

#endif
