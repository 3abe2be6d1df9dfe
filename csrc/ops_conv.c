/* Convolution and pooling op entry points (see ops_conv.h): argument checks,
 * then host loops or the launchers of kernels/conv.cu.
 *
 * The host loops run over independent units (a row block of the im2col
 * matrix, or one volume) split across cores by ddpc_parallel_for; no
 * two units write the same element, so the gradients that add up overlapping
 * windows need no atomics. */
#include "ops_conv.h"

#include <math.h>
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

/* `b` holds float32 or float64 elements of ref's dtype on ref's device, in the shape `ndim`, `shape`. */
static ddpc_status check_operand_(const ddpc_buffer *b, const ddpc_buffer *ref, int ndim, const int64_t *shape,
                                  const char *op, const char *what) {
    CHECK(ddpc_check_float_like(b, ref, op, what));
    if (b->ndim != ndim || memcmp(b->shape, shape, (size_t)ndim * sizeof *shape) != 0) {
        char got[160], want[160];
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s has shape %s, expected %s", op, what,
                          ddpc_shape_str(b->shape, b->ndim, got, sizeof got),
                          ddpc_shape_str(shape, ndim, want, sizeof want));
    }
    return DDPC_OK;
}

static ddpc_status check_writable_(const ddpc_buffer *out, const char *op) {
    if (out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", op);
    return DDPC_OK;
}

/* The caller's window (geometry right-aligned in the DDPC_WINDOW_DIMS slots,
 * the slots before the op's `dims` spatial dims holding a window of one tap,
 * see window_identity_) with the sizes in and out set from the dims' sizes,
 * checked: positive kernel, stride and dilation, padding >= 0, and every
 * window position within 64 bits. Adaptive windows have dilation 1. */
static ddpc_status window_(const ddpc_window *args, int dims, const int64_t *in, const int64_t *out, const char *op,
                           ddpc_window *w) {
    *w = *args;
    for (int d = DDPC_WINDOW_DIMS - dims; d < DDPC_WINDOW_DIMS; d++) {
        w->in[d] = in[d - (DDPC_WINDOW_DIMS - dims)], w->out[d] = out[d - (DDPC_WINDOW_DIMS - dims)];
        if (w->adaptive) {
            w->dilation[d] = 1;
            if (w->in[d] > 0 && w->out[d] > (INT64_MAX / 4) / w->in[d])
                return DDPC_ERROR(DDPC_ERR_ARG, "%s: %lld outputs over %lld inputs overflow", op,
                                  (long long)w->out[d], (long long)w->in[d]);
            continue;
        }
        if (w->kernel[d] < 1 || w->stride[d] < 1 || w->dilation[d] < 1)
            return DDPC_ERROR(DDPC_ERR_ARG,
                              "%s: kernel size, stride and dilation must be positive, got %lld, %lld and %lld", op,
                              (long long)w->kernel[d], (long long)w->stride[d], (long long)w->dilation[d]);
        if (w->pad[d] < 0)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: padding must be >= 0, got %lld", op, (long long)w->pad[d]);
        if (w->kernel[d] > WINDOW_LIMIT || w->stride[d] > WINDOW_LIMIT || w->dilation[d] > WINDOW_LIMIT ||
            w->pad[d] > WINDOW_LIMIT || (w->out[d] > 0 && w->stride[d] > (INT64_MAX / 4) / w->out[d]))
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: the window geometry is too large", op);
    }
    return DDPC_OK;
}

/* The number of spatial dims of a buffer of `ndim` dims with `lead` leading
 * (batch and channel) dims, refused unless 1 to DDPC_WINDOW_DIMS. */
static ddpc_status spatial_dims_(int ndim, int lead, const char *op, const char *what, int *dims) {
    *dims = ndim - lead;
    if (*dims < 1 || *dims > DDPC_WINDOW_DIMS)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s must have 1 to %d spatial dims after %d leading ones, got %d dims",
                          op, what, DDPC_WINDOW_DIMS, lead, ndim);
    return DDPC_OK;
}

