/* nn op entry points (see ops_nn.h): argument checks, then host loops or the
 * launchers of kernels/nn.cu and kernels/loss.cu.
 *
 * Host loops are written once over an element type T (float or double):
 * float goes through the vectorisable functions of fastmath.h, double through
 * <tgmath.h>'s libm calls. Row reductions of the losses accumulate in double. */
#include "ops_nn.h"
#include "parallel.h"

#include <limits.h>
#include <tgmath.h>

#include "bessel.h"
#include "fastmath.h"
#include "gemm.h"
#include "kernels.h"
#include "module.h"
#include "special_binary.h"
#include "special_functions.h"

/* ---- argument checks ------------------------------------------------------------ */

static ddpc_status check_writable_(const ddpc_buffer *out, const char *op) {
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    return DDPC_OK;
}

static ddpc_status check_out_(const ddpc_buffer *out, const char *op) {
    CHECK(check_writable_(out, op));
    if (out->dtype != DDPC_FLOAT32 && out->dtype != DDPC_FLOAT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: needs float32 or float64, got %s", op, ddpc_dtype_name(out->dtype));
    return DDPC_OK;
}

/* `b` must match `ref` in dtype and device, and in element count unless numel < 0. */
static ddpc_status check_like_(const ddpc_buffer *ref, const ddpc_buffer *b, int64_t numel, const char *op,
                               const char *what) {
    if (b->dtype != ref->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: %s is %s, expected %s", op, what, ddpc_dtype_name(b->dtype),
                          ddpc_dtype_name(ref->dtype));
    if (b->device != ref->device) return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s is on another device", op, what);
    if (numel >= 0 && b->numel != numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s has %lld elements, expected %lld", op, what, (long long)b->numel,
                          (long long)numel);
    return DDPC_OK;
}

/* ---- activations ------------------------------------------------------------------ */

#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794
#define INV_SQRT_PI 0.56418958354775628695
#define LN2 0.69314718055994530942
#define LN10 2.30258509299404568402

#define CDF_T(T, x) (sizeof(T) == 4 ? (T)ddpc_normal_cdf_f32((float)(x)) : (T)(0.5 * erfc(-(double)(x) * INV_SQRT2)))
#define GELU_T(T, x) (sizeof(T) == 4 ? (T)ddpc_gelu_f32((float)(x)) : (x) * CDF_T(T, x))
#define RELU6_T(T, v) ((v) < 0 ? (T)0 : ((v) > 6 ? (T)6 : (v)))
/* log(1 + exp(z)) as max(z, 0) + log1p(exp(-|z|)), which neither overflows nor loses the small values. */
#define SOFTPLUS_T(T, z) (((z) > 0 ? (z) : (T)0) + LOG1P_T(T, EXP_T(T, -fabs(z))))

/* POLYGAMMA's order p is a whole number from 1 up that fits an int (past 170 the result is infinite anyway). */
static ddpc_status check_unary_(ddpc_unary_op op, double p) {
    if ((unsigned)op >= DDPC_NUNARY) return DDPC_ERROR(DDPC_ERR_ARG, "unknown unary op %d", (int)op);
    if (op == DDPC_POLYGAMMA && !(p >= 1 && p < INT_MAX && p == floor(p)))
        return DDPC_ERROR(DDPC_ERR_ARG, "polygamma: the order must be a whole number >= 1, got %g", p);
    return DDPC_OK;
}

/* An elementwise op's host work: elements [lo, hi) of `out` from those of
 * `in` (and `saved`, for a backward op), parted across cores by
 * ddpc_parallel_for. */
typedef struct {
    ddpc_unary_op op;
    int dtype;
    void *out;
    const void *in, *saved;
    double p, q;
} unary_job_;

/* Elements per thread below which a thread start (tens of microseconds)
 * costs more than it saves, by an element's cost: tens of nanoseconds for
 * a libm or special_functions.h call (float64, and float32 where
 * fastmath.h has no form); 0.4 to 1 ns for fastmath.h's vectorised float32
 * functions (tanh, gelu: 2 threads gained from about 2^19 elements on); and
 * the memory's pace for arithmetic on the input or the saved tensor, and
 * float32 exp, where one core keeps up with memory: those run split only
 * over very many elements. */
#define UNARY_GRAIN (1 << 15)
#define UNARY_VECTOR_GRAIN (1 << 18)
#define UNARY_CHEAP_GRAIN (1 << 22)

static int64_t unary_grain_(ddpc_unary_op op, int dtype, int backward) {
    switch (op) {
    case DDPC_RELU: case DDPC_LEAKY_RELU: case DDPC_HARDTANH: case DDPC_HARDSWISH: case DDPC_HARDSIGMOID:
    case DDPC_ABS: case DDPC_SQRT: case DDPC_RSQRT: case DDPC_SQUARE: case DDPC_RECIPROCAL: case DDPC_SIGN:
    case DDPC_FLOOR: case DDPC_CEIL: case DDPC_TRUNC: case DDPC_ROUND: case DDPC_CLAMP: case DDPC_ISNAN:
    case DDPC_ISINF: case DDPC_ISFINITE:
        return UNARY_CHEAP_GRAIN;
    case DDPC_TANH: case DDPC_SIGMOID: case DDPC_EXP: case DDPC_LOG: case DDPC_LOG1P: case DDPC_EXPM1:
    case DDPC_LOG2: case DDPC_LOG10: case DDPC_EXP2: case DDPC_ASINH: case DDPC_ATAN: case DDPC_ATANH:
    case DDPC_TAN: case DDPC_ASIN: case DDPC_ACOS: case DDPC_ACOSH:
        if (backward) return UNARY_CHEAP_GRAIN; /* arithmetic on the saved tensor */
        break;
    default: break;
    }
    if (dtype != DDPC_FLOAT32) return UNARY_GRAIN;
    switch (op) {
    case DDPC_EXP: return UNARY_CHEAP_GRAIN;
    case DDPC_TANH: case DDPC_SIGMOID: case DDPC_LOG: case DDPC_LOG1P: case DDPC_EXPM1: case DDPC_ASINH:
    case DDPC_ATAN: case DDPC_ATANH: case DDPC_TAN: case DDPC_ASIN: case DDPC_ACOS: case DDPC_ACOSH: case DDPC_SIN:
    case DDPC_COS: case DDPC_SINH: case DDPC_COSH: case DDPC_ERF: case DDPC_ERFC: case DDPC_GELU: case DDPC_SILU:
    case DDPC_ELU: case DDPC_SOFTPLUS: case DDPC_MISH:
        return UNARY_VECTOR_GRAIN;
    default: return UNARY_GRAIN;
    }
}

static DDPC_ROW_TARGETS void unary_range_(void *ctx, int64_t lo, int64_t hi) {
    const unary_job_ *j = ctx;
    const ddpc_unary_op op = j->op;
    const double p = j->p;
    const int64_t n = hi - lo;
    DDPC_FLOAT_TYPES(j->dtype, {
        T *o = (T *)j->out + lo;
        const T *a = (const T *)j->in + lo;
        const T pt = (T)p, qt = (T)j->q;
        /* The comparisons are written so that NaN passes through, as in PyTorch. */
        switch (op) {
        case DDPC_RELU: for (int64_t i = 0; i < n; i++) o[i] = a[i] <= 0 ? (T)0 : a[i]; break;
        case DDPC_GELU:
            for (int64_t i = 0; i < n; i++) o[i] = GELU_T(T, a[i]);
            break;
        case DDPC_TANH: for (int64_t i = 0; i < n; i++) o[i] = TANH_T(T, a[i]); break;
        case DDPC_SIGMOID: for (int64_t i = 0; i < n; i++) o[i] = SIGMOID_T(T, a[i]); break;
        case DDPC_EXP: for (int64_t i = 0; i < n; i++) o[i] = EXP_T(T, a[i]); break;
        case DDPC_LOG: for (int64_t i = 0; i < n; i++) o[i] = LOG_T(T, a[i]); break;
        case DDPC_POW: /* DDPC_POW_NUMBER's products in loops of their own, which vectorise */
            if (pt == (T)2) for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i];
            else if (pt == (T)3) for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i] * a[i];
            else if (pt == (T)-1) for (int64_t i = 0; i < n; i++) o[i] = (T)1 / a[i];
            else if (pt == (T)0.5) for (int64_t i = 0; i < n; i++) o[i] = (T)sqrt(a[i]);
            else for (int64_t i = 0; i < n; i++) o[i] = DDPC_POW_NUMBER(T, a[i], pt);
            break;
        case DDPC_LEAKY_RELU: for (int64_t i = 0; i < n; i++) o[i] = a[i] > 0 ? a[i] : a[i] * pt; break;
        case DDPC_ELU: for (int64_t i = 0; i < n; i++) o[i] = a[i] <= 0 ? EXPM1_T(T, a[i]) * pt : a[i]; break;
        case DDPC_SILU: for (int64_t i = 0; i < n; i++) o[i] = SIGMOID_TIMES_T(T, a[i], a[i]); break;
        case DDPC_SOFTPLUS:
            for (int64_t i = 0; i < n; i++) {
                T z = a[i] * pt;
                o[i] = z > qt ? a[i] : SOFTPLUS_T(T, z) / pt;
            }
            break;
        case DDPC_MISH: for (int64_t i = 0; i < n; i++) o[i] = a[i] * TANH_T(T, SOFTPLUS_T(T, a[i])); break;
        case DDPC_HARDTANH: for (int64_t i = 0; i < n; i++) o[i] = a[i] < pt ? pt : (a[i] > qt ? qt : a[i]); break;
        case DDPC_HARDSWISH: for (int64_t i = 0; i < n; i++) o[i] = a[i] * RELU6_T(T, a[i] + 3) / 6; break;
        case DDPC_HARDSIGMOID: for (int64_t i = 0; i < n; i++) o[i] = RELU6_T(T, a[i] + 3) / 6; break;
        case DDPC_ABS: for (int64_t i = 0; i < n; i++) o[i] = fabs(a[i]); break;
        case DDPC_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrt(a[i]); break;
        case DDPC_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = (T)1 / sqrt(a[i]); break;
        case DDPC_SQUARE: for (int64_t i = 0; i < n; i++) o[i] = a[i] * a[i]; break;
        case DDPC_SIN:
        case DDPC_COS:
            if (sizeof(T) == 4)
                ddpc_trig_rows_f32((float *)o, (const float *)a, n, op == DDPC_COS);
            else
                for (int64_t i = 0; i < n; i++) o[i] = op == DDPC_COS ? cos(a[i]) : sin(a[i]);
            break;
        case DDPC_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = LOG1P_T(T, a[i]); break;
        case DDPC_EXPM1: for (int64_t i = 0; i < n; i++) o[i] = EXPM1_T(T, a[i]); break;
        case DDPC_ERF: for (int64_t i = 0; i < n; i++) o[i] = ERF_T(T, a[i]); break;
        case DDPC_RECIPROCAL: for (int64_t i = 0; i < n; i++) o[i] = (T)1 / a[i]; break;
        case DDPC_SIGN: for (int64_t i = 0; i < n; i++) o[i] = (T)((a[i] > 0) - (a[i] < 0)); break;
        case DDPC_FLOOR: for (int64_t i = 0; i < n; i++) o[i] = floor(a[i]); break;
        case DDPC_CEIL: for (int64_t i = 0; i < n; i++) o[i] = ceil(a[i]); break;
        case DDPC_TRUNC: for (int64_t i = 0; i < n; i++) o[i] = trunc(a[i]); break;
        case DDPC_ROUND: {
            /* Half to even (rint in the default rounding mode); with decimals,
             * PyTorch's x * 10^d rounded, then divided back. */
            const T scale = (T)pow(10.0, fabs(p));
            if (p >= 0)
                for (int64_t i = 0; i < n; i++) o[i] = rint(a[i] * scale) / scale;
            else
                for (int64_t i = 0; i < n; i++) o[i] = rint(a[i] / scale) * scale;
        } break;
        case DDPC_CLAMP:
            for (int64_t i = 0; i < n; i++) {
                T v = a[i] < pt ? pt : a[i];
                o[i] = v > qt ? qt : v;
            }
            break;
        case DDPC_ISNAN: for (int64_t i = 0; i < n; i++) o[i] = (T)(isnan(a[i]) != 0); break;
        case DDPC_ISINF: for (int64_t i = 0; i < n; i++) o[i] = (T)(isinf(a[i]) != 0); break;
        case DDPC_ISFINITE: for (int64_t i = 0; i < n; i++) o[i] = (T)(isfinite(a[i]) != 0); break;
        case DDPC_LOG2: for (int64_t i = 0; i < n; i++) o[i] = log2(a[i]); break;
        case DDPC_LOG10: for (int64_t i = 0; i < n; i++) o[i] = log10(a[i]); break;
        case DDPC_EXP2: for (int64_t i = 0; i < n; i++) o[i] = exp2(a[i]); break;
        case DDPC_SINH: for (int64_t i = 0; i < n; i++) o[i] = SINH_T(T, a[i]); break;
        case DDPC_COSH: for (int64_t i = 0; i < n; i++) o[i] = COSH_T(T, a[i]); break;
        case DDPC_ASINH: for (int64_t i = 0; i < n; i++) o[i] = ASINH_T(T, a[i]); break;
        case DDPC_ATAN: for (int64_t i = 0; i < n; i++) o[i] = ATAN_T(T, a[i]); break;
        case DDPC_TAN:
            if (sizeof(T) == 4)
                ddpc_trig_rows_f32((float *)o, (const float *)a, n, 2);
            else
                for (int64_t i = 0; i < n; i++) o[i] = tan(a[i]);
            break;
        case DDPC_ASIN: for (int64_t i = 0; i < n; i++) o[i] = ASIN_T(T, a[i]); break;
        case DDPC_ACOS: for (int64_t i = 0; i < n; i++) o[i] = ACOS_T(T, a[i]); break;
        case DDPC_ACOSH: for (int64_t i = 0; i < n; i++) o[i] = ACOSH_T(T, a[i]); break;
        case DDPC_ATANH: for (int64_t i = 0; i < n; i++) o[i] = ATANH_T(T, a[i]); break;
        case DDPC_ERFC: for (int64_t i = 0; i < n; i++) o[i] = ERFC_T(T, a[i]); break;
        case DDPC_LGAMMA: for (int64_t i = 0; i < n; i++) o[i] = lgamma(a[i]); break;
        /* special_functions.h's, in double, rounded once for float32 */
        case DDPC_ERFINV: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_erfinv((double)a[i]); break;
        case DDPC_NDTRI: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_ndtri((double)a[i]); break;
        case DDPC_ERFCX: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_erfcx((double)a[i]); break;
        case DDPC_DIGAMMA: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_digamma((double)a[i]); break;
        case DDPC_POLYGAMMA: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_polygamma((int)p, (double)a[i]); break;
        case DDPC_I0: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_i0((double)a[i]); break;
        case DDPC_I0E: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_i0e((double)a[i]); break;
        case DDPC_I1: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_i1((double)a[i]); break;
        case DDPC_I1E: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_i1e((double)a[i]); break;
        case DDPC_BESSEL_J0: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_bessel_j0((double)a[i]); break;
        case DDPC_BESSEL_J1: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_bessel_j1((double)a[i]); break;
        case DDPC_BESSEL_Y0: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_bessel_y0((double)a[i]); break;
        case DDPC_BESSEL_Y1: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_bessel_y1((double)a[i]); break;
        case DDPC_BESSEL_K0: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_bessel_k0((double)a[i]); break;
        case DDPC_BESSEL_K1: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_bessel_k1((double)a[i]); break;
        case DDPC_BESSEL_K0E: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_bessel_k0e((double)a[i]); break;
        case DDPC_BESSEL_K1E: for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_bessel_k1e((double)a[i]); break;
        case DDPC_SPHERICAL_BESSEL_J0:
            for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_spherical_bessel_j0((double)a[i]);
            break;
        default: /* AIRY_AI */
            for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_airy_ai((double)a[i]);
            break;
        }
    });
}

ddpc_status ddpc_op_unary(ddpc_unary_op op, ddpc_buffer *out, const ddpc_buffer *x, double p, double q) {
    CHECK(check_unary_(op, p));
    CHECK(check_out_(out, "unary op"));
    CHECK(check_like_(out, x, out->numel, "unary op", "the input"));
    int64_t n = out->numel;
    if (n == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_unary(op, out->data, x->data, p, q, out->dtype, n, stream));
    unary_job_ job = {.op = op, .dtype = out->dtype, .out = out->data, .in = x->data, .p = p, .q = q};
    ddpc_parallel_for(n, unary_grain_(op, out->dtype, 0), unary_range_, &job);
    return DDPC_OK;
}

