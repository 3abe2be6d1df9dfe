/* The NCCL backend: a communicator per process group, collectives on a
 * per-device communication stream, work handles over CUDA events, the
 * watchdog (comm/watchdog.c), and the in-process multi-device all-reduce used
 * by DataParallel (with a copy-based fallback when NCCL is not compiled in or
 * cannot be loaded). NCCL is called through comm/nccl_lib.h's table, loaded
 * by each entry point: the communicator, the unique id, the multi-device path.
 *
 * Ordering: a collective's comm stream waits on an event recorded on the
 * compute stream, so it sees every queued op's output without a host sync;
 * Work.wait() makes the compute stream wait on the collective's completion
 * event, so later kernels see the reduced data, again without a host sync. */
#include "comm/nccl.h"

#include "buffer.h"
#include "comm/reduce.h"
#include "module.h"
#include "ops.h"

/* Reduction op codes shared with the cpu backend (ddpc.distributed.ReduceOp). */
enum { RED_SUM = DDPC_RED_SUM, RED_AVG = DDPC_RED_AVG, RED_MIN = DDPC_RED_MIN, RED_MAX = DDPC_RED_MAX,
       RED_PROD = DDPC_RED_PROD };

static ddpc_status check_same_(PyObject *bufs, const char *op, int reducing, ddpc_buffer ***out, Py_ssize_t *n);

/* ---- multi-device all-reduce and broadcast, copy-based path -------------------- */

/* A temporary buffer with the shape of `like` on `device` (not a Python object). */
static ddpc_status temp_like_(const ddpc_buffer *like, int device, ddpc_buffer *tmp, ddpc_block **block) {
    CHECK(ddpc_alloc(device, ddpc_buffer_nbytes(like), 0, block));
    memset(tmp, 0, sizeof *tmp);
    tmp->data = (*block)->ptr;
    tmp->ndim = 1;
    tmp->shape[0] = like->numel;
    tmp->numel = like->numel;
    tmp->dtype = like->dtype;
    tmp->device = device;
    return DDPC_OK;
}

static ddpc_status copy_all_reduce_(ddpc_buffer **b, Py_ssize_t n, int op) {
    if (op != RED_SUM && op != RED_AVG)
        return DDPC_ERROR(DDPC_ERR_ARG, "the copy-based multi-device all-reduce supports SUM and AVG only");
    ddpc_buffer tmp;
    ddpc_block *block = NULL;
    ddpc_status st = DDPC_OK;
    CHECK(temp_like_(b[0], b[0]->device, &tmp, &block));
    for (Py_ssize_t i = 1; i < n; i++) {
        CHECKGOTO(ddpc_op_copy(&tmp, b[i], 0), st, out_);
        CHECKGOTO(ddpc_op_binary(DDPC_ADD, b[0], b[0], &tmp), st, out_);
    }
    if (op == RED_AVG) CHECKGOTO(ddpc_op_scalar(DDPC_DIV, b[0], b[0], (double)n), st, out_);
    for (Py_ssize_t i = 1; i < n; i++) CHECKGOTO(ddpc_op_copy(b[i], b[0], 0), st, out_);
out_:
    ddpc_free(block);
    return st;
}

static ddpc_status copy_broadcast_(ddpc_buffer **b, Py_ssize_t n, Py_ssize_t root) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (i != root) CHECK(ddpc_op_copy(b[i], b[root], 0));
    return DDPC_OK;
}

/* The buffers of a multi-device collective: all alike; a reduction's of a
 * dtype it can add (a broadcast moves any dtype's bytes). */
static ddpc_status check_same_(PyObject *bufs, const char *op, int reducing, ddpc_buffer ***out, Py_ssize_t *n) {
    *n = PyList_GET_SIZE(bufs);
    if (*n == 0) return DDPC_ERROR(DDPC_ERR_ARG, "%s: no buffers given", op);
    ddpc_buffer **b = PyMem_RawCalloc((size_t)*n, sizeof *b);
    if (!b) return DDPC_ERROR(DDPC_ERR_OOM, "%s: out of memory", op);
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *o = PyList_GET_ITEM(bufs, i);
        if (!ddpc_buffer_check(o)) {
            PyMem_RawFree(b);
            return DDPC_ERROR(DDPC_ERR_TYPE, "%s: item %zd is not a Buffer", op, i);
        }
        b[i] = (ddpc_buffer *)o;
        if (reducing && (ddpc_dtype_is_complex(b[i]->dtype) || b[i]->dtype == DDPC_BOOL)) {
            PyMem_RawFree(b);
            return DDPC_ERROR(DDPC_ERR_TYPE, "%s does not support %s", op, ddpc_dtype_name(b[i]->dtype));
        }
        if (b[i]->numel != b[0]->numel || b[i]->dtype != b[0]->dtype) {
            ddpc_status st = DDPC_ERROR(DDPC_ERR_ARG, "%s: buffer %zd (%lld %s) differs from buffer 0 (%lld %s)", op, i,
                                        (long long)b[i]->numel, ddpc_dtype_name(b[i]->dtype), (long long)b[0]->numel,
                                        ddpc_dtype_name(b[0]->dtype));
            PyMem_RawFree(b);
            return st;
        }
    }
    *out = b;
    return DDPC_OK;
}

#ifdef DDPC_WITH_NCCL
#include <cuda_runtime_api.h>
#include <stdatomic.h>

#include "comm/nccl_lib.h"
#include "comm/pycomm.h"
#include "comm/watchdog.h"

/* Complex tensors reach NCCL as their real pairs (the Python layer's real_pairs), never as complex. */
static const ncclDataType_t nccl_types_[DDPC_NDTYPES] = {
    [DDPC_FLOAT32] = ncclFloat32, [DDPC_FLOAT64] = ncclFloat64, [DDPC_FLOAT16] = ncclFloat16,
    [DDPC_BFLOAT16] = ncclBfloat16, [DDPC_INT32] = ncclInt32, [DDPC_INT64] = ncclInt64,
    [DDPC_UINT8] = ncclUint8, [DDPC_BOOL] = ncclUint8};
static const ncclRedOp_t nccl_ops_[] = {ncclSum, ncclAvg, ncclMin, ncclMax, ncclProd};

