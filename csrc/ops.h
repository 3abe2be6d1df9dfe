/* The op table: one checked entry point per op, dispatching to host loops or
 * to the CUDA launchers in kernels/ on the buffer's compute stream.
 * Arguments are checked here, once, before any dispatch. */
#ifndef DDPC_OPS_H
#define DDPC_OPS_H

#include "buffer.h"
#include "index_error.h"
#include "scalar_ops.h"

/* The comparisons write 1 where they hold and 0 elsewhere, in the operands'
 * dtype. MAX and MIN are PyTorch's maximum and minimum: a NaN in either
 * operand gives NaN. The bitwise ops (BITAND to RRSHIFT) take integer dtypes
 * only; the shifts are kernels/scalar_ops.h's (PyTorch's results for every
 * count), RLSHIFT and RRSHIFT shift the second operand by the first. FMOD,
 * REMAINDER, DIV_TRUNC and DIV_FLOOR are kernels/scalar_ops.h's division
 * with rounding (PyTorch's fmod, remainder and div with rounding_mode), on
 * every dtype; on integers a zero divisor gives 0 instead of trapping.
 * NEXTAFTER is C's nextafter (the next number after x towards y) and takes
 * float32 and float64 only: computed through float it would be wrong for the
 * 16-bit floats, and PyTorch has none for integers. */
typedef enum {
    DDPC_ADD = 0, DDPC_SUB, DDPC_MUL, DDPC_DIV, DDPC_RSUB, DDPC_RDIV,
    DDPC_EQ, DDPC_NE, DDPC_LT, DDPC_LE, DDPC_GT, DDPC_GE, DDPC_MAX, DDPC_MIN, DDPC_POWER, DDPC_RPOWER,
    DDPC_BITAND, DDPC_BITOR, DDPC_BITXOR, DDPC_LSHIFT, DDPC_RSHIFT, DDPC_RLSHIFT, DDPC_RRSHIFT,
    DDPC_FMOD, DDPC_REMAINDER, DDPC_DIV_TRUNC, DDPC_DIV_FLOOR, DDPC_NEXTAFTER, DDPC_NBINARY
} ddpc_binary_op;
/* kernels/dispatch.cuh's binary_apply switches on these numbers, as do the
 * op codes of python/ddpc/tensor.py. */
_Static_assert(DDPC_ADD == 0 && DDPC_SUB == 1 && DDPC_MUL == 2 && DDPC_DIV == 3 && DDPC_RSUB == 4 && DDPC_RDIV == 5 &&
                   DDPC_EQ == 6 && DDPC_NE == 7 && DDPC_LT == 8 && DDPC_LE == 9 && DDPC_GT == 10 && DDPC_GE == 11 &&
                   DDPC_MAX == 12 && DDPC_MIN == 13 && DDPC_POWER == 14 && DDPC_RPOWER == 15 && DDPC_BITAND == 16 &&
                   DDPC_BITOR == 17 && DDPC_BITXOR == 18 && DDPC_LSHIFT == 19 && DDPC_RSHIFT == 20 &&
                   DDPC_RLSHIFT == 21 && DDPC_RRSHIFT == 22 && DDPC_FMOD == 23 && DDPC_REMAINDER == 24 &&
                   DDPC_DIV_TRUNC == 25 && DDPC_DIV_FLOOR == 26 && DDPC_NEXTAFTER == 27 && DDPC_NBINARY == 28,
               "a binary op was added or moved: renumber the cases of binary_apply in kernels/dispatch.cuh");

/* A known op, and no bitwise op on a float dtype (PyTorch has none either). */
ddpc_status ddpc_check_binary_op(ddpc_binary_op op, ddpc_dtype dtype, const char *what);
/* `shape` of `ndim` dims written as "(2, 3)" into buf of n bytes (cut short if
 * it does not fit); returns buf. */
const char *ddpc_shape_str(const int64_t *shape, int ndim, char *buf, size_t n);
/* b is float32 or float64, of ref's dtype and on ref's device ("what" names
 * b in the error, "op" the operation). */
ddpc_status ddpc_check_float_like(const ddpc_buffer *b, const ddpc_buffer *ref, const char *op, const char *what);

/* Whether x, an element expression of the loops below, has a float type (a constant). */
#define DDPC_IS_FLOAT_EXPR(x) _Generic((x) + 0, float: 1, double: 1, default: 0)

