/* Convolution and pooling op entry points (see ops_conv.h): argument checks,
 * then host loops or the launchers of kernels/conv.cu.
 *
 * The host loops run over independent units (a row block of the im2col
 * matrix, or one (H, W) plane) split across cores by ddpc_parallel_for; no
 * two units write the same element, so the gradients that add up overlapping
 * windows need no atomics. */
#include "ops_conv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "module.h"
#include "ops_nn.h"
#include "parallel.h"

/* Units per thread chunk: about this many elements of work each, a millisecond or
 * so; splitting less work loses more to starting a thread and to BLAS threads
 * still spinning after a GEMM than it gains (measured on im2col of one sample). */
#define CONV_CHUNK (1 << 20)
/* A kernel size, stride, dilation or padding above this is refused, so no
 * window position overflows 64 bits. */
#define WINDOW_LIMIT ((int64_t)1 << 31)

/* ---- argument checks ------------------------------------------------------------ */

static const char *shape_str_(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < n) snprintf(buf + used, n - used, ")");
    return buf;
}

/* `b` holds float32 or float64 elements of ref's dtype on ref's device, in the shape `ndim`, `shape`. */
static ddpc_status check_operand_(const ddpc_buffer *b, const ddpc_buffer *ref, int ndim, const int64_t *shape,
                                  const char *op, const char *what) {
    if (b->dtype != DDPC_FLOAT32 && b->dtype != DDPC_FLOAT64)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: %s must be float32 or float64, got %s", op, what,
                          ddpc_dtype_name(b->dtype));
    if (b->dtype != ref->dtype)
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: %s is %s, expected %s", op, what, ddpc_dtype_name(b->dtype),
                          ddpc_dtype_name(ref->dtype));
    if (b->device != ref->device) return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s is on another device", op, what);
    if (b->ndim != ndim || memcmp(b->shape, shape, (size_t)ndim * sizeof *shape) != 0) {
        char got[160], want[160];
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s has shape %s, expected %s", op, what,
                          shape_str_(b->shape, b->ndim, got, sizeof got), shape_str_(shape, ndim, want, sizeof want));
    }
    return DDPC_OK;
}

static ddpc_status check_writable_(const ddpc_buffer *out, const char *op) {
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    return DDPC_OK;
}

/* The caller's window with the sizes in and out set, checked: positive
 * kernel, stride and dilation, padding >= 0, and every window position
 * within 64 bits. */
static ddpc_status window_(const ddpc_window *args, const int64_t *in, const int64_t *out, const char *op,
                           ddpc_window *w) {
    *w = *args;
    for (int d = 0; d < 2; d++) {
        w->in[d] = in[d], w->out[d] = out[d];
        if (w->adaptive) {
            if (in[d] > 0 && out[d] > (INT64_MAX / 4) / in[d])
                return DDPC_ERROR(DDPC_ERR_ARG, "%s: %lld outputs over %lld inputs overflow", op, (long long)out[d],
                                  (long long)in[d]);
            continue;
        }
        if (w->kernel[d] < 1 || w->stride[d] < 1 || w->dilation[d] < 1)
            return DDPC_ERROR(DDPC_ERR_ARG,
                              "%s: kernel size, stride and dilation must be positive, got %lld, %lld and %lld", op,
                              (long long)w->kernel[d], (long long)w->stride[d], (long long)w->dilation[d]);
        if (w->pad[d] < 0)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: padding must be >= 0, got %lld", op, (long long)w->pad[d]);
        if (w->kernel[d] > WINDOW_LIMIT || w->stride[d] > WINDOW_LIMIT || w->dilation[d] > WINDOW_LIMIT ||
            w->pad[d] > WINDOW_LIMIT || (out[d] > 0 && w->stride[d] > (INT64_MAX / 4) / out[d]))
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: the window geometry is too large", op);
    }
    return DDPC_OK;
}