/* Calls ncclNAME(ARGS) through the loaded table; ARGS is parenthesised. */
#define NCCLCHECK(name, args)                                                      \
    do {                                                                           \
        ncclResult_t r_ = ddpc_nccl.name args;                                     \
        if (r_ != ncclSuccess && r_ != ncclInProgress)                             \
            return DDPC_ERROR(DDPC_ERR_DIST, "nccl" #name " failed: %s", ddpc_nccl.GetErrorString(r_)); \
    } while (0)

/* ---- in-process communicators over distinct local devices -------------------- */

typedef struct multi_comms_ {
    int n;
    int devices[DDPC_MAX_DEVICES];
    ncclComm_t comms[DDPC_MAX_DEVICES];
    pthread_mutex_t mu; /* one collective at a time on these communicators (it runs without the GIL) */
    pid_t pid;          /* the process that made them */
    struct multi_comms_ *next;
} multi_comms_;

static multi_comms_ *multi_cache_; /* the list is guarded by the GIL: only touched while it is held */

static ddpc_status multi_comms_for_(ddpc_buffer **b, Py_ssize_t n, multi_comms_ **out) {
    for (multi_comms_ *m = multi_cache_; m; m = m->next) {
        int same = m->n == n;
        for (Py_ssize_t i = 0; same && i < n; i++) same = m->devices[i] == b[i]->device;
        if (same) {
            *out = m;
            return DDPC_OK;
        }
    }
    multi_comms_ *m = calloc(1, sizeof *m);
    if (!m) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for communicators");
    m->n = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) m->devices[i] = b[i]->device;
    int rc = pthread_mutex_init(&m->mu, NULL);
    if (rc != 0) {
        free(m);
        return DDPC_ERROR(DDPC_ERR_SYS, "pthread_mutex_init failed: %s", strerror(rc));
    }
    m->pid = getpid();
    ncclResult_t r = ddpc_nccl.CommInitAll(m->comms, m->n, m->devices);
    if (r != ncclSuccess) {
        pthread_mutex_destroy(&m->mu);
        free(m);
        return DDPC_ERROR(DDPC_ERR_DIST, "ncclCommInitAll over %d devices failed: %s", (int)n,
                          ddpc_nccl.GetErrorString(r));
    }
    m->next = multi_cache_;
    multi_cache_ = m;
    *out = m;
    return DDPC_OK;
}

/* Destroys one set as NCCL's single-process example does: each device's
 * compute stream synchronised (the collectives ran there), then every
 * communicator finalized and destroyed (aborted where finalizing fails). NCCL
 * makes each communicator's device current: the caller's comes back after. */
static ddpc_status multi_comms_destroy_(multi_comms_ *m) {
    ddpc_status st = DDPC_OK;
    for (int i = 0; i < m->n; i++) {
        void *stream;
        ddpc_status r = ddpc_cuda_compute_stream(m->devices[i], &stream);
        if (r == DDPC_OK) r = ddpc_cuda_stream_synchronize(stream);
        if (r != DDPC_OK && st == DDPC_OK) st = r;
    }
    int prev;
    ddpc_status r = ddpc_cuda_enter(m->devices[0], &prev);
    if (r != DDPC_OK) return st == DDPC_OK ? r : st;
    /* One thread drives every communicator of the set, and finalizing one
     * waits for its peers to quiesce: they are finalized in one group, as
     * their collectives are run, then destroyed (locally) one by one. */
    ncclResult_t fins[DDPC_MAX_DEVICES];
    ncclResult_t group = ddpc_nccl.GroupStart();
    for (int i = 0; i < m->n; i++) fins[i] = group == ncclSuccess ? ddpc_nccl.CommFinalize(m->comms[i]) : group;
    if (group == ncclSuccess) {
        ncclResult_t end = ddpc_nccl.GroupEnd();
        for (int i = 0; i < m->n && end != ncclSuccess; i++)
            if (fins[i] == ncclSuccess) fins[i] = end;
    }
    for (int i = 0; i < m->n; i++) {
        ncclResult_t fin = fins[i];
        ncclResult_t res = fin == ncclSuccess ? ddpc_nccl.CommDestroy(m->comms[i]) : ddpc_nccl.CommAbort(m->comms[i]);
        if (fin != ncclSuccess && st == DDPC_OK)
            st = DDPC_ERROR(DDPC_ERR_DIST, "ncclCommFinalize of the communicator on cuda:%d failed: %s", m->devices[i],
                            ddpc_nccl.GetErrorString(fin));
        else if (res != ncclSuccess && st == DDPC_OK)
            st = DDPC_ERROR(DDPC_ERR_DIST, "ncclCommDestroy of the communicator on cuda:%d failed: %s", m->devices[i],
                            ddpc_nccl.GetErrorString(res));
    }
    ddpc_cuda_leave(prev);
    return st;
}

/* Destroys the cached communicators; returns how many sets it destroyed.
 * Sets made by a parent process before it forked this one are dropped
 * without an NCCL or CUDA call (they are not this process's to destroy, and
 * its driver state does not survive the fork), and a set in use by a
 * collective on another thread is left alone. */
static ddpc_status multi_comms_release_(int *released) {
    multi_comms_ *mine = NULL, **link = &multi_cache_;
    pid_t me = getpid();
    while (*link) {
        multi_comms_ *m = *link;
        if (m->pid == me && pthread_mutex_trylock(&m->mu) != 0) {
            link = &m->next;
            continue;
        }
        *link = m->next;
        if (m->pid == me) { /* else forgotten: its mutex may be held by a thread of the parent */
            m->next = mine;
            mine = m;
        }
    }
    ddpc_status st = DDPC_OK;
    *released = 0;
    Py_BEGIN_ALLOW_THREADS
    while (mine) {
        multi_comms_ *m = mine;
        mine = m->next;
        ddpc_status r = multi_comms_destroy_(m);
        if (r != DDPC_OK && st == DDPC_OK) st = r;
        pthread_mutex_unlock(&m->mu);
        pthread_mutex_destroy(&m->mu);
        free(m);
        ++*released;
    }
    Py_END_ALLOW_THREADS
    return st;
}

static int distinct_cuda_(ddpc_buffer **b, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (b[i]->device == DDPC_CPU) return 0;
        for (Py_ssize_t j = 0; j < i; j++)
            if (b[j]->device == b[i]->device) return 0;
    }
    return n > 1;
}

static ddpc_status nccl_multi_(ddpc_buffer **b, Py_ssize_t n, int op, Py_ssize_t root, multi_comms_ *m) {
    void *streams[DDPC_MAX_DEVICES];
    for (Py_ssize_t i = 0; i < n; i++) CHECK(ddpc_cuda_compute_stream(b[i]->device, &streams[i]));
    NCCLCHECK(GroupStart, ());
    ddpc_status st = DDPC_OK;
    for (Py_ssize_t i = 0; i < n && st == DDPC_OK; i++) {
        ncclResult_t r;
        if (root < 0)
            r = ddpc_nccl.AllReduce(b[i]->data, b[i]->data, (size_t)b[i]->numel, nccl_types_[b[i]->dtype],
                                    nccl_ops_[op], m->comms[i], (cudaStream_t)streams[i]);
        else /* bytes: a broadcast moves any dtype */
            r = ddpc_nccl.Broadcast(b[i]->data, b[i]->data, ddpc_buffer_nbytes(b[i]), ncclUint8, (int)root,
                                    m->comms[i], (cudaStream_t)streams[i]);
        if (r != ncclSuccess)
            st = DDPC_ERROR(DDPC_ERR_DIST, "multi-device collective: %s", ddpc_nccl.GetErrorString(r));
    }
    ncclResult_t r = ddpc_nccl.GroupEnd();
    if (st == DDPC_OK && r != ncclSuccess)
        st = DDPC_ERROR(DDPC_ERR_DIST, "ncclGroupEnd failed: %s", ddpc_nccl.GetErrorString(r));
    return st;
}
#endif

