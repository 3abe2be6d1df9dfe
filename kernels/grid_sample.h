/* The per-point math of grid_sample, PyTorch's rules, shared by the host
 * loops (csrc/ops_grid.c) and the CUDA kernels (kernels/grid.cu) so both
 * sample every point the same way. Plain C: it compiles with cc and with
 * nvcc. Included through kernels.h, which defines DDPC_HD.
 *
 * A grid point holds one coordinate per spatial dim in [-1, 1] order x, y
 * (and z): x runs along W, y along H, z along D. ddpc_grid_taps turns it
 * into taps: the input elements the output at that point reads, each with its
 * weight and the weight's derivatives with respect to the grid coordinates.
 * The forward pass sums weight * input over the taps, the input gradient adds
 * weight * g at each tap, and the grid gradient sums derivative * input * g,
 * so the three passes cannot disagree about where a point reads.
 *
 * Coordinates are computed in double for both element types. */
#ifndef DDPC_GRID_SAMPLE_H
#define DDPC_GRID_SAMPLE_H

#include <math.h>
#include <stdint.h>

/* Interpolation modes and padding modes, numbered as PyTorch's enums. */
enum { DDPC_GRID_BILINEAR = 0, DDPC_GRID_NEAREST = 1, DDPC_GRID_BICUBIC = 2 };
enum { DDPC_GRID_ZEROS = 0, DDPC_GRID_BORDER = 1, DDPC_GRID_REFLECTION = 2 };

/* Bicubic's 4 x 4 taps are the most a point reads. */
#define DDPC_GRID_MAX_TAPS 16

typedef struct {
    int64_t size[3]; /* the input's W, H and D (D = 1 for 2-d) */
    int dims;        /* 2 (grid points x, y) or 3 (x, y, z) */
    int mode, padding, align_corners;
} ddpc_grid_sampling;

typedef struct {
    int64_t at;   /* offset in one input volume, (z * H + y) * W + x; -1: padding, reads zero */
    double w;     /* the weight of the element */
    double dw[3]; /* d w / d grid coordinate x, y, z */
} ddpc_grid_tap;

/* A grid coordinate in [-1, 1] as a position in [0, size - 1] (align_corners:
 * -1 and 1 are the centres of the corner elements) or [-0.5, size - 0.5]
 * (their outer edges); *grad is d position / d coordinate. */
static inline DDPC_HD double ddpc_grid_unnormalize(double coord, int64_t size, int align_corners, double *grad) {
    if (align_corners) {
        *grad = (double)(size - 1) / 2;
        return (coord + 1) / 2 * (double)(size - 1);
    }
    *grad = (double)size / 2;
    return ((coord + 1) * (double)size - 1) / 2;
}

/* x clipped to [0, size - 1], *grad its derivative (0 where clipped). */
static inline DDPC_HD double ddpc_grid_clip(double x, int64_t size, double *grad) {
    double top = (double)(size - 1);
    *grad = 0;
    if (x <= 0) return 0;
    if (x >= top) return top;
    *grad = 1;
    return x;
}

/* x reflected into [twice_low / 2, twice_high / 2] by the bounds as mirrors
 * (repeatedly), *grad its derivative (+1 or -1). */
static inline DDPC_HD double ddpc_grid_reflect(double x, int64_t twice_low, int64_t twice_high, double *grad) {
    *grad = 0;
    if (twice_low == twice_high) return 0;
    double low = (double)twice_low / 2, span = (double)(twice_high - twice_low) / 2, sign = 1;
    x -= low;
    if (x < 0) sign = -1, x = -x;
    double extra = fmod(x, span);
    if (fmod(floor(x / span), 2.0) == 0) {
        *grad = sign;
        return extra + low;
    }
    *grad = -sign;
    return span - extra + low;
}

/* A position along a dim of `size` elements after the padding mode ('zeros'
 * leaves it, 'border' clips it, 'reflection' reflects it at the borders that
 * align_corners sets, then clips), *grad its derivative. A position too large
 * to index, or not finite, becomes -100: outside the input whatever the size. */
static inline DDPC_HD double ddpc_grid_pad(double x, int64_t size, int padding, int align_corners, double *grad) {
    double g_reflect = 1, g_clip = 1;
    if (padding == DDPC_GRID_REFLECTION)
        x = align_corners ? ddpc_grid_reflect(x, 0, 2 * (size - 1), &g_reflect)
                          : ddpc_grid_reflect(x, -1, 2 * size - 1, &g_reflect);
    if (padding != DDPC_GRID_ZEROS) x = ddpc_grid_clip(x, size, &g_clip);
    *grad = g_reflect * g_clip;
    if (!(x > -1e15 && x < 1e15)) return -100;
    return x;
}

/* Keys' cubic convolution weights (A = -0.75, as PyTorch's) of the taps at
 * -1, 0, 1 and 2 from a position t in [0, 1) past the floor, and their
 * derivatives with respect to t. */