/* x [N, C, H, W] and col [C, KH, KW, N, OH, OW]: the operands im2col and col2im share. */
static ddpc_status conv_args_(const ddpc_buffer *col, const ddpc_buffer *x, const ddpc_window *args, const char *op,
                              ddpc_window *w) {
    if (x->ndim != 4) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the image must be [N, C, H, W], got %d dims", op, x->ndim);
    if (col->ndim != 6)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the columns must be [C, KH, KW, N, OH, OW], got %d dims", op, col->ndim);
    const int64_t *s = col->shape;
    const int64_t want[6] = {x->shape[1], s[1], s[2], x->shape[0], s[4], s[5]};
    CHECK(check_operand_(x, x, 4, x->shape, op, "the image"));
    CHECK(check_operand_(col, x, 6, want, op, "the columns"));
    ddpc_window with_kernel = *args;
    with_kernel.kernel[0] = s[1], with_kernel.kernel[1] = s[2], with_kernel.adaptive = 0;
    return window_(&with_kernel, x->shape + 2, s + 4, op, w);
}

/* x [P, H, W] and a result [P, OH, OW] of the pools. */
static ddpc_status pool_args_(const ddpc_buffer *y, const ddpc_buffer *x, const ddpc_window *args, const char *op,
                              ddpc_window *w) {
    if (x->ndim != 3) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the input must be [P, H, W], got %d dims", op, x->ndim);
    if (y->ndim != 3) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output must be [P, OH, OW], got %d dims", op, y->ndim);
    const int64_t want[3] = {x->shape[0], y->shape[1], y->shape[2]};
    CHECK(check_operand_(x, x, 3, x->shape, op, "the input"));
    CHECK(check_operand_(y, x, 3, want, op, "the output"));
    return window_(args, x->shape + 1, y->shape + 1, op, w);
}

/* ---- host loops ------------------------------------------------------------------- */

typedef struct {
    ddpc_window w;
    int64_t n, c; /* im2col and col2im: batch and channels */
    ddpc_dtype dtype;
    void *dst;
    const void *src;
    int64_t *indices;
    const int64_t *indices_in;
} window_job_;

static int64_t grain_(int64_t unit) { return unit > 0 && unit < CONV_CHUNK ? CONV_CHUNK / unit : 1; }

/* Unit u = ((c * KH + kh) * KW + kw) * N + n: one [OH, OW] block of the
 * columns, read from plane (n, c) at the offsets of tap (kh, kw). */
static void im2col_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1], KH = w->kernel[0], KW = w->kernel[1];
    const int64_t sw = w->stride[1];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t u = lo; u < hi; u++) {
            int64_t n = u % j->n, r = u / j->n, kw = r % KW, kh = (r / KW) % KH, c = r / (KW * KH);
            const T *src = (const T *)j->src + (n * j->c + c) * H * W;
            T *dst = (T *)j->dst + u * OH * OW;
            int64_t oh0, oh1, ow0, ow1;
            ddpc_window_outputs(w, 0, kh, &oh0, &oh1);
            ddpc_window_outputs(w, 1, kw, &ow0, &ow1);
            const int64_t ih_off = kh * w->dilation[0] - w->pad[0], iw_off = kw * w->dilation[1] - w->pad[1];
            for (int64_t oh = 0; oh < OH; oh++) {
                T *row = dst + oh * OW;
                if (oh < oh0 || oh >= oh1 || ow0 == ow1) {
                    memset(row, 0, (size_t)OW * sizeof(T));
                    continue;
                }
                const int64_t base = (oh * w->stride[0] + ih_off) * W + iw_off;
                memset(row, 0, (size_t)ow0 * sizeof(T));
                if (sw == 1) memcpy(row + ow0, src + base + ow0, (size_t)(ow1 - ow0) * sizeof(T));
                else for (int64_t ow = ow0; ow < ow1; ow++) row[ow] = src[base + ow * sw];
                memset(row + ow1, 0, (size_t)(OW - ow1) * sizeof(T));
            }
        }
    });
}

