/* The update rules of the optimizers that share one fused multi-tensor step
 * (RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta), written once for the
 * host loops (csrc/optim.c) and the CUDA kernels (kernels/optim.cu). Each
 * follows PyTorch's documented rule and its order of operations, so float64
 * results agree with PyTorch's to rounding. Plain C, so it compiles with cc
 * as well as nvcc. */
#ifndef DDPC_OPTIM_RULES_H
#define DDPC_OPTIM_RULES_H

#include <math.h>

#include "kernels.h"

typedef enum {
    DDPC_OPTIM_RMSPROP = 0, /* s1 square_avg, s2 momentum_buffer (momentum > 0), s3 grad_avg (centered) */
    DDPC_OPTIM_ADAGRAD,     /* s1 sum */
    DDPC_OPTIM_ADAMAX,      /* s1 exp_avg, s2 exp_inf */
    DDPC_OPTIM_NADAM,       /* s1 exp_avg, s2 exp_avg_sq */
    DDPC_OPTIM_RADAM,       /* s1 exp_avg, s2 exp_avg_sq */
    DDPC_OPTIM_ADADELTA,    /* s1 square_avg, s2 acc_delta */
    DDPC_NOPTIM
} ddpc_optim_kind;

/* One step's constants, resolved on the host from the hyper-parameters and
 * the step count t (csrc/optim.c, optim_consts_):
 *   g = sign * grad + l2 * p, with p first scaled by `shrink` (decoupled weight decay)
 *   RMSprop:  a = beta * a + (1 - beta) g^2;  d = d + (1 - beta) (g - d) (centered)
 *             avg = sqrt(a - d^2 | a) + eps;  b = momentum * b + g / avg, p -= lr * b | p -= lr * g / avg
 *   Adagrad:  a = a + g^2;  p -= lr * g / (sqrt(a) + eps)           (lr = lr / (1 + (t - 1) lr_decay))
 *   Adamax:   a = a + (1 - beta1) (g - a);  b = max(beta * b, |g| + eps);  p -= lr * a / b  (lr /= 1 - beta1^t)
 *   NAdam:    a as Adamax's, b = beta * b + (1 - beta) g^2;  den = sqrt(b / bc2) + eps
 *             p += coef_g * g / den + coef_a * a / den
 *   RAdam:    a, b as NAdam's;  p -= a / bc1 * lr * (sqrt(bc2) / (sqrt(b) + eps)) * rect  (rect > 0)
 *                                p -= a / bc1 * lr                                        (rect = 0)
 *   Adadelta: a = beta * a + (1 - beta) g^2;  u = sqrt(b + eps) / sqrt(a + eps) g
 *             b = beta * b + (1 - beta) u^2;  p -= lr * u
 * where beta is RMSprop's alpha, Adadelta's rho and the others' beta2. */
typedef struct ddpc_optim_consts {
    int kind, centered, momentum_on;
    double sign, l2, shrink, lr, eps, beta1, beta, momentum;
    double bc1, bc2, sqrt_bc2, coef_g, coef_a, rect;
} ddpc_optim_consts;

/* One element's update in type T (float or double) for a kind known where it
 * is inlined: p is the parameter, g its gradient, a, b, d the kind's state
 * (unused ones are left alone). */
#define DDPC_OPTIM_RULE_(T, S)                                                                                      \
    static inline DDPC_HD void ddpc_optim_update_##S(int kind, const ddpc_optim_consts *c, T *p, T grad, T *a,     \
                                                      T *b, T *d) {                                                 \
        const T b1c = (T)(1 - c->beta1), be = (T)c->beta, bec = (T)(1 - c->beta), eps = (T)c->eps, lr = (T)c->lr;   \
        T g = (T)c->sign * grad + (T)c->l2 * *p;                                                                    \
        T pn = *p * (T)c->shrink;                                                                                   \
        switch (kind) {                                                                                             \
        case DDPC_OPTIM_RMSPROP: {                                                                                  \
            T sq = *a * be + bec * g * g, avg;                                                                      \
            *a = sq;                                                                                                \
            if (c->centered) {                                                                                      \
                T ga = *d + bec * (g - *d);                                                                         \
                *d = ga;                                                                                            \
                avg = sqrt(sq - ga * ga) + eps;                                                                     \
            } else {                                                                                                \
                avg = sqrt(sq) + eps;                                                                               \
            }                                                                                                       \
            if (c->momentum_on) {                                                                                   \
                T buf = *b * (T)c->momentum + g / avg;                                                              \
                *b = buf;                                                                                           \
                pn -= lr * buf;                                                                                     \
            } else {                                                                                                \
                pn -= lr * g / avg;                                                                                 \
            }                                                                                                       \
            break;                                                                                                  \
        }                                                                                                           \
        case DDPC_OPTIM_ADAGRAD: {                                                                                  \
            T sum = *a + g * g;                                                                                     \
            *a = sum;                                                                                               \
            pn -= lr * g / (sqrt(sum) + eps);                                                                       \
            break;                                                                                                  \
        }                                                                                                           \
        case DDPC_OPTIM_ADAMAX: {                                                                                   \
            T m = *a + b1c * (g - *a), decayed = *b * be, fresh = fabs(g) + eps;                                    \
            /* NaN in either propagates, as torch.maximum's does */                                                 \
            T inf = decayed > fresh || decayed != decayed ? decayed : fresh;                                       \
            *a = m;                                                                                                 \
            *b = inf;                                                                                               \
            pn -= lr * m / inf;                                                                                     \
            break;                                                                                                  \
        }                                                                                                           \
        case DDPC_OPTIM_NADAM:                                                                                      \
        case DDPC_OPTIM_RADAM: {                                                                                    \
            T m = *a + b1c * (g - *a), v = *b * be + bec * g * g;                                                   \
            *a = m;                                                                                                 \
            *b = v;                                                                                                 \
            if (kind == DDPC_OPTIM_NADAM) {                                                                         \
                T den = sqrt(v / (T)c->bc2) + eps;                                                                  \
                pn = pn + (T)c->coef_g * g / den;                                                                   \
                pn = pn + (T)c->coef_a * m / den;                                                                   \
            } else if (c->rect > 0) {                                                                               \
                pn -= m / (T)c->bc1 * lr * ((T)c->sqrt_bc2 / (sqrt(v) + eps)) * (T)c->rect;                         \
            } else {                                                                                                \
                pn -= m / (T)c->bc1 * lr;                                                                           \
            }                                                                                                       \
            break;                                                                                                  \
        }                                                                                                           \
        default: {                                                                                                  \
            T sq = *a * be + bec * g * g;                                                                           \
            T delta = sqrt(*b + eps) / sqrt(sq + eps) * g;                                                          \
            *a = sq;                                                                                                \
            *b = *b * be + bec * delta * delta;                                                                     \
            pn -= lr * delta;                                                                                       \
            break;                                                                                                  \
        }                                                                                                           \
        }                                                                                                           \
        *p = pn;                                                                                                    \
    }

DDPC_OPTIM_RULE_(float, f32)
DDPC_OPTIM_RULE_(double, f64)

#endif
