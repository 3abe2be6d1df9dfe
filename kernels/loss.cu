// Softmax and loss kernels: (log-)softmax over rows, softmax cross entropy
// (log-softmax fused with the negative log likelihood, with ignore_index and
// label smoothing) and mean squared error, forward and backward. Formulas
// match csrc/ops_nn.c; row statistics are accumulated in double.
// Reductions: 0 none, 1 mean, 2 sum.
#include <math.h>

#include "kernels.h"
#include "nn_common.cuh"

namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row

// One row's max, log(sum(exp(x - max))) and sum(x - max), reduced across
// the warp; kept apart as in csrc/ops_nn.c (a huge max would absorb the log).
template <typename T> __device__ void row_stats(const T *x, int64_t C, double *mx, double *ls, double *sd) {
    int lane = threadIdx.x & 31;
    double m = -INFINITY;
    for (int64_t c = lane; c < C; c += 32) m = fmax(m, (double)x[c]);
    m = warp_max(m);
    double s = 0, t = 0;
    for (int64_t c = lane; c < C; c += 32) {
        s += exp((double)x[c] - m);
        t += (double)x[c] - m;
    }
    *mx = m;
    *ls = log(warp_sum(s));
    *sd = warp_sum(t);
}

template <typename T>
__global__ void ce_rows_kernel(T *out, double *scratch, const T *logits, const int64_t *target, int64_t N, int64_t C,
                               int64_t ignore, double eps) {
    int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= N) return;
    int64_t t = target[row];
    double loss = 0;
    if (t != ignore) {
        double mx, ls, sd;
        row_stats(logits + row * C, C, &mx, &ls, &sd);
        loss = (t < 0 || t >= C) ? NAN
                                 : (1 - eps) * (ls - ((double)logits[row * C + t] - mx)) + eps * (ls - sd / (double)C);
    }
    if ((threadIdx.x & 31) == 0) {
        if (scratch) scratch[row] = loss;
        else out[row] = (T)loss;
    }
}

// Number of rows whose target is not ignore_index.
__device__ double count_valid(const int64_t *target, int64_t N, int64_t ignore) {
    double c = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) c += target[i] != ignore ? 1.0 : 0.0;
    return block_sum(c);
}

template <typename T>
__global__ void ce_reduce_kernel(T *out, const double *scratch, const int64_t *target, int64_t N, int64_t ignore,
                                 int mean) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += scratch[i];
    s = block_sum(s);
    double count = mean ? count_valid(target, N, ignore) : 1.0;
    if (threadIdx.x == 0) out[0] = (T)(mean ? s / count : s);
}

__global__ void count_kernel(double *scratch, const int64_t *target, int64_t N, int64_t ignore) {
    double c = count_valid(target, N, ignore);
    if (threadIdx.x == 0) scratch[0] = c;
}

template <typename T>
__global__ void ce_backward_kernel(T *gx, const double *count, const T *gout, const T *logits, const int64_t *target,
                                   int64_t N, int64_t C, int64_t ignore, double eps, int reduction) {
    int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= N) return;
    int lane = threadIdx.x & 31;
    T *g = gx + row * C;
    int64_t t = target[row];
    if (t == ignore) {
        for (int64_t c = lane; c < C; c += 32) g[c] = T(0);
        return;
    }
    double scale = reduction == 0 ? (double)gout[row] : reduction == 2 ? (double)gout[0] : (double)gout[0] / *count;
    double mx, ls, sd;
    row_stats(logits + row * C, C, &mx, &ls, &sd);
    double off = eps / (double)C;
    for (int64_t c = lane; c < C; c += 32) {
        double v = exp(((double)logits[row * C + c] - mx) - ls) - off;
        if (c == t) v -= 1 - eps;
        g[c] = (T)(scale * v);
    }
}

template <typename T> __global__ void softmax_kernel(T *out, const T *x, int64_t R, int64_t C, int take_log) {
    int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= R) return;
    double mx, ls, sd;
    row_stats(x + row * C, C, &mx, &ls, &sd);
    for (int64_t c = threadIdx.x & 31; c < C; c += 32) {
        double v = ((double)x[row * C + c] - mx) - ls;
        out[row * C + c] = (T)(take_log ? v : exp(v));
    }
}

