// grid_sample and its gradients (float32 and float64): one thread per grid
// point, looping over the channels, with each point's taps from
// grid_sample.h, which the host loops in csrc/ops_grid.c share. Points of a
// sample may read the same input elements, so the input gradient adds up
// with atomics.
#include "kernels.h"
#include "nn_common.cuh"

namespace {

template <typename T>
__device__ inline int point_taps(const T *grid, int64_t u, const ddpc_grid_sampling &s, ddpc_grid_tap *taps) {
    double coord[3];
    for (int d = 0; d < s.dims; d++) coord[d] = (double)grid[u * s.dims + d];
    return ddpc_grid_taps(&s, coord, taps);
}

// Thread u = n * points + p: output p of every channel of sample n.
template <typename T>
__global__ void grid_sample_kernel(T *out, const T *x, const T *grid, int64_t n, int64_t c, int64_t points,
                                   int64_t volume, ddpc_grid_sampling s) {
    GRID_STRIDE(u, n * points) {
        ddpc_grid_tap taps[DDPC_GRID_MAX_TAPS];
        int count = point_taps(grid, u, s, taps);
        int64_t b = u / points, p = u % points;
        for (int64_t ch = 0; ch < c; ch++) {
            const T *src = x + (b * c + ch) * volume;
            double sum = 0;
            for (int t = 0; t < count; t++)
                if (taps[t].at >= 0) sum += taps[t].w * (double)src[taps[t].at];
            out[(b * c + ch) * points + p] = (T)sum;
        }
    }
}

// Thread u = n * points + p: adds point p's share into every channel's input
// gradient (gx may be NULL) and writes its grid gradient (ggrid may be NULL).
template <typename T>
__global__ void grid_sample_backward_kernel(T *gx, T *ggrid, const T *g, const T *x, const T *grid, int64_t n,
                                            int64_t c, int64_t points, int64_t volume, ddpc_grid_sampling s) {
    GRID_STRIDE(u, n * points) {
        ddpc_grid_tap taps[DDPC_GRID_MAX_TAPS];
        int count = point_taps(grid, u, s, taps);
        int64_t b = u / points, p = u % points;
        double acc[3] = {0, 0, 0};
        for (int64_t ch = 0; ch < c; ch++) {
            double gv = (double)g[(b * c + ch) * points + p];
            const T *src = x + (b * c + ch) * volume;
            for (int t = 0; t < count; t++) {
                if (taps[t].at < 0) continue;
                if (gx) atomicAdd(&gx[(b * c + ch) * volume + taps[t].at], (T)(taps[t].w * gv));
                if (ggrid) {
                    double v = (double)src[taps[t].at] * gv;
                    for (int d = 0; d < s.dims; d++) acc[d] += taps[t].dw[d] * v;
                }
            }
        }
        if (ggrid)
            for (int d = 0; d < s.dims; d++) ggrid[u * s.dims + d] = (T)acc[d];
    }
}

}  // namespace

extern "C" int ddpc_k_grid_sample(void *out, const void *x, const void *grid, int dtype, int64_t n, int64_t c,
                                  int64_t points, ddpc_grid_sampling s, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    int64_t volume = s.size[0] * s.size[1] * s.size[2];
    FLOAT_DISPATCH(dtype, grid_sample_kernel<T><<<grid_for(n * points, 128), 128, 0, st>>>(
                              (T *)out, (const T *)x, (const T *)grid, n, c, points, volume, s))
    return (int)cudaGetLastError();
}

extern "C" int ddpc_k_grid_sample_backward(void *gx, void *ggrid, const void *g, const void *x, const void *grid,
                                           int dtype, int64_t n, int64_t c, int64_t points, ddpc_grid_sampling s,
                                           void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    int64_t volume = s.size[0] * s.size[1] * s.size[2];
    if (gx) {
        int rc = ddpc_k_fill(gx, dtype, n * c * volume, 0.0, stream);
        if (rc) return rc;
    }
    if (n * points == 0 || (!gx && !ggrid)) return 0;
    FLOAT_DISPATCH(dtype, grid_sample_backward_kernel<T><<<grid_for(n * points, 128), 128, 0, st>>>(
                              (T *)gx, (T *)ggrid, (const T *)g, (const T *)x, (const T *)grid, n, c, points, volume,
                              s))
    return (int)cudaGetLastError();
}
