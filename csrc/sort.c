/* Stable merge sort of (key, index) pairs (see sort.h): insertion sort of
 * short runs, then bottom-up merges that alternate between the arrays and the
 * scratch, so that no pass copies back. A merge ending in order already (the
 * left run's last key no larger than the right run's first) is one copy,
 * which makes sorted and nearly sorted lines cheap.
 *
 * Selection of the k-th pair: quickselect of the k-th key, out of place with
 * three-way partitions, then the position of the right one among the keys
 * equal to it, which the (key, position) order takes in position order. */
#include "sort.h"

#include <string.h>

#include "fastmath.h" /* DDPC_ROW_TARGETS */

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

/* The place of the key of rank k in (key, place) order among n <= RUN keys,
 * by counting for each key the ones before it: loops without branches that
 * the compiler vectorises, where sorting so few would mispredict a branch
 * per key. */
static DDPC_ROW_TARGETS int64_t rank_select_(const uint64_t *v, int64_t n, int64_t k) {
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = v[i];
        int64_t rank = 0;
        for (int64_t j = 0; j < i; j++) rank += v[j] <= x;
        for (int64_t j = i + 1; j < n; j++) rank += v[j] < x;
        at = rank == k ? i : at;
    }
    return at;
}

int64_t ddpc_select_position(const uint64_t *key, int64_t n, int64_t k, uint64_t *scratch) {
    uint64_t *low = scratch, *high = scratch + n;
    const uint64_t *src = key;
    int64_t len = n, rank_among_equals = -1;
    uint64_t target = 0, state = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    while (len > RUN) {
        /* The pivot: the median of three keys drawn at random (random draws
         * keep every input in expected linear time, where fixed positions
         * have inputs that make it quadratic). */
        uint64_t drawn[3];
        for (int d = 0; d < 3; d++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            drawn[d] = src[state % (uint64_t)len];
        }
        uint64_t a = drawn[0], b = drawn[1], c = drawn[2];
        uint64_t pivot = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
        /* Keys below and above the pivot copied out to their own arrays with
         * no branch on the comparison, which on random data a branch would
         * mispredict half the time; each side writes behind where it reads
         * when it is also the source, so one pass needs no more room. */
        int64_t below = 0, above = 0;
        for (int64_t i = 0; i < len; i++) {
            uint64_t x = src[i];
            low[below] = x, high[above] = x;
            below += x < pivot, above += x > pivot;
        }
        if (k < below) {
            src = low, len = below;
        } else if (k >= len - above) {
            k -= len - above, src = high, len = above;
        } else {
            target = pivot, rank_among_equals = k - below;
            break;
        }
    }
    if (rank_among_equals < 0) {
        int64_t at = rank_select_(src, len, k);
        if (src == key) return at; /* a short line: places are positions */
        target = src[at];
        int64_t less = 0;
        for (int64_t j = 0; j < len; j++) less += src[j] < target;
        rank_among_equals = k - less;
    }
    /* Among equal keys the pair order is the position order. */
    for (int64_t s = 0;; s++)
        if (key[s] == target && rank_among_equals-- == 0) return s;
}
