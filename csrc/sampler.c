/* Sampler index math: distributed, random, weighted and cost-balanced index
 * lists, all driven by ddpc's counter-based generator. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* A uniform integer in [0, bound) from 64 random bits (multiply-shift: the
 * bias is below bound / 2^64, far under anything a sampler can observe). */
static inline int64_t below_(uint64_t bits, uint64_t bound) {
    return (int64_t)(((unsigned __int128)bits * bound) >> 64);
}

void ddpc_randperm_fill(int64_t *p, int64_t n, uint64_t seed, uint64_t offset) {
    for (int64_t i = 0; i < n; i++) p[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = below_(ddpc_random_bits(seed, offset + (uint64_t)i), (uint64_t)i + 1);
        int64_t tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
}

static ddpc_status check_group_(int64_t n, int64_t num_replicas, int64_t rank) {
    if (n < 0) return DDPC_ERROR(DDPC_ERR_ARG, "data set length must be >= 0, got %lld", (long long)n);
    if (num_replicas < 1)
        return DDPC_ERROR(DDPC_ERR_ARG, "num_replicas must be >= 1, got %lld", (long long)num_replicas);
    if (rank < 0 || rank >= num_replicas)
        return DDPC_ERROR(DDPC_ERR_ARG, "rank %lld is out of range for num_replicas %lld (expected 0..%lld)",
                          (long long)rank, (long long)num_replicas, (long long)num_replicas - 1);
    return DDPC_OK;
}

static ddpc_status alloc_i64_(int64_t n, int64_t **out) {
    *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!*out) return DDPC_ERROR(DDPC_ERR_OOM, "could not allocate an index list of %lld entries", (long long)n);
    return DDPC_OK;
}

ddpc_status ddpc_dist_sampler_size(int64_t n, int64_t num_replicas, int64_t rank, int drop_last, int64_t *num_samples,
                                   int64_t *total) {
    CHECK(check_group_(n, num_replicas, rank));
    /* PyTorch: ceil((n - R) / R) with drop_last and a remainder, which is floor(n / R). */
    *num_samples = drop_last ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
    *total = *num_samples * num_replicas;
    return DDPC_OK;
}

ddpc_status ddpc_dist_sampler_indices(int64_t n, int64_t num_replicas, int64_t rank, int shuffle, uint64_t seed,
                                      int drop_last, int64_t *out) {
    int64_t num_samples, total, *perm = NULL;
    CHECK(ddpc_dist_sampler_size(n, num_replicas, rank, drop_last, &num_samples, &total));
    if (num_samples == 0) return DDPC_OK;
    if (shuffle) {
        CHECK(alloc_i64_(n, &perm));
        ddpc_randperm_fill(perm, n, seed, 0);
    }
    /* Position k >= n of the padded list repeats position k mod n. */
    for (int64_t i = 0; i < num_samples; i++) {
        int64_t k = rank + i * num_replicas;
        if (k >= n) k %= n; /* only in the padding: no division per index */
        out[i] = perm ? perm[k] : k;
    }
    free(perm);
    return DDPC_OK;
}

ddpc_status ddpc_random_sampler_indices(int64_t n, int64_t num_samples, int replacement, uint64_t seed, int64_t first,
                                        int64_t *out) {
    if (n < 1 || num_samples < 0 || first < 0 || num_samples > INT64_MAX - first)
        return DDPC_ERROR(DDPC_ERR_ARG,
                          "random sampler: need n >= 1, num_samples >= 0 and first >= 0 (got %lld, %lld, %lld)",
                          (long long)n, (long long)num_samples, (long long)first);
    if (replacement) {
        for (int64_t k = 0; k < num_samples; k++)
            out[k] = below_(ddpc_random_bits(seed, (uint64_t)(first + k)), (uint64_t)n);
        return DDPC_OK;
    }
    int64_t *perm;
    CHECK(alloc_i64_(n, &perm));
    /* Block b is a fresh permutation drawn from counters b*n + 1 .. b*n + n-1. */
    for (int64_t i = 0; i < num_samples;) {
        int64_t start = (first + i) / n * n, off = first + i - start;
        ddpc_randperm_fill(perm, n, seed, (uint64_t)start);
        int64_t m = n - off < num_samples - i ? n - off : num_samples - i;
        memcpy(out + i, perm + off, (size_t)m * sizeof *perm);
        i += m;
    }
    free(perm);
    return DDPC_OK;
}

