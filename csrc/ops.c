/* Op entry points: argument checks, then host loops or CUDA launchers.
 *
 * Host loops over 16-bit floats convert through float in chunks so the inner
 * loops stay simple enough for the compiler to vectorise. */
#include "ops.h"

#include <math.h>
#include <stdarg.h>

#include "fastmath.h"
#include "kernels.h"
#include "module.h"
#include "parallel.h"
#include "sampler.h"

#define CHUNK 1024

/* ---- argument checks (the only place they live) ------------------------------- */

static ddpc_status check_writable_(const ddpc_buffer *b, const char *op) {
    if (b->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the destination is read-only", op);
    return DDPC_OK;
}

static const char *devname_(int device, char *buf, size_t n) {
    if (device == DDPC_CPU) return "cpu";
    snprintf(buf, n, "cuda:%d", device);
    return buf;
}

static ddpc_status check_pair_(const ddpc_buffer *a, const ddpc_buffer *b, const char *op, int same_dtype, int same_device) {
    char d1[16], d2[16];
    if (a->numel != b->numel)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: element counts differ (%lld vs %lld)", op, (long long)a->numel,
                          (long long)b->numel);
    if (same_dtype && a->dtype != b->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: dtypes differ (%s vs %s)", op, ddpc_dtype_name(a->dtype),
                          ddpc_dtype_name(b->dtype));
    if (same_device && a->device != b->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: buffers are on different devices (%s vs %s)", op,
                          devname_(a->device, d1, sizeof d1), devname_(b->device, d2, sizeof d2));
    return DDPC_OK;
}


/* ---- host element access through double/float chunks ------------------------- */

static void load_f64_(const void *src, ddpc_dtype dt, int64_t i0, int64_t n, double *out) {
    switch (dt) {
#define L(T, D, EXPR) case D: { const T *s = (const T *)src + i0; for (int64_t i = 0; i < n; i++) out[i] = (EXPR); } break;
        L(float, DDPC_FLOAT32, s[i])
        L(double, DDPC_FLOAT64, s[i])
        L(int32_t, DDPC_INT32, (double)s[i])
        L(int64_t, DDPC_INT64, (double)s[i])
        L(uint8_t, DDPC_UINT8, (double)s[i])
        L(uint8_t, DDPC_BOOL, (double)s[i])
#undef L
    case DDPC_FLOAT16:
    case DDPC_BFLOAT16: {
        float f[CHUNK]; /* n <= CHUNK */
        ddpc_16bit_to_float(dt, (const uint16_t *)src + i0, f, (size_t)n);
        for (int64_t i = 0; i < n; i++) out[i] = f[i];
    } break;
    default: break;
    }
}

static void store_f64_(void *dst, ddpc_dtype dt, int64_t i0, int64_t n, const double *in) {
    switch (dt) {
#define S(T, D, EXPR) case D: { T *d = (T *)dst + i0; for (int64_t i = 0; i < n; i++) { double v = in[i]; d[i] = (EXPR); } } break;
        S(float, DDPC_FLOAT32, (float)v)
        S(double, DDPC_FLOAT64, v)
        S(int32_t, DDPC_INT32, (int32_t)(int64_t)v)
        S(int64_t, DDPC_INT64, (int64_t)v)
        S(uint8_t, DDPC_UINT8, (uint8_t)(int64_t)v)
        S(uint8_t, DDPC_BOOL, (uint8_t)(v != 0))
#undef S
    case DDPC_FLOAT16:
    case DDPC_BFLOAT16: {
        float f[CHUNK]; /* n <= CHUNK */
        for (int64_t i = 0; i < n; i++) f[i] = (float)in[i];
        ddpc_float_to_16bit(dt, f, (uint16_t *)dst + i0, (size_t)n);
    } break;
    default: break;
    }
}

/* Integer elements through int64, which holds every one of them exactly
 * (double holds only 53 bits). Stores keep the low bits, as C and PyTorch do. */
static void load_i64_(const void *src, ddpc_dtype dt, int64_t i0, int64_t n, int64_t *out) {
    switch (dt) {
#define L(T, D) case D: { const T *s = (const T *)src + i0; for (int64_t i = 0; i < n; i++) out[i] = s[i]; } break;
        L(int32_t, DDPC_INT32)
        L(int64_t, DDPC_INT64)
        L(uint8_t, DDPC_UINT8)
        L(uint8_t, DDPC_BOOL)
#undef L
    default: break;
    }
}

static void store_i64_(void *dst, ddpc_dtype dt, int64_t i0, int64_t n, const int64_t *in) {
    switch (dt) {
#define S(T, D) case D: { T *d = (T *)dst + i0; for (int64_t i = 0; i < n; i++) d[i] = (T)in[i]; } break;
        S(int32_t, DDPC_INT32)
        S(int64_t, DDPC_INT64)
        S(uint8_t, DDPC_UINT8)
#undef S
    case DDPC_BOOL: {
        uint8_t *d = (uint8_t *)dst + i0;
        for (int64_t i = 0; i < n; i++) d[i] = in[i] != 0;
    } break;
    default: break;
    }
}

/* ---- fill, copy, cast ---------------------------------------------------------- */

/* Elements as (real, imaginary) pairs of doubles, for casts to and from the
 * complex dtypes: real dtypes load with imaginary part 0 and store the real part. */
static void load_pairs_(const void *src, ddpc_dtype dt, int64_t i0, int64_t n, double *re, double *im) {
    if (dt == DDPC_COMPLEX64 || dt == DDPC_COMPLEX128) {
        for (int64_t i = 0; i < n; i++) {
            int64_t k = 2 * (i0 + i);
            re[i] = dt == DDPC_COMPLEX64 ? ((const float *)src)[k] : ((const double *)src)[k];
            im[i] = dt == DDPC_COMPLEX64 ? ((const float *)src)[k + 1] : ((const double *)src)[k + 1];
        }
        return;
    }
    load_f64_(src, dt, i0, n, re);
    for (int64_t i = 0; i < n; i++) im[i] = 0;
}

static void store_pairs_(void *dst, ddpc_dtype dt, int64_t i0, int64_t n, const double *re, const double *im) {
    if (dt == DDPC_COMPLEX64) {
        float *d = (float *)dst + 2 * i0;
        for (int64_t i = 0; i < n; i++) d[2 * i] = (float)re[i], d[2 * i + 1] = (float)im[i];
    } else if (dt == DDPC_COMPLEX128) {
        double *d = (double *)dst + 2 * i0;
        for (int64_t i = 0; i < n; i++) d[2 * i] = re[i], d[2 * i + 1] = im[i];
    } else if (dt == DDPC_BOOL) { /* z != 0 */
        uint8_t *d = (uint8_t *)dst + i0;
        for (int64_t i = 0; i < n; i++) d[i] = re[i] != 0 || im[i] != 0;
    } else {
        store_f64_(dst, dt, i0, n, re);
    }
}

