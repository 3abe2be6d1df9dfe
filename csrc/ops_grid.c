/* grid_sample entry points (see ops_grid.h): argument checks, then host
 * loops or the launchers of kernels/grid.cu.
 *
 * The host loops split the work so that no two threads write one element:
 * the forward pass and the grid gradient run over (sample, point) units,
 * each summing over the channels; the input gradient runs over (sample,
 * channel) units, each walking every point of its sample and adding into its
 * own volume. A range of units of one sample takes each point's taps once
 * for all the channels it holds. */
#include "ops_grid.h"

#include <string.h>

#include "module.h"
#include "ops_nn.h"
#include "parallel.h"

/* Tap reads per thread chunk: enough work that starting a thread pays. */
#define GRID_CHUNK (1 << 18)

/* ---- argument checks ------------------------------------------------------------ */

static const char *const OP = "grid_sample";

/* `b` is a float buffer of x's dtype and device shaped [N, lead, *spatial, tail]: the
 * first dim N, then `lead` (a size, or -1 for none), the spatial sizes, and `tail`
 * (a size, or -1 for none). */
static ddpc_status check_shape_(const ddpc_buffer *b, const ddpc_buffer *x, int64_t n, int64_t lead,
                                const int64_t *spatial, int dims, int64_t tail, const char *what) {
    CHECK(ddpc_check_float_like(b, x, OP, what));
    int64_t want[DDPC_MAX_NDIM];
    int nd = 0;
    want[nd++] = n;
    if (lead >= 0) want[nd++] = lead;
    for (int d = 0; d < dims; d++) want[nd++] = spatial[d];
    if (tail >= 0) want[nd++] = tail;
    if (b->ndim != nd || memcmp(b->shape, want, (size_t)nd * sizeof *want) != 0) {
        char got[160], expected[160];
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s has shape %s, expected %s", OP, what,
                          ddpc_shape_str(b->shape, b->ndim, got, sizeof got),
                          ddpc_shape_str(want, nd, expected, sizeof expected));
    }
    return DDPC_OK;
}

/* x [N, C, *in] with 2 or 3 spatial dims and grid [N, *out, dims]: the
 * sampling rules and the sizes of the loops. */
static ddpc_status sampling_(const ddpc_buffer *x, const ddpc_buffer *grid, int mode, int padding, int align_corners,
                             ddpc_grid_sampling *s, int64_t *points) {
    CHECK(ddpc_check_float_like(x, x, OP, "the input"));
    if (x->ndim != 4 && x->ndim != 5)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the input must be 4-d [N, C, H, W] or 5-d [N, C, D, H, W], got %d dims",
                          OP, x->ndim);
    s->dims = x->ndim - 2;
    if (grid->ndim != x->ndim || grid->shape[grid->ndim - 1] != s->dims)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: the grid must be %d-d with %d coordinates per point", OP, x->ndim,
                          s->dims);
    CHECK(check_shape_(grid, x, x->shape[0], -1, grid->shape + 1, s->dims, s->dims, "the grid"));
    if (mode < DDPC_GRID_BILINEAR || mode > DDPC_GRID_BICUBIC || (mode == DDPC_GRID_BICUBIC && s->dims != 2))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown mode %d for %d spatial dims", OP, mode, s->dims);
    if (padding < DDPC_GRID_ZEROS || padding > DDPC_GRID_REFLECTION)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown padding mode %d", OP, padding);
    s->mode = mode, s->padding = padding, s->align_corners = align_corners != 0;
    s->size[2] = 1;
    *points = 1;
    for (int d = 0; d < s->dims; d++) s->size[d] = x->shape[x->ndim - 1 - d], *points *= grid->shape[1 + d];
    return DDPC_OK;
}

