/* Unit tests of the communicator's pure logic: ring segments and step
 * schedule (simulated ring all-reduce), shared-memory slices, and the
 * reduction kernels for every dtype and op. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "comm/reduce.h"
#include "comm/schedule.h"
#include "dtype.h"


static const size_t COUNTS[] = {0, 1, 7, 4097, (1u << 20) + 3};

static void test_segments(void) {
    for (size_t c = 0; c < sizeof COUNTS / sizeof *COUNTS; c++)
        for (int n = 1; n <= 9; n++) {
            size_t expect_lo = 0;
            for (int i = 0; i < n; i++) {
                size_t lo, hi;
                ddpc_ring_segment(COUNTS[c], n, i, &lo, &hi);
                EXPECT(lo == expect_lo && hi >= lo, "segment %d of %zu/%d not contiguous", i, COUNTS[c], n);
                EXPECT(hi - lo <= COUNTS[c] / (size_t)n + 1, "segment %d of %zu/%d too long", i, COUNTS[c], n);
                expect_lo = hi;
            }
            EXPECT(expect_lo == COUNTS[c], "segments of %zu/%d do not cover", COUNTS[c], n);
        }
}

/* Runs the ring schedule on n simulated ranks (all sends of a step happen
 * before any receive is reduced, as on the wire) and checks every rank ends
 * with the element-wise sum. */
static void simulate_ring(size_t count, int n) {
    int64_t **data = calloc((size_t)n, sizeof *data), **inbox = calloc((size_t)n, sizeof *inbox);
    for (int r = 0; r < n; r++) {
        data[r] = malloc((count + 1) * sizeof(int64_t));
        inbox[r] = malloc((count + 1) * sizeof(int64_t));
        for (size_t i = 0; i < count; i++) data[r][i] = (int64_t)r * 1000003 + (int64_t)i;
    }
    for (int phase = 0; phase < 2; phase++)
        for (int s = 0; s < n - 1; s++) {
            for (int r = 0; r < n; r++) { /* rank r sends to r+1 */
                int next = (r + 1) % n;
                int seg = phase == 0 ? ddpc_ring_rs_send(r, s, n) : ddpc_ring_ag_send(r, s, n);
                int want = phase == 0 ? ddpc_ring_rs_recv(next, s, n) : ddpc_ring_ag_recv(next, s, n);
                EXPECT(seg == want, "step %d: rank %d sends segment %d but rank %d expects %d", s, r, seg, next, want);
                size_t lo, hi;
                ddpc_ring_segment(count, n, seg, &lo, &hi);
                memcpy(inbox[next] + lo, data[r] + lo, (hi - lo) * sizeof(int64_t));
            }
            for (int r = 0; r < n; r++) {
                int seg = phase == 0 ? ddpc_ring_rs_recv(r, s, n) : ddpc_ring_ag_recv(r, s, n);
                size_t lo, hi;
                ddpc_ring_segment(count, n, seg, &lo, &hi);
                if (phase == 0) {
                    int64_t *dst = data[r] + lo;
                    ddpc_reduce(DDPC_INT64, DDPC_RED_SUM, dst, (const void *const[]){dst, inbox[r] + lo}, 2, hi - lo, 0);
                } else {
                    memcpy(data[r] + lo, inbox[r] + lo, (hi - lo) * sizeof(int64_t));
                }
            }
        }
    int64_t rsum = (int64_t)n * (n - 1) / 2 * 1000003;
    for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < count; i++)
            if (data[r][i] != rsum + (int64_t)n * (int64_t)i) {
                EXPECT(0, "ring of %d, count %zu: rank %d element %zu is %lld", n, count, r, i, (long long)data[r][i]);
                break;
            }
        free(data[r]);
        free(inbox[r]);
    }
    free(data);
    free(inbox);
}

static void test_ring(void) {
    for (size_t c = 0; c < 4; c++)
        for (int n = 1; n <= 6; n++) simulate_ring(COUNTS[c], n);
}