/* op >= 0: all-reduce with that op; op < 0: broadcast from `root`. */
static PyObject *multi_collective_(PyObject *bufs, int op, Py_ssize_t root, const char *name) {
    if (!PyList_Check(bufs)) return PyErr_Format(PyExc_TypeError, "%s expects a list of Buffers", name);
    ddpc_buffer **b = NULL;
    Py_ssize_t n = 0;
    ddpc_status st = check_same_(bufs, name, op >= 0, &b, &n);
    if (st != DDPC_OK) return ddpc_raise(st);
    if (op > RED_PROD || (op < 0 && (root < 0 || root >= n))) {
        PyMem_RawFree(b);
        return PyErr_Format(PyExc_ValueError, "%s: invalid op or root", name);
    }
    if (b[0]->numel == 0) { /* every buffer is empty: no NCCL call, no communicators made for it */
        PyMem_RawFree(b);
        Py_RETURN_NONE;
    }
#ifdef DDPC_WITH_NCCL
    /* Where NCCL does not load, the copies below do the work, as in a build without NCCL. */
    if (distinct_cuda_(b, n) && ddpc_nccl_available()) {
        multi_comms_ *m = NULL;
        st = multi_comms_for_(b, n, &m);
        if (st == DDPC_OK) {
            Py_BEGIN_ALLOW_THREADS
            pthread_mutex_lock(&m->mu);
            st = nccl_multi_(b, n, op, op < 0 ? root : -1, m);
            pthread_mutex_unlock(&m->mu);
            Py_END_ALLOW_THREADS
        }
        PyMem_RawFree(b);
        if (st != DDPC_OK) return ddpc_raise(st);
        Py_RETURN_NONE;
    }
#endif
    Py_BEGIN_ALLOW_THREADS
    st = op >= 0 ? copy_all_reduce_(b, n, op) : copy_broadcast_(b, n, root);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(b);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_multi_all_reduce(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *bufs;
    int op = RED_SUM;
    if (!ddpc_parse_args(args, "O|i:multi_all_reduce", &bufs, &op)) return NULL;
    if (op < 0) return PyErr_Format(PyExc_ValueError, "invalid reduce op %d", op);
    return multi_collective_(bufs, op, 0, "multi_all_reduce");
}

static PyObject *py_multi_broadcast(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *bufs;
    Py_ssize_t root = 0;
    if (!ddpc_parse_args(args, "O|n:multi_broadcast", &bufs, &root)) return NULL;
    return multi_collective_(bufs, -1, root, "multi_broadcast");
}

static PyObject *py_multi_release(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    int released = 0;
#ifdef DDPC_WITH_NCCL
    ddpc_status st = multi_comms_release_(&released);
    if (st != DDPC_OK) return ddpc_raise(st);
#endif
    return PyLong_FromLong(released);
}

static PyMethodDef multi_methods[] = {
    {"multi_all_reduce", py_multi_all_reduce, METH_VARARGS,
     "multi_all_reduce(buffers, op=SUM): in-place all-reduce over buffers on distinct local devices "
     "(NCCL when it loads and every buffer is on its own GPU, else copies)"},
    {"multi_broadcast", py_multi_broadcast, METH_VARARGS,
     "multi_broadcast(buffers, root=0): copy buffers[root] into the others"},
    {"multi_release", py_multi_release, METH_NOARGS,
     "destroy the NCCL communicators the multi-device collectives made (they make new ones when next called); "
     "returns how many sets of them were destroyed"},
    {NULL, NULL, 0, NULL},
};

#ifdef DDPC_WITH_NCCL
/* ---- the process-group communicator ------------------------------------------ */

/* NCCL allows one thread at a time on a communicator, and the watchdog
 * thread queries and aborts it while the caller's thread enqueues: `mu`
 * guards `comm` and every NCCL call on it, held for one call at a time. The
 * watchdog takes it while holding its own mutex, so a thread holding `mu`
 * never waits for the watchdog's. An abort requested inside an open group
 * waits for ncclGroupEnd, which still refers to the communicator. */
typedef struct {
    PyObject_HEAD
    ncclComm_t comm;       /* NULL once aborted */
    pthread_mutex_t mu;
    int mu_ready;
    int device, rank, size;
    _Atomic double timeout_s; /* of the collectives enqueued from now on without one of their own */
    cudaStream_t stream;
    ddpc_watchdog wd;
    int wd_ready;
    int group_depth;       /* under mu */
    int abort_pending;     /* under mu: abort at the end of the open group */
    PyObject *group_works; /* works created inside coalesce(), completed at group_end */
} nccl_comm;

typedef struct {
    PyObject_HEAD
    nccl_comm *comm;
    cudaEvent_t done;      /* recorded on the comm stream after the collective */
    double timeout_s;      /* the collective's, for the watchdog entry group_end makes inside coalesce() */
    PyObject *keep;        /* buffers the collective reads or writes */
    int waited;
} nccl_work;

static PyTypeObject *nccl_comm_type_, *nccl_work_type_;

/* mu is held. */
static void abort_locked_(nccl_comm *c) {
    if (c->comm) ddpc_nccl.CommAbort(c->comm);
    c->comm = NULL;
}

/* The error for a call on an aborted communicator; mu is not held. */
static ddpc_status aborted_(nccl_comm *c) {
    CHECK(ddpc_watchdog_error(&c->wd));
    return DDPC_ERROR(DDPC_ERR_DIST, "the NCCL communicator of rank %d was aborted", c->rank);
}

/* Waits out ncclInProgress of a non-blocking communicator, up to `timeout_s`.
 * An enqueue settles within microseconds, so the first polls only yield; an
 * init or a split can take seconds, so later ones sleep, up to 1 ms a poll,
 * rather than hold a core the ranks' other threads may need. */
static ddpc_status settle_(nccl_comm *c, const char *what, double timeout_s) {
    double deadline = ddpc_watchdog_now() + timeout_s;
    long pause_ns = 0;
    for (;;) {
        ncclResult_t async = ncclSuccess, r = ncclSuccess;
        char last[512] = "";
        int gone, late = ddpc_watchdog_now() > deadline;
        pthread_mutex_lock(&c->mu);
        gone = !c->comm;
        if (!gone) {
            r = ddpc_nccl.CommGetAsyncError(c->comm, &async);
            if (r == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
                snprintf(last, sizeof last, "%s", ddpc_nccl.GetLastError(c->comm));
            if (r == ncclSuccess && async == ncclInProgress && late) abort_locked_(c);
        }
        pthread_mutex_unlock(&c->mu);
        if (gone) return aborted_(c);
        if (r != ncclSuccess)
            return DDPC_ERROR(DDPC_ERR_DIST, "ncclCommGetAsyncError failed: %s", ddpc_nccl.GetErrorString(r));
        if (async == ncclSuccess) return DDPC_OK;
        if (async != ncclInProgress)
            return DDPC_ERROR(DDPC_ERR_DIST, "%s on rank %d failed: %s (%s)", what, c->rank,
                              ddpc_nccl.GetErrorString(async), last);
        if (late)
            return DDPC_ERROR(DDPC_ERR_TIMEOUT, "%s on rank %d did not finish within %.1f s; the communicator was aborted",
                              what, c->rank, timeout_s);
        if (pause_ns < 1000) {
            pause_ns += 10; /* about 100 yields first */
            sched_yield();
        } else {
            nanosleep(&(struct timespec){0, pause_ns}, NULL);
            if (pause_ns < 1000000) pause_ns *= 2;
        }
    }
}

static int wd_async_error_(void *ctx, char *msg, size_t n) {
    nccl_comm *c = ctx;
    ncclResult_t async = ncclSuccess;
    int failed = 0;
    pthread_mutex_lock(&c->mu);
    if (c->comm) {
        if (ddpc_nccl.CommGetAsyncError(c->comm, &async) != ncclSuccess) async = ncclInternalError;
        failed = async != ncclSuccess && async != ncclInProgress;
        if (failed) snprintf(msg, n, "%s (%s)", ddpc_nccl.GetErrorString(async), ddpc_nccl.GetLastError(c->comm));
    }
    pthread_mutex_unlock(&c->mu);
    return failed;
}

static int wd_query_(void *ctx, void *event, char *msg, size_t n) {
    (void)ctx;
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) return 0;
    snprintf(msg, n, "%s", cudaGetErrorString(e));
    return -1;
}

static void wd_abort_(void *ctx) {
    nccl_comm *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (c->group_depth > 0) c->abort_pending = 1;
    else abort_locked_(c);
    pthread_mutex_unlock(&c->mu);
}

static void wd_release_(void *ctx, void *event) {
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)event);
}