/* name_f32, name_f64 or name_int of kernels/scalar_ops.h applied to (x, y), by x's type. */
#define DDPC_BY_ELEMENT_TYPE(name, x, y)                                           \
    _Generic((x) + 0, float: name##_f32, double: name##_f64, default: name##_int)((x), (y))

/* `n` elements of `o = x op y`, where o, x and y are expressions of the index
 * k_; the switch is outside the loops, so each loop vectorises. MAX and MIN
 * reach x + y only when a comparison failed on a NaN, which the sum passes on.
 * Integers divide through kernels/scalar_ops.h's ddpc_int_div (INT_MIN / -1
 * wraps instead of trapping). POWER (x ** y) and RPOWER (y ** x) go through
 * double for floats and are computed in wrapping integers for integer types,
 * as PyTorch's. The bitwise ops work on the values widened to int64 (compiled
 * for float types too, where the callers refuse them). */
#define DDPC_BINARY_LOOPS(op, n, o, x, y)                                          \
    switch (op) {                                                                  \
    case DDPC_ADD: for (int64_t k_ = 0; k_ < (n); k_++) o = x + y; break;           \
    case DDPC_SUB: for (int64_t k_ = 0; k_ < (n); k_++) o = x - y; break;           \
    case DDPC_MUL: for (int64_t k_ = 0; k_ < (n); k_++) o = x * y; break;           \
    case DDPC_DIV:                                                                 \
        for (int64_t k_ = 0; k_ < (n); k_++)                                       \
            if (DDPC_IS_FLOAT_EXPR(x)) o = x / y;                                  \
            else o = ddpc_int_div((int64_t)(x), (int64_t)(y));                     \
        break;                                                                     \
    case DDPC_RSUB: for (int64_t k_ = 0; k_ < (n); k_++) o = y - x; break;          \
    case DDPC_RDIV:                                                                \
        for (int64_t k_ = 0; k_ < (n); k_++)                                       \
            if (DDPC_IS_FLOAT_EXPR(x)) o = y / x;                                  \
            else o = ddpc_int_div((int64_t)(y), (int64_t)(x));                     \
        break;                                                                     \
    case DDPC_EQ: for (int64_t k_ = 0; k_ < (n); k_++) o = x == y; break;           \
    case DDPC_NE: for (int64_t k_ = 0; k_ < (n); k_++) o = x != y; break;           \
    case DDPC_LT: for (int64_t k_ = 0; k_ < (n); k_++) o = x < y; break;            \
    case DDPC_LE: for (int64_t k_ = 0; k_ < (n); k_++) o = x <= y; break;           \
    case DDPC_GT: for (int64_t k_ = 0; k_ < (n); k_++) o = x > y; break;            \
    case DDPC_GE: for (int64_t k_ = 0; k_ < (n); k_++) o = x >= y; break;           \
    case DDPC_MAX: for (int64_t k_ = 0; k_ < (n); k_++) o = x < y ? y : (x >= y ? x : x + y); break; \
    case DDPC_MIN: for (int64_t k_ = 0; k_ < (n); k_++) o = x > y ? y : (x <= y ? x : x + y); break; \
    case DDPC_POWER:                                                               \
        for (int64_t k_ = 0; k_ < (n); k_++)                                       \
            if (DDPC_IS_FLOAT_EXPR(x)) o = pow((double)(x), (double)(y));          \
            else o = ddpc_int_pow((int64_t)(x), (int64_t)(y));                     \
        break;                                                                     \
    case DDPC_RPOWER:                                                              \
        for (int64_t k_ = 0; k_ < (n); k_++)                                       \
            if (DDPC_IS_FLOAT_EXPR(x)) o = pow((double)(y), (double)(x));          \
            else o = ddpc_int_pow((int64_t)(y), (int64_t)(x));                     \
        break;                                                                     \
    case DDPC_BITAND: for (int64_t k_ = 0; k_ < (n); k_++) o = (int64_t)(x) & (int64_t)(y); break; \
    case DDPC_BITOR: for (int64_t k_ = 0; k_ < (n); k_++) o = (int64_t)(x) | (int64_t)(y); break; \
    case DDPC_BITXOR: for (int64_t k_ = 0; k_ < (n); k_++) o = (int64_t)(x) ^ (int64_t)(y); break; \
    case DDPC_LSHIFT:                                                              \
        for (int64_t k_ = 0; k_ < (n); k_++) o = ddpc_shift_left((int64_t)(x), (int64_t)(y), 8 * (int)sizeof(x)); \
        break;                                                                     \
    case DDPC_RSHIFT:                                                              \
        for (int64_t k_ = 0; k_ < (n); k_++) o = ddpc_shift_right((int64_t)(x), (int64_t)(y), 8 * (int)sizeof(x)); \
        break;                                                                     \
    case DDPC_RLSHIFT:                                                             \
        for (int64_t k_ = 0; k_ < (n); k_++) o = ddpc_shift_left((int64_t)(y), (int64_t)(x), 8 * (int)sizeof(x)); \
        break;                                                                     \
    case DDPC_FMOD: for (int64_t k_ = 0; k_ < (n); k_++) o = DDPC_BY_ELEMENT_TYPE(ddpc_fmod, x, y); break; \
    case DDPC_REMAINDER:                                                           \
        for (int64_t k_ = 0; k_ < (n); k_++) o = DDPC_BY_ELEMENT_TYPE(ddpc_remainder, x, y); \
        break;                                                                     \
    case DDPC_DIV_TRUNC:                                                           \
        for (int64_t k_ = 0; k_ < (n); k_++) o = DDPC_BY_ELEMENT_TYPE(ddpc_div_trunc, x, y); \
        break;                                                                     \
    case DDPC_DIV_FLOOR:                                                           \
        for (int64_t k_ = 0; k_ < (n); k_++) o = DDPC_BY_ELEMENT_TYPE(ddpc_div_floor, x, y); \
        break;                                                                     \
    case DDPC_NEXTAFTER:                                                           \
        for (int64_t k_ = 0; k_ < (n); k_++) o = DDPC_BY_ELEMENT_TYPE(ddpc_nextafter, x, y); \
        break;                                                                     \
    default:                                                                       \
        for (int64_t k_ = 0; k_ < (n); k_++) o = ddpc_shift_right((int64_t)(y), (int64_t)(x), 8 * (int)sizeof(x)); \
        break;                                                                     \
    }
typedef enum { DDPC_RAND_UNIFORM = 0, DDPC_RAND_NORMAL, DDPC_RAND_INT } ddpc_random_kind;

ddpc_status ddpc_op_fill(ddpc_buffer *dst, double value);
/* Bool elementwise arithmetic runs the uint8 loops on the bytes (0 or 1):
 * ddpc_bool_bytes is a shallow copy of a buffer's header that says uint8 for
 * bool (no reference of its own: it lives only as long as the call), and
 * ddpc_bool_result then makes every non-zero byte of a bool result 1, so that
 * True + True is True, as in PyTorch. */
ddpc_buffer ddpc_bool_bytes(const ddpc_buffer *b);
ddpc_status ddpc_bool_result(ddpc_buffer *out, ddpc_status st);
/* value + imag i; imag must be 0 unless dst is complex. */
ddpc_status ddpc_op_fill_complex(ddpc_buffer *dst, double value, double imag);
/* Same dtype and element count, any pair of devices. */
ddpc_status ddpc_op_copy(ddpc_buffer *dst, const ddpc_buffer *src, int non_blocking);
/* Same device and element count, any pair of dtypes. */
ddpc_status ddpc_op_cast(ddpc_buffer *dst, const ddpc_buffer *src);
/* out = a op b, elementwise; all three the same dtype, device and count. */
ddpc_status ddpc_op_binary(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b);
/* out = a op s (RSUB: s - a, RDIV: s / a). */
ddpc_status ddpc_op_scalar(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, double s);
/* out (one element; float dtypes keep theirs, integers give int64) = sum of a. */
ddpc_status ddpc_op_sum(ddpc_buffer *out, const ddpc_buffer *a);
/* Host sums of n values in double, in lanes the compiler vectorises (a
 * single running sum waits out each addition's latency). */
double ddpc_sum_f32(const float *x, int64_t n);
double ddpc_sum_f64(const double *x, int64_t n);
/* The sum of (x - c)^2 over n values, the same way. */
double ddpc_sqdev_f32(const float *x, int64_t n, double c);
double ddpc_sqdev_f64(const double *x, int64_t n, double c);
/* The sum of n float32 (f32) or float64 values, or with `center` given the
 * sum of their squared deviations from *center, in fixed parts summed on the
 * cores and then in order, so the result does not depend on the threads. */
double ddpc_sum_parallel(const void *x, int64_t n, int f32, const double *center);
/* out = x with NaN, +inf and -inf replaced by nan, posinf and neginf (each
 * rounded to the dtype once); float dtypes, one pass. */
ddpc_status ddpc_op_nan_to_num(ddpc_buffer *out, const ddpc_buffer *x, double nan, double posinf, double neginf);
/* Counter-based random numbers: element i of a draw with (seed, offset) is a
 * pure function of (seed, offset + i), so host and device give the same values. */
ddpc_status ddpc_op_random(ddpc_buffer *dst, ddpc_random_kind kind, uint64_t seed, uint64_t offset, double a, double b);
/* A uniformly random permutation of 0..n-1 (int64, host) from (seed, offset). */
ddpc_status ddpc_op_randperm(ddpc_buffer *dst, uint64_t seed, uint64_t offset);

/* Launches `call` (a kernels.h launcher using the local `stream`) on the
 * device's compute stream and returns its status. An index out of range
 * that an earlier kernel recorded on the device is raised instead, as soon
 * as the host sees it (a read of host memory: launches stay asynchronous),
 * rather than at the next synchronisation only. */
#ifdef DDPC_WITH_CUDA
#define DDPC_LAUNCH(device, call)                                                  \
    do {                                                                           \
        void *stream;                                                              \
        int prev_;                                                                 \
        CHECK(ddpc_cuda_check_index_errors((device), DDPC_AT_LAUNCH));             \
        CHECK(ddpc_cuda_compute_stream((device), &stream));                        \
        CHECK(ddpc_cuda_enter((device), &prev_));                                  \
        cudaError_t launched_ = (cudaError_t)(call);                               \
        ddpc_cuda_leave(prev_);                                                    \
        CUDACHECK(launched_);                                                      \
        return DDPC_OK;                                                            \
    } while (0)
/* DDPC_LAUNCH of a kernel that takes indices: `call` also uses the local
 * `index_check`, where the kernel reports an index out of range as op `op`
 * (a ddpc_index_op of index_error.h). */
#define DDPC_LAUNCH_INDEXED(device, op, call)                                      \
    do {                                                                           \
        ddpc_k_index_check index_check;                                            \
        CHECK(ddpc_cuda_index_check((device), (op), &index_check));                \
        DDPC_LAUNCH(device, call);                                                 \
    } while (0)
#else
#define DDPC_LAUNCH(device, call) return ddpc_cuda_require(device)
#define DDPC_LAUNCH_INDEXED(device, op, call) return ddpc_cuda_require(device)
#endif

/* Binding helpers shared by the op files: Buffer argument converters for
 * PyArg_ParseTuple's O&, and the release-the-GIL-and-return macro.
 * ddpc_arg_buffer refuses complex buffers with a TypeError that names the op
 * (the name after ':' in the format of the last ddpc_parse_args or
 * ddpc_parse_args_kw, the form that also takes keywords), so an op whose
 * loops know only real dtypes never sees one; ddpc_arg_any_buffer takes every
 * dtype, for the ops that handle complex ones. */
int ddpc_parse_args(PyObject *args, const char *format, ...);
int ddpc_parse_args_kw(PyObject *args, PyObject *kwds, const char *format, char **kwlist, ...);
int ddpc_arg_buffer(PyObject *o, ddpc_buffer **out);
/* Also bool buffers, for the ops that handle them (comparisons' results,
 * conditions, masks, the elementwise arithmetic of bool with bool). */
int ddpc_arg_bool_buffer(PyObject *o, ddpc_buffer **out);
int ddpc_arg_any_buffer(PyObject *o, ddpc_buffer **out);
/* Releases the GIL around `call` (a ddpc_status expression) when the work is
 * big enough for the switch to pay, then returns None or raises. */
#define DDPC_RUN_RELEASED(nbytes, call)                                            \
    do {                                                                           \
        ddpc_status st_;                                                           \
        if ((nbytes) >= (1 << 16)) {                                               \
            Py_BEGIN_ALLOW_THREADS st_ = (call);                                   \
            Py_END_ALLOW_THREADS                                                   \
        } else {                                                                   \
            st_ = (call);                                                          \
        }                                                                          \
        if (st_ != DDPC_OK) return ddpc_raise(st_);                                \
        Py_RETURN_NONE;                                                            \
    } while (0)

int ddpc_ops_register(PyObject *module);

#endif
