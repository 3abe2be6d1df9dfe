/* The Buffer type: construction, views, the buffer protocol, DLPack and
 * moving host memory into shared memory. */
#include "buffer.h"

#include <structmember.h>

#include "dlpack.h"
#include "size.h"
#include "module.h"

PyTypeObject *ddpc_BufferType;

/* ---- argument parsing shared by every binding -------------------------------- */

int ddpc_parse_dtype(PyObject *obj, ddpc_dtype *dtype) {
    if (PyLong_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v < 0 || v >= DDPC_NDTYPES) {
            PyErr_Format(PyExc_ValueError, "unknown dtype code %ld", v);
            return -1;
        }
        *dtype = (ddpc_dtype)v;
        return 0;
    }
    if (PyUnicode_Check(obj)) {
        const char *s = PyUnicode_AsUTF8(obj);
        if (!s) return -1;
        for (int i = 0; i < DDPC_NDTYPES; i++)
            if (strcmp(s, ddpc_dtype_name((ddpc_dtype)i)) == 0) {
                *dtype = (ddpc_dtype)i;
                return 0;
            }
        PyErr_Format(PyExc_TypeError,
                     "unknown dtype %R (ddpc supports float32, float64, float16, bfloat16, int32, int64, uint8, "
                     "complex64, complex128, bool)", obj);
        return -1;
    }
    PyErr_Format(PyExc_TypeError, "dtype must be a dtype name, got %R", obj);
    return -1;
}

int ddpc_parse_device(PyObject *obj, int *device) {
    if (obj == NULL || obj == Py_None) {
        *device = DDPC_CPU;
        return 0;
    }
    if (PyLong_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v < -1) {
            PyErr_Format(ddpc_ArgumentError, "invalid device index %ld", v);
            return -1;
        }
        *device = (int)v;
        return 0;
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "device must be 'cpu', 'cuda', 'cuda:N' or an int, got %R", obj);
        return -1;
    }
    const char *s = PyUnicode_AsUTF8(obj);
    if (!s) return -1;
    if (strcmp(s, "cpu") == 0) {
        *device = DDPC_CPU;
        return 0;
    }
    if (strncmp(s, "cuda", 4) == 0) {
        if (s[4] == '\0') {
            if (ddpc_cuda_current_device(device) != DDPC_OK) return ddpc_raise(DDPC_ERR_NOCUDA), -1;
            return 0;
        }
        char *end = NULL;
        long v = s[4] == ':' ? strtol(s + 5, &end, 10) : -1;
        if (s[4] == ':' && end != s + 5 && *end == '\0' && v >= 0 && v < 1 << 20) {
            *device = (int)v;
            return 0;
        }
    }
    PyErr_Format(ddpc_ArgumentError, "invalid device string %R (expected 'cpu', 'cuda' or 'cuda:N')", obj);
    return -1;
}

int ddpc_parse_shape(PyObject *seq, int64_t *shape, int64_t *numel) {
    PyObject *fast = PySequence_Fast(seq, "shape must be a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > DDPC_MAX_NDIM) {
        Py_DECREF(fast);
        PyErr_Format(ddpc_ArgumentError, "%zd dimensions requested; ddpc supports at most %d", n, DDPC_MAX_NDIM);
        return -1;
    }
    int64_t total = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyLong_Check(item) && !PyIndex_Check(item)) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_TypeError, "shape entries must be ints, got %R", item);
            return -1;
        }
        long long v = PyLong_AsLongLong(item);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        if (v < 0) {
            Py_DECREF(fast);
            PyErr_Format(ddpc_ArgumentError, "negative dimension %lld in shape %R", v, seq);
            return -1;
        }
        if (v > 0 && total > INT64_MAX / 16 / v) {
            Py_DECREF(fast);
            PyErr_Format(ddpc_ArgumentError, "shape %R is too large", seq);
            return -1;
        }
        shape[i] = v;
        total *= v;
    }
    Py_DECREF(fast);
    *numel = total;
    return (int)n;
}

static int64_t numel_of_(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* ---- construction ------------------------------------------------------------ */

static ddpc_buffer *alloc_object_(int ndim, const int64_t *shape, ddpc_dtype dtype, int device) {
    ddpc_buffer *b = (ddpc_buffer *)ddpc_BufferType->tp_alloc(ddpc_BufferType, 0);
    if (!b) return NULL;
    b->ndim = ndim;
    for (int i = 0; i < ndim; i++) b->shape[i] = shape[i];
    b->numel = numel_of_(ndim, shape);
    b->dtype = dtype;
    b->device = device;
    return b;
}

ddpc_buffer *ddpc_buffer_new(int ndim, const int64_t *shape, ddpc_dtype dtype, int device, int pinned) {
    ddpc_buffer *b = alloc_object_(ndim, shape, dtype, device);
    if (!b) return NULL;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_alloc(device, ddpc_buffer_nbytes(b), pinned, &b->block);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) {
        Py_DECREF(b);
        return (ddpc_buffer *)ddpc_raise(st);
    }
    b->data = b->block->ptr;
    return b;
}

static int has_buffer_base_(const ddpc_buffer *b) { return b->base && ddpc_buffer_check(b->base); }

ddpc_buffer *ddpc_buffer_view(ddpc_buffer *parent, void *data, int ndim, const int64_t *shape, ddpc_dtype dtype) {
    ddpc_buffer *b = alloc_object_(ndim, shape, dtype, parent->device);
    if (!b) return NULL;
    b->data = data;
    b->readonly = parent->readonly;
    /* Point at the buffer owning or importing the memory, so chains of views
     * stay one level deep and share its version counter (or at a view with a
     * counter of its own, which its views share). */
    ddpc_buffer *base = parent->block || parent->imported || !has_buffer_base_(parent) || parent->own_version
                            ? parent
                            : (ddpc_buffer *)parent->base;
    Py_INCREF(base);
    b->base = (PyObject *)base;
    b->next_view = base->views;
    if (base->views) base->views->prev_view = b;
    base->views = b;
    return b;
}

