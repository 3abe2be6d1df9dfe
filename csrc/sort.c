/* Stable merge sort of (key, index) pairs (see sort.h): insertion sort of
 * short runs, then bottom-up merges that alternate between the arrays and the
 * scratch, so that no pass copies back. A merge ending in order already (the
 * left run's last key no larger than the right run's first) is one copy,
 * which makes sorted and nearly sorted lines cheap. */
#include "sort.h"

#include <string.h>

#define RUN 32

static void insertion_(uint64_t *key, int64_t *index, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        uint64_t k = key[i];
        int64_t v = index[i], j = i;
        for (; j > 0 && key[j - 1] > k; j--) key[j] = key[j - 1], index[j] = index[j - 1];
        key[j] = k, index[j] = v;
    }
}

/* The sorted runs [lo, mid) and [mid, hi) of (sk, si) merged into (dk, di);
 * on equal keys the left run's pair goes first, which keeps the sort stable. */
static void merge_(const uint64_t *sk, const int64_t *si, uint64_t *dk, int64_t *di, int64_t lo, int64_t mid,
                   int64_t hi) {
    int64_t a = lo, b = mid, o = lo;
    if (mid < hi && sk[mid - 1] > sk[mid])
        while (a < mid && b < hi) {
            if (sk[b] < sk[a]) dk[o] = sk[b], di[o++] = si[b++];
            else dk[o] = sk[a], di[o++] = si[a++];
        }
    memcpy(dk + o, sk + a, (size_t)(mid - a) * sizeof *dk);
    memcpy(di + o, si + a, (size_t)(mid - a) * sizeof *di);
    o += mid - a;
    memcpy(dk + o, sk + b, (size_t)(hi - b) * sizeof *dk);
    memcpy(di + o, si + b, (size_t)(hi - b) * sizeof *di);
}

void ddpc_sort_pairs(uint64_t *key, int64_t *index, uint64_t *tmp_key, int64_t *tmp_index, int64_t n) {
    for (int64_t lo = 0; lo < n; lo += RUN) insertion_(key + lo, index + lo, n - lo < RUN ? n - lo : RUN);
    uint64_t *sk = key, *dk = tmp_key;
    int64_t *si = index, *di = tmp_index;
    for (int64_t width = RUN; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            merge_(sk, si, dk, di, lo, mid, hi);
        }
        uint64_t *tk = sk;
        int64_t *ti = si;
        sk = dk, si = di, dk = tk, di = ti;
    }
    if (sk != key) {
        memcpy(key, sk, (size_t)n * sizeof *key);
        memcpy(index, si, (size_t)n * sizeof *index);
    }
}