ddpc_status ddpc_op_fill(ddpc_buffer *dst, double value) { return ddpc_op_fill_complex(dst, value, 0); }

ddpc_status ddpc_op_fill_complex(ddpc_buffer *dst, double value, double imag) {
    CHECK(check_writable_(dst, "fill"));
    if (imag != 0 && !ddpc_dtype_is_complex(dst->dtype))
        return DDPC_ERROR(DDPC_ERR_TYPE, "fill: a complex value needs a complex dtype, got %s",
                          ddpc_dtype_name(dst->dtype));
    if (dst->numel == 0) return DDPC_OK;
    if (dst->device != DDPC_CPU) {
        if (ddpc_dtype_is_complex(dst->dtype))
            DDPC_LAUNCH(dst->device, ddpc_k_complex_fill(dst->data, dst->dtype, dst->numel, value, imag, stream));
        if (dst->dtype == DDPC_BOOL) /* its bytes, 0 or 1 */
            DDPC_LAUNCH(dst->device, ddpc_k_fill(dst->data, DDPC_UINT8, dst->numel, value != 0, stream));
        DDPC_LAUNCH(dst->device, ddpc_k_fill(dst->data, dst->dtype, dst->numel, value, stream));
    }
    double re[1] = {value}, im[1] = {imag};
    store_pairs_(dst->data, dst->dtype, 0, 1, re, im);
    size_t item = ddpc_dtype_size(dst->dtype);
    /* Doubling memcpy: each pass copies everything written so far. */
    size_t done = item, total = ddpc_buffer_nbytes(dst);
    while (done < total) {
        size_t n = done < total - done ? done : total - done;
        memcpy((char *)dst->data + done, dst->data, n);
        done += n;
    }
    return DDPC_OK;
}

#ifdef DDPC_WITH_CUDA
/* Records a pending copy to or from host buffer `b` in the block that owns its memory. */
static ddpc_status record_host_use_(const ddpc_buffer *b, int device, void *stream) {
    while (!b->block && b->base && ddpc_buffer_check(b->base)) b = (const ddpc_buffer *)b->base;
    return b->block ? ddpc_block_record_use(b->block, device, stream) : DDPC_OK;
}
#endif

/* One core streams a large copy at well under the memory's bandwidth: copies
 * of at least COPY_SPLIT_BYTES between buffers that do not overlap are split
 * across the cores in pieces of at least that size, on 4 KiB boundaries. */
#define COPY_SPLIT_BYTES ((int64_t)1 << 21)
#define COPY_PAGE 4096

typedef struct {
    char *dst;
    const char *src;
} copy_job_;

static void copy_pages_(void *ctx, int64_t lo, int64_t hi) {
    const copy_job_ *j = ctx;
    memcpy(j->dst + lo * COPY_PAGE, j->src + lo * COPY_PAGE, (size_t)(hi - lo) * COPY_PAGE);
}

static void host_copy_(char *dst, const char *src, size_t nbytes) {
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    int apart = d + nbytes <= s || s + nbytes <= d;
    if (!apart || (int64_t)nbytes < 2 * COPY_SPLIT_BYTES) {
        memmove(dst, src, nbytes);
        return;
    }
    copy_job_ job = {dst, src};
    int64_t pages = (int64_t)(nbytes / COPY_PAGE);
    ddpc_parallel_for(pages, COPY_SPLIT_BYTES / COPY_PAGE, copy_pages_, &job);
    size_t done = (size_t)pages * COPY_PAGE;
    memcpy(dst + done, src + done, nbytes - done);
}

ddpc_status ddpc_op_copy(ddpc_buffer *dst, const ddpc_buffer *src, int non_blocking) {
    CHECK(check_writable_(dst, "copy"));
    CHECK(check_pair_(dst, src, "copy", 1, 0));
    size_t nbytes = ddpc_buffer_nbytes(dst);
    if (nbytes == 0 || dst->data == src->data) return DDPC_OK;
    if (dst->device == DDPC_CPU && src->device == DDPC_CPU) {
        host_copy_(dst->data, src->data, nbytes);
        return DDPC_OK;
    }
#ifdef DDPC_WITH_CUDA
    int dev = dst->device != DDPC_CPU ? dst->device : src->device, prev;
    void *stream;
    CHECK(ddpc_cuda_compute_stream(dev, &stream));
    if (dst->device != DDPC_CPU && src->device != DDPC_CPU && dst->device != src->device) {
        /* Peer copy on the destination's stream, after the source's pending work;
         * the source's stream then waits for the copy, since the source's memory
         * may be freed and handed out again there. */
        void *src_stream;
        CHECK(ddpc_cuda_compute_stream(src->device, &src_stream));
        CHECK(ddpc_cuda_stream_after(dst->device, stream, src->device, src_stream));
        CHECK(ddpc_cuda_enter(dst->device, &prev));
        cudaError_t e = cudaMemcpyPeerAsync(dst->data, dst->device, src->data, src->device, nbytes, (cudaStream_t)stream);
        ddpc_cuda_leave(prev);
        CUDACHECK(e);
        return ddpc_cuda_stream_after(src->device, src_stream, dst->device, stream);
    }
    const ddpc_buffer *host = src->device == DDPC_CPU ? src : dst->device == DDPC_CPU ? dst : NULL;
    CHECK(ddpc_cuda_enter(dev, &prev));
    cudaError_t e = cudaMemcpyAsync(dst->data, src->data, nbytes, cudaMemcpyDefault, (cudaStream_t)stream);
    /* A blocking copy to or from the host is over when it returns, whichever
     * way it goes (from pinned memory cudaMemcpyAsync does not wait for the
     * read either). A copy within the device never blocks, as in PyTorch:
     * only the stream it is queued on, which every later op is queued on
     * too, reads its result. A non-blocking one out of or into pinned
     * memory marks the memory busy until the copy is done, so it is not
     * recycled under the copy: freed, the block waits for it before going
     * back to the pinned cache. */
    int wait = host && !non_blocking;
    if (e == cudaSuccess && wait) e = cudaStreamSynchronize((cudaStream_t)stream);
    ddpc_cuda_leave(prev);
    CUDACHECK(e);
    if (wait) CHECK(ddpc_cuda_check_index_errors(dev, "when a blocking copy next waited for the device"));
    if (non_blocking && host) CHECK(record_host_use_(host, dev, stream));
    return DDPC_OK;
#else
    (void)non_blocking;
    return ddpc_cuda_require(dst->device != DDPC_CPU ? dst->device : src->device);
#endif
}

