/* Neural-network ops: activations and their gradients, row-broadcast
 * arithmetic, reductions along a dim, 2-d transpose, dropout, softmax, the
 * fused softmax-cross-entropy and the elementwise losses, and the fused
 * multi-tensor optimizer steps (optim.c). One checked entry point per op,
 * float32 and float64 (a few also integers, as noted), dispatching to host
 * loops or kernels/ launchers. */
#ifndef DDPC_OPS_NN_H
#define DDPC_OPS_NN_H

#include "ops.h"
#include "optim_rules.h"
#include "pointwise_loss.h"

/* The parameters p and q of ddpc_op_unary: POW's exponent p; LEAKY_RELU's
 * negative slope p; ELU's alpha p; SOFTPLUS's beta p and threshold q;
 * HARDTANH's and CLAMP's min p and max q (ReLU6 is HARDTANH over [0, 6], as
 * in PyTorch); ROUND's number of decimals p; POLYGAMMA's order n >= 1 p.
 * ISNAN, ISINF and ISFINITE write 1 where they hold and 0 elsewhere. The
 * special functions from ERFINV on are kernels/special_functions.h's, from
 * BESSEL_J0 on kernels/bessel.h's (K0E and K1E: K0 and K1 scaled by exp(x)). */
typedef enum {
    DDPC_RELU = 0, DDPC_GELU, DDPC_TANH, DDPC_SIGMOID, DDPC_EXP, DDPC_LOG, DDPC_POW,
    DDPC_LEAKY_RELU, DDPC_ELU, DDPC_SILU, DDPC_SOFTPLUS, DDPC_MISH, DDPC_HARDTANH, DDPC_HARDSWISH, DDPC_HARDSIGMOID,
    DDPC_ABS, DDPC_SQRT, DDPC_RSQRT, DDPC_SQUARE, DDPC_SIN, DDPC_COS, DDPC_LOG1P, DDPC_EXPM1, DDPC_ERF,
    DDPC_RECIPROCAL, DDPC_SIGN, DDPC_FLOOR, DDPC_CEIL, DDPC_TRUNC, DDPC_ROUND, DDPC_CLAMP,
    DDPC_ISNAN, DDPC_ISINF, DDPC_ISFINITE, DDPC_LOG2, DDPC_LOG10, DDPC_EXP2, DDPC_SINH, DDPC_COSH, DDPC_ASINH,
    DDPC_ATAN, DDPC_TAN, DDPC_ASIN, DDPC_ACOS, DDPC_ACOSH, DDPC_ATANH, DDPC_ERFC, DDPC_LGAMMA, DDPC_ERFINV,
    DDPC_NDTRI, DDPC_ERFCX, DDPC_DIGAMMA, DDPC_POLYGAMMA, DDPC_I0, DDPC_I0E, DDPC_I1, DDPC_I1E,
    DDPC_BESSEL_J0, DDPC_BESSEL_J1, DDPC_BESSEL_Y0, DDPC_BESSEL_Y1, DDPC_BESSEL_K0, DDPC_BESSEL_K1, DDPC_BESSEL_K0E,
    DDPC_BESSEL_K1E, DDPC_SPHERICAL_BESSEL_J0, DDPC_AIRY_AI,
    DDPC_NUNARY
} ddpc_unary_op;
/* unary_f and unary_grad in kernels/nn.cu switch on these numbers (AIRY_AI
 * is unary_f's default), as do the op codes of python/ddpc/autograd.py. */
