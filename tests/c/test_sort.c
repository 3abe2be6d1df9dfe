/* The host sort's pure logic: ddpc_sort_key orders every dtype's bit
 * patterns as PyTorch's sort orders the values (NaN last and equal to each
 * other, -0 equal to +0, signed integers by value), and ddpc_sort_pairs is a
 * stable sort, checked against a plain insertion sort on many lengths. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "kernels.h"
#include "sort.h"

static uint64_t f32_bits_(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static uint64_t f64_bits_(double f) {
    uint64_t b;
    memcpy(&b, &f, 8);
    return b;
}

/* Values in ascending order; groups of equal values share a number in `group`. */
static void test_float_keys_order_as_values_(void) {
    const double v[] = {-INFINITY, -1e30, -2.5, -1e-40, -0.0, 0.0, 1e-40, 3.0, 1e30, INFINITY, NAN, -NAN};
    const int group[] = {0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9, 9};
    int n = sizeof v / sizeof v[0];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            uint64_t a32 = ddpc_sort_key(DDPC_FLOAT32, f32_bits_((float)v[i]));
            uint64_t b32 = ddpc_sort_key(DDPC_FLOAT32, f32_bits_((float)v[j]));
            uint64_t a64 = ddpc_sort_key(DDPC_FLOAT64, f64_bits_(v[i])), b64 = ddpc_sort_key(DDPC_FLOAT64, f64_bits_(v[j]));
            uint64_t a16 = ddpc_sort_key(DDPC_FLOAT16, ddpc_float_to_half((float)v[i]));
            uint64_t b16 = ddpc_sort_key(DDPC_FLOAT16, ddpc_float_to_half((float)v[j]));
            uint64_t ab = ddpc_sort_key(DDPC_BFLOAT16, ddpc_float_to_bf16((float)v[i]));
            uint64_t bb = ddpc_sort_key(DDPC_BFLOAT16, ddpc_float_to_bf16((float)v[j]));
            int want = group[i] < group[j] ? -1 : group[i] > group[j];
            int got64 = a64 < b64 ? -1 : a64 > b64;
            EXPECT(got64 == want, "float64 %g vs %g: %d, expected %d", v[i], v[j], got64, want);
            /* Narrower formats merge values they cannot tell apart: only strict order must hold. */
            if (want < 0 && (float)v[i] != (float)v[j]) EXPECT(a32 < b32, "float32 %g < %g", v[i], v[j]);
            if (want == 0) EXPECT(a32 == b32 && a16 == b16 && ab == bb, "%g == %g", v[i], v[j]);
            if (want < 0 && fabs(v[i]) != 1e-40 && fabs(v[j]) != 1e-40 && fabs(v[i]) != 1e30 && fabs(v[j]) != 1e30)
                EXPECT(a16 < b16 && ab < bb, "16-bit %g < %g", v[i], v[j]);
            EXPECT(a32 < (1ull << 32) && a16 < (1u << 16) && ab < (1u << 16), "keys fit the element's width");
        }
}

static void test_integer_keys_order_as_values_(void) {
    const int64_t v[] = {INT64_MIN, -5, -1, 0, 1, 7, INT64_MAX};
    for (int i = 0; i + 1 < 7; i++) {
        EXPECT(ddpc_sort_key(DDPC_INT64, (uint64_t)v[i]) < ddpc_sort_key(DDPC_INT64, (uint64_t)v[i + 1]));
        if (v[i] >= INT32_MIN && v[i + 1] <= INT32_MAX)
            EXPECT(ddpc_sort_key(DDPC_INT32, (uint32_t)(int32_t)v[i]) <
                   ddpc_sort_key(DDPC_INT32, (uint32_t)(int32_t)v[i + 1]));
    }
    EXPECT(ddpc_sort_key(DDPC_INT32, (uint32_t)INT32_MIN) == 0 && ddpc_sort_key(DDPC_INT32, 0xffffffffu) == 0x7fffffffu);
    EXPECT(ddpc_sort_key(DDPC_UINT8, 0) == 0 && ddpc_sort_key(DDPC_UINT8, 255) == 255);
}

static void reference_sort_(uint64_t *key, int64_t *index, int64_t n) {
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && key[j - 1] > key[j]; j--) {
            uint64_t k = key[j];
            int64_t x = index[j];
            key[j] = key[j - 1], index[j] = index[j - 1], key[j - 1] = k, index[j - 1] = x;
        }
}

