/* The gather ceiling of this machine for benchmarks/loader.py: `threads`
 * threads copy shuffled rows of a `rows` x `row_bytes` array, batch after
 * batch (batch b on thread b % threads), each into two buffers of its own,
 * with no loader around them: no slots, no handing batches over, no Python.
 * Rows are copied line by line with the widest vector the CPU has while the
 * lines of the row two further on are prefetched, as csrc/loader.c copies
 * them, so the rate is what the cores and memory allow, the most a loader
 * could reach here.
 *
 *     cc -O2 -pthread gather_ceiling.c -o gather_ceiling
 *     ./gather_ceiling rows row_bytes batch threads epochs
 *
 * Prints the best epoch's samples per second. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef void (*copy_fn)(char *dst, const char *src, const char *next, size_t lines);

static void copy_memcpy_(char *dst, const char *src, const char *next, size_t lines) {
    for (size_t k = 0; k < lines * 64; k += 64) {
        if (next) __builtin_prefetch(next + k, 0, 2);
        memcpy(dst + k, src + k, 64);
    }
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void copy_avx512_(char *dst, const char *src, const char *next,
                                                             size_t lines) {
    for (size_t k = 0; k < lines * 64; k += 64) {
        if (next) __builtin_prefetch(next + k, 0, 2);
        _mm512_storeu_si512((void *)(dst + k), _mm512_loadu_si512((const void *)(src + k)));
    }
}
#endif

typedef struct {
    const char *base;
    const int64_t *perm;
    size_t row_bytes;
    int64_t nbatches, batch, thread, threads;
    copy_fn copy;
} job_;

static void *gather_(void *arg) {
    const job_ *j = arg;
    size_t lines = j->row_bytes / 64, tail = j->row_bytes % 64;
    char *buf[2];
    for (int i = 0; i < 2; i++) {
        buf[i] = aligned_alloc(64, (size_t)j->batch * ((j->row_bytes + 63) & ~(size_t)63));
        if (!buf[i]) return (void *)1;
    }
    for (int64_t b = j->thread, n = 0; b < j->nbatches; b += j->threads, n++) {
        const int64_t *idx = j->perm + b * j->batch;
        char *dst = buf[n % 2];
        for (int64_t i = 0; i < j->batch; i++) {
            const char *src = j->base + (size_t)idx[i] * j->row_bytes;
            const char *next = i + 2 < j->batch ? j->base + (size_t)idx[i + 2] * j->row_bytes : NULL;
            char *d = dst + (size_t)i * j->row_bytes;
            j->copy(d, src, next, lines);
            memcpy(d + lines * 64, src + lines * 64, tail);
        }
    }
    free(buf[0]);
    free(buf[1]);
    return NULL;
}

static double now_(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s rows row_bytes batch threads epochs\n", argv[0]);
        return 2;
    }
    int64_t rows = atoll(argv[1]), batch = atoll(argv[3]), threads = atoll(argv[4]), epochs = atoll(argv[5]);
    size_t row_bytes = (size_t)atoll(argv[2]);
    if (rows < 1 || batch < 1 || threads < 1 || threads > 64 || epochs < 1 || row_bytes < 1) {
        fprintf(stderr, "arguments must be positive (at most 64 threads)\n");
        return 2;
    }
    char *base = malloc((size_t)rows * row_bytes);
    int64_t *perm = malloc((size_t)rows * sizeof *perm);
    if (!base || !perm) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    memset(base, 1, (size_t)rows * row_bytes);
    for (int64_t i = 0; i < rows; i++) perm[i] = i;
    copy_fn copy = copy_memcpy_;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) copy = copy_avx512_;
#endif
    uint64_t state = 88172645463325252ull;
    double best = 0;
    for (int64_t e = 0; e < epochs; e++) {
        for (int64_t i = rows - 1; i > 0; i--) { /* Fisher-Yates with xorshift64 */
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            int64_t k = (int64_t)(state % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[k], perm[k] = t;
        }
        pthread_t tid[64];
        job_ jobs[64];
        double start = now_();
        for (int64_t t = 0; t < threads; t++) {
            jobs[t] = (job_){base, perm, row_bytes, rows / batch, batch, t, threads, copy};
            if (pthread_create(&tid[t], NULL, gather_, &jobs[t])) {
                fprintf(stderr, "pthread_create failed\n");
                return 1;
            }
        }
        int failed = 0;
        for (int64_t t = 0; t < threads; t++) {
            void *rc;
            pthread_join(tid[t], &rc);
            failed |= rc != NULL;
        }
        if (failed) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        double rate = (double)(rows / batch * batch) / (now_() - start);
        if (rate > best) best = rate;
    }
    printf("%.0f\n", best);
    free(base);
    free(perm);
    return 0;
}