_Static_assert(DDPC_RELU == 0 && DDPC_GELU == 1 && DDPC_TANH == 2 && DDPC_SIGMOID == 3 && DDPC_EXP == 4 &&
               DDPC_LOG == 5 && DDPC_POW == 6 && DDPC_LEAKY_RELU == 7 && DDPC_ELU == 8 && DDPC_SILU == 9 &&
               DDPC_SOFTPLUS == 10 && DDPC_MISH == 11 && DDPC_HARDTANH == 12 && DDPC_HARDSWISH == 13 &&
               DDPC_HARDSIGMOID == 14 && DDPC_ABS == 15 && DDPC_SQRT == 16 && DDPC_RSQRT == 17 && DDPC_SQUARE == 18 &&
               DDPC_SIN == 19 && DDPC_COS == 20 && DDPC_LOG1P == 21 && DDPC_EXPM1 == 22 && DDPC_ERF == 23 &&
               DDPC_RECIPROCAL == 24 && DDPC_SIGN == 25 && DDPC_FLOOR == 26 && DDPC_CEIL == 27 && DDPC_TRUNC == 28 &&
               DDPC_ROUND == 29 && DDPC_CLAMP == 30 && DDPC_ISNAN == 31 && DDPC_ISINF == 32 && DDPC_ISFINITE == 33 &&
               DDPC_LOG2 == 34 && DDPC_LOG10 == 35 && DDPC_EXP2 == 36 && DDPC_SINH == 37 && DDPC_COSH == 38 &&
               DDPC_ASINH == 39 && DDPC_ATAN == 40 && DDPC_TAN == 41 && DDPC_ASIN == 42 && DDPC_ACOS == 43 &&
               DDPC_ACOSH == 44 && DDPC_ATANH == 45 && DDPC_ERFC == 46 && DDPC_LGAMMA == 47 && DDPC_ERFINV == 48 &&
               DDPC_NDTRI == 49 && DDPC_ERFCX == 50 && DDPC_DIGAMMA == 51 && DDPC_POLYGAMMA == 52 && DDPC_I0 == 53 &&
               DDPC_I0E == 54 && DDPC_I1 == 55 && DDPC_I1E == 56 && DDPC_BESSEL_J0 == 57 && DDPC_BESSEL_J1 == 58 &&
               DDPC_BESSEL_Y0 == 59 && DDPC_BESSEL_Y1 == 60 && DDPC_BESSEL_K0 == 61 && DDPC_BESSEL_K1 == 62 &&
               DDPC_BESSEL_K0E == 63 && DDPC_BESSEL_K1E == 64 && DDPC_SPHERICAL_BESSEL_J0 == 65 &&
               DDPC_AIRY_AI == 66 && DDPC_NUNARY == 67,
               "a unary op was added or moved: renumber the cases of unary_f and unary_grad in kernels/nn.cu");
/* Matches PyTorch's reduction codes. */
typedef enum { DDPC_REDUCE_NONE = 0, DDPC_REDUCE_MEAN, DDPC_REDUCE_SUM } ddpc_reduction;

/* out = f(x) with PyTorch's formulas (p and q as above, ignored by the
 * other ops). GELU is the exact erf form; SOFTPLUS is x where beta * x >
 * threshold and log(1 + exp(beta * x)) / beta, computed without overflow,
 * elsewhere. */
ddpc_status ddpc_op_unary(ddpc_unary_op op, ddpc_buffer *out, const ddpc_buffer *x, double p, double q);
/* gx = gy * f'(x), with PyTorch's choice of derivative at the kinks (CLAMP's
 * is 0 at the bounds and at NaN, HARDTANH's only at the bounds; SIGN, FLOOR,
 * CEIL, TRUNC, ROUND and the predicates have 0). `saved` is the output
 * y = f(x) for tanh, sigmoid, exp, exp2, sqrt, rsqrt, expm1, reciprocal, tan,
 * erfinv and ndtri, and the input x for the others (whichever the derivative
 * needs). */
ddpc_status ddpc_op_unary_backward(ddpc_unary_op op, ddpc_buffer *gx, const ddpc_buffer *gy, const ddpc_buffer *saved,
                                   double p, double q);
/* out = a op row, `row` repeated over a's leading elements (a->numel a multiple
 * of row->numel): the bias-add broadcast. RSUB and RDIV put the row first.
 * Floats and integers (these without DIV and RDIV). */
ddpc_status ddpc_op_binary_rows(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *row);
/* out = a op b with numpy's broadcasting: a's and b's shapes, aligned at their
 * last dims, are out's or 1 there (or missing at the front). Floats and
 * integers (these without DIV and RDIV), one dtype for all three. */
