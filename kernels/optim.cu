// Optimizer step kernels, one launch per tensor of a group; SGD's and Adam's
// update rules are documented (and implemented for the host) in csrc/optim.c,
// the other optimizers' in optim_rules.h, shared with the host. Float16 and
// bfloat16 tensors are loaded into float, updated there and rounded once on store.
#include <math.h>

#include "kernels.h"
#include "nn_common.cuh"
#include "optim_rules.h"

// The rule of optim_rules.h for the accumulation type.
__device__ __forceinline__ void optim_update(int kind, const ddpc_optim_consts *c, float *p, float g, float *a,
                                             float *b, float *d) {
    ddpc_optim_update_f32(kind, c, p, g, a, b, d);
}
__device__ __forceinline__ void optim_update(int kind, const ddpc_optim_consts *c, double *p, double g, double *a,
                                             double *b, double *d) {
    ddpc_optim_update_f64(kind, c, p, g, a, b, d);
}

namespace {

template <typename T, typename A = typename Acc<T>::type>
__global__ void sgd_kernel(T *p, const T *g, T *buf, int64_t n, A lr, A mom, A damp, A wd, A sign, int nesterov,
                           int first) {
    GRID_STRIDE(i, n) {
        A pi = load(p, i);
        A d = sign * load(g, i) + wd * pi;
        if (buf) {
            A m = first ? d : mom * load(buf, i) + damp * d;
            buf[i] = (T)m;
            d = nesterov ? d + mom * m : m;
        }
        p[i] = (T)(pi - lr * d);
    }
}

template <typename T, typename A = typename Acc<T>::type>
__global__ void adam_kernel(T *p, const T *g, T *m, T *v, T *vmax, int64_t n, A b1c, A b2, A b2c, A eps, A l2, A shrink,
                            A sign, A step_size, A bc2_sqrt) {
    GRID_STRIDE(i, n) {
        A p0 = load(p, i), m0 = load(m, i);
        A gi = sign * load(g, i) + l2 * p0;
        A mi = m0 + b1c * (gi - m0);
        A vi = b2 * load(v, i) + b2c * gi * gi;
        m[i] = (T)mi;
        v[i] = (T)vi;
        if (vmax) {
            A vm = load(vmax, i);
            vi = vm > vi ? vm : vi;
            vmax[i] = (T)vi;
        }
        p[i] = (T)(p0 * shrink - step_size * mi / (sqrt(vi) / bc2_sqrt + eps));
    }
}

}  // namespace

extern "C" int ddpc_k_sgd(void *p, const void *g, void *buf, int64_t n, int dtype, double lr, double momentum,
                          double dampening, double weight_decay, int nesterov, int first, int maximize,
                          void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    ANY_FLOAT_DISPATCH(dtype, {
        typedef typename Acc<T>::type A;
        sgd_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)p, (const T *)g, (T *)buf, n, (A)lr, (A)momentum,
                                                       (A)(1 - dampening), (A)weight_decay, (A)(maximize ? -1 : 1),
                                                       nesterov, first);
    })
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_adam(void *p, const void *g, void *m, void *v, void *vmax, int64_t n, int dtype, double lr,
                           double beta1, double beta2, double eps, double weight_decay, int decoupled, int maximize,
                           double step_size, double bc2_sqrt, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    double l2 = decoupled ? 0.0 : weight_decay, shrink = decoupled ? 1 - lr * weight_decay : 1.0;
    ANY_FLOAT_DISPATCH(dtype, {
        typedef typename Acc<T>::type A;
        adam_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)p, (const T *)g, (T *)m, (T *)v, (T *)vmax, n,
                                                        (A)(1 - beta1), (A)beta2, (A)(1 - beta2), (A)eps, (A)l2,
                                                        (A)shrink, (A)(maximize ? -1 : 1), (A)step_size,
                                                        (A)bc2_sqrt);
    })
    return (int)cudaGetLastError();
}

namespace {

// KIND is a template constant, so each instance keeps only its kind's rule.
template <int KIND, typename T, typename A = typename Acc<T>::type>
__global__ void optim_kernel(T *p, const T *g, T *s1, T *s2, T *s3, int64_t n, ddpc_optim_consts c) {
    GRID_STRIDE(i, n) {
        A pi = load(p, i), a = load(s1, i), b = s2 ? load(s2, i) : A(0), d = s3 ? load(s3, i) : A(0);
        optim_update(KIND, &c, &pi, load(g, i), &a, &b, &d);
        p[i] = (T)pi;
        s1[i] = (T)a;
        if (s2) s2[i] = (T)b;
        if (s3) s3[i] = (T)d;
    }
}

template <int KIND>
int launch_optim(void *p, const void *g, void *s1, void *s2, void *s3, int64_t n, int dtype,
                 const ddpc_optim_consts &c, cudaStream_t s) {
    ANY_FLOAT_DISPATCH(dtype, {
        optim_kernel<KIND, T><<<grid_for(n, 256), 256, 0, s>>>((T *)p, (const T *)g, (T *)s1, (T *)s2, (T *)s3, n,
                                                               c);
    })
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" int ddpc_k_optim(void *p, const void *g, void *s1, void *s2, void *s3, int64_t n, int dtype,
                            const struct ddpc_optim_consts *c, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    switch (c->kind) {
    case DDPC_OPTIM_RMSPROP: return launch_optim<DDPC_OPTIM_RMSPROP>(p, g, s1, s2, s3, n, dtype, *c, s);
    case DDPC_OPTIM_ADAGRAD: return launch_optim<DDPC_OPTIM_ADAGRAD>(p, g, s1, s2, s3, n, dtype, *c, s);
    case DDPC_OPTIM_ADAMAX: return launch_optim<DDPC_OPTIM_ADAMAX>(p, g, s1, s2, s3, n, dtype, *c, s);
    case DDPC_OPTIM_NADAM: return launch_optim<DDPC_OPTIM_NADAM>(p, g, s1, s2, s3, n, dtype, *c, s);
    case DDPC_OPTIM_RADAM: return launch_optim<DDPC_OPTIM_RADAM>(p, g, s1, s2, s3, n, dtype, *c, s);
    case DDPC_OPTIM_ADADELTA: return launch_optim<DDPC_OPTIM_ADADELTA>(p, g, s1, s2, s3, n, dtype, *c, s);
    default: return (int)cudaErrorInvalidValue;
    }
}