static inline DDPC_HD void ddpc_grid_cubic_weights(double t, double *w, double *dw) {
    const double A = -0.75;
    double d[4] = {t + 1, t, 1 - t, 2 - t}; /* distances from the taps */
    for (int k = 0; k < 4; k++) {
        double x = d[k], sign = k < 2 ? 1 : -1; /* d distance / d t */
        if (k == 1 || k == 2) {
            w[k] = ((A + 2) * x - (A + 3)) * x * x + 1;
            dw[k] = sign * (3 * (A + 2) * x - 2 * (A + 3)) * x;
        } else {
            w[k] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
            dw[k] = sign * ((3 * A * x - 10 * A) * x + 8 * A);
        }
    }
}

/* Whether integer position p[d] lies in the input along every dim, and its
 * offset in a volume. */
static inline DDPC_HD int64_t ddpc_grid_offset(const ddpc_grid_sampling *s, const int64_t *p) {
    for (int d = 0; d < s->dims; d++)
        if (p[d] < 0 || p[d] >= s->size[d]) return -1;
    return s->dims == 3 ? (p[2] * s->size[1] + p[1]) * s->size[0] + p[0] : p[1] * s->size[0] + p[0];
}

/* The taps of the grid point `coord` (dims coordinates, x first); returns
 * their number. Bilinear (trilinear for 3 dims): the 2^dims corners around
 * the padded position, the weight of each a product over dims of its
 * nearness. Nearest: the element at the padded position rounded half to
 * even, with no derivatives. Bicubic (2 dims): the 4 x 4 elements around the
 * unpadded position, each tap's position padded on its own, as PyTorch does. */
static inline DDPC_HD int ddpc_grid_taps(const ddpc_grid_sampling *s, const double *coord, ddpc_grid_tap *taps) {
    double pos[3], mult[3], g_pad;
    int64_t p[3] = {0, 0, 0};
    for (int d = 0; d < s->dims; d++) pos[d] = ddpc_grid_unnormalize(coord[d], s->size[d], s->align_corners, &mult[d]);
    if (s->mode == DDPC_GRID_BICUBIC) {
        double w[2][4], dw[2][4], base[2];
        for (int d = 0; d < 2; d++) {
            base[d] = floor(pos[d]);
            ddpc_grid_cubic_weights(pos[d] - base[d], w[d], dw[d]);
        }
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 4; i++) {
                ddpc_grid_tap *t = &taps[j * 4 + i];
                p[0] = (int64_t)ddpc_grid_pad(base[0] - 1 + i, s->size[0], s->padding, s->align_corners, &g_pad);
                p[1] = (int64_t)ddpc_grid_pad(base[1] - 1 + j, s->size[1], s->padding, s->align_corners, &g_pad);
                t->at = ddpc_grid_offset(s, p);
                t->w = w[0][i] * w[1][j];
                t->dw[0] = mult[0] * dw[0][i] * w[1][j];
                t->dw[1] = mult[1] * w[0][i] * dw[1][j];
                t->dw[2] = 0;
            }
        return 16;
    }
    for (int d = 0; d < s->dims; d++) {
        pos[d] = ddpc_grid_pad(pos[d], s->size[d], s->padding, s->align_corners, &g_pad);
        mult[d] *= g_pad;
    }
    if (s->mode == DDPC_GRID_NEAREST) {
        for (int d = 0; d < s->dims; d++) p[d] = (int64_t)rint(pos[d]);
        taps[0].at = ddpc_grid_offset(s, p);
        taps[0].w = 1;
        taps[0].dw[0] = taps[0].dw[1] = taps[0].dw[2] = 0;
        return 1;
    }
    double lo[3], nearness[3][2]; /* nearness[d][b]: the nearness to the corner below (b = 0) or above (b = 1) */
    for (int d = 0; d < s->dims; d++) {
        lo[d] = floor(pos[d]);
        nearness[d][0] = lo[d] + 1 - pos[d], nearness[d][1] = pos[d] - lo[d];
    }
    int n = 1 << s->dims;
    for (int corner = 0; corner < n; corner++) {
        ddpc_grid_tap *t = &taps[corner];
        t->w = 1;
        for (int d = 0; d < s->dims; d++) {
            int b = (corner >> d) & 1;
            p[d] = (int64_t)lo[d] + b;
            t->w *= nearness[d][b];
        }
        t->at = ddpc_grid_offset(s, p);
        t->dw[2] = 0;
        for (int d = 0; d < s->dims; d++) {
            double dd = ((corner >> d) & 1) ? mult[d] : -mult[d];
            for (int e = 0; e < s->dims; e++)
                if (e != d) dd *= nearness[e][(corner >> e) & 1];
            t->dw[d] = dd;
        }
    }
    return n;
}

#endif