static ddpc_status check_writable_(const ddpc_buffer *b, const char *what) {
    if (b->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: %s is read-only", OP, what);
    return DDPC_OK;
}

/* ---- host loops ------------------------------------------------------------------- */

typedef struct {
    ddpc_grid_sampling s;
    int64_t n, c, points, volume; /* volume: the elements of one input volume */
    ddpc_dtype dtype;
    void *dst;         /* out, gx or ggrid */
    const void *x, *grid, *g;
} grid_job_;

static int64_t grain_(int64_t unit) { return unit > 0 && unit < GRID_CHUNK ? GRID_CHUNK / unit : 1; }

/* The taps of point u = n * points + p of the grid. */
static int point_taps_(const grid_job_ *j, int64_t u, ddpc_grid_tap *taps) {
    double coord[3];
    DDPC_FLOAT_TYPES(j->dtype, {
        const T *at = (const T *)j->grid + u * j->s.dims;
        for (int d = 0; d < j->s.dims; d++) coord[d] = (double)at[d];
    });
    return ddpc_grid_taps(&j->s, coord, taps);
}

/* Unit u = n * points + p: output p of every channel of sample n. */
static void sample_range_(void *ctx, int64_t lo, int64_t hi) {
    const grid_job_ *j = ctx;
    ddpc_grid_tap taps[DDPC_GRID_MAX_TAPS];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t u = lo; u < hi; u++) {
            int64_t n = u / j->points, p = u % j->points;
            int count = point_taps_(j, u, taps);
            for (int64_t c = 0; c < j->c; c++) {
                const T *x = (const T *)j->x + (n * j->c + c) * j->volume;
                double sum = 0;
                for (int t = 0; t < count; t++)
                    if (taps[t].at >= 0) sum += taps[t].w * (double)x[taps[t].at];
                ((T *)j->dst)[(n * j->c + c) * j->points + p] = (T)sum;
            }
        }
    });
}

/* Unit u = n * points + p: the gradient of grid point p of sample n, summed over the channels. */
static void grid_grad_range_(void *ctx, int64_t lo, int64_t hi) {
    const grid_job_ *j = ctx;
    ddpc_grid_tap taps[DDPC_GRID_MAX_TAPS];
    DDPC_FLOAT_TYPES(j->dtype, {
        for (int64_t u = lo; u < hi; u++) {
            int64_t n = u / j->points, p = u % j->points;
            int count = point_taps_(j, u, taps);
            double acc[3] = {0, 0, 0};
            for (int64_t c = 0; c < j->c; c++) {
                const T *x = (const T *)j->x + (n * j->c + c) * j->volume;
                double g = (double)((const T *)j->g)[(n * j->c + c) * j->points + p];
                for (int t = 0; t < count; t++) {
                    if (taps[t].at < 0) continue;
                    double v = (double)x[taps[t].at] * g;
                    for (int d = 0; d < j->s.dims; d++) acc[d] += taps[t].dw[d] * v;
                }
            }
            for (int d = 0; d < j->s.dims; d++) ((T *)j->dst)[u * j->s.dims + d] = (T)acc[d];
        }
    });
}

/* Unit u = n * C + c: volume (n, c) of the input gradient, gathered from every
 * point of sample n; the units of one sample in the range share each point's taps. */
static void input_grad_range_(void *ctx, int64_t lo, int64_t hi) {
    const grid_job_ *j = ctx;
    ddpc_grid_tap taps[DDPC_GRID_MAX_TAPS];
    DDPC_FLOAT_TYPES(j->dtype, {
        memset((T *)j->dst + lo * j->volume, 0, (size_t)((hi - lo) * j->volume) * sizeof(T));
        for (int64_t n = lo / j->c; n * j->c < hi; n++) {
            int64_t c0 = (lo > n * j->c ? lo : n * j->c), c1 = (hi < (n + 1) * j->c ? hi : (n + 1) * j->c);
            for (int64_t p = 0; p < j->points; p++) {
                int count = point_taps_(j, n * j->points + p, taps);
                for (int64_t u = c0; u < c1; u++) {
                    T *gx = (T *)j->dst + u * j->volume;
                    double g = (double)((const T *)j->g)[u * j->points + p];
                    for (int t = 0; t < count; t++)
                        if (taps[t].at >= 0) gx[taps[t].at] += (T)(taps[t].w * g);
                }
            }
        }
    });
}

/* ---- entry points ------------------------------------------------------------------ */

ddpc_status ddpc_op_grid_sample(ddpc_buffer *out, const ddpc_buffer *x, const ddpc_buffer *grid, int mode, int padding,
                                int align_corners) {
    grid_job_ j = {.dtype = x->dtype, .dst = out->data, .x = x->data, .grid = grid->data};
    CHECK(check_writable_(out, "the output"));
    CHECK(sampling_(x, grid, mode, padding, align_corners, &j.s, &j.points));
    CHECK(check_shape_(out, x, x->shape[0], x->shape[1], grid->shape + 1, j.s.dims, -1, "the output"));
    j.n = x->shape[0], j.c = x->shape[1], j.volume = j.s.size[0] * j.s.size[1] * j.s.size[2];
    if (out->numel == 0) return DDPC_OK;
    if (out->device != DDPC_CPU)
        DDPC_LAUNCH(out->device, ddpc_k_grid_sample(out->data, x->data, grid->data, x->dtype, j.n, j.c, j.points, j.s,
                                                    stream));
    ddpc_parallel_for(j.n * j.points, grain_(j.c * DDPC_GRID_MAX_TAPS), sample_range_, &j);
    return DDPC_OK;
}

