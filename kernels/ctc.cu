// The CTC loss on a GPU (csrc/ops_ctc.h), with kernels/ctc_rules.h's
// recursions. Forward: one block per sample walks the time steps, its
// threads covering the extended labels, and keeps the alphas for backward.
// Backward: one block per sample computes the betas the same way; then one
// block per (step, sample) writes that gradient row: its threads set the
// row to -inf, one thread adds alpha * beta of each extended label into its
// class (labels repeat, so this is serial and short), and the threads turn
// the row into the gradient. float32 and float64 log-probabilities; the
// recursions run in double. Each block first checks its sample's labels: a
// sample with a label the host op refuses gets NaN and reads nothing
// through that label.
#include <math.h>

#include "ctc_rules.h"
#include "dispatch.cuh"
#include "index_check.cuh"
#include "kernels.h"

namespace {

constexpr int kThreads = 256;

template <typename T> struct CtcArgs {
    const T *lp;
    const int64_t *targets, *offsets, *tlen, *ilen;
    int64_t T_, N, C, S_max, blank;
    ddpc_k_index_check check;

    __device__ double emit(int64_t t, int64_t n, const int64_t *target, int64_t s) const {
        return (double)lp[(t * N + n) * C + ddpc_ctc_label(target, s, blank)];
    }

    // Whether sample n's labels are all classes other than the blank, as the
    // host op requires; one that is not is reported. Every thread of the
    // block calls it: it synchronises them.
    __device__ bool labels_ok(int64_t n) const {
        const int64_t *target = targets + offsets[n];
        int bad = 0;
        for (int64_t j = threadIdx.x; j < tlen[n]; j += blockDim.x) {
            int64_t label = target[j];
            if ((uint64_t)label < (uint64_t)C && label != blank) continue;
            record_index_error(check, DDPC_INDEX_BAD_INDEX, label, C, n, blank);
            bad = 1;
        }
        return !__syncthreads_or(bad);
    }
};

template <typename T> __global__ void ctc_forward_kernel(T *nll, double *alpha_all, CtcArgs<T> a) {
    const int64_t n = blockIdx.x, S = 2 * a.tlen[n] + 1, Tn = a.ilen[n];
    if (!a.labels_ok(n)) {
        if (threadIdx.x == 0) nll[n] = (T)NAN;
        return;
    }
    const int64_t *target = a.targets + a.offsets[n];
    double *alpha = alpha_all + n * a.T_ * a.S_max;
    if (Tn == 0) {
        if (threadIdx.x == 0) nll[n] = (T)(S == 1 ? 0.0 : INFINITY);
        return;
    }
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) alpha[s] = s < 2 ? a.emit(0, n, target, s) : -INFINITY;
    __syncthreads();
    for (int64_t t = 1; t < Tn; t++) {
        for (int64_t s = threadIdx.x; s < S; s += blockDim.x)
            alpha[t * a.S_max + s] = ddpc_ctc_alpha(alpha + (t - 1) * a.S_max, target, s, a.emit(t, n, target, s));
        __syncthreads();
    }
    if (threadIdx.x == 0) nll[n] = (T)ddpc_ctc_nll(alpha + (Tn - 1) * a.S_max, S);
}

template <typename T> __global__ void ctc_beta_kernel(double *beta_all, CtcArgs<T> a) {
    const int64_t n = blockIdx.x, S = 2 * a.tlen[n] + 1, Tn = a.ilen[n];
    if (!a.labels_ok(n)) return;
    const int64_t *target = a.targets + a.offsets[n];
    double *beta = beta_all + n * a.T_ * a.S_max;
    if (Tn == 0) return;
    const int64_t last = (Tn - 1) * a.S_max;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x)
        beta[last + s] = s >= S - 2 ? a.emit(Tn - 1, n, target, s) : -INFINITY;
    __syncthreads();
    for (int64_t t = Tn - 2; t >= 0; t--) {
        for (int64_t s = threadIdx.x; s < S; s += blockDim.x)
            beta[t * a.S_max + s] = ddpc_ctc_beta(beta + (t + 1) * a.S_max, target, s, S, a.emit(t, n, target, s));
        __syncthreads();
    }
}

