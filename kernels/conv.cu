// Convolution and pooling kernels: im2col, col2im, max and average pools
// with their gradients (float32 and float64), over (D, H, W) volumes with the
// window geometry of window.h, which the host loops in csrc/ops_conv.c share.
#include <math.h>

#include "index_check.cuh"
#include "kernels.h"
#include "nn_common.cuh"

namespace {

__device__ inline int64_t volume(const int64_t *sizes) { return sizes[0] * sizes[1] * sizes[2]; }

// One thread per column entry: entry (c, kd, kh, kw, n, od, oh, ow), zero where its tap reads padding.
template <typename T> __global__ void im2col_kernel(T *col, const T *x, int64_t n, int64_t c, ddpc_window w) {
    const int64_t D = w.in[0], H = w.in[1], W = w.in[2], OD = w.out[0], OH = w.out[1], OW = w.out[2];
    const int64_t KD = w.kernel[0], KH = w.kernel[1], KW = w.kernel[2];
    GRID_STRIDE(i, c * KD * KH * KW * n * OD * OH * OW) {
        int64_t ow = i % OW, r = i / OW;
        int64_t oh = r % OH;
        r /= OH;
        int64_t od = r % OD;
        r /= OD;
        int64_t b = r % n;
        r /= n;
        int64_t kw = r % KW, kh = (r / KW) % KH, kd = (r / (KW * KH)) % KD, ch = r / (KW * KH * KD);
        int64_t id = od * w.stride[0] - w.pad[0] + kd * w.dilation[0];
        int64_t ih = oh * w.stride[1] - w.pad[1] + kh * w.dilation[1];
        int64_t iw = ow * w.stride[2] - w.pad[2] + kw * w.dilation[2];
        col[i] = id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W
                     ? x[(((b * c + ch) * D + id) * H + ih) * W + iw]
                     : T(0);
    }
}

// The output o along dim d whose tap k reads input i, or -1: o * stride = i + pad - k * dilation.
__device__ inline int64_t reading_output(const ddpc_window &w, int d, int64_t i, int64_t k) {
    int64_t t = i + w.pad[d] - k * w.dilation[d];
    return t < 0 || t % w.stride[d] != 0 || t / w.stride[d] >= w.out[d] ? -1 : t / w.stride[d];
}

// One thread per image element, gathering the column entries that im2col took from it (no atomics).
template <typename T> __global__ void col2im_kernel(T *gx, const T *col, int64_t n, int64_t c, ddpc_window w) {
    const int64_t D = w.in[0], H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2];
    const int64_t KD = w.kernel[0], KH = w.kernel[1], KW = w.kernel[2], out_volume = volume(w.out);
    GRID_STRIDE(i, n * c * D * H * W) {
        int64_t iw = i % W, ih = (i / W) % H, idp = (i / (W * H)) % D, r = i / (W * H * D);
        int64_t ch = r % c, b = r / c;
        T acc = T(0);
        for (int64_t kd = 0; kd < KD; kd++) {
            int64_t od = reading_output(w, 0, idp, kd);
            if (od < 0) continue;
            for (int64_t kh = 0; kh < KH; kh++) {
                int64_t oh = reading_output(w, 1, ih, kh);
                if (oh < 0) continue;
                for (int64_t kw = 0; kw < KW; kw++) {
                    int64_t ow = reading_output(w, 2, iw, kw);
                    if (ow < 0) continue;
                    int64_t tap = ((ch * KD + kd) * KH + kh) * KW + kw;
                    acc += col[(tap * n + b) * out_volume + (od * OH + oh) * OW + ow];
                }
            }
        }
        gx[i] = acc;
    }
}

// The output index i of `planes` volumes as its volume p and position o (od, oh, ow).
__device__ inline int64_t output_position(const ddpc_window &w, int64_t i, int64_t *o) {
    o[2] = i % w.out[2], o[1] = (i / w.out[2]) % w.out[1], o[0] = (i / (w.out[2] * w.out[1])) % w.out[0];
    return i / volume(w.out);
}

// One thread per output, scanning its window as the host loop does (window.h).
template <typename T>
__global__ void max_pool_kernel(T *out, int64_t *indices, const T *x, int64_t planes, ddpc_window w) {
    GRID_STRIDE(i, planes * volume(w.out)) {
        int64_t o[DDPC_WINDOW_DIMS], p = output_position(w, i, o);
        const T *src = x + p * volume(w.in);
        ddpc_max_box b = ddpc_max_window_box(&w, o);
        int64_t at = ddpc_max_window_scan(&w, &b, src, sizeof(T) == sizeof(double));
        out[i] = at < 0 ? T(-INFINITY) : src[at];
        indices[i] = at;
    }
}

