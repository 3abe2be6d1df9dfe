/* The per-element rules shared by the host loops and the kernels (kernels.h):
 * ddpc_search_sorted, on sort keys, against PyTorch's bisection over doubles
 * (NaN on either side), and against a count where the line holds no NaN
 * (also through a sorter); ddpc_cum_extreme_takes
 * against a running maximum and minimum written out, ddpc_gcd_lcm against
 * Euclid on small numbers and at INT64_MIN, and scalar_ops.h's ddpc_int_div
 * against C's division, and at INT_MIN / -1 (UBSan flags any overflow). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "kernels.h"
#include "scalar_ops.h"

/* PyTorch's bisection with its comparisons on doubles: a NaN on either side
 * fails them all and sends the search right. */
static int64_t torch_search_(const double *line, int64_t n, double v, int right) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int go_right = isnan(v) || isnan(line[mid]) || (right ? line[mid] <= v : line[mid] < v);
        if (go_right) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static uint64_t f64_bits_(double f) {
    uint64_t b;
    memcpy(&b, &f, 8);
    return b;
}

static void test_search_sorted_(void) {
    const double line[] = {-INFINITY, -3.0, -0.0, 0.0, 0.0, 2.5, 2.5, 2.5, 7.0, INFINITY, NAN};
    const double values[] = {-INFINITY, -5.0, -3.0, 0.0, -0.0, 1.0, 2.5, 7.0, 9.0, INFINITY, NAN};
    int64_t n = sizeof line / sizeof line[0];
    uint64_t bits[sizeof line / sizeof line[0]];
    for (int64_t i = 0; i < n; i++) bits[i] = f64_bits_(line[i]);
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++)
        for (int right = 0; right < 2; right++)
            for (int64_t len = 0; len <= n; len++) {
                int64_t got = ddpc_search_sorted(bits, NULL, DDPC_FLOAT64, 8, len, f64_bits_(values[k]), right);
                int64_t want = torch_search_(line, len, values[k], right);
                EXPECT(got == want, "%g in %lld elements (right %d): %lld, expected %lld", values[k], (long long)len,
                       right, (long long)got, (long long)want);
            }
    /* Without NaN in the line, the positions are those of a plain count. */
    const int32_t ints[] = {-7, -7, 0, 3, 3, 3, 9};
    const int64_t order[] = {6, 2, 0, 4, 1, 5, 3}; /* a shuffled copy, and the sorter that orders it */
    int32_t shuffled[7];
    for (int i = 0; i < 7; i++) shuffled[order[i]] = ints[i];
    for (int32_t v = -9; v <= 10; v++)
        for (int right = 0; right < 2; right++) {
            int64_t want = 0;
            for (int i = 0; i < 7; i++) want += right ? ints[i] <= v : ints[i] < v;
            EXPECT(ddpc_search_sorted(ints, NULL, DDPC_INT32, 4, 7, (uint32_t)v, right) == want, "int32 %d", v);
            EXPECT(ddpc_search_sorted(shuffled, order, DDPC_INT32, 4, 7, (uint32_t)v, right) == want,
                   "int32 %d through the sorter", v);
        }
}

static void test_nan_keys_(void) {
    EXPECT(ddpc_sort_key_is_nan(DDPC_FLOAT64, ddpc_sort_key(DDPC_FLOAT64, f64_bits_(NAN))));
    EXPECT(ddpc_sort_key_is_nan(DDPC_FLOAT64, ddpc_sort_key(DDPC_FLOAT64, f64_bits_(-NAN))));
    EXPECT(!ddpc_sort_key_is_nan(DDPC_FLOAT64, ddpc_sort_key(DDPC_FLOAT64, f64_bits_(INFINITY))));
    EXPECT(ddpc_sort_key_is_nan(DDPC_FLOAT16, ddpc_sort_key(DDPC_FLOAT16, 0x7e00u)));
    EXPECT(!ddpc_sort_key_is_nan(DDPC_FLOAT16, ddpc_sort_key(DDPC_FLOAT16, 0x7c00u)));
    EXPECT(!ddpc_sort_key_is_nan(DDPC_UINT8, ddpc_sort_key(DDPC_UINT8, 0xffu)), "uint8 255 is a number");
    EXPECT(!ddpc_sort_key_is_nan(DDPC_INT64, ddpc_sort_key(DDPC_INT64, (uint64_t)INT64_MAX)));
}

static void test_cum_extreme_(void) {
    const double v[] = {1.0, 3.0, 3.0, -1.0, NAN, 5.0, NAN, 0.0};
    const int64_t want_max[] = {0, 1, 2, 2, 4, 4, 6, 6}, want_min[] = {0, 0, 0, 3, 4, 4, 6, 6};
    for (int m = 0; m < 2; m++) {
        uint64_t best = ddpc_sort_key(DDPC_FLOAT64, f64_bits_(v[0]));
        int64_t at = 0;
        for (int64_t s = 0; s < 8; s++) {
            uint64_t key = ddpc_sort_key(DDPC_FLOAT64, f64_bits_(v[s]));
            if (ddpc_cum_extreme_takes(DDPC_FLOAT64, key, best, m == 0)) best = key, at = s;
            EXPECT(at == (m == 0 ? want_max : want_min)[s], "%s at step %lld: index %lld", m == 0 ? "max" : "min",
                   (long long)s, (long long)at);
        }
    }
}

static int64_t euclid_(int64_t a, int64_t b) {
    a = a < 0 ? -a : a, b = b < 0 ? -b : b;
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

static void test_gcd_lcm_(void) {
    for (int64_t a = -40; a <= 40; a++)
        for (int64_t b = -40; b <= 40; b++) {
            int64_t g = euclid_(a, b), l = g ? (a < 0 ? -a : a) / g * (b < 0 ? -b : b) : 0;
            EXPECT((int64_t)ddpc_gcd_lcm(a, b, 0) == g, "gcd(%lld, %lld)", (long long)a, (long long)b);
            EXPECT((int64_t)ddpc_gcd_lcm(a, b, 1) == l, "lcm(%lld, %lld)", (long long)a, (long long)b);
        }
    EXPECT(ddpc_gcd_lcm(INT64_MIN, 0, 0) == 1ull << 63, "|INT64_MIN| as an unsigned magnitude");
    EXPECT(ddpc_gcd_lcm(INT64_MIN, 6, 0) == 2);
    EXPECT(ddpc_gcd_lcm(INT64_MAX, INT64_MAX, 1) == (uint64_t)INT64_MAX);
}

static void test_int_div_(void) {
    for (int64_t a = -9; a <= 9; a++)
        for (int64_t b = -4; b <= 4; b++)
            if (b) EXPECT(ddpc_int_div(a, b) == a / b, "%lld / %lld", (long long)a, (long long)b);
    EXPECT(ddpc_int_div(INT64_MIN, -1) == INT64_MIN);
    EXPECT(ddpc_int_div(INT64_MIN, 2) == INT64_MIN / 2 && ddpc_int_div(INT64_MAX, -1) == -INT64_MAX);
    EXPECT((int32_t)(uint32_t)ddpc_int_div(INT32_MIN, -1) == INT32_MIN);
}

int main(void) {
    test_search_sorted_();
    test_nan_keys_();
    test_cum_extreme_();
    test_gcd_lcm_();
    test_int_div_();
    return check_finish("search");
}