static ddpc_status check_weights_(const double *w, int64_t n, const char *what, int64_t *positive, double *sum) {
    *positive = 0;
    *sum = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(w[i]) || w[i] < 0)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s[%lld] = %g; every %s must be finite and >= 0", what, (long long)i, w[i],
                              what);
        *positive += w[i] > 0;
        *sum += w[i];
    }
    return DDPC_OK;
}

typedef struct {
    double key;
    int64_t index;
} keyed_;

/* Descending key, ties by ascending index: a total order, so qsort's result
 * does not depend on the C library. */
static int keyed_desc_(const void *a, const void *b) {
    const keyed_ *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

ddpc_status ddpc_weighted_sampler_indices(const double *weights, int64_t n, int64_t total, int replacement,
                                          int64_t num_replicas, int64_t rank, uint64_t seed, int64_t *out) {
    int64_t positive;
    double sum;
    CHECK(check_group_(n, num_replicas, rank));
    CHECK(check_weights_(weights, n, "weight", &positive, &sum));
    if (positive == 0) return DDPC_ERROR(DDPC_ERR_ARG, "weighted sampler: every weight is zero");
    if (total < 0 || total % num_replicas != 0)
        return DDPC_ERROR(DDPC_ERR_ARG, "weighted sampler: total draws %lld must be a multiple of %lld",
                          (long long)total, (long long)num_replicas);
    if (!replacement && total > positive)
        return DDPC_ERROR(DDPC_ERR_ARG,
                          "weighted sampler: %lld draws without replacement, but only %lld samples have a weight > 0",
                          (long long)total, (long long)positive);
    int64_t per_rank = total / num_replicas;
    if (replacement) {
        double *cum = malloc((size_t)n * sizeof *cum);
        if (!cum) return DDPC_ERROR(DDPC_ERR_OOM, "could not allocate %lld cumulative weights", (long long)n);
        double acc = 0;
        int64_t last_positive = 0;
        for (int64_t i = 0; i < n; i++) {
            acc += weights[i];
            cum[i] = acc;
            if (weights[i] > 0) last_positive = i;
        }
        for (int64_t j = 0; j < per_rank; j++) {
            double x = ddpc_uniform_f64(ddpc_random_bits(seed, (uint64_t)(rank + j * num_replicas))) * acc;
            int64_t lo = 0, hi = n; /* first i with cum[i] > x */
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (cum[mid] > x) hi = mid;
                else lo = mid + 1;
            }
            out[j] = lo < n ? lo : last_positive;
        }
        free(cum);
        return DDPC_OK;
    }
    keyed_ *keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return DDPC_ERROR(DDPC_ERR_OOM, "could not allocate %lld sort keys", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        /* u in (0, 1]: log(u) is finite, and zero weights sort last. */
        double u = 1.0 - ddpc_uniform_f64(ddpc_random_bits(seed, (uint64_t)i));
        keys[i].key = weights[i] > 0 ? log(u) / weights[i] : -INFINITY;
        keys[i].index = i;
    }
    qsort(keys, (size_t)n, sizeof *keys, keyed_desc_);
    for (int64_t j = 0; j < per_rank; j++) out[j] = keys[rank + j * num_replicas].index;
    free(keys);
    return DDPC_OK;
}

