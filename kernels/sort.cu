// Stable sort along a dim on the GPU. Each line of `len` elements `inner`
// apart is copied out contiguously as order-preserving keys (kernels.h's
// ddpc_sort_key, inverted for a descending sort) with their positions, the
// lines are sorted as segments by CUB's stable segmented sort, and the
// positions (and the elements they point at) are written back along the dim.
// The keys are as wide as the elements, so the radix sort makes no more
// passes than the dtype needs.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include "dispatch.cuh"
#include "kernels.h"

namespace {

// The unsigned word of each element width: how elements and keys move.
template <int W> struct Word;
template <> struct Word<1> { typedef uint8_t type; };
template <> struct Word<2> { typedef uint16_t type; };
template <> struct Word<4> { typedef uint32_t type; };
template <> struct Word<8> { typedef unsigned long long type; };

// The scratch block: keys and positions before and after the sort, the
// segment offsets, then CUB's temporary storage, each 256-byte aligned.
struct SortScratch {
    size_t keys_in, keys_out, pos_in, pos_out, offsets, temp, total;
};

__host__ __forceinline__ size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

// CUB's segmented sort gives each segment one thread block, so a single long
// line (any sort of a 1-d tensor) would run on one SM while the rest of the
// GPU idles. A few long lines are instead sorted one after another by the
// device-wide radix sort, which is stable as well, reusing its storage.
__host__ __forceinline__ bool line_by_line(int64_t lines, int64_t len) { return lines <= 16 && len >= (1 << 16); }

template <typename K>
cudaError_t sort_layout(int64_t lines, int64_t len, SortScratch *l, cudaStream_t stream) {
    int64_t n = lines * len;
    size_t temp = 0;
    cudaError_t e =
        line_by_line(lines, len)
            ? cub::DeviceRadixSort::SortPairs(nullptr, temp, (const K *)nullptr, (K *)nullptr,
                                              (const int64_t *)nullptr, (int64_t *)nullptr, len, 0,
                                              (int)(8 * sizeof(K)), stream)
            : cub::DeviceSegmentedSort::StableSortPairs(nullptr, temp, (const K *)nullptr, (K *)nullptr,
                                                        (const int64_t *)nullptr, (int64_t *)nullptr, n, lines,
                                                        (const int64_t *)nullptr, (const int64_t *)nullptr, stream);
    if (e != cudaSuccess) return e;
    l->keys_in = 0;
    l->keys_out = l->keys_in + align256(n * sizeof(K));
    l->pos_in = l->keys_out + align256(n * sizeof(K));
    l->pos_out = l->pos_in + align256(n * sizeof(int64_t));
    l->offsets = l->pos_out + align256(n * sizeof(int64_t));
    l->temp = l->offsets + align256((lines + 1) * sizeof(int64_t));
    l->total = l->temp + align256(temp);
    return cudaSuccess;
}

// Slot k = line * len + s of the contiguous copy takes element s of line
// (line = o * inner + i), so each line is one segment.
template <typename K>
__global__ void keys_kernel(K *keys, int64_t *pos, int64_t *offsets, const K *a, int dtype, int64_t lines,
                            int64_t len, int64_t inner, K flip) {
    GRID_STRIDE(k, lines * len) {
        int64_t line = k / len, s = k % len;
        int64_t at = (line / inner) * len * inner + line % inner + s * inner;
        keys[k] = (K)ddpc_sort_key(dtype, (uint64_t)a[at]) ^ flip;
        pos[k] = s;
        if (s == 0) offsets[line] = k;
        if (k == lines * len - 1) offsets[lines] = lines * len;
    }
}

template <typename K>
__global__ void write_back_kernel(int64_t *indices, K *values, const K *a, const int64_t *pos, int64_t lines,
                                  int64_t len, int64_t inner) {
    GRID_STRIDE(k, lines * len) {
        int64_t line = k / len, s = k % len, p = pos[k];
        int64_t base = (line / inner) * len * inner + line % inner;
        indices[base + s * inner] = p;
        if (values) values[base + s * inner] = a[base + p * inner];
    }
}

template <typename K>
int sort_dim(int64_t *indices, void *values, const void *a, int dtype, int64_t outer, int64_t len, int64_t inner,
             int descending, void *scratch, size_t bytes, cudaStream_t stream) {
    int64_t lines = outer * inner, n = lines * len;
    SortScratch l;
    cudaError_t e = sort_layout<K>(lines, len, &l, stream);
    if (e != cudaSuccess) return (int)e;
    if (bytes < l.total) return (int)cudaErrorInvalidValue;
    char *base = (char *)scratch;
    K *keys_in = (K *)(base + l.keys_in), *keys_out = (K *)(base + l.keys_out);
    int64_t *pos_in = (int64_t *)(base + l.pos_in), *pos_out = (int64_t *)(base + l.pos_out);
    int64_t *offsets = (int64_t *)(base + l.offsets);
    keys_kernel<K><<<grid_for(n, 256), 256, 0, stream>>>(keys_in, pos_in, offsets, (const K *)a, dtype, lines, len,
                                                          inner, descending ? (K)~(K)0 : (K)0);
    if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
    size_t temp = l.total - l.temp;
    if (line_by_line(lines, len)) {
        for (int64_t at = 0; at < n && e == cudaSuccess; at += len)
            e = cub::DeviceRadixSort::SortPairs(base + l.temp, temp, keys_in + at, keys_out + at, pos_in + at,
                                                pos_out + at, len, 0, (int)(8 * sizeof(K)), stream);
    } else {
        e = cub::DeviceSegmentedSort::StableSortPairs(base + l.temp, temp, keys_in, keys_out, pos_in, pos_out, n,
                                                      lines, offsets, offsets + 1, stream);
    }
    if (e != cudaSuccess) return (int)e;
    write_back_kernel<K><<<grid_for(n, 256), 256, 0, stream>>>(indices, (K *)values, (const K *)a, pos_out, lines,
                                                                len, inner);
    return (int)cudaGetLastError();
}

// Runs the statements with K the word of the dtype's width.
#define WIDTH_DISPATCH(dtype, ...)                                                 \
    switch (dtype) {                                                               \
    case K_U8: { typedef Word<1>::type K; __VA_ARGS__; } break;                    \
    case K_F16: case K_BF16: { typedef Word<2>::type K; __VA_ARGS__; } break;      \
    case K_F32: case K_I32: { typedef Word<4>::type K; __VA_ARGS__; } break;       \
    case K_F64: case K_I64: { typedef Word<8>::type K; __VA_ARGS__; } break;       \
    default: return (int)cudaErrorInvalidValue;                                    \
    }

}  // namespace

extern "C" int ddpc_k_sort_scratch(int64_t lines, int64_t len, int dtype, size_t *bytes) {
    SortScratch l;
    WIDTH_DISPATCH(dtype, {
        cudaError_t e = sort_layout<K>(lines, len, &l, 0);
        if (e != cudaSuccess) return (int)e;
    })
    *bytes = l.total;
    return 0;
}

extern "C" int ddpc_k_sort_dim(int64_t *indices, void *values, const void *a, int dtype, int64_t outer, int64_t len,
                               int64_t inner, int descending, void *scratch, size_t bytes, void *stream) {
    WIDTH_DISPATCH(dtype, return sort_dim<K>(indices, values, a, dtype, outer, len, inner, descending, scratch, bytes,
                                             (cudaStream_t)stream))
    return 0;
}
