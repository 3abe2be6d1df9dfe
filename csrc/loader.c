/* The threaded batch loader, and the Python bindings of the data layer:
 * _C.Loader (one pass over an index list), _C.NpyFile (a mapped .npy file)
 * and the sampler index functions of sampler.c.
 *
 * Ownership of a batch: every batch is gathered into freshly allocated
 * output Buffers that the loader hands to the caller and never touches
 * again, so a batch the user holds can't be overwritten; the ring recycles
 * only its slots (and, on a GPU, the pinned staging behind each slot). */
#include "loader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer.h"
#include "device.h"
#include "module.h"
#include "npy.h"
#include "sampler.h"

/* Rows a thread claims at once: about 256 KiB, large enough that the lock is
 * cold, small enough that two threads share one batch. */
#define CHUNK_BYTES (256u << 10)

typedef struct {
    int64_t batch;       /* -1 while the slot is free */
    int64_t rows, next_row, done_rows;
    int done;
    int need_sync;       /* the previous copy out of this slot's staging may still run */
    int syncing;         /* a thread is waiting for that copy */
    char *dst[DDPC_LOADER_MAX_SOURCES];        /* where rows are gathered to */
    void *device_dst[DDPC_LOADER_MAX_SOURCES]; /* GPU: final destination of the copy */
    ddpc_status st;
    char msg[512];
#ifdef DDPC_WITH_CUDA
    ddpc_block *staging[DDPC_LOADER_MAX_SOURCES];
    cudaEvent_t alloc_ready, copied;
#endif
} slot_;

struct ddpc_loader {
    ddpc_loader_source src[DDPC_LOADER_MAX_SOURCES];
    _Atomic size_t touched[DDPC_LOADER_MAX_SOURCES];
    int nsources;
    int64_t *indices, *offsets, nbatches;
    int prefetch, nthreads, nstarted, device;
    size_t budget, chunk_rows;
    slot_ *slots;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    int stop;
    void *compute_stream, *copy_stream;
};

int64_t ddpc_loader_batch_rows(const ddpc_loader *l, int64_t batch) {
    return l->offsets[batch + 1] - l->offsets[batch];
}

/* ---- the producer threads ------------------------------------------------------- */

static void copy_rows_(char *dst, const char *base, const int64_t *idx, int64_t n, size_t rb) {
    /* Fixed sizes let the compiler turn the per-row memcpy into one load and store. */
    switch (rb) {
    case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + i * 4, base + idx[i] * 4, 4); break;
    case 8: for (int64_t i = 0; i < n; i++) memcpy(dst + i * 8, base + idx[i] * 8, 8); break;
    default: for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * rb, base + (size_t)idx[i] * rb, rb); break;
    }
}

static void gather_(ddpc_loader *l, slot_ *s, int64_t r0, int64_t r1) {
    const int64_t *idx = l->indices + l->offsets[s->batch] + r0;
    for (int k = 0; k < l->nsources; k++) {
        const ddpc_loader_source *src = &l->src[k];
        copy_rows_(s->dst[k] + (size_t)r0 * src->row_bytes, src->base, idx, r1 - r0, src->row_bytes);
        if (!src->file_backed) continue;
        /* Pages read from a mapped file stay resident until dropped; dropping
         * them every `budget` bytes bounds the resident set whatever the file size. */
        size_t bytes = (size_t)(r1 - r0) * src->row_bytes;
        if (atomic_fetch_add(&l->touched[k], bytes) + bytes >= l->budget) {
            atomic_store(&l->touched[k], 0);
            ddpc_release_file_pages(src->base, (size_t)src->rows * src->row_bytes);
        }
    }
}

#ifdef DDPC_WITH_CUDA
static ddpc_status wait_copied_(ddpc_loader *l, slot_ *s) {
    CUDACHECK(cudaSetDevice(l->device));
    CUDACHECK(cudaEventSynchronize(s->copied));
    return DDPC_OK;
}

/* The copy waits for the compute stream's work queued before the destination
 * was allocated (the caching allocator may hand out a block that queued
 * kernels still read); the consumer's compute stream later waits for `copied`. */
