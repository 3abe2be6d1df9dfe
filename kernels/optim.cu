// Optimizer step kernels, one launch per tensor of a group; the update rules
// are documented (and implemented for the host) in csrc/optim.c.
#include <math.h>

#include "kernels.h"
#include "nn_common.cuh"

namespace {

template <typename T>
__global__ void sgd_kernel(T *p, const T *g, T *buf, int64_t n, T lr, T mom, T damp, T wd, int nesterov, int first) {
    GRID_STRIDE(i, n) {
        T d = g[i] + wd * p[i];
        if (buf) {
            T m = first ? d : mom * buf[i] + damp * d;
            buf[i] = m;
            d = nesterov ? d + mom * m : m;
        }
        p[i] -= lr * d;
    }
}

template <typename T>
__global__ void adam_kernel(T *p, const T *g, T *m, T *v, T *vmax, int64_t n, T b1c, T b2, T b2c, T eps, T l2, T shrink,
                            T step_size, T bc2_sqrt) {
    GRID_STRIDE(i, n) {
        T gi = g[i] + l2 * p[i];
        T pi = p[i] * shrink;
        T mi = m[i] + b1c * (gi - m[i]);
        T vi = b2 * v[i] + b2c * gi * gi;
        m[i] = mi;
        v[i] = vi;
        if (vmax) {
            vi = vmax[i] > vi ? vmax[i] : vi;
            vmax[i] = vi;
        }
        p[i] = pi - step_size * mi / (sqrt(vi) / bc2_sqrt + eps);
    }
}

}  // namespace

extern "C" int ddpc_k_sgd(void *p, const void *g, void *buf, int64_t n, int dtype, double lr, double momentum,
                          double dampening, double weight_decay, int nesterov, int first, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    FLOAT_DISPATCH(dtype, sgd_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)p, (const T *)g, (T *)buf, n, (T)lr,
                                                                          (T)momentum, (T)(1 - dampening),
                                                                          (T)weight_decay, nesterov, first))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_adam(void *p, const void *g, void *m, void *v, void *vmax, int64_t n, int dtype, double lr,
                           double beta1, double beta2, double eps, double weight_decay, int decoupled, double step_size,
                           double bc2_sqrt, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    double l2 = decoupled ? 0.0 : weight_decay, shrink = decoupled ? 1 - lr * weight_decay : 1.0;
    FLOAT_DISPATCH(dtype, adam_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(
                              (T *)p, (const T *)g, (T *)m, (T *)v, (T *)vmax, n, (T)(1 - beta1), (T)beta2,
                              (T)(1 - beta2), (T)eps, (T)l2, (T)shrink, step_size, bc2_sqrt))
    return (int)cudaGetLastError();
}