/* x [N, C, *in] and col [C, *kernel, N, *out]: the operands im2col and col2im share. */
static ddpc_status conv_args_(const ddpc_buffer *col, const ddpc_buffer *x, const ddpc_window *args, const char *op,
                              ddpc_window *w) {
    int dims;
    CHECK(spatial_dims_(x->ndim, 2, op, "the image [N, C, ...]", &dims));
    if (col->ndim != 2 + 2 * dims)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the columns must be [C, *kernel, N, *out] with %d spatial dims, got %d "
                          "dims", op, dims, col->ndim);
    const int64_t *s = col->shape;
    int64_t want[2 + 2 * DDPC_WINDOW_DIMS];
    memcpy(want, s, (size_t)col->ndim * sizeof *want);
    want[0] = x->shape[1], want[1 + dims] = x->shape[0];
    CHECK(check_operand_(x, x, x->ndim, x->shape, op, "the image"));
    CHECK(check_operand_(col, x, col->ndim, want, op, "the columns"));
    ddpc_window with_kernel = *args;
    for (int d = 0; d < dims; d++) with_kernel.kernel[DDPC_WINDOW_DIMS - dims + d] = s[1 + d];
    with_kernel.adaptive = 0;
    return window_(&with_kernel, dims, x->shape + 2, s + 2 + dims, op, w);
}

/* x [P, *in] and a result [P, *out] of the pools. */
static ddpc_status pool_args_(const ddpc_buffer *y, const ddpc_buffer *x, const ddpc_window *args, const char *op,
                              ddpc_window *w) {
    int dims;
    CHECK(spatial_dims_(x->ndim, 1, op, "the input [P, ...]", &dims));
    if (y->ndim != x->ndim)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output must have the input's %d dims, got %d", op, x->ndim, y->ndim);
    int64_t want[1 + DDPC_WINDOW_DIMS];
    memcpy(want, y->shape, (size_t)y->ndim * sizeof *want);
    want[0] = x->shape[0];
    CHECK(check_operand_(x, x, x->ndim, x->shape, op, "the input"));
    CHECK(check_operand_(y, x, y->ndim, want, op, "the output"));
    return window_(args, dims, x->shape + 1, y->shape + 1, op, w);
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

static int64_t volume_(const int64_t *sizes) { return sizes[0] * sizes[1] * sizes[2]; }

/* Unit u = tap * N + n, tap = ((c * KD + kd) * KH + kh) * KW + kw: one
 * [OD, OH, OW] block of the columns, read from volume (n, c) at the offsets
 * of tap (kd, kh, kw), row by row (a row: one (od, oh), OW long). */
static void im2col_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[1], W = w->in[2], OD = w->out[0], OH = w->out[1], OW = w->out[2];
    const int64_t KD = w->kernel[0], KH = w->kernel[1], KW = w->kernel[2], sw = w->stride[2];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t u = lo; u < hi; u++) {
            int64_t n = u % j->n, r = u / j->n, kw = r % KW, kh = (r / KW) % KH, kd = (r / (KW * KH)) % KD,
                    c = r / (KW * KH * KD);
            const T *src = (const T *)j->src + (n * j->c + c) * volume_(w->in);
            T *dst = (T *)j->dst + u * OD * OH * OW;
            int64_t od0, od1, oh0, oh1, ow0, ow1;
            ddpc_window_outputs(w, 0, kd, &od0, &od1);
            ddpc_window_outputs(w, 1, kh, &oh0, &oh1);
            ddpc_window_outputs(w, 2, kw, &ow0, &ow1);
            const int64_t id_off = kd * w->dilation[0] - w->pad[0], ih_off = kh * w->dilation[1] - w->pad[1];
            const int64_t iw_off = kw * w->dilation[2] - w->pad[2];
            for (int64_t od = 0; od < OD; od++)
                for (int64_t oh = 0; oh < OH; oh++) {
                    T *row = dst + (od * OH + oh) * OW;
                    if (od < od0 || od >= od1 || oh < oh0 || oh >= oh1 || ow0 == ow1) {
                        memset(row, 0, (size_t)OW * sizeof(T));
                        continue;
                    }
                    const int64_t base = ((od * w->stride[0] + id_off) * H + oh * w->stride[1] + ih_off) * W + iw_off;
                    memset(row, 0, (size_t)ow0 * sizeof(T));
                    if (sw == 1) memcpy(row + ow0, src + base + ow0, (size_t)(ow1 - ow0) * sizeof(T));
                    else for (int64_t ow = ow0; ow < ow1; ow++) row[ow] = src[base + ow * sw];
                    memset(row + ow1, 0, (size_t)(OW - ow1) * sizeof(T));
                }
        }
    });
}