/* Unchecked: should it fail, the watchdog's first event query reports it. */
static void wd_thread_start_(void *ctx) { cudaSetDevice(((nccl_comm *)ctx)->device); }

static const ddpc_watchdog_ops wd_ops_ = {wd_async_error_, wd_query_, wd_abort_, wd_release_, wd_thread_start_};

static ddpc_status comm_init_(nccl_comm *c, const ncclUniqueId *id) {
    CHECK(ddpc_cuda_set_device(c->device));
    CUDACHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; /* so a stuck peer can be timed out and aborted */
    NCCLCHECK(CommInitRankConfig, (&c->comm, c->size, *id, c->rank, &config));
    return settle_(c, "ncclCommInitRankConfig", c->timeout_s);
}

static PyObject *comm_new_(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"unique_id", "rank", "size", "device", "timeout", NULL};
    Py_buffer id;
    int rank, size, device;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*iiid:NcclComm", kwlist, &id, &rank, &size, &device, &timeout))
        return NULL;
    ddpc_status st = ddpc_nccl_load();
    if (st != DDPC_OK) {
        PyBuffer_Release(&id);
        return ddpc_raise(st);
    }
    if (id.len != (Py_ssize_t)sizeof(ncclUniqueId) || size < 1 || rank < 0 || rank >= size || timeout <= 0) {
        PyBuffer_Release(&id);
        return PyErr_Format(PyExc_ValueError, "NcclComm: invalid unique id (%zd bytes), rank %d, size %d or timeout",
                            id.len, rank, size);
    }
    nccl_comm *c = (nccl_comm *)type->tp_alloc(type, 0);
    if (!c) {
        PyBuffer_Release(&id);
        return NULL;
    }
    c->rank = rank;
    c->size = size;
    c->device = device;
    c->timeout_s = timeout;
    int rc = pthread_mutex_init(&c->mu, NULL);
    if (rc) {
        PyBuffer_Release(&id);
        Py_DECREF(c);
        return PyErr_Format(PyExc_OSError, "pthread_mutex_init failed: %s", strerror(rc));
    }
    c->mu_ready = 1;
    c->group_works = PyList_New(0);
    if (!c->group_works) {
        PyBuffer_Release(&id);
        Py_DECREF(c);
        return NULL;
    }
    st = ddpc_watchdog_init(&c->wd, &wd_ops_, c, rank, size);
    if (st == DDPC_OK) {
        c->wd_ready = 1;
        ncclUniqueId uid;
        memcpy(&uid, id.buf, sizeof uid);
        Py_BEGIN_ALLOW_THREADS
        st = comm_init_(c, &uid);
        if (st == DDPC_OK) st = ddpc_watchdog_start(&c->wd, 0.1);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&id);
    if (st != DDPC_OK) {
        Py_DECREF(c);
        return ddpc_raise(st);
    }
    return (PyObject *)c;
}

static void comm_dealloc_(nccl_comm *c) {
    if (c->wd_ready) {
        Py_BEGIN_ALLOW_THREADS
        ddpc_watchdog_free(&c->wd);
        Py_END_ALLOW_THREADS
    }
    if (c->comm) {
        Py_BEGIN_ALLOW_THREADS
        /* Finalize flushes queued work; abort if it cannot (a peer is gone). */
        ncclResult_t fin = ddpc_nccl.CommFinalize(c->comm);
        if (fin == ncclSuccess || fin == ncclInProgress) {
            /* Polled with a sleep in between: flushing can take seconds,
             * and this thread has nothing else to do meanwhile. */
            ncclResult_t async = ncclInProgress;
            double deadline = ddpc_watchdog_now() + 10.0;
            for (;;) {
                if (ddpc_nccl.CommGetAsyncError(c->comm, &async) != ncclSuccess) break;
                if (async != ncclInProgress || ddpc_watchdog_now() >= deadline) break;
                nanosleep(&(struct timespec){0, 1000000}, NULL);
            }
            if (async == ncclSuccess) ddpc_nccl.CommDestroy(c->comm);
            else ddpc_nccl.CommAbort(c->comm);
        } else {
            ddpc_nccl.CommAbort(c->comm);
        }
        Py_END_ALLOW_THREADS
    }
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->mu_ready) pthread_mutex_destroy(&c->mu);
    Py_XDECREF(c->group_works);
    PyTypeObject *tp = Py_TYPE(c);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

/* Orders the comm stream after the compute stream. */
static ddpc_status comm_stream_after_compute_(nccl_comm *c) {
    void *compute;
    CHECK(ddpc_cuda_compute_stream(c->device, &compute));
    return ddpc_cuda_stream_after(c->device, c->stream, c->device, compute);
}

/* Records the completion events of a collective (one for the work, one for
 * the watchdog, which gives it `timeout_s` once it can start). */
static ddpc_status record_done_(nccl_comm *c, const char *op, int64_t count, ddpc_dtype dt, double timeout_s,
                                cudaEvent_t *done) {
    cudaEvent_t wd_ev;
    ddpc_status st = DDPC_OK;
    uint64_t seq;
    CUDACHECK(cudaEventCreateWithFlags(done, cudaEventDisableTiming));
    CUDACHECKGOTO(cudaEventCreateWithFlags(&wd_ev, cudaEventDisableTiming), st, fail_done_);
    CUDACHECKGOTO(cudaEventRecord(*done, c->stream), st, fail_);
    CUDACHECKGOTO(cudaEventRecord(wd_ev, c->stream), st, fail_);
    CHECKGOTO(ddpc_watchdog_record(&c->wd, op, count, ddpc_dtype_name(dt), wd_ev, timeout_s, &seq), st, fail_);
    return DDPC_OK;
fail_:
    cudaEventDestroy(wd_ev);
fail_done_:
    cudaEventDestroy(*done);
    return st;
}

typedef struct {
    int kind; /* 0 all_reduce, 1 broadcast, 2 all_gather, 3 reduce_scatter, 4 send, 5 recv, 6 reduce, 7 gather,
                 8 scatter; a gather's output and a scatter's input are the root's alone, the part elsewhere */
    ddpc_buffer *out, *in;
    int op, peer;
    double timeout_s; /* 0 when parsed: the communicator's, fixed by comm_collective_ */
} coll_;