static void test_shm_slices(void) {
    static const size_t sizes[] = {1, 2, 4, 8};
    for (size_t e = 0; e < 4; e++)
        for (size_t m = 0; m < 3000; m += 37)
            for (int n = 1; n <= 8; n++) {
                size_t covered = 0, prev_hi = 0;
                for (int r = 0; r < n; r++) {
                    size_t lo, hi;
                    ddpc_shm_slice(m, sizes[e], 64, n, r, &lo, &hi);
                    EXPECT(lo == prev_hi, "slice %d of %zu not contiguous", r, m);
                    EXPECT(lo == m || (lo * sizes[e]) % 64 == 0, "slice %d of %zu not line aligned", r, m);
                    covered += hi - lo;
                    prev_hi = hi;
                }
                EXPECT(covered == m, "slices of %zu over %d ranks cover %zu", m, n, covered);
            }
}

/* ---- reduction kernels against a double-precision reference -------------------- */

static double load_(ddpc_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case DDPC_FLOAT32: return ((const float *)p)[i];
    case DDPC_FLOAT64: return ((const double *)p)[i];
    case DDPC_FLOAT16: return ddpc_half_to_float(((const uint16_t *)p)[i]);
    case DDPC_BFLOAT16: return ddpc_bf16_to_float(((const uint16_t *)p)[i]);
    case DDPC_INT32: return ((const int32_t *)p)[i];
    case DDPC_INT64: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

static void store_(ddpc_dtype dt, void *p, size_t i, double v) {
    switch (dt) {
    case DDPC_FLOAT32: ((float *)p)[i] = (float)v; break;
    case DDPC_FLOAT64: ((double *)p)[i] = v; break;
    case DDPC_FLOAT16: ((uint16_t *)p)[i] = ddpc_float_to_half((float)v); break;
    case DDPC_BFLOAT16: ((uint16_t *)p)[i] = ddpc_float_to_bf16((float)v); break;
    case DDPC_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case DDPC_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
}

static void test_reduce(void) {
    enum { N = 1000, MAXSRC = 5 };
    for (int dt = 0; dt < DDPC_COMPLEX64; dt++) /* the real dtypes; complex ones below */
        for (int op = DDPC_RED_SUM; op <= DDPC_RED_PROD; op++)
            for (int nsrc = 1; nsrc <= MAXSRC; nsrc++) {
                size_t es = ddpc_dtype_size((ddpc_dtype)dt);
                void *src[MAXSRC], *dst = malloc(N * es);
                for (int j = 0; j < nsrc; j++) {
                    src[j] = malloc(N * es);
                    for (size_t i = 0; i < N; i++)
                        store_((ddpc_dtype)dt, src[j], i, op == DDPC_RED_PROD ? 1 + (double)((i + (size_t)j) % 2)
                                                                              : (double)((i * 7 + (size_t)j * 3) % 13));
                }
                int divisor = op == DDPC_RED_AVG ? nsrc : 0;
                ddpc_reduce((ddpc_dtype)dt, op == DDPC_RED_AVG ? DDPC_RED_SUM : (ddpc_redop)op, dst,
                            (const void *const *)src, nsrc, N, divisor);
                for (size_t i = 0; i < N; i++) {
                    double ref = load_((ddpc_dtype)dt, src[0], i);
                    for (int j = 1; j < nsrc; j++) {
                        double x = load_((ddpc_dtype)dt, src[j], i);
                        ref = op == DDPC_RED_MIN ? (x < ref ? x : ref)
                            : op == DDPC_RED_MAX ? (x > ref ? x : ref)
                            : op == DDPC_RED_PROD ? ref * x : ref + x;
                    }
                    if (divisor > 1) ref = ddpc_dtype_is_float((ddpc_dtype)dt) ? ref / divisor : (double)((int64_t)ref / divisor);
                    double got = load_((ddpc_dtype)dt, dst, i);
                    double tol = dt == DDPC_FLOAT16 || dt == DDPC_BFLOAT16 ? 0.01 * (ref < 0 ? -ref : ref) : 1e-6;
                    if (got - ref > tol || ref - got > tol) {
                        EXPECT(0, "%s %s of %d sources: element %zu is %g, expected %g", ddpc_dtype_name((ddpc_dtype)dt),
                               ddpc_redop_name((ddpc_redop)op), nsrc, i, got, ref);
                        break;
                    }
                }
                /* In place into the first source, as the ring does. */
                ddpc_reduce((ddpc_dtype)dt, DDPC_RED_MAX, src[0], (const void *const *)src, nsrc, N, 0);
                for (size_t i = 0; i < N; i++)
                    for (int j = 0; j < nsrc; j++)
                        if (load_((ddpc_dtype)dt, src[0], i) < load_((ddpc_dtype)dt, src[j], i)) {
                            EXPECT(0, "in-place max wrong at %zu", i);
                            i = N;
                            break;
                        }
                for (int j = 0; j < nsrc; j++) free(src[j]);
                free(dst);
            }
    /* Bitwise or gathers disjoint bytes exactly (used by cross-host all_gather). */
    uint8_t a[4] = {0, 0xff, 0, 0x80}, b[4] = {0x12, 0, 0x34, 0};
    ddpc_reduce(DDPC_UINT8, DDPC_RED_BOR, a, (const void *const[]){a, b}, 2, 4, 0);
    EXPECT(a[0] == 0x12 && a[1] == 0xff && a[2] == 0x34 && a[3] == 0x80, "bitwise or gather wrong");
    /* Integer sums wrap instead of overflowing. */
    int32_t big[1] = {INT32_MAX}, one[1] = {1};
    ddpc_reduce(DDPC_INT32, DDPC_RED_SUM, big, (const void *const[]){big, one}, 2, 1, 0);
    EXPECT(big[0] == INT32_MIN, "int32 sum does not wrap");
    /* Complex elements sum and average part by part. */
    float c64[4] = {1, -2, 3.5f, 4}, d64[4] = {2, 5, -1.5f, 0};
    ddpc_reduce(DDPC_COMPLEX64, DDPC_RED_SUM, c64, (const void *const[]){c64, d64}, 2, 2, 2);
    EXPECT(c64[0] == 1.5f && c64[1] == 1.5f && c64[2] == 1 && c64[3] == 2, "complex64 average wrong");
    double c128[2] = {1e300, -3}, d128[2] = {1e300, 1};
    ddpc_reduce(DDPC_COMPLEX128, DDPC_RED_SUM, c128, (const void *const[]){c128, d128}, 2, 1, 0);
    EXPECT(c128[0] == 2e300 && c128[1] == -2, "complex128 sum wrong");
    /* Bool sums are or (max), products and (min), and bool has no average; other dtypes keep their op. */
    EXPECT(ddpc_redop_on(DDPC_RED_SUM, DDPC_BOOL) == DDPC_RED_MAX, "bool sum is not max");
    EXPECT(ddpc_redop_on(DDPC_RED_PROD, DDPC_BOOL) == DDPC_RED_MIN, "bool product is not min");
    EXPECT(ddpc_redop_on(DDPC_RED_AVG, DDPC_BOOL) == -1, "bool average accepted");
    EXPECT(ddpc_redop_on(DDPC_RED_MIN, DDPC_BOOL) == DDPC_RED_MIN, "bool min changed");
    for (int op = 0; op < DDPC_NREDOPS; op++)
        EXPECT(ddpc_redop_on((ddpc_redop)op, DDPC_UINT8) == op, "uint8 %s changed", ddpc_redop_name((ddpc_redop)op));
}

int main(void) {
    test_segments();
    test_ring();
    test_shm_slices();
    test_reduce();
    return check_finish("comm schedule");
}