/* Unit u = n * C + c: volume (n, c) of gx, summed from the column blocks of its channel and sample. */
static void col2im_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[1], W = w->in[2], OH = w->out[1], OW = w->out[2];
    const int64_t KD = w->kernel[0], KH = w->kernel[1], KW = w->kernel[2], sw = w->stride[2];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t u = lo; u < hi; u++) {
            int64_t n = u / j->c, c = u % j->c;
            T *dst = (T *)j->dst + u * volume_(w->in);
            memset(dst, 0, (size_t)volume_(w->in) * sizeof(T));
            for (int64_t kd = 0; kd < KD; kd++)
                for (int64_t kh = 0; kh < KH; kh++)
                    for (int64_t kw = 0; kw < KW; kw++) {
                        const int64_t tap = ((c * KD + kd) * KH + kh) * KW + kw;
                        const T *block = (const T *)j->src + (tap * j->n + n) * volume_(w->out);
                        int64_t od0, od1, oh0, oh1, ow0, ow1;
                        ddpc_window_outputs(w, 0, kd, &od0, &od1);
                        ddpc_window_outputs(w, 1, kh, &oh0, &oh1);
                        ddpc_window_outputs(w, 2, kw, &ow0, &ow1);
                        const int64_t id_off = kd * w->dilation[0] - w->pad[0];
                        const int64_t ih_off = kh * w->dilation[1] - w->pad[1];
                        const int64_t iw_off = kw * w->dilation[2] - w->pad[2];
                        for (int64_t od = od0; od < od1; od++)
                            for (int64_t oh = oh0; oh < oh1; oh++) {
                                const T *row = block + (od * OH + oh) * OW;
                                const int64_t base =
                                    ((od * w->stride[0] + id_off) * H + oh * w->stride[1] + ih_off) * W + iw_off;
                                for (int64_t ow = ow0; ow < ow1; ow++) dst[base + ow * sw] += row[ow];
                            }
                    }
        }
    });
}

/* Unit: one volume, its windows scanned by window.h's ddpc_max_window_scan. */
static void max_pool_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t OD = w->out[0], OH = w->out[1], OW = w->out[2];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t p = lo; p < hi; p++) {
            const T *src = (const T *)j->src + p * volume_(w->in);
            T *dst = (T *)j->dst + p * volume_(w->out);
            int64_t *at = j->indices + p * volume_(w->out);
            ddpc_max_box b;
            for (int64_t od = 0; od < OD; od++) {
                b.start[0] = ddpc_window_taps(w, 0, od, &b.k0[0], &b.k1[0]);
                for (int64_t oh = 0; oh < OH; oh++) {
                    b.start[1] = ddpc_window_taps(w, 1, oh, &b.k0[1], &b.k1[1]);
                    for (int64_t ow = 0; ow < OW; ow++) {
                        b.start[2] = ddpc_window_taps(w, 2, ow, &b.k0[2], &b.k1[2]);
                        int64_t o = (od * OH + oh) * OW + ow;
                        int64_t i = ddpc_max_window_scan(w, &b, src, j->dtype == DDPC_FLOAT64);
                        dst[o] = i < 0 ? (T)-INFINITY : src[i];
                        at[o] = i;
                    }
                }
            }
        }
    });
}