static const char *coll_names_[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "send", "recv",
                                    "reduce", "gather", "scatter"};

enum { KIND_SEND = 4, KIND_REDUCE = 6, KIND_GATHER = 7, KIND_SCATTER = 8 };

static int reduces_(int kind) { return kind == 0 || kind == 3 || kind == KIND_REDUCE; }
static int rooted_(int kind) { return kind == 1 || kind >= KIND_REDUCE; }

/* This rank's block of a gather's output or a scatter's input (at the root). */
static char *own_block_(const nccl_comm *c, const coll_ *a, int q) {
    ddpc_buffer *whole = a->kind == KIND_GATHER ? a->out : a->in;
    return (char *)whole->data + (size_t)q * (size_t)whole->numel / (size_t)c->size * ddpc_dtype_size(whole->dtype);
}

/* gather and scatter, which NCCL lacks, as PyTorch makes them: the root
 * receives from (sends to) every other rank in one group of point-to-point
 * calls; its own block is copied by coll_enqueue_. */
static ncclResult_t gather_scatter_locked_(nccl_comm *c, const coll_ *a) {
    int gather = a->kind == KIND_GATHER;
    ddpc_buffer *part = gather ? a->in : a->out;
    size_t n = (size_t)part->numel;
    ncclDataType_t dt = nccl_types_[part->dtype];
    if (c->rank != a->peer)
        return gather ? ddpc_nccl.Send(part->data, n, dt, a->peer, c->comm, c->stream)
                      : ddpc_nccl.Recv(part->data, n, dt, a->peer, c->comm, c->stream);
    ncclResult_t r = ddpc_nccl.GroupStart();
    if (r != ncclSuccess) return r;
    for (int q = 0; q < c->size && r == ncclSuccess; q++)
        if (q != c->rank)
            r = gather ? ddpc_nccl.Recv(own_block_(c, a, q), n, dt, q, c->comm, c->stream)
                       : ddpc_nccl.Send(own_block_(c, a, q), n, dt, q, c->comm, c->stream);
    ncclResult_t e = ddpc_nccl.GroupEnd();
    return r != ncclSuccess ? r : e;
}

/* Enqueues one collective; mu is held and the communicator is live. */
static ncclResult_t enqueue_locked_(nccl_comm *c, const coll_ *a) {
    ncclDataType_t dt = nccl_types_[a->in->dtype];
    size_t n = (size_t)a->in->numel;
    void *in = a->in->data, *out = a->out->data;
    switch (a->kind) {
    case 0: return ddpc_nccl.AllReduce(in, out, n, dt, nccl_ops_[a->op], c->comm, c->stream);
    case 1: return ddpc_nccl.Broadcast(in, out, n, dt, a->peer, c->comm, c->stream);
    case 2: return ddpc_nccl.AllGather(in, out, n, dt, c->comm, c->stream);
    case 3: return ddpc_nccl.ReduceScatter(in, out, (size_t)a->out->numel, dt, nccl_ops_[a->op], c->comm, c->stream);
    case 4: return ddpc_nccl.Send(in, n, dt, a->peer, c->comm, c->stream);
    case 5: return ddpc_nccl.Recv(out, n, dt, a->peer, c->comm, c->stream);
    case KIND_REDUCE: return ddpc_nccl.Reduce(in, out, n, dt, nccl_ops_[a->op], a->peer, c->comm, c->stream);
    default: return gather_scatter_locked_(c, a);
    }
}

static ddpc_status coll_enqueue_(nccl_comm *c, const coll_ *a, cudaEvent_t *done) {
    CHECK(ddpc_watchdog_error(&c->wd));
    CHECK(comm_stream_after_compute_(c));
    /* Nothing to move: no NCCL call (some NCCL versions check a zero-size
     * buffer's pointer, or mishandled zero-byte sends and receives). Every
     * rank skips alike: a collective's ranks pass the same count, as a send
     * and the recv it matches do, so the other sends keep their pairing. The
     * work still completes in stream order through its event. */
    int empty = a->in->numel == 0;
    pthread_mutex_lock(&c->mu);
    int gone = !c->comm;
    ncclResult_t r = gone || empty ? ncclSuccess : enqueue_locked_(c, a);
    pthread_mutex_unlock(&c->mu);
    if (gone) return aborted_(c);
    if (r != ncclSuccess && r != ncclInProgress)
        return DDPC_ERROR(DDPC_ERR_DIST, "%s on rank %d failed: %s", coll_names_[a->kind], c->rank,
                          ddpc_nccl.GetErrorString(r));
    if (!empty && (a->kind == KIND_GATHER || a->kind == KIND_SCATTER) && c->rank == a->peer) {
        size_t bytes = (size_t)(a->kind == KIND_GATHER ? a->in : a->out)->numel * ddpc_dtype_size(a->in->dtype);
        CUDACHECK(cudaMemcpyAsync(a->kind == KIND_GATHER ? own_block_(c, a, c->rank) : a->out->data,
                                  a->kind == KIND_GATHER ? a->in->data : own_block_(c, a, c->rank), bytes,
                                  cudaMemcpyDeviceToDevice, c->stream));
    }
    if (c->group_depth > 0) {
        *done = NULL; /* recorded by group_end, after ncclGroupEnd */
        return DDPC_OK;
    }
    if (!empty) CHECK(settle_(c, coll_names_[a->kind], a->timeout_s));
    return record_done_(c, coll_names_[a->kind], a->in->numel, a->in->dtype, a->timeout_s, done);
}

/* coll_enqueue_ with the communicator's device current: the events it makes
 * must be on the comm stream's device, whichever thread asks. */
static ddpc_status coll_run_(nccl_comm *c, const coll_ *a, cudaEvent_t *done) {
    int prev;
    CHECK(ddpc_cuda_enter(c->device, &prev));
    ddpc_status st = coll_enqueue_(c, a, done);
    ddpc_cuda_leave(prev);
    return st;
}

static ddpc_status check_coll_(nccl_comm *c, const coll_ *a) {
    const char *name = coll_names_[a->kind];
    if (a->in->device != c->device || a->out->device != c->device)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s on rank %d: tensors must be on cuda:%d, the communicator's device", name,
                          c->rank, c->device);
    if (a->in->dtype != a->out->dtype) return DDPC_ERROR(DDPC_ERR_TYPE, "%s: input and output dtypes differ", name);
    if (ddpc_dtype_is_complex(a->in->dtype))
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s on nccl takes a complex tensor as its real pairs, not as %s", name,
                          ddpc_dtype_name(a->in->dtype));
    int root = rooted_(a->kind) && c->rank == a->peer;
    /* Only the root's buffer of a reduce is written, and a gather's other ranks have only their part. */
    int writes = a->kind != KIND_SEND && (a->kind != KIND_REDUCE || root) && (a->kind != KIND_GATHER || root);
    if (writes && a->out->readonly) return DDPC_ERROR(DDPC_ERR_ARG, "%s: the output is read-only", name);
    if (rooted_(a->kind) && (a->peer < 0 || a->peer >= c->size))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: root %d is not in a group of %d", name, a->peer, c->size);
    if (a->kind >= 4 && a->kind <= 5 && (a->peer < 0 || a->peer >= c->size))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: rank %d is not in a group of %d", name, a->peer, c->size);
    int gathers = a->kind == 2 || (a->kind == KIND_GATHER && root);
    int scatters = a->kind == 3 || (a->kind == KIND_SCATTER && root);
    if (scatters && a->in->numel != a->out->numel * c->size)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: input has %lld elements, expected %d x %lld", name,
                          (long long)a->in->numel, c->size, (long long)a->out->numel);
    int64_t want_out = gathers ? a->in->numel * c->size : a->in->numel;
    if (!scatters && a->out->numel != want_out)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: output has %lld elements, expected %lld", name, (long long)a->out->numel,
                          (long long)want_out);
    if (reduces_(a->kind) && (a->op < 0 || a->op > RED_PROD))
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: unknown reduce op %d", name, a->op);
    return DDPC_OK;
}

