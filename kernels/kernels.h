/* Host-callable launchers of the CUDA kernels in kernels/, declared in
 * plain C so csrc/ compiles with cc. Each returns a cudaError_t as an int
 * (0 on success) so the caller's CUDACHECK records file and line. `stream` is
 * a cudaStream_t. dtype codes are ddpc_dtype values (csrc/dtype.h). The
 * kernels that take indices skip each one out of its range and report it
 * through their `check` (index_check.h); the host ops refuse such indices. */
#ifndef DDPC_KERNELS_H
#define DDPC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DDPC_HD __host__ __device__
#else
#define DDPC_HD
#endif

#include "grid_sample.h"
#include "index_check.h"
#include "window.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The counter-based generator behind ddpc's random numbers: 64 random bits for
 * element `counter` of stream `seed` (splitmix64's finaliser over a key mixing
 * both). Host and device share this function, so a seed gives the same numbers
 * on every device kind. The mapping to distributions is documented in random.cu. */
static inline DDPC_HD uint64_t ddpc_random_bits(uint64_t seed, uint64_t counter) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 (float) or 53 (double) random bits. */
static inline DDPC_HD float ddpc_uniform_f32(uint64_t bits) { return (float)(bits >> 40) * (1.0f / 16777216.0f); }
static inline DDPC_HD double ddpc_uniform_f64(uint64_t bits) { return (double)(bits >> 11) * (1.0 / 9007199254740992.0); }
/* Uniform in [0, 1) with `m` random bits (m <= 53): 11 for float16 and 8 for
 * bfloat16, as many as their significands hold, so that no draw rounds up to 1. */
static inline DDPC_HD double ddpc_uniform_bits(uint64_t bits, int m) {
    return (double)(bits >> (64 - m)) / (double)(1ull << m);
}

/* Sort keys: an unsigned integer of the element's width that orders as the
 * elements do, from the element's bits (zero-extended). Floats order every
 * NaN last and equal to each other, and -0 equal to +0, as PyTorch's sort;
 * signed integers flip their sign bit. dtype is a ddpc_dtype code: float32,
 * float64, float16, bfloat16, int32, int64, uint8. A descending sort inverts
 * every bit of the key (within the width), which keeps equal keys equal, so a
 * stable ascending sort of the inverted keys keeps ties in index order. */
static inline DDPC_HD uint64_t ddpc_sort_key(int dtype, uint64_t bits) {
    uint64_t sign, inf;
    switch (dtype) {
    case 0: sign = 1ull << 31, inf = 0x7f800000ull; break;
    case 1: sign = 1ull << 63, inf = 0x7ff0000000000000ull; break;
    case 2: sign = 1ull << 15, inf = 0x7c00ull; break;
    case 3: sign = 1ull << 15, inf = 0x7f80ull; break;
    case 4: return bits ^ (1ull << 31);
    case 5: return bits ^ (1ull << 63);
    default: return bits;
    }
    uint64_t all = (sign << 1) - 1, magnitude = bits & (sign - 1);
    if (magnitude > inf) return all; /* NaN, whatever its sign and payload */
    if (magnitude == 0) return sign; /* both zeros */
    return bits & sign ? ~bits & all : bits | sign;
}

/* Elements as unsigned words of their width (1, 2, 4 or 8 bytes), zero-extended:
 * how the ops that only order or move elements serve every dtype with one loop. */
static inline DDPC_HD uint64_t ddpc_load_word(const void *p, int width, int64_t at) {
    switch (width) {
    case 1: return ((const uint8_t *)p)[at];
    case 2: return ((const uint16_t *)p)[at];
    case 4: return ((const uint32_t *)p)[at];
    default: return ((const uint64_t *)p)[at];
    }
}

static inline DDPC_HD void ddpc_store_word(void *p, int width, int64_t at, uint64_t w) {
    switch (width) {
    case 1: ((uint8_t *)p)[at] = (uint8_t)w; break;
    case 2: ((uint16_t *)p)[at] = (uint16_t)w; break;
    case 4: ((uint32_t *)p)[at] = (uint32_t)w; break;
    default: ((uint64_t *)p)[at] = w; break;
    }
}

/* Whether a sort key is a float dtype's NaN: the one key with every bit of
 * the width set (no other float element maps there; integers have no NaN). */
