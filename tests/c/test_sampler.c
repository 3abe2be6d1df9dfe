/* C-level tests of the data layer: sampler index math against PyTorch's
 * DistributedSampler rule, the weighted and balanced samplers, .npy header
 * parsing, and the threaded loader core. Built with AddressSanitizer by
 * tests/test_c_loader.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#include "device.h"
#include "loader.h"
#include "npy.h"
#include "sampler.h"


static int is_permutation_(const int64_t *p, int64_t n) {
    char *seen = calloc((size_t)n + 1, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]]) ok = 0;
        else seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_randperm_(void) {
    for (int64_t n = 0; n < 200; n += 7) {
        int64_t *a = malloc((size_t)(n + 1) * sizeof *a), *b = malloc((size_t)(n + 1) * sizeof *b);
        ddpc_randperm_fill(a, n, 42, 0);
        ddpc_randperm_fill(b, n, 42, 0);
        EXPECT(is_permutation_(a, n));
        EXPECT(n == 0 || memcmp(a, b, (size_t)n * sizeof *a) == 0);
        ddpc_randperm_fill(b, n, 43, 0);
        EXPECT(n < 10 || memcmp(a, b, (size_t)n * sizeof *a) != 0);
        free(a);
        free(b);
    }
}

/* PyTorch's documented rule, written out literally: pad by repeating the list
 * (or cut it), then take rank::R. */
static int64_t reference_(int64_t n, int64_t R, int64_t rank, int drop_last, const int64_t *perm, int64_t *out) {
    int64_t num = (drop_last && n % R) ? (int64_t)ceil((double)(n - R) / (double)R) : (n + R - 1) / R;
    int64_t total = num * R;
    int64_t *list = malloc((size_t)(total > n ? total : n) * sizeof *list + 8);
    for (int64_t i = 0; i < n; i++) list[i] = perm ? perm[i] : i;
    for (int64_t i = n; i < total; i++) list[i] = list[(i - n) % n];
    int64_t k = 0;
    for (int64_t i = rank; i < total; i += R) out[k++] = list[i];
    free(list);
    return k;
}

static void test_distributed_matches_reference_(void) {
    int64_t out[256], ref[256], perm[256];
    for (int64_t n = 1; n <= 40; n++)
        for (int64_t R = 1; R <= 9; R++)
            for (int drop = 0; drop < 2; drop++)
                for (int shuffle = 0; shuffle < 2; shuffle++) {
                    int64_t num, total, count = 0;
                    EXPECT(ddpc_dist_sampler_size(n, R, 0, drop, &num, &total) == DDPC_OK);
                    if (shuffle) ddpc_randperm_fill(perm, n, 7 + (uint64_t)n, 0);
                    for (int64_t r = 0; r < R; r++) {
                        EXPECT(ddpc_dist_sampler_indices(n, R, r, shuffle, 7 + (uint64_t)n, drop, out) == DDPC_OK);
                        int64_t k = reference_(n, R, r, drop, shuffle ? perm : NULL, ref);
                        EXPECT(k == num);
                        EXPECT(num == 0 || memcmp(out, ref, (size_t)num * sizeof *out) == 0);
                        count += k;
                    }
                    EXPECT(count == total);
                }
    int64_t num, total;
    EXPECT(ddpc_dist_sampler_size(10, 3, 3, 0, &num, &total) == DDPC_ERR_ARG);
    EXPECT(strstr(ddpc_last_error(), "rank 3 is out of range") != NULL);
    ddpc_clear_error();
    EXPECT(ddpc_dist_sampler_size(10, 0, 0, 0, &num, &total) == DDPC_ERR_ARG);
    ddpc_clear_error();
}