/* The common host casts in one pass the compiler vectorises (the general
 * loops below go through a chunk of doubles or int64s): to and between the
 * float dtypes, and floats to bool (v != 0, so NaN is true, as in PyTorch).
 * Returns 0 for a pair it does not take. */
#define CAST_PAIR(S, D) ((int)(S) * 64 + (int)(D))
#define CAST_DIRECT(TS, TD, EXPR)                                                  \
    do {                                                                           \
        const TS *s_ = src->data;                                                  \
        TD *d_ = dst->data;                                                        \
        for (int64_t i = 0; i < n; i++) {                                          \
            TS v = s_[i];                                                          \
            d_[i] = (EXPR);                                                        \
        }                                                                          \
        return 1;                                                                  \
    } while (0)

static DDPC_ROW_TARGETS int cast_direct_(ddpc_buffer *dst, const ddpc_buffer *src) {
    const int64_t n = dst->numel;
    switch (CAST_PAIR(src->dtype, dst->dtype)) {
    case CAST_PAIR(DDPC_FLOAT32, DDPC_FLOAT64): CAST_DIRECT(float, double, (double)v);
    case CAST_PAIR(DDPC_FLOAT64, DDPC_FLOAT32): CAST_DIRECT(double, float, (float)v);
    case CAST_PAIR(DDPC_FLOAT32, DDPC_BOOL): CAST_DIRECT(float, uint8_t, (uint8_t)(v != 0));
    case CAST_PAIR(DDPC_FLOAT64, DDPC_BOOL): CAST_DIRECT(double, uint8_t, (uint8_t)(v != 0));
    case CAST_PAIR(DDPC_INT64, DDPC_FLOAT32): CAST_DIRECT(int64_t, float, (float)v);
    case CAST_PAIR(DDPC_INT64, DDPC_FLOAT64): CAST_DIRECT(int64_t, double, (double)v);
    case CAST_PAIR(DDPC_INT32, DDPC_FLOAT32): CAST_DIRECT(int32_t, float, (float)v);
    case CAST_PAIR(DDPC_INT32, DDPC_FLOAT64): CAST_DIRECT(int32_t, double, (double)v);
    case CAST_PAIR(DDPC_UINT8, DDPC_FLOAT32): case CAST_PAIR(DDPC_BOOL, DDPC_FLOAT32):
        CAST_DIRECT(uint8_t, float, (float)v);
    case CAST_PAIR(DDPC_UINT8, DDPC_FLOAT64): case CAST_PAIR(DDPC_BOOL, DDPC_FLOAT64):
        CAST_DIRECT(uint8_t, double, (double)v);
    default: return 0;
    }
}

ddpc_status ddpc_op_cast(ddpc_buffer *dst, const ddpc_buffer *src) {
    CHECK(check_writable_(dst, "cast"));
    CHECK(check_pair_(dst, src, "cast", 0, 1));
    if (dst->numel == 0) return DDPC_OK;
    if (dst->dtype == src->dtype) return ddpc_op_copy(dst, src, 0);
    int cplx = ddpc_dtype_is_complex(dst->dtype) || ddpc_dtype_is_complex(src->dtype);
    if (dst->device != DDPC_CPU && cplx && dst->dtype == DDPC_BOOL) /* Python casts complex z as z != 0 */
        return DDPC_ERROR(DDPC_ERR_TYPE, "cast: %s to bool is not supported on CUDA devices; compare with 0",
                          ddpc_dtype_name(src->dtype));
    if (dst->device != DDPC_CPU && cplx)
        DDPC_LAUNCH(dst->device, ddpc_k_complex_cast(dst->data, dst->dtype, src->data, src->dtype, dst->numel, stream));
    if (dst->device != DDPC_CPU)
        DDPC_LAUNCH(dst->device, ddpc_k_cast(dst->data, dst->dtype, src->data, src->dtype, dst->numel, stream));
    if (cplx) { /* a complex source gives its real part, as PyTorch's casts (which warn in Python) */
        double re[CHUNK], im[CHUNK];
        for (int64_t i = 0; i < dst->numel; i += CHUNK) {
            int64_t n = dst->numel - i < CHUNK ? dst->numel - i : CHUNK;
            load_pairs_(src->data, src->dtype, i, n, re, im);
            store_pairs_(dst->data, dst->dtype, i, n, re, im);
        }
        return DDPC_OK;
    }
    if (cast_direct_(dst, src)) return DDPC_OK;
    int ints = !ddpc_dtype_is_float(dst->dtype) && !ddpc_dtype_is_float(src->dtype);
    for (int64_t i = 0; i < dst->numel; i += CHUNK) {
        int64_t n = dst->numel - i < CHUNK ? dst->numel - i : CHUNK;
        if (ints) {
            int64_t tmp[CHUNK];
            load_i64_(src->data, src->dtype, i, n, tmp);
            store_i64_(dst->data, dst->dtype, i, n, tmp);
        } else {
            double tmp[CHUNK];
            load_f64_(src->data, src->dtype, i, n, tmp);
            store_f64_(dst->data, dst->dtype, i, n, tmp);
        }
    }
    return DDPC_OK;
}

/* ---- arithmetic ----------------------------------------------------------------- */

#define BINARY_LOOP(T, out, a, b, n, op)                                           \
    do {                                                                           \
        T *o_ = (T *)(out);                                                        \
        const T *a_ = (const T *)(a), *b_ = (const T *)(b);                        \
        DDPC_BINARY_LOOPS(op, n, o_[k_], a_[k_], b_[k_]);                          \
    } while (0)

#define SCALAR_LOOP(T, out, a, s, n, op)                                           \
    do {                                                                           \
        T *o_ = (T *)(out);                                                        \
        const T *a_ = (const T *)(a);                                              \
        const T s_ = (T)(s);                                                       \
        DDPC_BINARY_LOOPS(op, n, o_[k_], a_[k_], s_);                              \
    } while (0)