template <typename T>
__global__ void softmax_backward_kernel(T *gx, const T *gy, const T *y, int64_t R, int64_t C, int take_log) {
    int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= R) return;
    int lane = threadIdx.x & 31;
    const T *g = gy + row * C, *yr = y + row * C;
    double dot = 0;
    for (int64_t c = lane; c < C; c += 32) dot += take_log ? (double)g[c] : (double)g[c] * (double)yr[c];
    dot = warp_sum(dot);
    for (int64_t c = lane; c < C; c += 32)
        gx[row * C + c] = (T)(take_log ? (double)g[c] - exp((double)yr[c]) * dot : (double)yr[c] * ((double)g[c] - dot));
}

template <typename T> __global__ void sq_diff_kernel(T *out, const T *a, const T *b, int64_t n) {
    GRID_STRIDE(i, n) out[i] = (a[i] - b[i]) * (a[i] - b[i]);
}

template <typename T> __global__ void mse_reduce_kernel(T *out, const T *a, const T *b, int64_t n, int mean) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double d = (double)a[i] - (double)b[i];
        s += d * d;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] = (T)(mean ? s / (double)n : s);
}

template <typename T>
__global__ void mse_backward_kernel(T *ga, const T *gout, const T *a, const T *b, int64_t n, int reduction) {
    GRID_STRIDE(i, n) {
        T g = reduction == 0 ? gout[i] : (T)(reduction == 1 ? (double)gout[0] / (double)n : (double)gout[0]);
        ga[i] = T(2) * (a[i] - b[i]) * g;
    }
}

unsigned row_blocks(int64_t N) { return (unsigned)((N + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

extern "C" int ddpc_k_cross_entropy(void *out, double *scratch, const void *logits, const int64_t *target, int64_t rows,
                                    int64_t classes, int64_t ignore_index, double smoothing, int reduction, int dtype,
                                    void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (rows == 0) {
        if (reduction == 0) return 0;
        return ddpc_k_fill(out, dtype, 1, reduction == 1 ? NAN : 0.0, stream);
    }
    FLOAT_DISPATCH(dtype, {
        ce_rows_kernel<T><<<row_blocks(rows), 32 * kRowsPerBlock, 0, s>>>(
            (T *)out, reduction == 0 ? nullptr : scratch, (const T *)logits, target, rows, classes, ignore_index,
            smoothing);
        if (reduction != 0)
            ce_reduce_kernel<T><<<1, 1024, 0, s>>>((T *)out, scratch, target, rows, ignore_index, reduction == 1);
    })
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_cross_entropy_backward(void *glogits, double *scratch, const void *gout, const void *logits,
                                             const int64_t *target, int64_t rows, int64_t classes, int64_t ignore_index,
                                             double smoothing, int reduction, int dtype, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (reduction == 1) count_kernel<<<1, 1024, 0, s>>>(scratch, target, rows, ignore_index);
    FLOAT_DISPATCH(dtype, ce_backward_kernel<T><<<row_blocks(rows), 32 * kRowsPerBlock, 0, s>>>(
                              (T *)glogits, scratch, (const T *)gout, (const T *)logits, target, rows, classes,
                              ignore_index, smoothing, reduction))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_softmax(void *out, const void *x, int64_t rows, int64_t cols, int take_log, int dtype,
                              void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, softmax_kernel<T><<<row_blocks(rows), 32 * kRowsPerBlock, 0, s>>>((T *)out, (const T *)x,
                                                                                             rows, cols, take_log))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_softmax_backward(void *gx, const void *gy, const void *y, int64_t rows, int64_t cols, int take_log,
                                       int dtype, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, softmax_backward_kernel<T><<<row_blocks(rows), 32 * kRowsPerBlock, 0, s>>>(
                              (T *)gx, (const T *)gy, (const T *)y, rows, cols, take_log))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_mse(void *out, const void *a, const void *b, int64_t n, int reduction, int dtype, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (reduction == 0 && n == 0) return 0;
    FLOAT_DISPATCH(dtype, {
        if (reduction == 0)
            sq_diff_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)out, (const T *)a, (const T *)b, n);
        else
            mse_reduce_kernel<T><<<1, 1024, 0, s>>>((T *)out, (const T *)a, (const T *)b, n, reduction == 1);
    })
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_mse_backward(void *ga, const void *gout, const void *a, const void *b, int64_t n, int reduction,
                                   int dtype, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, mse_backward_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)ga, (const T *)gout,
                                                                                   (const T *)a, (const T *)b, n,
                                                                                   reduction))
    return (int)cudaGetLastError();
}
