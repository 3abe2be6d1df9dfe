/* C-level tests of the allocator (shared blocks' reference counts included), the 16-bit float conversions (scalar and
 * array, software and F16C) and the random generator, built with
 * AddressSanitizer by tests/test_c_units.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#include "alloc.h"
#include "device.h"
#include "dtype.h"
#include "kernels.h"


static void test_host_allocations_(void) {
    for (size_t n = 0; n < 5000; n += 97) {
        ddpc_block *b = NULL;
        EXPECT(ddpc_alloc(DDPC_CPU, n, 0, &b) == DDPC_OK);
        EXPECT(b && ((uintptr_t)b->ptr % 64) == 0 && b->kind == DDPC_MEM_HOST);
        memset(b->ptr, 0xab, n); /* ASan flags any write past the block */
        ddpc_free(b);
    }
    ddpc_block *p = NULL;
    EXPECT(ddpc_alloc(DDPC_CPU, 10000, 1, &p) == DDPC_OK);
    EXPECT(p && ((uintptr_t)p->ptr % 4096) == 0);
    memset(p->ptr, 1, 10000);
    ddpc_free(p);
    ddpc_free(NULL);
}

static int segment_exists_(const char *name) {
    char path[96];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return access(path, F_OK) == 0;
}

static void test_shared_blocks_count_references_(void) {
    ddpc_block *a = NULL, *b = NULL;
    char name[64];
    EXPECT(ddpc_alloc_shared(1000, &a) == DDPC_OK);
    EXPECT(a && a->kind == DDPC_MEM_SHARED && a->size == 1000 && ((uintptr_t)a->ptr % 64) == 0);
    if (!a) return;
    memset(a->ptr, 0x5a, 1000);
    snprintf(name, sizeof name, "%s", ddpc_shared_name(a));
    EXPECT(segment_exists_(name));
    EXPECT(ddpc_shared_send(a) == DDPC_OK); /* a reference for a receiver */
    EXPECT(ddpc_free(a) == DDPC_OK);        /* the maker lets go before the receiver opens it */
    EXPECT(segment_exists_(name), "%s went before its receiver opened it", name);
    EXPECT(ddpc_open_shared(name, &b) == DDPC_OK);
    EXPECT(b && b->size == 1000 && ((unsigned char *)b->ptr)[999] == 0x5a);
    EXPECT(ddpc_free(b) == DDPC_OK);
    EXPECT(!segment_exists_(name), "%s outlived its last reference", name);
    EXPECT(ddpc_open_shared(name, &b) == DDPC_ERR_SYS && b == NULL);
    EXPECT(strstr(ddpc_last_error(), "No such file") != NULL, "%s", ddpc_last_error());
    ddpc_clear_error();
    EXPECT(ddpc_open_shared("/tmp/x", &b) == DDPC_ERR_ARG);
    ddpc_clear_error();

    /* An ending process drops its references; its mappings stay usable. */
    EXPECT(ddpc_alloc_shared(0, &a) == DDPC_OK);
    if (!a) return;
    snprintf(name, sizeof name, "%s", ddpc_shared_name(a));
    EXPECT(ddpc_shared_release_all() == DDPC_OK);
    EXPECT(!segment_exists_(name), "%s outlived release_all", name);
    EXPECT(ddpc_shared_send(a) == DDPC_ERR_ARG); /* unlinked: a receiver could not open it */
    ddpc_clear_error();
    EXPECT(ddpc_free(a) == DDPC_OK);
}

static void test_device_requests_fail_cleanly_without_gpu_(void) {
    if (ddpc_cuda_device_count() > 0) return;
    ddpc_block *b = (ddpc_block *)0x1;
    ddpc_status st = ddpc_alloc(0, 1024, 0, &b);
    EXPECT(st == DDPC_ERR_NOCUDA && b == NULL);
    EXPECT(strstr(ddpc_last_error(), "cuda:0 was requested") != NULL);
    ddpc_clear_error();
    ddpc_mem_stats s;
    EXPECT(ddpc_device_mem_stats(0, &s) == DDPC_ERR_NOCUDA);
    ddpc_clear_error();
}