static ddpc_status issue_copy_(ddpc_loader *l, slot_ *s) {
    cudaStream_t copy = (cudaStream_t)l->copy_stream;
    CUDACHECK(cudaSetDevice(l->device));
    CUDACHECK(cudaStreamWaitEvent(copy, s->alloc_ready, 0));
    for (int k = 0; k < l->nsources; k++)
        CUDACHECK(cudaMemcpyAsync(s->device_dst[k], s->dst[k], (size_t)s->rows * l->src[k].row_bytes,
                                  cudaMemcpyHostToDevice, copy));
    CUDACHECK(cudaEventRecord(s->copied, copy));
    return DDPC_OK;
}
#else
static ddpc_status wait_copied_(ddpc_loader *l, slot_ *s) {
    (void)s;
    return ddpc_cuda_require(l->device);
}
static ddpc_status issue_copy_(ddpc_loader *l, slot_ *s) {
    (void)s;
    return ddpc_cuda_require(l->device);
}
#endif

/* Records a failure in the slot and completes it; the lock is held. */
static void fail_slot_(ddpc_loader *l, slot_ *s, ddpc_status st) {
    s->st = st;
    snprintf(s->msg, sizeof s->msg, "%s", ddpc_last_error());
    ddpc_clear_error();
    s->next_row = s->done_rows = s->rows;
    s->done = 1;
    pthread_cond_broadcast(&l->done_cv);
}

/* The oldest batch with work left for a thread; the lock is held. */
static slot_ *pick_(ddpc_loader *l) {
    slot_ *best = NULL;
    for (int i = 0; i < l->prefetch; i++) {
        slot_ *s = &l->slots[i];
        if (s->batch < 0 || s->done || s->syncing || (!s->need_sync && s->next_row >= s->rows)) continue;
        if (!best || s->batch < best->batch) best = s;
    }
    return best;
}