ddpc_status ddpc_op_binary_broadcast(ddpc_binary_op op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b);
/* out = op(a, b) for the special functions of two arguments (the op codes of
 * kernels/special_binary.h: gammainc, gammaincc, zeta and the orthogonal
 * polynomials), a and b broadcast to out's shape as in
 * ddpc_op_binary_broadcast; float32 or float64, one dtype for all three,
 * computed in double and rounded once. */
ddpc_status ddpc_op_special_binary(int op, ddpc_buffer *out, const ddpc_buffer *a, const ddpc_buffer *b);
/* out = cond ? a : b elementwise, the three broadcast to out's shape as in
 * ddpc_op_binary_broadcast; cond is uint8 (any non-zero is true), a and b
 * out's dtype (any). */
ddpc_status ddpc_op_where(ddpc_buffer *out, const ddpc_buffer *cond, const ddpc_buffer *a, const ddpc_buffer *b);
/* Splits a's elements around `dim` into outer x len x inner (an error names
 * `op` when dim is out of range). */
ddpc_status ddpc_dim_split(const ddpc_buffer *a, int dim, const char *op, int64_t *outer, int64_t *len,
                           int64_t *inner);
/* out = a summed along `dim` (out has a's shape without that dim); float32,
 * float64 (both accumulated in double) or int64 (exact, wrapping on overflow). */
ddpc_status ddpc_op_sum_dim(ddpc_buffer *out, const ddpc_buffer *a, int dim);
/* var and mean (a's shape without `dim`) = the variance (squared deviations
 * summed, over max(0, N - correction)) and mean of host float32/float64 a
 * along dim: two passes in double, split across the cores. */
ddpc_status ddpc_op_var_dim(ddpc_buffer *var, ddpc_buffer *mean, const ddpc_buffer *a, int dim, double correction);
/* values and indices (a's shape without `dim`; indices int64) = the largest
 * (`want_max`) or smallest element of `a` along `dim` and where it first
 * occurs; a NaN wins, as in PyTorch. float32, float64, int32, int64, uint8. */
ddpc_status ddpc_op_extreme_dim(ddpc_buffer *values, ddpc_buffer *indices, const ddpc_buffer *a, int dim,
                                int want_max);
/* out (float32 or float64, of `shape_of`'s shape) = zeros but for
 * out[..., indices[...], ...] = g[...] along `dim`: the gradient of extreme_dim. */
ddpc_status ddpc_op_put_dim(ddpc_buffer *out, const ddpc_buffer *g, const ddpc_buffer *indices, int dim);
/* out [K, D] = table [N, D] rows idx [K] (int64, each in [0, N)): an embedding
 * lookup; any dtype. Host indices are checked; device ones must be checked by
 * the caller. */
ddpc_status ddpc_op_index_rows(ddpc_buffer *out, const ddpc_buffer *table, const ddpc_buffer *idx);
/* table [N, D] rows idx [K] = rows [K, D]: assignment through an index (of
 * rows that repeat, one write lands); any dtype, indices as index_rows. */
ddpc_status ddpc_op_put_rows(ddpc_buffer *table, const ddpc_buffer *rows, const ddpc_buffer *idx);
/* gtable [N, D] += g [K, D] at rows idx [K] (rows that repeat add up): the
 * gradient of index_rows; float32 or float64. */
ddpc_status ddpc_op_index_add_rows(ddpc_buffer *gtable, const ddpc_buffer *g, const ddpc_buffer *idx);
/* Layer normalisation of x [R, D] over each row: y = (x - mean) * rstd * w + b
 * with rstd = 1 / sqrt(var + eps) (var biased), keeping mean and rstd [R]
 * for the backward pass. float32 or float64; w and b [D]. */
ddpc_status ddpc_op_layer_norm(ddpc_buffer *y, ddpc_buffer *mean, ddpc_buffer *rstd, const ddpc_buffer *x,
                               const ddpc_buffer *w, const ddpc_buffer *b, double eps);
