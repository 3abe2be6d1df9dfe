/* ddpc._C: module init, error types, device/memory queries, build info and the event-file checksum. */
#include "module.h"

#include "alloc.h"
#include "amp.h"
#include "buffer.h"
#include "crc.h"
#include "cuda_libs.h"
#include "comm/nccl.h"
#include "comm/pycomm.h"
#include "device.h"
#include "loader.h"
#include "nvtx.h"
#include "ops.h"
#include "ops_complex.h"
#include "ops_conv.h"
#include "ops_grid.h"
#include "ops_ctc.h"
#include "ops_dim.h"
#include "ops_embedding.h"
#include "ops_fft.h"
#include "ops_nn.h"
#include "ops_rnn.h"
#include "ops_select.h"
#include "ops_intmath.h"
#include "ops_search.h"
#include "ops_sort.h"
#include "size.h"

PyObject *ddpc_DistError, *ddpc_DistTimeoutError, *ddpc_DistBackendError, *ddpc_DistBackendTimeoutError,
    *ddpc_DistNetworkError, *ddpc_DistNetworkTimeoutError, *ddpc_DistStoreError, *ddpc_DistStoreTimeoutError, *ddpc_QueueEmptyError;
PyObject *ddpc_OutOfMemoryError, *ddpc_ArgumentError, *ddpc_DtypeError, *ddpc_IndexOutOfRangeError;

PyObject *ddpc_raise(ddpc_status st) {
    PyObject *type;
    switch (st) {
    case DDPC_ERR_ARG: type = ddpc_ArgumentError; break;
    case DDPC_ERR_TYPE: type = ddpc_DtypeError; break;
    case DDPC_ERR_INDEX: type = ddpc_IndexOutOfRangeError; break;
    case DDPC_ERR_OOM: type = PyExc_MemoryError; break;
    case DDPC_ERR_DEVICE_OOM: type = ddpc_OutOfMemoryError; break;
    case DDPC_ERR_SYS: type = PyExc_OSError; break;
    case DDPC_ERR_DIST: type = ddpc_DistBackendError; break;
    case DDPC_ERR_TIMEOUT: type = ddpc_DistBackendTimeoutError; break;
    case DDPC_ERR_NET: type = ddpc_DistNetworkError; break;
    case DDPC_ERR_NET_TIMEOUT: type = ddpc_DistNetworkTimeoutError; break;
    case DDPC_ERR_STORE: type = ddpc_DistStoreError; break;
    case DDPC_ERR_STORE_TIMEOUT: type = ddpc_DistStoreTimeoutError; break;
    case DDPC_ERR_QUEUE_EMPTY: type = ddpc_QueueEmptyError; break;
    default: type = PyExc_RuntimeError; break;
    }
    PyErr_SetString(type, ddpc_last_error());
    ddpc_clear_error();
    return NULL;
}

PyObject *ddpc_refuse_pickle(PyObject *self, PyObject *unused) {
    (void)unused;
    return PyErr_Format(PyExc_TypeError, "a %s is tied to this process and cannot be pickled", Py_TYPE(self)->tp_name);
}

/* ---- checksums ----------------------------------------------------------------- */

/* Bytes from which a checksum is worth giving up the GIL for. */
#define CRC_RELEASE_BYTES (1 << 16)