static void *producer_main_(void *arg) {
    ddpc_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        slot_ *s = pick_(l);
        if (!s) {
            pthread_cond_wait(&l->work_cv, &l->mu);
            continue;
        }
        if (s->need_sync) { /* staging is reused: its last copy to the device must be over */
            s->need_sync = 0;
            s->syncing = 1;
            pthread_mutex_unlock(&l->mu);
            ddpc_status st = wait_copied_(l, s);
            pthread_mutex_lock(&l->mu);
            s->syncing = 0;
            if (st != DDPC_OK) fail_slot_(l, s, st);
            pthread_cond_broadcast(&l->work_cv);
            continue;
        }
        int64_t r0 = s->next_row, r1 = r0 + (int64_t)l->chunk_rows < s->rows ? r0 + (int64_t)l->chunk_rows : s->rows;
        s->next_row = r1;
        pthread_mutex_unlock(&l->mu);
        gather_(l, s, r0, r1);
        pthread_mutex_lock(&l->mu);
        s->done_rows += r1 - r0;
        if (s->done_rows < s->rows || s->done) continue;
        if (l->device != DDPC_CPU) {
            pthread_mutex_unlock(&l->mu);
            ddpc_status st = issue_copy_(l, s);
            pthread_mutex_lock(&l->mu);
            if (st != DDPC_OK) {
                fail_slot_(l, s, st);
                continue;
            }
            s->need_sync = 1;
        }
        s->done = 1;
        pthread_cond_broadcast(&l->done_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- setup, the ring, teardown --------------------------------------------------- */

static ddpc_status check_config_(const ddpc_loader_config *c) {
    if (c->nsources < 1 || c->nsources > DDPC_LOADER_MAX_SOURCES)
        return DDPC_ERROR(DDPC_ERR_ARG, "a loader reads 1 to %d sources, got %d", DDPC_LOADER_MAX_SOURCES, c->nsources);
    if (c->prefetch < 1) return DDPC_ERROR(DDPC_ERR_ARG, "prefetch must be >= 1, got %d", c->prefetch);
    if (c->nthreads < 1) return DDPC_ERROR(DDPC_ERR_ARG, "num_threads must be >= 1, got %d", c->nthreads);
    int64_t rows = c->sources[0].rows;
    for (int k = 1; k < c->nsources; k++)
        if (c->sources[k].rows != rows)
            return DDPC_ERROR(DDPC_ERR_ARG, "sources have different lengths: source 0 has %lld rows, source %d has %lld",
                              (long long)rows, k, (long long)c->sources[k].rows);
    if (c->nbatches < 0 || c->offsets[0] < 0 || c->offsets[c->nbatches] > c->nindices)
        return DDPC_ERROR(DDPC_ERR_ARG, "batch offsets out of range of the %lld indices", (long long)c->nindices);
    for (int64_t b = 0; b < c->nbatches; b++)
        if (c->offsets[b + 1] < c->offsets[b])
            return DDPC_ERROR(DDPC_ERR_ARG, "batch offsets must be non-decreasing (batch %lld)", (long long)b);
    for (int64_t i = 0; i < c->nindices; i++)
        if (c->indices[i] < 0 || c->indices[i] >= rows)
            return DDPC_ERROR(DDPC_ERR_ARG, "index %lld (at position %lld) is out of range for a data set of %lld samples",
                              (long long)c->indices[i], (long long)i, (long long)rows);
    return DDPC_OK;
}

#ifdef DDPC_WITH_CUDA
static ddpc_status init_device_(ddpc_loader *l) {
    CHECK(ddpc_cuda_compute_stream(l->device, &l->compute_stream));
    CHECK(ddpc_cuda_copy_stream(l->device, &l->copy_stream));
    CUDACHECK(cudaSetDevice(l->device));
    int64_t max_rows = 0;
    for (int64_t b = 0; b < l->nbatches; b++)
        if (ddpc_loader_batch_rows(l, b) > max_rows) max_rows = ddpc_loader_batch_rows(l, b);
    for (int i = 0; i < l->prefetch; i++) {
        slot_ *s = &l->slots[i];
        CUDACHECK(cudaEventCreateWithFlags(&s->alloc_ready, cudaEventDisableTiming));
        CUDACHECK(cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming));
        for (int k = 0; k < l->nsources; k++) {
            CHECK(ddpc_alloc(DDPC_CPU, (size_t)max_rows * l->src[k].row_bytes, 1, &s->staging[k]));
            s->dst[k] = s->staging[k]->ptr;
        }
    }
    return DDPC_OK;
}

static void free_device_(ddpc_loader *l) {
    for (int i = 0; i < l->prefetch; i++) {
        slot_ *s = &l->slots[i];
        /* A copy out of staging may still be queued: let it finish before the memory goes. */
        if (s->copied) cudaEventSynchronize(s->copied);
        if (s->alloc_ready) cudaEventDestroy(s->alloc_ready);
        if (s->copied) cudaEventDestroy(s->copied);
        for (int k = 0; k < l->nsources; k++) ddpc_free(s->staging[k]);
    }
}
#else
static ddpc_status init_device_(ddpc_loader *l) { return ddpc_cuda_require(l->device); }
static void free_device_(ddpc_loader *l) { (void)l; }
#endif

ddpc_status ddpc_loader_init(const ddpc_loader_config *cfg, ddpc_loader **out) {
    *out = NULL;
    CHECK(check_config_(cfg));
    ddpc_status st = DDPC_OK;
    ddpc_loader *l = calloc(1, sizeof *l);
    if (!l) return DDPC_ERROR(DDPC_ERR_OOM, "out of memory for a loader");
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->done_cv, NULL);
    l->nsources = cfg->nsources;
    memcpy(l->src, cfg->sources, (size_t)cfg->nsources * sizeof *cfg->sources);
    l->nbatches = cfg->nbatches;
    l->prefetch = cfg->prefetch;
    l->nthreads = cfg->nthreads;
    l->device = cfg->device;
    l->budget = cfg->resident_budget ? cfg->resident_budget : 1;
    size_t row_total = 0;
    for (int k = 0; k < l->nsources; k++) row_total += l->src[k].row_bytes;
    l->chunk_rows = row_total >= CHUNK_BYTES ? 1 : CHUNK_BYTES / (row_total ? row_total : 1);
    l->indices = malloc((size_t)(cfg->nindices ? cfg->nindices : 1) * sizeof *l->indices);
    l->offsets = malloc((size_t)(cfg->nbatches + 1) * sizeof *l->offsets);
    l->slots = calloc((size_t)l->prefetch, sizeof *l->slots);
    l->threads = calloc((size_t)l->nthreads, sizeof *l->threads);
    if (!l->indices || !l->offsets || !l->slots || !l->threads) {
        st = DDPC_ERROR(DDPC_ERR_OOM, "out of memory for a loader's index list (%lld entries)",
                        (long long)cfg->nindices);
        goto fail_;
    }
    memcpy(l->indices, cfg->indices, (size_t)cfg->nindices * sizeof *l->indices);
    memcpy(l->offsets, cfg->offsets, (size_t)(cfg->nbatches + 1) * sizeof *l->offsets);
    for (int i = 0; i < l->prefetch; i++) l->slots[i].batch = -1;
    if (l->device != DDPC_CPU) CHECKGOTO(init_device_(l), st, fail_);
    for (; l->nstarted < l->nthreads; l->nstarted++) {
        int rc = pthread_create(&l->threads[l->nstarted], NULL, producer_main_, l);
        if (rc != 0) {
            st = DDPC_ERROR(DDPC_ERR_SYS, "could not start a loader thread: %s", strerror(rc));
            goto fail_;
        }
    }
    *out = l;
    return DDPC_OK;
fail_:
    ddpc_loader_free(l);
    return st;
}