static ddpc_status check_int_division_(ddpc_binary_op op, const ddpc_buffer *divisor_src, double s, int scalar) {
    if (ddpc_dtype_is_float(divisor_src->dtype)) return DDPC_OK;
    int divides = op == DDPC_DIV || op == DDPC_RDIV;
    if (!divides) return DDPC_OK;
    /* The divisor as the integer loops use it: truncated (modulo 256 for uint8). */
    double used = divisor_src->dtype == DDPC_UINT8 ? (double)(uint8_t)(int64_t)s : trunc(s);
    if (scalar && op == DDPC_DIV && used == 0.0) return DDPC_ERROR(DDPC_ERR_ARG, "integer division by zero");
    if (scalar && op == DDPC_DIV) return DDPC_OK;
    /* An integer divisor held in a buffer: every element must be non-zero. */
    const ddpc_buffer *d = divisor_src;
    if (d->device != DDPC_CPU)
        return DDPC_ERROR(DDPC_ERR_TYPE, "integer division of cuda buffers is not supported; cast to a float dtype");
    double tmp[CHUNK];
    for (int64_t i = 0; i < d->numel; i += CHUNK) {
        int64_t n = d->numel - i < CHUNK ? d->numel - i : CHUNK;
        load_f64_(d->data, d->dtype, i, n, tmp);
        for (int64_t j = 0; j < n; j++)
            if (tmp[j] == 0.0) return DDPC_ERROR(DDPC_ERR_ARG, "integer division by zero");
    }
    return DDPC_OK;
}

const char *ddpc_shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < n) snprintf(buf + used, n - used, ")");
    return buf;
}

ddpc_status ddpc_check_float_like(const ddpc_buffer *b, const ddpc_buffer *ref, const char *op, const char *what) {
    if (b->dtype != DDPC_FLOAT32 && b->dtype != DDPC_FLOAT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: %s must be float32 or float64, got %s", op, what,
                          ddpc_dtype_name(b->dtype));
    if (b->dtype != ref->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: %s is %s, expected %s", op, what, ddpc_dtype_name(b->dtype),
                          ddpc_dtype_name(ref->dtype));
    if (b->device != ref->device) return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s is on another device", op, what);
    return DDPC_OK;
}

ddpc_status ddpc_check_binary_op(ddpc_binary_op op, ddpc_dtype dtype, const char *what) {
    if ((unsigned)op >= DDPC_NBINARY) return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown op %d", what, (int)op);
    if (op >= DDPC_BITAND && op <= DDPC_RRSHIFT && ddpc_dtype_is_float(dtype))
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: bitwise ops take integer dtypes, got %s", what, ddpc_dtype_name(dtype));
    if (op == DDPC_NEXTAFTER && dtype != DDPC_FLOAT32 && dtype != DDPC_FLOAT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: nextafter takes float32 and float64, got %s", what,
                          ddpc_dtype_name(dtype));
    return DDPC_OK;
}

ddpc_buffer ddpc_bool_bytes(const ddpc_buffer *b) {
    ddpc_buffer bytes = *b;
    if (bytes.dtype == DDPC_BOOL) bytes.dtype = DDPC_UINT8;
    return bytes;
}

ddpc_status ddpc_bool_result(ddpc_buffer *out, ddpc_status st) {
    if (st != DDPC_OK || out->dtype != DDPC_BOOL) return st;
    ddpc_buffer bytes = ddpc_bool_bytes(out);
    return ddpc_op_scalar(DDPC_NE, &bytes, &bytes, 0);
}

/* Binary ops (b set) and ops with a number (b NULL, the number s) on the
 * host dtypes with loops of their own, split across the cores for large
 * tensors: from 4M elements (one core nearly keeps up with memory below
 * that, and a thread costs tens of microseconds to start), from 32K for
 * powers, a libm call each. Each element is written by one range. With
 * into_bool, a comparison of the inputs (of `dtype`) writes bool. */
typedef struct {
    ddpc_binary_op op;
    ddpc_dtype dtype;
    int into_bool;
    void *out;
    const void *a, *b;
    double s;
} binary_job_;

/* One function for each dtype pair: gcc's register and data-flow passes grow
 * faster than the function, and a single function for every dtype took most
 * of the module's build time. */
#define BINARY_RANGE_FN(NAME, T, TO)                                               \
    static DDPC_ROW_TARGETS void NAME(const binary_job_ *j, int64_t lo, int64_t hi) { \
        const int64_t n = hi - lo;                                                 \
        TO *o = (TO *)j->out + lo;                                                 \
        const T *x = (const T *)j->a + lo, *y = j->b ? (const T *)j->b + lo : NULL, s_ = (T)j->s; \
        if (y) {                                                                   \
            DDPC_BINARY_LOOPS(j->op, n, o[k_], x[k_], y[k_]);                      \
        } else {                                                                   \
            DDPC_BINARY_LOOPS(j->op, n, o[k_], x[k_], s_);                         \
        }                                                                          \
    }
BINARY_RANGE_FN(binary_range_f32_, float, float)
BINARY_RANGE_FN(binary_range_f64_, double, double)
BINARY_RANGE_FN(binary_range_i32_, int32_t, int32_t)
BINARY_RANGE_FN(binary_range_i64_, int64_t, int64_t)
BINARY_RANGE_FN(binary_range_u8_, uint8_t, uint8_t)
BINARY_RANGE_FN(compare_range_f32_, float, uint8_t)
BINARY_RANGE_FN(compare_range_f64_, double, uint8_t)
BINARY_RANGE_FN(compare_range_i32_, int32_t, uint8_t)
BINARY_RANGE_FN(compare_range_i64_, int64_t, uint8_t)
BINARY_RANGE_FN(compare_range_u8_, uint8_t, uint8_t)
#undef BINARY_RANGE_FN

static void binary_range_(void *ctx, int64_t lo, int64_t hi) {
    const binary_job_ *j = ctx;
    switch (j->dtype) {
    case DDPC_FLOAT32: (j->into_bool ? compare_range_f32_ : binary_range_f32_)(j, lo, hi); break;
    case DDPC_FLOAT64: (j->into_bool ? compare_range_f64_ : binary_range_f64_)(j, lo, hi); break;
    case DDPC_INT32: (j->into_bool ? compare_range_i32_ : binary_range_i32_)(j, lo, hi); break;
    case DDPC_INT64: (j->into_bool ? compare_range_i64_ : binary_range_i64_)(j, lo, hi); break;
    default: (j->into_bool ? compare_range_u8_ : binary_range_u8_)(j, lo, hi); break;
    }
}