/* Takes b out of its base's list of views. A buffer imported from another
 * Buffer through the buffer protocol has that Buffer as its base without
 * being in the list (its export keeps the memory from moving instead). */
static void unlink_view_(ddpc_buffer *b) {
    ddpc_buffer *base = (ddpc_buffer *)b->base;
    if (b->prev_view) b->prev_view->next_view = b->next_view;
    else if (base->views == b) base->views = b->next_view;
    if (b->next_view) b->next_view->prev_view = b->prev_view;
}

/* Reports a failure that nobody can be told of directly (a free in a
 * deallocator), keeping whatever exception is being raised. */
static void report_unraisable_(ddpc_status st) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    ddpc_raise(st);
    PyErr_WriteUnraisable(NULL);
    PyErr_Restore(type, value, tb);
}

static PyObject *buffer_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    (void)type;
    static char *kwlist[] = {"shape", "dtype", "device", "pin_memory", NULL};
    PyObject *shape_obj, *dtype_obj = NULL, *device_obj = NULL;
    int pinned = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOp:Buffer", kwlist, &shape_obj, &dtype_obj, &device_obj, &pinned))
        return NULL;
    int64_t shape[DDPC_MAX_NDIM], numel;
    ddpc_dtype dtype = DDPC_FLOAT32;
    int device;
    int ndim = ddpc_parse_shape(shape_obj, shape, &numel);
    if (ndim < 0 || (dtype_obj && ddpc_parse_dtype(dtype_obj, &dtype) < 0) || ddpc_parse_device(device_obj, &device) < 0)
        return NULL;
    if (pinned && device != DDPC_CPU) {
        PyErr_SetString(PyExc_ValueError, "pin_memory=True only applies to cpu buffers");
        return NULL;
    }
    return (PyObject *)ddpc_buffer_new(ndim, shape, dtype, device, pinned);
}

static void buffer_dealloc(ddpc_buffer *b) {
    PyObject_GC_UnTrack(b);
    if (b->weakreflist) PyObject_ClearWeakRefs((PyObject *)b);
    if (has_buffer_base_(b)) unlink_view_(b);
    if (b->block) {
        ddpc_status st;
        Py_BEGIN_ALLOW_THREADS
        st = ddpc_free(b->block);
        Py_END_ALLOW_THREADS
        if (st != DDPC_OK) report_unraisable_(st);
    }
    if (b->imported) {
        PyBuffer_Release(b->imported);
        PyMem_Free(b->imported);
    }
    Py_CLEAR(b->base);
    PyTypeObject *tp = Py_TYPE(b);
    tp->tp_free((PyObject *)b);
    Py_DECREF(tp);
}

static int buffer_traverse(ddpc_buffer *b, visitproc visit, void *arg) {
    Py_VISIT(b->base);
    Py_VISIT(Py_TYPE(b));
    return 0;
}

/* ---- import from the buffer protocol ------------------------------------------ */

/* Whether a buffer-protocol format names a byte order other than this machine's. */
static int foreign_byte_order_(const char *fmt) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return fmt[0] == '>' || fmt[0] == '!';
#else
    return fmt[0] == '<';
#endif
}

static int dtype_from_format_(const char *fmt, Py_ssize_t itemsize, ddpc_dtype *out) {
    while (*fmt && strchr("@=<>!", *fmt)) fmt++;
    if (fmt[0] == 'Z' && (fmt[1] == 'f' || fmt[1] == 'd') && !fmt[2]) { /* numpy's complex64, complex128 */
        *out = fmt[1] == 'f' ? DDPC_COMPLEX64 : DDPC_COMPLEX128;
        return itemsize == (fmt[1] == 'f' ? 8 : 16) ? 0 : -1;
    }
    if (!fmt[0] || fmt[1]) return -1;
    switch (fmt[0]) {
    case 'f': *out = DDPC_FLOAT32; return itemsize == 4 ? 0 : -1;
    case 'd': *out = DDPC_FLOAT64; return itemsize == 8 ? 0 : -1;
    case 'e': *out = DDPC_FLOAT16; return itemsize == 2 ? 0 : -1;
    case 'B': *out = DDPC_UINT8; return itemsize == 1 ? 0 : -1;
    case '?': *out = DDPC_BOOL; return itemsize == 1 ? 0 : -1;
    case 'i': case 'l': case 'q':
        if (itemsize == 4) *out = DDPC_INT32;
        else if (itemsize == 8) *out = DDPC_INT64;
        else return -1;
        return 0;
    default: return -1;
    }
}