static DDPC_ROW_TARGETS void unary_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const unary_job_ *j = ctx;
    const ddpc_unary_op op = j->op;
    const double p = j->p;
    const int64_t n = hi - lo;
    DDPC_FLOAT_TYPES(j->dtype, {
        T *o = (T *)j->out + lo;
        const T *g = (const T *)j->in + lo, *s = (const T *)j->saved + lo;
        const T pt = (T)p, qt = (T)j->q;
        /* At a kink the derivative is the one PyTorch takes; a NaN input passes g on where PyTorch's does. */
        switch (op) {
        case DDPC_RELU: /* both loads unconditional, so the select vectorises */
            for (int64_t i = 0; i < n; i++) {
                T gi = g[i];
                o[i] = s[i] <= 0 ? (T)0 : gi;
            }
            break;
        case DDPC_GELU:
            for (int64_t i = 0; i < n; i++) {
                T cdf = CDF_T(T, s[i]), pdf = GAUSS_T(T, s[i], 0.5, INV_SQRT_2PI);
                o[i] = g[i] * (cdf + s[i] * pdf);
            }
            break;
        case DDPC_TANH: for (int64_t i = 0; i < n; i++) o[i] = g[i] * ((T)1 - s[i] * s[i]); break;
        case DDPC_SIGMOID: for (int64_t i = 0; i < n; i++) o[i] = g[i] * s[i] * ((T)1 - s[i]); break;
        case DDPC_EXP: for (int64_t i = 0; i < n; i++) o[i] = g[i] * s[i]; break;
        case DDPC_LOG: for (int64_t i = 0; i < n; i++) o[i] = g[i] / s[i]; break;
        case DDPC_POW:
            if (pt == (T)2) for (int64_t i = 0; i < n; i++) o[i] = g[i] * pt * s[i];
            else for (int64_t i = 0; i < n; i++) o[i] = pt == 0 ? (T)0 : g[i] * pt * DDPC_POW_NUMBER(T, s[i], pt - (T)1);
            break;
        case DDPC_LEAKY_RELU: for (int64_t i = 0; i < n; i++) o[i] = s[i] > 0 ? g[i] : g[i] * pt; break;
        case DDPC_ELU: for (int64_t i = 0; i < n; i++) o[i] = s[i] <= 0 ? g[i] * pt * EXP_T(T, s[i]) : g[i]; break;
        case DDPC_SILU:
            for (int64_t i = 0; i < n; i++) {
                T sg = SIGMOID_T(T, s[i]);
                o[i] = g[i] * sg * ((T)1 + s[i] * ((T)1 - sg));
            }
            break;
        case DDPC_SOFTPLUS:
            for (int64_t i = 0; i < n; i++) {
                T z = s[i] * pt;
                o[i] = z > qt ? g[i] : g[i] * SIGMOID_T(T, z);
            }
            break;
        case DDPC_MISH:
            for (int64_t i = 0; i < n; i++) {
                T t = TANH_T(T, SOFTPLUS_T(T, s[i])), sg = SIGMOID_T(T, s[i]);
                o[i] = g[i] * (t + s[i] * sg * ((T)1 - t * t));
            }
            break;
        case DDPC_HARDTANH: for (int64_t i = 0; i < n; i++) o[i] = s[i] <= pt || s[i] >= qt ? (T)0 : g[i]; break;
        case DDPC_HARDSWISH:
            for (int64_t i = 0; i < n; i++) o[i] = s[i] <= -3 ? (T)0 : (s[i] < 3 ? g[i] * (s[i] / 3 + (T)0.5) : g[i]);
            break;
        case DDPC_HARDSIGMOID: for (int64_t i = 0; i < n; i++) o[i] = s[i] > -3 && s[i] < 3 ? g[i] / 6 : (T)0; break;
        case DDPC_ABS: for (int64_t i = 0; i < n; i++) o[i] = s[i] > 0 ? g[i] : (s[i] < 0 ? -g[i] : (T)0); break;
        case DDPC_SQRT: for (int64_t i = 0; i < n; i++) o[i] = g[i] / (2 * s[i]); break;
        case DDPC_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = (T)-0.5 * g[i] * s[i] * s[i] * s[i]; break;
        case DDPC_SQUARE: for (int64_t i = 0; i < n; i++) o[i] = 2 * g[i] * s[i]; break;
        case DDPC_SIN:
        case DDPC_COS:
            if (sizeof(T) == 4) { /* sin' = cos and cos' = -sin, a block at a time through the float32 form */
                float d[256];
                for (int64_t i0 = 0; i0 < n; i0 += 256) {
                    int64_t m = n - i0 < 256 ? n - i0 : 256;
                    ddpc_trig_rows_f32(d, (const float *)s + i0, m, op == DDPC_SIN);
                    for (int64_t k = 0; k < m; k++) o[i0 + k] = (op == DDPC_SIN ? g[i0 + k] : -g[i0 + k]) * (T)d[k];
                }
            } else {
                for (int64_t i = 0; i < n; i++) o[i] = op == DDPC_SIN ? g[i] * cos(s[i]) : -g[i] * sin(s[i]);
            }
            break;
        case DDPC_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1 + s[i]); break;
        case DDPC_EXPM1: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (s[i] + 1); break;
        case DDPC_ERF:
            for (int64_t i = 0; i < n; i++) o[i] = g[i] * GAUSS_T(T, s[i], 1.0, 2 * INV_SQRT_PI);
            break;
        case DDPC_RECIPROCAL: for (int64_t i = 0; i < n; i++) o[i] = -g[i] * s[i] * s[i]; break;
        case DDPC_CLAMP: for (int64_t i = 0; i < n; i++) o[i] = s[i] > pt && s[i] < qt ? g[i] : (T)0; break;
        case DDPC_LOG2: for (int64_t i = 0; i < n; i++) o[i] = g[i] / (s[i] * (T)LN2); break;
        case DDPC_LOG10: for (int64_t i = 0; i < n; i++) o[i] = g[i] / (s[i] * (T)LN10); break;
        case DDPC_EXP2: for (int64_t i = 0; i < n; i++) o[i] = g[i] * s[i] * (T)LN2; break;
        case DDPC_SINH: for (int64_t i = 0; i < n; i++) o[i] = g[i] * COSH_T(T, s[i]); break;
        case DDPC_COSH: for (int64_t i = 0; i < n; i++) o[i] = g[i] * SINH_T(T, s[i]); break;
        case DDPC_ASINH: for (int64_t i = 0; i < n; i++) o[i] = g[i] / sqrt(s[i] * s[i] + 1); break;
        case DDPC_ATAN: for (int64_t i = 0; i < n; i++) o[i] = g[i] / (s[i] * s[i] + 1); break;
        case DDPC_TAN: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (s[i] * s[i] + 1); break;
        case DDPC_ASIN: for (int64_t i = 0; i < n; i++) o[i] = g[i] / sqrt(1 - s[i] * s[i]); break;
        case DDPC_ACOS: for (int64_t i = 0; i < n; i++) o[i] = -g[i] / sqrt(1 - s[i] * s[i]); break;
        case DDPC_ACOSH: for (int64_t i = 0; i < n; i++) o[i] = g[i] / sqrt(s[i] * s[i] - 1); break;
        case DDPC_ATANH: for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1 - s[i] * s[i]); break;
        case DDPC_ERFC:
            for (int64_t i = 0; i < n; i++) o[i] = -g[i] * GAUSS_T(T, s[i], 1.0, 2 * INV_SQRT_PI);
            break;
        case DDPC_LGAMMA: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_digamma((double)s[i]); break;
        case DDPC_ERFINV:
            for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)(0.5 / INV_SQRT_PI) * EXP_T(T, s[i] * s[i]);
            break;
        case DDPC_NDTRI:
            for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)(1 / INV_SQRT_2PI) * EXP_T(T, s[i] * s[i] / 2);
            break;
        case DDPC_ERFCX: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_erfcx_derivative((double)s[i]); break;
        case DDPC_DIGAMMA: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_polygamma(1, (double)s[i]); break;
        case DDPC_POLYGAMMA:
            for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_polygamma((int)p + 1, (double)s[i]);
            break;
        case DDPC_I0: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_i1((double)s[i]); break;
        case DDPC_I0E: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_i0e_derivative((double)s[i]); break;
        case DDPC_I1: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_i1_derivative((double)s[i]); break;
        case DDPC_I1E: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_i1e_derivative((double)s[i]); break;
        case DDPC_BESSEL_J0: for (int64_t i = 0; i < n; i++) o[i] = -g[i] * (T)ddpc_bessel_j1((double)s[i]); break;
        case DDPC_BESSEL_J1:
            for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_bessel_j1_derivative((double)s[i]);
            break;
        case DDPC_BESSEL_Y0: for (int64_t i = 0; i < n; i++) o[i] = -g[i] * (T)ddpc_bessel_y1((double)s[i]); break;
        case DDPC_BESSEL_Y1:
            for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_bessel_y1_derivative((double)s[i]);
            break;
        case DDPC_BESSEL_K0: for (int64_t i = 0; i < n; i++) o[i] = -g[i] * (T)ddpc_bessel_k1((double)s[i]); break;
        case DDPC_BESSEL_K1:
            for (int64_t i = 0; i < n; i++) o[i] = g[i] * (T)ddpc_bessel_k1_derivative((double)s[i]);
            break;
        default: /* piecewise constant: SIGN, FLOOR, CEIL, TRUNC, ROUND and the predicates (and the
                  * Bessel functions without a gradient in PyTorch, which record none) */
            for (int64_t i = 0; i < n; i++) o[i] = 0;
            break;
        }
    });
}

ddpc_status ddpc_op_unary_backward(ddpc_unary_op op, ddpc_buffer *gx, const ddpc_buffer *gy, const ddpc_buffer *saved,
                                   double p, double q) {
    CHECK(check_unary_(op, p));
    CHECK(check_out_(gx, "unary backward"));
    CHECK(check_like_(gx, gy, gx->numel, "unary backward", "the output gradient"));
    CHECK(check_like_(gx, saved, gx->numel, "unary backward", "the saved tensor"));
    int64_t n = gx->numel;
    if (n == 0) return DDPC_OK;
    if (gx->device != DDPC_CPU)
        DDPC_LAUNCH(gx->device, ddpc_k_unary_backward(op, gx->data, gy->data, saved->data, p, q, gx->dtype, n, stream));
    unary_job_ job = {.op = op, .dtype = gx->dtype, .out = gx->data, .in = gy->data, .saved = saved->data, .p = p,
                      .q = q};
    ddpc_parallel_for(n, unary_grain_(op, gx->dtype, 1), unary_backward_range_, &job);
    return DDPC_OK;
}

/* ---- broadcasting, reductions, layout --------------------------------------------- */

static int is_int_(ddpc_dtype dt) { return dt == DDPC_INT32 || dt == DDPC_INT64 || dt == DDPC_UINT8; }

#define ROWS_LOOP(T)                                                               \
    do {                                                                           \
        for (int64_t r = 0; r < rows; r++) {                                       \
            T *o = (T *)out->data + r * n;                                         \
            const T *x = (const T *)a->data + r * n, *b = row->data;               \
            DDPC_BINARY_LOOPS(op, n, o[k_], x[k_], b[k_]);                         \
        }                                                                          \
    } while (0)

/* The broadcasting ops take floats and integers (a bias-like row added to an
 * integer tensor), but not integer division: Python divides integers in
 * float32, and a zero divisor would trap. */
static ddpc_status check_broadcast_(ddpc_binary_op op, const ddpc_buffer *out, const char *what) {
    CHECK(ddpc_check_binary_op(op, out->dtype, what));
    if (!is_int_(out->dtype)) return check_out_(out, what);
    if (op == DDPC_DIV || op == DDPC_RDIV)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: no integer division; cast to a float dtype", what);
    return check_writable_(out, what);
}

ddpc_status ddpc_op_binary_rows(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *row) {
    if (out->dtype == DDPC_BOOL) {
        ddpc_buffer o = ddpc_bool_bytes(out), x = ddpc_bool_bytes(a), r = ddpc_bool_bytes(row);
        return ddpc_bool_result(out, ddpc_op_binary_rows(op, &o, &x, &r));
    }
    CHECK(check_broadcast_(op, out, "row broadcast"));
    CHECK(check_like_(out, a, out->numel, "row broadcast", "the input"));
    CHECK(check_like_(out, row, -1, "row broadcast", "the row"));
    int64_t n = row->numel, total = out->numel;
    if (n == 0 ? total != 0 : total % n != 0)
        return DDPC_ERROR(DDPC_ERR_ARG, "row broadcast: %lld elements are not whole rows of %lld", (long long)total,
                          (long long)n);
    if (total == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_binary_rows(op, out->data, a->data, row->data, out->dtype, total, n, stream));
    int64_t rows = total / n;
    if (n == 1) { /* one value for every element: the scalar loop, not a loop per element */
        double v = 0;
        DDPC_REAL_TYPES(out->dtype, v = (double)*(const T *)row->data);
        if (ddpc_dtype_is_float(out->dtype) || fabs(v) <= 9007199254740992.0) return ddpc_op_scalar(op, out, a, v);
    }
    DDPC_REAL_TYPES(out->dtype, ROWS_LOOP(T));
    return DDPC_OK;
}

/* a's strides over out's dims: 0 where a is broadcast (a dim of 1, or none). */
static ddpc_status bcast_strides_(const ddpc_buffer *out, const ddpc_buffer *a, int64_t *st, const char *what) {
    int lead = out->ndim - a->ndim;
    if (lead < 0) return DDPC_ERROR(DDPC_ERR_ARG, "broadcast: %s has more dims than the result", what);
    int64_t stride = 1;
    for (int d = out->ndim - 1; d >= 0; d--) {
        int64_t s = d >= lead ? a->shape[d - lead] : 1;
        if (s != 1 && s != out->shape[d])
            return DDPC_ERROR(DDPC_ERR_ARG, "broadcast: %s has %lld where the result has %lld (dim %d)", what,
                              (long long)s, (long long)out->shape[d], d);
        st[d] = s == 1 ? 0 : stride;
        stride *= s;
    }
    return DDPC_OK;
}

_Static_assert(sizeof(((ddpc_k_bcast *)0)->shape) == DDPC_MAX_NDIM * sizeof(int64_t),
               "ddpc_k_bcast (kernels.h) holds DDPC_MAX_NDIM dims");

/* The strides as the CUDA kernel takes them (sc: a third operand's, or NULL;
 * inline: unused where CUDA is not built). */
static inline ddpc_k_bcast bcast_geo_(const ddpc_buffer *out, const int64_t *sa, const int64_t *sb, const int64_t *sc) {
    ddpc_k_bcast geo = {.ndim = out->ndim};
    for (int d = 0; d < out->ndim; d++) {
        geo.shape[d] = out->shape[d], geo.sa[d] = sa[d], geo.sb[d] = sb[d];
        geo.sc[d] = sc ? sc[d] : 0;
    }
    return geo;
}

/* Moves the counter idx over out's dims but the last to the next row, and the
 * offsets off[j] of the k operands along with it (at their strides st[j]). */
static inline void next_row_(const ddpc_buffer *out, int64_t *idx, int k, const int64_t *const *st, int64_t *off) {
    for (int d = out->ndim - 2; d >= 0; d--) {
        for (int j = 0; j < k; j++) off[j] += st[j][d];
        if (++idx[d] < out->shape[d]) return;
        for (int j = 0; j < k; j++) off[j] -= st[j][d] * out->shape[d];
        idx[d] = 0;
    }
}

/* Rows of out's last dim: the offsets of a and b advance with a counter over
 * the other dims; within a row each steps by its last stride, 0 or 1. Each
 * pair of strides has its own loop, an operand of stride 0 read once before
 * it: with the strides as variables, and out possibly aliasing that operand,
 * the compiler left the loop scalar, 12x slower than an elementwise add (a
 * convolution's bias over its output planes). */