/* Unit: one volume of gx. */
static void max_pool_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const int64_t in_volume = volume_(j->w.in), out_volume = volume_(j->w.out);
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t p = lo; p < hi; p++) {
            T *dst = (T *)j->dst + p * in_volume;
            const T *g = (const T *)j->src + p * out_volume;
            const int64_t *at = j->indices_in + p * out_volume;
            memset(dst, 0, (size_t)in_volume * sizeof(T));
            for (int64_t k = 0; k < out_volume; k++)
                if (at[k] >= 0) dst[at[k]] += g[k];
        }
    });
}

/* Unit: one volume; the sums in double. */
static void avg_pool_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[1], W = w->in[2];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t p = lo; p < hi; p++) {
            const T *src = (const T *)j->src + p * volume_(w->in);
            T *dst = (T *)j->dst + p * volume_(w->out);
            int64_t o[DDPC_WINDOW_DIMS];
            for (o[0] = 0; o[0] < w->out[0]; o[0]++)
                for (o[1] = 0; o[1] < w->out[1]; o[1]++)
                    for (o[2] = 0; o[2] < w->out[2]; o[2]++) {
                        ddpc_avg_box b = ddpc_avg_window_box(w, o);
                        double sum = 0;
                        for (int64_t id = b.lo[0]; id < b.hi[0]; id++)
                            for (int64_t ih = b.lo[1]; ih < b.hi[1]; ih++)
                                for (int64_t iw = b.lo[2]; iw < b.hi[2]; iw++)
                                    sum += (double)src[(id * H + ih) * W + iw];
                        *dst++ = (T)(sum / b.divisor);
                    }
        }
    });
}

/* Unit: one volume of gx. */
static void avg_pool_backward_range_(void *ctx, int64_t lo, int64_t hi) {
    const window_job_ *j = ctx;
    const ddpc_window *w = &j->w;
    const int64_t H = w->in[1], W = w->in[2];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t p = lo; p < hi; p++) {
            T *dst = (T *)j->dst + p * volume_(w->in);
            const T *g = (const T *)j->src + p * volume_(w->out);
            memset(dst, 0, (size_t)volume_(w->in) * sizeof(T));
            int64_t o[DDPC_WINDOW_DIMS];
            for (o[0] = 0; o[0] < w->out[0]; o[0]++)
                for (o[1] = 0; o[1] < w->out[1]; o[1]++)
                    for (o[2] = 0; o[2] < w->out[2]; o[2]++) {
                        ddpc_avg_box b = ddpc_avg_window_box(w, o);
                        T share = (T)((double)*g++ / b.divisor);
                        for (int64_t id = b.lo[0]; id < b.hi[0]; id++)
                            for (int64_t ih = b.lo[1]; ih < b.hi[1]; ih++)
                                for (int64_t iw = b.lo[2]; iw < b.hi[2]; iw++) dst[(id * H + ih) * W + iw] += share;
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
    ddpc_parallel_for(col->numel / volume_(j.w.out), grain_(volume_(j.w.out)), im2col_range_, &j);
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
    int64_t work = volume_(j.w.kernel) * volume_(j.w.out) + volume_(j.w.in);
    ddpc_parallel_for(j.n * j.c, grain_(work), col2im_range_, &j);
    return DDPC_OK;
}

/* indices: int64, on `ref`'s device (ref named `ref_name`), shaped like `like` (named `like_name`). */
static ddpc_status check_indices_(const ddpc_buffer *indices, const ddpc_buffer *ref, const ddpc_buffer *like,
                                  const char *op, const char *ref_name, const char *like_name) {
    if (indices->dtype != DDPC_INT64 || indices->device != ref->device || indices->ndim != like->ndim ||
        memcmp(indices->shape, like->shape, sizeof(int64_t) * (size_t)like->ndim) != 0)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: indices must be int64 on the %s's device, shaped like the %s", op,
                          ref_name, like_name);
    return DDPC_OK;
}