static PyObject *buffer_from_object(PyObject *cls, PyObject *args, PyObject *kwds) {
    (void)cls;
    static char *kwlist[] = {"obj", "dtype", NULL};
    PyObject *obj, *dtype_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:from_object", kwlist, &obj, &dtype_obj)) return NULL;
    Py_buffer *view = PyMem_Calloc(1, sizeof *view);
    if (!view) return PyErr_NoMemory();
    if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO) < 0) {
        PyMem_Free(view);
        return NULL;
    }
    ddpc_buffer *b = NULL;
    ddpc_dtype dtype;
    int64_t shape[DDPC_MAX_NDIM];
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_SetString(PyExc_ValueError,
                        "the array is not C-contiguous, so it cannot be viewed without a copy "
                        "(use ddpc.tensor(a) to copy it, or numpy.ascontiguousarray(a))");
        goto fail_;
    }
    if (view->format && view->itemsize > 1 && foreign_byte_order_(view->format)) {
        PyErr_Format(PyExc_TypeError,
                     "the array's bytes are in the other byte order (format '%s'); convert it first, e.g. "
                     "a.astype(a.dtype.newbyteorder('='))", view->format);
        goto fail_;
    }
    if (dtype_obj != Py_None) {
        if (ddpc_parse_dtype(dtype_obj, &dtype) < 0) goto fail_;
        if ((Py_ssize_t)ddpc_dtype_size(dtype) != view->itemsize) {
            PyErr_Format(PyExc_TypeError, "cannot view items of %zd bytes as %s", view->itemsize,
                         ddpc_dtype_name(dtype));
            goto fail_;
        }
    } else if (dtype_from_format_(view->format ? view->format : "B", view->itemsize, &dtype) < 0) {
        PyErr_Format(PyExc_TypeError,
                     "unsupported element format '%s' (%zd bytes); ddpc supports float32, float64, float16, "
                     "bfloat16, int32, int64, uint8, complex64, complex128 and bool",
                     view->format ? view->format : "B", view->itemsize);
        goto fail_;
    }
    if (view->ndim > DDPC_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "%d dimensions; ddpc supports at most %d", view->ndim, DDPC_MAX_NDIM);
        goto fail_;
    }
    for (int i = 0; i < view->ndim; i++) shape[i] = view->shape[i];
    b = alloc_object_(view->ndim, shape, dtype, DDPC_CPU);
    if (!b) goto fail_;
    b->data = view->buf;
    b->readonly = view->readonly;
    b->imported = view;
    b->base = obj;
    Py_INCREF(obj);
    return (PyObject *)b;
fail_:
    PyBuffer_Release(view);
    PyMem_Free(view);
    return NULL;
}

/* Raises where release_storage_() freed the memory `b` views. */
static int refuse_released_(ddpc_buffer *b, const char *what) {
    while (has_buffer_base_(b)) b = (ddpc_buffer *)b->base;
    if (!b->released) return 0;
    PyErr_Format(PyExc_RuntimeError, "%s: the tensor's storage has been released (restore_storage_() first)", what);
    return 1;
}

/* ---- export through the buffer protocol (host buffers) ------------------------ */

static int buffer_getbuffer(ddpc_buffer *b, Py_buffer *view, int flags) {
    if (refuse_released_(b, "export through the buffer protocol")) return -1;
    if (b->device != DDPC_CPU) {
        PyErr_Format(PyExc_BufferError, "a cuda:%d buffer has no host memory to export; copy it with .cpu() first",
                     b->device);
        return -1;
    }
    if ((flags & PyBUF_WRITABLE) && b->readonly) {
        PyErr_SetString(PyExc_BufferError, "buffer is read-only");
        return -1;
    }
    static const char *formats[DDPC_NDTYPES] = {"f", "d", "e", "H", "i", "q", "B", "Zf", "Zd", "?"};
    Py_ssize_t stride = (Py_ssize_t)ddpc_dtype_size(b->dtype);
    for (int i = b->ndim - 1; i >= 0; i--) {
        b->py_shape[i] = (Py_ssize_t)b->shape[i];
        b->py_strides[i] = stride;
        stride *= (Py_ssize_t)b->shape[i];
    }
    view->buf = b->data;
    view->obj = (PyObject *)b;
    Py_INCREF(b);
    view->len = (Py_ssize_t)ddpc_buffer_nbytes(b);
    view->itemsize = (Py_ssize_t)ddpc_dtype_size(b->dtype);
    view->readonly = b->readonly;
    view->ndim = b->ndim;
    view->format = (flags & PyBUF_FORMAT) ? (char *)formats[b->dtype] : NULL;
    view->shape = (flags & PyBUF_ND) ? b->py_shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? b->py_strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    b->exports++;
    return 0;
}

static void buffer_releasebuffer(ddpc_buffer *b, Py_buffer *view) {
    (void)view;
    b->exports--;
}

/* ---- DLPack -------------------------------------------------------------------- */

static const DLDataType dl_types_[DDPC_NDTYPES] = {
    {DL_FLOAT, 32, 1}, {DL_FLOAT, 64, 1}, {DL_FLOAT, 16, 1}, {DL_BFLOAT, 16, 1},
    {DL_INT, 32, 1},   {DL_INT, 64, 1},   {DL_UINT, 8, 1},  {DL_COMPLEX, 64, 1}, {DL_COMPLEX, 128, 1},
    {DL_BOOL, 8, 1},
};

/* Exported tensors hold a reference to the Buffer; the deleter may run on any thread. */
static void dl_release_(void *buffer, void *managed) {
    PyGILState_STATE g = PyGILState_Ensure();
    if (buffer) ((ddpc_buffer *)buffer)->exports--;
    Py_XDECREF((PyObject *)buffer);
    PyGILState_Release(g);
    PyMem_RawFree(managed);
}

static void dl_deleter_(DLManagedTensor *m) { dl_release_(m->manager_ctx, m); }
static void dl_deleter_versioned_(DLManagedTensorVersioned *m) { dl_release_(m->manager_ctx, m); }

static void dl_capsule_destructor_(PyObject *capsule) {
    /* A renamed ("used_...") capsule was consumed: the consumer owns it now. */
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
        if (m->deleter) m->deleter(m);
    } else if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        if (m->deleter) m->deleter(m);
    }
}