#define BCAST_LOOP(T)                                                              \
    do {                                                                           \
        int64_t last = out->shape[nd - 1], rows = out->numel / last, idx[DDPC_MAX_NDIM] = {0}, off[2] = {0, 0}; \
        int64_t la = sa[nd - 1], lb = sb[nd - 1];                                  \
        const int64_t *st[2] = {sa, sb};                                           \
        const T *x = a->data, *y = b->data;                                        \
        for (int64_t r = 0; r < rows; r++) {                                       \
            T *o = (T *)out->data + r * last;                                      \
            const T *xr = x + off[0], *yr = y + off[1];                            \
            const T xv = xr[0], yv = yr[0];                                        \
            if (la && lb) {                                                        \
                DDPC_BINARY_LOOPS(op, last, o[k_], xr[k_], yr[k_]);                \
            } else if (la) {                                                       \
                DDPC_BINARY_LOOPS(op, last, o[k_], xr[k_], yv);                    \
            } else if (lb) {                                                       \
                DDPC_BINARY_LOOPS(op, last, o[k_], xv, yr[k_]);                    \
            } else {                                                               \
                DDPC_BINARY_LOOPS(op, last, o[k_], xv, yv);                        \
            }                                                                      \
            next_row_(out, idx, 2, st, off);                                       \
        }                                                                          \
    } while (0)

ddpc_status ddpc_op_binary_broadcast(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b) {
    if (out->dtype == DDPC_BOOL) {
        ddpc_buffer o = ddpc_bool_bytes(out), x = ddpc_bool_bytes(a), y = ddpc_bool_bytes(b);
        return ddpc_bool_result(out, ddpc_op_binary_broadcast(op, &o, &x, &y));
    }
    CHECK(check_broadcast_(op, out, "broadcast"));
    CHECK(check_like_(out, a, -1, "broadcast", "the first operand"));
    CHECK(check_like_(out, b, -1, "broadcast", "the second operand"));
    int nd = out->ndim;
    int64_t sa[DDPC_MAX_NDIM], sb[DDPC_MAX_NDIM];
    if (nd == 0) return ddpc_op_binary(op, out, a, b);
    CHECK(bcast_strides_(out, a, sa, "the first operand"));
    CHECK(bcast_strides_(out, b, sb, "the second operand"));
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_binary_broadcast(op, out->data, a->data, b->data, out->dtype, out->numel,
                                                         bcast_geo_(out, sa, sb, NULL), stream));
    DDPC_REAL_TYPES(out->dtype, BCAST_LOOP(T));
    return DDPC_OK;
}

/* The special functions of two arguments cost far more than finding their
 * operands, so the host loop takes each element's offsets apart from its
 * index (as the CUDA kernel does) and parts the elements across cores. */
typedef struct {
    int op, dtype;
    void *out;
    const void *a, *b;
    ddpc_k_bcast geo;
} special_binary_job_;

static void special_binary_range_(void *ctx, int64_t lo, int64_t hi) {
    const special_binary_job_ *j = ctx;
    DDPC_FLOAT_TYPES(j->dtype, {
        T *o = j->out;
        const T *x = j->a, *y = j->b;
        for (int64_t i = lo; i < hi; i++) {
            int64_t rest = i, oa = 0, ob = 0;
            for (int d = j->geo.ndim - 1; d >= 0; d--) {
                int64_t k = rest % j->geo.shape[d];
                rest /= j->geo.shape[d];
                oa += k * j->geo.sa[d], ob += k * j->geo.sb[d];
            }
            o[i] = (T)ddpc_special_binary(j->op, (double)x[oa], (double)y[ob], sizeof(T) == 4);
        }
    });
}

ddpc_status ddpc_op_special_binary(int op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b) {
    if ((unsigned)op >= DDPC_NSPECIAL_BINARY) return DDPC_ERROR(DDPC_ERR_ARG, "unknown special function %d", op);
    CHECK(check_out_(out, "special function"));
    CHECK(check_like_(out, a, -1, "special function", "the first operand"));
    CHECK(check_like_(out, b, -1, "special function", "the second operand"));
    int64_t sa[DDPC_MAX_NDIM] = {0}, sb[DDPC_MAX_NDIM] = {0};
    CHECK(bcast_strides_(out, a, sa, "the first operand"));
    CHECK(bcast_strides_(out, b, sb, "the second operand"));
    if (out->numel == 0) return DDPC_OK;
    special_binary_job_ job = {.op = op, .dtype = out->dtype, .out = out->data, .a = a->data, .b = b->data,
                               .geo = bcast_geo_(out, sa, sb, NULL)};
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_special_binary(op, out->data, a->data, b->data, out->dtype, out->numel,
                                                       job.geo, stream));
    ddpc_parallel_for(out->numel, UNARY_GRAIN, special_binary_range_, &job);
    return DDPC_OK;
}

/* A selection moves elements unchanged, so it runs on words of the element's size (W). */
#define WHERE_LOOP(W)                                                              \
    do {                                                                           \
        int64_t last = nd ? out->shape[nd - 1] : 1, rows = out->numel / last, idx[DDPC_MAX_NDIM] = {0}; \
        int64_t off[3] = {0, 0, 0}, lc = nd ? sc[nd - 1] : 0, la = nd ? sa[nd - 1] : 0, lb = nd ? sb[nd - 1] : 0; \
        const int64_t *st[3] = {sc, sa, sb};                                       \
        const uint8_t *c = cond->data;                                             \
        const W *x = a->data, *y = b->data;                                        \
        for (int64_t r = 0; r < rows; r++) {                                       \
            W *o = (W *)out->data + r * last;                                      \
            const uint8_t *cr = c + off[0];                                        \
            const W *xr = x + off[1], *yr = y + off[2];                            \
            for (int64_t k = 0; k < last; k++) o[k] = cr[k * lc] ? xr[k * la] : yr[k * lb]; \
            next_row_(out, idx, 3, st, off);                                       \
        }                                                                          \
    } while (0)

ddpc_status ddpc_op_where(ddpc_buffer *out, const ddpc_buffer *cond, const ddpc_buffer *a, const ddpc_buffer *b) {
    CHECK(check_writable_(out, "where"));
    if (cond->dtype != DDPC_BOOL && cond->dtype != DDPC_UINT8)
        return DDPC_ERROR(DDPC_ERR_TYPE, "where: the condition must be bool or uint8, got %s",
                          ddpc_dtype_name(cond->dtype));
    if (cond->device != out->device) return DDPC_ERROR(DDPC_ERR_ARG, "where: the condition is on another device");
    CHECK(check_like_(out, a, -1, "where", "the first operand"));
    CHECK(check_like_(out, b, -1, "where", "the second operand"));
    int nd = out->ndim;
    int64_t sc[DDPC_MAX_NDIM] = {0}, sa[DDPC_MAX_NDIM] = {0}, sb[DDPC_MAX_NDIM] = {0};
    CHECK(bcast_strides_(out, cond, sc, "the condition"));
    CHECK(bcast_strides_(out, a, sa, "the first operand"));
    CHECK(bcast_strides_(out, b, sb, "the second operand"));
    if (out->numel == 0) return DDPC_OK;
    int size = (int)ddpc_dtype_size(out->dtype);
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_where(out->data, cond->data, a->data, b->data, size, out->numel,
                                              bcast_geo_(out, sa, sb, sc), stream));
    switch (size) {
    case 1: WHERE_LOOP(uint8_t); break;
    case 2: WHERE_LOOP(uint16_t); break;
    case 4: WHERE_LOOP(uint32_t); break;
    default: WHERE_LOOP(uint64_t); break;
    }
    return DDPC_OK;
}

/* Sums along `len` (values `inner` apart), `outer` times. The partial sums
 * live in ACC: double for floats, so long float32 sums keep their precision
 * on every path; uint64_t for int64, exact and wrapping on overflow (as in
 * PyTorch) where signed overflow would be undefined. With inner > 1 they are
 * kept for a chunk of the row at a time, so the reads stay contiguous, and
 * four rows go into them at once, which keeps the loop as fast as memory. */
#define SUM_CHUNK 256
/* The sums of one unit of work: columns [i0, i0 + SUM_CHUNK) of outer row r. */
#define SUM_DIM_UNIT(T, ACC, out, a, r, i0, len, inner)                            \
    do {                                                                           \
        T *o_ = (T *)(out);                                                        \
        const T *x_ = (const T *)(a);                                              \
        ACC acc_[SUM_CHUNK];                                                       \
        int64_t m = (inner) - (i0) < SUM_CHUNK ? (inner) - (i0) : SUM_CHUNK, l = 0; \
        const T *src = x_ + (r) * (len) * (inner) + (i0);                          \
        for (int64_t i = 0; i < m; i++) acc_[i] = 0;                               \
        if (m == 1) {                                                              \
            for (; l < (len); l++) acc_[0] += (ACC)src[l * (inner)];               \
        } else {                                                                   \
            for (; l + 4 <= (len); l += 4) {                                       \
                const T *s0 = src + l * (inner), *s1 = s0 + (inner), *s2 = s1 + (inner), *s3 = s2 + (inner); \
                for (int64_t i = 0; i < m; i++)                                    \
                    acc_[i] += ((ACC)s0[i] + (ACC)s1[i]) + ((ACC)s2[i] + (ACC)s3[i]); \
            }                                                                      \
            for (; l < (len); l++)                                                 \
                for (int64_t i = 0; i < m; i++) acc_[i] += (ACC)src[l * (inner) + i]; \
        }                                                                          \
        for (int64_t i = 0; i < m; i++) o_[(r) * (inner) + (i0) + i] = (T)acc_[i]; \
    } while (0)

typedef struct {
    void *out;
    const void *a;
    int64_t len, inner, chunks; /* chunks of SUM_CHUNK columns per outer row (1 for inner 1) */
    ddpc_dtype dtype;
} sum_dim_job_;

/* Units [lo, hi): outer row u / chunks, its chunk u % chunks; each output
 * element is one unit's, in the same order whatever the threads (and the
 * same on every target: there are only additions). */
static DDPC_ROW_TARGETS void sum_dim_range_(void *ctx, int64_t lo, int64_t hi) {
    const sum_dim_job_ *j = ctx;
    const int64_t len = j->len, inner = j->inner;
    for (int64_t u = lo; u < hi; u++) {
        int64_t r = u / j->chunks, i0 = (u % j->chunks) * SUM_CHUNK;
        if (inner == 1 && j->dtype == DDPC_FLOAT32)
            ((float *)j->out)[r] = (float)ddpc_sum_f32((const float *)j->a + r * len, len);
        else if (inner == 1 && j->dtype == DDPC_FLOAT64)
            ((double *)j->out)[r] = ddpc_sum_f64((const double *)j->a + r * len, len);
        else if (j->dtype == DDPC_INT64)
            SUM_DIM_UNIT(int64_t, uint64_t, j->out, j->a, r, i0, len, inner);
        else
            DDPC_FLOAT_TYPES(j->dtype, SUM_DIM_UNIT(T, double, j->out, j->a, r, i0, len, inner));
    }
}

ddpc_status ddpc_dim_split(const ddpc_buffer *a, int dim, const char *op, int64_t *outer, int64_t *len,
                           int64_t *inner) {
    if (dim < 0 || dim >= a->ndim)
        return DDPC_ERROR(DDPC_ERR_INDEX, "%s: dim %d is out of range for %d dims", op, dim, a->ndim);
    *outer = 1, *len = a->shape[dim], *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= a->shape[d];
    for (int d = dim + 1; d < a->ndim; d++) *inner *= a->shape[d];
    return DDPC_OK;
}

ddpc_status ddpc_op_sum_dim(ddpc_buffer *out, const ddpc_buffer *a, int dim) {
    /* int64 too: integer tensors sum exactly, as their sum over all elements does. */
    CHECK(out->dtype == DDPC_INT64 ? check_writable_(out, "sum along a dim") : check_out_(out, "sum along a dim"));
    int64_t outer = 0, len = 0, inner = 0;
    CHECK(ddpc_dim_split(a, dim, "sum along a dim", &outer, &len, &inner));
    CHECK(check_like_(out, a, -1, "sum along a dim", "the input"));
    if (out->numel != outer * inner)
        return DDPC_ERROR(DDPC_ERR_ARG, "sum along a dim: the output has %lld elements, expected %lld",
                          (long long)out->numel, (long long)(outer * inner));
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_sum_dim(out->data, a->data, out->dtype, outer, len, inner, stream));
    /* Contiguous rows (inner 1) are each summed in lanes; the units go to the cores. */
    sum_dim_job_ job = {.out = out->data, .a = a->data, .len = len, .inner = inner,
                        .chunks = (inner + SUM_CHUNK - 1) / SUM_CHUNK, .dtype = out->dtype};
    int64_t unit = len * (inner < SUM_CHUNK ? inner : SUM_CHUNK); /* elements read per unit */
    ddpc_parallel_for(outer * job.chunks, (1 << 16) / (unit ? unit : 1) + 1, sum_dim_range_, &job);
    return DDPC_OK;
}

/* The mean and the squared deviations from it of one unit (outer row r,
 * columns [i0, i0 + SUM_CHUNK)), two passes in double: the same precision
 * as the float64 sums, and no cancellation of E[x^2] - E[x]^2. */
#define MOMENTS_UNIT(T, j, r, i0)                                                  \
    do {                                                                           \
        const int64_t len_ = (j)->len, inner_ = (j)->inner;                        \
        int64_t m_ = inner_ - (i0) < SUM_CHUNK ? inner_ - (i0) : SUM_CHUNK;        \
        const T *src_ = (const T *)(j)->a + (r) * len_ * inner_ + (i0);            \
        double mean_[SUM_CHUNK], ss_[SUM_CHUNK];                                   \
        for (int64_t i = 0; i < m_; i++) mean_[i] = ss_[i] = 0;                    \
        for (int64_t l = 0; l < len_; l++)                                         \
            for (int64_t i = 0; i < m_; i++) mean_[i] += (double)src_[l * inner_ + i]; \
        for (int64_t i = 0; i < m_; i++) mean_[i] /= (double)len_;                 \
        for (int64_t l = 0; l < len_; l++)                                         \
            for (int64_t i = 0; i < m_; i++) {                                     \
                double d_ = (double)src_[l * inner_ + i] - mean_[i];               \
                ss_[i] += d_ * d_;                                                 \
            }                                                                      \
        for (int64_t i = 0; i < m_; i++) {                                         \
            ((T *)(j)->mean)[(r) * inner_ + (i0) + i] = (T)mean_[i];               \
            ((T *)(j)->var)[(r) * inner_ + (i0) + i] = (T)(ss_[i] / (j)->divisor); \
        }                                                                          \
    } while (0)

typedef struct {
    void *var, *mean;
    const void *a;
    int64_t len, inner, chunks; /* as sum_dim_job_'s */
    double divisor;
    ddpc_dtype dtype;
} moments_job_;

/* The row (inner 1) r: its sum in lanes, then its squared deviations. */
static void row_moments_(const moments_job_ *j, int64_t r) {
    const int f32 = j->dtype == DDPC_FLOAT32;
    const float *xf = (const float *)j->a + r * j->len;
    const double *xd = (const double *)j->a + r * j->len;
    double mean = (f32 ? ddpc_sum_f32(xf, j->len) : ddpc_sum_f64(xd, j->len)) / (double)j->len;
    double ss = f32 ? ddpc_sqdev_f32(xf, j->len, mean) : ddpc_sqdev_f64(xd, j->len, mean);
    if (f32)
        ((float *)j->mean)[r] = (float)mean, ((float *)j->var)[r] = (float)(ss / j->divisor);
    else
        ((double *)j->mean)[r] = mean, ((double *)j->var)[r] = ss / j->divisor;
}

static void moments_range_(void *ctx, int64_t lo, int64_t hi) {
    const moments_job_ *j = ctx;
    for (int64_t u = lo; u < hi; u++) {
        int64_t r = u / j->chunks, i0 = (u % j->chunks) * SUM_CHUNK;
        if (j->inner == 1)
            row_moments_(j, r);
        else
            DDPC_FLOAT_TYPES(j->dtype, MOMENTS_UNIT(T, j, r, i0));
    }
}