ddpc_status ddpc_op_grid_sample_backward(ddpc_buffer *gx, ddpc_buffer *ggrid, const ddpc_buffer *g,
                                         const ddpc_buffer *x, const ddpc_buffer *grid, int mode, int padding,
                                         int align_corners) {
    grid_job_ j = {.dtype = x->dtype, .x = x->data, .grid = grid->data, .g = g->data};
    CHECK(sampling_(x, grid, mode, padding, align_corners, &j.s, &j.points));
    CHECK(check_shape_(g, x, x->shape[0], x->shape[1], grid->shape + 1, j.s.dims, -1, "the output gradient"));
    if (gx) {
        CHECK(check_writable_(gx, "the input gradient"));
        CHECK(check_shape_(gx, x, x->shape[0], x->shape[1], x->shape + 2, j.s.dims, -1, "the input gradient"));
    }
    if (ggrid) {
        CHECK(check_writable_(ggrid, "the grid gradient"));
        CHECK(check_shape_(ggrid, x, x->shape[0], -1, grid->shape + 1, j.s.dims, j.s.dims, "the grid gradient"));
    }
    j.n = x->shape[0], j.c = x->shape[1], j.volume = j.s.size[0] * j.s.size[1] * j.s.size[2];
    if (x->device != DDPC_CPU)
        DDPC_LAUNCH(x->device, ddpc_k_grid_sample_backward(gx ? gx->data : NULL, ggrid ? ggrid->data : NULL, g->data,
                                                           x->data, grid->data, x->dtype, j.n, j.c, j.points, j.s,
                                                           stream));
    if (gx && gx->numel) {
        j.dst = gx->data;
        ddpc_parallel_for(j.n * j.c, grain_(j.points * DDPC_GRID_MAX_TAPS + j.volume), input_grad_range_, &j);
    }
    if (ggrid && ggrid->numel) {
        j.dst = ggrid->data;
        ddpc_parallel_for(j.n * j.points, grain_(j.c * DDPC_GRID_MAX_TAPS), grid_grad_range_, &j);
    }
    return DDPC_OK;
}

/* ---- Python bindings -------------------------------------------------------------- */

/* A Buffer, or NULL for None. */
static int arg_buffer_or_none_(PyObject *o, ddpc_buffer **out) {
    *out = NULL;
    return o == Py_None || ddpc_arg_buffer(o, out);
}

static PyObject *py_grid_sample(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *out, *x, *grid;
    int mode, padding, align_corners;
    if (!ddpc_parse_args(args, "O&O&O&iip:grid_sample", ddpc_arg_buffer, &out, ddpc_arg_buffer, &x, ddpc_arg_buffer,
                         &grid, &mode, &padding, &align_corners))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(out), ddpc_op_grid_sample(out, x, grid, mode, padding, align_corners));
}

static PyObject *py_grid_sample_backward(PyObject *m, PyObject *args) {
    (void)m;
    ddpc_buffer *gx, *ggrid, *g, *x, *grid;
    int mode, padding, align_corners;
    if (!ddpc_parse_args(args, "O&O&O&O&O&iip:grid_sample_backward", arg_buffer_or_none_, &gx, arg_buffer_or_none_,
                         &ggrid, ddpc_arg_buffer, &g, ddpc_arg_buffer, &x, ddpc_arg_buffer, &grid, &mode, &padding,
                         &align_corners))
        return NULL;
    DDPC_RUN_RELEASED(ddpc_buffer_nbytes(g) + ddpc_buffer_nbytes(x),
                      ddpc_op_grid_sample_backward(gx, ggrid, g, x, grid, mode, padding, align_corners));
}

static PyMethodDef grid_methods[] = {
    {"grid_sample", py_grid_sample, METH_VARARGS,
     "grid_sample(out, x, grid, mode, padding_mode, align_corners): out [N, C, *out] = x [N, C, *in] (2 or 3 spatial "
     "dims) sampled at grid [N, *out, dims]; modes bilinear 0, nearest 1, bicubic 2; padding zeros 0, border 1, "
     "reflection 2"},
    {"grid_sample_backward", py_grid_sample_backward, METH_VARARGS,
     "grid_sample_backward(gx, ggrid, g, x, grid, mode, padding_mode, align_corners): the gradients of grid_sample "
     "into gx and ggrid (either None when not wanted)"},
    {NULL, NULL, 0, NULL},
};

int ddpc_grid_register(PyObject *module) { return PyModule_AddFunctions(module, grid_methods); }