static void binary_parallel_(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b,
                             double s) {
    binary_job_ job = {.op = op, .dtype = a->dtype, .into_bool = out->dtype == DDPC_BOOL, .out = out->data,
                       .a = a->data, .b = b ? b->data : NULL, .s = s};
    int64_t grain = op == DDPC_POWER || op == DDPC_RPOWER ? (int64_t)1 << 15 : (int64_t)1 << 22;
    ddpc_parallel_for(out->numel, grain, binary_range_, &job);
}

/* A host comparison of a (float32, float64, int32, int64 or uint8) with b of
 * its dtype and shape, or with the number s where b is NULL, written as bool
 * in one pass: the general loops compare in a's dtype and cast after. */
static ddpc_status compare_into_bool_(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b,
                                      double s) {
    CHECK(check_writable_(out, "comparison"));
    if (out->numel != a->numel || out->device != a->device || (b && (b->dtype != a->dtype || b->numel != a->numel ||
                                                                      b->device != a->device)))
        return DDPC_ERROR(DDPC_ERR_ARG, "comparison: the operands and the bool output must match in size and device, "
                          "the operands in dtype");
    if (a->device != DDPC_CPU)
        return DDPC_ERROR(DDPC_ERR_TYPE, "comparison into bool: CUDA tensors compare in their dtype (cast after)");
    switch (a->dtype) {
    case DDPC_FLOAT32: case DDPC_FLOAT64: case DDPC_INT32: case DDPC_INT64: case DDPC_UINT8:
        binary_parallel_(op, out, a, b, s);
        return DDPC_OK;
    default:
        return DDPC_ERROR(DDPC_ERR_TYPE, "comparison into bool: %s is not compared directly", ddpc_dtype_name(a->dtype));
    }
}

static int compares_into_bool_(ddpc_binary_op op, const ddpc_buffer *out, const ddpc_buffer *a) {
    return out->dtype == DDPC_BOOL && a->dtype != DDPC_BOOL && op >= DDPC_EQ && op <= DDPC_GE;
}

ddpc_status ddpc_op_binary(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b) {
    if (compares_into_bool_(op, out, a)) return compare_into_bool_(op, out, a, b, 0);
    if (out->dtype == DDPC_BOOL) {
        ddpc_buffer o = ddpc_bool_bytes(out), x = ddpc_bool_bytes(a), y = ddpc_bool_bytes(b);
        return ddpc_bool_result(out, ddpc_op_binary(op, &o, &x, &y));
    }
    CHECK(ddpc_check_binary_op(op, out->dtype, "binary op"));
    CHECK(check_writable_(out, "binary op"));
    CHECK(check_pair_(out, a, "binary op", 1, 1));
    CHECK(check_pair_(out, b, "binary op", 1, 1));
    CHECK(check_int_division_(op, op == DDPC_RDIV ? a : b, 0, 0));
    int64_t n = out->numel;
    if (n == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_binary(op, out->data, a->data, b->data, out->dtype, n, stream));
    switch (out->dtype) {
    case DDPC_FLOAT32: case DDPC_FLOAT64: case DDPC_INT32: case DDPC_INT64: case DDPC_UINT8:
        binary_parallel_(op, out, a, b, 0);
        break;
    default: { /* 16-bit floats: compute in float, round once */
        double ta[CHUNK], tb[CHUNK];
        for (int64_t i = 0; i < n; i += CHUNK) {
            int64_t m = n - i < CHUNK ? n - i : CHUNK;
            load_f64_(a->data, a->dtype, i, m, ta);
            load_f64_(b->data, b->dtype, i, m, tb);
            float fa[CHUNK], fb[CHUNK], fo[CHUNK];
            for (int64_t j = 0; j < m; j++) fa[j] = (float)ta[j], fb[j] = (float)tb[j];
            BINARY_LOOP(float, fo, fa, fb, m, op);
            for (int64_t j = 0; j < m; j++) ta[j] = fo[j];
            store_f64_(out->data, out->dtype, i, m, ta);
        }
    }
    }
    return DDPC_OK;
}

ddpc_status ddpc_op_scalar(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, double s) {
    if (compares_into_bool_(op, out, a)) return compare_into_bool_(op, out, a, NULL, s);
    if (out->dtype == DDPC_BOOL) {
        ddpc_buffer o = ddpc_bool_bytes(out), x = ddpc_bool_bytes(a);
        return ddpc_bool_result(out, ddpc_op_scalar(op, &o, &x, s));
    }
    CHECK(ddpc_check_binary_op(op, out->dtype, "scalar op"));
    CHECK(check_writable_(out, "scalar op"));
    CHECK(check_pair_(out, a, "scalar op", 1, 1));
    CHECK(check_int_division_(op, a, s, 1));
    int64_t n = out->numel;
    if (n == 0) return DDPC_OK;
    /* uint8 takes the scalar modulo 256 on both kinds of device (a negative
     * double converted straight to uint8 is undefined, and saturates on a GPU). */
    if (out->dtype == DDPC_UINT8) s = (double)(uint8_t)(int64_t)s;
    if (out->device != DDPC_CPU) DDPC_LAUNCH(out->device, ddpc_k_scalar(op, out->data, a->data, s, out->dtype, n, stream));
    switch (out->dtype) {
    case DDPC_FLOAT32: case DDPC_FLOAT64: case DDPC_INT32: case DDPC_INT64: case DDPC_UINT8:
        binary_parallel_(op, out, a, NULL, s);
        break;
    default: {
        double t[CHUNK];
        float f[CHUNK], fo[CHUNK];
        for (int64_t i = 0; i < n; i += CHUNK) {
            int64_t m = n - i < CHUNK ? n - i : CHUNK;
            load_f64_(a->data, a->dtype, i, m, t);
            for (int64_t j = 0; j < m; j++) f[j] = (float)t[j];
            SCALAR_LOOP(float, fo, f, s, m, op);
            for (int64_t j = 0; j < m; j++) t[j] = fo[j];
            store_f64_(out->data, out->dtype, i, m, t);
        }
    }
    }
    return DDPC_OK;
}

#define SUM_LANES 16
#define SUM_IN_LANES(T, x, n)                                                      \
    do {                                                                           \
        double acc_[SUM_LANES] = {0}, s_ = 0;                                      \
        int64_t i_ = 0;                                                            \
        for (; i_ + SUM_LANES <= (n); i_ += SUM_LANES)                             \
            for (int k_ = 0; k_ < SUM_LANES; k_++) acc_[k_] += (double)(x)[i_ + k_]; \
        for (; i_ < (n); i_++) s_ += (double)(x)[i_];                              \
        for (int k_ = 0; k_ < SUM_LANES; k_++) s_ += acc_[k_];                     \
        return s_;                                                                 \
    } while (0)