ddpc_status ddpc_op_var_dim(ddpc_buffer *var, ddpc_buffer *mean, const ddpc_buffer *a, int dim, double correction) {
    const char *op = "var along a dim";
    CHECK(check_out_(var, op));
    CHECK(check_out_(mean, op));
    int64_t outer = 0, len = 0, inner = 0;
    CHECK(ddpc_dim_split(a, dim, op, &outer, &len, &inner));
    CHECK(check_like_(var, a, -1, op, "the input"));
    CHECK(check_like_(mean, a, -1, op, "the input"));
    if (a->device != DDPC_CPU || (a->dtype != DDPC_FLOAT32 && a->dtype != DDPC_FLOAT64))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: host float32 or float64 tensors only, got %s on %s", op,
                          ddpc_dtype_name(a->dtype), a->device == DDPC_CPU ? "the host" : "a GPU");
    if (var->numel != outer * inner || mean->numel != outer * inner)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the outputs have %lld and %lld elements, expected %lld", op,
                          (long long)var->numel, (long long)mean->numel, (long long)(outer * inner));
    if (var->numel == 0) return DDPC_OK;
    moments_job_ job = {.var = var->data, .mean = mean->data, .a = a->data, .len = len, .inner = inner,
                        .chunks = (inner + SUM_CHUNK - 1) / SUM_CHUNK, .dtype = a->dtype,
                        /* PyTorch's max(0, N - correction): a slice too short gives inf, or NaN for 0 / 0 */
                        .divisor = (double)len - correction > 0 ? (double)len - correction : 0.0};
    if (outer == 1 && inner == 1) { /* one long row: each pass in parts across the cores */
        const int f32 = a->dtype == DDPC_FLOAT32;
        double m = ddpc_sum_parallel(a->data, len, f32, NULL) / (double)len;
        double v = ddpc_sum_parallel(a->data, len, f32, &m) / job.divisor;
        if (f32)
            *(float *)var->data = (float)v, *(float *)mean->data = (float)m;
        else
            *(double *)var->data = v, *(double *)mean->data = m;
        return DDPC_OK;
    }
    int64_t unit = 2 * len * (inner < SUM_CHUNK ? inner : SUM_CHUNK);
    ddpc_parallel_for(outer * job.chunks, (1 << 16) / (unit ? unit : 1) + 1, moments_range_, &job);
    return DDPC_OK;
}

/* `v != v` holds for a NaN only (never for integers). The first NaN wins,
 * else the first of the largest (smallest) values. A contiguous float row
 * is read once in vectors (GCC's vector extensions: the loop vectoriser
 * does not take a select between a value and a running choice), each lane
 * keeping its choice and where it took it; the lanes are then merged, and
 * the tail read one by one. Along an inner dim, a chunk of columns at a
 * time keeps the running choices, so the reads are contiguous. */
#define EXTREME_CHUNK 256
#define EXTREME_BETTER(v, b) (max_ ? (v) > (b) : (v) < (b))
#define EXTREME_TAKES(v, b) ((b) == (b) && ((v) != (v) || EXTREME_BETTER(v, b)))
#define EXTREME_VECS 4
typedef float extreme_f32v_ __attribute__((vector_size(32)));
typedef int32_t extreme_i32v_ __attribute__((vector_size(32)));
typedef double extreme_f64v_ __attribute__((vector_size(32)));
typedef int64_t extreme_i64v_ __attribute__((vector_size(32)));

/* The row x[0 .. n) (n >= 1, n < 2^31 for float) into OUT_V and OUT_AT. */
#define VEC_EXTREME(T, VF, VI, IT, x, n, OUT_V, OUT_AT)                            \
    do {                                                                           \
        enum { W_ = (int)(sizeof(VF) / sizeof(T)) };                               \
        VF a_[EXTREME_VECS];                                                       \
        VI at_[EXTREME_VECS], iota_;                                               \
        for (int k_ = 0; k_ < W_; k_++) iota_[k_] = (IT)k_;                        \
        for (int j_ = 0; j_ < EXTREME_VECS; j_++)                                  \
            for (int k_ = 0; k_ < W_; k_++) a_[j_][k_] = (x)[0], at_[j_][k_] = 0;  \
        int64_t l_ = 0;                                                            \
        for (; l_ + EXTREME_VECS * W_ <= (n); l_ += EXTREME_VECS * W_)             \
            for (int j_ = 0; j_ < EXTREME_VECS; j_++) {                            \
                VF v_;                                                             \
                memcpy(&v_, (x) + l_ + j_ * W_, sizeof v_);                        \
                VI m_ = (a_[j_] == a_[j_]) & ((v_ != v_) | (max_ ? v_ > a_[j_] : v_ < a_[j_])); \
                a_[j_] = (VF)(((VI)v_ & m_) | ((VI)a_[j_] & ~m_));                 \
                at_[j_] = ((iota_ + (IT)(l_ + j_ * W_)) & m_) | (at_[j_] & ~m_);   \
            }                                                                      \
        T b_ = (x)[0];                                                             \
        int64_t bi_ = 0;                                                           \
        for (int j_ = 0; j_ < EXTREME_VECS; j_++)                                  \
            for (int k_ = 0; k_ < W_; k_++) {                                      \
                T v_ = a_[j_][k_];                                                 \
                int64_t i_ = (int64_t)at_[j_][k_];                                 \
                int same_ = v_ != v_ ? b_ != b_ : v_ == b_;                        \
                if (EXTREME_TAKES(v_, b_) || (same_ && i_ < bi_)) b_ = v_, bi_ = i_; \
            }                                                                      \
        for (; l_ < (n); l_++)                                                     \
            if (EXTREME_TAKES((x)[l_], b_)) b_ = (x)[l_], bi_ = l_;                \
        (OUT_V) = b_, (OUT_AT) = bi_;                                              \
    } while (0)

/* The choice (and where it was taken) in row[0 .. n), n >= 1. */
#define EXTREME_ROW(T, row, n, is_float, OUT_V, OUT_AT)                            \
    do {                                                                           \
        T row_best_ = (row)[0];                                                    \
        int64_t row_at_ = 0;                                                       \
        if (sizeof(T) == 4 && (is_float) && (n) < INT32_MAX)                       \
            VEC_EXTREME(float, extreme_f32v_, extreme_i32v_, int32_t, (const float *)(row), n, row_best_, row_at_); \
        else if (sizeof(T) == 8 && (is_float))                                     \
            VEC_EXTREME(double, extreme_f64v_, extreme_i64v_, int64_t, (const double *)(row), n, row_best_, row_at_); \
        else                                                                       \
            for (int64_t l = 1; l < (n); l++)                                      \
                if (EXTREME_TAKES((row)[l], row_best_)) row_best_ = (row)[l], row_at_ = l; \
        (OUT_V) = row_best_, (OUT_AT) = row_at_;                                   \
    } while (0)

/* A long single row is split into parts of at least EXTREME_PART elements,
 * at most EXTREME_PARTS_MAX of them, whose choices are merged in order: the
 * result does not depend on the threads. */
#define EXTREME_PART ((int64_t)1 << 16)
#define EXTREME_PARTS_MAX 64

typedef struct {
    ddpc_buffer *values, *indices;
    const ddpc_buffer *a;
    int64_t outer, len, inner;
    int64_t chunks; /* units: chunks of EXTREME_CHUNK columns per outer row (1 for inner 1) */
    int64_t part;   /* > 0: the units are the parts of one row (outer and inner 1), each this long */
    int want_max;
    union {
        double f64;
        float f32;
        int64_t i64;
        int32_t i32;
        uint8_t u8;
    } part_best[EXTREME_PARTS_MAX];
    int64_t part_at[EXTREME_PARTS_MAX];
} extreme_job_;

/* Units [lo, hi) of the job: parts of one row, whole rows (inner 1), or a
 * chunk of columns of an outer row. */
#define EXTREME_UNITS(T, WANT_MAX, FIELD)                                          \
    do {                                                                           \
        const int max_ = (WANT_MAX), is_float = ddpc_dtype_is_float(j->a->dtype);  \
        const int64_t len = j->len, inner = j->inner;                              \
        const T *x_ = (const T *)j->a->data;                                       \
        T *v_ = (T *)j->values->data;                                              \
        int64_t *ix_ = (int64_t *)j->indices->data;                                \
        for (int64_t u = lo; u < hi; u++) {                                        \
            if (j->part) {                                                         \
                int64_t start = u * j->part, n = len - start < j->part ? len - start : j->part; \
                EXTREME_ROW(T, x_ + start, n, is_float, j->part_best[u].FIELD, j->part_at[u]); \
                j->part_at[u] += start;                                            \
                continue;                                                          \
            }                                                                      \
            if (inner == 1) {                                                      \
                EXTREME_ROW(T, x_ + u * len, len, is_float, v_[u], ix_[u]);        \
                continue;                                                          \
            }                                                                      \
            int64_t o = u / j->chunks, i0 = (u % j->chunks) * EXTREME_CHUNK;       \
            int64_t m = inner - i0 < EXTREME_CHUNK ? inner - i0 : EXTREME_CHUNK;   \
            const T *row = x_ + o * len * inner;                                   \
            T best[EXTREME_CHUNK];                                                 \
            int64_t at[EXTREME_CHUNK] = {0};                                       \
            for (int64_t i = 0; i < m; i++) best[i] = row[i0 + i];                 \
            for (int64_t l = 1; l < len; l++) {                                    \
                const T *src = row + l * inner + i0;                               \
                for (int64_t i = 0; i < m; i++) {                                  \
                    T v = src[i], b = best[i];                                     \
                    int take = EXTREME_TAKES(v, b);                                \
                    best[i] = take ? v : b;                                        \
                    at[i] = take ? l : at[i];                                      \
                }                                                                  \
            }                                                                      \
            for (int64_t i = 0; i < m; i++) v_[o * inner + i0 + i] = best[i], ix_[o * inner + i0 + i] = at[i]; \
        }                                                                          \
    } while (0)

#define EXTREME_BY_DTYPE(WANT_MAX)                                                 \
    do {                                                                           \
        switch (j->a->dtype) {                                                     \
        case DDPC_FLOAT32: EXTREME_UNITS(float, WANT_MAX, f32); break;             \
        case DDPC_FLOAT64: EXTREME_UNITS(double, WANT_MAX, f64); break;            \
        case DDPC_INT32: EXTREME_UNITS(int32_t, WANT_MAX, i32); break;             \
        case DDPC_INT64: EXTREME_UNITS(int64_t, WANT_MAX, i64); break;             \
        default: EXTREME_UNITS(uint8_t, WANT_MAX, u8); break;                      \
        }                                                                          \
    } while (0)

static DDPC_ROW_TARGETS void extreme_range_(void *ctx, int64_t lo, int64_t hi) {
    extreme_job_ *j = ctx;
    if (j->want_max) EXTREME_BY_DTYPE(1);
    else EXTREME_BY_DTYPE(0);
}

/* The parts' choices of a split row, merged in order: a later part wins only
 * where it takes the choice (NaN first, else strictly better), so ties go to
 * the first index. */
#define EXTREME_MERGE(T, FIELD)                                                    \
    do {                                                                           \
        const int max_ = j->want_max;                                              \
        T b_ = j->part_best[0].FIELD;                                              \
        int64_t at_ = j->part_at[0];                                               \
        for (int64_t p = 1; p < parts; p++)                                        \
            if (EXTREME_TAKES(j->part_best[p].FIELD, b_)) b_ = j->part_best[p].FIELD, at_ = j->part_at[p]; \
        *(T *)j->values->data = b_;                                                \
        *(int64_t *)j->indices->data = at_;                                        \
    } while (0)

static void extreme_merge_(extreme_job_ *j, int64_t parts) {
    switch (j->a->dtype) {
    case DDPC_FLOAT32: EXTREME_MERGE(float, f32); break;
    case DDPC_FLOAT64: EXTREME_MERGE(double, f64); break;
    case DDPC_INT32: EXTREME_MERGE(int32_t, i32); break;
    case DDPC_INT64: EXTREME_MERGE(int64_t, i64); break;
    default: EXTREME_MERGE(uint8_t, u8); break;
    }
}

/* Splits the work into units across the cores: rows, chunks of columns, or
 * the parts of one long row. */
static void extreme_loop_(ddpc_buffer *values, ddpc_buffer *indices, const ddpc_buffer *a, int64_t outer,
                          int64_t len, int64_t inner, int want_max) {
    extreme_job_ job = {.values = values, .indices = indices, .a = a, .outer = outer, .len = len, .inner = inner,
                        .chunks = inner == 1 ? 1 : (inner + EXTREME_CHUNK - 1) / EXTREME_CHUNK,
                        .want_max = want_max};
    if (outer == 1 && inner == 1 && len >= 2 * EXTREME_PART) {
        job.part = len > EXTREME_PART * EXTREME_PARTS_MAX ? (len + EXTREME_PARTS_MAX - 1) / EXTREME_PARTS_MAX
                                                          : EXTREME_PART;
        int64_t parts = (len + job.part - 1) / job.part;
        ddpc_parallel_for(parts, 2, extreme_range_, &job);
        extreme_merge_(&job, parts);
        return;
    }
    int64_t unit = len * (inner < EXTREME_CHUNK ? inner : EXTREME_CHUNK); /* elements read per unit */
    ddpc_parallel_for(outer * job.chunks, EXTREME_PART / (unit ? unit : 1) + 1, extreme_range_, &job);
}

ddpc_status ddpc_op_extreme_dim(ddpc_buffer *values, ddpc_buffer *indices, const ddpc_buffer *a, int dim,
                                int want_max) {
    const char *op = want_max ? "max along a dim" : "min along a dim";
    int64_t outer = 0, len = 0, inner = 0;
    CHECK(check_writable_(values, op));
    CHECK(check_writable_(indices, op));
    CHECK(ddpc_dim_split(a, dim, op, &outer, &len, &inner));
    if (a->dtype == DDPC_FLOAT16 || a->dtype == DDPC_BFLOAT16)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: 16-bit floats are compared in float32 (cast first)", op);
    CHECK(check_like_(values, a, -1, op, "the input"));
    if (indices->dtype != DDPC_INT64 || indices->device != a->device)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: indices must be int64 on the input's device", op);
    if (values->numel != outer * inner || indices->numel != outer * inner)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the outputs need %lld elements", op, (long long)(outer * inner));
    if (outer * inner == 0) return DDPC_OK;
    if (len == 0) return DDPC_ERROR(DDPC_ERR_ARG, "%s: dim %d has no elements to choose from", op, dim);
    if (a->device != DDPC_CPU)
        DDPC_LAUNCH(a->device, ddpc_k_extreme_dim(values->data, indices->data, a->data, a->dtype, outer, len, inner,
                                                  want_max, stream));
    extreme_loop_(values, indices, a, outer, len, inner, want_max);
    return DDPC_OK;
}

ddpc_status ddpc_op_put_dim(ddpc_buffer *out, const ddpc_buffer *g, const ddpc_buffer *indices, int dim) {
    const char *op = ddpc_index_op_name(DDPC_IX_PUT_DIM);
    int64_t outer = 0, len = 0, inner = 0;
    CHECK(check_out_(out, op));
    CHECK(ddpc_dim_split(out, dim, op, &outer, &len, &inner));
    CHECK(check_like_(out, g, outer * inner, op, "the gradient"));
    if (indices->dtype != DDPC_INT64 || indices->device != out->device || indices->numel != outer * inner)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: indices must be %lld int64 on the output's device", op,
                          (long long)(outer * inner));
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(out->device, DDPC_IX_PUT_DIM, ddpc_k_put_dim(out->data, g->data, indices->data, out->dtype,
                                                                         outer, len, inner, index_check, stream));
    const int64_t *ix = indices->data;
    for (int64_t k = 0; k < outer * inner; k++)
        if (ix[k] < 0 || ix[k] >= len) return DDPC_INDEX_ERROR(.op = DDPC_IX_PUT_DIM, .index = ix[k], .bound = len);
    memset(out->data, 0, ddpc_buffer_nbytes(out));
    DDPC_FLOAT_TYPES(out->dtype, {
        T *o = out->data;
        const T *gv = g->data;
        for (int64_t k = 0; k < outer * inner; k++) o[(k / inner) * len * inner + ix[k] * inner + k % inner] = gv[k];
    });
    return DDPC_OK;
}

/* ---- embedding rows and layer normalisation --------------------------------------- */

/* table [N, D], idx [K], rows [K, D]: the shapes index_rows and its gradient share. */
static ddpc_status rows_args_(const ddpc_buffer *rows, const ddpc_buffer *table, const ddpc_buffer *idx,
                              ddpc_index_op code, int64_t *n, int64_t *d) {
    const char *op = ddpc_index_op_name(code);
    if (table->ndim != 2) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the table must be 2-d, got %d dims", op, table->ndim);
    *n = table->shape[0], *d = table->shape[1];
    if (idx->dtype != DDPC_INT64 || idx->device != table->device)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: indices must be int64 on the table's device", op);
    CHECK(check_like_(table, rows, idx->numel * *d, op, "the rows"));
    if (idx->device == DDPC_CPU) {
        const int64_t *ix = idx->data;
        for (int64_t k = 0; k < idx->numel; k++)
            if (ix[k] < 0 || ix[k] >= *n) return DDPC_INDEX_ERROR(.op = code, .index = ix[k], .bound = *n);
    }
    return DDPC_OK;
}

/* rows = table[idx], or table[idx] = rows when `put` (const: the buffers'
 * memory is written, not their descriptions). */