static PyObject *work_new_(nccl_comm *c, cudaEvent_t done, double timeout_s, PyObject *keep) {
    nccl_work *w = (nccl_work *)nccl_work_type_->tp_alloc(nccl_work_type_, 0);
    if (!w) {
        if (done) cudaEventDestroy(done);
        return NULL;
    }
    Py_INCREF(c);
    w->comm = c;
    w->done = done;
    w->timeout_s = timeout_s;
    Py_INCREF(keep);
    w->keep = keep;
    if (!done && PyList_Append(c->group_works, (PyObject *)w) < 0) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

/* The collective's timeout is fixed here, as it is enqueued: a later
 * set_timeout changes only the collectives enqueued after it. */
static PyObject *comm_collective_(nccl_comm *c, coll_ *a, PyObject *keep) {
    if (!(a->timeout_s > 0)) a->timeout_s = atomic_load(&c->timeout_s);
    ddpc_status st = check_coll_(c, a);
    if (st == DDPC_OK && reduces_(a->kind)) {
        a->op = ddpc_redop_on((ddpc_redop)a->op, a->in->dtype);
        if (a->op < 0)
            st = DDPC_ERROR(DDPC_ERR_TYPE, "%s: Cannot use ReduceOp.AVG with boolean inputs", coll_names_[a->kind]);
    }
    cudaEvent_t done = NULL;
    if (st == DDPC_OK) {
        Py_BEGIN_ALLOW_THREADS
        st = coll_run_(c, a, &done);
        Py_END_ALLOW_THREADS
    }
    if (st != DDPC_OK) return ddpc_raise(st);
    return work_new_(c, done, a->timeout_s, keep);
}

/* A collective's arguments are positional (two or three of them), but for
 * the keyword `timeout` (seconds, or None for the communicator's). */
static char *two_then_timeout_[] = {"", "", "timeout", NULL};
static char *three_then_timeout_[] = {"", "", "", "timeout", NULL};

static PyObject *comm_all_reduce(nccl_comm *c, PyObject *args, PyObject *kwds) {
    coll_ a = {.kind = 0};
    if (!ddpc_parse_args_kw(args, kwds, "O&i|$O&:all_reduce", two_then_timeout_, ddpc_arg_buffer, &a.in, &a.op,
                            ddpc_arg_timeout, &a.timeout_s))
        return NULL;
    a.out = a.in;
    return comm_collective_(c, &a, args);
}

static PyObject *comm_broadcast(nccl_comm *c, PyObject *args, PyObject *kwds) {
    coll_ a = {.kind = 1};
    if (!ddpc_parse_args_kw(args, kwds, "O&i|$O&:broadcast", two_then_timeout_, ddpc_arg_buffer, &a.in, &a.peer,
                            ddpc_arg_timeout, &a.timeout_s))
        return NULL;
    a.out = a.in;
    return comm_collective_(c, &a, args);
}

static PyObject *comm_all_gather(nccl_comm *c, PyObject *args, PyObject *kwds) {
    coll_ a = {.kind = 2};
    if (!ddpc_parse_args_kw(args, kwds, "O&O&|$O&:all_gather", two_then_timeout_, ddpc_arg_buffer, &a.out,
                            ddpc_arg_buffer, &a.in, ddpc_arg_timeout, &a.timeout_s))
        return NULL;
    return comm_collective_(c, &a, args);
}

static PyObject *comm_reduce_scatter(nccl_comm *c, PyObject *args, PyObject *kwds) {
    coll_ a = {.kind = 3};
    if (!ddpc_parse_args_kw(args, kwds, "O&O&i|$O&:reduce_scatter", three_then_timeout_, ddpc_arg_buffer, &a.out,
                            ddpc_arg_buffer, &a.in, &a.op, ddpc_arg_timeout, &a.timeout_s))
        return NULL;
    return comm_collective_(c, &a, args);
}

static PyObject *comm_reduce(nccl_comm *c, PyObject *args, PyObject *kwds) {
    coll_ a = {.kind = KIND_REDUCE};
    if (!ddpc_parse_args_kw(args, kwds, "O&ii|$O&:reduce", three_then_timeout_, ddpc_arg_buffer, &a.in, &a.op,
                            &a.peer, ddpc_arg_timeout, &a.timeout_s))
        return NULL;
    a.out = a.in;
    return comm_collective_(c, &a, args);
}

/* gather(out, in, root) and scatter(out, in, root): the whole (gather's
 * output, scatter's input) is None but at the root, where the rank's part
 * stands in for it. */
static int buffer_or_none_(PyObject *o, ddpc_buffer **out) {
    if (o != Py_None) return ddpc_arg_buffer(o, out);
    *out = NULL;
    return 1;
}

static PyObject *gather_scatter_(nccl_comm *c, PyObject *args, PyObject *kwds, int kind) {
    coll_ a = {.kind = kind};
    if (!ddpc_parse_args_kw(args, kwds, kind == KIND_GATHER ? "O&O&i|$O&:gather" : "O&O&i|$O&:scatter",
                            three_then_timeout_, buffer_or_none_, &a.out, buffer_or_none_, &a.in, &a.peer,
                            ddpc_arg_timeout, &a.timeout_s))
        return NULL;
    ddpc_buffer **whole = kind == KIND_GATHER ? &a.out : &a.in, *part = kind == KIND_GATHER ? a.in : a.out;
    int root = c->rank == a.peer;
    if (!part)
        return PyErr_Format(PyExc_ValueError, "%s: every rank passes its %s", coll_names_[kind],
                            kind == KIND_GATHER ? "input" : "output");
    if (root == !*whole)
        return PyErr_Format(PyExc_ValueError, "%s: the %s is %s", coll_names_[kind],
                            kind == KIND_GATHER ? "output" : "input",
                            root ? "the root's: it must be given there" : "the root's alone: pass None here");
    if (!*whole) *whole = part;
    return comm_collective_(c, &a, args);
}

static PyObject *comm_gather(nccl_comm *c, PyObject *args, PyObject *kwds) {
    return gather_scatter_(c, args, kwds, KIND_GATHER);
}

static PyObject *comm_scatter(nccl_comm *c, PyObject *args, PyObject *kwds) {
    return gather_scatter_(c, args, kwds, KIND_SCATTER);
}

static PyObject *comm_send(nccl_comm *c, PyObject *args) {
    coll_ a = {.kind = 4};
    if (!ddpc_parse_args(args, "O&i:send", ddpc_arg_buffer, &a.in, &a.peer)) return NULL;
    a.out = a.in;
    return comm_collective_(c, &a, args);
}

static PyObject *comm_recv(nccl_comm *c, PyObject *args) {
    coll_ a = {.kind = 5};
    if (!ddpc_parse_args(args, "O&i:recv", ddpc_arg_buffer, &a.out, &a.peer)) return NULL;
    a.in = a.out;
    return comm_collective_(c, &a, args);
}

/* Collectives enqueued from now on without a timeout of their own get the
 * new one; those already enqueued keep theirs. */
static PyObject *comm_set_timeout(nccl_comm *c, PyObject *arg) {
    double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1 && PyErr_Occurred()) return NULL;
    if (!(seconds > 0))
        return PyErr_Format(PyExc_ValueError, "set_timeout: the timeout must be positive, got %g s", seconds);
    atomic_store(&c->timeout_s, seconds);
    Py_RETURN_NONE;
}