DDPC_ROW_TARGETS double ddpc_sum_f32(const float *x, int64_t n) { SUM_IN_LANES(float, x, n); }
DDPC_ROW_TARGETS double ddpc_sum_f64(const double *x, int64_t n) { SUM_IN_LANES(double, x, n); }

/* The squared deviations from c, in double, in the same lanes. */
#define SQDEV_IN_LANES(T, x, n, c)                                                 \
    do {                                                                           \
        double acc_[SUM_LANES] = {0}, s_ = 0;                                      \
        int64_t i_ = 0;                                                            \
        for (; i_ + SUM_LANES <= (n); i_ += SUM_LANES)                             \
            for (int k_ = 0; k_ < SUM_LANES; k_++) {                               \
                double d_ = (double)(x)[i_ + k_] - (c);                            \
                acc_[k_] += d_ * d_;                                               \
            }                                                                      \
        for (; i_ < (n); i_++) s_ += ((double)(x)[i_] - (c)) * ((double)(x)[i_] - (c)); \
        for (int k_ = 0; k_ < SUM_LANES; k_++) s_ += acc_[k_];                     \
        return s_;                                                                 \
    } while (0)

DDPC_ROW_TARGETS double ddpc_sqdev_f32(const float *x, int64_t n, double c) { SQDEV_IN_LANES(float, x, n, c); }
DDPC_ROW_TARGETS double ddpc_sqdev_f64(const double *x, int64_t n, double c) { SQDEV_IN_LANES(double, x, n, c); }

/* A float sum of many elements in parts of SUM_PART each, summed on the
 * cores in parallel and then in order: the parts do not depend on the
 * threads, so neither does the result. */
#define SUM_PART ((int64_t)1 << 16)
#define SUM_PARTS_MAX 64 /* on the stack; longer sums take larger parts */
typedef struct {
    const void *x;
    int64_t n, part;
    int f32;
    const double *center; /* the squared deviations from *center, when given */
    double sums[SUM_PARTS_MAX];
} sum_parts_job_;

static void sum_parts_range_(void *ctx, int64_t lo, int64_t hi) {
    sum_parts_job_ *j = ctx;
    for (int64_t p = lo; p < hi; p++) {
        int64_t start = p * j->part, m = j->n - start < j->part ? j->n - start : j->part;
        const float *xf = (const float *)j->x + start;
        const double *xd = (const double *)j->x + start;
        if (j->center)
            j->sums[p] = j->f32 ? ddpc_sqdev_f32(xf, m, *j->center) : ddpc_sqdev_f64(xd, m, *j->center);
        else
            j->sums[p] = j->f32 ? ddpc_sum_f32(xf, m) : ddpc_sum_f64(xd, m);
    }
}

double ddpc_sum_parallel(const void *x, int64_t n, int f32, const double *center) {
    sum_parts_job_ job = {.x = x, .n = n, .part = SUM_PART, .f32 = f32, .center = center};
    if (job.n > SUM_PART * SUM_PARTS_MAX) job.part = (job.n + SUM_PARTS_MAX - 1) / SUM_PARTS_MAX;
    int64_t parts = (job.n + job.part - 1) / job.part;
    ddpc_parallel_for(parts, 4, sum_parts_range_, &job); /* 4 parts: a thread's work is worth starting */
    return ddpc_sum_f64(job.sums, parts);
}

/* The CUDA path: CUB's reduction over the whole GPU in stream-ordered scratch. */
static ddpc_status sum_cuda_(ddpc_buffer *out, const ddpc_buffer *a) {
#ifdef DDPC_WITH_CUDA
    int device = a->device, prev;
    size_t bytes = 0;
    ddpc_block *scratch = NULL;
    void *stream;
    ddpc_status st = DDPC_OK;
    CHECK(ddpc_cuda_compute_stream(device, &stream));
    /* The device is current from here: CUB sizes its storage for the device it runs on. */
    CHECK(ddpc_cuda_enter(device, &prev));
    CUDACHECKGOTO((cudaError_t)ddpc_k_sum_scratch(a->numel, a->dtype, &bytes), st, exit);
    CHECKGOTO(ddpc_alloc(device, bytes, 0, &scratch), st, exit);
    CUDACHECKGOTO((cudaError_t)ddpc_k_sum(out->data, a->data, a->dtype, a->numel, scratch->ptr, bytes, stream), st,
                  exit);
exit:
    ddpc_cuda_leave(prev);
    ddpc_free(scratch);
    return st;
#else
    (void)out;
    return ddpc_cuda_require(a->device);
#endif
}

ddpc_status ddpc_op_sum(ddpc_buffer *out, const ddpc_buffer *a) {
    CHECK(check_writable_(out, "sum"));
    ddpc_dtype want = ddpc_dtype_is_float(a->dtype) ? a->dtype : DDPC_INT64;
    if (out->numel != 1 || out->dtype != want || out->device != a->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "sum: the output must be one %s element on the input's device",
                          ddpc_dtype_name(want));
    if (a->device != DDPC_CPU) return sum_cuda_(out, a);
    if (!ddpc_dtype_is_float(a->dtype)) {
        /* Unsigned: overflow wraps (as in PyTorch) where signed overflow would be undefined. */
        uint64_t acc = 0;
        int64_t t[CHUNK];
        for (int64_t i = 0; i < a->numel; i += CHUNK) {
            int64_t m = a->numel - i < CHUNK ? a->numel - i : CHUNK;
            load_i64_(a->data, a->dtype, i, m, t);
            for (int64_t j = 0; j < m; j++) acc += (uint64_t)t[j];
        }
        *(int64_t *)out->data = (int64_t)acc;
        return DDPC_OK;
    }
    /* Double accumulation: accurate for float32 sums of any length. */
    double acc = 0, t[CHUNK];
    if (a->dtype == DDPC_FLOAT32 || a->dtype == DDPC_FLOAT64)
        acc = ddpc_sum_parallel(a->data, a->numel, a->dtype == DDPC_FLOAT32, NULL);
    else
        for (int64_t i = 0; i < a->numel; i += CHUNK) {
            int64_t m = a->numel - i < CHUNK ? a->numel - i : CHUNK;
            load_f64_(a->data, a->dtype, i, m, t);
            acc += ddpc_sum_f64(t, m);
        }
    store_f64_(out->data, out->dtype, 0, 1, &acc);
    return DDPC_OK;
}

