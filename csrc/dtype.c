/* Element type sizes and names, and the array conversions of the 16-bit float types. */
#include "dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const size_t sizes_[DDPC_NDTYPES] = {4, 8, 2, 2, 4, 8, 1, 8, 16, 1};
static const char *names_[DDPC_NDTYPES] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8",
                                             "complex64", "complex128", "bool"};

size_t ddpc_dtype_size(ddpc_dtype dt) { return (unsigned)dt < DDPC_NDTYPES ? sizes_[dt] : 0; }

const char *ddpc_dtype_name(ddpc_dtype dt) { return (unsigned)dt < DDPC_NDTYPES ? names_[dt] : "invalid"; }

int ddpc_dtype_is_float(ddpc_dtype dt) { return dt <= DDPC_BFLOAT16; }

int ddpc_dtype_is_complex(ddpc_dtype dt) { return dt == DDPC_COMPLEX64 || dt == DDPC_COMPLEX128; }

#if defined(__x86_64__)
/* Compiled for F16C whatever the build's -march, and run only where the CPU
 * has it (and AVX, whose registers it uses). Rounding is to nearest even,
 * whatever MXCSR says; a tail of fewer than 8 goes the software way. */
static int has_f16c_(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}

__attribute__((target("f16c,avx"))) static size_t half_to_float_f16c_(const uint16_t *in, float *out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    return i;
}

__attribute__((target("f16c,avx"))) static size_t float_to_half_f16c_(const float *in, uint16_t *out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}
#endif

void ddpc_16bit_to_float(ddpc_dtype dt, const uint16_t *in, float *out, size_t n) {
    size_t i = 0;
    if (dt == DDPC_BFLOAT16) {
        for (; i < n; i++) out[i] = ddpc_bf16_to_float(in[i]);
        return;
    }
#if defined(__x86_64__)
    if (has_f16c_()) i = half_to_float_f16c_(in, out, n);
#endif
    for (; i < n; i++) out[i] = ddpc_half_to_float(in[i]);
}

void ddpc_float_to_16bit(ddpc_dtype dt, const float *in, uint16_t *out, size_t n) {
    size_t i = 0;
    if (dt == DDPC_BFLOAT16) {
        for (; i < n; i++) out[i] = ddpc_float_to_bf16(in[i]);
        return;
    }
#if defined(__x86_64__)
    if (has_f16c_()) i = float_to_half_f16c_(in, out, n);
#endif
    for (; i < n; i++) out[i] = ddpc_float_to_half(in[i]);
}
