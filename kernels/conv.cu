// Convolution and pooling kernels: im2col, col2im, max and average pools
// with their gradients (float32 and float64), over the window geometry of
// window.h, which the host loops in csrc/ops_conv.c share.
#include <math.h>

#include "kernels.h"
#include "nn_common.cuh"

namespace {

// One thread per column entry: entry (c, kh, kw, n, oh, ow), zero where its tap reads padding.
template <typename T> __global__ void im2col_kernel(T *col, const T *x, int64_t n, int64_t c, ddpc_window w) {
    const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1], KH = w.kernel[0], KW = w.kernel[1];
    GRID_STRIDE(i, c * KH * KW * n * OH * OW) {
        int64_t ow = i % OW, r = i / OW;
        int64_t oh = r % OH;
        r /= OH;
        int64_t b = r % n;
        r /= n;
        int64_t kw = r % KW, kh = (r / KW) % KH, ch = r / (KW * KH);
        int64_t ih = oh * w.stride[0] - w.pad[0] + kh * w.dilation[0];
        int64_t iw = ow * w.stride[1] - w.pad[1] + kw * w.dilation[1];
        col[i] = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[((b * c + ch) * H + ih) * W + iw] : T(0);
    }
}

// One thread per image element, gathering the column entries that im2col took
// from it (no atomics): tap k of output o reads i when o * stride = i + pad - k * dilation.
template <typename T> __global__ void col2im_kernel(T *gx, const T *col, int64_t n, int64_t c, ddpc_window w) {
    const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1], KH = w.kernel[0], KW = w.kernel[1];
    GRID_STRIDE(i, n * c * H * W) {
        int64_t iw = i % W, ih = (i / W) % H, ch = (i / (W * H)) % c, b = i / (W * H * c);
        T acc = T(0);
        for (int64_t kh = 0; kh < KH; kh++) {
            int64_t th = ih + w.pad[0] - kh * w.dilation[0];
            if (th < 0 || th % w.stride[0] != 0 || th / w.stride[0] >= OH) continue;
            for (int64_t kw = 0; kw < KW; kw++) {
                int64_t tw = iw + w.pad[1] - kw * w.dilation[1];
                if (tw < 0 || tw % w.stride[1] != 0 || tw / w.stride[1] >= OW) continue;
                acc += col[((((ch * KH + kh) * KW + kw) * n + b) * OH + th / w.stride[0]) * OW + tw / w.stride[1]];
            }
        }
        gx[i] = acc;
    }
}

// One thread per output, with the host loop's rule: the first tap inside the
// input starts, a larger value or a NaN takes over.
template <typename T>
__global__ void max_pool_kernel(T *out, int64_t *indices, const T *x, int64_t planes, ddpc_window w) {
    const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1];
    GRID_STRIDE(i, planes * OH * OW) {
        int64_t ow = i % OW, oh = (i / OW) % OH, p = i / (OW * OH);
        int64_t kh0, kh1, kw0, kw1;
        ddpc_window_taps(&w, 0, oh, &kh0, &kh1);
        ddpc_window_taps(&w, 1, ow, &kw0, &kw1);
        int64_t ih0 = oh * w.stride[0] - w.pad[0], iw0 = ow * w.stride[1] - w.pad[1];
        const T *src = x + p * H * W;
        T best = T(-INFINITY);
        int64_t at = kh0 < kh1 && kw0 < kw1 ? (ih0 + kh0 * w.dilation[0]) * W + iw0 + kw0 * w.dilation[1] : -1;
        for (int64_t kh = kh0; kh < kh1; kh++)
            for (int64_t kw = kw0; kw < kw1; kw++) {
                int64_t j = (ih0 + kh * w.dilation[0]) * W + iw0 + kw * w.dilation[1];
                T v = src[j];
                if (v > best || v != v) best = v, at = j;
            }
        out[i] = best;
        indices[i] = at;
    }
}