static ddpc_status move_rows_(const ddpc_buffer *rows, const ddpc_buffer *table, const ddpc_buffer *idx, int put) {
    ddpc_index_op code = put ? DDPC_IX_PUT_ROWS : DDPC_IX_INDEX_ROWS;
    int64_t n = 0, d = 0;
    CHECK(check_writable_(put ? table : rows, ddpc_index_op_name(code)));
    CHECK(rows_args_(rows, table, idx, code, &n, &d));
    if (rows->numel == 0) return DDPC_OK;
    size_t row = (size_t)d * ddpc_dtype_size(rows->dtype);
    if (rows->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(rows->device, code, ddpc_k_move_rows(rows->data, table->data, idx->data, idx->numel, n, row,
                                                                 put, index_check, stream));
    const int64_t *ix = idx->data;
    char *r = rows->data, *t = table->data;
    for (int64_t k = 0; k < idx->numel; k++) {
        if (put) memcpy(t + ix[k] * row, r + k * row, row);
        else memcpy(r + k * row, t + ix[k] * row, row);
    }
    return DDPC_OK;
}

ddpc_status ddpc_op_index_rows(ddpc_buffer *out, const ddpc_buffer *table, const ddpc_buffer *idx) {
    return move_rows_(out, table, idx, 0);
}

ddpc_status ddpc_op_put_rows(ddpc_buffer *table, const ddpc_buffer *rows, const ddpc_buffer *idx) {
    return move_rows_(rows, table, idx, 1);
}

ddpc_status ddpc_op_index_add_rows(ddpc_buffer *gtable, const ddpc_buffer *g, const ddpc_buffer *idx) {
    int64_t n = 0, d = 0;
    CHECK(check_out_(gtable, ddpc_index_op_name(DDPC_IX_INDEX_ADD_ROWS)));
    CHECK(rows_args_(g, gtable, idx, DDPC_IX_INDEX_ADD_ROWS, &n, &d));
    if (g->numel == 0) return DDPC_OK;
    if (gtable->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(gtable->device, DDPC_IX_INDEX_ADD_ROWS,
                            ddpc_k_index_add_rows(gtable->data, g->data, idx->data, gtable->dtype, idx->numel, n, d,
                                                  index_check, stream));
    const int64_t *ix = idx->data;
    DDPC_FLOAT_TYPES(gtable->dtype, {
        T *gt = gtable->data;
        const T *gv = g->data;
        for (int64_t k = 0; k < idx->numel; k++)
            for (int64_t j = 0; j < d; j++) gt[ix[k] * d + j] += gv[k * d + j];
    });
    return DDPC_OK;
}

static ddpc_status norm_args_(const ddpc_buffer *x, const ddpc_buffer *mean, const ddpc_buffer *rstd,
                              const ddpc_buffer *w, const char *op, int64_t *rows, int64_t *d) {
    if (x->ndim < 1) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the input needs a dim to normalise over", op);
    *d = x->shape[x->ndim - 1], *rows = *d ? x->numel / *d : 0;
    CHECK(check_like_(x, mean, *rows, op, "the mean"));
    CHECK(check_like_(x, rstd, *rows, op, "rstd"));
    return check_like_(x, w, *d, op, "the weight");
}

ddpc_status ddpc_op_layer_norm(ddpc_buffer *y, ddpc_buffer *mean, ddpc_buffer *rstd, const ddpc_buffer *x,
                               const ddpc_buffer *w, const ddpc_buffer *b, double eps) {
    const char *op = "layer norm";
    int64_t rows = 0, d = 0;
    CHECK(check_out_(y, op));
    CHECK(check_writable_(mean, op));
    CHECK(check_writable_(rstd, op));
    CHECK(check_like_(y, x, y->numel, op, "the input"));
    CHECK(norm_args_(x, mean, rstd, w, op, &rows, &d));
    CHECK(check_like_(x, b, d, op, "the bias"));
    if (!(eps >= 0)) return DDPC_ERROR(DDPC_ERR_ARG, "%s: eps must be >= 0, got %g", op, eps);
    if (rows == 0 || d == 0) return DDPC_OK;
    if (y->device != DDPC_CPU)
        DDPC_LAUNCH(y->device, ddpc_k_layer_norm(y->data, mean->data, rstd->data, x->data, w->data, b->data, y->dtype,
                                                 rows, d, eps, stream));
    DDPC_FLOAT_TYPES(y->dtype, {
        const T *wv = w->data, *bv = b->data;
        for (int64_t r = 0; r < rows; r++) {
            const T *xr = (const T *)x->data + r * d;
            T *yr = (T *)y->data + r * d;
            double m = 0, v = 0;
            for (int64_t j = 0; j < d; j++) m += xr[j];
            m /= (double)d;
            for (int64_t j = 0; j < d; j++) v += ((double)xr[j] - m) * ((double)xr[j] - m);
            double rs = 1.0 / sqrt(v / (double)d + eps);
            for (int64_t j = 0; j < d; j++) yr[j] = (T)(((double)xr[j] - m) * rs) * wv[j] + bv[j];
            ((T *)mean->data)[r] = (T)m, ((T *)rstd->data)[r] = (T)rs;
        }
    });
    return DDPC_OK;
}

ddpc_status ddpc_op_layer_norm_backward(ddpc_buffer *gx, ddpc_buffer *gw, ddpc_buffer *gb, const ddpc_buffer *gy,
                                        const ddpc_buffer *x, const ddpc_buffer *mean, const ddpc_buffer *rstd,
                                        const ddpc_buffer *w) {
    const char *op = "layer norm backward";
    int64_t rows = 0, d = 0;
    CHECK(check_out_(gx, op));
    CHECK(check_like_(gx, x, gx->numel, op, "the input"));
    CHECK(check_like_(gx, gy, gx->numel, op, "the output gradient"));
    CHECK(norm_args_(x, mean, rstd, w, op, &rows, &d));
    CHECK(check_writable_(gw, op));
    CHECK(check_writable_(gb, op));
    CHECK(check_like_(x, gw, d, op, "the weight gradient"));
    CHECK(check_like_(x, gb, d, op, "the bias gradient"));
    if (d == 0) return DDPC_OK;
    if (gx->device != DDPC_CPU)
        DDPC_LAUNCH(gx->device, ddpc_k_layer_norm_backward(gx->data, gw->data, gb->data, gy->data, x->data, mean->data,
                                                           rstd->data, w->data, gx->dtype, rows, d, stream));
    double *acc = calloc((size_t)(2 * d), sizeof *acc); /* the weight's and the bias's sums over rows */
    if (!acc) return DDPC_ERROR(DDPC_ERR_OOM, "%s: out of memory", op);
    DDPC_FLOAT_TYPES(gx->dtype, {
        const T *wv = w->data;
        for (int64_t r = 0; r < rows; r++) {
            const T *xr = (const T *)x->data + r * d, *gr = (const T *)gy->data + r * d;
            T *out = (T *)gx->data + r * d;
            double m = ((const T *)mean->data)[r], rs = ((const T *)rstd->data)[r], s1 = 0, s2 = 0;
            for (int64_t j = 0; j < d; j++) {
                double xhat = ((double)xr[j] - m) * rs, gw_j = (double)gr[j] * wv[j];
                s1 += gw_j, s2 += gw_j * xhat;
                acc[j] += (double)gr[j] * xhat, acc[d + j] += gr[j];
            }
            for (int64_t j = 0; j < d; j++) {
                double xhat = ((double)xr[j] - m) * rs;
                out[j] = (T)(rs * ((double)gr[j] * wv[j] - s1 / (double)d - xhat * s2 / (double)d));
            }
        }
        for (int64_t j = 0; j < d; j++) ((T *)gw->data)[j] = (T)acc[j], ((T *)gb->data)[j] = (T)acc[d + j];
    });
    free(acc);
    return DDPC_OK;
}

/* LOOP(W), W the unsigned word of an element of `size` bytes: the copies
 * below move elements unchanged, whatever their dtype. */
#define BY_WORD(size, LOOP)                                                        \
    do {                                                                           \
        switch (size) {                                                            \
        case 1: LOOP(uint8_t); break;                                              \
        case 2: LOOP(uint16_t); break;                                             \
        case 4: LOOP(uint32_t); break;                                             \
        case 8: LOOP(uint64_t); break;                                             \
        default: LOOP(ddpc_word16); break;                                         \
        }                                                                          \
    } while (0)

/* Tiles keep both the reads and the writes within a few cache lines. Eight:
 * the rows a tile reads are a row length apart, and where that is near a
 * multiple of 4 KiB (1536 floats, 1024, 4096) they fall into few sets of
 * the L1 cache, of which 32 rows overflowed some (a 1000 x 1536 float32
 * transpose took 1.3 ms in tiles of 32, 0.4 in tiles of 8). */
#define TRANSPOSE_TILE 8
#define TRANSPOSE_LOOP(T)                                                          \
    do {                                                                           \
        T *o = out->data;                                                          \
        const T *x = a->data;                                                      \
        for (int64_t r0 = 0; r0 < R; r0 += TRANSPOSE_TILE)                         \
            for (int64_t c0 = 0; c0 < C; c0 += TRANSPOSE_TILE) {                   \
                int64_t r1 = r0 + TRANSPOSE_TILE < R ? r0 + TRANSPOSE_TILE : R;    \
                int64_t c1 = c0 + TRANSPOSE_TILE < C ? c0 + TRANSPOSE_TILE : C;    \
                for (int64_t c = c0; c < c1; c++) /* the writes run along a row */ \
                    for (int64_t r = r0; r < r1; r++) o[c * R + r] = x[r * C + c]; \
            }                                                                      \
    } while (0)

ddpc_status ddpc_op_transpose(ddpc_buffer *out, const ddpc_buffer *a) {
    CHECK(check_writable_(out, "transpose")); /* any dtype: it only moves elements */
    CHECK(check_like_(out, a, out->numel, "transpose", "the input"));
    if (a->ndim != 2 || out->ndim != 2 || out->shape[0] != a->shape[1] || out->shape[1] != a->shape[0])
        return DDPC_ERROR(DDPC_ERR_ARG, "transpose: needs a 2-d input and an output of the swapped shape");
    int64_t R = a->shape[0], C = a->shape[1];
    if (R * C == 0) return DDPC_OK;
    if (out->device != DDPC_CPU) DDPC_LAUNCH(out->device, ddpc_k_transpose(out->data, a->data, out->dtype, R, C, stream));
    BY_WORD(ddpc_dtype_size(out->dtype), TRANSPOSE_LOOP);
    return DDPC_OK;
}

/* The first and last elements a view reaches, checked against its buffer. */
static ddpc_status check_view_(const ddpc_buffer *buf, const ddpc_strided *g, int64_t offset, const int64_t *strides,
                               const char *what) {
    int64_t lo = offset, hi = offset;
    for (int d = 0; d < g->ndim; d++) {
        int64_t span = g->shape[d] - 1, st = strides[d] < 0 ? -strides[d] : strides[d];
        if (span > 0 && st > (INT64_MAX / 4) / span)
            return DDPC_ERROR(DDPC_ERR_ARG, "strided copy: the view of %s overflows", what);
        if (strides[d] < 0) lo -= span * st;
        else hi += span * st;
    }
    if (lo < 0 || hi >= buf->numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "strided copy: the view reaches elements %lld to %lld of %s, which has %lld",
                          (long long)lo, (long long)hi, what, (long long)buf->numel);
    return DDPC_OK;
}

/* The geometry as the CUDA kernel takes it (inline: unused where CUDA is not built). */
static inline ddpc_k_bcast strided_geo_(const ddpc_strided *g) {
    ddpc_k_bcast geo = {.ndim = g->ndim};
    for (int d = 0; d < g->ndim; d++)
        geo.shape[d] = g->shape[d], geo.sa[d] = g->dst_strides[d], geo.sb[d] = g->src_strides[d];
    return geo;
}

/* Steps idx over g's dims before the last (but `skip`) to the next row, and
 * the offsets od and os with it. */
static inline void next_strided_row_(const ddpc_strided *g, int skip, int64_t *idx, int64_t *od, int64_t *os) {
    for (int d = g->ndim - 2; d >= 0; d--) {
        if (d == skip) continue;
        *od += g->dst_strides[d], *os += g->src_strides[d];
        if (++idx[d] < g->shape[d]) return;
        *od -= g->dst_strides[d] * g->shape[d], *os -= g->src_strides[d] * g->shape[d], idx[d] = 0;
    }
}

/* Rows of the last dim, as BCAST_LOOP walks them; a row contiguous on both
 * sides is one memcpy. */
#define STRIDED_LOOP(W)                                                            \
    do {                                                                           \
        int64_t last = g->shape[nd - 1], rows = total / last, idx[DDPC_MAX_NDIM] = {0}, od = 0, os = 0; \
        int64_t ld = g->dst_strides[nd - 1], ls = g->src_strides[nd - 1];          \
        W *o = (W *)dst->data + g->dst_offset;                                     \
        const W *x = (const W *)src->data + g->src_offset;                         \
        for (int64_t r = 0; r < rows; r++) {                                       \
            if (ld == 1 && ls == 1) memcpy(o + od, x + os, (size_t)last * sizeof(W)); \
            else for (int64_t k = 0; k < last; k++) o[od + k * ld] = x[os + k * ls]; \
            next_strided_row_(g, -1, idx, &od, &os);                               \
        }                                                                          \
    } while (0)

/* The dim (not the last) along which the source moves least, where that is
 * less than along the last dim while the destination runs along the last
 * (a transpose): then both dims are copied in TRANSPOSE_TILE squares, so the
 * reads as well as the writes stay within a few cache lines. -1 where not. */
static int transposed_dim_(const ddpc_strided *g) {
    int nd = g->ndim, best = -1;
    if (nd < 2 || g->dst_strides[nd - 1] != 1 || g->shape[nd - 1] < 2) return -1;
    int64_t least = llabs(g->src_strides[nd - 1]);
    for (int d = 0; d < nd - 1; d++)
        if (g->shape[d] > 1 && llabs(g->src_strides[d]) < least) least = llabs(g->src_strides[d]), best = d;
    return best;
}

/* STRIDED_LOOP's work with dims t (transposed_dim_) and the last taken in
 * tiles, the other dims walked as there. */
#define TILED_LOOP(W)                                                              \
    do {                                                                           \
        int64_t A = g->shape[t], B = g->shape[nd - 1], sda = g->dst_strides[t], ssa = g->src_strides[t]; \
        int64_t ssb = g->src_strides[nd - 1], outer = total / (A * B), idx[DDPC_MAX_NDIM] = {0}, od = 0, os = 0; \
        W *o = (W *)dst->data + g->dst_offset;                                     \
        const W *x = (const W *)src->data + g->src_offset;                         \
        for (int64_t r = 0; r < outer; r++) {                                      \
            for (int64_t a0 = 0; a0 < A; a0 += TRANSPOSE_TILE)                     \
                for (int64_t b0 = 0; b0 < B; b0 += TRANSPOSE_TILE) {               \
                    int64_t a1 = a0 + TRANSPOSE_TILE < A ? a0 + TRANSPOSE_TILE : A; \
                    int64_t b1 = b0 + TRANSPOSE_TILE < B ? b0 + TRANSPOSE_TILE : B; \
                    for (int64_t a = a0; a < a1; a++) {                            \
                        W *oa = o + od + a * sda;                                  \
                        const W *xa = x + os + a * ssa;                            \
                        for (int64_t b = b0; b < b1; b++) oa[b] = xa[b * ssb];     \
                    }                                                              \
                }                                                                  \
            next_strided_row_(g, t, idx, &od, &os);                                \
        }                                                                          \
    } while (0)

ddpc_status ddpc_op_strided_copy(ddpc_buffer *dst, const ddpc_buffer *src, const ddpc_strided *geo) {
    CHECK(check_writable_(dst, "strided copy")); /* any dtype: it only moves elements */
    CHECK(check_like_(dst, src, -1, "strided copy", "the source"));
    if (geo->ndim < 0 || geo->ndim > DDPC_MAX_NDIM)
        return DDPC_ERROR(DDPC_ERR_ARG, "strided copy: %d dims (at most %d)", geo->ndim, DDPC_MAX_NDIM);
    /* A 0-d view is one element: a 1-d view of one. */
    ddpc_strided one = {.ndim = 1, .shape = {1}, .dst_offset = geo->dst_offset, .src_offset = geo->src_offset};
    const ddpc_strided *g = geo->ndim ? geo : &one;
    int nd = g->ndim;
    int64_t total = 1;
    for (int d = 0; d < nd; d++) {
        if (g->shape[d] < 0) return DDPC_ERROR(DDPC_ERR_ARG, "strided copy: negative dim %lld", (long long)g->shape[d]);
        if (g->shape[d] > 1 && g->dst_strides[d] == 0)
            return DDPC_ERROR(DDPC_ERR_ARG, "strided copy: the destination's stride is 0 over a dim of %lld",
                              (long long)g->shape[d]);
        total *= g->shape[d];
    }
    if (total == 0) return DDPC_OK;
    CHECK(check_view_(dst, g, g->dst_offset, g->dst_strides, "the destination"));
    CHECK(check_view_(src, g, g->src_offset, g->src_strides, "the source"));
    size_t w = ddpc_dtype_size(dst->dtype);
    if (dst->device != DDPC_CPU)
        DDPC_LAUNCH(dst->device, ddpc_k_strided_copy((char *)dst->data + g->dst_offset * (int64_t)w,
                                                     (const char *)src->data + g->src_offset * (int64_t)w, (int)w,
                                                     total, strided_geo_(g), stream));
    int t = transposed_dim_(g);
    if (t >= 0) BY_WORD(w, TILED_LOOP);
    else BY_WORD(w, STRIDED_LOOP);
    return DDPC_OK;
}

ddpc_status ddpc_op_dropout(ddpc_buffer *out, const ddpc_buffer *x, double p, uint64_t seed, uint64_t offset) {
    CHECK(check_out_(out, "dropout"));
    CHECK(check_like_(out, x, out->numel, "dropout", "the input"));
    if (!(p >= 0 && p <= 1)) return DDPC_ERROR(DDPC_ERR_ARG, "dropout: p must be in [0, 1], got %g", p);
    int64_t n = out->numel;
    if (n == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_dropout(out->data, x->data, p, seed, offset, out->dtype, n, stream));
    const float pf = (float)p;
    DDPC_FLOAT_TYPES(out->dtype, {
        T *o = out->data;
        const T *a = x->data;
        const T scale = p < 1 ? (T)(1.0 / (1.0 - p)) : (T)0;
        for (int64_t i = 0; i < n; i++)
            o[i] = ddpc_uniform_f32(ddpc_random_bits(seed, offset + (uint64_t)i)) >= pf ? a[i] * scale : (T)0;
    });
    return DDPC_OK;
}

/* ---- losses ------------------------------------------------------------------------- */

static ddpc_status check_loss_out_(const ddpc_buffer *out, const ddpc_buffer *ref, int64_t rows,
                                   ddpc_reduction reduction, const char *op) {
    if ((unsigned)reduction > DDPC_REDUCE_SUM) return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown reduction %d", op, reduction);
    int64_t want = reduction == DDPC_REDUCE_NONE ? rows : 1;
    return check_like_(ref, out, want, op, reduction == DDPC_REDUCE_NONE ? "the per-row loss" : "the loss");
}

/* The targets are int64 class indices [N] or, in the logits' dtype, class
 * probabilities [N, C]; the weights are NULL or [C] in the logits' dtype. */
static ddpc_status check_ce_(const ddpc_buffer *logits, const ddpc_buffer *target, const ddpc_buffer *weight,
                             const ddpc_ce_args *args, const char *op) {
    if ((unsigned)args->reduction > DDPC_REDUCE_SUM)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown reduction %d", op, args->reduction);
    if (logits->ndim != 2) return DDPC_ERROR(DDPC_ERR_ARG, "%s: logits must be [N, C], got %d dims", op, logits->ndim);
    int64_t N = logits->shape[0], C = logits->shape[1];
    if (target->device != logits->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the targets are on another device than the logits", op);
    if (target->dtype == logits->dtype) {
        if (target->numel != N * C)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: class probabilities must be [%lld, %lld], got %lld elements", op,
                              (long long)N, (long long)C, (long long)target->numel);
    } else if (target->dtype != DDPC_INT64 || target->numel != N) {
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: targets must be %lld int64 class indices, or class probabilities in "
                          "the logits' dtype", op, (long long)N);
    }
    if (weight) CHECK(check_like_(logits, weight, C, op, "the class weight"));
    if (!(args->label_smoothing >= 0 && args->label_smoothing <= 1))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: label_smoothing must be in [0, 1], got %g", op, args->label_smoothing);
    if (C == 0 && N > 0) return DDPC_ERROR(DDPC_ERR_ARG, "%s: logits have no classes", op);
    return DDPC_OK;
}

/* The statistics of a float32 row that softmax, log-softmax and cross
 * entropy take, in lanes the compiler vectorises: its maximum MX, exp(x -
 * MX) by fastmath.h's exp with x - MX carried exactly in two floats
 * (stored in e unless it is NULL), and their sum in double. Returns 0,
 * having written nothing, for a row with a NaN or a maximum that is not
 * finite, which the double loops answer as they always have. */
#define SOFTMAX_LANES 16
static DDPC_ROW_TARGETS int row_exp_sum_f32_(const float *x, int64_t C, float *e, double *mx_out, double *sum_out) {
    const int max_ = 1;
    float mx;
    int64_t c;
    if (C >= INT32_MAX) return 0;
    VEC_EXTREME(float, extreme_f32v_, extreme_i32v_, int32_t, x, C, mx, c);
    if (mx - mx != 0) return 0; /* NaN or infinite */
    double acc[SOFTMAX_LANES] = {0}, sum = 0;
    /* d + r = x - mx exactly (TwoSum; r is 0 where x is -inf), exp(d + r) = 2^n (1 + m). */
#define SOFTMAX_EXP(v, out)                                                        \
    do {                                                                           \
        float d_ = (v) - mx, b_ = d_ - (v);                                        \
        float r_ = ((v) - (d_ - b_)) + (-mx - b_);                                 \
        int32_t n_;                                                                \
        float m_ = ddpc_exp_reduce_f32_(d_, (v) == -INFINITY ? 0.0f : -r_, &n_);   \
        (out) = ddpc_ldexp_f32_(m_ + 1.0f, n_);                                    \
    } while (0)
    for (c = 0; c + SOFTMAX_LANES <= C; c += SOFTMAX_LANES)
        for (int k = 0; k < SOFTMAX_LANES; k++) {
            float v;
            SOFTMAX_EXP(x[c + k], v);
            if (e) e[c + k] = v;
            acc[k] += (double)v;
        }
    for (; c < C; c++) {
        float v;
        SOFTMAX_EXP(x[c], v);
        if (e) e[c] = v;
        sum += (double)v;
    }
#undef SOFTMAX_EXP
    for (int k = 0; k < SOFTMAX_LANES; k++) sum += acc[k];
    *mx_out = mx, *sum_out = sum;
    return 1;
}

/* A float32 row of softmax (log-softmax with take_log); 0 where row_exp_sum_f32_ gives 0. */
static DDPC_ROW_TARGETS int softmax_row_f32_(float *o, const float *x, int64_t C, int take_log) {
    double mx, sum;
    if (!row_exp_sum_f32_(x, C, take_log ? NULL : o, &mx, &sum)) return 0;
    if (take_log) {
        const double ls = log(sum);
        for (int64_t c = 0; c < C; c++) o[c] = (float)(((double)x[c] - mx) - ls);
    } else {
        const double inv = 1.0 / sum;
        for (int64_t c = 0; c < C; c++) o[c] = (float)((double)o[c] * inv);
    }
    return 1;
}

/* Row statistics in double: the row's max and log(sum(exp(x - max))).
 * log(sum(exp(x))) is their sum, but the two stay apart: with a max of 1e16
 * or more the sum would absorb the log; log-softmax is (x - max) - log. */
#define ROW_LSE(T, x, C, mx, ls)                                                   \
    do {                                                                           \
        double mx_ = (double)(x)[0];                                               \
        for (int64_t c_ = 1; c_ < (C); c_++) mx_ = (double)(x)[c_] > mx_ ? (double)(x)[c_] : mx_; \
        double s_ = 0;                                                             \
        for (int64_t c_ = 0; c_ < (C); c_++) s_ += exp((double)(x)[c_] - mx_);     \
        (mx) = mx_;                                                                \
        (ls) = log(s_);                                                            \
    } while (0)

static ddpc_status check_targets_(const int64_t *t, int64_t rows, int64_t C, int64_t ignore_index) {
    for (int64_t i = 0; i < rows; i++)
        if (t[i] != ignore_index && (t[i] < 0 || t[i] >= C))
            return DDPC_INDEX_ERROR(.op = DDPC_IX_CROSS_ENTROPY, .index = t[i], .bound = C, .at = i);
    return DDPC_OK;
}

/* Row i's log-softmax is (x[c] - MX) - LS; the rows of log-probabilities
 * (args->log_probs) are theirs already (MX = LS = 0). */
#define CE_ROW_STATS(T, xr, C, log_probs, MX, LS) CE_ROW_STATS_E(T, xr, C, log_probs, MX, LS, NULL, fast_)
/* The same, float32 rows in lanes; those also leave exp(x[c] - MX) in E
 * (unless NULL), and FAST (declared by the macro) says whether they did. */
#define CE_ROW_STATS_E(T, xr, C, log_probs, MX, LS, E, FAST)                       \
    int FAST = 0;                                                                  \
    do {                                                                           \
        double sum_ = 0;                                                           \
        (MX) = 0, (LS) = 0;                                                        \
        if (log_probs) break;                                                      \
        FAST = sizeof(T) == 4 && row_exp_sum_f32_((const float *)(xr), C, (E), &(MX), &sum_); \
        if (FAST) (LS) = log(sum_);                                                \
        else ROW_LSE(T, xr, C, MX, LS);                                            \
    } while (0);                                                                   \
    (void)(FAST)

/* The class weight of c (1 without weights). */
#define CE_W(w, c) ((w) ? (double)(w)[c] : 1.0)

/* What the mean divides by: the summed weights of the rows' target classes
 * (ignored rows count 0), or N for class probabilities. */
#define CE_DENOMINATOR(t, w, N, ignore, out)                                       \
    do {                                                                           \
        (out) = 0;                                                                 \
        for (int64_t i_ = 0; i_ < (N); i_++)                                       \
            (out) += !(t) ? 1.0 : (t)[i_] == (ignore) ? 0.0 : CE_W(w, (t)[i_]);    \
    } while (0)

/* The CUDA path: a scratch block of N + 1 doubles for the kernels' reductions, freed stream-ordered. */
static ddpc_status ce_cuda_(ddpc_buffer *out, ddpc_buffer *grad, const ddpc_buffer *gout, const ddpc_buffer *logits,
                           const ddpc_buffer *target, const ddpc_buffer *weight, const ddpc_ce_args *args) {
#ifdef DDPC_WITH_CUDA
    int device = logits->device;
    int64_t N = logits->shape[0], C = logits->shape[1];
    int probs = target->dtype != DDPC_INT64;
    ddpc_block *scratch = NULL;
    if (grad || args->reduction != DDPC_REDUCE_NONE)
        CHECK(ddpc_alloc(device, (size_t)(N + 1) * sizeof(double), 0, &scratch));
    void *stream;
    int prev = -1;
    ddpc_status st = DDPC_OK;
    ddpc_k_ce ce = {.logits = logits->data, .target = probs ? NULL : target->data, .probs = probs ? target->data : NULL,
                    .weight = weight ? weight->data : NULL, .rows = N, .classes = C,
                    .ignore_index = args->ignore_index, .smoothing = args->label_smoothing,
                    .reduction = args->reduction, .log_probs = args->log_probs, .dtype = logits->dtype};
    CHECKGOTO(ddpc_cuda_check_index_errors(device, DDPC_AT_LAUNCH), st, exit);
    CHECKGOTO(ddpc_cuda_index_check(device, DDPC_IX_CROSS_ENTROPY, &ce.check), st, exit);
    CHECKGOTO(ddpc_cuda_compute_stream(device, &stream), st, exit);
    CHECKGOTO(ddpc_cuda_enter(device, &prev), st, exit);
    if (grad)
        CUDACHECKGOTO((cudaError_t)ddpc_k_cross_entropy_backward(grad->data, scratch->ptr, gout->data, &ce, stream), st,
                      exit);
    else
        CUDACHECKGOTO((cudaError_t)ddpc_k_cross_entropy(out->data, scratch ? scratch->ptr : NULL, &ce, stream), st,
                      exit);
exit:
    if (prev >= 0) ddpc_cuda_leave(prev);
    /* The block goes back to the stream-ordered cache: later users queue after this kernel. */
    if (scratch) ddpc_free(scratch);
    return st;
#else
    (void)out, (void)grad, (void)gout, (void)target, (void)weight, (void)args;
    return ddpc_cuda_require(logits->device);
#endif
}

/* Host cross entropy runs rows in parallel (each row's terms in one
 * thread, the losses summed in row order after, so the result does not
 * depend on the threads). */
#define CE_GRAIN (1 << 16) /* elements */
typedef struct {
    const void *x, *g, *w, *prob;
    void *o;
    const int64_t *t;
    const ddpc_ce_args *args;
    ddpc_dtype dtype;
    int64_t C;
    double eps, off, denom, wsum;
    double *losses; /* the forward pass's, one per row */
} ce_job_;

static void ce_forward_rows_(void *ctx, int64_t lo, int64_t hi) {
    const ce_job_ *j = ctx;
    const ddpc_ce_args *args = j->args;
    const int64_t C = j->C, *t = j->t;
    const double eps = j->eps, off = j->off;
    DDPC_FLOAT_TYPES(j->dtype, {
        const T *x = j->x, *w = j->w, *prob = j->prob;
        for (int64_t i = lo; i < hi; i++) {
            const T *xr = x + i * C;
            double loss = 0, mx, ls;
            if (prob) { /* -sum_c w_c q_c log p_c with the smoothed probabilities q */
                CE_ROW_STATS(T, xr, C, args->log_probs, mx, ls);
                for (int64_t c = 0; c < C; c++)
                    loss -= CE_W(w, c) * ((1 - eps) * (double)prob[i * C + c] + off) * (((double)xr[c] - mx) - ls);
            } else if (t[i] != args->ignore_index) {
                CE_ROW_STATS(T, xr, C, args->log_probs, mx, ls);
                double smooth = 0;
                for (int64_t c = 0; eps > 0 && c < C; c++) smooth += CE_W(w, c) * (((double)xr[c] - mx) - ls);
                loss = -(1 - eps) * CE_W(w, t[i]) * (((double)xr[t[i]] - mx) - ls) - off * smooth;
            }
            j->losses[i] = loss;
        }
    });
}

ddpc_status ddpc_op_cross_entropy(ddpc_buffer *out, const ddpc_buffer *logits, const ddpc_buffer *target,
                                  const ddpc_buffer *weight, const ddpc_ce_args *args) {
    CHECK(check_out_(out, "cross entropy"));
    CHECK(check_ce_(logits, target, weight, args, "cross entropy"));
    int64_t N = logits->shape[0], C = logits->shape[1];
    CHECK(check_loss_out_(out, logits, N, args->reduction, "cross entropy"));
    if (out->device != DDPC_CPU) return ce_cuda_(out, NULL, NULL, logits, target, weight, args);
    const int64_t *t = target->dtype == DDPC_INT64 ? target->data : NULL;
    if (t) CHECK(check_targets_(t, N, C, args->ignore_index));
    ce_job_ job = {.x = logits->data, .w = weight ? weight->data : NULL, .prob = t ? NULL : target->data,
                   .t = t, .args = args, .dtype = out->dtype, .C = C, .eps = args->label_smoothing,
                   .off = args->label_smoothing / (double)C};
    job.losses = malloc((size_t)(N ? N : 1) * sizeof(double));
    if (!job.losses) return DDPC_ERROR(DDPC_ERR_OOM, "cross entropy: out of memory for %lld row losses", (long long)N);
    ddpc_parallel_for(N, C ? CE_GRAIN / C + 1 : N, ce_forward_rows_, &job);
    DDPC_FLOAT_TYPES(out->dtype, {
        const T *w = job.w;
        T *o = out->data;
        double total = 0, denom;
        CE_DENOMINATOR(t, w, N, args->ignore_index, denom);
        for (int64_t i = 0; i < N; i++) {
            if (args->reduction == DDPC_REDUCE_NONE) o[i] = (T)job.losses[i];
            total += job.losses[i];
        }
        if (args->reduction == DDPC_REDUCE_SUM) o[0] = (T)total;
        if (args->reduction == DDPC_REDUCE_MEAN) o[0] = (T)(total / denom);
    });
    free(job.losses);
    return DDPC_OK;
}

static void ce_backward_rows_(void *ctx, int64_t lo, int64_t hi) {
    const ce_job_ *j = ctx;
    const ddpc_ce_args *args = j->args;
    const int64_t C = j->C, *t = j->t;
    const double eps = j->eps, off = j->off;
    DDPC_FLOAT_TYPES(j->dtype, {
        const T *x = j->x, *g = j->g, *w = j->w, *prob = j->prob;
        T *o = j->o;
        for (int64_t i = lo; i < hi; i++) {
            const T *xr = x + i * C;
            T *row = o + i * C;
            if (t && t[i] == args->ignore_index) {
                for (int64_t c = 0; c < C; c++) row[c] = 0;
                continue;
            }
            double scale = args->reduction == DDPC_REDUCE_NONE ? (double)g[i] : (double)g[0] / j->denom;
            double mx, ls;
            CE_ROW_STATS_E(T, xr, C, args->log_probs, mx, ls, (float *)row, fast); /* exp(x - mx) in row */
            const double inv = fast ? exp(-ls) : 0;
            /* d/dx_c = softmax_c * (sum_k of what class k's log-probability is weighted by) - (that of c) */
            double mass = 0;
            if (prob) {
                for (int64_t c = 0; c < C; c++) mass += CE_W(w, c) * ((1 - eps) * (double)prob[i * C + c] + off);
            } else {
                mass = (1 - eps) * CE_W(w, t[i]) + off * j->wsum;
            }
            if (fast && !prob) { /* class indices: loops without a call, which vectorise */
                const double sm_scale = inv * mass * scale, own_scale = off * scale;
                if (w) for (int64_t c = 0; c < C; c++) row[c] = (T)((double)row[c] * sm_scale - own_scale * w[c]);
                else for (int64_t c = 0; c < C; c++) row[c] = (T)((double)row[c] * sm_scale - own_scale);
            } else {
                for (int64_t c = 0; c < C; c++) {
                    double sm = args->log_probs ? 0.0 : fast ? (double)row[c] * inv : exp(((double)xr[c] - mx) - ls);
                    double own = prob ? CE_W(w, c) * ((1 - eps) * (double)prob[i * C + c] + off) : off * CE_W(w, c);
                    row[c] = (T)(scale * (sm * mass - own));
                }
            }
            if (!prob) row[t[i]] -= (T)(scale * (1 - eps) * CE_W(w, t[i]));
        }
    });
}

ddpc_status ddpc_op_cross_entropy_backward(ddpc_buffer *glogits, const ddpc_buffer *gout, const ddpc_buffer *logits,
                                           const ddpc_buffer *target, const ddpc_buffer *weight,
                                           const ddpc_ce_args *args) {
    CHECK(check_out_(glogits, "cross entropy backward"));
    CHECK(check_ce_(logits, target, weight, args, "cross entropy backward"));
    CHECK(check_like_(glogits, logits, glogits->numel, "cross entropy backward", "the logits"));
    int64_t N = logits->shape[0], C = logits->shape[1];
    CHECK(check_loss_out_(gout, logits, N, args->reduction, "cross entropy backward"));
    if (glogits->numel == 0) return DDPC_OK;
    if (glogits->device != DDPC_CPU) return ce_cuda_(NULL, glogits, gout, logits, target, weight, args);
    const int64_t *t = target->dtype == DDPC_INT64 ? target->data : NULL;
    if (t) CHECK(check_targets_(t, N, C, args->ignore_index));
    ce_job_ job = {.x = logits->data, .g = gout->data, .w = weight ? weight->data : NULL,
                   .prob = t ? NULL : target->data, .o = glogits->data, .t = t, .args = args,
                   .dtype = glogits->dtype, .C = C, .eps = args->label_smoothing,
                   .off = args->label_smoothing / (double)C, .denom = 1};
    DDPC_FLOAT_TYPES(glogits->dtype, {
        const T *w = job.w;
        if (args->reduction == DDPC_REDUCE_MEAN) CE_DENOMINATOR(t, w, N, args->ignore_index, job.denom);
        for (int64_t c = 0; c < C; c++) job.wsum += CE_W(w, c);
    });
    ddpc_parallel_for(N, CE_GRAIN / C + 1, ce_backward_rows_, &job);
    return DDPC_OK;
}

static ddpc_status softmax_rows_(const ddpc_buffer *x, int64_t *rows, int64_t *cols, const char *op) {
    if (x->ndim < 1) return DDPC_ERROR(DDPC_ERR_ARG, "%s: needs at least one dim", op);
    *cols = x->shape[x->ndim - 1];
    *rows = *cols ? x->numel / *cols : 0;
    return DDPC_OK;
}

/* Rows of softmax (x the input) or of its gradient (x the output, gy its
 * gradient), in parallel. */
typedef struct {
    void *out;
    const void *x, *gy;
    int64_t C;
    int take_log;
    ddpc_dtype dtype;
} softmax_job_;

static void softmax_parallel_(ddpc_range_fn rows_fn, softmax_job_ *job, int64_t R) {
    const int64_t grain = job->dtype == DDPC_FLOAT32 ? UNARY_VECTOR_GRAIN : UNARY_GRAIN; /* elements */
    ddpc_parallel_for(R, (grain + job->C - 1) / job->C, rows_fn, job);
}

static void softmax_rows_range_(void *ctx, int64_t lo, int64_t hi) {
    const softmax_job_ *j = ctx;
    const int64_t C = j->C;
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t r = lo; r < hi; r++) {
            const T *xr = (const T *)j->x + r * C;
            T *o = (T *)j->out + r * C;
            if (sizeof(T) == 4 && softmax_row_f32_((float *)o, (const float *)xr, C, j->take_log)) continue;
            double mx, ls;
            ROW_LSE(T, xr, C, mx, ls);
            if (j->take_log) {
                for (int64_t c = 0; c < C; c++) o[c] = (T)(((double)xr[c] - mx) - ls);
            } else {
                for (int64_t c = 0; c < C; c++) o[c] = (T)exp(((double)xr[c] - mx) - ls);
            }
        }
    });
}

