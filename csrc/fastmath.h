/* Branch-free float32 elementwise functions that the compiler vectorises:
 * exp, expm1, log, log1p, sigmoid, tanh, sinh, cosh, erf, erfc, the normal
 * distribution function and density, sin, cos, tan, atan, asin, acos, asinh,
 * acosh, atanh.
 *
 * libm's expf/tanhf/erff are scalar calls (tanhf alone costs ~70 ns), which
 * made host activations 10-100x slower than the GEMMs around them. These use
 * Cody-Waite range reduction with Cephes' minimax polynomials and resolve
 * every special case with selects instead of branches (with
 * -fno-trapping-math the compiler turns them into vector blends). Each
 * states its error bound in float32 ulps, which tests/test_math.py checks
 * over sweeps of the inputs and the edge values. float64 keeps libm: it is
 * the gradient-checking precision, where accuracy matters more. */
#ifndef DDPC_FASTMATH_H
#define DDPC_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A host loop compiled three times, for AVX-512, AVX2 with FMA (Haswell's
 * set, the same as x86-64-v3, by a name older compilers know too) and the
 * build's baseline, the CPU choosing at load time: four and two times the
 * lanes of the baseline, and a * b + c fused into one rounding on the first
 * two (setup.py's -ffp-contract=fast), so the results may differ in the last
 * bit from the baseline's, within each function's stated bound. */
#define DDPC_ROW_TARGETS __attribute__((target_clones("avx512f", "arch=haswell", "default")))

/* Every function here is inlined always, so that a DDPC_ROW_TARGETS caller
 * compiles it for its targets and vectorises the loop around it: in a
 * large function such as the unary ops' switch, GCC would otherwise call
 * some of them per element, compiled for the baseline. */
#define DDPC_FASTMATH_ static inline __attribute__((always_inline))

/* exp(x - x_sub) = 2^n (1 + m), returning m = expm1(r) for r = x - x_sub - n
 * ln 2, |r| <= ln(2) / 2: n is (x - x_sub) log2(e) rounded (x_sub, below 2
 * in magnitude, lets an argument carry more than a float's precision: x - n
 * ln 2 is exact; subtracted, so that 0 folds away), ln 2 in two parts
 * (Cody-Waite) so that r keeps its relative accuracy, m Cephes' expf
 * polynomial. Below x = -120 and above 90, where exp is 0 or infinite in
 * float (also times a factor up to 2^15 or 1/2), m is -1 or inf and n
 * clamped to [-176, 130], which ddpc_ldexp_f32_ takes: an integer clamp and
 * two selects at the end, where clamping x would make GCC duplicate the
 * work for each bound. A NaN x gives a NaN m. */
DDPC_FASTMATH_ float ddpc_exp_reduce_f32_(float x, float x_sub, int32_t *n) {
    /* Round-to-nearest by the 1.5 * 2^23 trick (no SSE4.1 round needed). */
    float nf = ((x - x_sub) * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    int32_t k = (int32_t)nf;
    *n = k < -176 ? -176 : (k > 130 ? 130 : k);
    float r = (x - nf * 0.693359375f) + (nf * 2.12194440e-4f - x_sub);
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float m = p * (r * r) + r;
    m = x < -120.0f ? -1.0f : m;
    return x > 90.0f ? INFINITY : m;
}

/* 2^k as a float, for k in [-126, 127]. */
DDPC_FASTMATH_ float ddpc_pow2i_f32_(int32_t k) {
    int32_t bits = (k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* y 2^n for n in [-176, 130], beyond a normal float's exponents at both
 * ends: 2^n as two factors that each are normal, so results near overflow
 * stay finite and those below FLT_MIN round once, gradually, to subnormals. */
DDPC_FASTMATH_ float ddpc_ldexp_f32_(float y, int32_t n) {
    int32_t n1 = n >> 1;
    return y * ddpc_pow2i_f32_(n1) * ddpc_pow2i_f32_(n - n1);
}

/* Within 1 ulp of exp(x) (tests/test_math.py); 0 and inf where exp rounds
 * to them, NaN passed on. */
DDPC_FASTMATH_ float ddpc_exp_f32(float x) {
    int32_t n;
    float m = ddpc_exp_reduce_f32_(x, 0.0f, &n);
    return ddpc_ldexp_f32_(m + 1.0f, n);
}

/* expm1 from exp(x) = 2^n (1 + m): 2^n m + (2^n - 1), where 2^n - 1 is
 * exact and the sum cancels at most a factor of about 2.5 (n = 0 gives m
 * itself, relatively accurate for small x); from n = 25 on, exp(x) itself. */
DDPC_FASTMATH_ float ddpc_expm1_from_f32_(float m, int32_t n) {
    int32_t k = n < -25 ? -25 : (n > 25 ? 25 : n);
    float s = ddpc_pow2i_f32_(k);
    float small = s * m + (s - 1.0f);
    return n > 24 ? ddpc_ldexp_f32_(m + 1.0f, n) : small;
}

/* Within 2 ulps of expm1(x) (tests/test_math.py); -1 from -17.4 down, -0
 * kept. */
DDPC_FASTMATH_ float ddpc_expm1_f32(float x) {
    int32_t n;
    float m = ddpc_exp_reduce_f32_(x, 0.0f, &n);
    float y = ddpc_expm1_from_f32_(m, n);
    return x == 0.0f ? x : y;
}

/* tanh(|x|) = -u / (1 + e) with e = exp(-2|x|) and u = expm1(-2|x|) = e - 1
 * up to |x| = 1/2, relatively accurate near 0 (no separate small-argument
 * form); beyond, (1 - e) / (1 + e), which keeps 1 - tanh accurate as tanh
 * nears 1 (the gradients take 1 - tanh^2). Both from one reduction, 2^n one
 * factor (n <= 0; below -126 tanh is 1 anyway), one division; 1 from |x| =
 * 9.1 on, x's sign restored (-0 kept), NaN passed on. Within 2 ulps
 * (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_tanh_f32(float x) {
    float a = fabsf(x);
    int32_t n;
    float m = ddpc_exp_reduce_f32_(-2.0f * a, 0.0f, &n);
    float s = ddpc_pow2i_f32_(n < -126 ? -126 : n);
    float e = s * m + s, u = s * m + (s - 1.0f);
    float t = (a > 0.5f ? 1.0f - e : -u) / (1.0f + e);
    return copysignf(t, x);
}

/* v sigmoid(x) = v / (1 + exp(-x)), for negative x as v exp(x) / (1 + exp(x)),
 * which stays accurate where exp(-x) would overflow; v exp(x) with v taken in
 * before the final power of 2 (v = x: SiLU, whose result is still a normal
 * float where exp(x) is not). sigmoid within 2 ulps, silu 3
 * (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_sigmoid_times_f32(float x, float v) {
    int32_t n;
    float m = ddpc_exp_reduce_f32_(-fabsf(x), 0.0f, &n);
    int32_t n1 = n >> 1; /* ddpc_ldexp_f32_'s two factors, the first applied to both */
    float part = (m + 1.0f) * ddpc_pow2i_f32_(n1), s2 = ddpc_pow2i_f32_(n - n1);
    float e = part * s2, ve = (v * part) * s2;
    ve = x < -120.0f ? v * 0.0f : ve; /* the clamped exp(-120) times a large v is not 0; NaN for -inf */
    return (x < 0 ? ve : v) / (1.0f + e);
}

/* sinh and cosh from one reduction of |x|: e/2 = exp(|x|) / 2 as 2^(n-1) (1 + m),
 * finite up to where cosh overflows; sinh(|x|) = (u + u / (1 + u)) / 2 with u =
 * expm1(|x|), relatively accurate near 0, or e/2 from |x| = 16 on; cosh =
 * e/2 + 1/(2e). Within 2 ulps (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_sinh_cosh_f32(float x, int cosine) {
    float a = fabsf(x);
    int32_t n;
    float m = ddpc_exp_reduce_f32_(a, 0.0f, &n);
    float half_e = ddpc_ldexp_f32_(m + 1.0f, n - 1);
    float u = ddpc_expm1_from_f32_(m, n);
    float sinh = a > 16.0f ? half_e : 0.5f * (u + u / (1.0f + u));
    return cosine ? half_e + 0.25f / half_e : copysignf(sinh, x);
}

/* x^2 = hi + *lo exactly (Dekker's product): x split by its bits into
 * halves of 12 significant bits, whose products are exact, so that fused or
 * not the steps are exact. For |x| below 2^63. */
DDPC_FASTMATH_ float ddpc_square_f32_(float x, float *lo) {
    int32_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits &= (int32_t)0xfffff000;
    float xh;
    memcpy(&xh, &bits, sizeof xh);
    float xl = x - xh, hi = x * x;
    *lo = ((xh * xh - hi) + 2.0f * xh * xl) + xl * xl;
    return hi;
}

/* erfcx(z) = exp(z^2) erfc(z) for z >= 0 as a polynomial in t = 1 / (1 +
 * z/2) (Numerical Recipes' variable for erfc), fitted here to a relative
 * 7e-9 over t in [0.16, 1]: z up to 10.5, beyond which erfc is 0 in float.
 * t's rounding and the polynomial's leave up to 6 ulps in erfc. */
DDPC_FASTMATH_ float ddpc_erfcx_f32_(float z) {
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 2.633182149e-02f;
    p = p * t - 2.017987789e-01f;
    p = p * t + 6.204285007e-01f;
    p = p * t - 9.374425989e-01f;
    p = p * t + 6.575031228e-01f;
    p = p * t - 2.358767581e-01f;
    p = p * t + 2.788809082e-01f;
    p = p * t + 2.250763678e-01f;
    p = p * t + 2.850203919e-01f;
    p = p * t + 2.818694673e-01f;
    return p * t + 7.549043709e-06f;
}

/* exp(-c x^2) = 2^n (1 + m) with x^2 exact in two floats, c a power of 2:
 * x^2 rounded to one float would cost |c x^2| 2^-24 of the result, ~100
 * ulps near underflow. |x| is clamped to 32, where the result is long 0
 * (x^2 stays finite; NaN passes). */
DDPC_FASTMATH_ float ddpc_gauss_reduce_f32_(float x, float c, int32_t *n) {
    float a = fabsf(x);
    float lo, hi = ddpc_square_f32_(a > 32.0f ? 32.0f : a, &lo);
    return ddpc_exp_reduce_f32_(-c * hi, c * lo, n);
}

/* scale exp(-c x^2); scale multiplies in before the final power of 2, so a
 * result below FLT_MIN is rounded once. Within 2 ulps (tests/test_math.py;
 * the normal density, erf's derivative). */
DDPC_FASTMATH_ float ddpc_gauss_f32(float x, float c, float scale) {
    int32_t n;
    float m = ddpc_gauss_reduce_f32_(x, c, &n);
    return ddpc_ldexp_f32_(scale * (m + 1.0f), n);
}

/* scale erfc(|x| / k) = scale erfcx(|x| / k) exp(-c x^2), k = 1 or sqrt 2
 * (c = 1 / k^2): the exp is the Gaussian's, so that where both are taken
 * of the same x (GELU's gradient, Phi + x phi) GCC computes it once. */
DDPC_FASTMATH_ float ddpc_erfc_abs_f32_(float x, float k, float c, float scale) {
    float a = fabsf(x);
    int32_t n;
    float m = ddpc_gauss_reduce_f32_(x, c, &n);
    return ddpc_ldexp_f32_(scale * ddpc_erfcx_f32_((a > 32.0f ? 32.0f : a) * k) * (m + 1.0f), n);
}

/* erf(x) for |x| < 1/2: x P(x^2), the Maclaurin series to x^13 (the next
 * term is below 1e-9 of the value there). */
DDPC_FASTMATH_ float ddpc_erf_series_f32_(float x) {
    float z = x * x;
    float p = 1.205533298e-4f;
    p = p * z - 8.548327023e-4f;
    p = p * z + 5.223977625e-3f;
    p = p * z - 2.686617065e-2f;
    p = p * z + 1.128379167e-1f;
    p = p * z - 3.761263890e-1f;
    return (p * z) * x + 1.128379167f * x;
}

/* erf: the series below |x| = 1/2, else 1 - erfc(|x|) with x's sign.
 * Within 3 ulps (tests/test_math.py); erf(-0) is -0. */
DDPC_FASTMATH_ float ddpc_erf_f32(float x) {
    float a = fabsf(x);
    float tail = 1.0f - ddpc_erfc_abs_f32_(x, 1.0f, 1.0f, 1.0f);
    return copysignf(a < 0.5f ? ddpc_erf_series_f32_(a) : tail, x);
}

/* erfc(x), or 2 - erfc(-x) for negative x. Within 6 ulps (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_erfc_f32(float x) {
    float tail = ddpc_erfc_abs_f32_(x, 1.0f, 1.0f, 1.0f);
    return x < 0 ? 2.0f - tail : tail;
}

/* scale Phi(-|x|) = scale erfc(|x| / sqrt 2) / 2. */
DDPC_FASTMATH_ float ddpc_normal_tail_f32_(float x, float scale) {
    return ddpc_erfc_abs_f32_(x, 0.70710678118654752f, 0.5f, 0.5f * scale);
}

/* The normal distribution function Phi(x), relatively accurate in the left
 * tail too: within 6 ulps (as erfc; through gelu in tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_normal_cdf_f32(float x) {
    float w = ddpc_normal_tail_f32_(x, 1.0f);
    return x < 0 ? w : 1.0f - w;
}

/* GELU's x Phi(x); for negative x the factor x goes in before the final
 * power of 2, so that the left tail is not rounded twice below FLT_MIN
 * (below -20, where the result is -0, as x 0: NaN for -inf, as x Phi(x)).
 * Within 7 ulps (tests/test_math.py), where the old float erfc-based form
 * was 28 ulps off above -5 and 240 in the far tail. */
DDPC_FASTMATH_ float ddpc_gelu_f32(float x) {
    float w = ddpc_normal_tail_f32_(x, x < 0 ? (x < -20.0f ? x * 0.0f : x) : 1.0f);
    return x < 0 ? w : x * (1.0f - w);
}

/* v = m 2^e for a positive normal v, m in [sqrt(1/2), sqrt 2), from the
 * bits: adding 1 - sqrt(1/2) in the mantissa's place carries into the
 * exponent exactly where m would reach sqrt 2 (all integer arithmetic, no
 * select); returns m, *e gets e. */
DDPC_FASTMATH_ float ddpc_log_split_f32_(float v, int32_t *e) {
    int32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits += 0x3f800000 - 0x3f3504f3;
    *e = (bits >> 23) - 127;
    bits = (bits & 0x007fffff) + 0x3f3504f3;
    float m;
    memcpy(&m, &bits, sizeof m);
    return m;
}

/* log(1 + f) + e log 2 for f in [sqrt(1/2) - 1, sqrt 2 - 1]: Cephes' logf
 * minimax polynomial in f, e log 2 added in two parts. */
DDPC_FASTMATH_ float ddpc_log_poly_f32_(float f, float e) {
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
    float y = p * f * z - 2.12194440e-4f * e - 0.5f * z;
    return f + y + 0.693359375f * e;
}

/* log by Cephes' logf: x = m 2^e (subnormals scaled by 2^23 first), log(m)
 * by the polynomial in m - 1; zero, negatives, infinity and NaN by selects.
 * Within 2 ulps (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_log_f32(float x) {
    int tiny = x < 1.17549435e-38f;
    int32_t e;
    float m = ddpc_log_split_f32_(x * (tiny ? 8388608.0f : 1.0f), &e);
    float y = ddpc_log_poly_f32_(m - 1.0f, (float)e - (tiny ? 23.0f : 0.0f));
    y = x == INFINITY ? INFINITY : y;
    y = x == 0 ? -INFINITY : y;
    return x < 0 || x != x ? NAN : y;
}

/* log1p: 1 + x = m 2^e, and m - 1 = ((1 - 2^e) + x) 2^-e with 1 - 2^e exact,
 * so one rounding and no loss to the sum 1 + x (from 2^e = 2^25 on, m - 1
 * from the bits: x's last bits no longer count). -1 gives -inf, below -1
 * NaN; -0 kept. Within 2 ulps (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_log1p_f32(float x) {
    int32_t e;
    float m = ddpc_log_split_f32_(1.0f + x, &e);
    int32_t k = e < -24 ? -24 : (e > 24 ? 24 : e);
    float f = ((1.0f - ddpc_pow2i_f32_(k)) + x) * ddpc_pow2i_f32_(-k);
    float y = ddpc_log_poly_f32_(e > 24 ? m - 1.0f : f, (float)e);
    y = x == INFINITY ? INFINITY : y;
    y = x == -1.0f ? -INFINITY : y;
    y = x == 0 ? x : y;
    return x < -1.0f || x != x ? NAN : y;
}

/* asinh(|x|) = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), from |x| = 2^12 on
 * log1p(|x| - 1) + log 2 (no overflow; 1/x^2 is below float precision
 * there); x's sign restored. Within 2 ulps (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_asinh_f32(float x) {
    float a = fabsf(x);
    int big = a >= 4096.0f;
    float z = big ? 0.0f : a * a;
    float y = ddpc_log1p_f32(big ? a - 1.0f : a + z / (1.0f + sqrtf(1.0f + z)));
    return copysignf(big ? y + 0.693147180559945309f : y, x);
}

/* acosh(x) = log1p((x - 1) + sqrt((x - 1)(x + 1))), x - 1 exact near 1;
 * from x = 2^12 on log1p(x - 1) + log 2. NaN below 1. Within 2 ulps
 * (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_acosh_f32(float x) {
    int big = x >= 4096.0f;
    float d = x - 1.0f;
    float y = ddpc_log1p_f32(big ? d : d + sqrtf(big ? 0.0f : d * (x + 1.0f)));
    y = big ? y + 0.693147180559945309f : y;
    return x < 1.0f ? NAN : y;
}

/* atanh(x) = log1p(2|x| / (1 - |x|)) / 2 with x's sign: +-inf at +-1, NaN
 * beyond. Within 2 ulps (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_atanh_f32(float x) {
    float a = fabsf(x);
    return copysignf(0.5f * ddpc_log1p_f32((a + a) / (1.0f - a)), x);
}

/* asin (cosine = 0) or acos (1) by Cephes' asinf: |x| above 1/2 through
 * asin(|x|) = pi/2 - 2 asin(sqrt((1 - |x|) / 2)), so the polynomial's
 * argument s stays in [0, 1/2]; acos(x) = pi/2 - asin(x) below 1/2, else 2
 * asin(s) or pi less it. NaN beyond 1. Within 2 ulps (tests/test_math.py). */
DDPC_FASTMATH_ float ddpc_asin_acos_f32(float x, int cosine) {
    float a = fabsf(x);
    int big = a > 0.5f;
    float z = big ? 0.5f * (1.0f - a) : a * a;
    float s = big ? sqrtf(z) : a;
    float p = 4.2163199048e-2f;
    p = p * z + 2.4181311049e-2f;
    p = p * z + 4.5470025998e-2f;
    p = p * z + 7.4953002686e-2f;
    p = p * z + 1.6666752422e-1f;
    p = p * z * s + s; /* asin(s) */
    if (cosine) {
        float twice = p + p;
        return big ? (x > 0 ? twice : 3.14159265358979324f - twice) : 1.57079632679489662f - copysignf(p, x);
    }
    return copysignf(big ? 1.57079632679489662f - (p + p) : p, x);
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
DDPC_FASTMATH_ float ddpc_trig_reduce_f32_(float x, float *q) {
    float a = fabsf(x);
    float ac = a <= DDPC_TRIG_F32_LIMIT ? a : 0.0f;
    float qf = floorf(ac * 0.636619772367581343f + 0.5f);
    double qd = qf;
    *q = qf;
    return (float)(((double)ac - qd * 1.5707963267341256) - qd * 6.077100506506192e-11);
}

/* Cephes' sinf and cosf polynomials, for |r| <= pi/4. */
DDPC_FASTMATH_ float ddpc_sin_poly_f32_(float r) {
    float z = r * r;
    return ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
}

DDPC_FASTMATH_ float ddpc_cos_poly_f32_(float r) {
    float z = r * r;
    return ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z - 0.5f * z +
           1.0f;
}

DDPC_FASTMATH_ float ddpc_sincos_f32(float x, int cosine) {
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
DDPC_FASTMATH_ float ddpc_tan_f32(float x) {
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
DDPC_FASTMATH_ float ddpc_atan_f32(float x) {
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
 * whether an element lies beyond the polynomial's range. */
DDPC_FASTMATH_ int ddpc_trig_block_f32_(float *restrict out, const float *restrict a, int64_t m, int kind) {
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
DDPC_FASTMATH_ void ddpc_trig_rows_f32(float *o, const float *a, int64_t n, int kind) {
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

/* Elementwise functions of T's precision, T being float or double (sizeof
 * is a constant, so one branch remains): this file's for float, libm's for
 * double. */
#define DDPC_F32_OR_LIBM_(T, f32, f64, x) (sizeof(T) == 4 ? (T)f32((float)(x)) : (T)f64((double)(x)))
#define EXP_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_exp_f32, exp, x)
#define EXPM1_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_expm1_f32, expm1, x)
#define LOG_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_log_f32, log, x)
#define LOG1P_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_log1p_f32, log1p, x)
#define TANH_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_tanh_f32, tanh, x)
#define ATAN_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_atan_f32, atan, x)
#define ASINH_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_asinh_f32, asinh, x)
#define ACOSH_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_acosh_f32, acosh, x)
#define ATANH_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_atanh_f32, atanh, x)
#define ERF_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_erf_f32, erf, x)
#define ERFC_T(T, x) DDPC_F32_OR_LIBM_(T, ddpc_erfc_f32, erfc, x)
#define SINH_T(T, x) (sizeof(T) == 4 ? (T)ddpc_sinh_cosh_f32((float)(x), 0) : (T)sinh((double)(x)))
#define COSH_T(T, x) (sizeof(T) == 4 ? (T)ddpc_sinh_cosh_f32((float)(x), 1) : (T)cosh((double)(x)))
#define ASIN_T(T, x) (sizeof(T) == 4 ? (T)ddpc_asin_acos_f32((float)(x), 0) : (T)asin((double)(x)))
#define ACOS_T(T, x) (sizeof(T) == 4 ? (T)ddpc_asin_acos_f32((float)(x), 1) : (T)acos((double)(x)))
/* v sigmoid(x), v / (1 + exp(-x)) */
#define SIGMOID_TIMES_T(T, x, v)                                                                                    \
    (sizeof(T) == 4 ? (T)ddpc_sigmoid_times_f32((float)(x), (float)(v)) : (T)((v) / (1 + exp(-(double)(x)))))
#define SIGMOID_T(T, x) SIGMOID_TIMES_T(T, x, 1)
/* scale exp(-c x^2) */
#define GAUSS_T(T, x, c, scale)                                                                                     \
    (sizeof(T) == 4 ? (T)ddpc_gauss_f32((float)(x), (float)(c), (float)(scale))                                     \
                    : (T)((scale) * exp(-(c) * (double)(x) * (double)(x))))

#endif