static void dl_describe_(ddpc_buffer *b, DLTensor *t) {
    t->data = b->data;
    t->device.device_type = b->device == DDPC_CPU ? DL_CPU : DL_CUDA;
    t->device.device_id = b->device == DDPC_CPU ? 0 : b->device;
    t->ndim = b->ndim;
    t->dtype = dl_types_[b->dtype];
    t->shape = b->shape;
    t->strides = NULL; /* compact row-major */
}

#ifdef DDPC_WITH_CUDA
/* Orders the consumer's `stream` after everything queued on our compute stream. */
static ddpc_status order_consumer_stream_(int device, long long stream) {
    void *compute;
    CHECK(ddpc_cuda_compute_stream(device, &compute));
    void *consumer = stream == 1 ? (void *)cudaStreamLegacy : stream == 2 ? (void *)cudaStreamPerThread : (void *)(intptr_t)stream;
    return ddpc_cuda_stream_after(device, consumer, device, compute);
}
#endif

static PyObject *buffer_dlpack(ddpc_buffer *b, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOO:__dlpack__", kwlist, &stream, &max_version, &dl_device, &copy))
        return NULL;
    if (refuse_released_(b, "__dlpack__")) return NULL;
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "ddpc exports DLPack without copying; copy=True is not supported");
        return NULL;
    }
    if (b->device != DDPC_CPU) {
#ifdef DDPC_WITH_CUDA
        long long s = stream == Py_None ? 1 : PyLong_AsLongLong(stream);
        if (s == -1 && PyErr_Occurred()) return NULL;
        if (s != -1) {
            ddpc_status st;
            Py_BEGIN_ALLOW_THREADS
            st = order_consumer_stream_(b->device, s);
            Py_END_ALLOW_THREADS
            if (st != DDPC_OK) return ddpc_raise(st);
        }
#endif
    } else if (stream != Py_None) {
        PyErr_SetString(PyExc_BufferError, "stream must be None for a cpu buffer");
        return NULL;
    }
    /* Consumers that understand DLPack 1.x get a versioned capsule, which can
     * carry the read-only flag (numpy marks legacy imports read-only). */
    int versioned = 0;
    if (max_version != Py_None) {
        long major = PyLong_AsLong(PyTuple_Check(max_version) && PyTuple_GET_SIZE(max_version) > 0
                                       ? PyTuple_GET_ITEM(max_version, 0)
                                       : max_version);
        if (major == -1 && PyErr_Occurred()) return NULL;
        versioned = major >= 1;
    }
    PyObject *capsule;
    Py_INCREF(b);
    if (versioned) {
        DLManagedTensorVersioned *m = PyMem_RawCalloc(1, sizeof *m);
        if (!m) {
            Py_DECREF(b);
            return PyErr_NoMemory();
        }
        m->version.major = 1;
        m->version.minor = 0;
        m->flags = b->readonly ? DL_FLAG_READ_ONLY : 0;
        dl_describe_(b, &m->dl_tensor);
        m->manager_ctx = b;
        m->deleter = dl_deleter_versioned_;
        capsule = PyCapsule_New(m, "dltensor_versioned", dl_capsule_destructor_);
        if (!capsule) PyMem_RawFree(m);
    } else {
        DLManagedTensor *m = PyMem_RawCalloc(1, sizeof *m);
        if (!m) {
            Py_DECREF(b);
            return PyErr_NoMemory();
        }
        dl_describe_(b, &m->dl_tensor);
        m->manager_ctx = b;
        m->deleter = dl_deleter_;
        capsule = PyCapsule_New(m, "dltensor", dl_capsule_destructor_);
        if (!capsule) PyMem_RawFree(m);
    }
    if (!capsule) Py_DECREF(b);
    else b->exports++;
    return capsule;
}

static PyObject *buffer_dlpack_device(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("(ii)", b->device == DDPC_CPU ? DL_CPU : DL_CUDA, b->device == DDPC_CPU ? 0 : b->device);
}

/* Owner of an imported DLPack tensor: calls the producer's deleter once. */
static void dl_owner_destructor_(PyObject *capsule) {
    void *m = PyCapsule_GetPointer(capsule, "ddpc.dlpack_owner");
    const int versioned = PyCapsule_GetContext(capsule) != NULL;
    if (!m) return;
    if (versioned) {
        DLManagedTensorVersioned *v = m;
        if (v->deleter) v->deleter(v);
    } else {
        DLManagedTensor *l = m;
        if (l->deleter) l->deleter(l);
    }
}