ddpc_status ddpc_op_softmax(ddpc_buffer *out, const ddpc_buffer *x, int take_log) {
    CHECK(check_out_(out, "softmax"));
    CHECK(check_like_(out, x, out->numel, "softmax", "the input"));
    int64_t R = 0, C = 0;
    CHECK(softmax_rows_(x, &R, &C, "softmax"));
    if (R * C == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_softmax(out->data, x->data, R, C, take_log, out->dtype, stream));
    softmax_job_ job = {.out = out->data, .x = x->data, .C = C, .take_log = take_log, .dtype = out->dtype};
    softmax_parallel_(softmax_rows_range_, &job, R);
    return DDPC_OK;
}

/* A float32 row of the gradient: the dot product in double lanes, exp
 * (log-softmax) by fastmath.h's, in loops that vectorise. */
static DDPC_ROW_TARGETS void softmax_backward_row_f32_(float *o, const float *g, const float *y, int64_t C,
                                                      int take_log) {
    double acc[SOFTMAX_LANES] = {0}, dot = 0;
    int64_t c = 0;
    if (take_log) {
        dot = ddpc_sum_f32(g, C);
        for (c = 0; c < C; c++) o[c] = (float)((double)g[c] - (double)ddpc_exp_f32(y[c]) * dot);
        return;
    }
    for (; c + SOFTMAX_LANES <= C; c += SOFTMAX_LANES)
        for (int k = 0; k < SOFTMAX_LANES; k++) acc[k] += (double)g[c + k] * (double)y[c + k];
    for (; c < C; c++) dot += (double)g[c] * (double)y[c];
    for (int k = 0; k < SOFTMAX_LANES; k++) dot += acc[k];
    for (c = 0; c < C; c++) o[c] = (float)((double)y[c] * ((double)g[c] - dot));
}