/* Its gradients: gx [R, D], gw and gb [D] (overwritten). */
ddpc_status ddpc_op_layer_norm_backward(ddpc_buffer *gx, ddpc_buffer *gw, ddpc_buffer *gb, const ddpc_buffer *gy,
                                        const ddpc_buffer *x, const ddpc_buffer *mean, const ddpc_buffer *rstd,
                                        const ddpc_buffer *w);
/* out [C,R] = a [R,C] transposed; any dtype. */
ddpc_status ddpc_op_transpose(ddpc_buffer *out, const ddpc_buffer *a);
/* Strided views of two contiguous buffers over one shape: in each, element
 * offset + sum over d of i_d * strides[d] for each index i of `shape` (in
 * elements; a negative stride walks backwards from the offset). */
typedef struct {
    int ndim;
    int64_t shape[DDPC_MAX_NDIM];
    int64_t dst_offset, src_offset;
    int64_t dst_strides[DDPC_MAX_NDIM], src_strides[DDPC_MAX_NDIM];
} ddpc_strided;
/* dst's view = src's view: what slicing, permute and expand read, and what
 * assignment into a slice writes. Any dtype (one for both); a dst stride of 0
 * is allowed only over a dim of size 1, so no element is written twice. */
ddpc_status ddpc_op_strided_copy(ddpc_buffer *dst, const ddpc_buffer *src, const ddpc_strided *geo);
/* out = x * keep / (1 - p) where keep_i = uniform(seed, offset + i) >= p. The
 * mask is a pure function of (seed, offset), so the backward pass calls the
 * same op on the incoming gradient instead of storing the mask. */
ddpc_status ddpc_op_dropout(ddpc_buffer *out, const ddpc_buffer *x, double p, uint64_t seed, uint64_t offset);
/* Cross entropy of logits [N, C] with log-softmax fused in, as PyTorch's
 * cross_entropy; with `log_probs` the input holds log-probabilities already
 * and nothing is fused (PyTorch's nll_loss). The targets are int64 class
 * indices [N] (a row whose target is `ignore_index` contributes nothing) or,
 * in the logits' dtype, class probabilities [N, C]. `weight` (NULL or [C])
 * weighs each class's term; label smoothing mixes eps / C into every class.
 * out is [N] for NONE, one element otherwise; the mean divides by the summed
 * weights of the rows' target classes (by N for class probabilities). */
typedef struct {
    int64_t ignore_index;
    double label_smoothing;
    ddpc_reduction reduction;
    int log_probs;
} ddpc_ce_args;
ddpc_status ddpc_op_cross_entropy(ddpc_buffer *out, const ddpc_buffer *logits, const ddpc_buffer *target,
                                  const ddpc_buffer *weight, const ddpc_ce_args *args);
/* glogits = d loss / d logits scaled by gout (shaped like the forward's out). */
ddpc_status ddpc_op_cross_entropy_backward(ddpc_buffer *glogits, const ddpc_buffer *gout, const ddpc_buffer *logits,
                                           const ddpc_buffer *target, const ddpc_buffer *weight,
                                           const ddpc_ce_args *args);
/* An elementwise loss (kernels/pointwise_loss.h) of x against the target y
 * (same shape); `pos_weight` (x's shape) only for BCE_LOGITS, else NULL; `p`
 * SMOOTH_L1's beta or HUBER's delta (> 0). out as for cross entropy: the mean
 * and sum accumulate in double. A BCE input or target outside [0, 1] is an
 * error on the host and makes the loss NaN on a GPU. */
ddpc_status ddpc_op_loss(ddpc_loss_kind kind, ddpc_buffer *out, const ddpc_buffer *x, const ddpc_buffer *y,
                         const ddpc_buffer *pos_weight, double p, ddpc_reduction reduction);
/* g = d loss / d x (d loss / d y when `wrt_target`) scaled by gout. */
ddpc_status ddpc_op_loss_backward(ddpc_loss_kind kind, int wrt_target, ddpc_buffer *g, const ddpc_buffer *gout,
                                  const ddpc_buffer *x, const ddpc_buffer *y, const ddpc_buffer *pos_weight, double p,
                                  ddpc_reduction reduction);