ddpc_status ddpc_loader_submit(ddpc_loader *l, int64_t batch, void *const *dst) {
    if (batch < 0 || batch >= l->nbatches)
        return DDPC_ERROR(DDPC_ERR_ARG, "batch %lld is out of range (%lld batches)", (long long)batch,
                          (long long)l->nbatches);
    slot_ *s = &l->slots[batch % l->prefetch];
    if (s->batch >= 0)
        return DDPC_ERROR(DDPC_ERR_INTERNAL, "loader slot for batch %lld still holds batch %lld", (long long)batch,
                          (long long)s->batch);
#ifdef DDPC_WITH_CUDA
    if (l->device != DDPC_CPU) {
        CUDACHECK(cudaSetDevice(l->device));
        CUDACHECK(cudaEventRecord(s->alloc_ready, (cudaStream_t)l->compute_stream));
    }
#endif
    pthread_mutex_lock(&l->mu);
    for (int k = 0; k < l->nsources; k++) {
        if (l->device == DDPC_CPU) s->dst[k] = dst[k];
        else s->device_dst[k] = dst[k];
    }
    s->rows = ddpc_loader_batch_rows(l, batch);
    s->next_row = s->done_rows = 0;
    s->done = s->rows == 0;
    s->st = DDPC_OK;
    s->batch = batch;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    return DDPC_OK;
}

ddpc_status ddpc_loader_wait(ddpc_loader *l, int64_t batch) {
    slot_ *s = &l->slots[batch % l->prefetch];
    pthread_mutex_lock(&l->mu);
    if (s->batch != batch) {
        pthread_mutex_unlock(&l->mu);
        return DDPC_ERROR(DDPC_ERR_INTERNAL, "batch %lld was never queued", (long long)batch);
    }
    while (!s->done) pthread_cond_wait(&l->done_cv, &l->mu);
    ddpc_status st = s->st;
    int64_t rows = s->rows;
    char msg[sizeof s->msg];
    memcpy(msg, s->msg, sizeof msg);
    s->batch = -1;
    pthread_mutex_unlock(&l->mu);
    if (st != DDPC_OK) return DDPC_ERROR(st, "%s", msg);
#ifdef DDPC_WITH_CUDA
    if (l->device != DDPC_CPU && rows > 0) {
        CUDACHECK(cudaSetDevice(l->device));
        CUDACHECK(cudaStreamWaitEvent((cudaStream_t)l->compute_stream, s->copied, 0));
    }
#else
    (void)rows;
#endif
    return DDPC_OK;
}

void ddpc_loader_free(ddpc_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nstarted; i++) pthread_join(l->threads[i], NULL);
    if (l->slots && l->device != DDPC_CPU) free_device_(l);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->done_cv);
    pthread_mutex_destroy(&l->mu);
    free(l->indices);
    free(l->offsets);
    free(l->slots);
    free(l->threads);
    free(l);
}

/* ---- Python: _C.Loader ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    ddpc_loader *loader;
    PyObject *sources;    /* tuple of the source Buffers: they own the memory the threads read */
    PyObject **pending;   /* per slot: the tuple of output Buffers being filled, or NULL */
    int64_t next, nbatches;
    int prefetch, device, pinned, nsources;
} loader_object;

static int get_index_array_(PyObject *obj, const char *what, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (view->itemsize != 8 || view->ndim != 1 || !(strcmp(f, "q") == 0 || strcmp(f, "l") == 0)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a 1-d int64 array", what);
        return -1;
    }
    return 0;
}

/* New output Buffers for batch `batch`, queued into its slot. */
static int queue_batch_(loader_object *self, int64_t batch) {
    int64_t rows = ddpc_loader_batch_rows(self->loader, batch);
    PyObject *out = PyTuple_New(self->nsources);
    if (!out) return -1;
    void *dst[DDPC_LOADER_MAX_SOURCES];
    for (int k = 0; k < self->nsources; k++) {
        ddpc_buffer *src = (ddpc_buffer *)PyTuple_GET_ITEM(self->sources, k);
        int64_t shape[DDPC_MAX_NDIM];
        memcpy(shape, src->shape, sizeof shape);
        shape[0] = rows;
        ddpc_buffer *b = ddpc_buffer_new(src->ndim, shape, src->dtype, self->device, self->pinned);
        if (!b) {
            Py_DECREF(out);
            return -1;
        }
        dst[k] = b->data;
        PyTuple_SET_ITEM(out, k, (PyObject *)b);
    }
    ddpc_status st = ddpc_loader_submit(self->loader, batch, dst);
    if (st != DDPC_OK) {
        Py_DECREF(out);
        ddpc_raise(st);
        return -1;
    }
    self->pending[batch % self->prefetch] = out;
    return 0;
}