static void test_sort_pairs_is_stable_(void) {
    const int64_t lengths[] = {0, 1, 2, 31, 32, 33, 64, 65, 100, 257, 1000, 4099};
    uint64_t seed = 1;
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        int64_t n = lengths[l];
        for (int spread = 1; spread <= 3; spread++) {
            uint64_t *key = malloc((size_t)(n + 1) * 8), *want_key = malloc((size_t)(n + 1) * 8);
            uint64_t *tmp_key = malloc((size_t)(n + 1) * 8);
            int64_t *index = malloc((size_t)(n + 1) * 8), *want_index = malloc((size_t)(n + 1) * 8);
            int64_t *tmp_index = malloc((size_t)(n + 1) * 8);
            for (int64_t i = 0; i < n; i++) {
                seed = ddpc_random_bits(seed, (uint64_t)i);
                /* few distinct keys (many ties), many, or already sorted runs */
                key[i] = spread == 1 ? seed % 5 : spread == 2 ? seed : (uint64_t)(i / 7) + (seed % 2) * 1000;
                index[i] = i;
            }
            memcpy(want_key, key, (size_t)n * 8);
            memcpy(want_index, index, (size_t)n * 8);
            reference_sort_(want_key, want_index, n);
            ddpc_sort_pairs(key, index, tmp_key, tmp_index, n);
            EXPECT(n == 0 || (!memcmp(key, want_key, (size_t)n * 8) && !memcmp(index, want_index, (size_t)n * 8)),
                   "length %lld, spread %d: not the stable order", (long long)n, spread);
            free(key), free(want_key), free(tmp_key), free(index), free(want_index), free(tmp_index);
        }
    }
}

/* Keys of a given shape: few distinct (many ties), all distinct, sorted,
 * reversed, all equal, or organ-pipe; indices a shuffled 0..n-1. */
static void fill_case_(uint64_t *key, int64_t *index, int64_t n, int shape, uint64_t *seed) {
    for (int64_t i = 0; i < n; i++) {
        *seed = ddpc_random_bits(*seed, (uint64_t)i);
        key[i] = shape == 0   ? *seed % 5
                 : shape == 1 ? *seed
                 : shape == 2 ? (uint64_t)i
                 : shape == 3 ? (uint64_t)(n - i)
                 : shape == 4 ? 7
                              : (uint64_t)(i < n / 2 ? i : n - i);
        index[i] = i;
    }
    for (int64_t i = n - 1; i > 0; i--) {
        *seed = ddpc_random_bits(*seed, (uint64_t)i);
        int64_t j = (int64_t)(*seed % (uint64_t)(i + 1)), t = index[i];
        index[i] = index[j], index[j] = t;
    }
}

static int pair_before_(uint64_t ka, int64_t ia, uint64_t kb, int64_t ib) { return ka < kb || (ka == kb && ia < ib); }

/* Against a plain insertion sort of the (key, position) pairs, keys of 32 and
 * of 64 bits, every shape, several k. */
static void test_select_position_matches_the_sorted_position_(void) {
    const int64_t lengths[] = {1, 2, 3, 31, 32, 33, 34, 100, 257, 1000, 4099};
    uint64_t seed = 3;
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        int64_t n = lengths[l];
        uint64_t *key = malloc((size_t)n * 8), *want_key = malloc((size_t)n * 8);
        int64_t *index = malloc((size_t)n * 8), *want_index = malloc((size_t)n * 8);
        uint64_t *scratch = malloc((size_t)n * 16);
        for (int bits = 32; bits <= 64; bits += 32)
            for (int shape = 0; shape < 6; shape++) {
                const int64_t ks[] = {0, n - 1, (n - 1) / 2, n / 3, (int64_t)(seed % (uint64_t)n)};
                for (int c = 0; c < 5; c++) {
                    int64_t k = ks[c];
                    fill_case_(key, index, n, shape, &seed);
                    for (int64_t i = 0; i < n; i++) {
                        if (bits == 32) key[i] &= 0xffffffffull;
                        want_key[i] = key[i], want_index[i] = i;
                    }
                    for (int64_t i = 1; i < n; i++)
                        for (int64_t j = i; j > 0 && pair_before_(want_key[j], want_index[j], want_key[j - 1],
                                                                  want_index[j - 1]); j--) {
                            uint64_t tk = want_key[j];
                            int64_t ti = want_index[j];
                            want_key[j] = want_key[j - 1], want_index[j] = want_index[j - 1];
                            want_key[j - 1] = tk, want_index[j - 1] = ti;
                        }
                    int64_t got = ddpc_select_position(key, n, k, scratch);
                    EXPECT(got == want_index[k], "%d-bit keys, length %lld, shape %d, k %lld: position %lld, "
                           "not %lld", bits, (long long)n, shape, (long long)k, (long long)got,
                           (long long)want_index[k]);
                }
            }
        free(key), free(want_key), free(index), free(want_index), free(scratch);
    }
}

int main(void) {
    test_float_keys_order_as_values_();
    test_integer_keys_order_as_values_();
    test_sort_pairs_is_stable_();
    test_select_position_matches_the_sorted_position_();
    return check_finish("sort");
}
