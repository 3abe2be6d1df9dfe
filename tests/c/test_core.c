/* C-level tests of the allocator, the 16-bit float conversions and the random
 * generator, built with AddressSanitizer by tests/test_c_core.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    test_device_requests_fail_cleanly_without_gpu_();
    test_size_classes_();
    test_half_round_trip_all_bit_patterns_();
    test_random_bits_are_stateless_and_spread_();
    test_errors_keep_the_first_message_();
    return check_finish("C core");
}