/* Stops the threads and drops the queued batches; the iterator is exhausted after it. */
static void loader_close_(loader_object *self) {
    if (self->loader) {
        ddpc_loader *l = self->loader;
        self->loader = NULL;
        Py_BEGIN_ALLOW_THREADS
        ddpc_loader_free(l);
        Py_END_ALLOW_THREADS
    }
    if (self->pending)
        for (int i = 0; i < self->prefetch; i++) Py_CLEAR(self->pending[i]);
    self->next = self->nbatches;
}

static PyObject *loader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sources", "file_backed", "indices", "offsets", "prefetch", "num_threads",
                             "device", "pin_memory", "resident_budget", NULL};
    PyObject *sources_obj, *backed_obj, *indices_obj, *offsets_obj, *device_obj = Py_None;
    int prefetch = 2, nthreads = 2, pinned = 0;
    unsigned long long budget = 64ull << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|iiOpK:Loader", kwlist, &sources_obj, &backed_obj, &indices_obj,
                                     &offsets_obj, &prefetch, &nthreads, &device_obj, &pinned, &budget))
        return NULL;
    int device;
    if (ddpc_parse_device(device_obj, &device) < 0) return NULL;
    PyObject *sources = PySequence_Tuple(sources_obj), *backed = PySequence_Tuple(backed_obj);
    loader_object *self = NULL;
    Py_buffer idx = {0}, off = {0};
    if (!sources || !backed) goto fail_;
    Py_ssize_t n = PyTuple_GET_SIZE(sources);
    if (n < 1 || n > DDPC_LOADER_MAX_SOURCES || PyTuple_GET_SIZE(backed) != n) {
        PyErr_Format(PyExc_ValueError, "a loader reads 1 to %d sources (with one file_backed flag each), got %zd",
                     DDPC_LOADER_MAX_SOURCES, n);
        goto fail_;
    }
    if (prefetch < 1 || nthreads < 1) {
        PyErr_Format(PyExc_ValueError, "prefetch and num_threads must be >= 1 (got %d and %d)", prefetch, nthreads);
        goto fail_;
    }
    ddpc_loader_source src[DDPC_LOADER_MAX_SOURCES];
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *o = PyTuple_GET_ITEM(sources, k);
        if (!ddpc_buffer_check(o)) {
            PyErr_Format(PyExc_TypeError, "loader sources must be ddpc._C.Buffer objects, got %.100s",
                         Py_TYPE(o)->tp_name);
            goto fail_;
        }
        ddpc_buffer *b = (ddpc_buffer *)o;
        if (b->device != DDPC_CPU || b->ndim < 1) {
            PyErr_Format(PyExc_ValueError, "source %zd must be a host array with at least one dimension", k);
            goto fail_;
        }
        int fb = PyObject_IsTrue(PyTuple_GET_ITEM(backed, k));
        if (fb < 0) goto fail_;
        src[k].base = b->data;
        src[k].rows = b->shape[0];
        src[k].row_bytes = ddpc_dtype_size(b->dtype);
        for (int d = 1; d < b->ndim; d++) src[k].row_bytes *= (size_t)b->shape[d];
        src[k].file_backed = fb;
    }
    if (get_index_array_(indices_obj, "indices", &idx) < 0 || get_index_array_(offsets_obj, "offsets", &off) < 0)
        goto fail_;
    if (off.shape[0] < 1) {
        PyErr_SetString(PyExc_ValueError, "offsets needs at least one entry");
        goto fail_;
    }
    self = (loader_object *)type->tp_alloc(type, 0);
    if (!self) goto fail_;
    self->sources = sources;
    sources = NULL;
    self->nsources = (int)n;
    self->prefetch = prefetch;
    self->device = device;
    self->pinned = pinned && device == DDPC_CPU;
    self->nbatches = off.shape[0] - 1;
    self->pending = PyMem_Calloc((size_t)prefetch, sizeof *self->pending);
    if (!self->pending) {
        PyErr_NoMemory();
        goto fail_;
    }
    ddpc_loader_config cfg = {
        .sources = src, .nsources = (int)n, .indices = idx.buf, .nindices = idx.shape[0], .offsets = off.buf,
        .nbatches = self->nbatches, .prefetch = prefetch, .nthreads = nthreads, .device = device,
        .resident_budget = (size_t)budget,
    };
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_loader_init(&cfg, &self->loader);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) {
        ddpc_raise(st);
        goto fail_;
    }
    for (int64_t b = 0; b < self->nbatches && b < prefetch; b++)
        if (queue_batch_(self, b) < 0) goto fail_;
    PyBuffer_Release(&idx);
    PyBuffer_Release(&off);
    Py_DECREF(backed);
    return (PyObject *)self;