/* Ascending load, ties by rank: a total order. */
static int by_load_(const void *a, const void *b, void *loads) {
    const double *load = loads;
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    if (load[x] != load[y]) return load[x] < load[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void balance_add_(ddpc_balance_stats *s, const double *load, int64_t num_replicas) {
    double max = 0, sum = 0;
    for (int64_t r = 0; r < num_replicas; r++) {
        sum += load[r];
        if (load[r] > max) max = load[r];
    }
    double ratio = sum > 0 ? max * (double)num_replicas / sum : 1.0;
    s->mean_ratio += ratio;
    if (ratio > s->worst_ratio) s->worst_ratio = ratio;
}

ddpc_status ddpc_balanced_sampler_indices(const double *costs, int64_t n, int64_t num_replicas, int64_t rank,
                                          int64_t batch_size, int shuffle, uint64_t seed, int drop_last, int64_t *out,
                                          ddpc_balance_stats *balanced, ddpc_balance_stats *naive) {
    int64_t num_samples, total, positive;
    double sum;
    ddpc_status st = DDPC_OK;
    CHECK(ddpc_dist_sampler_size(n, num_replicas, rank, drop_last, &num_samples, &total));
    CHECK(check_weights_(costs, n, "cost", &positive, &sum));
    if (batch_size < 1) return DDPC_ERROR(DDPC_ERR_ARG, "batch_size must be >= 1, got %lld", (long long)batch_size);
    if (batch_size > num_samples) batch_size = num_samples > 0 ? num_samples : 1; /* one step holds everything */
    ddpc_balance_stats bal = {0, 0}, nai = {0, 0};
    int64_t steps = (num_samples + batch_size - 1) / batch_size;
    int64_t *perm = NULL, *order = NULL;
    double *load = NULL, *naive_load = NULL;
    keyed_ *step = NULL;
    if (shuffle) CHECKGOTO(alloc_i64_(n, &perm), st, out_);
    CHECKGOTO(alloc_i64_(num_replicas, &order), st, out_);
    load = calloc((size_t)num_replicas, sizeof *load);
    naive_load = calloc((size_t)num_replicas, sizeof *naive_load);
    step = malloc((size_t)(batch_size * num_replicas) * sizeof *step);
    if (!load || !naive_load || !step) {
        st = DDPC_ERROR(DDPC_ERR_OOM, "could not allocate the balancing tables");
        goto out_;
    }
    if (perm) ddpc_randperm_fill(perm, n, seed, 0);
    int64_t produced = 0;
    for (int64_t s = 0; s < steps; s++) {
        /* Step s is what DistributedSampler gives each rank for this step: list
         * positions (s * batch_size + j) * R + r of the padded or cut list. */
        int64_t per_rank = num_samples - s * batch_size < batch_size ? num_samples - s * batch_size : batch_size;
        int64_t m = 0;
        for (int64_t r = 0; r < num_replicas; r++) {
            load[r] = naive_load[r] = 0;
            for (int64_t j = 0; j < per_rank; j++) {
                int64_t k = ((s * batch_size + j) * num_replicas + r) % n;
                int64_t idx = perm ? perm[k] : k;
                naive_load[r] += costs[idx];
                step[m].key = costs[idx];
                step[m].index = idx;
                m++;
            }
        }
        /* Longest processing time first, in rounds of R: the heaviest sample of
         * a round goes to the least loaded rank, the next to the next least, so
         * every rank gets exactly per_rank samples. */
        qsort(step, (size_t)m, sizeof *step, keyed_desc_);
        for (int64_t k = 0; k < m; k += num_replicas) {
            for (int64_t r = 0; r < num_replicas; r++) order[r] = r;
            qsort_r(order, (size_t)num_replicas, sizeof *order, by_load_, load);
            for (int64_t j = 0; j < num_replicas; j++) {
                int64_t r = order[j];
                load[r] += step[k + j].key;
                if (r == rank) out[produced++] = step[k + j].index;
            }
        }
        balance_add_(&bal, load, num_replicas);
        balance_add_(&nai, naive_load, num_replicas);
    }
    if (steps > 0) {
        bal.mean_ratio /= (double)steps;
        nai.mean_ratio /= (double)steps;
    }
    if (balanced) *balanced = bal;
    if (naive) *naive = nai;
out_:
    free(perm);
    free(order);
    free(load);
    free(naive_load);
    free(step);
    return st;
}
