// Softmax and loss kernels: (log-)softmax over rows, cross entropy
// (log-softmax fused with the negative log likelihood, with class weights,
// ignore_index, label smoothing and class-probability targets; the negative
// log likelihood alone) and the elementwise losses of pointwise_loss.h, forward
// and backward. Formulas match csrc/ops_nn.c; row statistics and reductions
// are accumulated in double.
// Reductions: 0 none, 1 mean, 2 sum.
#include <math.h>

#include "index_check.cuh"
#include "kernels.h"
#include "nn_common.cuh"
#include "pointwise_loss.h"

namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row

// One row's max and log(sum(exp(x - max))), reduced across the warp; kept
// apart as in csrc/ops_nn.c (a huge max would absorb the log).
template <typename T> __device__ void row_stats(const T *x, int64_t C, double *mx, double *ls) {
    int lane = threadIdx.x & 31;
    double m = -INFINITY;
    for (int64_t c = lane; c < C; c += 32) m = fmax(m, (double)x[c]);
    m = warp_max(m);
    double s = 0;
    for (int64_t c = lane; c < C; c += 32) s += exp((double)x[c] - m);
    *mx = m;
    *ls = log(warp_sum(s));
}

// A cross entropy's arguments (kernels.h's ddpc_k_ce) with its element type.
template <typename T> struct Ce {
    const T *x, *probs, *weight;
    const int64_t *target;
    int64_t N, C, ignore;
    double eps;
    int log_probs;
    ddpc_k_index_check check;

    explicit Ce(const ddpc_k_ce &a)
        : x((const T *)a.logits), probs((const T *)a.probs), weight((const T *)a.weight), target(a.target),
          N(a.rows), C(a.classes), ignore(a.ignore_index), eps(a.smoothing), log_probs(a.log_probs), check(a.check) {}

    __device__ double w(int64_t c) const { return weight ? (double)weight[c] : 1.0; }
    // Class c's weight times its smoothed probability in row `row` (probs only).
    __device__ double q(int64_t row, int64_t c) const {
        return w(c) * ((1 - eps) * (double)probs[row * C + c] + eps / (double)C);
    }
    // Row `row`'s log-softmax is (x - *mx) - *ls; rows of log-probabilities are theirs already.
    __device__ void stats(int64_t row, double *mx, double *ls) const {
        *mx = 0, *ls = 0;
        if (!log_probs) row_stats(x + row * C, C, mx, ls);
    }
};

// One warp per row: its loss (in every lane) as in csrc/ops_nn.c. An
// out-of-range target gives NaN.
template <typename T> __device__ double ce_row_loss(const Ce<T> &a, int64_t row) {
    int lane = threadIdx.x & 31;
    const T *x = a.x + row * a.C;
    double mx, ls, acc = 0;
    if (a.probs) {
        a.stats(row, &mx, &ls);
        for (int64_t c = lane; c < a.C; c += 32) acc -= a.q(row, c) * (((double)x[c] - mx) - ls);
        return warp_sum(acc);
    }
    int64_t t = a.target[row];
    if (t == a.ignore) return 0;
    if (!index_in_range(a.check, t, a.C, row)) return NAN;
    a.stats(row, &mx, &ls);
    if (a.eps > 0) {
        for (int64_t c = lane; c < a.C; c += 32) acc += a.w(c) * (((double)x[c] - mx) - ls);
        acc = warp_sum(acc);
    }
    return -(1 - a.eps) * a.w(t) * (((double)x[t] - mx) - ls) - a.eps / (double)a.C * acc;
}

template <typename T> __global__ void ce_rows_kernel(T *out, double *scratch, Ce<T> a) {
    int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= a.N) return;
    double loss = ce_row_loss(a, row);
    if ((threadIdx.x & 31) == 0) {
        if (scratch) scratch[row] = loss;
        else out[row] = (T)loss;
    }
}

// What the mean divides by (valid in every thread of the block): the summed
// weights of the rows' target classes (ignored rows count 0), or N for class
// probabilities.
template <typename T> __device__ double ce_denominator(const Ce<T> &a) {
    if (!a.target) return (double)a.N;
    double c = 0;
    for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) {
        int64_t t = a.target[i];
        if (t != a.ignore) c += t >= 0 && t < a.C ? a.w(t) : NAN;
    }
    return block_sum(c);
}

template <typename T> __global__ void ce_reduce_kernel(T *out, const double *scratch, Ce<T> a, int mean) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) s += scratch[i];
    s = block_sum(s);
    double denom = mean ? ce_denominator(a) : 1.0;
    if (threadIdx.x == 0) out[0] = (T)(s / denom);
}

template <typename T> __global__ void ce_denominator_kernel(double *scratch, Ce<T> a) {
    double d = ce_denominator(a);
    if (threadIdx.x == 0) scratch[0] = d;
}