static PyObject *buffer_from_dlpack(PyObject *cls, PyObject *capsule) {
    (void)cls;
    DLTensor *t;
    void *managed;
    int versioned = PyCapsule_IsValid(capsule, "dltensor_versioned");
    int readonly = 0;
    if (versioned) {
        DLManagedTensorVersioned *v = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        if (v->version.major > 1) {
            PyErr_Format(PyExc_BufferError, "DLPack version %u.%u is newer than ddpc understands (1.x)",
                         v->version.major, v->version.minor);
            return NULL;
        }
        t = &v->dl_tensor;
        readonly = (v->flags & DL_FLAG_READ_ONLY) != 0;
        managed = v;
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *l = PyCapsule_GetPointer(capsule, "dltensor");
        t = &l->dl_tensor;
        managed = l;
    } else {
        PyErr_SetString(PyExc_TypeError, "expected an unconsumed DLPack capsule ('dltensor' or 'dltensor_versioned')");
        return NULL;
    }
    int device;
    if (t->device.device_type == DL_CPU || t->device.device_type == DL_CUDA_HOST) {
        device = DDPC_CPU;
    } else if (t->device.device_type == DL_CUDA || t->device.device_type == DL_CUDA_MANAGED) {
        device = t->device.device_id;
    } else {
        PyErr_Format(PyExc_BufferError, "DLPack device type %d is not supported (cpu and cuda only)",
                     t->device.device_type);
        return NULL;
    }
    ddpc_dtype dtype = DDPC_NDTYPES;
    for (int i = 0; i < DDPC_NDTYPES; i++)
        if (dl_types_[i].code == t->dtype.code && dl_types_[i].bits == t->dtype.bits && t->dtype.lanes == 1)
            dtype = (ddpc_dtype)i;
    if (dtype == DDPC_NDTYPES) {
        PyErr_Format(PyExc_BufferError, "DLPack dtype (code %u, %u bits, %u lanes) has no ddpc equivalent",
                     t->dtype.code, t->dtype.bits, t->dtype.lanes);
        return NULL;
    }
    if (t->ndim < 0 || t->ndim > DDPC_MAX_NDIM) {
        PyErr_Format(PyExc_BufferError, "DLPack tensor has %d dimensions; ddpc supports at most %d", t->ndim,
                     DDPC_MAX_NDIM);
        return NULL;
    }
    if (t->strides) { /* only compact row-major layouts can be viewed */
        int64_t expect = 1;
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (t->shape[i] != 1 && t->strides[i] != expect) {
                PyErr_SetString(PyExc_BufferError,
                                "the DLPack tensor is not contiguous; make it contiguous before handing it to ddpc");
                return NULL;
            }
            expect *= t->shape[i];
        }
    }
    PyObject *owner = PyCapsule_New(managed, "ddpc.dlpack_owner", dl_owner_destructor_);
    if (!owner) return NULL;
    if (versioned && PyCapsule_SetContext(owner, (void *)1) < 0) {
        Py_DECREF(owner);
        return NULL;
    }
    /* From here the owner capsule calls the deleter; mark the producer's capsule consumed. */
    if (PyCapsule_SetName(capsule, versioned ? "used_dltensor_versioned" : "used_dltensor") < 0) {
        PyCapsule_SetDestructor(owner, NULL);
        Py_DECREF(owner);
        return NULL;
    }
    ddpc_buffer *b = alloc_object_(t->ndim, t->shape, dtype, device);
    if (!b) {
        Py_DECREF(owner);
        return NULL;
    }
    b->data = (char *)t->data + t->byte_offset;
    b->readonly = readonly;
    b->base = owner;
    return (PyObject *)b;
}

/* ---- shared memory ------------------------------------------------------------ */

/* The buffer whose memory b views: the end of its chain of Buffer bases. */
static ddpc_buffer *storage_root_(ddpc_buffer *b) {
    while (has_buffer_base_(b)) b = (ddpc_buffer *)b->base;
    return b;
}

static int is_shared_(const ddpc_buffer *root) { return root->block && root->block->kind == DDPC_MEM_SHARED; }

static Py_ssize_t exports_of_tree_(const ddpc_buffer *b) {
    Py_ssize_t n = b->exports;
    for (const ddpc_buffer *v = b->views; v; v = v->next_view) n += exports_of_tree_(v);
    return n;
}

static void repoint_views_(ddpc_buffer *b, const char *from, char *to) {
    for (ddpc_buffer *v = b->views; v; v = v->next_view) {
        v->data = to + ((const char *)v->data - from);
        repoint_views_(v, from, to);
    }
}

static PyObject *buffer_share_memory(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    ddpc_buffer *root = storage_root_(b);
    if (root->device != DDPC_CPU) {
        PyErr_Format(PyExc_ValueError, "share_memory_: a cuda:%d buffer has no host memory to share", root->device);
        return NULL;
    }
    if (refuse_released_(root, "share_memory_")) return NULL;
    if (is_shared_(root)) Py_RETURN_NONE;
    char *from = root->data;
    const size_t nbytes = ddpc_buffer_nbytes(root);
    ddpc_block *block;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_alloc_shared(nbytes, &block);
    if (st == DDPC_OK && nbytes) memcpy(block->ptr, from, nbytes);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) return ddpc_raise(st);
    /* Checked with the GIL held again: the memory may have been exported or
     * moved by another thread during the copy. */
    Py_ssize_t exports = exports_of_tree_(root);
    if (root->data != from || exports) {
        st = ddpc_free(block);
        if (st != DDPC_OK) return ddpc_raise(st);
        if (root->data != from) Py_RETURN_NONE;
        PyErr_Format(PyExc_BufferError,
                     "share_memory_: %zd numpy array(s), memoryview(s) or DLPack export(s) view this memory by "
                     "address, and would be left on freed memory when it moves into shared memory; delete them "
                     "first, or share the tensor before making them",
                     exports);
        return NULL;
    }
    repoint_views_(root, from, block->ptr);
    ddpc_block *old = root->block;
    root->block = block;
    root->data = block->ptr;
    if (root->imported) {
        PyBuffer_Release(root->imported);
        PyMem_Free(root->imported);
        root->imported = NULL;
    }
    Py_CLEAR(root->base); /* the numpy array or DLPack producer whose memory this was */
    if (old) {
        Py_BEGIN_ALLOW_THREADS
        st = ddpc_free(old);
        Py_END_ALLOW_THREADS
        if (st != DDPC_OK) return ddpc_raise(st);
    }
    Py_RETURN_NONE;
}

/* ---- releasing and restoring storage ------------------------------------------ */

/* Frees the memory behind a buffer and every view of it, which keep their
 * shapes and offsets: restore_storage_() allocates it again and re-points
 * them, as share_memory_() moves it. Between the two the memory must not be
 * touched (its contents are gone); a fully sharded model frees its gathered
 * parameters this way between forward and backward while the autograd graph
 * still holds views of them. Only memory a Buffer allocated itself can go. */