/* Unit u = n * C + c: plane (n, c) of gx, summed from the column blocks of its channel and sample. */
static void col2im_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1], KH = w->kernel[0], KW = w->kernel[1];
    const int64_t sw = w->stride[1];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t u = lo; u < hi; u++) {
            int64_t n = u / j->c, c = u % j->c;
            T *dst = (T *)j->dst + u * H * W;
            memset(dst, 0, (size_t)(H * W) * sizeof(T));
            for (int64_t kh = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++) {
                    const T *block = (const T *)j->src + (((c * KH + kh) * KW + kw) * j->n + n) * OH * OW;
                    int64_t oh0, oh1, ow0, ow1;
                    ddpc_window_outputs(w, 0, kh, &oh0, &oh1);
                    ddpc_window_outputs(w, 1, kw, &ow0, &ow1);
                    const int64_t ih_off = kh * w->dilation[0] - w->pad[0], iw_off = kw * w->dilation[1] - w->pad[1];
                    for (int64_t oh = oh0; oh < oh1; oh++) {
                        const T *row = block + oh * OW;
                        const int64_t base = (oh * w->stride[0] + ih_off) * W + iw_off;
                        for (int64_t ow = ow0; ow < ow1; ow++) dst[base + ow * sw] += row[ow];
                    }
                }
        }
    });
}

/* Unit: one plane. PyTorch's rule: the first tap that reads the input
 * starts, then a larger value or a NaN takes over. */
static void max_pool_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t p = lo; p < hi; p++) {
            const T *src = (const T *)j->src + p * H * W;
            T *dst = (T *)j->dst + p * OH * OW;
            int64_t *at = j->indices + p * OH * OW;
            for (int64_t oh = 0; oh < OH; oh++) {
                int64_t kh0, kh1, ih0 = oh * w->stride[0] - w->pad[0];
                ddpc_window_taps(w, 0, oh, &kh0, &kh1);
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t kw0, kw1, iw0 = ow * w->stride[1] - w->pad[1];
                    ddpc_window_taps(w, 1, ow, &kw0, &kw1);
                    T best = (T)-INFINITY;
                    int64_t best_at = kh0 < kh1 && kw0 < kw1
                                          ? (ih0 + kh0 * w->dilation[0]) * W + iw0 + kw0 * w->dilation[1]
                                          : -1;
                    for (int64_t kh = kh0; kh < kh1; kh++)
                        for (int64_t kw = kw0; kw < kw1; kw++) {
                            int64_t i = (ih0 + kh * w->dilation[0]) * W + iw0 + kw * w->dilation[1];
                            T v = src[i];
                            if (v > best || v != v) best = v, best_at = i;
                        }
                    dst[oh * OW + ow] = best;
                    at[oh * OW + ow] = best_at;
                }
            }
        }
    });
}

/* Unit: one plane of gx. */
static void max_pool_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const int64_t in_plane = j->w.in[0] * j->w.in[1], out_plane = j->w.out[0] * j->w.out[1];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t p = lo; p < hi; p++) {
            T *dst = (T *)j->dst + p * in_plane;
            const T *g = (const T *)j->src + p * out_plane;
            const int64_t *at = j->indices_in + p * out_plane;
            memset(dst, 0, (size_t)in_plane * sizeof(T));
            for (int64_t k = 0; k < out_plane; k++)
                if (at[k] >= 0) dst[at[k]] += g[k];
        }
    });
}

/* Unit: one plane; the sums in double. */
static void avg_pool_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t p = lo; p < hi; p++) {
            const T *src = (const T *)j->src + p * H * W;
            T *dst = (T *)j->dst + p * OH * OW;
            for (int64_t oh = 0; oh < OH; oh++) {
                int64_t h0, h1, fh = ddpc_avg_window(w, 0, oh, &h0, &h1);
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t w0, w1, fw = ddpc_avg_window(w, 1, ow, &w0, &w1);
                    double sum = 0;
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) sum += (double)src[ih * W + iw];
                    dst[oh * OW + ow] = (T)(sum / ddpc_avg_divisor(w, fh, fw));
                }
            }
        }
    });
}