// Block (t, n): gradient row t of sample n, as csrc/ops_ctc.c's backward_range_.
template <typename T>
__global__ void ctc_grad_kernel(T *grad, const double *alpha_all, const double *beta_all, const T *g, const T *nll,
                                int zero_infinity, CtcArgs<T> a) {
    const int64_t t = blockIdx.x / a.N, n = blockIdx.x % a.N, S = 2 * a.tlen[n] + 1;
    const int64_t *target = a.targets + a.offsets[n];
    T *row = grad + (t * a.N + n) * a.C;
    const double loss = (double)nll[n], scale = (double)g[n];
    if (!a.labels_ok(n)) {
        for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) row[c] = (T)NAN;
        return;
    }
    if (t >= a.ilen[n] || scale == 0 || (zero_infinity && isinf(loss))) {
        for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) row[c] = (T)0;
        return;
    }
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) row[c] = (T)-INFINITY;
    __syncthreads();
    if (threadIdx.x == 0) {
        const double *alpha = alpha_all + (n * a.T_ + t) * a.S_max, *beta = beta_all + (n * a.T_ + t) * a.S_max;
        for (int64_t s = 0; s < S; s++) {
            int64_t c = ddpc_ctc_label(target, s, a.blank);
            row[c] = (T)ddpc_ctc_lse((double)row[c], alpha[s] + beta[s]);
        }
    }
    __syncthreads();
    const T *lp = a.lp + (t * a.N + n) * a.C;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x)
        row[c] = (T)ddpc_ctc_grad((double)lp[c], (double)row[c], loss, scale);
}

template <typename T>
CtcArgs<T> args_of(const void *lp, const int64_t *targets, const int64_t *offsets, const int64_t *tlen,
                   const int64_t *ilen, int64_t T_, int64_t N, int64_t C, int64_t S_max, int64_t blank,
                   ddpc_k_index_check check) {
    return CtcArgs<T>{(const T *)lp, targets, offsets, tlen, ilen, T_, N, C, S_max, blank, check};
}

unsigned threads_for(int64_t S_max) { return (unsigned)(S_max < kThreads ? ((S_max + 31) / 32) * 32 : kThreads); }

}  // namespace

extern "C" int ddpc_k_ctc_forward(void *nll, void *log_alpha, const void *log_probs, int dtype, const int64_t *targets,
                                  const int64_t *offsets, const int64_t *target_lengths, const int64_t *input_lengths,
                                  int64_t T_, int64_t N, int64_t C, int64_t S_max, int64_t blank,
                                  ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == K_F32)
        ctc_forward_kernel<float><<<(unsigned)N, threads_for(S_max), 0, s>>>(
            (float *)nll, (double *)log_alpha,
            args_of<float>(log_probs, targets, offsets, target_lengths, input_lengths, T_, N, C, S_max, blank, check));
    else
        ctc_forward_kernel<double><<<(unsigned)N, threads_for(S_max), 0, s>>>(
            (double *)nll, (double *)log_alpha,
            args_of<double>(log_probs, targets, offsets, target_lengths, input_lengths, T_, N, C, S_max, blank, check));
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_ctc_backward(void *grad, void *log_beta, const void *g, const void *nll, const void *log_alpha,
                                   const void *log_probs, int dtype, const int64_t *targets, const int64_t *offsets,
                                   const int64_t *target_lengths, const int64_t *input_lengths, int64_t T_, int64_t N,
                                   int64_t C, int64_t S_max, int64_t blank, int zero_infinity,
                                   ddpc_k_index_check check, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (dtype == K_F32) {
        CtcArgs<float> a = args_of<float>(log_probs, targets, offsets, target_lengths, input_lengths, T_, N, C, S_max,
                                          blank, check);
        ctc_beta_kernel<float><<<(unsigned)N, threads_for(S_max), 0, s>>>((double *)log_beta, a);
        ctc_grad_kernel<float><<<(unsigned)(T_ * N), kThreads, 0, s>>>(
            (float *)grad, (const double *)log_alpha, (const double *)log_beta, (const float *)g, (const float *)nll,
            zero_infinity, a);
    } else {
        CtcArgs<double> a = args_of<double>(log_probs, targets, offsets, target_lengths, input_lengths, T_, N, C,
                                            S_max, blank, check);
        ctc_beta_kernel<double><<<(unsigned)N, threads_for(S_max), 0, s>>>((double *)log_beta, a);
        ctc_grad_kernel<double><<<(unsigned)(T_ * N), kThreads, 0, s>>>(
            (double *)grad, (const double *)log_alpha, (const double *)log_beta, (const double *)g,
            (const double *)nll, zero_infinity, a);
    }
    return (int)cudaGetLastError();
}
