// Reductions: the sum of all elements, accumulated in double (for integers in
// unsigned 64 bits: exact, and wrapping on overflow like the host loop). CUB's
// device-wide reduction spreads it over every SM: the elements are widened to
// the accumulator as they are read (a transform iterator, never stored) and
// the total is rounded to the output's type as it is written (a transform
// output iterator); CUB's temporary storage holds its partial sums.
#include <cub/device/device_reduce.cuh>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>

#include <type_traits>

#include "dispatch.cuh"
#include "kernels.h"

namespace {

// Integers never pass through double: a double holds only 53 of an int64's bits.
template <typename T> struct SumAcc { typedef double type; };
template <> struct SumAcc<int32_t> { typedef unsigned long long type; };
template <> struct SumAcc<int64_t> { typedef unsigned long long type; };
template <> struct SumAcc<uint8_t> { typedef unsigned long long type; };

// Float dtypes keep theirs; integers give int64.
template <typename T> struct SumOut { typedef T type; };
template <> struct SumOut<int32_t> { typedef int64_t type; };
template <> struct SumOut<uint8_t> { typedef int64_t type; };

template <typename T> struct Widen {
    typedef typename SumAcc<T>::type A;
    __device__ A operator()(T v) const {
        if constexpr (std::is_integral<T>::value) return (A)v;  // int32 sign-extends, then wraps modulo 2**64
        else return to_double(&v, 0);
    }
};

template <typename T> struct Narrow {
    typedef typename SumOut<T>::type O;
    __device__ O operator()(typename SumAcc<T>::type v) const {
        if constexpr (std::is_integral<O>::value) return (O)v;
        else return from_double<O>((double)v);
    }
};

struct Add {
    template <typename A> __device__ A operator()(A a, A b) const { return a + b; }
};

template <typename T> struct SumIters {
    typedef typename SumAcc<T>::type A;
    typedef thrust::transform_iterator<Widen<T>, const T *> In;
    typedef thrust::transform_output_iterator<Narrow<T>, typename SumOut<T>::type *> Out;
};

// out = the sum of a's n elements, in CUB's temporary storage `temp` of *bytes;
// with temp NULL, *bytes = the storage it needs instead (CUB's convention).
template <typename T>
cudaError_t reduce_sum(void *temp, size_t *bytes, void *out, const void *a, int64_t n, cudaStream_t stream) {
    typedef SumIters<T> I;
    typename I::In in((const T *)a, Widen<T>());
    typename I::Out total((typename SumOut<T>::type *)out, Narrow<T>());
    return cub::DeviceReduce::Reduce(temp, *bytes, in, total, n, Add(), (typename I::A)0, stream);
}

}  // namespace

extern "C" int ddpc_k_sum_scratch(int64_t n, int dtype, size_t *bytes) {
    size_t temp = 0;
    DDPC_DISPATCH(dtype, {
        cudaError_t e = reduce_sum<T>(nullptr, &temp, nullptr, nullptr, n, 0);
        if (e != cudaSuccess) return (int)e;
    })
    *bytes = temp;
    return 0;
}

extern "C" int ddpc_k_sum(void *out, const void *a, int dtype, int64_t n, void *scratch, size_t bytes,
                          void *stream) {
    size_t need = 0;
    int e = ddpc_k_sum_scratch(n, dtype, &need);
    if (e) return e;
    if (bytes < need) return (int)cudaErrorInvalidValue;
    DDPC_DISPATCH(dtype, return (int)reduce_sum<T>(scratch, &bytes, out, a, n, (cudaStream_t)stream))
    return 0;
}
