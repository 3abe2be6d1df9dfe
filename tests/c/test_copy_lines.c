/* The loader's row copies: every line-copy variant this CPU can run (streaming
 * and ordinary stores, AVX-512, AVX, SSE2) and copy_rows_ for row lengths
 * around the line size, against plain memcpy. The loader's statics are
 * reached by including its source. */
#include "../../csrc/loader.c"

#include "check.h"

static void fill_(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 7u) >> 3);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static void test_line_variants_(void) {
    struct {
        const char *name, *isa;
        copy_lines_fn fn;
    } v[] = {{"stream avx512", "avx512f", stream_lines_avx512_}, {"store avx512", "avx512f", store_lines_avx512_},
             {"stream avx", "avx", stream_lines_avx_},          {"store avx", "avx", store_lines_avx_},
             {"stream sse2", NULL, stream_lines_sse2_},         {"store sse2", NULL, store_lines_sse2_}};
    enum { LINES = 9, BYTES = LINES * 64 + 128 };
    _Alignas(64) unsigned char src[BYTES], dst[BYTES], want[BYTES];
    __builtin_cpu_init();
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int runs = !v[i].isa || (!strcmp(v[i].isa, "avx") ? __builtin_cpu_supports("avx")
                                                           : __builtin_cpu_supports("avx512f"));
        if (!runs) continue;
        for (size_t lines = 0; lines <= LINES; lines++) {
            fill_(src, sizeof src, (unsigned)lines);
            memset(dst, 0xEE, sizeof dst);
            memcpy(want, dst, sizeof want);
            memcpy(want + 64, src + 3, lines * 64);
            /* src off alignment; dst aligned and guarded on both sides */
            v[i].fn((char *)dst + 64, (const char *)src + 3, lines % 2 ? (const char *)src : NULL, lines);
            store_fence_();
            EXPECT(!memcmp(dst, want, sizeof dst), "%s: %zu lines differ from memcpy", v[i].name, lines);
        }
    }
}
#endif

static void test_copy_rows_(void) {
    const size_t lens[] = {1, 4, 8, 63, 64, 255, 256, 257, 260, 1001, 3136};
    const int64_t idx[] = {5, 0, 9, 9, 2, 7, 1, 8};
    const int64_t n = (int64_t)(sizeof idx / sizeof idx[0]), rows = 10;
    for (size_t t = 0; t < sizeof lens / sizeof lens[0]; t++) {
        size_t rb = lens[t];
        unsigned char *src = malloc(rows * rb), *dst = malloc(n * rb + 64 + 1), *want = malloc(n * rb + 64 + 1);
        fill_(src, rows * rb, (unsigned)rb);
        for (int streaming = 0; streaming <= 1; streaming++) {
            for (size_t off = 0; off < 64; off += 21) { /* batch starts on and off a line boundary */
                memset(dst, 0xAB, n * rb + 64 + 1);
                memcpy(want, dst, n * rb + 64 + 1);
                for (int64_t i = 0; i < n; i++) memcpy(want + off + (size_t)i * rb, src + (size_t)idx[i] * rb, rb);
                /* the first rows only: the rest of the list is prefetched, never written */
                copy_rows_(pick_copy_lines_(streaming), (char *)dst + off, (const char *)src, idx, n - 2, n, rb);
                for (int64_t i = n - 2; i < n; i++) memset(want + off + (size_t)i * rb, 0xAB, rb);
                EXPECT(!memcmp(dst, want, n * rb + 64 + 1), "copy_rows_ of %zu-byte rows (offset %zu, %s)", rb, off,
                       streaming ? "streaming" : "ordinary stores");
            }
        }
        free(src);
        free(dst);
        free(want);
    }
}

int main(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    test_line_variants_();
#endif
    test_copy_rows_();
    return check_finish("row copy");
}