/* Unit: one plane of gx. */
static void avg_pool_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t p = lo; p < hi; p++) {
            T *dst = (T *)j->dst + p * H * W;
            const T *g = (const T *)j->src + p * OH * OW;
            memset(dst, 0, (size_t)(H * W) * sizeof(T));
            for (int64_t oh = 0; oh < OH; oh++) {
                int64_t h0, h1, fh = ddpc_avg_window(w, 0, oh, &h0, &h1);
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t w0, w1, fw = ddpc_avg_window(w, 1, ow, &w0, &w1);
                    T share = (T)((double)g[oh * OW + ow] / ddpc_avg_divisor(w, fh, fw));
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) dst[ih * W + iw] += share;
                }
            }
        }
    });
}

/* ---- entry points ------------------------------------------------------------------ */

ddpc_status ddpc_op_im2col(ddpc_buffer *col, const ddpc_buffer *x, const ddpc_window *args) {
    window_job_ j = {.dtype = col->dtype, .dst = col->data, .src = x->data};
    CHECK(check_writable_(col, "im2col"));
    CHECK(conv_args_(col, x, args, "im2col", &j.w));
    j.n = x->shape[0], j.c = x->shape[1];
    if (col->numel == 0) return DDPC_OK;
    if (col->device != DDPC_CPU)
        DDPC_LAUNCH(col->device, ddpc_k_im2col(col->data, x->data, col->dtype, j.n, j.c, j.w, stream));
    int64_t units = col->numel / (j.w.out[0] * j.w.out[1]);
    ddpc_parallel_for(units, grain_(j.w.out[0] * j.w.out[1]), im2col_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_col2im(ddpc_buffer *gx, const ddpc_buffer *col, const ddpc_window *args) {
    window_job_ j = {.dtype = gx->dtype, .dst = gx->data, .src = col->data};
    CHECK(check_writable_(gx, "col2im"));
    CHECK(conv_args_(col, gx, args, "col2im", &j.w));
    j.n = gx->shape[0], j.c = gx->shape[1];
    if (gx->numel == 0) return DDPC_OK;
    if (gx->device != DDPC_CPU)
        DDPC_LAUNCH(gx->device, ddpc_k_col2im(gx->data, col->data, gx->dtype, j.n, j.c, j.w, stream));
    int64_t work = j.w.kernel[0] * j.w.kernel[1] * j.w.out[0] * j.w.out[1] + j.w.in[0] * j.w.in[1];
    ddpc_parallel_for(j.n * j.c, grain_(work), col2im_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_max_pool(ddpc_buffer *out, ddpc_buffer *indices, const ddpc_buffer *x, const ddpc_window *args) {
    const char *op = "max pool";
    window_job_ j = {.dtype = out->dtype, .dst = out->data, .src = x->data, .indices = indices->data};
    CHECK(check_writable_(out, op));
    CHECK(check_writable_(indices, op));
    ddpc_window plain = *args;
    plain.adaptive = 0;
    CHECK(pool_args_(out, x, &plain, op, &j.w));
    if (indices->dtype != DDPC_INT64 || indices->device != x->device || indices->ndim != 3 ||
        memcmp(indices->shape, out->shape, sizeof(int64_t) * 3) != 0)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: indices must be int64 on the input's device, shaped like the output", op);
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device,
                    ddpc_k_max_pool(out->data, indices->data, x->data, out->dtype, x->shape[0], j.w, stream));
    int64_t plane = j.w.out[0] * j.w.out[1] * j.w.kernel[0] * j.w.kernel[1];
    ddpc_parallel_for(x->shape[0], grain_(plane), max_pool_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_max_pool_backward(ddpc_buffer *gx, const ddpc_buffer *g, const ddpc_buffer *indices) {
    const char *op = "max pool backward";
    window_job_ j = {.dtype = gx->dtype, .dst = gx->data, .src = g->data, .indices_in = indices->data};
    CHECK(check_writable_(gx, op));
    if (gx->ndim != 3 || g->ndim != 3)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the gradients must be [P, H, W] and [P, OH, OW]", op);
    const int64_t want[3] = {gx->shape[0], g->shape[1], g->shape[2]};
    CHECK(check_operand_(gx, gx, 3, gx->shape, op, "the input gradient"));
    CHECK(check_operand_(g, gx, 3, want, op, "the output gradient"));
    if (indices->dtype != DDPC_INT64 || indices->device != gx->device || indices->ndim != 3 ||
        memcmp(indices->shape, g->shape, sizeof(int64_t) * 3) != 0)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: indices must be int64 on the gradient's device, shaped like it", op);
    j.w.in[0] = gx->shape[1], j.w.in[1] = gx->shape[2], j.w.out[0] = g->shape[1], j.w.out[1] = g->shape[2];
    int64_t in_plane = gx->shape[1] * gx->shape[2], out_plane = g->shape[1] * g->shape[2];
    if (gx->numel == 0) return DDPC_OK;
    if (gx->device != DDPC_CPU)
        DDPC_LAUNCH(gx->device, ddpc_k_max_pool_backward(gx->data, g->data, indices->data, gx->dtype, gx->shape[0],
                                                         in_plane, out_plane, stream));
    const int64_t *at = indices->data;
    for (int64_t k = 0; k < indices->numel; k++)
        if (at[k] < -1 || at[k] >= in_plane)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: index %lld is outside a plane of %lld elements", op, (long long)at[k],
                              (long long)in_plane);
    ddpc_parallel_for(gx->shape[0], grain_(in_plane + out_plane), max_pool_backward_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_avg_pool(ddpc_buffer *out, const ddpc_buffer *x, const ddpc_window *args) {
    window_job_ j = {.dtype = out->dtype, .dst = out->data, .src = x->data};
    CHECK(check_writable_(out, "average pool"));
    CHECK(pool_args_(out, x, args, "average pool", &j.w));
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_avg_pool(out->data, x->data, out->dtype, x->shape[0], j.w, stream));
    ddpc_parallel_for(x->shape[0], grain_(x->shape[1] * x->shape[2] + out->shape[1] * out->shape[2]), avg_pool_range_,
                      &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_avg_pool_backward(ddpc_buffer *gx, const ddpc_buffer *g, const ddpc_window *args) {
    window_job_ j = {.dtype = gx->dtype, .dst = gx->data, .src = g->data};
    CHECK(check_writable_(gx, "average pool backward"));
    CHECK(pool_args_(g, gx, args, "average pool backward", &j.w));
    if (gx->numel == 0) return DDPC_OK;
    if (gx->device != DDPC_CPU)
        DDPC_LAUNCH(gx->device, ddpc_k_avg_pool_backward(gx->data, g->data, gx->dtype, gx->shape[0], j.w, stream));
    ddpc_parallel_for(gx->shape[0], grain_(gx->shape[1] * gx->shape[2] + g->shape[1] * g->shape[2]),
                      avg_pool_backward_range_, &j);
    return DDPC_OK;
}

/* ---- Python bindings -------------------------------------------------------------- */

/* A pair of ints, or None (then *is_none is set, when given). */
static int parse_pair_(PyObject *o, int64_t *out, const char *what, int *is_none) {
    if (is_none) *is_none = o == Py_None;
    if (is_none && *is_none) return 1;
    long long a, b;
    if (!PyTuple_Check(o) || !PyArg_ParseTuple(o, "LL", &a, &b)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of two ints", what);
        return 0;
    }
    out[0] = a, out[1] = b;
    return 1;
}

/* The geometry arguments the bindings share: stride, padding and dilation pairs. */
static int parse_geometry_(PyObject *stride, PyObject *pad, PyObject *dilation, ddpc_window *w) {
    return parse_pair_(stride, w->stride, "stride", NULL) && parse_pair_(pad, w->pad, "padding", NULL) &&
           parse_pair_(dilation, w->dilation, "dilation", NULL);
}

static PyObject *py_im2col(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *col, *x;
    PyObject *stride, *pad, *dilation;
    ddpc_window w = {0};
    if (!PyArg_ParseTuple(args, "O&O&OOO:im2col", ddpc_arg_buffer, &col, ddpc_arg_buffer, &x, &stride, &pad,
                          &dilation) ||
        !parse_geometry_(stride, pad, dilation, &w))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(col), ddpc_op_im2col(col, x, &w));
}

static PyObject *py_col2im(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *col;
    PyObject *stride, *pad, *dilation;
    ddpc_window w = {0};
    if (!PyArg_ParseTuple(args, "O&O&OOO:col2im", ddpc_arg_buffer, &gx, ddpc_arg_buffer, &col, &stride, &pad,
                          &dilation) ||
        !parse_geometry_(stride, pad, dilation, &w))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(col), ddpc_op_col2im(gx, col, &w));
}

static PyObject *py_max_pool(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *indices, *x;
    PyObject *kernel, *stride, *pad, *dilation;
    ddpc_window w = {0};
    if (!PyArg_ParseTuple(args, "O&O&O&OOOO:max_pool2d", ddpc_arg_buffer, &out, ddpc_arg_buffer, &indices,
                          ddpc_arg_buffer, &x, &kernel, &stride, &pad, &dilation) ||
        !parse_pair_(kernel, w.kernel, "kernel_size", NULL) || !parse_geometry_(stride, pad, dilation, &w))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x), ddpc_op_max_pool(out, indices, x, &w));
}

static PyObject *py_max_pool_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *g, *indices;
    if (!PyArg_ParseTuple(args, "O&O&O&:max_pool2d_backward", ddpc_arg_buffer, &gx, ddpc_arg_buffer, &g,
                          ddpc_arg_buffer, &indices))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gx), ddpc_op_max_pool_backward(gx, g, indices));
}