ddpc_status ddpc_op_max_pool(ddpc_buffer *out, ddpc_buffer *indices, const ddpc_buffer *x, const ddpc_window *args) {
    const char *op = "max pool";
    window_job_ j = {.dtype = out->dtype, .dst = out->data, .src = x->data, .indices = indices->data};
    CHECK(check_writable_(out, op));
    CHECK(check_writable_(indices, op));
    CHECK(pool_args_(out, x, args, op, &j.w));
    CHECK(check_indices_(indices, x, out, op, "input", "output"));
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device,
                    ddpc_k_max_pool(out->data, indices->data, x->data, out->dtype, x->shape[0], j.w, stream));
    int64_t taps = j.w.adaptive ? ddpc_ceil_div(volume_(j.w.in), volume_(j.w.out)) + 1 : volume_(j.w.kernel);
    ddpc_parallel_for(x->shape[0], grain_(volume_(j.w.out) * taps), max_pool_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_max_pool_backward(ddpc_buffer *gx, const ddpc_buffer *g, const ddpc_buffer *indices) {
    const char *op = ddpc_index_op_name(DDPC_IX_MAX_POOL_BACKWARD);
    window_job_ j = {.dtype = gx->dtype, .dst = gx->data, .src = g->data, .indices_in = indices->data};
    int dims;
    CHECK(check_writable_(gx, op));
    CHECK(spatial_dims_(gx->ndim, 1, op, "the input gradient [P, ...]", &dims));
    if (g->ndim != gx->ndim)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the gradients must have the same number of dims, got %d and %d", op,
                          gx->ndim, g->ndim);
    int64_t want[1 + DDPC_WINDOW_DIMS];
    memcpy(want, g->shape, (size_t)g->ndim * sizeof *want);
    want[0] = gx->shape[0];
    CHECK(check_operand_(gx, gx, gx->ndim, gx->shape, op, "the input gradient"));
    CHECK(check_operand_(g, gx, g->ndim, want, op, "the output gradient"));
    CHECK(check_indices_(indices, gx, g, op, "gradient", "gradient"));
    int64_t in_volume = 1, out_volume = 1;
    for (int d = 1; d < gx->ndim; d++) in_volume *= gx->shape[d], out_volume *= g->shape[d];
    j.w.in[0] = in_volume, j.w.out[0] = out_volume;
    j.w.in[1] = j.w.in[2] = j.w.out[1] = j.w.out[2] = 1;
    if (gx->numel == 0) return DDPC_OK;
    if (gx->device != DDPC_CPU)
        DDPC_LAUNCH_INDEXED(gx->device, DDPC_IX_MAX_POOL_BACKWARD,
                            ddpc_k_max_pool_backward(gx->data, g->data, indices->data, gx->dtype, gx->shape[0],
                                                     in_volume, out_volume, index_check, stream));
    const int64_t *at = indices->data;
    for (int64_t k = 0; k < indices->numel; k++)
        if (at[k] < -1 || at[k] >= in_volume)
            return DDPC_INDEX_ERROR(.op = DDPC_IX_MAX_POOL_BACKWARD, .index = at[k], .bound = in_volume);
    ddpc_parallel_for(gx->shape[0], grain_(in_volume + out_volume), max_pool_backward_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_avg_pool(ddpc_buffer *out, const ddpc_buffer *x, const ddpc_window *args) {
    window_job_ j = {.dtype = out->dtype, .dst = out->data, .src = x->data};
    CHECK(check_writable_(out, "average pool"));
    CHECK(pool_args_(out, x, args, "average pool", &j.w));
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_avg_pool(out->data, x->data, out->dtype, x->shape[0], j.w, stream));
    ddpc_parallel_for(x->shape[0], grain_(volume_(j.w.in) + volume_(j.w.out)), avg_pool_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_avg_pool_backward(ddpc_buffer *gx, const ddpc_buffer *g, const ddpc_window *args) {
    window_job_ j = {.dtype = gx->dtype, .dst = gx->data, .src = g->data};
    CHECK(check_writable_(gx, "average pool backward"));
    CHECK(pool_args_(g, gx, args, "average pool backward", &j.w));
    if (gx->numel == 0) return DDPC_OK;
    if (gx->device != DDPC_CPU)
        DDPC_LAUNCH(gx->device, ddpc_k_avg_pool_backward(gx->data, g->data, gx->dtype, gx->shape[0], j.w, stream));
    ddpc_parallel_for(gx->shape[0], grain_(volume_(j.w.in) + volume_(j.w.out)), avg_pool_backward_range_, &j);
    return DDPC_OK;
}

/* ---- Python bindings -------------------------------------------------------------- */

/* A window of one tap over one element in every slot: what the slots before
 * an op's spatial dims keep (see window.h). */
static ddpc_window window_identity_(void) {
    ddpc_window w = {0};
    for (int d = 0; d < DDPC_WINDOW_DIMS; d++) w.in[d] = w.out[d] = w.kernel[d] = w.stride[d] = w.dilation[d] = 1;
    return w;
}

/* A tuple of `dims` ints into the last `dims` slots of out[DDPC_WINDOW_DIMS],
 * or None (then *is_none is set, when given). */
static int parse_dims_(PyObject *o, int dims, int64_t *out, const char *what, int *is_none) {
    if (is_none) *is_none = o == Py_None;
    if (is_none && *is_none) return 1;
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != dims) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of %d ints, one per spatial dim", what, dims);
        return 0;
    }
    for (int d = 0; d < dims; d++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(o, d));
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be a tuple of %d ints, one per spatial dim", what, dims);
            return 0;
        }
        out[DDPC_WINDOW_DIMS - dims + d] = v;
    }
    return 1;
}