fail_:
    if (idx.obj) PyBuffer_Release(&idx);
    if (off.obj) PyBuffer_Release(&off);
    Py_XDECREF(sources);
    Py_XDECREF(backed);
    Py_XDECREF(self);
    return NULL;
}

static PyObject *loader_iternext(loader_object *self) {
    if (!self->loader || self->next >= self->nbatches) {
        loader_close_(self);
        return NULL; /* StopIteration */
    }
    int64_t batch = self->next;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_loader_wait(self->loader, batch);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) {
        loader_close_(self);
        return ddpc_raise(st);
    }
    PyObject *out = self->pending[batch % self->prefetch];
    self->pending[batch % self->prefetch] = NULL;
    self->next++;
    if (batch + self->prefetch < self->nbatches && queue_batch_(self, batch + self->prefetch) < 0) {
        Py_DECREF(out);
        loader_close_(self);
        return NULL;
    }
    return out;
}

static PyObject *loader_close(loader_object *self, PyObject *unused) {
    (void)unused;
    loader_close_(self);
    Py_RETURN_NONE;
}

static PyObject *loader_len(loader_object *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLongLong(self->nbatches - self->next);
}

static void loader_dealloc(loader_object *self) {
    loader_close_(self);
    PyMem_Free(self->pending);
    Py_XDECREF(self->sources);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *refuse_pickle_(PyObject *self, PyObject *unused) {
    (void)unused;
    return PyErr_Format(PyExc_TypeError, "%s is tied to this process and cannot be pickled", Py_TYPE(self)->tp_name);
}

static PyMethodDef loader_methods[] = {
    {"close", (PyCFunction)loader_close, METH_NOARGS, "stop the threads and drop the queued batches"},
    {"__length_hint__", (PyCFunction)loader_len, METH_NOARGS, NULL},
    {"__reduce__", refuse_pickle_, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot loader_slots[] = {
    {Py_tp_new, loader_new},
    {Py_tp_dealloc, loader_dealloc},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, loader_iternext},
    {Py_tp_methods, loader_methods},
    {Py_tp_doc, "Loader(sources, file_backed, indices, offsets, prefetch=2, num_threads=2, device=None, "
                "pin_memory=False, resident_budget=64 MiB): one pass over indices, batch b being "
                "indices[offsets[b]:offsets[b+1]]; yields a tuple of new Buffers per batch"},
    {0, NULL},
};

/* ---- Python: _C.NpyFile ----------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ddpc_npy_file file;
    PyObject *path;
    Py_ssize_t shape[DDPC_NPY_MAX_NDIM], strides[DDPC_NPY_MAX_NDIM];
} npy_object;

static PyObject *npy_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"path", NULL};
    PyObject *path;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&:NpyFile", kwlist, PyUnicode_FSConverter, &path)) return NULL;
    npy_object *self = (npy_object *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(path);
        return NULL;
    }
    self->path = path;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_npy_open(PyBytes_AS_STRING(path), &self->file);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) {
        Py_DECREF(self);
        return ddpc_raise(st);
    }
    const ddpc_npy_header *h = &self->file.header;
    Py_ssize_t stride = (Py_ssize_t)ddpc_dtype_size(h->dtype);
    for (int i = h->ndim - 1; i >= 0; i--) {
        self->shape[i] = (Py_ssize_t)h->shape[i];
        self->strides[i] = stride;
        stride *= (Py_ssize_t)h->shape[i];
    }
    return (PyObject *)self;
}

static int npy_getbuffer(npy_object *self, Py_buffer *view, int flags) {
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "a mapped .npy file is read-only");
        return -1;
    }
    static const char *formats[DDPC_NDTYPES] = {"f", "d", "e", "H", "i", "q", "B"};
    const ddpc_npy_header *h = &self->file.header;
    view->buf = (void *)self->file.data;
    view->obj = (PyObject *)self;
    Py_INCREF(self);
    view->len = (Py_ssize_t)h->nbytes;
    view->itemsize = (Py_ssize_t)ddpc_dtype_size(h->dtype);
    view->readonly = 1;
    view->ndim = h->ndim;
    view->format = (flags & PyBUF_FORMAT) ? (char *)formats[h->dtype] : NULL;
    view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static void npy_dealloc(npy_object *self) {
    ddpc_npy_close(&self->file);
    Py_XDECREF(self->path);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *npy_get_shape(npy_object *self, void *c) {
    (void)c;
    PyObject *t = PyTuple_New(self->file.header.ndim);
    for (int i = 0; t && i < self->file.header.ndim; i++) {
        PyObject *v = PyLong_FromLongLong(self->file.header.shape[i]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *npy_get_dtype(npy_object *self, void *c) {
    (void)c;
    return PyUnicode_FromString(ddpc_dtype_name(self->file.header.dtype));
}

static PyObject *npy_get_path(npy_object *self, void *c) {
    (void)c;
    return PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(self->path));
}

static PyGetSetDef npy_getset[] = {
    {"shape", (getter)npy_get_shape, NULL, "shape tuple", NULL},
    {"dtype", (getter)npy_get_dtype, NULL, "dtype name", NULL},
    {"path", (getter)npy_get_path, NULL, "the file", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef npy_methods[] = {
    {"__reduce__", refuse_pickle_, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot npy_slots[] = {
    {Py_tp_new, npy_new},
    {Py_tp_dealloc, npy_dealloc},
    {Py_tp_getset, npy_getset},
    {Py_tp_methods, npy_methods},
    {Py_bf_getbuffer, npy_getbuffer},
    {Py_tp_doc, "NpyFile(path): a .npy file mapped read-only, exported through the buffer protocol"},
    {0, NULL},
};

/* ---- Python: sampler index lists -------------------------------------------------- */

static ddpc_buffer *new_indices_(int64_t n) {
    int64_t shape[1] = {n};
    return ddpc_buffer_new(1, shape, DDPC_INT64, DDPC_CPU, 0);
}

/* A contiguous 1-d float64 view of `obj` (weights or costs). */
static int get_f64_array_(PyObject *obj, const char *what, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (view->itemsize != 8 || view->ndim != 1 || strcmp(f, "d") != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a 1-d float64 array", what);
        return -1;
    }
    return 0;
}

#define RUN_RELEASED_(out, call)                                                   \
    do {                                                                           \
        ddpc_status st_;                                                           \
        Py_BEGIN_ALLOW_THREADS st_ = (call);                                       \
        Py_END_ALLOW_THREADS                                                       \
        if (st_ != DDPC_OK) {                                                      \
            Py_CLEAR(out);                                                         \
            ddpc_raise(st_);                                                       \
        }                                                                          \
    } while (0)

static PyObject *py_dist_sampler_size(PyObject *m, PyObject *args) {
    (void)m;
    long long n, r, rank;
    int drop_last;
    if (!PyArg_ParseTuple(args, "LLLp:dist_sampler_size", &n, &r, &rank, &drop_last)) return NULL;
    int64_t num_samples, total;
    ddpc_status st = ddpc_dist_sampler_size(n, r, rank, drop_last, &num_samples, &total);
    if (st != DDPC_OK) return ddpc_raise(st);
    return Py_BuildValue("(LL)", (long long)num_samples, (long long)total);
}

static PyObject *py_dist_sampler_indices(PyObject *m, PyObject *args) {
    (void)m;
    long long n, r, rank;
    int shuffle, drop_last;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "LLLpKp:dist_sampler_indices", &n, &r, &rank, &shuffle, &seed, &drop_last)) return NULL;
    int64_t num_samples, total;
    ddpc_status st = ddpc_dist_sampler_size(n, r, rank, drop_last, &num_samples, &total);
    if (st != DDPC_OK) return ddpc_raise(st);
    ddpc_buffer *out = new_indices_(num_samples);
    if (!out) return NULL;
    int64_t *p = out->data;
    RUN_RELEASED_(out, ddpc_dist_sampler_indices(n, r, rank, shuffle, seed, drop_last, p));
    return (PyObject *)out;
}