/* ---- replacing non-finite values ---------------------------------------------- */

#define NAN_TO_NUM_LOOP(T)                                                         \
    do {                                                                           \
        T *o_ = out->data;                                                         \
        const T *x_ = x->data, tn = (T)nan, tp = (T)posinf, tm = (T)neginf;        \
        for (int64_t k = 0; k < n; k++) {                                          \
            T v = x_[k];                                                           \
            o_[k] = v != v ? tn : (v == (T)INFINITY ? tp : (v == (T)-INFINITY ? tm : v)); \
        }                                                                          \
    } while (0)

ddpc_status ddpc_op_nan_to_num(ddpc_buffer *out, const ddpc_buffer *x, double nan, double posinf, double neginf) {
    CHECK(check_writable_(out, "nan_to_num"));
    CHECK(check_pair_(out, x, "nan_to_num", 1, 1));
    if (!ddpc_dtype_is_float(out->dtype))
        return DDPC_ERROR(DDPC_ERR_TYPE, "nan_to_num: needs a float dtype, got %s", ddpc_dtype_name(out->dtype));
    int64_t n = out->numel;
    if (n == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_nan_to_num(out->data, x->data, out->dtype, n, nan, posinf, neginf, stream));
    if (out->dtype == DDPC_FLOAT32) NAN_TO_NUM_LOOP(float);
    else if (out->dtype == DDPC_FLOAT64) NAN_TO_NUM_LOOP(double);
    else {
        /* 16-bit floats by their bits: only NaN and the infinities change, so
         * no element goes through float and back. */
        const float f[3] = {(float)nan, (float)posinf, (float)neginf};
        uint16_t r[3], inf = out->dtype == DDPC_FLOAT16 ? 0x7c00u : 0x7f80u;
        ddpc_float_to_16bit(out->dtype, f, r, 3);
        uint16_t *o = out->data;
        const uint16_t *xs = x->data;
        for (int64_t k = 0; k < n; k++) {
            uint16_t b = xs[k], mag = b & 0x7fffu;
            o[k] = mag > inf ? r[0] : (mag == inf ? r[(b >> 15) + 1] : b);
        }
    }
    return DDPC_OK;
}

/* ---- random numbers ------------------------------------------------------------ */

/* The largest value of floating dtype dt below b: a uniform draw in [a, b)
 * that would round up to b when stored is stored as that instead. */
static double below_(ddpc_dtype dt, double b) {
    if (!(b > -INFINITY)) return b; /* NaN, or nothing below */
    if (dt == DDPC_FLOAT64) return nextafter(b, -INFINITY);
    float f = (float)b;
    if (dt == DDPC_FLOAT32) return (double)f >= b ? (double)nextafterf(f, -INFINITY) : (double)f;
    int half = dt == DDPC_FLOAT16;
    uint16_t h = half ? ddpc_float_to_half(f) : ddpc_float_to_bf16(f);
    for (;;) {
        double v = half ? ddpc_half_to_float(h) : ddpc_bf16_to_float(h);
        if (v < b) return v;
        h = (uint16_t)((h & 0x7fffu) == 0 ? 0x8001u : (h & 0x8000u) ? h + 1u : h - 1u); /* one value down */
    }
}

/* The mapping from random bits to values is part of ddpc's reproducibility
 * contract; kernels/random.cu implements the same formulas. ``cap`` is
 * below_(dt, b). */
static double draw_(ddpc_random_kind kind, ddpc_dtype dt, uint64_t bits, double a, double b, double cap) {
    double v;
    switch (kind) {
    case DDPC_RAND_UNIFORM:
        if (dt == DDPC_FLOAT16 || dt == DDPC_BFLOAT16)
            v = a + (b - a) * ddpc_uniform_bits(bits, dt == DDPC_FLOAT16 ? 11 : 8);
        else
            v = dt == DDPC_FLOAT64 ? a + (b - a) * ddpc_uniform_f64(bits)
                                   : (double)(float)(a + (b - a) * ddpc_uniform_f32(bits));
        return v > cap && cap >= a ? cap : v;
    case DDPC_RAND_NORMAL: {
        double u1 = ((double)(bits >> 32) + 1.0) * (1.0 / 4294967296.0);
        double u2 = (double)(bits & 0xffffffffu) * (1.0 / 4294967296.0);
        return a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    }
    default: /* integers in [a, b) */
        return a + floor(ddpc_uniform_f64(bits) * (b - a));
    }
}

ddpc_status ddpc_op_random(ddpc_buffer *dst, ddpc_random_kind kind, uint64_t seed, uint64_t offset, double a, double b) {
    CHECK(check_writable_(dst, "random"));
    if (kind != DDPC_RAND_INT && !ddpc_dtype_is_float(dst->dtype))
        return DDPC_ERROR(DDPC_ERR_TYPE, "rand/randn need a floating dtype, got %s", ddpc_dtype_name(dst->dtype));
    if (kind == DDPC_RAND_INT && !(b > a))
        return DDPC_ERROR(DDPC_ERR_ARG, "randint: high (%g) must be greater than low (%g)", b, a);
    if (dst->numel == 0) return DDPC_OK;
    double cap = kind == DDPC_RAND_UNIFORM ? below_(dst->dtype, b) : b;
    if (dst->device != DDPC_CPU)
        DDPC_LAUNCH(dst->device,
                    ddpc_k_random(dst->data, dst->dtype, kind, seed, offset, a, b, cap, dst->numel, stream));
    double t[CHUNK];
    for (int64_t i = 0; i < dst->numel; i += CHUNK) {
        int64_t m = dst->numel - i < CHUNK ? dst->numel - i : CHUNK;
        for (int64_t j = 0; j < m; j++)
            t[j] = draw_(kind, dst->dtype, ddpc_random_bits(seed, offset + (uint64_t)(i + j)), a, b, cap);
        store_f64_(dst->data, dst->dtype, i, m, t);
    }
    return DDPC_OK;
}

ddpc_status ddpc_op_randperm(ddpc_buffer *dst, uint64_t seed, uint64_t offset) {
    CHECK(check_writable_(dst, "randperm"));
    if (dst->device != DDPC_CPU || dst->dtype != DDPC_INT64 || dst->ndim != 1)
        return DDPC_ERROR(DDPC_ERR_ARG, "randperm: the output must be a 1-d int64 cpu buffer");
    ddpc_randperm_fill(dst->data, dst->numel, seed, offset);
    return DDPC_OK;
}