// d loss / d x_c = scale * (softmax_c * mass - own_c), where own_c is what
// class c's log-probability is weighted by and mass their sum (csrc/ops_nn.c).
template <typename T>
__global__ void ce_backward_kernel(T *gx, const double *denom, const T *gout, Ce<T> a, int reduction) {
    int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= a.N) return;
    int lane = threadIdx.x & 31;
    T *g = gx + row * a.C;
    const T *x = a.x + row * a.C;
    int64_t t = a.target ? a.target[row] : -1;
    if (a.target && t == a.ignore) {
        for (int64_t c = lane; c < a.C; c += 32) g[c] = T(0);
        return;
    }
    double scale = reduction == 0 ? (double)gout[row] : reduction == 2 ? (double)gout[0] : (double)gout[0] / *denom;
    if (a.target && !index_in_range(a.check, t, a.C, row)) scale = NAN;
    double mx, ls, mass = 0, off = a.eps / (double)a.C;
    a.stats(row, &mx, &ls);
    if (a.probs) {
        for (int64_t c = lane; c < a.C; c += 32) mass += a.q(row, c);
    } else if (a.eps > 0) {
        for (int64_t c = lane; c < a.C; c += 32) mass += off * a.w(c);
    }
    mass = warp_sum(mass);
    double wt = a.target && t >= 0 && t < a.C ? a.w(t) : 0.0;
    if (a.target) mass += (1 - a.eps) * wt;
    for (int64_t c = lane; c < a.C; c += 32) {
        double sm = a.log_probs ? 0.0 : exp(((double)x[c] - mx) - ls);
        double own = a.probs ? a.q(row, c) : off * a.w(c) + (c == t ? (1 - a.eps) * wt : 0.0);
        g[c] = (T)(scale * (sm * mass - own));
    }
}

template <typename T> __global__ void softmax_kernel(T *out, const T *x, int64_t R, int64_t C, int take_log) {
    int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= R) return;
    double mx, ls;
    row_stats(x + row * C, C, &mx, &ls);
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

template <typename T> __device__ __forceinline__ double loss_at(int kind, const T *x, const T *y, const T *w, double p,
                                                                int64_t i) {
    return ddpc_loss_value(kind, (double)x[i], (double)y[i], w ? (double)w[i] : 1.0, p);
}

template <typename T>
__global__ void loss_kernel(int kind, T *out, const T *x, const T *y, const T *w, double p, int64_t n) {
    GRID_STRIDE(i, n) out[i] = (T)loss_at(kind, x, y, w, p, i);
}

template <typename T>
__global__ void loss_reduce_kernel(int kind, T *out, const T *x, const T *y, const T *w, double p, int64_t n,
                                   int mean) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += loss_at(kind, x, y, w, p, i);
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] = (T)(mean ? s / (double)n : s);
}

template <typename T>
__global__ void loss_backward_kernel(int kind, int wrt_target, T *g, const T *gout, const T *x, const T *y, const T *w,
                                     double p, int64_t n, int reduction) {
    GRID_STRIDE(i, n) {
        double s = reduction == 0 ? (double)gout[i] : (reduction == 1 ? (double)gout[0] / (double)n : (double)gout[0]);
        g[i] = (T)(s * ddpc_loss_grad(kind, wrt_target, (double)x[i], (double)y[i], w ? (double)w[i] : 1.0, p));
    }
}

unsigned row_blocks(int64_t N) { return (unsigned)((N + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

extern "C" int ddpc_k_cross_entropy(void *out, double *scratch, const ddpc_k_ce *ce, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (ce->rows == 0) {
        if (ce->reduction == 0) return 0;
        return ddpc_k_fill(out, ce->dtype, 1, ce->reduction == 1 ? NAN : 0.0, stream);
    }
    FLOAT_DISPATCH(ce->dtype, {
        Ce<T> a(*ce);
        ce_rows_kernel<T><<<row_blocks(ce->rows), 32 * kRowsPerBlock, 0, s>>>(
            (T *)out, ce->reduction == 0 ? nullptr : scratch, a);
        if (ce->reduction != 0) ce_reduce_kernel<T><<<1, 1024, 0, s>>>((T *)out, scratch, a, ce->reduction == 1);
    })
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_cross_entropy_backward(void *glogits, double *scratch, const void *gout, const ddpc_k_ce *ce,
                                             void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(ce->dtype, {
        Ce<T> a(*ce);
        if (ce->reduction == 1) ce_denominator_kernel<T><<<1, 1024, 0, s>>>(scratch, a);
        ce_backward_kernel<T><<<row_blocks(ce->rows), 32 * kRowsPerBlock, 0, s>>>((T *)glogits, scratch,
                                                                                   (const T *)gout, a, ce->reduction);
    })
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

extern "C" int ddpc_k_loss(int kind, void *out, const void *x, const void *y, const void *pos_weight, double p,
                           int64_t n, int reduction, int dtype, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (reduction == 0 && n == 0) return 0;
    FLOAT_DISPATCH(dtype, {
        if (reduction == 0)
            loss_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(kind, (T *)out, (const T *)x, (const T *)y,
                                                            (const T *)pos_weight, p, n);
        else
            loss_reduce_kernel<T><<<1, 1024, 0, s>>>(kind, (T *)out, (const T *)x, (const T *)y, (const T *)pos_weight,
                                                      p, n, reduction == 1);
    })
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_loss_backward(int kind, int wrt_target, void *g, const void *gout, const void *x, const void *y,
                                    const void *pos_weight, double p, int64_t n, int reduction, int dtype,
                                    void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, loss_backward_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(
                              kind, wrt_target, (T *)g, (const T *)gout, (const T *)x, (const T *)y,
                              (const T *)pos_weight, p, n, reduction))
    return (int)cudaGetLastError();
}