static PyObject *py_random_sampler_indices(PyObject *m, PyObject *args) {
    (void)m;
    long long n, num_samples;
    int replacement;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "LLpK:random_sampler_indices", &n, &num_samples, &replacement, &seed)) return NULL;
    if (num_samples < 0) return PyErr_Format(PyExc_ValueError, "num_samples must be >= 0, got %lld", num_samples);
    ddpc_buffer *out = new_indices_(num_samples);
    if (!out) return NULL;
    int64_t *p = out->data;
    RUN_RELEASED_(out, ddpc_random_sampler_indices(n, num_samples, replacement, seed, p));
    return (PyObject *)out;
}

static PyObject *py_weighted_sampler_indices(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *weights_obj;
    long long total, r, rank;
    int replacement;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OLpLLK:weighted_sampler_indices", &weights_obj, &total, &replacement, &r, &rank, &seed))
        return NULL;
    if (total < 0 || r < 1) return PyErr_Format(PyExc_ValueError, "need total >= 0 and num_replicas >= 1");
    Py_buffer w;
    if (get_f64_array_(weights_obj, "weights", &w) < 0) return NULL;
    ddpc_buffer *out = new_indices_(total / r);
    if (out) {
        int64_t *p = out->data;
        const double *wp = w.buf;
        int64_t n = w.shape[0];
        RUN_RELEASED_(out, ddpc_weighted_sampler_indices(wp, n, total, replacement, r, rank, seed, p));
    }
    PyBuffer_Release(&w);
    return (PyObject *)out;
}

