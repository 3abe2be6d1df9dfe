/* Sliding-window geometry of convolution and pooling over (D, H, W)
 * volumes, and the max pools' scan of a window, shared by the host loops
 * (csrc/ops_conv.c) and the CUDA kernels (kernels/conv.cu), so both walk
 * each window the same way. A 2-d op is the 3-d one with D = 1, a 1-d op
 * with D = H = 1: the leading dims of every geometry array are then a window
 * of one tap over one element. Plain C: it compiles with cc and with nvcc.
 * Included through kernels.h, which defines DDPC_HD.
 *
 * Along dim d, tap k of the window of output o reads input
 * o * stride - pad + k * dilation; reads outside [0, in) are padding. */
#ifndef DDPC_WINDOW_H
#define DDPC_WINDOW_H

#include <math.h>
#include <stdint.h>

#define DDPC_WINDOW_DIMS 3

typedef struct {
    int64_t in[DDPC_WINDOW_DIMS], out[DDPC_WINDOW_DIMS]; /* (D, H, W) of the input and of the output volumes */
    int64_t kernel[DDPC_WINDOW_DIMS], stride[DDPC_WINDOW_DIMS], dilation[DDPC_WINDOW_DIMS];
    int64_t pad[DDPC_WINDOW_DIMS]; /* before the first element; the padding after it is what the output size implies */
    int64_t divisor;               /* average pools: divisor_override, 0 for none */
    int count_include_pad;         /* average pools: padding counts in the divisor */
    int adaptive;                  /* pools: PyTorch's adaptive windows instead of kernel, stride and pad */
} ddpc_window;

/* Floor and ceiling of a / b for b > 0 and a of either sign. */
static inline DDPC_HD int64_t ddpc_floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static inline DDPC_HD int64_t ddpc_ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

/* Adaptive window o along dim d: [floor(o * in / out), ceil((o + 1) * in / out)). */
static inline DDPC_HD void ddpc_adaptive_window(const ddpc_window *w, int d, int64_t o, int64_t *lo, int64_t *hi) {
    *lo = o * w->in[d] / w->out[d];
    *hi = ((o + 1) * w->in[d] + w->out[d] - 1) / w->out[d];
}

/* The taps [*k0, *k1) of output o's window along dim d that read the input
 * (none: *k0 == *k1); returns where tap 0 reads, tap k reading that plus
 * k * dilation. An adaptive window is its input range, its dilation 1. */
static inline DDPC_HD int64_t ddpc_window_taps(const ddpc_window *w, int d, int64_t o, int64_t *k0, int64_t *k1) {
    if (w->adaptive) {
        int64_t lo, hi;
        ddpc_adaptive_window(w, d, o, &lo, &hi);
        *k0 = 0, *k1 = hi - lo;
        return lo;
    }
    int64_t start = o * w->stride[d] - w->pad[d];
    int64_t lo = ddpc_ceil_div(-start, w->dilation[d]), hi = ddpc_floor_div(w->in[d] - 1 - start, w->dilation[d]) + 1;
    *k0 = lo > 0 ? lo : 0;
    *k1 = hi < w->kernel[d] ? hi : w->kernel[d];
    if (*k1 < *k0) *k1 = *k0;
    return start;
}

/* A max pool's window of output (od, oh, ow): along each dim d, where its
 * tap 0 reads (start[d]) and the taps [k0[d], k1[d]) that read the input,
 * as ddpc_window_taps gives them. The host loop fills it one dim at a time
 * as it walks the outputs; ddpc_max_window_box fills it at once. */
typedef struct {
    int64_t start[DDPC_WINDOW_DIMS], k0[DDPC_WINDOW_DIMS], k1[DDPC_WINDOW_DIMS];
} ddpc_max_box;

static inline DDPC_HD ddpc_max_box ddpc_max_window_box(const ddpc_window *w, const int64_t *o) {
    ddpc_max_box b;
    for (int d = 0; d < DDPC_WINDOW_DIMS; d++) b.start[d] = ddpc_window_taps(w, d, o[d], &b.k0[d], &b.k1[d]);
    return b;
}