// One thread per output gradient, added at its index (windows may overlap).
template <typename T>
__global__ void max_pool_backward_kernel(T *gx, const T *g, const int64_t *indices, int64_t planes, int64_t in_plane,
                                         int64_t out_plane) {
    GRID_STRIDE(i, planes * out_plane) {
        int64_t at = indices[i];
        if (at >= 0 && at < in_plane) atomicAdd(&gx[(i / out_plane) * in_plane + at], g[i]);
    }
}

// One thread per output; the sum in double, as on the host.
template <typename T> __global__ void avg_pool_kernel(T *out, const T *x, int64_t planes, ddpc_window w) {
    const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1];
    GRID_STRIDE(i, planes * OH * OW) {
        int64_t ow = i % OW, oh = (i / OW) % OH, p = i / (OW * OH);
        int64_t h0, h1, w0, w1;
        int64_t fh = ddpc_avg_window(&w, 0, oh, &h0, &h1), fw = ddpc_avg_window(&w, 1, ow, &w0, &w1);
        const T *src = x + p * H * W;
        double sum = 0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum += (double)src[ih * W + iw];
        out[i] = (T)(sum / ddpc_avg_divisor(&w, fh, fw));
    }
}

// One thread per output gradient, spread over its window (windows may overlap).
template <typename T> __global__ void avg_pool_backward_kernel(T *gx, const T *g, int64_t planes, ddpc_window w) {
    const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1];
    GRID_STRIDE(i, planes * OH * OW) {
        int64_t ow = i % OW, oh = (i / OW) % OH, p = i / (OW * OH);
        int64_t h0, h1, w0, w1;
        int64_t fh = ddpc_avg_window(&w, 0, oh, &h0, &h1), fw = ddpc_avg_window(&w, 1, ow, &w0, &w1);
        T share = (T)((double)g[i] / ddpc_avg_divisor(&w, fh, fw));
        T *dst = gx + p * H * W;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) atomicAdd(&dst[ih * W + iw], share);
    }
}

}  // namespace

extern "C" int ddpc_k_im2col(void *col, const void *x, int dtype, int64_t n, int64_t c, ddpc_window w, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = c * w.kernel[0] * w.kernel[1] * n * w.out[0] * w.out[1];
    FLOAT_DISPATCH(dtype, im2col_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)col, (const T *)x, n, c, w))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_col2im(void *gx, const void *col, int dtype, int64_t n, int64_t c, ddpc_window w, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = n * c * w.in[0] * w.in[1];
    FLOAT_DISPATCH(dtype, col2im_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)gx, (const T *)col, n, c, w))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_max_pool(void *out, int64_t *indices, const void *x, int dtype, int64_t planes, ddpc_window w,
                               void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = planes * w.out[0] * w.out[1];
    FLOAT_DISPATCH(dtype, max_pool_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)out, indices, (const T *)x,
                                                                                   planes, w))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_max_pool_backward(void *gx, const void *g, const int64_t *indices, int dtype, int64_t planes,
                                        int64_t in_plane, int64_t out_plane, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int rc = ddpc_k_fill(gx, dtype, planes * in_plane, 0.0, stream);
    if (rc) return rc;
    if (out_plane == 0) return 0;
    FLOAT_DISPATCH(dtype, max_pool_backward_kernel<T><<<grid_for(planes * out_plane, 256), 256, 0, s>>>(
                              (T *)gx, (const T *)g, indices, planes, in_plane, out_plane))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_avg_pool(void *out, const void *x, int dtype, int64_t planes, ddpc_window w, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = planes * w.out[0] * w.out[1];
    FLOAT_DISPATCH(dtype, avg_pool_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)out, (const T *)x, planes, w))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_avg_pool_backward(void *gx, const void *g, int dtype, int64_t planes, ddpc_window w,
                                        void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int rc = ddpc_k_fill(gx, dtype, planes * w.in[0] * w.in[1], 0.0, stream);
    if (rc) return rc;
    int64_t total = planes * w.out[0] * w.out[1];
    if (total == 0) return 0;
    FLOAT_DISPATCH(dtype, avg_pool_backward_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)gx, (const T *)g,
                                                                                           planes, w))
    return (int)cudaGetLastError();
}