/* Softmax (or log-softmax when `take_log`) over the last dim of x, row by row. */
ddpc_status ddpc_op_softmax(ddpc_buffer *out, const ddpc_buffer *x, int take_log);
/* gx from gy and the forward's output y: y * (gy - sum(gy * y)) for softmax,
 * gy - exp(y) * sum(gy) for log-softmax. */
ddpc_status ddpc_op_softmax_backward(ddpc_buffer *gx, const ddpc_buffer *gy, const ddpc_buffer *y, int take_log);

/* Fused optimizer steps over a group of n tensors with PyTorch's update rules.
 * Float16 and bfloat16 tensors (parameter, gradient and state all of that
 * dtype) are updated in float32 and rounded once on store. `maximize` steps
 * up the gradient instead of down.
 * bufs[i] is the momentum buffer (NULL entries when momentum is 0); `first`
 * says this is its first step, so the buffer is set to the gradient. */
typedef struct {
    double lr, momentum, dampening, weight_decay;
    int nesterov, first, maximize;
} ddpc_sgd_args;
ddpc_status ddpc_op_sgd_step(int n, ddpc_buffer **params, ddpc_buffer **grads, ddpc_buffer **bufs,
                             const ddpc_sgd_args *args);

/* Adam (decoupled = 0, weight decay added to the gradient) or AdamW
 * (decoupled = 1, weights shrunk by lr * weight_decay); `step` counts from 1.
 * max_sqs is NULL unless amsgrad. */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;
    int decoupled, maximize;
} ddpc_adam_args;
ddpc_status ddpc_op_adam_step(int n, ddpc_buffer **params, ddpc_buffer **grads, ddpc_buffer **exp_avgs,
                              ddpc_buffer **exp_avg_sqs, ddpc_buffer **max_sqs, const ddpc_adam_args *args);

/* RMSprop, Adagrad, Adamax, NAdam, RAdam or Adadelta (kernels/optim_rules.h
 * names each kind's state lists s1, s2, s3; s2 and s3 may be NULL where the
 * kind or its options use none). `step` counts from 1. beta is RMSprop's
 * alpha, Adadelta's rho and the others' beta2. NAdam reads mu_product (the
 * product of its momentum coefficients before this step) and leaves the
 * product after it there. */
typedef struct {
    ddpc_optim_kind kind;
    double lr, eps, weight_decay, beta1, beta, momentum, lr_decay, momentum_decay, mu_product;
    int64_t step;
    int centered, decoupled, maximize;
} ddpc_optim_args;
ddpc_status ddpc_op_optim_step(int n, ddpc_buffer **params, ddpc_buffer **grads, ddpc_buffer **s1, ddpc_buffer **s2,
                               ddpc_buffer **s3, ddpc_optim_args *args);


/* Runs the statement list with T bound to the C type of a float dtype. */
#define DDPC_FLOAT_TYPES(dt, ...)                                                     \
    do {                                                                           \
        if ((dt) == DDPC_FLOAT32) {                                                \
            typedef float T;                                                       \
            __VA_ARGS__;                                                           \
        } else {                                                                   \
            typedef double T;                                                      \
            __VA_ARGS__;                                                           \
        }                                                                          \
    } while (0)

/* The same with T bound to the C type of a float32, float64, int32, int64 or uint8 dtype. */
#define DDPC_REAL_TYPES(dt, ...)                                                      \
    do {                                                                           \
        switch (dt) {                                                              \
        case DDPC_INT32: { typedef int32_t T; __VA_ARGS__; } break;               \
        case DDPC_INT64: { typedef int64_t T; __VA_ARGS__; } break;               \
        case DDPC_UINT8: { typedef uint8_t T; __VA_ARGS__; } break;               \
        default: DDPC_FLOAT_TYPES(dt, __VA_ARGS__);                                \
        }                                                                          \
    } while (0)

int ddpc_optim_register(PyObject *module);
/* Registers the nn ops, GEMM and the optimizer steps. */
int ddpc_nn_register(PyObject *module);

#endif