// One thread per output gradient, added at its index (windows may overlap);
// index -1 (a window with no element) adds nothing.
template <typename T>
__global__ void max_pool_backward_kernel(T *gx, const T *g, const int64_t *indices, int64_t planes, int64_t in_plane,
                                         int64_t out_plane, ddpc_k_index_check check) {
    GRID_STRIDE(i, planes * out_plane) {
        int64_t at = indices[i];
        if (at != -1 && index_in_range(check, at, in_plane)) atomicAdd(&gx[(i / out_plane) * in_plane + at], g[i]);
    }
}

// One thread per output; the sum in double, as on the host.
template <typename T> __global__ void avg_pool_kernel(T *out, const T *x, int64_t planes, ddpc_window w) {
    const int64_t H = w.in[1], W = w.in[2];
    GRID_STRIDE(i, planes * volume(w.out)) {
        int64_t o[DDPC_WINDOW_DIMS], p = output_position(w, i, o);
        ddpc_avg_box b = ddpc_avg_window_box(&w, o);
        const T *src = x + p * volume(w.in);
        double sum = 0;
        for (int64_t id = b.lo[0]; id < b.hi[0]; id++)
            for (int64_t ih = b.lo[1]; ih < b.hi[1]; ih++)
                for (int64_t iw = b.lo[2]; iw < b.hi[2]; iw++) sum += (double)src[(id * H + ih) * W + iw];
        out[i] = (T)(sum / b.divisor);
    }
}

// One thread per output gradient, spread over its window (windows may overlap).
template <typename T> __global__ void avg_pool_backward_kernel(T *gx, const T *g, int64_t planes, ddpc_window w) {
    const int64_t H = w.in[1], W = w.in[2];
    GRID_STRIDE(i, planes * volume(w.out)) {
        int64_t o[DDPC_WINDOW_DIMS], p = output_position(w, i, o);
        ddpc_avg_box b = ddpc_avg_window_box(&w, o);
        T share = (T)((double)g[i] / b.divisor);
        T *dst = gx + p * volume(w.in);
        for (int64_t id = b.lo[0]; id < b.hi[0]; id++)
            for (int64_t ih = b.lo[1]; ih < b.hi[1]; ih++)
                for (int64_t iw = b.lo[2]; iw < b.hi[2]; iw++) atomicAdd(&dst[(id * H + ih) * W + iw], share);
    }
}

}  // namespace

extern "C" int ddpc_k_im2col(void *col, const void *x, int dtype, int64_t n, int64_t c, ddpc_window w, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = c * w.kernel[0] * w.kernel[1] * w.kernel[2] * n * w.out[0] * w.out[1] * w.out[2];
    FLOAT_DISPATCH(dtype, im2col_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)col, (const T *)x, n, c, w))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_col2im(void *gx, const void *col, int dtype, int64_t n, int64_t c, ddpc_window w, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = n * c * w.in[0] * w.in[1] * w.in[2];
    FLOAT_DISPATCH(dtype, col2im_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)gx, (const T *)col, n, c, w))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_max_pool(void *out, int64_t *indices, const void *x, int dtype, int64_t planes, ddpc_window w,
                               void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = planes * w.out[0] * w.out[1] * w.out[2];
    FLOAT_DISPATCH(dtype, max_pool_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)out, indices, (const T *)x,
                                                                                   planes, w))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_max_pool_backward(void *gx, const void *g, const int64_t *indices, int dtype, int64_t planes,
                                        int64_t in_plane, int64_t out_plane, ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int rc = ddpc_k_fill(gx, dtype, planes * in_plane, 0.0, stream);
    if (rc) return rc;
    if (out_plane == 0) return 0;
    FLOAT_DISPATCH(dtype, max_pool_backward_kernel<T><<<grid_for(planes * out_plane, 256), 256, 0, s>>>(
                              (T *)gx, (const T *)g, indices, planes, in_plane, out_plane, check))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_avg_pool(void *out, const void *x, int dtype, int64_t planes, ddpc_window w, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t total = planes * w.out[0] * w.out[1] * w.out[2];
    FLOAT_DISPATCH(dtype, avg_pool_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)out, (const T *)x, planes, w))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_avg_pool_backward(void *gx, const void *g, int dtype, int64_t planes, ddpc_window w,
                                        void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int rc = ddpc_k_fill(gx, dtype, planes * w.in[0] * w.in[1] * w.in[2], 0.0, stream);
    if (rc) return rc;
    int64_t total = planes * w.out[0] * w.out[1] * w.out[2];
    if (total == 0) return 0;
    FLOAT_DISPATCH(dtype, avg_pool_backward_kernel<T><<<grid_for(total, 256), 256, 0, s>>>((T *)gx, (const T *)g,
                                                                                           planes, w))
    return (int)cudaGetLastError();
}
