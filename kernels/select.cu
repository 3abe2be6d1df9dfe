// The positions of a mask's non-zero elements on the GPU (stream compaction):
// CUB's exclusive scan of the 0/1 flags (read from the mask through a
// transform iterator, never stored) giving each non-zero element its output
// row, then one thread per element writing its flat index or coordinates
// there; and the count of non-zero elements, by CUB's device-wide reduction
// of the same flags.
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/transform_iterator.h>

#include "dispatch.cuh"
#include "kernels.h"

namespace {

__host__ __forceinline__ size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

// A mask element's flag, widened to int64 so that neither the scan nor the
// sum can overflow.
struct NonZeroFlag {
    __host__ __device__ int64_t operator()(uint8_t v) const { return v != 0; }
};

typedef thrust::transform_iterator<NonZeroFlag, const uint8_t *> FlagIter;

// The scratch block: for the positions, the exclusive sums of the flags
// (int64, 8 bytes per mask element), then CUB's temporary storage, 256-byte
// aligned; for the count, CUB's temporary storage alone (the sum goes to out).
cudaError_t nonzero_layout(int64_t n, int mode, size_t *temp_at, size_t *total, cudaStream_t stream) {
    size_t temp = 0;
    FlagIter flags(nullptr, NonZeroFlag());
    cudaError_t e = mode == DDPC_K_NONZERO_COUNT
                        ? cub::DeviceReduce::Sum(nullptr, temp, flags, (int64_t *)nullptr, n, stream)
                        : cub::DeviceScan::ExclusiveSum(nullptr, temp, flags, (int64_t *)nullptr, n, stream);
    if (e != cudaSuccess) return e;
    *temp_at = align256(mode == DDPC_K_NONZERO_COUNT ? 0 : n * sizeof(int64_t));
    *total = *temp_at + align256(temp);
    return cudaSuccess;
}

__global__ void write_kernel(int64_t *out, const uint8_t *mask, const int64_t *row, int64_t n, int64_t rows,
                             int coords, ddpc_k_bcast geo) {
    GRID_STRIDE(k, n) {
        if (!mask[k] || row[k] >= rows) continue;
        if (!coords) {
            out[row[k]] = k;
            continue;
        }
        int64_t rest = k;
        for (int d = geo.ndim - 1; d >= 0; d--) {
            out[row[k] * geo.ndim + d] = rest % geo.shape[d];
            rest /= geo.shape[d];
        }
    }
}

}  // namespace

extern "C" int ddpc_k_nonzero_scratch(int64_t n, int mode, size_t *bytes) {
    size_t temp_at;
    return (int)nonzero_layout(n, mode, &temp_at, bytes, 0);
}

extern "C" int ddpc_k_nonzero(int64_t *out, const uint8_t *mask, int64_t n, int64_t rows, int mode,
                              ddpc_k_bcast geo, void *scratch, size_t bytes, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    size_t temp_at, total;
    cudaError_t e = nonzero_layout(n, mode, &temp_at, &total, s);
    if (e != cudaSuccess) return (int)e;
    if (bytes < total) return (int)cudaErrorInvalidValue;
    FlagIter flags(mask, NonZeroFlag());
    size_t temp = total - temp_at;
    if (mode == DDPC_K_NONZERO_COUNT)
        return (int)cub::DeviceReduce::Sum((char *)scratch + temp_at, temp, flags, out, n, s);
    int64_t *row = (int64_t *)scratch;
    e = cub::DeviceScan::ExclusiveSum((char *)scratch + temp_at, temp, flags, row, n, s);
    if (e != cudaSuccess) return (int)e;
    write_kernel<<<grid_for(n, 256), 256, 0, s>>>(out, mask, row, n, rows, mode == DDPC_K_NONZERO_COORDS, geo);
    return (int)cudaGetLastError();
}