static PyObject *comm_group_start(nccl_comm *c, PyObject *unused) {
    (void)unused;
    pthread_mutex_lock(&c->mu);
    ncclResult_t r = ddpc_nccl.GroupStart();
    if (r == ncclSuccess) c->group_depth++;
    pthread_mutex_unlock(&c->mu);
    if (r != ncclSuccess)
        return PyErr_Format(ddpc_DistBackendError, "ncclGroupStart failed: %s", ddpc_nccl.GetErrorString(r));
    Py_RETURN_NONE;
}

static ddpc_status group_end_(nccl_comm *c) {
    pthread_mutex_lock(&c->mu);
    ncclResult_t r = ddpc_nccl.GroupEnd();
    if (--c->group_depth == 0 && c->abort_pending) {
        c->abort_pending = 0;
        abort_locked_(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (r != ncclSuccess && r != ncclInProgress)
        return DDPC_ERROR(DDPC_ERR_DIST, "ncclGroupEnd on rank %d failed: %s", c->rank, ddpc_nccl.GetErrorString(r));
    return settle_(c, "ncclGroupEnd", c->timeout_s);
}

static PyObject *comm_group_end(nccl_comm *c, PyObject *unused) {
    (void)unused;
    if (c->group_depth == 0) return PyErr_Format(PyExc_RuntimeError, "group_end without group_start");
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = group_end_(c);
    Py_END_ALLOW_THREADS
    if (st == DDPC_OK && c->group_depth > 0) Py_RETURN_NONE;
    /* The group's collectives complete together: give each work its event
     * (made on the comm stream's device). */
    Py_ssize_t n = PyList_GET_SIZE(c->group_works);
    int prev = -1;
    if (st == DDPC_OK && n > 0) st = ddpc_cuda_enter(c->device, &prev);
    for (Py_ssize_t i = 0; i < n && st == DDPC_OK; i++) {
        nccl_work *w = (nccl_work *)PyList_GET_ITEM(c->group_works, i);
        st = record_done_(c, "coalesced", 0, DDPC_UINT8, w->timeout_s, &w->done);
    }
    ddpc_cuda_leave(prev);
    /* Works left without an event would let their buffers be reused under
     * the collectives: wait for those here instead. */
    if (st != DDPC_OK) {
        Py_BEGIN_ALLOW_THREADS
        cudaStreamSynchronize(c->stream); /* best effort: the error raised below is the one that matters */
        Py_END_ALLOW_THREADS
    }
    if (PyList_SetSlice(c->group_works, 0, n, NULL) < 0) return NULL;
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *comm_abort(nccl_comm *c, PyObject *unused) {
    (void)unused;
    pthread_mutex_lock(&c->wd.mu);
    if (c->wd.failed == DDPC_OK) {
        c->wd.failed = DDPC_ERR_DIST;
        snprintf(c->wd.fail_msg, sizeof c->wd.fail_msg, "the NCCL communicator of rank %d was aborted by the user",
                 c->rank);
    }
    pthread_mutex_unlock(&c->wd.mu);
    Py_BEGIN_ALLOW_THREADS
    wd_abort_(c);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *comm_flight_record(nccl_comm *c, PyObject *unused) {
    (void)unused;
    char buf[4096];
    ddpc_watchdog_format(&c->wd, ddpc_watchdog_now(), buf, sizeof buf);
    return PyUnicode_FromString(buf);
}

static PyObject *comm_check(nccl_comm *c, PyObject *unused) {
    (void)unused;
    ddpc_status st = ddpc_watchdog_error(&c->wd);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyMethodDef comm_methods[] = {
    {"all_reduce", (PyCFunction)(void (*)(void))comm_all_reduce, METH_VARARGS | METH_KEYWORDS,
     "all_reduce(buf, op, *, timeout=None) -> NcclWork"},
    {"broadcast", (PyCFunction)(void (*)(void))comm_broadcast, METH_VARARGS | METH_KEYWORDS,
     "broadcast(buf, root, *, timeout=None) -> NcclWork"},
    {"all_gather", (PyCFunction)(void (*)(void))comm_all_gather, METH_VARARGS | METH_KEYWORDS,
     "all_gather(out, in, *, timeout=None) -> NcclWork"},
    {"reduce_scatter", (PyCFunction)(void (*)(void))comm_reduce_scatter, METH_VARARGS | METH_KEYWORDS,
     "reduce_scatter(out, in, op, *, timeout=None) -> NcclWork"},
    {"reduce", (PyCFunction)(void (*)(void))comm_reduce, METH_VARARGS | METH_KEYWORDS,
     "reduce(buf, op, root, *, timeout=None) -> NcclWork: into the root's buf; the other ranks' are only read"},
    {"gather", (PyCFunction)(void (*)(void))comm_gather, METH_VARARGS | METH_KEYWORDS,
     "gather(out, in, root, *, timeout=None) -> NcclWork: out (size times in) is the root's alone, None elsewhere"},
    {"scatter", (PyCFunction)(void (*)(void))comm_scatter, METH_VARARGS | METH_KEYWORDS,
     "scatter(out, in, root, *, timeout=None) -> NcclWork: in (size times out) is the root's alone, None elsewhere"},
    {"send", (PyCFunction)comm_send, METH_VARARGS, "send(buf, peer) -> NcclWork"},
    {"recv", (PyCFunction)comm_recv, METH_VARARGS, "recv(buf, peer) -> NcclWork"},
    {"set_timeout", (PyCFunction)comm_set_timeout, METH_O,
     "set_timeout(seconds): the timeout of the collectives enqueued from now on without one of their own"},
    {"group_start", (PyCFunction)comm_group_start, METH_NOARGS, "start coalescing collectives"},
    {"group_end", (PyCFunction)comm_group_end, METH_NOARGS, "launch the coalesced collectives"},
    {"abort", (PyCFunction)comm_abort, METH_NOARGS, "abort the communicator"},
    {"flight_record", (PyCFunction)comm_flight_record, METH_NOARGS, "the last collectives, one per line"},
    {"check", (PyCFunction)comm_check, METH_NOARGS, "raise the communicator's failure, if any"},
    {"__reduce__", ddpc_refuse_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot comm_slots[] = {
    {Py_tp_new, comm_new_},
    {Py_tp_dealloc, comm_dealloc_},
    {Py_tp_methods, comm_methods},
    {Py_tp_doc, "NcclComm(unique_id, rank, size, device, timeout): a non-blocking NCCL communicator with a watchdog"},
    {0, NULL},
};

/* ---- work handles -------------------------------------------------------------- */

static ddpc_status work_wait_(nccl_work *w, double timeout) {
    if (!w->done) {
        CHECK(ddpc_watchdog_error(&w->comm->wd));
        if (w->comm->group_depth > 0) return DDPC_ERROR(DDPC_ERR_ARG, "wait() inside coalesce(): leave the block first");
        return DDPC_ERROR(DDPC_ERR_DIST, "this collective's coalesce() block failed to launch (its error was raised "
                                         "when the block ended)");
    }
    if (timeout >= 0) {
        double deadline = ddpc_watchdog_now() + timeout;
        for (;;) {
            CHECK(ddpc_watchdog_error(&w->comm->wd));
            cudaError_t e = cudaEventQuery(w->done);
            if (e == cudaSuccess) break;
            if (e != cudaErrorNotReady) CUDACHECK(e);
            cudaGetLastError(); /* not an error: cleared so that the next launch's check does not see it */
            if (ddpc_watchdog_now() > deadline)
                return DDPC_ERROR(DDPC_ERR_TIMEOUT, "Work.wait(timeout=%.3g): the collective on rank %d has not completed",
                                  timeout, w->comm->rank);
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    CHECK(ddpc_watchdog_error(&w->comm->wd));
    void *compute;
    CHECK(ddpc_cuda_compute_stream(w->comm->device, &compute));
    int prev;
    CHECK(ddpc_cuda_enter(w->comm->device, &prev));
    cudaError_t e = cudaStreamWaitEvent((cudaStream_t)compute, w->done, 0);
    ddpc_cuda_leave(prev);
    CUDACHECK(e);
    return DDPC_OK;
}

static PyObject *work_wait(nccl_work *w, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait", kwlist, &timeout_obj)) return NULL;
    double timeout = -1;
    if (timeout_obj != Py_None) {
        PyObject *secs = PyObject_HasAttrString(timeout_obj, "total_seconds")
                             ? PyObject_CallMethod(timeout_obj, "total_seconds", NULL)
                             : Py_NewRef(timeout_obj);
        if (!secs) return NULL;
        timeout = PyFloat_AsDouble(secs);
        Py_DECREF(secs);
        if (timeout == -1 && PyErr_Occurred()) return NULL;
    }
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = work_wait_(w, timeout);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) return ddpc_raise(st);
    w->waited = 1;
    Py_RETURN_TRUE;
}

static PyObject *work_is_completed(nccl_work *w, PyObject *unused) {
    (void)unused;
    ddpc_status st = ddpc_watchdog_error(&w->comm->wd);
    if (st != DDPC_OK) return ddpc_raise(st);
    if (!w->done) Py_RETURN_FALSE;
    cudaError_t e = cudaEventQuery(w->done);
    if (e == cudaSuccess) Py_RETURN_TRUE;
    cudaGetLastError(); /* a collective still running is no error for the next launch's check to see */
    if (e == cudaErrorNotReady) Py_RETURN_FALSE;
    return PyErr_Format(PyExc_RuntimeError, "cudaEventQuery failed: %s", cudaGetErrorString(e));
}

static void work_dealloc_(nccl_work *w) {
    if (w->done) {
        /* Buffers go back to the caching allocator now; anything that reuses
         * them runs on the compute stream, so order it after the collective.
         * Nothing can be raised from here: where the stream cannot be made
         * to wait, the host waits for the collective instead. */
        void *compute;
        if (!w->waited && (ddpc_cuda_compute_stream(w->comm->device, &compute) != DDPC_OK ||
                           cudaStreamWaitEvent((cudaStream_t)compute, w->done, 0) != cudaSuccess)) {
            ddpc_clear_error();
            (void)cudaGetLastError();
            (void)cudaEventSynchronize(w->done);
        }
        cudaEventDestroy(w->done);
    }
    Py_XDECREF(w->keep);
    Py_XDECREF(w->comm);
    PyTypeObject *tp = Py_TYPE(w);
    tp->tp_free((PyObject *)w);
    Py_DECREF(tp);
}

static PyMethodDef work_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))work_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): order the compute stream after the collective (with a timeout: first wait on the host)"},
    {"is_completed", (PyCFunction)work_is_completed, METH_NOARGS, "whether the collective has finished on the GPU"},
    {"__reduce__", ddpc_refuse_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot work_slots[] = {
    {Py_tp_dealloc, work_dealloc_},
    {Py_tp_methods, work_methods},
    {Py_tp_doc, "A collective queued on an NCCL communicator"},
    {0, NULL},
};

static PyObject *py_nccl_unique_id(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    ddpc_status st = ddpc_nccl_load();
    if (st != DDPC_OK) return ddpc_raise(st);
    ncclUniqueId id;
    ncclResult_t r = ddpc_nccl.GetUniqueId(&id);
    if (r != ncclSuccess)
        return PyErr_Format(ddpc_DistBackendError, "ncclGetUniqueId failed: %s", ddpc_nccl.GetErrorString(r));
    return PyBytes_FromStringAndSize((const char *)&id, sizeof id);
}

static PyObject *py_nccl_library(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    ddpc_status st = ddpc_nccl_load();
    if (st != DDPC_OK) return ddpc_raise(st);
    return PyUnicode_DecodeFSDefault(ddpc_nccl_path());
}

static PyMethodDef nccl_methods[] = {
    {"nccl_unique_id", py_nccl_unique_id, METH_NOARGS, "a new ncclUniqueId, as bytes (rank 0 makes it)"},
    {"nccl_library", py_nccl_library, METH_NOARGS,
     "the path of the libnccl ddpc uses, loaded on first use; RuntimeError saying what was tried when none loads"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject *make_type_(PyObject *m, const char *name, size_t size, PyType_Slot *slots) {
    PyType_Spec spec = {.name = name, .basicsize = (int)size, .flags = Py_TPFLAGS_DEFAULT, .slots = slots};
    PyObject *t = PyType_FromModuleAndSpec(m, &spec, NULL);
    if (!t) return NULL;
    const char *dot = strrchr(name, '.');
    if (PyModule_AddObjectRef(m, dot + 1, t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyTypeObject *)t;
}
#endif

int ddpc_nccl_register(PyObject *m) {
    if (PyModule_AddFunctions(m, multi_methods) < 0) return -1;
#ifdef DDPC_WITH_NCCL
    nccl_comm_type_ = make_type_(m, "ddpc._C.NcclComm", sizeof(nccl_comm), comm_slots);
    nccl_work_type_ = make_type_(m, "ddpc._C.NcclWork", sizeof(nccl_work), work_slots);
    if (!nccl_comm_type_ || !nccl_work_type_ || PyModule_AddFunctions(m, nccl_methods) < 0) return -1;
#endif
    return 0;
}
