/* Reduction loops (see reduce.h). Written so the compiler vectorises them:
 * one pass per source over a contiguous destination. */
#include "reduce.h"

#include <stdint.h>
#include <string.h>

const char *ddpc_redop_name(ddpc_redop op) {
    static const char *names[DDPC_NREDOPS] = {"sum", "avg", "min", "max", "prod", "bor", "band", "bxor"};
    return op >= 0 && op < DDPC_NREDOPS ? names[op] : "?";
}

int ddpc_redop_on(ddpc_redop op, ddpc_dtype dt) {
    if (dt != DDPC_BOOL) return op;
    if (op == DDPC_RED_AVG) return -1;
    return op == DDPC_RED_SUM ? DDPC_RED_MAX : op == DDPC_RED_PROD ? DDPC_RED_MIN : op;
}

/* Integer arithmetic goes through the unsigned type so overflow wraps. */
#define SUM_(T, U, a, b) ((T)((U)(a) + (U)(b)))
#define PROD_(T, U, a, b) ((T)((U)(a) * (U)(b)))
/* A NaN from any rank wins, as in torch.minimum / torch.maximum (b != b only for NaN). */
#define MIN_(T, U, a, b) ((b) < (a) || (b) != (b) ? (b) : (a))
#define MAX_(T, U, a, b) ((b) > (a) || (b) != (b) ? (b) : (a))

/* An integer average, exact: the sum in type W, wide enough for it, then
 * divided (truncating, as C and NCCL divide integers). */
#define AVERAGE_(T, W, d, srcs, nsrc, n, divisor)                                            \
    for (size_t i = 0; i < (n); i++) {                                                        \
        W acc = 0;                                                                            \
        for (int j = 0; j < (nsrc); j++) acc += ((const T *)(srcs)[j])[i];                    \
        (d)[i] = (T)(acc / (divisor));                                                        \
    }

#define DEFINE_NATIVE_(T, U, NAME)                                                           \
    static void reduce_##NAME##_(ddpc_redop op, T *d, const void *const *srcs, int nsrc,     \
                                 size_t n, int divisor) {                                     \
        if ((const void *)d != srcs[0]) memcpy(d, srcs[0], n * sizeof(T));                   \
        for (int j = 1; j < nsrc; j++) {                                                      \
            const T *restrict s = srcs[j];                                                    \
            switch (op) {                                                                     \
            case DDPC_RED_PROD: for (size_t i = 0; i < n; i++) d[i] = PROD_(T, U, d[i], s[i]); break; \
            case DDPC_RED_MIN: for (size_t i = 0; i < n; i++) d[i] = MIN_(T, U, d[i], s[i]); break;   \
            case DDPC_RED_MAX: for (size_t i = 0; i < n; i++) d[i] = MAX_(T, U, d[i], s[i]); break;   \
            default: for (size_t i = 0; i < n; i++) d[i] = SUM_(T, U, d[i], s[i]); break;             \
            }                                                                                 \
        }                                                                                     \
        if (divisor > 1)                                                                      \
            for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] / (T)divisor);                     \
    }

DEFINE_NATIVE_(float, float, f32)
DEFINE_NATIVE_(double, double, f64)
DEFINE_NATIVE_(int32_t, uint32_t, i32)
DEFINE_NATIVE_(int64_t, uint64_t, i64)
DEFINE_NATIVE_(uint8_t, uint8_t, u8)

/* float16 / bfloat16: tiles converted to float, reduced, rounded once. */
#define TILE_ 256

static void reduce_half_(ddpc_dtype dt, ddpc_redop op, uint16_t *d, const void *const *srcs, int nsrc, size_t n,
                         int divisor) {
    float acc[TILE_], x[TILE_];
    for (size_t base = 0; base < n; base += TILE_) {
        size_t m = n - base < TILE_ ? n - base : TILE_;
        ddpc_16bit_to_float(dt, (const uint16_t *)srcs[0] + base, acc, m);
        for (int j = 1; j < nsrc; j++) {
            ddpc_16bit_to_float(dt, (const uint16_t *)srcs[j] + base, x, m);
            reduce_f32_(op, acc, (const void *const[]){acc, x}, 2, m, 1);
        }
        if (divisor > 1)
            for (size_t i = 0; i < m; i++) acc[i] /= (float)divisor;
        ddpc_float_to_16bit(dt, acc, d + base, m);
    }
}

static void reduce_bits_(ddpc_redop op, uint8_t *d, const void *const *srcs, int nsrc, size_t n) {
    if ((const void *)d != srcs[0]) memcpy(d, srcs[0], n);
    for (int j = 1; j < nsrc; j++) {
        const uint8_t *restrict s = srcs[j];
        switch (op) {
        case DDPC_RED_BAND: for (size_t i = 0; i < n; i++) d[i] &= s[i]; break;
        case DDPC_RED_BXOR: for (size_t i = 0; i < n; i++) d[i] ^= s[i]; break;
        default: for (size_t i = 0; i < n; i++) d[i] |= s[i]; break;
        }
    }
}

void ddpc_reduce(ddpc_dtype dt, ddpc_redop op, void *dst, const void *const *srcs, int nsrc, size_t count,
                 int divisor) {
    if (count == 0) return;
    if (op == DDPC_RED_BOR || op == DDPC_RED_BAND || op == DDPC_RED_BXOR) {
        reduce_bits_(op, dst, srcs, nsrc, count * ddpc_dtype_size(dt));
        return;
    }
    if (op == DDPC_RED_SUM && divisor > 1) { /* an average of integers: their sum may not fit their type */
        switch (dt) {
        case DDPC_INT32: AVERAGE_(int32_t, int64_t, (int32_t *)dst, srcs, nsrc, count, divisor); return;
        case DDPC_INT64: AVERAGE_(int64_t, __int128, (int64_t *)dst, srcs, nsrc, count, divisor); return;
        case DDPC_UINT8: AVERAGE_(uint8_t, int64_t, (uint8_t *)dst, srcs, nsrc, count, divisor); return;
        default: break;
        }
    }
    switch (dt) {
    case DDPC_FLOAT32: reduce_f32_(op, dst, srcs, nsrc, count, divisor); break;
    case DDPC_FLOAT64: reduce_f64_(op, dst, srcs, nsrc, count, divisor); break;
    case DDPC_INT32: reduce_i32_(op, dst, srcs, nsrc, count, divisor); break;
    case DDPC_INT64: reduce_i64_(op, dst, srcs, nsrc, count, divisor); break;
    case DDPC_UINT8:
    case DDPC_BOOL: /* bytes of 0 and 1; pycomm.c makes sums MAX and products MIN */
        reduce_u8_(op, dst, srcs, nsrc, count, divisor);
        break;
    case DDPC_FLOAT16:
    case DDPC_BFLOAT16: reduce_half_(dt, op, dst, srcs, nsrc, count, divisor); break;
    /* Complex elements as pairs of their parts: right for sum and average,
     * which are all the collectives allow on them (pycomm.c refuses the rest). */
    case DDPC_COMPLEX64: reduce_f32_(op, dst, srcs, nsrc, 2 * count, divisor); break;
    case DDPC_COMPLEX128: reduce_f64_(op, dst, srcs, nsrc, 2 * count, divisor); break;
    default: break;
    }
}
