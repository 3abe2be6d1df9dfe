/* The elementwise losses of PyTorch, written once for the host loops
 * (csrc/ops_nn.c) and the CUDA kernels (kernels/loss.cu): each element's loss
 * and its derivatives with respect to the input x and the target y, in
 * double. Plain C, so it compiles with cc as well as nvcc. */
#ifndef DDPC_POINTWISE_LOSS_H
#define DDPC_POINTWISE_LOSS_H

#include <math.h>

#include "kernels.h"

/* w is BCE_LOGITS's pos_weight (1 without one); p is SMOOTH_L1's beta and
 * HUBER's delta. */
typedef enum {
    DDPC_LOSS_MSE = 0,         /* (x - y)^2 */
    DDPC_LOSS_L1,              /* |x - y| */
    DDPC_LOSS_SMOOTH_L1,       /* 0.5 (x - y)^2 / beta where |x - y| < beta, else |x - y| - 0.5 beta (beta > 0) */
    DDPC_LOSS_HUBER,           /* 0.5 (x - y)^2 where |x - y| < delta, else delta (|x - y| - 0.5 delta) */
    DDPC_LOSS_BCE,             /* -(y log x + (1 - y) log(1 - x)), the logs clamped at -100; x and y in [0, 1] */
    DDPC_LOSS_BCE_LOGITS,      /* (1 - y) x - (1 + (w - 1) y) log(sigmoid(x)) */
    DDPC_LOSS_KL_DIV,          /* y log y - y x (0 log 0 is 0) */
    DDPC_LOSS_KL_DIV_LOG_TARGET, /* exp(y) (y - x) */
    DDPC_NLOSS
} ddpc_loss_kind;

/* log(sigmoid(x)) without overflow for either sign. */
static inline DDPC_HD double ddpc_log_sigmoid(double x) { return (x < 0 ? x : 0.0) - log1p(exp(-fabs(x))); }

/* A log clamped at -100, as PyTorch's binary cross entropy takes it (NaN stays NaN). */
static inline DDPC_HD double ddpc_clamp_log_(double l) { return l < -100 ? -100.0 : l; }

/* The loss of one element. A BCE input or target outside [0, 1] gives NaN
 * (the host op refuses them before). */
static inline DDPC_HD double ddpc_loss_value(int kind, double x, double y, double w, double p) {
    double d = x - y, a = fabs(d);
    switch (kind) {
    case DDPC_LOSS_MSE: return d * d;
    case DDPC_LOSS_L1: return a;
    case DDPC_LOSS_SMOOTH_L1: return a < p ? 0.5 * d * d / p : a - 0.5 * p;
    case DDPC_LOSS_HUBER: return a < p ? 0.5 * d * d : p * (a - 0.5 * p);
    case DDPC_LOSS_BCE:
        if (!(x >= 0 && x <= 1 && y >= 0 && y <= 1)) return NAN;
        return (y - 1) * ddpc_clamp_log_(log1p(-x)) - y * ddpc_clamp_log_(log(x));
    case DDPC_LOSS_BCE_LOGITS: return (1 - y) * x - (1 + (w - 1) * y) * ddpc_log_sigmoid(x);
    case DDPC_LOSS_KL_DIV: return (y == 0 ? 0.0 : y * log(y)) - y * x;
    default: return exp(y) * (y - x);
    }
}

/* d loss / d x, or d loss / d y when `wrt_target`, with PyTorch's choices:
 * L1's derivative is 0 where x == y; BCE's divides by max(x (1 - x), 1e-12);
 * KL_DIV's with respect to y is NaN where y == 0 (PyTorch differentiates
 * xlogy(y, y) that way). */
static inline DDPC_HD double ddpc_loss_grad(int kind, int wrt_target, double x, double y, double w, double p) {
    double d = x - y, gx;
    switch (kind) {
    case DDPC_LOSS_MSE: gx = 2 * d; break;
    case DDPC_LOSS_L1: gx = d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0); break;
    case DDPC_LOSS_SMOOTH_L1: gx = d < -p ? -1.0 : (d > p ? 1.0 : d / p); break;
    case DDPC_LOSS_HUBER: gx = d < -p ? -p : (d > p ? p : d); break;
    case DDPC_LOSS_BCE: {
        double v = x * (1 - x);
        return wrt_target ? log1p(-x) - log(x) : d / (v > 1e-12 ? v : 1e-12);
    }
    case DDPC_LOSS_BCE_LOGITS:
        return wrt_target ? ddpc_log_sigmoid(-x) - w * ddpc_log_sigmoid(x)
                          : (1 + (w - 1) * y) / (1 + exp(-x)) - w * y;
    case DDPC_LOSS_KL_DIV: return wrt_target ? (y != 0 ? log(y) : 0.0) + y / y - x : -y;
    default: return wrt_target ? exp(y) * (y - x + 1) : -exp(y);
    }
    return wrt_target ? -gx : gx;
}

#endif