static inline DDPC_HD int ddpc_sort_key_is_nan(int dtype, uint64_t key) {
    switch (dtype) {
    case 0: return key == 0xffffffffull;
    case 1: return key == ~0ull;
    case 2: case 3: return key == 0xffffull;
    default: return 0;
    }
}

/* PyTorch's searchsorted in one sorted line of `len` elements of `width`
 * bytes (element j at line[sorter ? sorter[j] : j]): the first position
 * whose element is >= the value (> with `right`). As PyTorch's binary
 * search, it compares with < and <=, which are false for a NaN on either
 * side, so a NaN value lands at the end and a NaN in the line counts as
 * smaller than the value. Sorter entries outside [0, len) are clamped (the
 * host op refuses them, the kernel reports them). */
static inline DDPC_HD int64_t ddpc_search_sorted(const void *line, const int64_t *sorter, int dtype, int width,
                                                 int64_t len, uint64_t value, int right) {
    uint64_t key = ddpc_sort_key(dtype, value);
    int value_nan = ddpc_sort_key_is_nan(dtype, key);
    int64_t lo = 0, hi = len;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2, at = sorter ? sorter[mid] : mid;
        at = at < 0 ? 0 : at >= len ? len - 1 : at;
        uint64_t k = ddpc_sort_key(dtype, ddpc_load_word(line, width, at));
        if (value_nan || ddpc_sort_key_is_nan(dtype, k) || (right ? k <= key : k < key)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* One step of PyTorch's cummax (cummin): whether the element of sort key
 * `key` becomes the running extreme `best`. A NaN always does and then stays
 * (until the next NaN); ties do, so the index is the latest of equal values. */
static inline DDPC_HD int ddpc_cum_extreme_takes(int dtype, uint64_t key, uint64_t best, int want_max) {
    if (ddpc_sort_key_is_nan(dtype, key)) return 1;
    if (ddpc_sort_key_is_nan(dtype, best)) return 0;
    return want_max ? key >= best : key <= best;
}

/* gcd(a, b), or lcm(a, b) with want_lcm, as PyTorch's: on the magnitudes as
 * unsigned 64-bit words, so that no step overflows (|INT64_MIN| included);
 * lcm = |a| / gcd * |b|, wrapping. The caller narrows the result to its dtype. */
static inline DDPC_HD uint64_t ddpc_gcd_lcm(int64_t a, int64_t b, int want_lcm) {
    uint64_t x = a < 0 ? 0 - (uint64_t)a : (uint64_t)a, y = b < 0 ? 0 - (uint64_t)b : (uint64_t)b;
    uint64_t g = y, r = x;
    while (r != 0) {
        uint64_t t = g % r;
        g = r, r = t;
    }
    if (!want_lcm) return g;
    return g == 0 ? 0 : x / g * y;
}

int ddpc_k_fill(void *dst, int dtype, int64_t n, double value, void *stream);
int ddpc_k_cast(void *dst, int dst_dtype, const void *src, int src_dtype, int64_t n, void *stream);
/* kernels/complex.cu: fill with re + im i, casts where either side is complex
 * (a complex source gives its real part), and the ops of csrc/ops_complex.h
 * (kind: 0 complex out, 1 real out, 2 uint8 mask; b NULL: the scalar re + im i). */
int ddpc_k_complex_fill(void *dst, int dtype, int64_t n, double re, double im, void *stream);
int ddpc_k_complex_cast(void *dst, int dst_dtype, const void *src, int src_dtype, int64_t n, void *stream);
int ddpc_k_complex(int unary, int op, int kind, void *out, const void *a, const void *b, int dtype, double re,
                   double im, double p, int64_t n, void *stream);
int ddpc_k_binary(int op, void *out, const void *a, const void *b, int dtype, int64_t n, void *stream);
int ddpc_k_scalar(int op, void *out, const void *a, double s, int dtype, int64_t n, void *stream);
/* The sum of a's n elements into out (one element: float dtypes keep theirs,
 * integers give int64), over the whole GPU; `scratch` is device memory of
 * the size ddpc_k_sum_scratch gives (sized on the device that runs it). */
int ddpc_k_sum_scratch(int64_t n, int dtype, size_t *bytes);
int ddpc_k_sum(void *out, const void *a, int dtype, int64_t n, void *scratch, size_t bytes, void *stream);
int ddpc_k_random(void *dst, int dtype, int kind, uint64_t seed, uint64_t offset, double a, double b, double cap,
                  int64_t n, void *stream);

/* nn ops (kernels/nn.cu): float32 and float64; binary_rows also takes the integer
 * types, sum_dim int64, and transpose every dtype. */
int ddpc_k_rows_fill(void *out, const void *row, int dtype, int64_t rows, int64_t n, void *stream);
int ddpc_k_binary_rows(int op, void *out, const void *a, const void *row, int dtype, int64_t numel, int64_t n,
                       void *stream);
/* Strides (in elements, 0 along broadcast dims) of a and b, and of where's
 * condition c, over out's dims (8: DDPC_MAX_NDIM of csrc/buffer.h, which
 * ops_nn.c checks). */
typedef struct {
    int ndim;
    int64_t shape[8], sa[8], sb[8], sc[8];
} ddpc_k_bcast;
int ddpc_k_binary_broadcast(int op, void *out, const void *a, const void *b, int dtype, int64_t n, ddpc_k_bcast geo,
                            void *stream);
/* out = kernels/special_binary.h's op(a, b) over geo (float dtypes). */
int ddpc_k_special_binary(int op, void *out, const void *a, const void *b, int dtype, int64_t n, ddpc_k_bcast geo,
                          void *stream);
/* out = cond (uint8) ? a : b over geo, as words of `size` bytes (any dtype). */
int ddpc_k_where(void *out, const void *cond, const void *a, const void *b, int size, int64_t n, ddpc_k_bcast geo,
                 void *stream);
int ddpc_k_sum_dim(void *out, const void *a, int dtype, int64_t outer, int64_t len, int64_t inner, void *stream);
int ddpc_k_extreme_dim(void *values, void *indices, const void *a, int dtype, int64_t outer, int64_t len,
                       int64_t inner, int want_max, void *stream);
/* rows[k] = table[idx[k]] for the k indices into the table's n rows, or the
 * reverse when `put`. */
int ddpc_k_move_rows(void *rows, void *table, const void *idx, int64_t k, int64_t n, size_t row_bytes, int put,
                     ddpc_k_index_check check, void *stream);
int ddpc_k_index_add_rows(void *gtable, const void *g, const void *idx, int dtype, int64_t k, int64_t n, int64_t d,
                          ddpc_k_index_check check, void *stream);
int ddpc_k_layer_norm(void *y, void *mean, void *rstd, const void *x, const void *w, const void *b, int dtype,
                      int64_t rows, int64_t d, double eps, void *stream);
int ddpc_k_layer_norm_backward(void *gx, void *gw, void *gb, const void *gy, const void *x, const void *mean,
                               const void *rstd, const void *w, int dtype, int64_t rows, int64_t d, void *stream);
/* One recurrent cell step over n rows of H units (kernels/rnn.cu), operands as ddpc_op_lstm_cell's and
 * ddpc_op_gru_cell's and their backward's (csrc/ops_rnn.h). */
int ddpc_k_lstm_cell(void *h, void *c, void *gates, const void *hidden, const void *c_prev, int dtype, int64_t n,
                     int64_t H, void *stream);
int ddpc_k_lstm_cell_backward(void *ggates, void *gc, const void *gh, const void *gates, const void *c_prev,
                              const void *c, int dtype, int64_t n, int64_t H, void *stream);
int ddpc_k_gru_cell(void *h, void *gi, const void *gh, const void *h_prev, int dtype, int64_t n, int64_t H,
                    void *stream);
int ddpc_k_gru_cell_backward(void *ggi, void *ggh, void *gh_prev, const void *grad, const void *gates, const void *gh,
                             const void *h_prev, int dtype, int64_t n, int64_t H, void *stream);
int ddpc_k_put_dim(void *out, const void *g, const void *indices, int dtype, int64_t outer, int64_t len,
                   int64_t inner, ddpc_k_index_check check, void *stream);
int ddpc_k_transpose(void *out, const void *a, int dtype, int64_t rows, int64_t cols, void *stream);
/* dst (sa strides) = src (sb strides) over geo's shape, as words of `size` bytes. */
int ddpc_k_strided_copy(void *dst, const void *src, int size, int64_t n, ddpc_k_bcast geo, void *stream);
/* Along a dim (kernels/dim.cu). fold_dim: float32, float64 and int64 (not for
 * logsumexp), op and flags as ddpc_op_fold_dim's. */
int ddpc_k_fold_dim(void *out, const void *a, int dtype, int64_t outer, int64_t len, int64_t inner, int op,
                    int flags, void *stream);
/* Over the n elements of index (geo: its shape; sa the strides of `big`, sb
 * those of `small`), with ob the offset in big at index[k] along dim and os
 * the offset in small: GATHER small[os] = big[ob] (any dtype), SCATTER
 * big[ob] = small[os] (any dtype), SCATTER_ADD big[ob] += small[os] (float32,
 * float64, int64). */
enum { DDPC_K_GATHER = 0, DDPC_K_SCATTER, DDPC_K_SCATTER_ADD };
int ddpc_k_index_dim(void *big, void *small, const int64_t *index, int dtype, int64_t n, ddpc_k_bcast geo, int dim,
                     int64_t len, int mode, ddpc_k_index_check check, void *stream);
/* big[ob] = op(big[ob], small[os]) over index as above, op a ddpc_scatter_reduce_op
 * (csrc/ops_dim.h: 0 product, 1 max, 2 min); float32, float64, int32, int64. */
int ddpc_k_scatter_reduce_dim(void *big, const void *small, const int64_t *index, int dtype, int64_t n,
                              ddpc_k_bcast geo, int dim, int64_t len, int op, ddpc_k_index_check check, void *stream);
/* Stable sort along a dim (kernels/sort.cu), every dtype: indices (int64) and,
 * unless NULL, values as ddpc_op_sort_dim describes them. `scratch` is device
 * memory of the size ddpc_k_sort_scratch gives for that many lines. */
int ddpc_k_sort_scratch(int64_t lines, int64_t len, int dtype, size_t *bytes);
int ddpc_k_sort_dim(int64_t *indices, void *values, const void *a, int dtype, int64_t outer, int64_t len,
                    int64_t inner, int descending, void *scratch, size_t bytes, void *stream);
/* Binary search and running extremes (kernels/search.cu), every dtype.
 * searchsorted: out[k] (int64, or int32 with out_int32) = ddpc_search_sorted
 * of values[k] in line k / per_line of `sorted` (lines of `len` elements;
 * one line for all values when `shared`), sorter NULL or its lines alike.
 * cum_extreme: running max (min) along a dim with its index, as
 * ddpc_cum_extreme_takes decides. */
int ddpc_k_searchsorted(void *out, int out_int32, const void *sorted, const int64_t *sorter, const void *values,
                        int dtype, int64_t n, int64_t per_line, int64_t len, int shared, int right,
                        ddpc_k_index_check check, void *stream);
int ddpc_k_cum_extreme(void *values, int64_t *indices, const void *a, int dtype, int64_t outer, int64_t len,
                       int64_t inner, int want_max, void *stream);
/* gcd or lcm elementwise (kernels/intmath.cu): uint8, int32, int64. */
int ddpc_k_gcd(void *out, const void *a, const void *b, int dtype, int64_t n, int want_lcm, void *stream);
/* The n elements of a uint8 mask (kernels/select.cu). COUNT: out (one int64)
 * = how many are non-zero. FLAT and COORDS: the positions of the non-zero
 * ones, in order, as flat indices or as coordinates over geo's shape
 * (geo.ndim per row); only the first `rows` positions are written. `scratch`
 * is device memory of the size ddpc_k_nonzero_scratch gives for the mode
 * (8 bytes per element and CUB's storage for the positions, CUB's storage
 * alone for the count). */
enum { DDPC_K_NONZERO_COUNT = 0, DDPC_K_NONZERO_FLAT, DDPC_K_NONZERO_COORDS };
int ddpc_k_nonzero_scratch(int64_t n, int mode, size_t *bytes);
int ddpc_k_nonzero(int64_t *out, const uint8_t *mask, int64_t n, int64_t rows, int mode, ddpc_k_bcast geo,
                   void *scratch, size_t bytes, void *stream);
/* NaN, +inf and -inf replaced by the three values (float dtypes). */
int ddpc_k_nan_to_num(void *out, const void *x, int dtype, int64_t n, double nan, double posinf, double neginf,
                      void *stream);
int ddpc_k_unary(int op, void *out, const void *x, double p, double q, int dtype, int64_t n, void *stream);
int ddpc_k_unary_backward(int op, void *gx, const void *gy, const void *saved, double p, double q, int dtype, int64_t n,
                          void *stream);
int ddpc_k_dropout(void *out, const void *x, double p, uint64_t seed, uint64_t offset, int dtype, int64_t n,
                   void *stream);

/* Softmax and losses (kernels/loss.cu). A cross entropy as csrc/ops_nn.h's
 * ddpc_op_cross_entropy describes it: target (int64 classes) or probs
 * (class probabilities) is NULL, weight may be; `check` takes the targets
 * out of range. */
typedef struct {
    const void *logits, *probs, *weight;
    const int64_t *target;
    int64_t rows, classes, ignore_index;
    double smoothing;
    int reduction, log_probs, dtype;
    ddpc_k_index_check check;
} ddpc_k_ce;
/* `scratch` is device memory for `rows` doubles plus one, used by the
 * reductions (unused for reduction NONE in the forward pass). An
 * out-of-range target makes its row NaN. */
int ddpc_k_cross_entropy(void *out, double *scratch, const ddpc_k_ce *ce, void *stream);
int ddpc_k_cross_entropy_backward(void *glogits, double *scratch, const void *gout, const ddpc_k_ce *ce, void *stream);
int ddpc_k_softmax(void *out, const void *x, int64_t rows, int64_t cols, int take_log, int dtype, void *stream);
int ddpc_k_softmax_backward(void *gx, const void *gy, const void *y, int64_t rows, int64_t cols, int take_log, int dtype,
                            void *stream);
/* The elementwise losses of pointwise_loss.h; pos_weight may be NULL. */
int ddpc_k_loss(int kind, void *out, const void *x, const void *y, const void *pos_weight, double p, int64_t n,
                int reduction, int dtype, void *stream);
int ddpc_k_loss_backward(int kind, int wrt_target, void *g, const void *gout, const void *x, const void *y,
                         const void *pos_weight, double p, int64_t n, int reduction, int dtype, void *stream);

/* The CTC loss (kernels/ctc.cu), as csrc/ops_ctc.h's entry points describe
 * it: log_probs (T, N, C) float32 or float64, the int64 per-sample vectors
 * on the device, log_alpha and log_beta float64 (N, T, S_max). */
/* A sample with a target label outside [0, C) or equal to the blank gets a
 * NaN loss and NaN gradients. */
int ddpc_k_ctc_forward(void *nll, void *log_alpha, const void *log_probs, int dtype, const int64_t *targets,
                       const int64_t *offsets, const int64_t *target_lengths, const int64_t *input_lengths, int64_t T,
                       int64_t N, int64_t C, int64_t S_max, int64_t blank, ddpc_k_index_check check, void *stream);
int ddpc_k_ctc_backward(void *grad, void *log_beta, const void *g, const void *nll, const void *log_alpha,
                        const void *log_probs, int dtype, const int64_t *targets, const int64_t *offsets,
                        const int64_t *target_lengths, const int64_t *input_lengths, int64_t T, int64_t N, int64_t C,
                        int64_t S_max, int64_t blank, int zero_infinity, ddpc_k_index_check check, void *stream);

/* Convolution and pooling (kernels/conv.cu), float32 and float64, over the
 * window geometry of window.h; the layouts are those of csrc/ops_conv.h.
 * im2col and col2im take the batch n and channels c of x [n, c, D, H, W];
 * the pools take `planes` (D, H, W) volumes. The backward passes overwrite gx. */
int ddpc_k_im2col(void *col, const void *x, int dtype, int64_t n, int64_t c, ddpc_window w, void *stream);
int ddpc_k_col2im(void *gx, const void *col, int dtype, int64_t n, int64_t c, ddpc_window w, void *stream);
int ddpc_k_max_pool(void *out, int64_t *indices, const void *x, int dtype, int64_t planes, ddpc_window w,
                    void *stream);
/* Indices in [0, in_plane) (in_plane: the elements of a volume) or -1 (no element, which adds nothing). */
int ddpc_k_max_pool_backward(void *gx, const void *g, const int64_t *indices, int dtype, int64_t planes,
                             int64_t in_plane, int64_t out_plane, ddpc_k_index_check check, void *stream);
int ddpc_k_avg_pool(void *out, const void *x, int dtype, int64_t planes, ddpc_window w, void *stream);
int ddpc_k_avg_pool_backward(void *gx, const void *g, int dtype, int64_t planes, ddpc_window w, void *stream);

/* grid_sample (kernels/grid.cu), float32 and float64, over x [n, c, *in] and
 * grid [n, points, dims] with the per-point rules of grid_sample.h; out is
 * [n, c, points]. The backward pass overwrites gx and ggrid; either may be
 * NULL when not wanted. The input gradient adds up with atomics. */
int ddpc_k_grid_sample(void *out, const void *x, const void *grid, int dtype, int64_t n, int64_t c, int64_t points,
                       ddpc_grid_sampling s, void *stream);
int ddpc_k_grid_sample_backward(void *gx, void *ggrid, const void *g, const void *x, const void *grid, int dtype,
                                int64_t n, int64_t c, int64_t points, ddpc_grid_sampling s, void *stream);

/* Embedding bags (kernels/embedding.cu), float32 and float64; see
 * csrc/ops_embedding.h for the layouts and rules. On a GPU an index outside
 * the table (or an argmax outside it and not -1) adds nothing, and offsets
 * are clamped into [0, n] and made non-decreasing; `check` takes those that
 * the host op refuses. */
typedef enum { DDPC_BAG_SUM = 0, DDPC_BAG_MEAN = 1, DDPC_BAG_MAX = 2 } ddpc_bag_mode;
typedef struct {
    const int64_t *indices; /* [n] rows of the weight */
    const int64_t *offsets; /* [bags + 1]: bag b is indices[offsets[b] .. offsets[b + 1]) */
    const void *weights;    /* [n] per-sample weights of the sum, or NULL */
    int64_t n, bags, rows, d;
    int mode;            /* ddpc_bag_mode */
    int64_t padding_idx; /* left out of every bag; -1: none */
} ddpc_k_bags;
int ddpc_k_embedding_bag(void *out, int64_t *argmax, const void *weight, int dtype, ddpc_k_bags b,
                         ddpc_k_index_check check, void *stream);
/* Overwrites gweight. */
int ddpc_k_embedding_bag_backward(void *gweight, const void *g, const int64_t *argmax, int dtype, ddpc_k_bags b,
                                  ddpc_k_index_check check, void *stream);
int ddpc_k_embedding_bag_weights_backward(void *gweights, const void *g, const void *weight, int dtype, ddpc_k_bags b,
                                          ddpc_k_index_check check, void *stream);

/* Optimizer steps on one tensor (kernels/optim.cu); see csrc/optim.c for the update rules. */
int ddpc_k_sgd(void *p, const void *g, void *buf, int64_t n, int dtype, double lr, double momentum, double dampening,
               double weight_decay, int nesterov, int first, int maximize, void *stream);
int ddpc_k_adam(void *p, const void *g, void *m, void *v, void *vmax, int64_t n, int dtype, double lr, double beta1,
                double beta2, double eps, double weight_decay, int decoupled, int maximize, double step_size,
                double bc2_sqrt, void *stream);
/* One tensor's step of an optimizer of kernels/optim_rules.h, which documents
 * its rules, the state arrays s1..s3 (NULL where unused) and the constants c. */
struct ddpc_optim_consts;
int ddpc_k_optim(void *p, const void *g, void *s1, void *s2, void *s3, int64_t n, int dtype,
                 const struct ddpc_optim_consts *c, void *stream);

/* The loader's direct gather (kernels/gather.cu): for each of the n sources,
 * row r of dst = row indices[r] of src, for r in [0, rows). src is device-
 * readable memory (host memory mapped for the device), dst device memory. */
#define DDPC_K_GATHER_MAX_SOURCES 16
typedef struct {
    const void *src;
    void *dst;
    size_t row_bytes;
} ddpc_k_rows;
typedef struct {
    ddpc_k_rows part[DDPC_K_GATHER_MAX_SOURCES];
    int n;
} ddpc_k_gather;
int ddpc_k_gather_rows(const ddpc_k_gather *g, const int64_t *indices, int64_t rows, void *stream);

/* Gradient unscaling (kernels/amp.cu); see csrc/amp.c. */
int ddpc_k_unscale(void *g, int64_t n, int dtype, double inv_scale, void *found_inf, void *stream);

#ifdef __cplusplus
}
#endif

#endif