/* The element a max pool takes from the window b of one input volume `src`
 * (float32 elements, float64 with `f64`), by PyTorch's rule: the first tap
 * that reads the input starts, then a larger value or a NaN takes over.
 * Returns its offset in the volume, or -1 for a window that reads no input
 * (whose output is -inf). Values compare as doubles, which order float32
 * elements exactly as float32 does, so both element types share this scan. */
static inline DDPC_HD int64_t ddpc_max_window_scan(const ddpc_window *w, const ddpc_max_box *b, const void *src,
                                                   int f64) {
    const int64_t H = w->in[1], W = w->in[2], dd = w->dilation[0], dh = w->dilation[1], dw = w->dilation[2];
    if (b->k0[0] == b->k1[0] || b->k0[1] == b->k1[1] || b->k0[2] == b->k1[2]) return -1;
    double best = -INFINITY;
    int64_t at = ((b->start[0] + b->k0[0] * dd) * H + b->start[1] + b->k0[1] * dh) * W + b->start[2] + b->k0[2] * dw;
    for (int64_t kd = b->k0[0]; kd < b->k1[0]; kd++)
        for (int64_t kh = b->k0[1]; kh < b->k1[1]; kh++)
            for (int64_t kw = b->k0[2]; kw < b->k1[2]; kw++) {
                int64_t j = ((b->start[0] + kd * dd) * H + b->start[1] + kh * dh) * W + b->start[2] + kw * dw;
                double v = f64 ? ((const double *)src)[j] : (double)((const float *)src)[j];
                if (v > best || v != v) best = v, at = j;
            }
    return at;
}

/* The outputs [*o0, *o1) along dim d whose tap k reads the input: im2col's
 * valid stretch of one row. */
static inline DDPC_HD void ddpc_window_outputs(const ddpc_window *w, int d, int64_t k, int64_t *o0, int64_t *o1) {
    int64_t off = k * w->dilation[d] - w->pad[d];
    int64_t lo = ddpc_ceil_div(-off, w->stride[d]), hi = ddpc_floor_div(w->in[d] - 1 - off, w->stride[d]) + 1;
    *o0 = lo > 0 ? lo : 0;
    *o1 = hi < w->out[d] ? hi : w->out[d];
    if (*o1 < *o0) *o1 = *o0;
}

/* The input range [*lo, *hi) that output o of an average pool takes along
 * dim d, and its factor of the divisor, as PyTorch counts it: the window cut
 * at the end of the right padding (ceil_mode may run past it), counted with
 * its padding when count_include_pad; or the adaptive window. */
static inline DDPC_HD int64_t ddpc_avg_window(const ddpc_window *w, int d, int64_t o, int64_t *lo, int64_t *hi) {
    if (w->adaptive) {
        ddpc_adaptive_window(w, d, o, lo, hi);
        return *hi - *lo;
    }
    int64_t start = o * w->stride[d] - w->pad[d], end = start + w->kernel[d];
    if (end > w->in[d] + w->pad[d]) end = w->in[d] + w->pad[d];
    *lo = start > 0 ? start : 0;
    *hi = end < w->in[d] ? end : w->in[d];
    if (*hi < *lo) *hi = *lo;
    return w->count_include_pad ? end - start : *hi - *lo;
}

/* An average pool's window of output (od, oh, ow): its input ranges along
 * the three dims, and what the sum over them is divided by (divisor_override,
 * or the product of the dims' factors). */
typedef struct {
    int64_t lo[DDPC_WINDOW_DIMS], hi[DDPC_WINDOW_DIMS];
    double divisor;
} ddpc_avg_box;

static inline DDPC_HD ddpc_avg_box ddpc_avg_window_box(const ddpc_window *w, const int64_t *o) {
    ddpc_avg_box b;
    int64_t factor = 1;
    for (int d = 0; d < DDPC_WINDOW_DIMS; d++) factor *= ddpc_avg_window(w, d, o[d], &b.lo[d], &b.hi[d]);
    b.divisor = (double)(w->divisor ? w->divisor : factor);
    return b;
}

#endif