static PyObject *buffer_release_storage(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    ddpc_buffer *root = storage_root_(b);
    if (root->released) Py_RETURN_NONE;
    if (!root->block || root->block->kind == DDPC_MEM_SHARED) {
        PyErr_SetString(PyExc_ValueError,
                        "release_storage_: only memory a tensor allocated itself (not a numpy array's, a DLPack "
                        "producer's or a shared-memory segment's) can be released");
        return NULL;
    }
    Py_ssize_t exports = exports_of_tree_(root);
    if (exports) {
        PyErr_Format(PyExc_BufferError,
                     "release_storage_: %zd numpy array(s), memoryview(s) or DLPack export(s) view this memory by "
                     "address, and would be left on freed memory; delete them first",
                     exports);
        return NULL;
    }
    ddpc_block *old = root->block;
    root->block = NULL;
    root->released = 1;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_free(old);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *buffer_restore_storage(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    ddpc_buffer *root = storage_root_(b);
    if (!root->released) Py_RETURN_NONE;
    ddpc_block *block;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_alloc(root->device, ddpc_buffer_nbytes(root), 0, &block);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) return ddpc_raise(st);
    /* The views still hold addresses in the freed block: only their
     * distances from root->data are used, never the memory. */
    repoint_views_(root, root->data, block->ptr);
    root->block = block;
    root->data = block->ptr;
    root->released = 0;
    Py_RETURN_NONE;
}

static PyObject *get_storage_released(ddpc_buffer *b, void *c) {
    (void)c;
    return PyBool_FromLong(storage_root_(b)->released);
}

/* Bytes of memory the storage this buffer views holds now: 0 once released. */
static PyObject *get_storage_nbytes(ddpc_buffer *b, void *c) {
    (void)c;
    const ddpc_buffer *root = storage_root_(b);
    return PyLong_FromSize_t(root->released ? 0 : ddpc_buffer_nbytes(root));
}

/* b's storage root where its memory is shared, else NULL with a ValueError naming `what`. */
static ddpc_buffer *shared_root_(ddpc_buffer *b, const char *what) {
    ddpc_buffer *root = storage_root_(b);
    if (is_shared_(root)) return root;
    PyErr_Format(PyExc_ValueError, "%s: the memory is not shared (share_memory_() moves it there)", what);
    return NULL;
}

static PyObject *buffer_send_shared(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    ddpc_buffer *root = shared_root_(b, "send_shared");
    if (!root) return NULL;
    ddpc_status st = ddpc_shared_send(root->block);
    if (st != DDPC_OK) return ddpc_raise(st);
    return Py_BuildValue("(sn)", ddpc_shared_name(root->block),
                         (Py_ssize_t)((char *)b->data - (char *)root->block->ptr));
}

static PyObject *buffer_unsend_shared(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    ddpc_buffer *root = shared_root_(b, "unsend_shared");
    if (!root) return NULL;
    ddpc_status st = ddpc_shared_unsend(root->block);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *buffer_from_shared(PyObject *cls, PyObject *args) {
    (void)cls;
    const char *name;
    Py_ssize_t offset;
    PyObject *shape_obj, *dtype_obj;
    if (!PyArg_ParseTuple(args, "snOO:from_shared", &name, &offset, &shape_obj, &dtype_obj)) return NULL;
    int64_t shape[DDPC_MAX_NDIM], numel;
    ddpc_dtype dtype;
    int ndim = ddpc_parse_shape(shape_obj, shape, &numel);
    if (ndim < 0 || ddpc_parse_dtype(dtype_obj, &dtype) < 0) return NULL;
    ddpc_block *block;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_open_shared(name, &block);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) return ddpc_raise(st);
    const size_t itemsize = ddpc_dtype_size(dtype), nbytes = (size_t)numel * itemsize;
    if (offset < 0 || (size_t)offset % itemsize || (size_t)offset > block->size ||
        nbytes > block->size - (size_t)offset) {
        PyErr_Format(PyExc_ValueError, "from_shared: %zu bytes at offset %zd do not fit in the %zu bytes of %s",
                     nbytes, offset, block->size, name);
        st = ddpc_free(block);
        if (st != DDPC_OK) ddpc_clear_error();
        return NULL;
    }
    /* The whole segment as bytes, which the tensor's buffer views: that keeps
     * its offset into the storage, and sends it on as it came. */
    int64_t seg_shape[1] = {(int64_t)block->size};
    ddpc_buffer *root = alloc_object_(1, seg_shape, DDPC_UINT8, DDPC_CPU);
    if (!root) {
        st = ddpc_free(block);
        if (st != DDPC_OK) ddpc_clear_error();
        return NULL;
    }
    root->block = block;
    root->data = block->ptr;
    ddpc_buffer *b = ddpc_buffer_view(root, (char *)block->ptr + offset, ndim, shape, dtype);
    Py_DECREF(root);
    return (PyObject *)b;
}

static PyObject *get_is_shared(ddpc_buffer *b, void *c) {
    (void)c;
    return PyBool_FromLong(is_shared_(storage_root_(b)));
}

/* ---- views and attributes ----------------------------------------------------- */

