/* Sliding-window geometry of convolution and pooling over (H, W) planes,
 * shared by the host loops (csrc/ops_conv.c) and the CUDA kernels
 * (kernels/conv.cu), so both walk each window the same way. A 1-d op is the
 * 2-d one with H = 1. Plain C: it compiles with cc and with nvcc. Included
 * through kernels.h, which defines DDPC_HD.
 *
 * Along dim d, tap k of the window of output o reads input
 * o * stride - pad + k * dilation; reads outside [0, in) are padding. */
#ifndef DDPC_WINDOW_H
#define DDPC_WINDOW_H

#include <stdint.h>

typedef struct {
    int64_t in[2], out[2]; /* (H, W) of the input and of the output planes */
    int64_t kernel[2], stride[2], dilation[2];
    int64_t pad[2];        /* before the first element; the padding after it is what the output size implies */
    int64_t divisor;       /* average pools: divisor_override, 0 for none */
    int count_include_pad; /* average pools: padding counts in the divisor */
    int adaptive;          /* average pools: PyTorch's adaptive windows instead of kernel, stride and pad */
} ddpc_window;

/* Floor and ceiling of a / b for b > 0 and a of either sign. */
static inline DDPC_HD int64_t ddpc_floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static inline DDPC_HD int64_t ddpc_ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

/* The taps [*k0, *k1) of output o's window along dim d that read the input (none: *k0 == *k1). */
static inline DDPC_HD void ddpc_window_taps(const ddpc_window *w, int d, int64_t o, int64_t *k0, int64_t *k1) {
    int64_t start = o * w->stride[d] - w->pad[d];
    int64_t lo = ddpc_ceil_div(-start, w->dilation[d]), hi = ddpc_floor_div(w->in[d] - 1 - start, w->dilation[d]) + 1;
    *k0 = lo > 0 ? lo : 0;
    *k1 = hi < w->kernel[d] ? hi : w->kernel[d];
    if (*k1 < *k0) *k1 = *k0;
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
 * its padding when count_include_pad. Adaptive windows are
 * [floor(o * in / out), ceil((o + 1) * in / out)). */
static inline DDPC_HD int64_t ddpc_avg_window(const ddpc_window *w, int d, int64_t o, int64_t *lo, int64_t *hi) {
    if (w->adaptive) {
        *lo = o * w->in[d] / w->out[d];
        *hi = ((o + 1) * w->in[d] + w->out[d] - 1) / w->out[d];
        return *hi - *lo;
    }
    int64_t start = o * w->stride[d] - w->pad[d], end = start + w->kernel[d];
    if (end > w->in[d] + w->pad[d]) end = w->in[d] + w->pad[d];
    *lo = start > 0 ? start : 0;
    *hi = end < w->in[d] ? end : w->in[d];
    if (*hi < *lo) *hi = *lo;
    return w->count_include_pad ? end - start : *hi - *lo;
}

/* What an average pool divides the sum of a window by: divisor_override, or
 * the product of the window's factors along H (fh) and W (fw). */
static inline DDPC_HD double ddpc_avg_divisor(const ddpc_window *w, int64_t fh, int64_t fw) {
    return (double)(w->divisor ? w->divisor : fh * fw);
}

#endif