static void test_random_sampler_(void) {
    int64_t out[100], window[50];
    EXPECT(ddpc_random_sampler_indices(30, 100, 0, 5, 0, out) == DDPC_OK);
    for (int b = 0; b < 3; b++) EXPECT(is_permutation_(out + 30 * b, 30));
    EXPECT(memcmp(out, out + 30, 30 * sizeof *out) != 0);
    /* A window of the sequence is that part of the whole (here across two permutations). */
    EXPECT(ddpc_random_sampler_indices(30, 50, 0, 5, 17, window) == DDPC_OK);
    EXPECT(memcmp(window, out + 17, 50 * sizeof *out) == 0);
    EXPECT(ddpc_random_sampler_indices(30, 100, 1, 5, 0, out) == DDPC_OK);
    for (int i = 0; i < 100; i++) EXPECT(out[i] >= 0 && out[i] < 30);
    EXPECT(ddpc_random_sampler_indices(30, 50, 1, 5, 41, window) == DDPC_OK);
    EXPECT(memcmp(window, out + 41, 50 * sizeof *out) == 0);
    EXPECT(ddpc_random_sampler_indices(0, 1, 1, 5, 0, out) == DDPC_ERR_ARG);
    ddpc_clear_error();
    EXPECT(ddpc_random_sampler_indices(30, 1, 1, 5, -1, out) == DDPC_ERR_ARG);
    ddpc_clear_error();
}

static void test_weighted_sampler_(void) {
    enum { N = 4, DRAWS = 40000, R = 4 };
    double w[N] = {1, 0, 3, 4};
    int64_t *all = malloc(DRAWS * sizeof *all), *mine = malloc(DRAWS / R * sizeof *mine);
    long counts[N] = {0};
    EXPECT(ddpc_weighted_sampler_indices(w, N, DRAWS, 1, 1, 0, 9, all) == DDPC_OK);
    for (int r = 0; r < R; r++) {
        EXPECT(ddpc_weighted_sampler_indices(w, N, DRAWS, 1, R, r, 9, mine) == DDPC_OK);
        for (int j = 0; j < DRAWS / R; j++) {
            EXPECT(mine[j] == all[r + j * R]); /* the ranks' draws are the single-process draw */
            counts[mine[j]]++;
        }
    }
    EXPECT(counts[1] == 0);
    EXPECT(fabs(counts[0] / (double)DRAWS - 0.125) < 0.01);
    EXPECT(fabs(counts[3] / (double)DRAWS - 0.5) < 0.01);
    int64_t picked[3];
    EXPECT(ddpc_weighted_sampler_indices(w, N, 3, 0, 1, 0, 9, picked) == DDPC_OK);
    EXPECT(picked[0] != picked[1] && picked[1] != picked[2] && picked[0] != picked[2]);
    EXPECT(picked[0] != 1 && picked[1] != 1 && picked[2] != 1);
    EXPECT(ddpc_weighted_sampler_indices(w, N, 4, 0, 1, 0, 9, picked) == DDPC_ERR_ARG); /* only 3 non-zero */
    ddpc_clear_error();
    double bad[2] = {1, -1};
    EXPECT(ddpc_weighted_sampler_indices(bad, 2, 2, 1, 1, 0, 9, picked) == DDPC_ERR_ARG);
    ddpc_clear_error();
    free(all);
    free(mine);
}

static void test_balanced_sampler_(void) {
    enum { N = 1024, R = 4, B = 8 }; /* whole steps: 32 of 8 samples per rank */
    double costs[N];
    for (int i = 0; i < N; i++) costs[i] = (double)((i * 7919) % 97 + 1);
    int64_t *out[R];
    ddpc_balance_stats bal, naive;
    int64_t num, total;
    EXPECT(ddpc_dist_sampler_size(N, R, 0, 0, &num, &total) == DDPC_OK);
    int *seen = calloc(N, sizeof *seen);
    for (int r = 0; r < R; r++) {
        out[r] = malloc((size_t)num * sizeof *out[r]);
        EXPECT(ddpc_balanced_sampler_indices(costs, N, R, r, B, 1, 3, 0, out[r], &bal, &naive) == DDPC_OK);
        for (int64_t i = 0; i < num; i++) seen[out[r][i]]++;
    }
    for (int i = 0; i < N; i++) EXPECT(seen[i] == 1); /* no padding: each sample once */
    EXPECT(bal.worst_ratio >= 1.0 && bal.mean_ratio <= bal.worst_ratio);
    EXPECT(bal.mean_ratio < naive.mean_ratio);
    EXPECT(bal.worst_ratio < 1.1);
    /* Per step the ranks' loads match the reported ratio. */
    for (int64_t s = 0; s * B < num; s++) {
        double load[R] = {0}, max = 0, sum = 0;
        for (int r = 0; r < R; r++)
            for (int64_t j = s * B; j < num && j < (s + 1) * B; j++) load[r] += costs[out[r][j]];
        for (int r = 0; r < R; r++) {
            sum += load[r];
            if (load[r] > max) max = load[r];
        }
        EXPECT(max * R / sum <= bal.worst_ratio + 1e-12);
    }
    for (int r = 0; r < R; r++) free(out[r]);
    free(seen);
}