static PyObject *buffer_view_method(ddpc_buffer *b, PyObject *args) {
    long long offset;
    PyObject *shape_obj, *dtype_obj = NULL;
    if (!PyArg_ParseTuple(args, "LO|O:view", &offset, &shape_obj, &dtype_obj)) return NULL;
    int64_t shape[DDPC_MAX_NDIM], numel;
    int ndim = ddpc_parse_shape(shape_obj, shape, &numel);
    if (ndim < 0) return NULL;
    ddpc_dtype dtype = b->dtype;
    if (dtype_obj && ddpc_parse_dtype(dtype_obj, &dtype) < 0) return NULL;
    /* Another dtype reinterprets the bytes (complex64 as float32 pairs and
     * back): the view must fit in them and start on a multiple of its item. */
    size_t item = ddpc_dtype_size(b->dtype), new_item = ddpc_dtype_size(dtype);
    if (offset < 0 || offset > b->numel || (uint64_t)numel * new_item > (uint64_t)(b->numel - offset) * item) {
        PyErr_Format(PyExc_ValueError, "view of %lld %s elements at offset %lld does not fit in a buffer of %lld %s "
                     "elements", (long long)numel, ddpc_dtype_name(dtype), offset, (long long)b->numel,
                     ddpc_dtype_name(b->dtype));
        return NULL;
    }
    char *data = (char *)b->data + (size_t)offset * item;
    if ((size_t)offset * item % new_item) {
        PyErr_Format(PyExc_ValueError, "a %s view must start at a multiple of %zu bytes", ddpc_dtype_name(dtype),
                     new_item);
        return NULL;
    }
    return (PyObject *)ddpc_buffer_view(b, data, ndim, shape, dtype);
}