/* The spatial dims of a buffer with `lead` leading dims, for parsing its
 * geometry; an out-of-range count is left to the op's own check (then 1). */
static int dims_of_(const ddpc_buffer *b, int lead) {
    int dims = b->ndim - lead;
    return dims >= 1 && dims <= DDPC_WINDOW_DIMS ? dims : 1;
}

/* The geometry arguments the bindings share: stride, padding and dilation tuples. */
static int parse_geometry_(PyObject *stride, PyObject *pad, PyObject *dilation, int dims, ddpc_window *w) {
    return parse_dims_(stride, dims, w->stride, "stride", NULL) && parse_dims_(pad, dims, w->pad, "padding", NULL) &&
           parse_dims_(dilation, dims, w->dilation, "dilation", NULL);
}

/* im2col(col, x, ...) and col2im(x, col, ...) take the same arguments; the image is x. */
static int parse_columns_(PyObject *args, const char *fmt, ddpc_buffer **a, ddpc_buffer **b, int image_first,
                          ddpc_window *w) {
    PyObject *stride, *pad, *dilation;
    *w = window_identity_();
    if (!ddpc_parse_args(args, fmt, ddpc_arg_buffer, a, ddpc_arg_buffer, b, &stride, &pad, &dilation)) return 0;
    return parse_geometry_(stride, pad, dilation, dims_of_(image_first ? *a : *b, 2), w);
}

static PyObject *py_im2col(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *col, *x;
    ddpc_window w;
    if (!parse_columns_(args, "O&O&OOO:im2col", &col, &x, 0, &w)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(col), ddpc_op_im2col(col, x, &w));
}

static PyObject *py_col2im(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *col;
    ddpc_window w;
    if (!parse_columns_(args, "O&O&OOO:col2im", &gx, &col, 1, &w)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(col), ddpc_op_col2im(gx, col, &w));
}