static void test_npy_headers_(void) {
    ddpc_npy_header h;
    char buf[256];
    const char *v1 = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
    size_t n = strlen(v1);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)n;
    buf[9] = 0;
    memcpy(buf + 10, v1, n);
    EXPECT(ddpc_npy_parse_header(buf, 10 + n, "a.npy", &h) == DDPC_OK);
    EXPECT(h.dtype == DDPC_FLOAT32 && h.ndim == 2 && h.shape[0] == 3 && h.shape[1] == 4);
    EXPECT(h.data_offset == 10 + n && h.nbytes == 48);

    const char *v2 = "{\"descr\":\"|u1\",\"shape\":(7,),\"fortran_order\":False}";
    n = strlen(v2);
    memcpy(buf, "\x93NUMPY\x03\x00", 8);
    buf[8] = (char)n;
    buf[9] = buf[10] = buf[11] = 0;
    memcpy(buf + 12, v2, n);
    EXPECT(ddpc_npy_parse_header(buf, 12 + n, "b.npy", &h) == DDPC_OK);
    EXPECT(h.dtype == DDPC_UINT8 && h.ndim == 1 && h.shape[0] == 7 && h.data_offset == 12 + n);

    /* Fortran order with one dimension longer than 1 lies as C order. */
    const char *v3 = "{'fortran_order': True, 'shape': (1, 5, 1), 'descr': '<i8', }";
    n = strlen(v3);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)n;
    buf[9] = 0;
    memcpy(buf + 10, v3, n);
    EXPECT(ddpc_npy_parse_header(buf, 10 + n, "f.npy", &h) == DDPC_OK);
    EXPECT(h.dtype == DDPC_INT64 && h.ndim == 3 && h.shape[1] == 5 && h.nbytes == 40);

    struct {
        const char *body;
        const char *message;
    } bad[] = {
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", "Fortran-order"},
        {"{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", "dtype '>i4' is not supported"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", "dtype '<i2' is not supported"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", "structured dtypes"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, x), }", "malformed"},
        {"{'descr': '<f4', 'shape': (3,), }", "missing"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", "malformed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = strlen(bad[i].body);
        memcpy(buf, "\x93NUMPY\x01\x00", 8);
        buf[8] = (char)n;
        buf[9] = 0;
        memcpy(buf + 10, bad[i].body, n);
        EXPECT(ddpc_npy_parse_header(buf, 10 + n, "c.npy", &h) != DDPC_OK);
        EXPECT(strstr(ddpc_last_error(), bad[i].message) != NULL);
        if (!strstr(ddpc_last_error(), bad[i].message)) fprintf(stderr, "  got: %s\n", ddpc_last_error());
        ddpc_clear_error();
    }
    EXPECT(ddpc_npy_parse_header("\x93NUMPZ\x01\x00\x00\x00", 10, "d.npy", &h) == DDPC_ERR_ARG);
    ddpc_clear_error();
    EXPECT(ddpc_npy_parse_header("\x93NUMPY\x04\x00\x00\x00", 10, "e.npy", &h) == DDPC_ERR_ARG);
    EXPECT(strstr(ddpc_last_error(), "version 4.0") != NULL);
    ddpc_clear_error();
    EXPECT(ddpc_npy_parse_header("\x93NUMPY\x01\x00\x50\x00{", 11, "f.npy", &h) == DDPC_ERR_ARG); /* truncated */
    ddpc_clear_error();
    ddpc_npy_file f;
    EXPECT(ddpc_npy_open("/nonexistent/x.npy", &f) == DDPC_ERR_SYS);
    ddpc_clear_error();
}