static PyObject *shape_tuple_(const ddpc_buffer *b) {
    PyObject *t = PyTuple_New(b->ndim);
    if (!t) return NULL;
    for (int i = 0; i < b->ndim; i++) {
        PyObject *v = PyLong_FromLongLong(b->shape[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *get_shape(ddpc_buffer *b, void *c) { (void)c; return ddpc_size_new(b->ndim, b->shape); }
static PyObject *get_dtype(ddpc_buffer *b, void *c) { (void)c; return PyUnicode_FromString(ddpc_dtype_name(b->dtype)); }
static PyObject *get_device(ddpc_buffer *b, void *c) { (void)c; return PyLong_FromLong(b->device); }
static PyObject *get_numel(ddpc_buffer *b, void *c) { (void)c; return PyLong_FromLongLong(b->numel); }
static PyObject *get_nbytes(ddpc_buffer *b, void *c) { (void)c; return PyLong_FromSize_t(ddpc_buffer_nbytes(b)); }
static PyObject *get_itemsize(ddpc_buffer *b, void *c) { (void)c; return PyLong_FromSize_t(ddpc_dtype_size(b->dtype)); }
static PyObject *get_ndim(ddpc_buffer *b, void *c) { (void)c; return PyLong_FromLong(b->ndim); }
static PyObject *get_data_ptr(ddpc_buffer *b, void *c) { (void)c; return PyLong_FromVoidPtr(b->data); }
static PyObject *get_readonly(ddpc_buffer *b, void *c) { (void)c; return PyBool_FromLong(b->readonly); }
static PyObject *get_is_pinned(ddpc_buffer *b, void *c) {
    (void)c;
    const ddpc_buffer *owner = b;
    while (!owner->block && owner->base && ddpc_buffer_check(owner->base)) owner = (ddpc_buffer *)owner->base;
    return PyBool_FromLong(owner->block && owner->block->kind == DDPC_MEM_PINNED);
}
/* The buffer whose version counter b's writes bump: the one owning or
 * importing the memory that b views, or the view made to count apart. */
static ddpc_buffer *version_holder_(ddpc_buffer *b) {
    while (!b->block && !b->imported && !b->own_version && b->base && ddpc_buffer_check(b->base))
        b = (ddpc_buffer *)b->base;
    return b;
}
static PyObject *buffer_unversioned(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    ddpc_buffer *v = ddpc_buffer_view(b, b->data, b->ndim, b->shape, b->dtype);
    if (v) v->own_version = 1;
    return (PyObject *)v;
}
static PyObject *get_version(ddpc_buffer *b, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(version_holder_(b)->version);
}
static PyObject *buffer_bump_version(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    version_holder_(b)->version++;
    Py_RETURN_NONE;
}

/* A view whose base another object also holds: a write into it changes
 * what that object sees. A view held alone by its base (an op's fresh result
 * given its final shape) owns its memory in all but name. */
static PyObject *get_views_shared(ddpc_buffer *b, void *c) {
    (void)c;
    return PyBool_FromLong(b->base && ddpc_buffer_check(b->base) && Py_REFCNT(b->base) > 1);
}

static PyObject *get_view_count(ddpc_buffer *b, void *c) {
    (void)c;
    Py_ssize_t n = 0;
    for (const ddpc_buffer *v = b->views; v; v = v->next_view) n++;
    return PyLong_FromSsize_t(n);
}

static PyObject *get_base(ddpc_buffer *b, void *c) {
    (void)c;
    PyObject *r = b->base ? b->base : Py_None;
    Py_INCREF(r);
    return r;
}

static PyObject *buffer_repr(ddpc_buffer *b) {
    PyObject *shape = shape_tuple_(b);
    if (!shape) return NULL;
    PyObject *r = b->device == DDPC_CPU
                      ? PyUnicode_FromFormat("<ddpc._C.Buffer shape=%R dtype=%s device=cpu>", shape, ddpc_dtype_name(b->dtype))
                      : PyUnicode_FromFormat("<ddpc._C.Buffer shape=%R dtype=%s device=cuda:%d>", shape,
                                             ddpc_dtype_name(b->dtype), b->device);
    Py_DECREF(shape);
    return r;
}

static PyObject *buffer_reduce(ddpc_buffer *b, PyObject *unused) {
    (void)unused;
    (void)b;
    PyErr_SetString(PyExc_TypeError, "a raw _C.Buffer does not pickle; pickle the ddpc.Tensor that wraps it");
    return NULL;
}

static PyMethodDef buffer_methods[] = {
    {"from_object", (PyCFunction)(void (*)(void))buffer_from_object, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_object(obj, dtype=None): zero-copy view of a C-contiguous buffer-protocol object"},
    {"from_dlpack", (PyCFunction)buffer_from_dlpack, METH_O | METH_CLASS,
     "from_dlpack(capsule): zero-copy view of a DLPack capsule (consumes it)"},
    {"view", (PyCFunction)buffer_view_method, METH_VARARGS,
     "view(offset, shape, dtype=self.dtype): a view of numel(shape) elements starting at element offset; "
     "another dtype reinterprets the bytes"},
    {"__dlpack__", (PyCFunction)(void (*)(void))buffer_dlpack, METH_VARARGS | METH_KEYWORDS, "DLPack export"},
    {"__dlpack_device__", (PyCFunction)buffer_dlpack_device, METH_NOARGS, "DLPack device tuple"},
    {"__reduce__", (PyCFunction)buffer_reduce, METH_NOARGS, NULL},
    {"unversioned", (PyCFunction)buffer_unversioned, METH_NOARGS,
     "a view of the same memory whose writes are counted apart (what Tensor.data returns)"},
    {"bump_version", (PyCFunction)buffer_bump_version, METH_NOARGS,
     "counts an in-place write into this memory (autograd checks tensors saved for backward against it)"},
    {"share_memory_", (PyCFunction)buffer_share_memory, METH_NOARGS,
     "moves the host memory this buffer views into a shared-memory segment, in place (every view follows)"},
    {"release_storage_", (PyCFunction)buffer_release_storage, METH_NOARGS,
     "frees the memory this buffer views; every view keeps its place in it until restore_storage_()"},
    {"restore_storage_", (PyCFunction)buffer_restore_storage, METH_NOARGS,
     "allocates released memory again (contents undefined) and re-points every view at it"},
    {"send_shared", (PyCFunction)buffer_send_shared, METH_NOARGS,
     "(segment name, byte offset) of shared memory, with a reference taken for the process it is sent to"},
    {"unsend_shared", (PyCFunction)buffer_unsend_shared, METH_NOARGS,
     "drops a reference send_shared took for a process that will never drop it (killed by a signal)"},
    {"from_shared", (PyCFunction)buffer_from_shared, METH_VARARGS | METH_CLASS,
     "from_shared(name, offset, shape, dtype): a view of a segment send_shared named (takes over its reference)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef buffer_getset[] = {
    {"version", (getter)get_version, NULL, "in-place writes into this memory so far", NULL},
    {"shape", (getter)get_shape, NULL, "shape tuple", NULL},
    {"dtype", (getter)get_dtype, NULL, "dtype name", NULL},
    {"device", (getter)get_device, NULL, "-1 for cpu, else the CUDA ordinal", NULL},
    {"numel", (getter)get_numel, NULL, "number of elements", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "size in bytes", NULL},
    {"itemsize", (getter)get_itemsize, NULL, "bytes per element", NULL},
    {"ndim", (getter)get_ndim, NULL, "number of dimensions", NULL},
    {"data_ptr", (getter)get_data_ptr, NULL, "address of the first element", NULL},
    {"readonly", (getter)get_readonly, NULL, "whether writes are refused", NULL},
    {"is_pinned", (getter)get_is_pinned, NULL, "whether the memory is page-locked host memory", NULL},
    {"is_shared", (getter)get_is_shared, NULL, "whether the memory is in a shared-memory segment", NULL},
    {"base", (getter)get_base, NULL, "the object owning a view's memory", NULL},
    {"view_count", (getter)get_view_count, NULL,
     "how many live views have this buffer as their base (its memory can't move without them)", NULL},
    {"storage_released", (getter)get_storage_released, NULL, "whether release_storage_() freed the memory", NULL},
    {"storage_nbytes", (getter)get_storage_nbytes, NULL,
     "bytes the storage this buffer views holds now (0 while released)", NULL},
    {"views_shared", (getter)get_views_shared, NULL,
     "whether this is a view of a buffer that something else holds too (a write would reach it)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot buffer_slots[] = {
    {Py_tp_new, buffer_tp_new},
    {Py_tp_dealloc, buffer_dealloc},
    {Py_tp_traverse, buffer_traverse},
    {Py_tp_repr, buffer_repr},
    {Py_tp_methods, buffer_methods},
    {Py_tp_getset, buffer_getset},
    {Py_bf_getbuffer, buffer_getbuffer},
    {Py_bf_releasebuffer, buffer_releasebuffer},
    {Py_tp_doc, "Buffer(shape, dtype='float32', device='cpu', pin_memory=False): contiguous n-d storage"},
    {0, NULL},
};

static PyMemberDef buffer_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ddpc_buffer, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

int ddpc_buffer_register(PyObject *module) {
    PyType_Slot slots[sizeof buffer_slots / sizeof buffer_slots[0] + 1];
    memcpy(slots, buffer_slots, sizeof buffer_slots);
    slots[sizeof buffer_slots / sizeof buffer_slots[0] - 1] = (PyType_Slot){Py_tp_members, buffer_members};
    slots[sizeof buffer_slots / sizeof buffer_slots[0]] = (PyType_Slot){0, NULL};
    PyType_Spec spec = {
        .name = "ddpc._C.Buffer",
        .basicsize = sizeof(ddpc_buffer),
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
        .slots = slots,
    };
    PyObject *type = PyType_FromModuleAndSpec(module, &spec, NULL);
    if (!type) return -1;
    ddpc_BufferType = (PyTypeObject *)type;
    return PyModule_AddObjectRef(module, "Buffer", type) < 0 ? -1 : 0;
}