static void test_size_classes_(void) {
    EXPECT(ddpc_device_size_class(0) == 512);
    EXPECT(ddpc_device_size_class(512) == 512);
    EXPECT(ddpc_device_size_class(513) == 1024);
    EXPECT(ddpc_device_size_class((1u << 20) - 1) == 1u << 20);
    EXPECT(ddpc_device_size_class((1u << 20) + 1) == 2u << 20);
    EXPECT(ddpc_device_size_class((5u << 20) + 1) == 6u << 20);
}

static void test_half_round_trip_all_bit_patterns_(void) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = ddpc_half_to_float((uint16_t)h);
        uint16_t back = ddpc_float_to_half(f);
        if (isnan(f)) EXPECT((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0);
        else EXPECT(back == h);
        float g = ddpc_bf16_to_float((uint16_t)h);
        uint16_t bb = ddpc_float_to_bf16(g);
        if (isnan(g)) EXPECT((bb & 0x7f80) == 0x7f80 && (bb & 0x7f) != 0);
        else EXPECT(bb == h);
    }
    EXPECT(ddpc_float_to_half(65520.0f) == 0x7c00);
    EXPECT(ddpc_float_to_half(65519.0f) == 0x7bff);
    EXPECT(ddpc_float_to_half(5.960464477539063e-08f) == 0x0001);
    EXPECT(ddpc_float_to_half(2.98023223876953125e-08f) == 0x0000); /* tie to even */
    EXPECT(ddpc_float_to_bf16(1.00390625f) == 0x3f80);               /* tie to even, down */
    EXPECT(ddpc_float_to_bf16(1.01171875f) == 0x3f82);               /* tie to even, up */
}

/* Converts in pieces of 1 to 37 values, so that the 8-wide path meets every
 * tail length and unaligned starts. */
static void widen_in_pieces_(ddpc_dtype dt, const uint16_t *in, float *out, size_t n) {
    for (size_t at = 0, len = 1; at < n; at += len, len = len % 37 + 1)
        ddpc_16bit_to_float(dt, in + at, out + at, at + len <= n ? len : n - at);
}

static void narrow_in_pieces_(ddpc_dtype dt, const float *in, uint16_t *out, size_t n) {
    for (size_t at = 0, len = 1; at < n; at += len, len = len % 37 + 1)
        ddpc_float_to_16bit(dt, in + at, out + at, at + len <= n ? len : n - at);
}

static float from_bits_(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Floats where float16 rounding can go wrong: each half value, the midpoints
 * between neighbours (ties, to even) and the floats either side of them, with
 * both signs, from the subnormals to the overflow boundary; then infinities,
 * NaNs (quiet and signalling, payloads that survive and ones that do not),
 * float subnormals and extremes, and random bit patterns to fill `cap`. */
static size_t rounding_cases_(float *f, size_t cap) {
    size_t n = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = ddpc_half_to_float((uint16_t)h), hi = h == 0x7bff ? 65536.0 : ddpc_half_to_float((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact: halves have 11 significant bits */
        float near[4] = {(float)lo, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 4; k++) f[n++] = near[k], f[n++] = -near[k];
    }
    static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f802000u,
                                       0x7fbfe000u, 0xffa00001u, 0x7fc01fffu, 0x7fffffffu, 0x00000001u, 0x807fffffu,
                                       0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x477fefffu, 0x477ff000u, 0x33000000u,
                                       0x33000001u, 0xb3000000u, 0x387fe000u, 0x387ff000u, 0x38800000u};
    for (size_t k = 0; k < sizeof special / sizeof *special; k++) f[n++] = from_bits_(special[k]);
    for (uint64_t x = 0x9e3779b97f4a7c15u; n < cap;) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        f[n++] = from_bits_((uint32_t)(x >> 32));
    }
    return n;
}

/* The array conversions give the bits of the scalar ones on every path: with
 * F16C where the CPU has it (this test says which it compared), all 65536
 * half values widened and the rounding cases above narrowed; bfloat16 too. */