/* Runs the loader over `nb` batches of an index list and checks every row. */
static void run_loader_(int nthreads, int prefetch, int64_t stop_after) {
    enum { ROWS = 500, W = 37, N = 1234 };
    static float feats[ROWS][W];
    static int64_t labels[ROWS];
    for (int i = 0; i < ROWS; i++) {
        labels[i] = i;
        for (int j = 0; j < W; j++) feats[i][j] = (float)(i * 1000 + j);
    }
    int64_t *idx = malloc(N * sizeof *idx);
    for (int i = 0; i < N; i++) idx[i] = (i * 7) % ROWS;
    int64_t offsets[64];
    int nb = 0;
    for (int64_t o = 0; o < N; o += nb == 3 ? 0 : 13 + nb % 50) offsets[nb++] = o; /* uneven; batch 2 is empty */
    offsets[nb] = N;
    ddpc_loader_source src[2] = {
        {.kind = DDPC_SOURCE_MEMORY, .base = (const char *)feats, .row_bytes = W * sizeof(float), .rows = ROWS},
        {.kind = DDPC_SOURCE_MEMORY, .base = (const char *)labels, .row_bytes = sizeof(int64_t), .rows = ROWS},
    };
    ddpc_loader_config cfg = {src, 2, idx, N, offsets, nb, prefetch, nthreads, DDPC_CPU, 1 << 16};
    ddpc_loader *l = NULL;
    EXPECT(ddpc_loader_init(&cfg, &l) == DDPC_OK);
    if (!l) return;
    float *fx[64];
    int64_t *fy[64];
    for (int b = 0; b < nb && b < prefetch; b++) {
        int64_t rows = ddpc_loader_batch_rows(l, b);
        fx[b] = malloc((size_t)(rows + 1) * W * sizeof(float));
        fy[b] = malloc((size_t)(rows + 1) * sizeof(int64_t));
        void *dst[2] = {fx[b], fy[b]};
        EXPECT(ddpc_loader_submit(l, b, dst) == DDPC_OK);
    }
    int64_t b = 0;
    for (; b < nb && b < stop_after; b++) {
        EXPECT(ddpc_loader_wait(l, b) == DDPC_OK);
        for (int64_t i = 0; i < ddpc_loader_batch_rows(l, b); i++) {
            int64_t want = idx[offsets[b] + i];
            EXPECT(fy[b][i] == want);
            EXPECT(memcmp(fx[b] + i * W, feats[want], sizeof feats[want]) == 0);
        }
        free(fx[b]);
        free(fy[b]);
        int64_t next = b + prefetch;
        if (next < nb) {
            int64_t rows = ddpc_loader_batch_rows(l, next);
            fx[next] = malloc((size_t)(rows + 1) * W * sizeof(float));
            fy[next] = malloc((size_t)(rows + 1) * sizeof(int64_t));
            void *dst[2] = {fx[next], fy[next]};
            EXPECT(ddpc_loader_submit(l, next, dst) == DDPC_OK);
        }
    }
    ddpc_loader_free(l); /* mid-epoch when stop_after < nb: queued batches are dropped */
    for (; b < nb && b < stop_after + prefetch; b++) {
        free(fx[b]);
        free(fy[b]);
    }
    free(idx);
}

