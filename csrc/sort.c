/* Stable merge sort of (key, index) pairs (see sort.h): insertion sort of
 * short runs, then bottom-up merges that alternate between the arrays and the
 * scratch, so that no pass copies back. A merge ending in order already (the
 * left run's last key no larger than the right run's first) is one copy,
 * which makes sorted and nearly sorted lines cheap.
 *
 * Selection of the k-th pair: quickselect on the (key, index) order, which is
 * strict because indices are distinct, so ties in key need no care. */
#include "sort.h"

#include <string.h>

#define RUN 32

/* by_index: equal keys ordered by index too, rather than kept as they came. */
static void insertion_(uint64_t *key, int64_t *index, int64_t n, int by_index) {
    for (int64_t i = 1; i < n; i++) {
        uint64_t k = key[i];
        int64_t v = index[i], j = i;
        for (; j > 0 && (key[j - 1] > k || (by_index && key[j - 1] == k && index[j - 1] > v)); j--)
            key[j] = key[j - 1], index[j] = index[j - 1];
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
    for (int64_t lo = 0; lo < n; lo += RUN) insertion_(key + lo, index + lo, n - lo < RUN ? n - lo : RUN, 0);
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

/* Whether pair a comes before pair b in the stable order. */
static int before_(const uint64_t *key, const int64_t *index, int64_t a, int64_t b) {
    return key[a] < key[b] || (key[a] == key[b] && index[a] < index[b]);
}

static void swap_(uint64_t *key, int64_t *index, int64_t a, int64_t b) {
    uint64_t k = key[a];
    int64_t v = index[a];
    key[a] = key[b], index[a] = index[b], key[b] = k, index[b] = v;
}

void ddpc_select_pair(uint64_t *key, int64_t *index, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n;
    uint64_t state = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    while (hi - lo > RUN) {
        /* The median of three pairs drawn at random, parked at hi - 1 with the
         * smallest at lo: random draws keep every input in expected linear
         * time, where fixed positions have inputs that make it quadratic. */
        int64_t draw[3];
        for (int d = 0; d < 3; d++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            draw[d] = lo + (int64_t)(state % (uint64_t)(hi - lo));
        }
        int64_t last = hi - 1;
        swap_(key, index, lo, draw[0]);
        swap_(key, index, last, draw[1]);
        if (before_(key, index, last, lo)) swap_(key, index, last, lo);
        int64_t mid = draw[2] == lo || draw[2] == last ? lo + (hi - lo) / 2 : draw[2];
        if (before_(key, index, mid, lo)) swap_(key, index, mid, lo);
        if (before_(key, index, mid, last)) swap_(key, index, mid, last);
        /* Hoare's scan from both ends: pairs before the pivot to its left. */
        int64_t i = lo - 1, j = last;
        for (;;) {
            while (before_(key, index, ++i, last)) {}
            while (j > lo && before_(key, index, last, --j)) {}
            if (i >= j) break;
            swap_(key, index, i, j);
        }
        swap_(key, index, i, last);
        if (k == i) return;
        if (k < i) hi = i;
        else lo = i + 1;
    }
    insertion_(key + lo, index + lo, hi - lo, 1);
}