/* ---- Python bindings ------------------------------------------------------------ */

/* The op whose arguments are being parsed, for the converters' errors (the GIL
 * is held while arguments are parsed, so one static serves every thread). */
static const char *parsing_op_ = "this op";

static void parsing_(const char *format) {
    const char *colon = strchr(format, ':');
    parsing_op_ = colon ? colon + 1 : "this op";
}

int ddpc_parse_args(PyObject *args, const char *format, ...) {
    parsing_(format);
    va_list va;
    va_start(va, format);
    int ok = PyArg_VaParse(args, format, va);
    va_end(va);
    return ok;
}

int ddpc_parse_args_kw(PyObject *args, PyObject *kwds, const char *format, char **kwlist, ...) {
    parsing_(format);
    va_list va;
    va_start(va, kwlist);
    int ok = PyArg_VaParseTupleAndKeywords(args, kwds, format, kwlist, va);
    va_end(va);
    return ok;
}

int ddpc_arg_any_buffer(PyObject *o, ddpc_buffer **out) {
    if (!ddpc_buffer_check(o)) {
        PyErr_Format(PyExc_TypeError, "expected a ddpc._C.Buffer, got %.100s", Py_TYPE(o)->tp_name);
        return 0;
    }
    *out = (ddpc_buffer *)o;
    return 1;
}

int ddpc_arg_bool_buffer(PyObject *o, ddpc_buffer **out) {
    if (!ddpc_arg_any_buffer(o, out)) return 0;
    if (ddpc_dtype_is_complex((*out)->dtype)) {
        PyErr_Format(PyExc_TypeError, "%s does not support %s", parsing_op_, ddpc_dtype_name((*out)->dtype));
        return 0;
    }
    return 1;
}

int ddpc_arg_buffer(PyObject *o, ddpc_buffer **out) {
    if (!ddpc_arg_any_buffer(o, out)) return 0;
    if (ddpc_dtype_is_complex((*out)->dtype) || (*out)->dtype == DDPC_BOOL) {
        PyErr_Format(PyExc_TypeError, "%s does not support %s", parsing_op_, ddpc_dtype_name((*out)->dtype));
        return 0;
    }
    return 1;
}

static PyObject *py_fill(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *dst;
    double v;
    double imag = 0;
    if (!ddpc_parse_args(args, "O&d|d:fill", ddpc_arg_any_buffer, &dst, &v, &imag)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(dst), ddpc_op_fill_complex(dst, v, imag));
}

static PyObject *py_copy(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *dst, *src;
    int non_blocking = 0;
    if (!ddpc_parse_args(args, "O&O&|p:copy", ddpc_arg_any_buffer, &dst, ddpc_arg_any_buffer, &src, &non_blocking))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(dst) + (dst->device != src->device ? 1 << 16 : 0), ddpc_op_copy(dst, src, non_blocking));
}

static PyObject *py_cast(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *dst, *src;
    if (!ddpc_parse_args(args, "O&O&:cast", ddpc_arg_any_buffer, &dst, ddpc_arg_any_buffer, &src)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(dst), ddpc_op_cast(dst, src));
}

static PyObject *py_binary(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *a, *b;
    if (!ddpc_parse_args(args, "iO&O&O&:binary", &op, ddpc_arg_bool_buffer, &out, ddpc_arg_bool_buffer, &a,
                         ddpc_arg_bool_buffer, &b))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_binary((ddpc_binary_op)op, out, a, b));
}

static PyObject *py_scalar(PyObject *m, PyObject *args) {
    (void)m;
    int op;
    ddpc_buffer *out, *a;
    double s;
    if (!ddpc_parse_args(args, "iO&O&d:scalar", &op, ddpc_arg_bool_buffer, &out, ddpc_arg_bool_buffer, &a, &s))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_scalar((ddpc_binary_op)op, out, a, s));
}

static PyObject *py_sum(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *a;
    if (!ddpc_parse_args(args, "O&O&:sum", ddpc_arg_buffer, &out, ddpc_arg_buffer, &a)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(a), ddpc_op_sum(out, a));
}

static PyObject *py_nan_to_num(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *x;
    double nan, posinf, neginf;
    if (!ddpc_parse_args(args, "O&O&ddd:nan_to_num", ddpc_arg_buffer, &out, ddpc_arg_buffer, &x, &nan, &posinf,
                         &neginf))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_nan_to_num(out, x, nan, posinf, neginf));
}

static PyObject *py_random(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *dst;
    int kind;
    unsigned long long seed, offset;
    double a, b;
    if (!ddpc_parse_args(args, "O&iKKdd:random", ddpc_arg_buffer, &dst, &kind, &seed, &offset, &a, &b)) return NULL;
    if (kind < 0 || kind > DDPC_RAND_INT) return PyErr_Format(PyExc_ValueError, "unknown random kind %d", kind);
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(dst), ddpc_op_random(dst, (ddpc_random_kind)kind, seed, offset, a, b));
}

static PyObject *py_randperm(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *dst;
    unsigned long long seed, offset;
    if (!ddpc_parse_args(args, "O&KK:randperm", ddpc_arg_buffer, &dst, &seed, &offset)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(dst), ddpc_op_randperm(dst, seed, offset));
}

static PyMethodDef ops_methods[] = {
    {"fill", py_fill, METH_VARARGS, "fill(dst, value, imag=0): imag only for complex dtypes"},
    {"copy", py_copy, METH_VARARGS, "copy(dst, src, non_blocking=False): same dtype and count, any devices"},
    {"cast", py_cast, METH_VARARGS, "cast(dst, src): same device and count, any dtypes"},
    {"binary", py_binary, METH_VARARGS, "binary(op, out, a, b): op a ddpc_binary_op code (csrc/ops.h)"},
    {"scalar", py_scalar, METH_VARARGS, "scalar(op, out, a, s)"},
    {"sum", py_sum, METH_VARARGS, "sum(out, a): out is one element"},
    {"nan_to_num", py_nan_to_num, METH_VARARGS, "nan_to_num(out, x, nan, posinf, neginf): float dtypes"},
    {"random", py_random, METH_VARARGS, "random(dst, kind, seed, offset, a, b): 0 uniform[a,b) 1 normal(a,b) 2 int[a,b)"},
    {"randperm", py_randperm, METH_VARARGS, "randperm(dst, seed, offset): permutation of 0..n-1 into an int64 buffer"},
    {NULL, NULL, 0, NULL},
};

int ddpc_ops_register(PyObject *module) { return PyModule_AddFunctions(module, ops_methods); }