static PyObject *py_max_pool(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *indices, *x;
    PyObject *kernel, *stride, *pad, *dilation;
    ddpc_window w = window_identity_();
    if (!ddpc_parse_args(args, "O&O&O&OOOO:max_pool", ddpc_arg_buffer, &out, ddpc_arg_buffer, &indices,
                         ddpc_arg_buffer, &x, &kernel, &stride, &pad, &dilation))
        return NULL;
    int dims = dims_of_(x, 1);
    if (!parse_dims_(kernel, dims, w.kernel, "kernel_size", &w.adaptive) ||
        (!w.adaptive && !parse_geometry_(stride, pad, dilation, dims, &w)))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x), ddpc_op_max_pool(out, indices, x, &w));
}

static PyObject *py_max_pool_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *g, *indices;
    if (!ddpc_parse_args(args, "O&O&O&:max_pool_backward", ddpc_arg_buffer, &gx, ddpc_arg_buffer, &g,
                         ddpc_arg_buffer, &indices))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gx), ddpc_op_max_pool_backward(gx, g, indices));
}

/* avg_pool's geometry: kernel (None: adaptive windows), stride, padding,
 * count_include_pad and divisor (0: none); dilation is 1. */
static int parse_avg_(PyObject *args, const char *fmt, ddpc_buffer **a, ddpc_buffer **b, ddpc_window *w) {
    PyObject *kernel, *stride, *pad;
    long long divisor;
    *w = window_identity_();
    if (!ddpc_parse_args(args, fmt, ddpc_arg_buffer, a, ddpc_arg_buffer, b, &kernel, &stride, &pad,
                         &w->count_include_pad, &divisor))
        return 0;
    int dims = dims_of_(*b, 1);
    w->divisor = divisor;
    if (!parse_dims_(kernel, dims, w->kernel, "kernel_size", &w->adaptive)) return 0;
    if (w->adaptive) return 1;
    return parse_dims_(stride, dims, w->stride, "stride", NULL) && parse_dims_(pad, dims, w->pad, "padding", NULL);
}

static PyObject *py_avg_pool(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *x;
    ddpc_window w;
    if (!parse_avg_(args, "O&O&OOOpL:avg_pool", &out, &x, &w)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(x), ddpc_op_avg_pool(out, x, &w));
}

static PyObject *py_avg_pool_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *g;
    ddpc_window w;
    if (!parse_avg_(args, "O&O&OOOpL:avg_pool_backward", &gx, &g, &w)) return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(gx), ddpc_op_avg_pool_backward(gx, g, &w));
}

static PyMethodDef conv_methods[] = {
    {"im2col", py_im2col, METH_VARARGS,
     "im2col(col, x, stride, padding, dilation): col [C, *kernel, N, *out] = the windows of x [N, C, *in], "
     "1 to 3 spatial dims, the geometry a tuple per spatial dim"},
    {"col2im", py_col2im, METH_VARARGS,
     "col2im(gx, col, stride, padding, dilation): gx [N, C, *in] = col's entries summed back where im2col took them"},
    {"max_pool", py_max_pool, METH_VARARGS,
     "max_pool(out, indices, x, kernel, stride, padding, dilation): over the volumes of x [P, *in] (1 to 3 dims); "
     "kernel None for adaptive windows; indices are flattened positions in a volume"},
    {"max_pool_backward", py_max_pool_backward, METH_VARARGS,
     "max_pool_backward(gx, g, indices): gx = g added at the indices of each volume"},
    {"avg_pool", py_avg_pool, METH_VARARGS,
     "avg_pool(out, x, kernel, stride, padding, count_include_pad, divisor): over the volumes of x [P, *in]; kernel "
     "None for adaptive windows, divisor 0 for none"},
    {"avg_pool_backward", py_avg_pool_backward, METH_VARARGS,
     "avg_pool_backward(gx, g, kernel, stride, padding, count_include_pad, divisor)"},
    {NULL, NULL, 0, NULL},
};

int ddpc_conv_register(PyObject *module) { return PyModule_AddFunctions(module, conv_methods); }