/* avg_pool2d's geometry: kernel (None: adaptive windows), stride, padding,
 * count_include_pad and divisor (0: none); dilation is 1. */
static int parse_avg_(PyObject *args, const char *fmt, ddpc_buffer **a, ddpc_buffer **b, ddpc_window *w) {
    PyObject *kernel, *stride, *pad;
    long long divisor;
    if (!PyArg_ParseTuple(args, fmt, ddpc_arg_buffer, a, ddpc_arg_buffer, b, &kernel, &stride, &pad,
                          &w->count_include_pad, &divisor) ||
        !parse_pair_(kernel, w->kernel, "kernel_size", &w->adaptive))
        return 0;
    w->divisor = divisor, w->dilation[0] = w->dilation[1] = 1;
    if (w->adaptive) return 1;
    return parse_pair_(stride, w->stride, "stride", NULL) && parse_pair_(pad, w->pad, "padding", NULL);
}

static PyObject *py_avg_pool(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *x;
    ddpc_window w = {0};
    if (!parse_avg_(args, "O&O&OOOpL:avg_pool2d", &out, &x, &w)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x), ddpc_op_avg_pool(out, x, &w));
}

static PyObject *py_avg_pool_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *g;
    ddpc_window w = {0};
    if (!parse_avg_(args, "O&O&OOOpL:avg_pool2d_backward", &gx, &g, &w)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gx), ddpc_op_avg_pool_backward(gx, g, &w));
}