static void test_16bit_arrays_match_the_scalar_conversions_(void) {
#if defined(__x86_64__)
    printf("16-bit arrays: %s compared with the scalar conversions\n",
           __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx") ? "F16C" : "software");
#endif
    enum { NH = 0x10000, NF = 1 << 22 };
    uint16_t *h = malloc(NF * sizeof *h);
    float *f = malloc(NF * sizeof *f);
    EXPECT(h && f);
    if (!h || !f) goto done;
    for (int b = 0; b < 2; b++) {
        ddpc_dtype dt = b ? DDPC_BFLOAT16 : DDPC_FLOAT16;
        size_t bad = 0;
        for (uint32_t i = 0; i < NH; i++) h[i] = (uint16_t)i;
        widen_in_pieces_(dt, h, f, NH);
        for (uint32_t i = 0; i < NH; i++) {
            float want = b ? ddpc_bf16_to_float(h[i]) : ddpc_half_to_float(h[i]);
            if (memcmp(&want, &f[i], 4) && bad++ == 0) EXPECT(0, "%s %#06x widened differently", ddpc_dtype_name(dt), i);
        }
        EXPECT(bad == 0, "%zu of 65536 %s values widened differently", bad, ddpc_dtype_name(dt));
        size_t n = rounding_cases_(f, NF);
        narrow_in_pieces_(dt, f, h, n);
        bad = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t want = b ? ddpc_float_to_bf16(f[i]) : ddpc_float_to_half(f[i]);
            uint32_t x;
            memcpy(&x, &f[i], 4);
            if (h[i] != want && bad++ == 0)
                EXPECT(0, "float %#010x narrowed to %s %#06x, not %#06x", x, ddpc_dtype_name(dt), h[i], want);
        }
        EXPECT(bad == 0, "%zu of %zu floats narrowed to %s differently", bad, n, ddpc_dtype_name(dt));
    }
    /* The rounding edges themselves, against known float16 bits. */
    float edges[4] = {65519.0f, 65520.0f, 0x1p-25f, nextafterf(0x1p-25f, 1.0f)};
    uint16_t got[4];
    ddpc_float_to_16bit(DDPC_FLOAT16, edges, got, 4);
    EXPECT(got[0] == 0x7bff && got[1] == 0x7c00 && got[2] == 0x0000 && got[3] == 0x0001);
done:
    free(h);
    free(f);
}

static void test_random_bits_are_stateless_and_spread_(void) {
    EXPECT(ddpc_random_bits(1, 2) == ddpc_random_bits(1, 2));
    EXPECT(ddpc_random_bits(1, 2) != ddpc_random_bits(2, 1));
    double mean = 0;
    int n = 100000;
    for (int i = 0; i < n; i++) {
        float u = ddpc_uniform_f32(ddpc_random_bits(42, (uint64_t)i));
        EXPECT(u >= 0.0f && u < 1.0f);
        mean += u;
    }
    mean /= n;
    EXPECT(fabs(mean - 0.5) < 0.01);
}

static void test_errors_keep_the_first_message_(void) {
    ddpc_clear_error();
    EXPECT(DDPC_ERROR(DDPC_ERR_ARG, "first %d", 1) == DDPC_ERR_ARG);
    DDPC_ERROR(DDPC_ERR_SYS, "second");
    EXPECT(strncmp(ddpc_last_error(), "first 1 [", 9) == 0);
    ddpc_clear_error();
    EXPECT(strcmp(ddpc_last_error(), "unknown error") == 0);
}

int main(void) {
    test_host_allocations_();
    test_shared_blocks_count_references_();
    test_device_requests_fail_cleanly_without_gpu_();
    test_size_classes_();
    test_half_round_trip_all_bit_patterns_();
    test_16bit_arrays_match_the_scalar_conversions_();
    test_random_bits_are_stateless_and_spread_();
    test_errors_keep_the_first_message_();
    return check_finish("C core");
}
