/* Python bindings of the data layer: _C.Loader (one pass over an index list),
 * _C.NpyFile (a mapped .npy file) and the sampler index functions.
 *
 * Ownership of a batch: a host batch is a view of one set of buffers from the
 * loader's pool, and a set is gathered into again only once nothing but the
 * pool refers to it: every view, tensor, numpy array or DLPack capsule made
 * from a batch holds a reference to its buffer, so a batch the user holds is
 * never overwritten, while memory the user let go is reused without the page
 * faults of a fresh allocation. Device batches are fresh allocations from the
 * caching allocator. */
#include <string.h>

#include "buffer.h"
#include "loader.h"
#include "module.h"
#include "npy.h"
#include "sampler.h"

/* ---- Python: _C.NpyFile ----------------------------------------------------------- */

/* The NpyFile type (set at registration): the loader reads big ones with pread. */
static PyTypeObject *npy_type_;

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
    self->file.fd = -1;
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
    static const char *formats[DDPC_NDTYPES] = {"f", "d", "e", "H", "i", "q", "B", "Zf", "Zd", "?"};
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
    {"__reduce__", ddpc_refuse_pickle, METH_NOARGS, NULL},
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

/* ---- Python: _C.Loader ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    ddpc_loader *loader;
    PyObject *sources;    /* tuple of the source Buffers: they own the memory the threads read */
    PyObject **pending;   /* per slot: the tuple of output Buffers being filled, or NULL */
    PyObject *pool;       /* host batches: list of tuples of owning Buffers (max_rows each) */
    int64_t next, nbatches, max_rows;
    int prefetch, device, pinned, nsources;
    /* A next() call is running: it waits for a batch with the GIL released, and
     * queuing the next batch allocates, which may run Python code (the garbage
     * collector's) that lets other threads in. Until it returns, close() from
     * another thread only asks, and the running call closes. */
    int busy;
    int close_asked;
    ddpc_loader_stats stats; /* as the loader left them when it closed */
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

/* Whether no one but the pool refers to the buffer set `set`, and no copy
 * to a GPU still reads it (pinned memory copied with non_blocking=True). */
static int set_is_free_(PyObject *set) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(set); k++) {
        ddpc_buffer *b = (ddpc_buffer *)PyTuple_GET_ITEM(set, k);
        if (Py_REFCNT(b) != 1 || ddpc_block_busy(b->block)) return 0;
    }
    return Py_REFCNT(set) == 1;
}

/* A host buffer set no batch refers to any more, or a new one added to the pool. */
static PyObject *free_set_(loader_object *self) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->pool); i++)
        if (set_is_free_(PyList_GET_ITEM(self->pool, i))) return PyList_GET_ITEM(self->pool, i);
    PyObject *set = PyTuple_New(self->nsources);
    if (!set) return NULL;
    for (int k = 0; k < self->nsources; k++) {
        ddpc_buffer *src = (ddpc_buffer *)PyTuple_GET_ITEM(self->sources, k);
        int64_t shape[DDPC_MAX_NDIM];
        memcpy(shape, src->shape, sizeof shape);
        shape[0] = self->max_rows;
        ddpc_buffer *b = ddpc_buffer_new(src->ndim, shape, src->dtype, DDPC_CPU, self->pinned);
        if (!b) {
            Py_DECREF(set);
            return NULL;
        }
        PyTuple_SET_ITEM(set, k, (PyObject *)b);
    }
    int rc = PyList_Append(self->pool, set);
    Py_DECREF(set);
    return rc < 0 ? NULL : set;
}

/* Output Buffers for batch `batch` (views of a pool set on the host, new
 * device buffers on a GPU), queued into its slot. */