static PyMethodDef conv_methods[] = {
    {"im2col", py_im2col, METH_VARARGS,
     "im2col(col, x, stride, padding, dilation): col [C, KH, KW, N, OH, OW] = the windows of x [N, C, H, W]"},
    {"col2im", py_col2im, METH_VARARGS,
     "col2im(gx, col, stride, padding, dilation): gx [N, C, H, W] = col's entries summed back where im2col took them"},
    {"max_pool2d", py_max_pool, METH_VARARGS,
     "max_pool2d(out, indices, x, kernel, stride, padding, dilation): over the (H, W) planes of x [P, H, W]"},
    {"max_pool2d_backward", py_max_pool_backward, METH_VARARGS,
     "max_pool2d_backward(gx, g, indices): gx = g added at the indices of each plane"},
    {"avg_pool2d", py_avg_pool, METH_VARARGS,
     "avg_pool2d(out, x, kernel, stride, padding, count_include_pad, divisor): kernel None for adaptive windows, "
     "divisor 0 for none"},
    {"avg_pool2d_backward", py_avg_pool_backward, METH_VARARGS,
     "avg_pool2d_backward(gx, g, kernel, stride, padding, count_include_pad, divisor)"},
    {NULL, NULL, 0, NULL},
};

int ddpc_conv_register(PyObject *module) { return PyModule_AddFunctions(module, conv_methods); }