static void softmax_backward_rows_(void *ctx, int64_t lo, int64_t hi) {
    const softmax_job_ *j = ctx;
    const int64_t C = j->C;
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t r = lo; r < hi; r++) {
            const T *g = (const T *)j->gy + r * C, *yr = (const T *)j->x + r * C;
            T *o = (T *)j->out + r * C;
            if (sizeof(T) == 4) {
                softmax_backward_row_f32_((float *)o, (const float *)g, (const float *)yr, C, j->take_log);
                continue;
            }
            double dot = 0;
            if (j->take_log) {
                for (int64_t c = 0; c < C; c++) dot += (double)g[c];
                for (int64_t c = 0; c < C; c++) o[c] = (T)((double)g[c] - exp((double)yr[c]) * dot);
            } else {
                for (int64_t c = 0; c < C; c++) dot += (double)g[c] * (double)yr[c];
                for (int64_t c = 0; c < C; c++) o[c] = (T)((double)yr[c] * ((double)g[c] - dot));
            }
        }
    });
}

ddpc_status ddpc_op_softmax_backward(ddpc_buffer *gx, const ddpc_buffer *gy, const ddpc_buffer *y, int take_log) {
    CHECK(check_out_(gx, "softmax backward"));
    CHECK(check_like_(gx, gy, gx->numel, "softmax backward", "the output gradient"));
    CHECK(check_like_(gx, y, gx->numel, "softmax backward", "the output"));
    int64_t R = 0, C = 0;
    CHECK(softmax_rows_(y, &R, &C, "softmax backward"));
    if (R * C == 0) return DDPC_OK;
    if (gx->device != DDPC_CPU)
        DDPC_LAUNCH(gx->device, ddpc_k_softmax_backward(gx->data, gy->data, y->data, R, C, take_log, gx->dtype, stream));
    softmax_job_ job = {.out = gx->data, .x = y->data, .gy = gy->data, .C = C, .take_log = take_log,
                        .dtype = gx->dtype};
    softmax_parallel_(softmax_backward_rows_, &job, R);
    return DDPC_OK;
}

/* The pos_weight of BCE_LOGITS (one per element) or NULL; no other kind takes one. */
static ddpc_status check_pointwise_loss_(ddpc_loss_kind kind, const ddpc_buffer *x, const ddpc_buffer *y,
                                         const ddpc_buffer *pos_weight, double p, const char *op) {
    if ((unsigned)kind >= DDPC_NLOSS) return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown loss %d", op, (int)kind);
    CHECK(check_like_(x, y, x->numel, op, "the target"));
    if (pos_weight && kind != DDPC_LOSS_BCE_LOGITS)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: only binary cross entropy with logits takes a pos_weight", op);
    if (pos_weight) CHECK(check_like_(x, pos_weight, x->numel, op, "pos_weight"));
    if ((kind == DDPC_LOSS_SMOOTH_L1 || kind == DDPC_LOSS_HUBER) && !(p > 0))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s must be positive, got %g", op,
                          kind == DDPC_LOSS_HUBER ? "delta" : "beta", p);
    return DDPC_OK;
}

/* Runs the statements with K bound to `kind` as a constant: the inlined
 * formulas of pointwise_loss.h then fold to that kind's, and the loops
 * vectorise. */
#define LOSS_DISPATCH(kind, ...)                                                   \
    switch (kind) {                                                                \
    case DDPC_LOSS_MSE: { enum { K = DDPC_LOSS_MSE }; __VA_ARGS__; } break;        \
    case DDPC_LOSS_L1: { enum { K = DDPC_LOSS_L1 }; __VA_ARGS__; } break;          \
    case DDPC_LOSS_SMOOTH_L1: { enum { K = DDPC_LOSS_SMOOTH_L1 }; __VA_ARGS__; } break; \
    case DDPC_LOSS_HUBER: { enum { K = DDPC_LOSS_HUBER }; __VA_ARGS__; } break;    \
    case DDPC_LOSS_BCE: { enum { K = DDPC_LOSS_BCE }; __VA_ARGS__; } break;        \
    case DDPC_LOSS_BCE_LOGITS: { enum { K = DDPC_LOSS_BCE_LOGITS }; __VA_ARGS__; } break; \
    case DDPC_LOSS_KL_DIV: { enum { K = DDPC_LOSS_KL_DIV }; __VA_ARGS__; } break;  \
    default: { enum { K = DDPC_LOSS_KL_DIV_LOG_TARGET }; __VA_ARGS__; } break;     \
    }

ddpc_status ddpc_op_loss(ddpc_loss_kind kind, ddpc_buffer *out, const ddpc_buffer *x, const ddpc_buffer *y,
                         const ddpc_buffer *pos_weight, double p, ddpc_reduction reduction) {
    CHECK(check_out_(out, "loss"));
    CHECK(check_like_(out, x, -1, "loss", "the input"));
    CHECK(check_pointwise_loss_(kind, x, y, pos_weight, p, "loss"));
    int64_t n = x->numel;
    CHECK(check_loss_out_(out, x, n, reduction, "loss"));
    if (n == 0 && reduction == DDPC_REDUCE_NONE) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_loss(kind, out->data, x->data, y->data, pos_weight ? pos_weight->data : NULL,
                                             p, n, reduction, out->dtype, stream));
    DDPC_FLOAT_TYPES(out->dtype, {
        T *o = out->data;
        const T *a = x->data, *b = y->data, *w = pos_weight ? pos_weight->data : NULL;
        for (int64_t i = 0; kind == DDPC_LOSS_BCE && i < n; i++) {
            int bad_input = !(a[i] >= 0 && a[i] <= 1);
            if (bad_input || !(b[i] >= 0 && b[i] <= 1))
                return DDPC_ERROR(DDPC_ERR_ARG, "binary cross entropy: all elements of the %s should be between 0 "
                                  "and 1, element %lld is %g", bad_input ? "input" : "target", (long long)i,
                                  (double)(bad_input ? a[i] : b[i]));
        }
        double acc = 0;
        LOSS_DISPATCH(kind, {
            if (reduction == DDPC_REDUCE_NONE)
                for (int64_t i = 0; i < n; i++) o[i] = (T)ddpc_loss_value(K, a[i], b[i], w ? w[i] : (T)1, p);
            else
                for (int64_t i = 0; i < n; i++) acc += ddpc_loss_value(K, a[i], b[i], w ? w[i] : (T)1, p);
        });
        if (reduction != DDPC_REDUCE_NONE) o[0] = (T)(reduction == DDPC_REDUCE_MEAN ? acc / (double)n : acc);
    });
    return DDPC_OK;
}

ddpc_status ddpc_op_loss_backward(ddpc_loss_kind kind, int wrt_target, ddpc_buffer *g, const ddpc_buffer *gout,
                                  const ddpc_buffer *x, const ddpc_buffer *y, const ddpc_buffer *pos_weight, double p,
                                  ddpc_reduction reduction) {
    CHECK(check_out_(g, "loss backward"));
    CHECK(check_like_(g, x, g->numel, "loss backward", "the input"));
    CHECK(check_pointwise_loss_(kind, x, y, pos_weight, p, "loss backward"));
    int64_t n = g->numel;
    CHECK(check_loss_out_(gout, g, n, reduction, "loss backward"));
    if (n == 0) return DDPC_OK;
    if (g->device != DDPC_CPU)
        DDPC_LAUNCH(g->device, ddpc_k_loss_backward(kind, wrt_target, g->data, gout->data, x->data, y->data,
                                                    pos_weight ? pos_weight->data : NULL, p, n, reduction, g->dtype,
                                                    stream));
    DDPC_FLOAT_TYPES(g->dtype, {
        T *o = g->data;
        const T *a = x->data, *b = y->data, *w = pos_weight ? pos_weight->data : NULL, *go = gout->data;
        const double s = reduction == DDPC_REDUCE_MEAN ? (double)go[0] / (double)n : (double)go[0];
        LOSS_DISPATCH(kind, {
            if (reduction == DDPC_REDUCE_NONE)
                for (int64_t i = 0; i < n; i++)
                    o[i] = (T)(go[i] * ddpc_loss_grad(K, wrt_target, a[i], b[i], w ? w[i] : (T)1, p));
            else
                for (int64_t i = 0; i < n; i++)
                    o[i] = (T)(s * ddpc_loss_grad(K, wrt_target, a[i], b[i], w ? w[i] : (T)1, p));
        });
    });
    return DDPC_OK;
}

/* ---- Python bindings -------------------------------------------------------------- */

/* A Buffer argument that may be None (NULL). */
static int arg_optional_buffer_(PyObject *o, ddpc_buffer **out) {
    if (o == Py_None) {
        *out = NULL;
        return 1;
    }
    return ddpc_arg_buffer(o, out);
}

static PyObject *py_unary(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *x;
    double p = 0, q = 0;
    if (!ddpc_parse_args(args, "iO&O&|dd:unary", &op, ddpc_arg_buffer, &out, ddpc_arg_buffer, &x, &p, &q)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_unary((ddpc_unary_op)op, out, x, p, q));
}

