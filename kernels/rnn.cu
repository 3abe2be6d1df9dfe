// Recurrent cell kernels: the pointwise part of one LSTM or GRU step and its
// gradient, one thread per (row, unit) pair (float32 and float64). The
// formulas match the host loops in csrc/ops_rnn.c.
#include <math.h>

#include "kernels.h"
#include "nn_common.cuh"

namespace {

template <typename T> __device__ __forceinline__ T sigmoid_f(T x) { return T(1) / (T(1) + exp(-x)); }

template <typename T>
__global__ void lstm_cell_kernel(T *h, T *c, T *gates, const T *hidden, const T *c_prev, int64_t n, int64_t H) {
    GRID_STRIDE(e, n * H) {
        int64_t r = e / H, k = e % H;
        T *g = gates + r * 4 * H;
        const T *gh = hidden + r * 4 * H;
        T i = sigmoid_f(g[k] + gh[k]), f = sigmoid_f(g[H + k] + gh[H + k]);
        T cell = tanh(g[2 * H + k] + gh[2 * H + k]), o = sigmoid_f(g[3 * H + k] + gh[3 * H + k]);
        T cv = f * c_prev[e] + i * cell;
        c[e] = cv;
        h[e] = o * tanh(cv);
        g[k] = i, g[H + k] = f, g[2 * H + k] = cell, g[3 * H + k] = o;
    }
}

template <typename T>
__global__ void lstm_cell_backward_kernel(T *ggates, T *gc, const T *gh, const T *gates, const T *c_prev, const T *c,
                                          int64_t n, int64_t H) {
    GRID_STRIDE(e, n * H) {
        int64_t r = e / H, k = e % H;
        const T *g = gates + r * 4 * H;
        T *gg = ggates + r * 4 * H;
        T i = g[k], f = g[H + k], cell = g[2 * H + k], o = g[3 * H + k];
        T tc = tanh(c[e]), dh = gh[e];
        T dc = gc[e] + dh * o * (T(1) - tc * tc);
        gg[k] = dc * cell * i * (T(1) - i);
        gg[H + k] = dc * c_prev[e] * f * (T(1) - f);
        gg[2 * H + k] = dc * i * (T(1) - cell * cell);
        gg[3 * H + k] = dh * tc * o * (T(1) - o);
        gc[e] = dc * f;
    }
}

template <typename T> __global__ void gru_cell_kernel(T *h, T *gi, const T *gh, const T *h_prev, int64_t n, int64_t H) {
    GRID_STRIDE(e, n * H) {
        int64_t r = e / H, k = e % H;
        T *a = gi + r * 3 * H;
        const T *b = gh + r * 3 * H;
        T reset = sigmoid_f(a[k] + b[k]), update = sigmoid_f(a[H + k] + b[H + k]);
        T cand = tanh(a[2 * H + k] + reset * b[2 * H + k]);
        h[e] = (h_prev[e] - cand) * update + cand;
        a[k] = reset, a[H + k] = update, a[2 * H + k] = cand;
    }
}

template <typename T>
__global__ void gru_cell_backward_kernel(T *ggi, T *ggh, T *gh_prev, const T *grad, const T *gates, const T *gh,
                                         const T *h_prev, int64_t n, int64_t H) {
    GRID_STRIDE(e, n * H) {
        int64_t r = e / H, k = e % H;
        const T *a = gates + r * 3 * H, *b = gh + r * 3 * H;
        T *da = ggi + r * 3 * H, *db = ggh + r * 3 * H;
        T reset = a[k], update = a[H + k], cand = a[2 * H + k], dy = grad[e];
        T dcand = dy * (T(1) - update) * (T(1) - cand * cand);
        T dupdate = dy * (h_prev[e] - cand) * update * (T(1) - update);
        T dreset = dcand * b[2 * H + k] * reset * (T(1) - reset);
        da[k] = db[k] = dreset;
        da[H + k] = db[H + k] = dupdate;
        da[2 * H + k] = dcand;
        db[2 * H + k] = dcand * reset;
        gh_prev[e] = dy * update;
    }
}

}  // namespace

extern "C" int ddpc_k_lstm_cell(void *h, void *c, void *gates, const void *hidden, const void *c_prev, int dtype,
                                int64_t n, int64_t H, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, lstm_cell_kernel<T><<<grid_for(n * H, 256), 256, 0, s>>>(
                              (T *)h, (T *)c, (T *)gates, (const T *)hidden, (const T *)c_prev, n, H))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_lstm_cell_backward(void *ggates, void *gc, const void *gh, const void *gates, const void *c_prev,
                                         const void *c, int dtype, int64_t n, int64_t H, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, lstm_cell_backward_kernel<T><<<grid_for(n * H, 256), 256, 0, s>>>(
                              (T *)ggates, (T *)gc, (const T *)gh, (const T *)gates, (const T *)c_prev, (const T *)c,
                              n, H))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_gru_cell(void *h, void *gi, const void *gh, const void *h_prev, int dtype, int64_t n, int64_t H,
                               void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, gru_cell_kernel<T><<<grid_for(n * H, 256), 256, 0, s>>>((T *)h, (T *)gi, (const T *)gh,
                                                                                 (const T *)h_prev, n, H))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_gru_cell_backward(void *ggi, void *ggh, void *gh_prev, const void *grad, const void *gates,
                                        const void *gh, const void *h_prev, int dtype, int64_t n, int64_t H,
                                        void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, gru_cell_backward_kernel<T><<<grid_for(n * H, 256), 256, 0, s>>>(
                              (T *)ggi, (T *)ggh, (T *)gh_prev, (const T *)grad, (const T *)gates, (const T *)gh,
                              (const T *)h_prev, n, H))
    return (int)cudaGetLastError();
}