/* fn's checksum of a bytes-like object, extending value as zlib.crc32 does. */
static PyObject *checksum_(ddpc_status (*fn)(uint32_t *, const void *, size_t), const char *format, PyObject *args,
                           PyObject *kwargs) {
    static char *kwlist[] = {"data", "value", NULL};
    Py_buffer data;
    unsigned int value = 0; /* taken modulo 2**32, as zlib.crc32 takes its value */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, kwlist, &data, &value)) return NULL;
    uint32_t crc = value;
    ddpc_status st;
    if (data.len >= CRC_RELEASE_BYTES) {
        Py_BEGIN_ALLOW_THREADS st = fn(&crc, data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        st = fn(&crc, data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    if (st != DDPC_OK) return ddpc_raise(st);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_crc32(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    return checksum_(ddpc_crc32, "y*|I:crc32", args, kwargs);
}

static PyObject *py_crc32c(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    return checksum_(ddpc_crc32c, "y*|I:crc32c", args, kwargs);
}

/* ---- devices and memory -------------------------------------------------------- */

static PyObject *py_cuda_device_count(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyLong_FromLong(ddpc_cuda_device_count());
}

static PyObject *py_cuda_initialized(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyBool_FromLong(ddpc_cuda_initialized());
}

static PyObject *py_cuda_fork_unsafe(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyBool_FromLong(ddpc_cuda_fork_unsafe());
}

static PyObject *py_cuda_unavailable_reason(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyUnicode_FromString(ddpc_cuda_unavailable_reason());
}

static PyObject *py_cuda_properties(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    ddpc_device_props p;
    ddpc_status st = ddpc_cuda_properties(device, &p);
    if (st != DDPC_OK) return ddpc_raise(st);
    return Py_BuildValue("{s:s,s:n,s:(ii),s:i,s:s,s:O,s:O}", "name", p.name, "total_memory",
                         (Py_ssize_t)p.total_memory, "capability", p.major, p.minor, "multi_processor_count",
                         p.multi_processor_count, "pci_bus_id", p.pci_bus_id, "can_map_host_memory",
                         p.can_map_host_memory ? Py_True : Py_False, "host_register_read_only",
                         p.host_register_read_only ? Py_True : Py_False);
}

static PyObject *py_cuda_set_device(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    ddpc_status st = ddpc_cuda_set_device(device);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_restore_device(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    ddpc_status st = ddpc_cuda_restore_device(device);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_current_device(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    int device;
    ddpc_status st = ddpc_cuda_current_device(&device);
    if (st != DDPC_OK) return ddpc_raise(st);
    return PyLong_FromLong(device);
}

static PyObject *py_cuda_synchronize(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_cuda_synchronize(device);
    Py_END_ALLOW_THREADS
    if (st == DDPC_OK) st = ddpc_cuda_check_index_errors(device, "when the device was next synchronized");
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_compute_stream(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    void *stream;
    ddpc_status st = ddpc_cuda_compute_stream(device, &stream);
    if (st != DDPC_OK) return ddpc_raise(st);
    return PyLong_FromVoidPtr(stream);
}

static PyObject *py_cuda_memory_stats(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    ddpc_mem_stats s;
    ddpc_status st = ddpc_device_mem_stats(device, &s);
    if (st != DDPC_OK) return ddpc_raise(st);
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:K}", "allocated", (Py_ssize_t)s.allocated, "reserved",
                         (Py_ssize_t)s.reserved, "peak_allocated", (Py_ssize_t)s.peak_allocated, "peak_reserved",
                         (Py_ssize_t)s.peak_reserved, "num_device_mallocs", (unsigned long long)s.num_device_mallocs);
}

static PyObject *py_cuda_empty_cache(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_device_empty_cache(device);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

/* Empties a host block cache with the GIL released; the bytes freed. */
static PyObject *empty_host_cache_(size_t (*empty)(void)) {
    size_t freed;
    Py_BEGIN_ALLOW_THREADS
    freed = empty();
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(freed);
}

static PyObject *py_cuda_host_empty_cache(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return empty_host_cache_(ddpc_pinned_empty_cache);
}

static PyObject *py_host_empty_cache(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return empty_host_cache_(ddpc_host_empty_cache);
}

static PyObject *py_host_cache_info(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    size_t cached, limit;
    ddpc_host_cache_info(&cached, &limit);
    return Py_BuildValue("(nn)", (Py_ssize_t)cached, (Py_ssize_t)limit);
}

static PyObject *py_cuda_reset_peak_memory(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    ddpc_status st = ddpc_device_reset_peak(device);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_mem_info(PyObject *m, PyObject *arg) {
    (void)m;
    int device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    size_t free_bytes, total;
    ddpc_status st = ddpc_cuda_mem_info(device, &free_bytes, &total);
    if (st != DDPC_OK) return ddpc_raise(st);
    return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes, (Py_ssize_t)total);
}

/* ---- events: a cudaEvent_t and its device in a capsule that destroys it ---- */

/* The device is kept with the event: once the host has seen the event's work
 * done, the index errors of that work are in the device's record. */
typedef struct {
    void *event;
    int device;
} event_;

static const char *const event_capsule_ = "ddpc.cuda_event";

static void event_capsule_free_(PyObject *capsule) {
    event_ *ev = PyCapsule_GetPointer(capsule, event_capsule_);
    ddpc_cuda_event_destroy(ev->event);
    PyMem_RawFree(ev);
}

static int arg_event_(PyObject *obj, void *out) {
    event_ *ev = PyCapsule_GetPointer(obj, event_capsule_);
    if (!ev) return 0;
    *(event_ **)out = ev;
    return 1;
}

static PyObject *py_cuda_event_create(PyObject *m, PyObject *args) {
    (void)m;
    int device, timing;
    if (!PyArg_ParseTuple(args, "ip:cuda_event_create", &device, &timing)) return NULL;
    event_ *ev = PyMem_RawMalloc(sizeof *ev);
    if (!ev) return PyErr_NoMemory();
    ev->device = device;
    ddpc_status st = ddpc_cuda_event_create(device, timing, &ev->event);
    if (st != DDPC_OK) {
        PyMem_RawFree(ev);
        return ddpc_raise(st);
    }
    PyObject *capsule = PyCapsule_New(ev, event_capsule_, event_capsule_free_);
    if (!capsule) {
        ddpc_cuda_event_destroy(ev->event);
        PyMem_RawFree(ev);
    }
    return capsule;
}

static PyObject *py_cuda_event_record(PyObject *m, PyObject *args) {
    (void)m;
    event_ *ev;
    int device;
    if (!PyArg_ParseTuple(args, "O&i:cuda_event_record", arg_event_, &ev, &device)) return NULL;
    ddpc_status st = ddpc_cuda_event_record(ev->event, device);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_event_wait(PyObject *m, PyObject *args) {
    (void)m;
    event_ *ev;
    int device;
    if (!PyArg_ParseTuple(args, "O&i:cuda_event_wait", arg_event_, &ev, &device)) return NULL;
    ddpc_status st = ddpc_cuda_event_wait(ev->event, device);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_event_query(PyObject *m, PyObject *arg) {
    (void)m;
    event_ *ev;
    int done;
    if (!arg_event_(arg, &ev)) return NULL;
    ddpc_status st = ddpc_cuda_event_query(ev->event, &done);
    if (st == DDPC_OK && done) st = ddpc_cuda_check_index_errors(ev->device, "when an event was next queried");
    if (st != DDPC_OK) return ddpc_raise(st);
    return PyBool_FromLong(done);
}

static PyObject *py_cuda_event_synchronize(PyObject *m, PyObject *arg) {
    (void)m;
    event_ *ev;
    if (!arg_event_(arg, &ev)) return NULL;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_cuda_event_synchronize(ev->event);
    Py_END_ALLOW_THREADS
    if (st == DDPC_OK) st = ddpc_cuda_check_index_errors(ev->device, "when an event was next waited for");
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_event_elapsed(PyObject *m, PyObject *args) {
    (void)m;
    event_ *start, *end;
    if (!PyArg_ParseTuple(args, "O&O&:cuda_event_elapsed", arg_event_, &start, arg_event_, &end)) return NULL;
    float ms;
    ddpc_status st = ddpc_cuda_event_elapsed(start->event, end->event, &ms);
    if (st != DDPC_OK) return ddpc_raise(st);
    return PyFloat_FromDouble(ms);
}

static PyObject *py_cuda_compiled(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
#ifdef DDPC_WITH_CUDA
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject *version_or_none_(int v) { return v ? PyLong_FromLong(v) : Py_NewRef(Py_None); }

static PyObject *py_build_info(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
#ifdef DDPC_WITH_NCCL
    const int nccl = 1;
#else
    const int nccl = 0;
#endif
#ifdef DDPC_WITH_CUDA
    const char *cuda_compiled = "yes";
#else
    const char *cuda_compiled = NULL;
#endif
    return Py_BuildValue("{s:O,s:O,s:N,s:N,s:N,s:N,s:N,s:s,s:s}", "cuda", cuda_compiled ? Py_True : Py_False, "nccl",
                         nccl ? Py_True : Py_False, "cuda_runtime_version",
                         version_or_none_(ddpc_cuda_runtime_version()), "cuda_driver_version",
                         version_or_none_(ddpc_cuda_driver_version()), "cublas_version",
                         version_or_none_(ddpc_cublas_version()), "cufft_version",
                         version_or_none_(ddpc_cufft_version()), "nccl_version", version_or_none_(ddpc_nccl_version()),
                         "compiler", __VERSION__, "build_date", __DATE__);
}

/* The file a library loaded at run time came from, loading it; its loader's error where none loads. */
static PyObject *library_path_(ddpc_status (*load)(void), const char *(*path)(void)) {
    ddpc_status st = load();
    if (st != DDPC_OK) return ddpc_raise(st);
    return PyUnicode_DecodeFSDefault(path());
}

static PyObject *py_cublas_library(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return library_path_(ddpc_cublas_load, ddpc_cublas_path);
}

static PyObject *py_cufft_library(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return library_path_(ddpc_cufft_load, ddpc_cufft_path);
}

static PyObject *py_release_shared_memory(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_shared_release_all();
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"cuda_device_count", py_cuda_device_count, METH_NOARGS, "number of usable GPUs (0 without driver or GPU)"},
    {"cuda_initialized", py_cuda_initialized, METH_NOARGS, "whether a CUDA context exists (fork is unsafe)"},
    {"cuda_fork_unsafe", py_cuda_fork_unsafe, METH_NOARGS, "whether the CUDA driver is up (a forked child cannot use it)"},
    {"cuda_unavailable_reason", py_cuda_unavailable_reason, METH_NOARGS, "why no GPU is usable, or ''"},
    {"cuda_properties", py_cuda_properties, METH_O, "properties of one GPU as a dict"},
    {"cuda_set_device", py_cuda_set_device, METH_O, "make a GPU current for this thread"},
    {"cuda_restore_device", py_cuda_restore_device, METH_O,
     "make a GPU current again for this thread without creating its context (where none exists, only ddpc sees it "
     "as current)"},
    {"cuda_current_device", py_cuda_current_device, METH_NOARGS, "the current GPU of this thread"},
    {"cuda_synchronize", py_cuda_synchronize, METH_O, "wait for all work on a GPU"},
    {"cuda_compute_stream", py_cuda_compute_stream, METH_O, "the compute stream of a GPU, as an int"},
    {"cuda_memory_stats", py_cuda_memory_stats, METH_O, "caching allocator statistics of a GPU"},
    {"cuda_empty_cache", py_cuda_empty_cache, METH_O, "return cached device blocks to the driver"},
    {"cuda_host_empty_cache", py_cuda_host_empty_cache, METH_NOARGS,
     "free the cached pinned host blocks; returns how many bytes that was"},
    {"host_empty_cache", py_host_empty_cache, METH_NOARGS,
     "host_empty_cache() -> bytes: frees the cached host blocks of 1 MiB and more"},
    {"host_cache_info", py_host_cache_info, METH_NOARGS,
     "host_cache_info() -> (cached bytes, limit): the host block cache (DDPC_HOST_CACHE_MB)"},
    {"cuda_reset_peak_memory", py_cuda_reset_peak_memory, METH_O, "start a GPU's peak_allocated and peak_reserved from now"},
    {"cuda_mem_info", py_cuda_mem_info, METH_O, "(free, total) bytes of a GPU, as the driver reports them"},
    {"cuda_event_create", py_cuda_event_create, METH_VARARGS, "cuda_event_create(device, timing): a new event"},
    {"cuda_event_record", py_cuda_event_record, METH_VARARGS,
     "cuda_event_record(event, device): record the event on the device's compute stream"},
    {"cuda_event_wait", py_cuda_event_wait, METH_VARARGS,
     "cuda_event_wait(event, device): make the device's compute stream wait for the event"},
    {"cuda_event_query", py_cuda_event_query, METH_O, "whether the work before the event has finished"},
    {"cuda_event_synchronize", py_cuda_event_synchronize, METH_O, "wait on the host for the event"},
    {"cuda_event_elapsed", py_cuda_event_elapsed, METH_VARARGS,
     "cuda_event_elapsed(start, end): milliseconds between two recorded timing events"},
    {"crc32", (PyCFunction)(void (*)(void))py_crc32, METH_VARARGS | METH_KEYWORDS,
     "crc32(data, value=0): the CRC-32 of a bytes-like object, equal to zlib.crc32's and faster on CPUs with "
     "carry-less multiply"},
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_VARARGS | METH_KEYWORDS,
     "crc32c(data, value=0): the CRC-32C (Castagnoli) of a bytes-like object, extending value as zlib.crc32 does"},
    {"build_info", py_build_info, METH_NOARGS, "what this build was compiled with"},
    {"cuda_compiled", py_cuda_compiled, METH_NOARGS,
     "whether this build has CUDA (build_info() says too, but loads cuBLAS, cuFFT and NCCL for their versions)"},
    {"cublas_library", py_cublas_library, METH_NOARGS,
     "the path of the libcublas ddpc uses, loaded on first use; RuntimeError saying what was tried when none loads"},
    {"cufft_library", py_cufft_library, METH_NOARGS,
     "the path of the libcufft ddpc uses, loaded on first use; RuntimeError saying what was tried when none loads"},
    {"release_shared_memory", py_release_shared_memory, METH_NOARGS,
     "drops this process's references to shared-memory segments (at its end); its mappings stay usable"},
    {NULL, NULL, 0, NULL},
};

/* A new exception class `name` ("module.Class") with one or two bases, added to m as Class. */
static PyObject *add_error_(PyObject *m, const char *name, const char *doc, PyObject *base, PyObject *second) {
    PyObject *bases = second ? PyTuple_Pack(2, base, second) : Py_NewRef(base);
    if (!bases) return NULL;
    PyObject *type = PyErr_NewExceptionWithDoc(name, doc, bases, NULL);
    Py_DECREF(bases);
    if (type && PyModule_AddObjectRef(m, strrchr(name, '.') + 1, type) < 0) Py_CLEAR(type);
    return type;
}

/* torch.distributed's error classes: a DistError (a RuntimeError) or one of
 * its subclasses, by what failed; ddpc's timeouts are also TimeoutErrors.
 * Each entry's bases come before it. */
static int add_dist_errors_(PyObject *m) {
    static const struct {
        PyObject **type;
        const char *name, *doc;
        PyObject **base, **second;
    } errors[] = {
        {&ddpc_DistError, "ddpc.DistError",
         "A distributed call failed: a collective, the store or a connection (the base of ddpc's distributed "
         "errors).",
         &PyExc_RuntimeError, NULL},
        {&ddpc_DistTimeoutError, "ddpc.DistTimeoutError",
         "A collective or rendezvous did not complete before its deadline.", &ddpc_DistError, &PyExc_TimeoutError},
        {&ddpc_DistBackendError, "ddpc.distributed.DistBackendError",
         "A collective failed in the backend: a peer died or left mid-collective, the ranks disagreed about it, "
         "the group was aborted or destroyed, or an NCCL call failed.",
         &ddpc_DistError, NULL},
        {&ddpc_DistBackendTimeoutError, "ddpc.distributed.DistBackendTimeoutError",
         "A collective (or its group's rendezvous) did not complete before the group's timeout, or Work.wait's: "
         "a DistBackendError, as PyTorch's NCCL watchdog raises, and a DistTimeoutError.",
         &ddpc_DistBackendError, &ddpc_DistTimeoutError},
        {&ddpc_DistNetworkError, "ddpc.distributed.DistNetworkError",
         "The store could not be reached (its address does not resolve, its port is taken, connections are "
         "refused) or the connection to it was lost.",
         &ddpc_DistError, NULL},
        {&ddpc_DistNetworkTimeoutError, "ddpc.distributed.DistNetworkTimeoutError",
         "No connection to the store could be made before the deadline (a DistNetworkError and a DistTimeoutError).",
         &ddpc_DistNetworkError, &ddpc_DistTimeoutError},
        {&ddpc_DistStoreError, "ddpc.distributed.DistStoreError",
         "The store failed a request: it refused this client, answered malformed, or a key vanished.",
         &ddpc_DistError, NULL},
        {&ddpc_DistStoreTimeoutError, "ddpc.distributed.DistStoreTimeoutError",
         "A store wait or get found no key, or a request no answer, before the deadline (a DistStoreError and a "
         "DistTimeoutError).",
         &ddpc_DistStoreError, &ddpc_DistTimeoutError},
        {&ddpc_QueueEmptyError, "ddpc.distributed.QueueEmptyError",
         "A store's queue_pop(key, block=False) found the queue empty (a DistStoreError).",
         &ddpc_DistStoreError, NULL},
    };
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        *errors[i].type = add_error_(m, errors[i].name, errors[i].doc, *errors[i].base,
                                     errors[i].second ? *errors[i].second : NULL);
        if (!*errors[i].type) return -1;
    }
    return 0;
}

/* The errors of bad arguments. PyTorch raises RuntimeError where an op's
 * arguments do not fit (shapes, sizes, dtypes) and IndexError (or
 * RuntimeError) for an index out of range; ddpc's are also the ValueError,
 * TypeError or IndexError a Python library raises for them, so both a
 * PyTorch user's `except RuntimeError` and a Python user's `except
 * ValueError` catch them. torch.cuda.OutOfMemoryError is a RuntimeError; a
 * MemoryError too, as ddpc raised before it existed. */
static int add_argument_errors_(PyObject *m) {
    ddpc_ArgumentError = add_error_(m, "ddpc.ArgumentError",
                                    "An op's arguments do not fit: shapes that do not broadcast or multiply, a view "
                                    "of the wrong size, a size or value the op cannot take (a ValueError, and the "
                                    "RuntimeError PyTorch raises for them).",
                                    PyExc_ValueError, PyExc_RuntimeError);
    if (!ddpc_ArgumentError) return -1;
    ddpc_IndexOutOfRangeError = add_error_(m, "ddpc.IndexOutOfRangeError",
                                           "An index or dim outside the tensor it indexes (an ArgumentError and an "
                                           "IndexError).",
                                           ddpc_ArgumentError, PyExc_IndexError);
    if (!ddpc_IndexOutOfRangeError) return -1;
    ddpc_DtypeError = add_error_(m, "ddpc.DtypeError",
                                 "An op was given a dtype it does not take, or dtypes that differ where they must "
                                 "match (a TypeError, and the RuntimeError PyTorch raises for them).",
                                 PyExc_TypeError, PyExc_RuntimeError);
    if (!ddpc_DtypeError) return -1;
    ddpc_OutOfMemoryError = add_error_(m, "ddpc.OutOfMemoryError",
                                       "A device allocation failed: the GPU's memory is used up.", PyExc_RuntimeError,
                                       PyExc_MemoryError);
    return ddpc_OutOfMemoryError ? 0 : -1;
}

static int module_exec(PyObject *m) {
    if (add_dist_errors_(m) < 0 || add_argument_errors_(m) < 0) return -1;
    if (ddpc_size_register(m) < 0 || ddpc_buffer_register(m) < 0 || ddpc_ops_register(m) < 0) return -1;
    if (ddpc_nn_register(m) < 0 || ddpc_conv_register(m) < 0 || ddpc_grid_register(m) < 0 || ddpc_dim_register(m) < 0 ||
        ddpc_sort_register(m) < 0 || ddpc_search_register(m) < 0 || ddpc_select_register(m) < 0 ||
        ddpc_ctc_register(m) < 0 || ddpc_intmath_register(m) < 0 || ddpc_comm_register(m) < 0 ||
        ddpc_nccl_register(m) < 0 || ddpc_loader_register(m) < 0 || ddpc_amp_register(m) < 0 ||
        ddpc_embedding_register(m) < 0 || ddpc_rnn_register(m) < 0 || ddpc_complex_register(m) < 0 ||
        ddpc_nvtx_register(m) < 0 || ddpc_fft_register(m) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ddpc._C",
    .m_doc = "The C core of ddpc: buffers, ops, the communicator and the loader.",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__C(void) {
    return PyModuleDef_Init(&module_def);
}