static PyObject *py_balanced_sampler_indices(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *costs_obj;
    long long r, rank, batch_size;
    int shuffle, drop_last;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OLLLpKp:balanced_sampler_indices", &costs_obj, &r, &rank, &batch_size, &shuffle, &seed,
                          &drop_last))
        return NULL;
    Py_buffer c;
    if (get_f64_array_(costs_obj, "costs", &c) < 0) return NULL;
    int64_t num_samples, total;
    ddpc_buffer *out = NULL;
    ddpc_balance_stats bal = {0, 0}, nai = {0, 0};
    ddpc_status st = ddpc_dist_sampler_size(c.shape[0], r, rank, drop_last, &num_samples, &total);
    if (st != DDPC_OK) {
        ddpc_raise(st);
    } else if ((out = new_indices_(num_samples))) {
        int64_t *p = out->data;
        const double *cp = c.buf;
        int64_t n = c.shape[0];
        RUN_RELEASED_(out, ddpc_balanced_sampler_indices(cp, n, r, rank, batch_size, shuffle, seed, drop_last, p, &bal,
                                                         &nai));
    }
    PyBuffer_Release(&c);
    if (!out) return NULL;
    return Py_BuildValue("(N(dd)(dd))", (PyObject *)out, bal.mean_ratio, bal.worst_ratio, nai.mean_ratio,
                         nai.worst_ratio);
}

static PyMethodDef loader_functions[] = {
    {"dist_sampler_size", py_dist_sampler_size, METH_VARARGS,
     "dist_sampler_size(n, num_replicas, rank, drop_last) -> (num_samples, total_size)"},
    {"dist_sampler_indices", py_dist_sampler_indices, METH_VARARGS,
     "dist_sampler_indices(n, num_replicas, rank, shuffle, seed, drop_last) -> int64 Buffer"},
    {"random_sampler_indices", py_random_sampler_indices, METH_VARARGS,
     "random_sampler_indices(n, num_samples, replacement, seed) -> int64 Buffer"},
    {"weighted_sampler_indices", py_weighted_sampler_indices, METH_VARARGS,
     "weighted_sampler_indices(weights, total, replacement, num_replicas, rank, seed) -> int64 Buffer"},
    {"balanced_sampler_indices", py_balanced_sampler_indices, METH_VARARGS,
     "balanced_sampler_indices(costs, num_replicas, rank, batch_size, shuffle, seed, drop_last) -> "
     "(int64 Buffer, (mean, worst) balanced, (mean, worst) naive)"},
    {NULL, NULL, 0, NULL},
};

static int add_type_(PyObject *m, const char *name, int basicsize, PyType_Slot *slots) {
    PyType_Spec spec = {.name = name, .basicsize = basicsize, .flags = Py_TPFLAGS_DEFAULT, .slots = slots};
    PyObject *type = PyType_FromModuleAndSpec(m, &spec, NULL);
    if (!type) return -1;
    int rc = PyModule_AddObjectRef(m, strrchr(name, '.') + 1, type);
    Py_DECREF(type);
    return rc;
}

int ddpc_loader_register(PyObject *m) {
    if (add_type_(m, "ddpc._C.Loader", sizeof(loader_object), loader_slots) < 0) return -1;
    if (add_type_(m, "ddpc._C.NpyFile", sizeof(npy_object), npy_slots) < 0) return -1;
    return PyModule_AddFunctions(m, loader_functions);
}