/* Rows read with pread from a file (the path for files bigger than the resident budget). */
static void test_loader_file_source_(void) {
    enum { ROWS = 300, W = 5, HEADER = 128 };
    char path[] = "/tmp/ddpc_test_rowsXXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    if (fd < 0) return;
    char header[HEADER] = {0};
    EXPECT(write(fd, header, HEADER) == HEADER);
    for (int i = 0; i < ROWS; i++) {
        double row[W];
        for (int j = 0; j < W; j++) row[j] = i + j / 10.0;
        EXPECT(write(fd, row, sizeof row) == (ssize_t)sizeof row);
    }
    int64_t idx[64], off[3] = {0, 40, 64};
    for (int i = 0; i < 64; i++) idx[i] = (i * 37) % ROWS;
    ddpc_loader_source src = {.kind = DDPC_SOURCE_FILE, .row_bytes = W * sizeof(double), .rows = ROWS, .fd = fd,
                              .file_offset = HEADER};
    ddpc_loader_config cfg = {&src, 1, idx, 64, off, 2, 2, 2, DDPC_CPU, 1};
    ddpc_loader *l = NULL;
    double out[2][64][W];
    EXPECT(ddpc_loader_init(&cfg, &l) == DDPC_OK);
    for (int b = 0; l && b < 2; b++) {
        void *dst[1] = {out[b]};
        EXPECT(ddpc_loader_submit(l, b, dst) == DDPC_OK);
    }
    for (int b = 0; l && b < 2; b++) {
        EXPECT(ddpc_loader_wait(l, b) == DDPC_OK);
        for (int64_t i = off[b]; i < off[b + 1]; i++)
            for (int j = 0; j < W; j++) EXPECT(out[b][i - off[b]][j] == idx[i] + j / 10.0);
    }
    ddpc_loader_free(l);
    /* A file shorter than its rows: the batch fails with a clear error, not garbage. */
    EXPECT(ftruncate(fd, HEADER + 10 * (off_t)sizeof(double) * W) == 0);
    EXPECT(ddpc_loader_init(&cfg, &l) == DDPC_OK);
    if (l) {
        void *dst[1] = {out[0]};
        EXPECT(ddpc_loader_submit(l, 0, dst) == DDPC_OK);
        EXPECT(ddpc_loader_wait(l, 0) == DDPC_ERR_SYS);
        EXPECT(strstr(ddpc_last_error(), "ended early") != NULL);
        ddpc_clear_error();
        ddpc_loader_free(l);
    }
    close(fd);
    unlink(path);
}

static void test_loader_(void) {
    run_loader_(1, 1, 1 << 30);
    run_loader_(3, 2, 1 << 30);
    run_loader_(2, 5, 1 << 30);
    run_loader_(4, 3, 4);

    /* Bad configurations fail at init with a clear message. */
    float x[4] = {0};
    int64_t y[3] = {0}, idx[2] = {0, 9}, off[2] = {0, 2};
    ddpc_loader_source src[2] = {{.base = (const char *)x, .row_bytes = 4, .rows = 4},
                                 {.base = (const char *)y, .row_bytes = 8, .rows = 3}};
    ddpc_loader_config cfg = {src, 2, idx, 2, off, 1, 2, 1, DDPC_CPU, 1};
    ddpc_loader *l = NULL;
    EXPECT(ddpc_loader_init(&cfg, &l) == DDPC_ERR_ARG && l == NULL);
    EXPECT(strstr(ddpc_last_error(), "different lengths") != NULL);
    ddpc_clear_error();
    cfg.nsources = 1;
    EXPECT(ddpc_loader_init(&cfg, &l) == DDPC_ERR_ARG);
    EXPECT(strstr(ddpc_last_error(), "index 9") != NULL);
    ddpc_clear_error();
    if (ddpc_cuda_device_count() == 0) {
        idx[1] = 1;
        cfg.device = 0;
        EXPECT(ddpc_loader_init(&cfg, &l) == DDPC_ERR_NOCUDA && l == NULL);
        ddpc_clear_error();
    }
}

int main(void) {
    test_randperm_();
    test_distributed_matches_reference_();
    test_random_sampler_();
    test_weighted_sampler_();
    test_balanced_sampler_();
    test_npy_headers_();
    test_loader_();
    test_loader_file_source_();
    return check_finish("data-layer");
}