static PyObject *py_unary_backward(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *gx, *gy, *saved;
    double p = 0, q = 0;
    if (!ddpc_parse_args(args, "iO&O&O&|dd:unary_backward", &op, ddpc_arg_buffer, &gx, ddpc_arg_buffer, &gy,
                         ddpc_arg_buffer, &saved, &p, &q))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gx), ddpc_op_unary_backward((ddpc_unary_op)op, gx, gy, saved, p, q));
}

static PyObject *py_binary_rows(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *a, *row;
    if (!ddpc_parse_args(args, "iO&O&O&:binary_rows", &op, ddpc_arg_bool_buffer, &out, ddpc_arg_bool_buffer, &a,
                         ddpc_arg_bool_buffer, &row))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_binary_rows((ddpc_binary_op)op, out, a, row));
}

static PyObject *py_where(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *cond, *a, *b;
    if (!ddpc_parse_args(args, "O&O&O&O&:where", ddpc_arg_bool_buffer, &out, ddpc_arg_bool_buffer, &cond,
                         ddpc_arg_bool_buffer, &a, ddpc_arg_bool_buffer, &b))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_where(out, cond, a, b));
}

static PyObject *py_special_binary(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *a, *b;
    if (!ddpc_parse_args(args, "iO&O&O&:special_binary", &op, ddpc_arg_buffer, &out, ddpc_arg_buffer, &a,
                         ddpc_arg_buffer, &b))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_special_binary(op, out, a, b));
}

static PyObject *py_binary_broadcast(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *a, *b;
    if (!ddpc_parse_args(args, "iO&O&O&:binary_broadcast", &op, ddpc_arg_bool_buffer, &out, ddpc_arg_bool_buffer,
                         &a, ddpc_arg_bool_buffer, &b))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_binary_broadcast((ddpc_binary_op)op, out, a, b));
}

static PyObject *py_sum_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *a;
    int dim;
    if (!ddpc_parse_args(args, "O&O&i:sum_dim", ddpc_arg_buffer, &out, ddpc_arg_buffer, &a, &dim)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_sum_dim(out, a, dim));
}

static PyObject *py_var_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *var, *mean, *a;
    int dim;
    double correction;
    if (!ddpc_parse_args(args, "O&O&O&id:var_dim", ddpc_arg_buffer, &var, ddpc_arg_buffer, &mean, ddpc_arg_buffer,
                         &a, &dim, &correction))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_var_dim(var, mean, a, dim, correction));
}

static PyObject *py_extreme_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *values, *indices, *a;
    int dim, want_max;
    if (!ddpc_parse_args(args, "O&O&O&ip:extreme_dim", ddpc_arg_buffer, &values, ddpc_arg_buffer, &indices,
                         ddpc_arg_buffer, &a, &dim, &want_max))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_extreme_dim(values, indices, a, dim, want_max));
}

static PyObject *py_put_dim(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *g, *indices;
    int dim;
    if (!ddpc_parse_args(args, "O&O&O&i:put_dim", ddpc_arg_buffer, &out, ddpc_arg_buffer, &g, ddpc_arg_buffer,
                         &indices, &dim))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_put_dim(out, g, indices, dim));
}

static PyObject *py_index_rows(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *table, *idx;
    if (!ddpc_parse_args(args, "O&O&O&:index_rows", ddpc_arg_any_buffer, &out, ddpc_arg_any_buffer, &table,
                         ddpc_arg_buffer, &idx))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_index_rows(out, table, idx));
}

static PyObject *py_put_rows(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *table, *rows, *idx;
    if (!ddpc_parse_args(args, "O&O&O&:put_rows", ddpc_arg_any_buffer, &table, ddpc_arg_any_buffer, &rows,
                         ddpc_arg_buffer, &idx))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(rows), ddpc_op_put_rows(table, rows, idx));
}

static PyObject *py_index_add_rows(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gtable, *g, *idx;
    if (!ddpc_parse_args(args, "O&O&O&:index_add_rows", ddpc_arg_buffer, &gtable, ddpc_arg_buffer, &g,
                         ddpc_arg_buffer, &idx))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(g), ddpc_op_index_add_rows(gtable, g, idx));
}

static PyObject *py_layer_norm(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *y, *mean, *rstd, *x, *w, *b;
    double eps;
    if (!ddpc_parse_args(args, "O&O&O&O&O&O&d:layer_norm", ddpc_arg_buffer, &y, ddpc_arg_buffer, &mean,
                         ddpc_arg_buffer, &rstd, ddpc_arg_buffer, &x, ddpc_arg_buffer, &w, ddpc_arg_buffer, &b, &eps))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x), ddpc_op_layer_norm(y, mean, rstd, x, w, b, eps));
}

static PyObject *py_layer_norm_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *gw, *gb, *gy, *x, *mean, *rstd, *w;
    if (!ddpc_parse_args(args, "O&O&O&O&O&O&O&O&:layer_norm_backward", ddpc_arg_buffer, &gx, ddpc_arg_buffer, &gw,
                         ddpc_arg_buffer, &gb, ddpc_arg_buffer, &gy, ddpc_arg_buffer, &x, ddpc_arg_buffer, &mean,
                         ddpc_arg_buffer, &rstd, ddpc_arg_buffer, &w))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x), ddpc_op_layer_norm_backward(gx, gw, gb, gy, x, mean, rstd, w));
}

static PyObject *py_transpose(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *a;
    if (!ddpc_parse_args(args, "O&O&:transpose", ddpc_arg_any_buffer, &out, ddpc_arg_any_buffer, &a)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_transpose(out, a));
}

/* `n` ints from a sequence into `out` (>= 0 unless `signed_ok`). */
static int parse_dims_(PyObject *seq, int n, int64_t *out, int signed_ok, const char *what) {
    PyObject *fast = PySequence_Fast(seq, "strided_copy: the shape and strides are sequences of ints");
    if (!fast) return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "strided_copy: %s has %zd entries for %d dims", what,
                     PySequence_Fast_GET_SIZE(fast), n);
        rc = -1;
    }
    for (int d = 0; rc == 0 && d < n; d++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, d));
        if (v == -1 && PyErr_Occurred()) rc = -1;
        else if (v < 0 && !signed_ok)
            PyErr_Format(PyExc_ValueError, "strided_copy: negative entry %lld in %s", v, what), rc = -1;
        else out[d] = v;
    }
    Py_DECREF(fast);
    return rc;
}

static PyObject *py_strided_copy(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *dst, *src;
    PyObject *shape, *dst_strides, *src_strides;
    long long dst_offset, src_offset;
    ddpc_strided geo = {0};
    if (!ddpc_parse_args(args, "O&LOO&LOO:strided_copy", ddpc_arg_any_buffer, &dst, &dst_offset, &dst_strides,
                         ddpc_arg_any_buffer, &src, &src_offset, &src_strides, &shape))
        return NULL;
    Py_ssize_t nd = PySequence_Size(shape);
    if (nd < 0) return NULL;
    if (nd > DDPC_MAX_NDIM) return PyErr_Format(PyExc_ValueError, "strided_copy: %zd dims (at most %d)", nd, DDPC_MAX_NDIM);
    geo.ndim = (int)nd, geo.dst_offset = dst_offset, geo.src_offset = src_offset;
    if (parse_dims_(shape, geo.ndim, geo.shape, 0, "the shape") ||
        parse_dims_(dst_strides, geo.ndim, geo.dst_strides, 1, "the destination strides") ||
        parse_dims_(src_strides, geo.ndim, geo.src_strides, 1, "the source strides"))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(dst), ddpc_op_strided_copy(dst, src, &geo));
}

static PyObject *py_dropout(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *x;
    double p;
    unsigned long long seed, offset;
    if (!ddpc_parse_args(args, "O&O&dKK:dropout", ddpc_arg_buffer, &out, ddpc_arg_buffer, &x, &p, &seed, &offset))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_dropout(out, x, p, seed, offset));
}

static PyObject *py_cross_entropy(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *logits, *target, *weight;
    long long ignore;
    int red, log_probs;
    double eps;
    if (!ddpc_parse_args(args, "O&O&O&O&Ldip:cross_entropy", ddpc_arg_buffer, &out, ddpc_arg_buffer, &logits,
                         ddpc_arg_buffer, &target, arg_optional_buffer_, &weight, &ignore, &eps, &red, &log_probs))
        return NULL;
    ddpc_ce_args ce = {.ignore_index = ignore, .label_smoothing = eps, .reduction = (ddpc_reduction)red,
                       .log_probs = log_probs};
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(logits), ddpc_op_cross_entropy(out, logits, target, weight, &ce));
}

static PyObject *py_cross_entropy_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *gout, *logits, *target, *weight;
    long long ignore;
    int red, log_probs;
    double eps;
    if (!ddpc_parse_args(args, "O&O&O&O&O&Ldip:cross_entropy_backward", ddpc_arg_buffer, &gx, ddpc_arg_buffer, &gout,
                         ddpc_arg_buffer, &logits, ddpc_arg_buffer, &target, arg_optional_buffer_, &weight, &ignore,
                         &eps, &red, &log_probs))
        return NULL;
    ddpc_ce_args ce = {.ignore_index = ignore, .label_smoothing = eps, .reduction = (ddpc_reduction)red,
                       .log_probs = log_probs};
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(logits),
                      ddpc_op_cross_entropy_backward(gx, gout, logits, target, weight, &ce));
}

static PyObject *py_softmax(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *x;
    int take_log;
    if (!ddpc_parse_args(args, "O&O&p:softmax", ddpc_arg_buffer, &out, ddpc_arg_buffer, &x, &take_log)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x), ddpc_op_softmax(out, x, take_log));
}

static PyObject *py_softmax_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *gy, *y;
    int take_log;
    if (!ddpc_parse_args(args, "O&O&O&p:softmax_backward", ddpc_arg_buffer, &gx, ddpc_arg_buffer, &gy,
                         ddpc_arg_buffer, &y, &take_log))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(y), ddpc_op_softmax_backward(gx, gy, y, take_log));
}

static PyObject *py_loss(PyObject *m, PyObject *args) {
    (void)m;
    int kind, red;
    ddpc_buffer *out, *x, *y, *pos_weight;
    double p;
    if (!ddpc_parse_args(args, "iO&O&O&O&di:loss", &kind, ddpc_arg_buffer, &out, ddpc_arg_buffer, &x, ddpc_arg_buffer,
                         &y, arg_optional_buffer_, &pos_weight, &p, &red))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x),
                      ddpc_op_loss((ddpc_loss_kind)kind, out, x, y, pos_weight, p, (ddpc_reduction)red));
}

static PyObject *py_loss_backward(PyObject *m, PyObject *args) {
    (void)m;
    int kind, wrt_target, red;
    ddpc_buffer *g, *gout, *x, *y, *pos_weight;
    double p;
    if (!ddpc_parse_args(args, "ipO&O&O&O&O&di:loss_backward", &kind, &wrt_target, ddpc_arg_buffer, &g,
                         ddpc_arg_buffer, &gout, ddpc_arg_buffer, &x, ddpc_arg_buffer, &y, arg_optional_buffer_,
                         &pos_weight, &p, &red))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x), ddpc_op_loss_backward((ddpc_loss_kind)kind, wrt_target, g, gout, x, y,
                                                                   pos_weight, p, (ddpc_reduction)red));
}

static PyObject *py_set_num_threads(PyObject *m, PyObject *arg) {
    (void)m;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    ddpc_set_num_threads((int)n);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyLong_FromLong(ddpc_get_num_threads());
}

static PyMethodDef nn_methods[] = {
    {"set_num_threads", py_set_num_threads, METH_O, "threads for ddpc's host loops (< 1: the default)"},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "threads for ddpc's host loops"},
    {"unary", py_unary, METH_VARARGS,
     "unary(op, out, x, p=0, q=0): 0 relu 1 gelu 2 tanh 3 sigmoid 4 exp 5 log 6 pow(x, p) 7 leaky_relu(x, p) "
     "8 elu(x, p) 9 silu 10 softplus(x, p, q) 11 mish 12 hardtanh(x, p, q) 13 hardswish 14 hardsigmoid "
     "15 abs 16 sqrt 17 rsqrt 18 square 19 sin 20 cos 21 log1p 22 expm1 23 erf 24 reciprocal 25 sign 26 floor "
     "27 ceil 28 trunc 29 round(x, decimals p) 30 clamp(x, p, q) 31 isnan 32 isinf 33 isfinite"},
    {"unary_backward", py_unary_backward, METH_VARARGS,
     "unary_backward(op, gx, gy, saved, p=0, q=0): saved is y for tanh sigmoid exp sqrt rsqrt expm1 reciprocal, "
     "x for the others"},
    {"binary_rows", py_binary_rows, METH_VARARGS, "binary_rows(op, out, a, row): a op row, row repeated over a"},
    {"binary_broadcast", py_binary_broadcast, METH_VARARGS, "binary_broadcast(op, out, a, b): numpy's broadcasting"},
    {"special_binary", py_special_binary, METH_VARARGS,
     "special_binary(op, out, a, b): 0 gammainc 1 gammaincc 2 zeta 3-6 chebyshev_polynomial_t/u/v/w "
     "7-10 shifted_chebyshev_polynomial_t/u/v/w 11 hermite_polynomial_h 12 hermite_polynomial_he "
     "13 laguerre_polynomial_l 14 legendre_polynomial_p, with numpy's broadcasting"},
    {"where", py_where, METH_VARARGS, "where(out, cond, a, b): cond ? a : b with numpy's broadcasting; cond uint8"},
    {"sum_dim", py_sum_dim, METH_VARARGS, "sum_dim(out, a, dim)"},
    {"var_dim", py_var_dim, METH_VARARGS, "var_dim(var, mean, a, dim, correction)"},
    {"extreme_dim", py_extreme_dim, METH_VARARGS,
     "extreme_dim(values, indices, a, dim, want_max): max or min along dim and where it first is"},
    {"put_dim", py_put_dim, METH_VARARGS, "put_dim(out, g, indices, dim): zeros, g put at indices along dim"},
    {"index_rows", py_index_rows, METH_VARARGS, "index_rows(out, table, idx): out[k] = table[idx[k]]"},
    {"put_rows", py_put_rows, METH_VARARGS, "put_rows(table, rows, idx): table[idx[k]] = rows[k]"},
    {"index_add_rows", py_index_add_rows, METH_VARARGS, "index_add_rows(gtable, g, idx): gtable[idx[k]] += g[k]"},
    {"layer_norm", py_layer_norm, METH_VARARGS, "layer_norm(y, mean, rstd, x, w, b, eps) over the last dim"},
    {"layer_norm_backward", py_layer_norm_backward, METH_VARARGS,
     "layer_norm_backward(gx, gw, gb, gy, x, mean, rstd, w)"},
    {"transpose", py_transpose, METH_VARARGS, "transpose(out, a): 2-d"},
    {"strided_copy", py_strided_copy, METH_VARARGS,
     "strided_copy(dst, dst_offset, dst_strides, src, src_offset, src_strides, shape): dst's view = src's view"},
    {"dropout", py_dropout, METH_VARARGS, "dropout(out, x, p, seed, offset)"},
    {"cross_entropy", py_cross_entropy, METH_VARARGS,
     "cross_entropy(out, logits, target, weight, ignore_index, label_smoothing, reduction, log_probs): reduction 0 "
     "none 1 mean 2 sum; target int64 classes or class probabilities; log_probs: logits are log-probabilities (nll)"},
    {"cross_entropy_backward", py_cross_entropy_backward, METH_VARARGS,
     "cross_entropy_backward(glogits, gout, logits, target, weight, ignore_index, label_smoothing, reduction, "
     "log_probs)"},
    {"softmax", py_softmax, METH_VARARGS, "softmax(out, x, take_log): (log-)softmax over the last dim"},
    {"softmax_backward", py_softmax_backward, METH_VARARGS, "softmax_backward(gx, gy, y, take_log): y is the output"},
    {"loss", py_loss, METH_VARARGS,
     "loss(kind, out, x, y, pos_weight, p, reduction): 0 mse 1 l1 2 smooth_l1(beta p) 3 huber(delta p) 4 bce "
     "5 bce_with_logits 6 kl_div 7 kl_div(log_target)"},
    {"loss_backward", py_loss_backward, METH_VARARGS,
     "loss_backward(kind, wrt_target, g, gout, x, y, pos_weight, p, reduction): d loss / d x (or y)"},
    {NULL, NULL, 0, NULL},
};

int ddpc_nn_register(PyObject *module) {
    if (PyModule_AddFunctions(module, nn_methods) < 0) return -1;
    if (ddpc_gemm_register(module) < 0 || ddpc_optim_register(module) < 0) return -1;
    return 0;
}
