/* Fused multi-tensor optimizer steps: one call updates every tensor of a
 * parameter group, in place, with PyTorch's documented update rules.
 *
 *   SGD:   d = g + wd * p
 *          buf = d (first step) | momentum * buf + (1 - dampening) * d
 *          d = d + momentum * buf (nesterov) | buf          (when momentum != 0)
 *          p = p - lr * d
 *   Adam:  g = g + wd * p (Adam) | p = p * (1 - lr * wd) (AdamW)
 *          m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
 *          vmax = max(vmax, v) (amsgrad, used in place of v below)
 *          p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 * RMSprop, Adagrad, Adamax, NAdam, RAdam and Adadelta share one op
 * (ddpc_op_optim_step) whose rules kernels/optim_rules.h writes once for
 * these loops and the kernels.
 *
 * With maximize, all start from -g. Float16 and bfloat16 groups keep their
 * state in their own dtype (as PyTorch does) and compute in float32.
 *
 * The Python binding checks every list entry and collects the pointers with
 * the GIL held, then runs all updates with it released: device tensors as one
 * kernel each on their compute stream, host tensors split across cores. */
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "kernels.h"
#include "module.h"
#include "ops_nn.h"
#include "parallel.h"

/* Every tensor of a step must match its parameter in dtype, device and size. */
static ddpc_status check_group_(int n, ddpc_buffer **params, ddpc_buffer **lists[], const char *names[], int nlists,
                                const char *op) {
    for (int i = 0; i < n; i++) {
        const ddpc_buffer *p = params[i];
        if (p->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: parameter %d is read-only", op, i);
        if (!ddpc_dtype_is_float(p->dtype))
            return DDPC_ERROR(DDPC_ERR_TYPE, "%s: parameter %d is %s; optimizers need a float dtype", op, i,
                              ddpc_dtype_name(p->dtype));
        for (int l = 0; l < nlists; l++) {
            const ddpc_buffer *b = lists[l] ? lists[l][i] : NULL;
            if (!b) continue;
            if (b->dtype != p->dtype || b->device != p->device || b->numel != p->numel)
                return DDPC_ERROR(DDPC_ERR_ARG, "%s: the %s of parameter %d does not match it in dtype, device or size",
                                  op, names[l], i);
        }
    }
    return DDPC_OK;
}

/* A group's host tensors seen as one index space [0, total), so the split
 * across threads balances one big weight and many small biases alike. */
typedef struct {
    int n;
    ddpc_buffer **params, **grads, **s1, **s2, **s3; /* s*: the optimizer's state lists */
    int64_t *starts;                                 /* n + 1 prefix offsets; device tensors add 0 */
    int s1_unset;                                    /* s1 is only written: SGD's first step sets its buffers */
    const ddpc_sgd_args *sgd;
    const ddpc_adam_args *adam;
    const ddpc_optim_consts *opt;
    double step_size, bc2_sqrt;
} group_job_;

/* One update rule over n elements of float32 or float64 (dt): t holds the
 * parameter, its gradient and the three state arrays (NULL where unused). */
typedef void (*loop_fn_)(const group_job_ *j, ddpc_dtype dt, void *const t[5], int64_t n);

#define CHUNK 1024

/* Elements [lo, hi) of parameter i. Float16 and bfloat16 tensors go through
 * float32 copies a chunk at a time (PyTorch's fused steps also compute them in
 * float32), so every dtype runs the same loops and each value is rounded once.
 * Buffers the step only writes (still unset) are not read into their copies. */
static void span_(const group_job_ *j, loop_fn_ loop, int i, int64_t lo, int64_t hi) {
    ddpc_buffer *b[5] = {j->params[i], j->grads[i], j->s1 ? j->s1[i] : NULL, j->s2 ? j->s2[i] : NULL,
                         j->s3 ? j->s3[i] : NULL};
    ddpc_dtype dt = b[0]->dtype;
    void *t[5];
    if (dt == DDPC_FLOAT32 || dt == DDPC_FLOAT64) {
        size_t item = ddpc_dtype_size(dt);
        for (int k = 0; k < 5; k++) t[k] = b[k] ? (char *)b[k]->data + (size_t)lo * item : NULL;
        loop(j, dt, t, hi - lo);
        return;
    }
    float f[5][CHUNK];
    for (int64_t c = lo; c < hi; c += CHUNK) {
        int64_t m = hi - c < CHUNK ? hi - c : CHUNK;
        for (int k = 0; k < 5; k++) {
            t[k] = b[k] ? f[k] : NULL;
            if (b[k] && !(k == 2 && j->s1_unset)) ddpc_16bit_to_float(dt, (const uint16_t *)b[k]->data + c, f[k], m);
        }
        loop(j, DDPC_FLOAT32, t, m);
        for (int k = 0; k < 5; k++)
            if (b[k] && k != 1) ddpc_float_to_16bit(dt, f[k], (uint16_t *)b[k]->data + c, m); /* all but the gradient */
    }
}

typedef struct {
    const group_job_ *job;
    loop_fn_ loop;
} range_ctx_;

static void group_range_(void *ctx, int64_t lo, int64_t hi) {
    const range_ctx_ *r = ctx;
    const group_job_ *j = r->job;
    for (int i = 0; i < j->n; i++) {
        int64_t s = lo > j->starts[i] ? lo : j->starts[i], e = hi < j->starts[i + 1] ? hi : j->starts[i + 1];
        if (s < e) span_(j, r->loop, i, s - j->starts[i], e - j->starts[i]);
    }
}

/* Grain: below ~64K elements per thread, starting a thread costs more than it saves. */
static void run_group_(const group_job_ *j, loop_fn_ loop) {
    range_ctx_ r = {j, loop};
    ddpc_parallel_for(j->starts[j->n], 1 << 16, group_range_, &r);
}

/* Each loop variant has its branches resolved outside the loop (the macro
 * arguments are constants), so the compiler vectorises every one. `sign` is
 * -1 to maximize: multiplying by it negates exactly, as PyTorch's -grad does. */
#define SGD_LOOP(T, MOMENTUM, FIRST, NESTEROV)                                     \
    for (int64_t i = 0; i < n; i++) {                                              \
        T d = sign * g[i] + wd * p[i];                                             \
        if (MOMENTUM) {                                                            \
            T m = (FIRST) ? d : mom * b[i] + damp * d;                             \
            b[i] = m;                                                              \
            d = (NESTEROV) ? d + mom * m : m;                                      \
        }                                                                          \
        p[i] -= lr * d;                                                            \
    }

static void sgd_loop_(const group_job_ *j, ddpc_dtype dt, void *const t[5], int64_t n) {
    const ddpc_sgd_args *a = j->sgd;
    DDPC_FLOAT_TYPES(dt, {
        T *restrict p = t[0], *restrict b = t[2];
        const T *restrict g = t[1];
        const T lr = (T)a->lr, wd = (T)a->weight_decay, mom = (T)a->momentum, damp = (T)(1 - a->dampening);
        const T sign = a->maximize ? (T)-1 : (T)1;
        if (!b) SGD_LOOP(T, 0, 0, 0)
        else if (a->first && a->nesterov) SGD_LOOP(T, 1, 1, 1)
        else if (a->first) SGD_LOOP(T, 1, 1, 0)
        else if (a->nesterov) SGD_LOOP(T, 1, 0, 1)
        else SGD_LOOP(T, 1, 0, 0)
    });
}

#define ADAM_LOOP(T, AMSGRAD)                                                      \
    for (int64_t i = 0; i < n; i++) {                                              \
        T gi = sign * g[i] + l2 * p[i];                                            \
        T mi = m[i] + b1c * (gi - m[i]);                                           \
        T vi = b2 * v[i] + b2c * gi * gi;                                          \
        m[i] = mi;                                                                 \
        v[i] = vi;                                                                 \
        if (AMSGRAD) {                                                             \
            vi = vmax[i] > vi ? vmax[i] : vi;                                      \
            vmax[i] = vi;                                                          \
        }                                                                          \
        p[i] = p[i] * shrink - ss * mi / (sqrt(vi) / bc2s + eps);                  \
    }

static void adam_loop_(const group_job_ *j, ddpc_dtype dt, void *const t[5], int64_t n) {
    const ddpc_adam_args *a = j->adam;
    DDPC_FLOAT_TYPES(dt, {
        T *restrict p = t[0], *restrict m = t[2], *restrict v = t[3], *restrict vmax = t[4];
        const T *restrict g = t[1];
        /* Adam adds wd * p to the gradient; AdamW scales p by 1 - lr * wd.
         * The unused one is 0 or 1, which leaves the result exact. */
        const T l2 = a->decoupled ? (T)0 : (T)a->weight_decay;
        const T shrink = a->decoupled ? (T)(1 - a->lr * a->weight_decay) : (T)1;
        const T b1c = (T)(1 - a->beta1), b2 = (T)a->beta2, b2c = (T)(1 - a->beta2);
        const T ss = (T)j->step_size, bc2s = (T)j->bc2_sqrt, eps = (T)a->eps, sign = a->maximize ? (T)-1 : (T)1;
        if (vmax) ADAM_LOOP(T, 1)
        else ADAM_LOOP(T, 0)
    });
}

/* One loop per kind and type: the kind is a constant in each, so the rule's
 * switch folds away; the optional states are read and written where present. */
#define OPTIM_LOOP(T, S, KIND)                                                     \
    for (int64_t i = 0; i < n; i++) {                                              \
        T pi = p[i], a = s1[i], b = s2 ? s2[i] : 0, d = s3 ? s3[i] : 0;            \
        ddpc_optim_update_##S(KIND, c, &pi, g[i], &a, &b, &d);                     \
        p[i] = pi;                                                                 \
        s1[i] = a;                                                                 \
        if (s2) s2[i] = b;                                                         \
        if (s3) s3[i] = d;                                                         \
    }

#define OPTIM_KINDS(T, S)                                                          \
    do {                                                                           \
        T *restrict p = t[0], *restrict s1 = t[2], *restrict s2 = t[3], *restrict s3 = t[4]; \
        const T *restrict g = t[1];                                                \
        switch (c->kind) {                                                         \
        case DDPC_OPTIM_RMSPROP: OPTIM_LOOP(T, S, DDPC_OPTIM_RMSPROP) break;       \
        case DDPC_OPTIM_ADAGRAD: OPTIM_LOOP(T, S, DDPC_OPTIM_ADAGRAD) break;       \
        case DDPC_OPTIM_ADAMAX: OPTIM_LOOP(T, S, DDPC_OPTIM_ADAMAX) break;         \
        case DDPC_OPTIM_NADAM: OPTIM_LOOP(T, S, DDPC_OPTIM_NADAM) break;           \
        case DDPC_OPTIM_RADAM: OPTIM_LOOP(T, S, DDPC_OPTIM_RADAM) break;           \
        default: OPTIM_LOOP(T, S, DDPC_OPTIM_ADADELTA) break;                      \
        }                                                                          \
    } while (0)

static void optim_loop_(const group_job_ *j, ddpc_dtype dt, void *const t[5], int64_t n) {
    const ddpc_optim_consts *c = j->opt;
    if (dt == DDPC_FLOAT32) OPTIM_KINDS(float, f32);
    else OPTIM_KINDS(double, f64);
}

#ifdef DDPC_WITH_CUDA
/* Queue parameter i's update kernel on `stream`; return a cudaError_t. */
static int sgd_kernel_(const group_job_ *j, int i, void *stream) {
    ddpc_buffer *p = j->params[i], *b = j->s1 ? j->s1[i] : NULL;
    const ddpc_sgd_args *a = j->sgd;
    return ddpc_k_sgd(p->data, j->grads[i]->data, b ? b->data : NULL, p->numel, p->dtype, a->lr, a->momentum,
                      a->dampening, a->weight_decay, a->nesterov, a->first, a->maximize, stream);
}

static int adam_kernel_(const group_job_ *j, int i, void *stream) {
    ddpc_buffer *p = j->params[i], *mx = j->s3 ? j->s3[i] : NULL;
    const ddpc_adam_args *a = j->adam;
    return ddpc_k_adam(p->data, j->grads[i]->data, j->s1[i]->data, j->s2[i]->data, mx ? mx->data : NULL, p->numel,
                       p->dtype, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->decoupled, a->maximize,
                       j->step_size, j->bc2_sqrt, stream);
}

static int optim_kernel_(const group_job_ *j, int i, void *stream) {
    ddpc_buffer *p = j->params[i];
    return ddpc_k_optim(p->data, j->grads[i]->data, j->s1[i]->data, j->s2 ? j->s2[i]->data : NULL,
                        j->s3 ? j->s3[i]->data : NULL, p->numel, p->dtype, j->opt, stream);
}
#endif

/* Launches the device tensors' updates, one kernel each, on their devices'
 * compute streams; the host tensors are left to the threads. */
static ddpc_status device_steps_(const group_job_ *j) {
    for (int i = 0; i < j->n; i++) {
        ddpc_buffer *p = j->params[i];
        if (p->device == DDPC_CPU || p->numel == 0) continue;
#ifdef DDPC_WITH_CUDA
        void *stream;
        int prev;
        CHECK(ddpc_cuda_compute_stream(p->device, &stream));
        CHECK(ddpc_cuda_enter(p->device, &prev));
        cudaError_t e = (cudaError_t)(j->sgd ? sgd_kernel_(j, i, stream)
                                             : j->adam ? adam_kernel_(j, i, stream) : optim_kernel_(j, i, stream));
        ddpc_cuda_leave(prev);
        CUDACHECK(e);
#else
        return ddpc_cuda_require(p->device);
#endif
    }
    return DDPC_OK;
}

static ddpc_status host_starts_(group_job_ *j) {
    j->starts = malloc(((size_t)j->n + 1) * sizeof *j->starts);
    if (!j->starts) return DDPC_ERROR(DDPC_ERR_OOM, "out of host memory for an optimizer step");
    j->starts[0] = 0;
    for (int i = 0; i < j->n; i++)
        j->starts[i + 1] = j->starts[i] + (j->params[i]->device == DDPC_CPU ? j->params[i]->numel : 0);
    return DDPC_OK;
}

ddpc_status ddpc_op_sgd_step(int n, ddpc_buffer **params, ddpc_buffer **grads, ddpc_buffer **bufs,
                             const ddpc_sgd_args *args) {
    ddpc_buffer **lists[2] = {grads, bufs};
    const char *names[2] = {"gradient", "momentum buffer"};
    CHECK(check_group_(n, params, lists, names, 2, "sgd"));
    if (args->momentum != 0) {
        for (int i = 0; i < n; i++)
            if (!bufs || !bufs[i]) return DDPC_ERROR(DDPC_ERR_ARG, "sgd: momentum needs a buffer for parameter %d", i);
    }
    group_job_ j = {.n = n, .params = params, .grads = grads, .s1 = args->momentum != 0 ? bufs : NULL, .sgd = args,
                    .s1_unset = args->first};
    CHECK(device_steps_(&j));
    CHECK(host_starts_(&j));
    run_group_(&j, sgd_loop_);
    free(j.starts);
    return DDPC_OK;
}

ddpc_status ddpc_op_adam_step(int n, ddpc_buffer **params, ddpc_buffer **grads, ddpc_buffer **exp_avgs,
                              ddpc_buffer **exp_avg_sqs, ddpc_buffer **max_sqs, const ddpc_adam_args *args) {
    ddpc_buffer **lists[4] = {grads, exp_avgs, exp_avg_sqs, max_sqs};
    const char *names[4] = {"gradient", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    CHECK(check_group_(n, params, lists, names, 4, "adam"));
    for (int i = 0; i < n; i++)
        if (!exp_avgs[i] || !exp_avg_sqs[i] || (max_sqs && !max_sqs[i]))
            return DDPC_ERROR(DDPC_ERR_ARG, "adam: parameter %d has no state buffers", i);
    if (args->step < 1) return DDPC_ERROR(DDPC_ERR_ARG, "adam: step counts from 1, got %lld", (long long)args->step);
    double bc1 = 1 - pow(args->beta1, (double)args->step), bc2 = 1 - pow(args->beta2, (double)args->step);
    group_job_ j = {.n = n, .params = params, .grads = grads, .s1 = exp_avgs, .s2 = exp_avg_sqs, .s3 = max_sqs,
                    .adam = args, .step_size = args->lr / bc1, .bc2_sqrt = sqrt(bc2)};
    CHECK(device_steps_(&j));
    CHECK(host_starts_(&j));
    run_group_(&j, adam_loop_);
    free(j.starts);
    return DDPC_OK;
}

static const char *const optim_names_[DDPC_NOPTIM] = {"rmsprop", "adagrad", "adamax", "nadam", "radam", "adadelta"};

/* The step's constants (kernels/optim_rules.h) with PyTorch's scalar
 * formulas; *mu_product gets NAdam's product after this step. */
static void optim_consts_(const ddpc_optim_args *a, ddpc_optim_consts *c, double *mu_product) {
    double t = (double)a->step, wd = a->weight_decay;
    *c = (ddpc_optim_consts){.kind = a->kind, .centered = a->centered, .momentum_on = a->momentum > 0,
                             .sign = a->maximize ? -1 : 1, .l2 = a->decoupled ? 0 : wd,
                             .shrink = a->decoupled ? 1 - a->lr * wd : 1, .lr = a->lr, .eps = a->eps,
                             .beta1 = a->beta1, .beta = a->beta, .momentum = a->momentum};
    *mu_product = a->mu_product;
    switch (a->kind) {
    case DDPC_OPTIM_ADAGRAD: c->lr = a->lr / (1 + (t - 1) * a->lr_decay); break;
    case DDPC_OPTIM_ADAMAX: c->lr = a->lr / (1 - pow(a->beta1, t)); break;
    case DDPC_OPTIM_NADAM: {
        double mu = a->beta1 * (1 - 0.5 * pow(0.96, t * a->momentum_decay));
        double mu_next = a->beta1 * (1 - 0.5 * pow(0.96, (t + 1) * a->momentum_decay));
        *mu_product = a->mu_product * mu;
        c->bc2 = 1 - pow(a->beta, t);
        c->coef_g = -a->lr * (1 - mu) / (1 - *mu_product);
        c->coef_a = -a->lr * mu_next / (1 - *mu_product * mu_next);
        break;
    }
    case DDPC_OPTIM_RADAM: {
        /* The variance of the adaptive rate is tractable only once rho_t > 5;
         * before that the step is plain momentum (rect = 0). */
        double rho_inf = 2 / (1 - a->beta) - 1;
        c->bc1 = 1 - pow(a->beta1, t);
        c->bc2 = 1 - pow(a->beta, t);
        c->sqrt_bc2 = sqrt(c->bc2);
        double rho_t = rho_inf - 2 * t * pow(a->beta, t) / c->bc2;
        if (rho_t > 5) c->rect = sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
        break;
    }
    default: break;
    }
}

ddpc_status ddpc_op_optim_step(int n, ddpc_buffer **params, ddpc_buffer **grads, ddpc_buffer **s1, ddpc_buffer **s2,
                               ddpc_buffer **s3, ddpc_optim_args *args) {
    if ((unsigned)args->kind >= DDPC_NOPTIM)
        return DDPC_ERROR(DDPC_ERR_ARG, "optimizer step: unknown kind %d", (int)args->kind);
    const char *op = optim_names_[args->kind];
    /* Which state lists this kind with these options reads; the others are left alone. */
    int k = args->kind;
    int uses2 = k == DDPC_OPTIM_RMSPROP ? args->momentum > 0 : k != DDPC_OPTIM_ADAGRAD;
    int uses3 = k == DDPC_OPTIM_RMSPROP && args->centered;
    if (!uses2) s2 = NULL;
    if (!uses3) s3 = NULL;
    ddpc_buffer **lists[4] = {grads, s1, s2, s3};
    const char *names[4] = {"gradient", "first state", "second state", "third state"};
    CHECK(check_group_(n, params, lists, names, 4, op));
    for (int i = 0; i < n; i++)
        if (!s1 || !s1[i] || (uses2 && (!s2 || !s2[i])) || (uses3 && (!s3 || !s3[i])))
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: parameter %d lacks a state buffer", op, i);
    if (args->step < 1) return DDPC_ERROR(DDPC_ERR_ARG, "%s: step counts from 1, got %lld", op, (long long)args->step);
    ddpc_optim_consts c;
    double mu_product;
    optim_consts_(args, &c, &mu_product);
    group_job_ j = {.n = n, .params = params, .grads = grads, .s1 = s1, .s2 = s2, .s3 = s3, .opt = &c};
    CHECK(device_steps_(&j));
    CHECK(host_starts_(&j));
    run_group_(&j, optim_loop_);
    free(j.starts);
    args->mu_product = mu_product;
    return DDPC_OK;
}

/* ---- Python bindings -------------------------------------------------------------- */

/* Buffers of a Python sequence of length n (or NULL entries for None when allowed). */
static int collect_(PyObject *seq, Py_ssize_t n, int allow_none, const char *what, ddpc_buffer **out) {
    PyObject *fast = PySequence_Fast(seq, "optimizer step: expected a list of buffers");
    if (!fast) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "optimizer step: %zd %s for %zd parameters", PySequence_Fast_GET_SIZE(fast),
                     what, n);
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (o == Py_None && allow_none) {
            out[i] = NULL;
        } else if (ddpc_buffer_check(o)) {
            out[i] = (ddpc_buffer *)o;
        } else {
            PyErr_Format(PyExc_TypeError, "optimizer step: %s %zd is a %.100s, not a ddpc._C.Buffer", what, i,
                         Py_TYPE(o)->tp_name);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* The buffers stay alive during the released section: the caller's lists own them. */
static PyObject *run_step_(ddpc_status (*step)(void *), void *ctx, size_t nbytes) {
    ddpc_status st;
    if (nbytes >= (1 << 16)) {
        Py_BEGIN_ALLOW_THREADS st = step(ctx);
        Py_END_ALLOW_THREADS
    } else {
        st = step(ctx);
    }
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

typedef struct {
    int n;
    ddpc_buffer **params, **grads, **bufs, **m, **v, **vmax, **s1, **s2, **s3;
    ddpc_sgd_args sgd;
    ddpc_adam_args adam;
    ddpc_optim_args opt;
} step_ctx_;

static ddpc_status sgd_call_(void *c) {
    step_ctx_ *s = c;
    return ddpc_op_sgd_step(s->n, s->params, s->grads, s->bufs, &s->sgd);
}

static ddpc_status adam_call_(void *c) {
    step_ctx_ *s = c;
    return ddpc_op_adam_step(s->n, s->params, s->grads, s->m, s->v, s->vmax, &s->adam);
}

static ddpc_status optim_call_(void *c) {
    step_ctx_ *s = c;
    return ddpc_op_optim_step(s->n, s->params, s->grads, s->s1, s->s2, s->s3, &s->opt);
}

static size_t group_bytes_(ddpc_buffer **params, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += ddpc_buffer_nbytes(params[i]);
    return total;
}

static PyObject *py_sgd_step(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    static char *kwlist[] = {"params", "grads", "momentum_buffers", "lr", "momentum", "dampening", "weight_decay",
                             "nesterov", "first", "maximize", NULL};
    PyObject *lp, *lg, *lb;
    step_ctx_ s = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOddddppp:sgd_step", kwlist, &lp, &lg, &lb, &s.sgd.lr,
                                     &s.sgd.momentum, &s.sgd.dampening, &s.sgd.weight_decay, &s.sgd.nesterov,
                                     &s.sgd.first, &s.sgd.maximize))
        return NULL;
    Py_ssize_t n = PySequence_Size(lp);
    if (n < 0) return NULL;
    if (n > INT32_MAX) return PyErr_Format(PyExc_ValueError, "sgd_step: too many parameters");
    PyObject *res = NULL;
    ddpc_buffer **all = calloc(3 * (size_t)n + 1, sizeof *all);
    if (!all) return PyErr_NoMemory();
    s.n = (int)n, s.params = all, s.grads = all + n, s.bufs = all + 2 * n;
    if (collect_(lp, n, 0, "params", s.params) < 0 || collect_(lg, n, 0, "grads", s.grads) < 0 ||
        collect_(lb, n, s.sgd.momentum == 0, "momentum_buffers", s.bufs) < 0)
        goto exit;
    res = run_step_(sgd_call_, &s, group_bytes_(s.params, s.n));
exit:
    free(all);
    return res;
}

static PyObject *py_adam_step(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    static char *kwlist[] = {"params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "step", "lr", "beta1",
                             "beta2", "eps", "weight_decay", "decoupled", "maximize", NULL};
    PyObject *lp, *lg, *lm, *lv, *lx;
    step_ctx_ s = {0};
    long long step;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOLdddddpp:adam_step", kwlist, &lp, &lg, &lm, &lv, &lx,
                                     &step, &s.adam.lr, &s.adam.beta1, &s.adam.beta2, &s.adam.eps,
                                     &s.adam.weight_decay, &s.adam.decoupled, &s.adam.maximize))
        return NULL;
    s.adam.step = step;
    Py_ssize_t n = PySequence_Size(lp);
    if (n < 0) return NULL;
    if (n > INT32_MAX) return PyErr_Format(PyExc_ValueError, "adam_step: too many parameters");
    PyObject *res = NULL;
    ddpc_buffer **all = calloc(5 * (size_t)n + 1, sizeof *all);
    if (!all) return PyErr_NoMemory();
    s.n = (int)n, s.params = all, s.grads = all + n, s.m = all + 2 * n, s.v = all + 3 * n;
    s.vmax = lx == Py_None ? NULL : all + 4 * n;
    if (collect_(lp, n, 0, "params", s.params) < 0 || collect_(lg, n, 0, "grads", s.grads) < 0 ||
        collect_(lm, n, 0, "exp_avgs", s.m) < 0 || collect_(lv, n, 0, "exp_avg_sqs", s.v) < 0 ||
        (s.vmax && collect_(lx, n, 0, "max_exp_avg_sqs", s.vmax) < 0))
        goto exit;
    res = run_step_(adam_call_, &s, group_bytes_(s.params, s.n));
exit:
    free(all);
    return res;
}