static int queue_batch_(loader_object *self, int64_t batch) {
    int64_t rows = ddpc_loader_batch_rows(self->loader, batch);
    PyObject *set = self->device == DDPC_CPU ? free_set_(self) : NULL;
    if (self->device == DDPC_CPU && !set) return -1;
    PyObject *out = PyTuple_New(self->nsources);
    if (!out) return -1;
    void *dst[DDPC_LOADER_MAX_SOURCES];
    for (int k = 0; k < self->nsources; k++) {
        ddpc_buffer *src = (ddpc_buffer *)PyTuple_GET_ITEM(self->sources, k);
        int64_t shape[DDPC_MAX_NDIM];
        memcpy(shape, src->shape, sizeof shape);
        shape[0] = rows;
        ddpc_buffer *b;
        if (set) {
            ddpc_buffer *owner = (ddpc_buffer *)PyTuple_GET_ITEM(set, k);
            b = ddpc_buffer_view(owner, owner->data, src->ndim, shape, src->dtype);
        } else {
            b = ddpc_buffer_new(src->ndim, shape, src->dtype, self->device, 0);
        }
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
    if (self->busy) {
        self->close_asked = 1; /* the loader is in use: the running next() frees it */
        return;
    }
    if (self->loader) {
        ddpc_loader *l = self->loader;
        self->loader = NULL;
        ddpc_loader_get_stats(l, &self->stats);
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
                             "device", "pin_memory", "resident_budget", "gpu_gather", NULL};
    PyObject *sources_obj, *backed_obj, *indices_obj, *offsets_obj, *device_obj = Py_None;
    int prefetch = 2, nthreads = 2, pinned = 0, gpu_gather = 0;
    unsigned long long budget = 64ull << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|iiOpKp:Loader", kwlist, &sources_obj, &backed_obj, &indices_obj,
                                     &offsets_obj, &prefetch, &nthreads, &device_obj, &pinned, &budget, &gpu_gather))
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
        src[k].kind = fb ? DDPC_SOURCE_MAPPED : DDPC_SOURCE_MEMORY;
        src[k].fd = -1;
        src[k].file_offset = 0;
        const npy_object *npy = b->base && Py_IS_TYPE(b->base, npy_type_) ? (const npy_object *)b->base : NULL;
        if (npy && ddpc_npy_check(&npy->file, PyBytes_AS_STRING(npy->path)) != DDPC_OK) {
            ddpc_raise(DDPC_ERR_ARG);
            goto fail_;
        }
        if (npy && ddpc_buffer_nbytes(b) > budget) {
            /* Bigger than the resident budget: read rows with pread, which maps nothing. */
            const ddpc_npy_file *f = &npy->file;
            src[k].kind = DDPC_SOURCE_FILE;
            src[k].fd = f->fd;
            src[k].file_offset = f->header.data_offset + (uint64_t)((const char *)b->data - f->data);
        }
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
    self->pool = PyList_New(0);
    if (!self->pending || !self->pool) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto fail_;
    }
    const int64_t *offsets = off.buf;
    for (int64_t b = 0; b < self->nbatches; b++)
        if (offsets[b + 1] - offsets[b] > self->max_rows) self->max_rows = offsets[b + 1] - offsets[b];
    ddpc_loader_config cfg = {
        .sources = src, .nsources = (int)n, .indices = idx.buf, .nindices = idx.shape[0], .offsets = off.buf,
        .nbatches = self->nbatches, .prefetch = prefetch, .nthreads = nthreads, .device = device,
        .resident_budget = (size_t)budget, .gpu_gather = gpu_gather,
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
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this batch iterator is already waiting for a batch in another thread; "
                                            "one thread at a time may take batches from it");
        return NULL;
    }
    if (!self->loader || self->next >= self->nbatches) {
        loader_close_(self);
        return NULL; /* StopIteration */
    }
    int64_t batch = self->next;
    ddpc_status st;
    int queued = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_loader_wait(self->loader, batch);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (st == DDPC_OK && !self->close_asked) {
        out = self->pending[batch % self->prefetch];
        self->pending[batch % self->prefetch] = NULL;
        self->next++;
        queued = batch + self->prefetch >= self->nbatches || queue_batch_(self, batch + self->prefetch) == 0;
    }
    self->busy = 0;
    if (st != DDPC_OK) {
        loader_close_(self);
        return ddpc_raise(st);
    }
    if (self->close_asked || !queued) { /* closed by another thread meanwhile (StopIteration), or queuing failed */
        Py_XDECREF(out);
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

static PyObject *loader_stats(loader_object *self, PyObject *unused) {
    (void)unused;
    ddpc_loader_stats t = self->stats;
    if (self->loader) ddpc_loader_get_stats(self->loader, &t);
    return Py_BuildValue("{sLsLsdsdsdsdsdsdsi}", "batches", (long long)t.batches, "chunks", (long long)t.chunks,
                         "gather_s", t.gather_s, "copy_issue_s", t.copy_issue_s, "staging_wait_s",
                         t.staging_wait_s, "wait_s", t.wait_s, "wait_idle_s", t.wait_idle_s, "elapsed_s",
                         t.elapsed_s, "direct", t.direct);
}

static void loader_dealloc(loader_object *self) {
    loader_close_(self);
    PyMem_Free(self->pending);
    Py_XDECREF(self->pool);
    Py_XDECREF(self->sources);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef loader_methods[] = {
    {"close", (PyCFunction)loader_close, METH_NOARGS, "stop the threads and drop the queued batches"},
    {"__length_hint__", (PyCFunction)loader_len, METH_NOARGS, NULL},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS,
     "where the time went so far, in seconds: batches, chunks, gather_s, copy_issue_s and staging_wait_s "
     "(thread-seconds over every thread), wait_s and wait_idle_s (next()'s waits, and their part asleep), "
     "elapsed_s (kept after the pass ends or close()); direct: 1 where the GPU gathers the rows itself "
     "(gpu_gather), 0 where batches are staged"},
    {"__reduce__", ddpc_refuse_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot loader_slots[] = {
    {Py_tp_new, loader_new},
    {Py_tp_dealloc, loader_dealloc},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, loader_iternext},
    {Py_tp_methods, loader_methods},
    {Py_tp_doc, "Loader(sources, file_backed, indices, offsets, prefetch=2, num_threads=2, device=None, "
                "pin_memory=False, resident_budget=64 MiB, gpu_gather=False): one pass over indices, batch b "
                "being indices[offsets[b]:offsets[b+1]]; yields a tuple of new Buffers per batch. gpu_gather "
                "(a CUDA device only; experimental): the GPU gathers the rows from the sources in place where "
                "they allow it, instead of threads staging them through pinned memory"},
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
    long long n, num_samples, first = 0;
    int replacement;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "LLpK|L:random_sampler_indices", &n, &num_samples, &replacement, &seed, &first))
        return NULL;
    if (num_samples < 0) return PyErr_Format(PyExc_ValueError, "num_samples must be >= 0, got %lld", num_samples);
    if (first < 0) return PyErr_Format(PyExc_ValueError, "first must be >= 0, got %lld", first);
    ddpc_buffer *out = new_indices_(num_samples);
    if (!out) return NULL;
    int64_t *p = out->data;
    RUN_RELEASED_(out, ddpc_random_sampler_indices(n, num_samples, replacement, seed, first, p));
    return (PyObject *)out;
}

static PyObject *py_weighted_sampler_indices(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *weights_obj;
    long long total, r, rank;
    int replacement;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OLpLLK:weighted_sampler_indices", &weights_obj, &total, &replacement, &r, &rank,
                          &seed))
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
     "random_sampler_indices(n, num_samples, replacement, seed, first=0) -> int64 Buffer: draws first.. of the sequence"},
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
    npy_type_ = (PyTypeObject *)PyObject_GetAttrString(m, "NpyFile");
    if (!npy_type_) return -1;
    Py_DECREF(npy_type_); /* the module keeps it alive */
    return PyModule_AddFunctions(m, loader_functions);
}