static PyObject *py_optim_step(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    static char *kwlist[] = {"kind", "params", "grads", "state1", "state2", "state3", "step", "lr", "eps",
                             "weight_decay", "maximize", "beta1", "beta", "momentum", "centered", "lr_decay",
                             "momentum_decay", "decoupled", "mu_product", NULL};
    const char *kind;
    PyObject *lp, *lg, *l1, *l2, *l3;
    step_ctx_ s = {0};
    long long step;
    s.opt.mu_product = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sOOOOOLdddp|$dddpddpd:optim_step", kwlist, &kind, &lp, &lg, &l1,
                                     &l2, &l3, &step, &s.opt.lr, &s.opt.eps, &s.opt.weight_decay, &s.opt.maximize,
                                     &s.opt.beta1, &s.opt.beta, &s.opt.momentum, &s.opt.centered, &s.opt.lr_decay,
                                     &s.opt.momentum_decay, &s.opt.decoupled, &s.opt.mu_product))
        return NULL;
    int k = 0;
    while (k < DDPC_NOPTIM && strcmp(kind, optim_names_[k])) k++;
    if (k == DDPC_NOPTIM) return PyErr_Format(PyExc_ValueError, "optim_step: unknown optimizer '%s'", kind);
    s.opt.kind = (ddpc_optim_kind)k;
    s.opt.step = step;
    Py_ssize_t n = PySequence_Size(lp);
    if (n < 0) return NULL;
    if (n > INT32_MAX) return PyErr_Format(PyExc_ValueError, "optim_step: too many parameters");
    PyObject *res = NULL;
    ddpc_buffer **all = calloc(5 * (size_t)n + 1, sizeof *all);
    if (!all) return PyErr_NoMemory();
    s.n = (int)n, s.params = all, s.grads = all + n, s.s1 = all + 2 * n;
    s.s2 = l2 == Py_None ? NULL : all + 3 * n;
    s.s3 = l3 == Py_None ? NULL : all + 4 * n;
    if (collect_(lp, n, 0, "params", s.params) < 0 || collect_(lg, n, 0, "grads", s.grads) < 0 ||
        collect_(l1, n, 0, "state1", s.s1) < 0 || (s.s2 && collect_(l2, n, 0, "state2", s.s2) < 0) ||
        (s.s3 && collect_(l3, n, 0, "state3", s.s3) < 0))
        goto exit;
    res = run_step_(optim_call_, &s, group_bytes_(s.params, s.n));
    if (res && s.opt.kind == DDPC_OPTIM_NADAM) {
        Py_DECREF(res);
        res = PyFloat_FromDouble(s.opt.mu_product);
    }
exit:
    free(all);
    return res;
}

static PyMethodDef optim_methods[] = {
    {"sgd_step", (PyCFunction)(void (*)(void))py_sgd_step, METH_VARARGS | METH_KEYWORDS,
     "sgd_step(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay, nesterov, first, maximize)"},
    {"adam_step", (PyCFunction)(void (*)(void))py_adam_step, METH_VARARGS | METH_KEYWORDS,
     "adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay, "
     "decoupled, maximize): Adam, or AdamW when decoupled"},
    {"optim_step", (PyCFunction)(void (*)(void))py_optim_step, METH_VARARGS | METH_KEYWORDS,
     "optim_step(kind, params, grads, state1, state2, state3, step, lr, eps, weight_decay, maximize, *, beta1=0, "
     "beta=0, momentum=0, centered=False, lr_decay=0, momentum_decay=0, decoupled=False, mu_product=1): one step of "
     "'rmsprop', 'adagrad', 'adamax', 'nadam', 'radam' or 'adadelta' (kernels/optim_rules.h names the states); "
     "returns NAdam's new mu_product, None for the others"},
    {NULL, NULL, 0, NULL},
};

int ddpc_optim_register(PyObject *module) { return PyModule_AddFunctions(module, optim_methods); }
