/* Python types of the communicator: _C.Store, _C.ProcessGroup and _C.Work,
 * plus the death monitor switches. Argument checks live in
 * python/ddpc/distributed.py; here objects are turned into pointers and
 * every wait runs with the GIL released. Handles tied to this process refuse
 * pickling. */
#include "buffer.h"
#include "comm/group.h"
#include "comm/pycomm.h"
#include "comm/net.h"
#include "comm/store.h"
#include "module.h"

/* ---- Store ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ddpc_store *store;
} store_obj;

/* Runs `call` (a ddpc_status) with the GIL released; on failure, returns
 * its exception from the calling method. */
#define CALL_RELEASED_(call)                                                       \
    do {                                                                           \
        ddpc_status st_;                                                           \
        Py_BEGIN_ALLOW_THREADS st_ = (call);                                       \
        Py_END_ALLOW_THREADS                                                       \
        if (st_ != DDPC_OK) return ddpc_raise(st_);                                \
    } while (0)

static PyTypeObject *StoreType, *GroupType, *WorkType;

static int store_init(store_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"host", "port", "is_master", "token", "timeout", NULL};
    const char *host, *token = "";
    int port, is_master = 0;
    double timeout = 300;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "si|psd", kwlist, &host, &port, &is_master, &token, &timeout))
        return -1;
    if (self->store) {
        PyErr_SetString(PyExc_RuntimeError, "Store already initialised");
        return -1;
    }
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_store_init(&self->store, host, port, is_master, token, timeout);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) return ddpc_raise(st), -1;
    return 0;
}

static void store_dealloc(store_obj *self) {
    ddpc_store *s = self->store;
    self->store = NULL;
    if (s) {
        Py_BEGIN_ALLOW_THREADS
        ddpc_store_free(s);
        Py_END_ALLOW_THREADS
    }
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int store_ready_(store_obj *self) {
    if (self->store) return 1;
    PyErr_SetString(PyExc_ValueError, "the store is closed");
    return 0;
}

static double timeout_arg_(ddpc_store *s, PyObject *t) {
    return t == NULL || t == Py_None ? ddpc_store_timeout(s) : PyFloat_AsDouble(t);
}

static PyObject *store_get(store_obj *self, PyObject *args) {
    const char *key;
    PyObject *t = NULL;
    if (!PyArg_ParseTuple(args, "s|O", &key, &t) || !store_ready_(self)) return NULL;
    double timeout = timeout_arg_(self->store, t);
    if (PyErr_Occurred()) return NULL;
    void *val;
    size_t len;
    CALL_RELEASED_(ddpc_store_get(self->store, key, &val, &len, timeout));
    PyObject *r = PyBytes_FromStringAndSize(val, (Py_ssize_t)len);
    free(val);
    return r;
}

static PyObject *store_add(store_obj *self, PyObject *args) {
    const char *key;
    long long delta;
    if (!PyArg_ParseTuple(args, "sL", &key, &delta) || !store_ready_(self)) return NULL;
    int64_t r;
    CALL_RELEASED_(ddpc_store_add(self->store, key, delta, &r));
    return PyLong_FromLongLong(r);
}

static PyObject *store_compare_set(store_obj *self, PyObject *args) {
    const char *key;
    Py_buffer expected, desired;
    if (!PyArg_ParseTuple(args, "sy*y*", &key, &expected, &desired)) return NULL;
    if (!store_ready_(self)) {
        PyBuffer_Release(&expected);
        PyBuffer_Release(&desired);
        return NULL;
    }
    void *val;
    size_t len;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_store_compare_set(self->store, key, expected.buf, (size_t)expected.len, desired.buf,
                                (size_t)desired.len, &val, &len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&expected);
    PyBuffer_Release(&desired);
    if (st != DDPC_OK) return ddpc_raise(st);
    PyObject *r = PyBytes_FromStringAndSize(val, (Py_ssize_t)len);
    free(val);
    return r;
}

/* Converts a list of str keys into a C array that borrows from `seq`. */
static const char **keys_arg_(PyObject *seq, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "keys must be a sequence of str");
    if (!fast) return NULL;
    *n = PySequence_Fast_GET_SIZE(fast);
    const char **keys = PyMem_Malloc((size_t)(*n + 1) * sizeof *keys);
    for (Py_ssize_t i = 0; keys && i < *n; i++) {
        keys[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i));
        if (!keys[i]) { PyMem_Free(keys); keys = NULL; }
    }
    Py_DECREF(fast); /* the str objects stay alive in `seq` */
    if (!keys && !PyErr_Occurred()) PyErr_NoMemory();
    return keys;
}

/* The arguments (keys, timeout=None) of wait and multi_get: the keys
 * (PyMem_Free them), or NULL with an exception set. */
static const char **keys_timeout_args_(store_obj *self, PyObject *args, Py_ssize_t *n, double *timeout) {
    PyObject *seq, *t = NULL;
    if (!PyArg_ParseTuple(args, "O|O", &seq, &t) || !store_ready_(self)) return NULL;
    *timeout = timeout_arg_(self->store, t);
    if (PyErr_Occurred()) return NULL;
    return keys_arg_(seq, n);
}

static PyObject *store_wait(store_obj *self, PyObject *args) {
    Py_ssize_t n;
    double timeout;
    const char **keys = keys_timeout_args_(self, args, &n, &timeout);
    if (!keys) return NULL;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_store_wait(self->store, keys, (int)n, timeout);
    Py_END_ALLOW_THREADS
    PyMem_Free(keys);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *store_check(store_obj *self, PyObject *seq) {
    if (!store_ready_(self)) return NULL;
    Py_ssize_t n;
    const char **keys = keys_arg_(seq, &n);
    if (!keys) return NULL;
    int all;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_store_check(self->store, keys, (int)n, &all);
    Py_END_ALLOW_THREADS
    PyMem_Free(keys);
    if (st != DDPC_OK) return ddpc_raise(st);
    return PyBool_FromLong(all);
}

static PyObject *store_delete_key(store_obj *self, PyObject *args) {
    const char *key;
    if (!PyArg_ParseTuple(args, "s", &key) || !store_ready_(self)) return NULL;
    int deleted;
    CALL_RELEASED_(ddpc_store_delete(self->store, key, &deleted));
    return PyBool_FromLong(deleted);
}

static PyObject *store_num_keys(store_obj *self, PyObject *unused) {
    (void)unused;
    if (!store_ready_(self)) return NULL;
    int64_t n;
    CALL_RELEASED_(ddpc_store_num_keys(self->store, &n));
    return PyLong_FromLongLong(n);
}

/* set, append and queue_push: a key and a bytes-like value. */
static PyObject *store_key_value_(store_obj *self, PyObject *args,
                                  ddpc_status (*fn)(ddpc_store *, const char *, const void *, size_t)) {
    const char *key;
    Py_buffer val;
    if (!PyArg_ParseTuple(args, "sy*", &key, &val)) return NULL;
    /* Every path from here on releases the value's buffer: a leaked one
     * keeps a reference to it and, for a bytearray, forbids resizing it. */
    int ready = store_ready_(self);
    ddpc_status st = DDPC_OK;
    if (ready) {
        Py_BEGIN_ALLOW_THREADS
        st = fn(self->store, key, val.buf, (size_t)val.len);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&val);
    if (!ready) return NULL;
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *store_set(store_obj *self, PyObject *args) {
    return store_key_value_(self, args, ddpc_store_set);
}

static PyObject *store_append(store_obj *self, PyObject *args) {
    return store_key_value_(self, args, ddpc_store_append);
}

static PyObject *store_queue_push(store_obj *self, PyObject *args) {
    return store_key_value_(self, args, ddpc_store_queue_push);
}

static PyObject *store_multi_set(store_obj *self, PyObject *args) {
    PyObject *key_seq, *val_seq;
    if (!PyArg_ParseTuple(args, "OO", &key_seq, &val_seq) || !store_ready_(self)) return NULL;
    Py_ssize_t n;
    const char **keys = keys_arg_(key_seq, &n);
    if (!keys) return NULL;
    PyObject *vals = PySequence_Fast(val_seq, "values must be a sequence of bytes");
    Py_buffer *bufs = NULL;
    const void **ptrs = NULL;
    size_t *lens = NULL;
    Py_ssize_t got = 0;
    PyObject *res = NULL;
    if (!vals) goto out;
    if (PySequence_Fast_GET_SIZE(vals) != n) {
        PyErr_Format(PyExc_ValueError, "multi_set: %zd keys but %zd values", n, PySequence_Fast_GET_SIZE(vals));
        goto out;
    }
    bufs = PyMem_Calloc((size_t)n + 1, sizeof *bufs);
    ptrs = PyMem_Calloc((size_t)n + 1, sizeof *ptrs);
    lens = PyMem_Calloc((size_t)n + 1, sizeof *lens);
    if (!bufs || !ptrs || !lens) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(vals, got), &bufs[got], PyBUF_SIMPLE) < 0) goto out;
        ptrs[got] = bufs[got].buf;
        lens[got] = (size_t)bufs[got].len;
    }
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_store_multi_set(self->store, keys, ptrs, lens, (int)n);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) {
        ddpc_raise(st);
        goto out;
    }
    res = Py_NewRef(Py_None);
out:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
    PyMem_Free(ptrs);
    PyMem_Free(lens);
    Py_XDECREF(vals);
    PyMem_Free(keys);
    return res;
}

/* A list of `l`'s items, as bytes or (`as_str`) as str; frees `l`. */
static PyObject *list_from_(ddpc_store_list *l, int as_str) {
    PyObject *list = PyList_New((Py_ssize_t)l->n);
    for (size_t i = 0; list && i < l->n; i++) {
        PyObject *item = as_str ? PyUnicode_DecodeUTF8(l->items[i], (Py_ssize_t)l->lens[i], "surrogateescape")
                                : PyBytes_FromStringAndSize(l->items[i], (Py_ssize_t)l->lens[i]);
        if (!item) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    ddpc_store_list_free(l);
    return list;
}

static PyObject *store_multi_get(store_obj *self, PyObject *args) {
    Py_ssize_t n;
    double timeout;
    const char **keys = keys_timeout_args_(self, args, &n, &timeout);
    if (!keys) return NULL;
    ddpc_store_list l;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_store_multi_get(self->store, keys, (int)n, timeout, &l);
    Py_END_ALLOW_THREADS
    PyMem_Free(keys);
    if (st != DDPC_OK) return ddpc_raise(st);
    return list_from_(&l, 0);
}

static PyObject *store_list_keys(store_obj *self, PyObject *unused) {
    (void)unused;
    if (!store_ready_(self)) return NULL;
    ddpc_store_list l;
    CALL_RELEASED_(ddpc_store_list_keys(self->store, &l));
    return list_from_(&l, 1);
}

static PyObject *store_queue_pop(store_obj *self, PyObject *args) {
    const char *key;
    int block = 1;
    PyObject *t = NULL;
    if (!PyArg_ParseTuple(args, "s|pO", &key, &block, &t) || !store_ready_(self)) return NULL;
    double timeout = timeout_arg_(self->store, t);
    if (PyErr_Occurred()) return NULL;
    void *val;
    size_t len;
    CALL_RELEASED_(ddpc_store_queue_pop(self->store, key, block, timeout, &val, &len));
    PyObject *r = PyBytes_FromStringAndSize(val, (Py_ssize_t)len);
    free(val);
    return r;
}

static PyObject *store_queue_len(store_obj *self, PyObject *args) {
    const char *key;
    if (!PyArg_ParseTuple(args, "s", &key) || !store_ready_(self)) return NULL;
    int64_t n;
    CALL_RELEASED_(ddpc_store_queue_len(self->store, key, &n));
    return PyLong_FromLongLong(n);
}

static PyObject *store_barrier(store_obj *self, PyObject *args) {
    const char *key;
    long long world_size;
    PyObject *t = NULL;
    if (!PyArg_ParseTuple(args, "sL|O", &key, &world_size, &t) || !store_ready_(self)) return NULL;
    double timeout = timeout_arg_(self->store, t);
    if (PyErr_Occurred()) return NULL;
    CALL_RELEASED_(ddpc_store_barrier(self->store, key, world_size, timeout));
    Py_RETURN_NONE;
}

static PyObject *store_clone(store_obj *self, PyObject *unused) {
    (void)unused;
    if (!store_ready_(self)) return NULL;
    store_obj *c = (store_obj *)StoreType->tp_alloc(StoreType, 0);
    if (!c) return NULL;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_store_clone(self->store, &c->store);
    Py_END_ALLOW_THREADS
    if (st != DDPC_OK) {
        Py_DECREF(c);
        return ddpc_raise(st);
    }
    return (PyObject *)c;
}

static PyObject *store_wait_departed(store_obj *self, PyObject *args) {
    int n;
    double timeout;
    if (!PyArg_ParseTuple(args, "id", &n, &timeout) || !store_ready_(self)) return NULL;
    CALL_RELEASED_(ddpc_store_wait_departed(self->store, n, timeout));
    Py_RETURN_NONE;
}

static PyObject *store_get_port(store_obj *self, void *c) {
    (void)c;
    if (!store_ready_(self)) return NULL;
    return PyLong_FromLong(ddpc_store_port(self->store));
}

static PyObject *store_get_timeout(store_obj *self, void *c) {
    (void)c;
    if (!store_ready_(self)) return NULL;
    return PyFloat_FromDouble(ddpc_store_timeout(self->store));
}

static PyMethodDef store_methods[] = {
    {"set", (PyCFunction)store_set, METH_VARARGS, "set(key, value: bytes)"},
    {"get", (PyCFunction)store_get, METH_VARARGS, "get(key, timeout=None) -> bytes, waiting for the key"},
    {"add", (PyCFunction)store_add, METH_VARARGS, "add(key, delta) -> new value"},
    {"compare_set", (PyCFunction)store_compare_set, METH_VARARGS,
     "compare_set(key, expected: bytes, desired: bytes) -> the value afterwards"},
    {"wait", (PyCFunction)store_wait, METH_VARARGS, "wait(keys, timeout=None)"},
    {"check", (PyCFunction)store_check, METH_O, "check(keys) -> whether all exist"},
    {"delete_key", (PyCFunction)store_delete_key, METH_VARARGS, "delete_key(key) -> whether it existed"},
    {"num_keys", (PyCFunction)store_num_keys, METH_NOARGS, "number of keys"},
    {"append", (PyCFunction)store_append, METH_VARARGS, "append(key, value: bytes), creating the key"},
    {"multi_set", (PyCFunction)store_multi_set, METH_VARARGS, "multi_set(keys, values: bytes) at once"},
    {"multi_get", (PyCFunction)store_multi_get, METH_VARARGS,
     "multi_get(keys, timeout=None) -> [bytes], waiting for the keys"},
    {"list_keys", (PyCFunction)store_list_keys, METH_NOARGS, "the keys (not the queues)"},
    {"queue_push", (PyCFunction)store_queue_push, METH_VARARGS, "queue_push(key, value: bytes)"},
    {"queue_pop", (PyCFunction)store_queue_pop, METH_VARARGS,
     "queue_pop(key, block=True, timeout=None) -> bytes, the oldest item"},
    {"queue_len", (PyCFunction)store_queue_len, METH_VARARGS, "queue_len(key) -> items queued"},
    {"barrier", (PyCFunction)store_barrier, METH_VARARGS,
     "barrier(key, world_size, timeout=None): wait until world_size callers reached it"},
    {"clone", (PyCFunction)store_clone, METH_NOARGS, "a new connection to the same server"},
    {"wait_departed", (PyCFunction)store_wait_departed, METH_VARARGS, "wait until n ranks left or died"},
    {"__reduce__", ddpc_refuse_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef store_getset[] = {
    {"port", (getter)store_get_port, NULL, "port of the store server", NULL},
    {"timeout", (getter)store_get_timeout, NULL, "default timeout in seconds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot store_slots[] = {
    {Py_tp_init, store_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, store_dealloc},
    {Py_tp_methods, store_methods},
    {Py_tp_getset, store_getset},
    {Py_tp_doc, "Store(host, port, is_master=False, token='', timeout=300.0): TCP rendezvous store client "
                "(the master also hosts the server)."},
    {0, NULL},
};

static PyType_Spec store_spec = {"ddpc._C.Store", sizeof(store_obj), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
                                 store_slots};

/* ---- Work ----------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ddpc_work *work;
    Py_buffer *views;    /* of the memory the collective uses, held until it is done */
    int nviews;
    void **blocks;       /* the block pointers of a list the collective uses (ddpc_coll_args.blocks), or NULL */
    int source;          /* a recv's sender (group rank), once done */
} work_obj;

static void release_views_(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&views[i]);
}

/* The collective is done: its memory is the caller's again. */
static void work_let_go_(work_obj *self) {
    release_views_(self->views, self->nviews);
    PyMem_Free(self->views);
    PyMem_Free(self->blocks);
    self->views = NULL, self->blocks = NULL, self->nviews = 0;
}

static void work_dealloc(work_obj *self) {
    if (self->work) {
        /* Its group keeps a handle until the collective is done, so this wait
         * is for a handle whose group was let go first (bounded by the group
         * timeout): the collective still uses the viewed memory. */
        ddpc_work *w = self->work;
        Py_BEGIN_ALLOW_THREADS
        if (ddpc_work_wait(w, -1) != DDPC_OK) ddpc_clear_error();
        ddpc_work_release(w);
        Py_END_ALLOW_THREADS
    }
    work_let_go_(self);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *work_wait(work_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"timeout", NULL};
    PyObject *t = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &t)) return NULL;
    double timeout = t == Py_None ? -1 : PyFloat_AsDouble(t);
    if (PyErr_Occurred()) return NULL;
    if (!self->work) Py_RETURN_TRUE;
    CALL_RELEASED_(ddpc_work_wait(self->work, timeout));
    /* Done: the memory is the caller's again. The group keeps this handle
     * until its next call, and the views must not pin that memory so long
     * (a tensor whose storage is released right after the wait). */
    work_let_go_(self);
    Py_RETURN_TRUE;
}

static PyObject *work_is_completed(work_obj *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(!self->work || ddpc_work_done(self->work));
}

static PyObject *work_source(work_obj *self, PyObject *unused) {
    (void)unused;
    if (self->work && !ddpc_work_done(self->work))
        return PyErr_Format(PyExc_RuntimeError, "source_rank(): the recv has not finished; wait() for it first");
    return PyLong_FromLong(self->source);
}

static PyMethodDef work_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))work_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): block until the collective finished; raises its error"},
    {"is_completed", (PyCFunction)work_is_completed, METH_NOARGS, "whether the collective finished"},
    {"source", (PyCFunction)work_source, METH_NOARGS, "a finished recv's sender (group rank); -1 for other calls"},
    {"__reduce__", ddpc_refuse_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot work_slots[] = {
    {Py_tp_dealloc, work_dealloc},
    {Py_tp_methods, work_methods},
    {Py_tp_doc, "Handle of an asynchronous collective."},
    {0, NULL},
};

static PyType_Spec work_spec = {"ddpc._C.Work", sizeof(work_obj), 0, Py_TPFLAGS_DEFAULT, work_slots};

/* ---- ProcessGroup --------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ddpc_group *group;
    PyObject *store;
    int users;   /* calls using `group` with the GIL released (counted under the GIL) */
    int closed;  /* close() began: no new call starts, and the last user frees the group */
    PyObject *pending; /* list of the Works not known to be done: a handle the
                          caller drops is kept (with the memory it uses) until
                          its collective is over, so dropping it never blocks */
} group_obj;

static int group_init(group_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"store", "prefix", "rank", "size", "global_ranks", "backend", "timeout", NULL};
    PyObject *store, *granks;
    const char *prefix, *backend = "cpu";
    int rank, size;
    double timeout = 300;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!siiO|sd", kwlist, StoreType, &store, &prefix, &rank, &size,
                                     &granks, &backend, &timeout))
        return -1;
    if (self->group) {
        PyErr_SetString(PyExc_RuntimeError, "ProcessGroup already initialised");
        return -1;
    }
    const ddpc_backend *be = ddpc_backend_find(backend);
    if (!be) {
        PyErr_Format(PyExc_NotImplementedError, "the '%s' backend is not available in this build of ddpc "
                     "(available: cpu)", backend);
        return -1;
    }
    store_obj *so = (store_obj *)store;
    if (!store_ready_(so)) return -1;
    PyObject *fast = PySequence_Fast(granks, "global_ranks must be a sequence of int");
    if (!fast) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != size) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "global_ranks must have `size` entries");
        return -1;
    }
    int *gr = PyMem_Malloc((size_t)(size > 0 ? size : 1) * sizeof *gr);
    for (int i = 0; gr && i < size; i++) gr[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    Py_DECREF(fast);
    if (!gr) return PyErr_NoMemory(), -1;
    if (PyErr_Occurred()) return PyMem_Free(gr), -1;
    ddpc_status st;
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_group_init(&self->group, so->store, prefix, rank, size, gr, be, timeout);
    Py_END_ALLOW_THREADS
    PyMem_Free(gr);
    if (st != DDPC_OK) return ddpc_raise(st), -1;
    Py_INCREF(store);
    self->store = store;
    return 0;
}

static void group_free_(group_obj *self) {
    ddpc_group *g = self->group;
    self->group = NULL;
    if (g) {
        Py_BEGIN_ALLOW_THREADS
        ddpc_group_free(g); /* runs what was queued to its end */
        Py_END_ALLOW_THREADS
    }
    Py_CLEAR(self->pending);
    Py_CLEAR(self->store);
}

/* Keeps Work w (if not NULL) until its collective is done, and drops the
 * handles of those that are (without waiting: they are done); -1 with an
 * exception on failure. */
static int keep_pending_(group_obj *self, PyObject *w) {
    Py_ssize_t n = self->pending ? PyList_GET_SIZE(self->pending) : 0;
    if (n == 0 && !w) return 0;
    PyObject *kept = PyList_New(0);
    if (!kept) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        work_obj *o = (work_obj *)PyList_GET_ITEM(self->pending, i);
        if (!ddpc_work_done(o->work) && PyList_Append(kept, (PyObject *)o) < 0) {
            Py_DECREF(kept);
            return -1;
        }
    }
    if (w && PyList_Append(kept, w) < 0) {
        Py_DECREF(kept);
        return -1;
    }
    Py_XSETREF(self->pending, kept);
    return 0;
}

/* Around every use of self->group with the GIL released. */
static ddpc_group *group_enter_(group_obj *self) {
    self->users++;
    return self->group;
}

static void group_leave_(group_obj *self) {
    if (--self->users == 0 && self->closed) group_free_(self);
}

/* A thread blocked inside a call (a recv on a background thread, say) gets
 * this long to return when its group is closed; then the group fails, which
 * ends that call with an error. */
#define CLOSE_GRACE_S 1.0

/* Closing lets the calls still queued (an isend or async all_reduce whose
 * handle was dropped) run to their end, waiting for them up to the group's
 * timeout as PyTorch's gloo backend does, and interrupts a thread blocked in
 * a call after CLOSE_GRACE_S; whatever is left then is failed. The closer
 * counts as a user while it waits with the GIL released, so the group is
 * freed once, by the last user, and a second close returns at once. */
static void group_close_(group_obj *self) {
    if (self->closed || !self->group) return;
    self->closed = 1;
    ddpc_group *g = group_enter_(self);
    double wait_s = self->users > 1 ? CLOSE_GRACE_S : g->timeout_s;
    int idle;
    Py_BEGIN_ALLOW_THREADS
    idle = ddpc_group_idle(g, wait_s);
    Py_END_ALLOW_THREADS
    if (!idle)
        ddpc_group_fail(g, DDPC_ERR_DIST, "the process group was destroyed while this call was in progress");
    group_leave_(self);
}

static void group_dealloc(group_obj *self) {
    group_free_(self); /* no call is in progress: each holds a reference */
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int group_ready_(group_obj *self) {
    if (self->group && !self->closed) return 1;
    PyErr_SetString(PyExc_ValueError, "the process group was destroyed");
    return 0;
}

/* Host memory of a Buffer or a C-contiguous buffer-protocol object. */
static int view_(PyObject *obj, int writable, Py_buffer *view) {
    if (ddpc_buffer_check(obj) && ((ddpc_buffer *)obj)->device != DDPC_CPU) {
        PyErr_SetString(PyExc_TypeError, "the cpu backend takes host memory (CUDA buffers are staged by the caller)");
        return -1;
    }
    return PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0));
}

/* Submits `a` and either waits (GIL released) or returns a Work that holds
 * the views (their contents: the caller frees the array) and a->blocks
 * (PyMem-allocated, or NULL), which it takes in either case. */
static PyObject *launch_(group_obj *self, ddpc_coll_args *a, Py_buffer *views, int nviews, int async_op) {
    ddpc_status st;
    ddpc_group *g = group_enter_(self);
    if (!async_op) {
        Py_BEGIN_ALLOW_THREADS
        st = ddpc_group_submit(g, a, NULL);
        Py_END_ALLOW_THREADS
        group_leave_(self);
        release_views_(views, nviews);
        PyMem_Free((void *)a->blocks);
        if (st != DDPC_OK) return ddpc_raise(st);
        /* Lets go of the handles (and the memory they hold) of the calls done by now. */
        if (self->group && keep_pending_(self, NULL) < 0) return NULL;
        Py_RETURN_NONE;
    }
    work_obj *w = PyObject_New(work_obj, WorkType);
    Py_buffer *held = nviews ? PyMem_Malloc((size_t)nviews * sizeof *views) : NULL;
    if (!w || (nviews && !held)) {
        group_leave_(self), release_views_(views, nviews), PyMem_Free((void *)a->blocks), PyMem_Free(held);
        if (w) {
            w->work = NULL, w->views = NULL, w->blocks = NULL, w->nviews = 0;
            Py_DECREF(w);
        }
        return PyErr_NoMemory();
    }
    w->work = NULL;
    w->source = -1;
    if (a->source) a->source = &w->source; /* written when the recv completes: w outlives it */
    w->nviews = nviews;
    w->views = held;
    w->blocks = (void **)a->blocks;
    if (nviews) memcpy(w->views, views, (size_t)nviews * sizeof *views);
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_group_submit(g, a, &w->work);
    Py_END_ALLOW_THREADS
    group_leave_(self);
    if (st != DDPC_OK) {
        Py_DECREF(w);
        return ddpc_raise(st);
    }
    /* A group already freed ran the collective to its end. */
    if (self->group && keep_pending_(self, (PyObject *)w) < 0) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

/* The element type a collective moves; a complex one travels as pairs of its
 * real type, which sum and average part by part (reduce_op_arg_ refuses the
 * other reductions, as PyTorch does); a bool one as its bytes (0 or 1). */
static int dtype_arg_(int code, ddpc_dtype *dt) {
    if (code < 0 || code >= DDPC_NDTYPES) {
        PyErr_Format(PyExc_ValueError, "invalid dtype code %d", code);
        return -1;
    }
    *dt = code == DDPC_COMPLEX64    ? DDPC_FLOAT32
          : code == DDPC_COMPLEX128 ? DDPC_FLOAT64
          : code == DDPC_BOOL       ? DDPC_UINT8
                                    : (ddpc_dtype)code;
    return 0;
}

/* The reduction op a collective runs on the dtype code's elements (see ddpc_redop_on). */
static int reduce_op_arg_(int op, int code, const char *what, ddpc_redop *out) {
    if (op < 0 || op >= DDPC_NREDOPS) {
        PyErr_Format(PyExc_ValueError, "invalid reduce op %d", op);
        return -1;
    }
    if (ddpc_dtype_is_complex((ddpc_dtype)code) && op != DDPC_RED_SUM && op != DDPC_RED_AVG) {
        PyErr_Format(PyExc_ValueError, "%s does not support %s on complex tensors", what, ddpc_redop_name(op));
        return -1;
    }
    int on = ddpc_redop_on((ddpc_redop)op, (ddpc_dtype)code);
    if (on < 0) {
        PyErr_Format(PyExc_TypeError, "%s: Cannot use ReduceOp.AVG with boolean inputs", what);
        return -1;
    }
    *out = (ddpc_redop)on;
    return 0;
}

/* Element count of a view, checking it holds whole elements. */
static int count_(const Py_buffer *v, ddpc_dtype dt, size_t *count) {
    size_t es = ddpc_dtype_size(dt);
    if ((size_t)v->len % es) {
        PyErr_Format(PyExc_ValueError, "buffer of %zd bytes does not hold whole %s elements", v->len, ddpc_dtype_name(dt));
        return -1;
    }
    *count = (size_t)v->len / es;
    return 0;
}

int ddpc_arg_timeout(PyObject *o, double *seconds) {
    if (o == Py_None) {
        *seconds = 0;
        return 1;
    }
    double s = PyFloat_AsDouble(o);
    if (s == -1 && PyErr_Occurred()) return 0;
    if (!(s > 0)) {
        PyErr_Format(PyExc_ValueError, "timeout must be a positive number of seconds or None, got %g", s);
        return 0;
    }
    *seconds = s;
    return 1;
}

static PyObject *group_all_reduce(group_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buf", "dtype", "op", "async_op", "timeout", NULL};
    PyObject *obj;
    int code, op, async_op = 0;
    double timeout = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oii|p$O&", kwlist, &obj, &code, &op, &async_op, ddpc_arg_timeout,
                                     &timeout) ||
        !group_ready_(self))
        return NULL;
    ddpc_coll_args a = {.coll = DDPC_COLL_ALLREDUCE, .op = (ddpc_redop)op, .timeout_s = timeout};
    if (dtype_arg_(code, &a.dtype) < 0 || reduce_op_arg_(op, code, "all_reduce", &a.op) < 0) return NULL;
    Py_buffer v;
    if (view_(obj, 1, &v) < 0) return NULL;
    if (count_(&v, a.dtype, &a.count) < 0) return PyBuffer_Release(&v), NULL;
    a.in = a.out = v.buf;
    return launch_(self, &a, &v, 1, async_op);
}

static PyObject *group_broadcast(group_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buf", "dtype", "src", "async_op", "timeout", NULL};
    PyObject *obj;
    int code, src, async_op = 0;
    double timeout = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oii|p$O&", kwlist, &obj, &code, &src, &async_op, ddpc_arg_timeout,
                                     &timeout) ||
        !group_ready_(self))
        return NULL;
    ddpc_coll_args a = {.coll = DDPC_COLL_BROADCAST, .peer = src, .timeout_s = timeout};
    if (dtype_arg_(code, &a.dtype) < 0) return NULL;
    if (src < 0 || src >= self->group->size)
        return PyErr_Format(PyExc_ValueError, "src %d is not a rank of this group of %d", src, self->group->size);
    Py_buffer v;
    if (view_(obj, 1, &v) < 0) return NULL;
    if (count_(&v, a.dtype, &a.count) < 0) return PyBuffer_Release(&v), NULL;
    a.in = a.out = v.buf;
    return launch_(self, &a, &v, 1, async_op);
}

/* Whether `root` is a rank of the group, raising if not. */
static int root_arg_(group_obj *self, int root, const char *what) {
    if (root >= 0 && root < self->group->size) return 1;
    PyErr_Format(PyExc_ValueError, "%s: root %d is not a rank of this group of %d", what, root, self->group->size);
    return 0;
}

static int overlap_(const Py_buffer *x, const Py_buffer *y) {
    return x->len && y->len && (char *)x->buf < (char *)y->buf + y->len && (char *)y->buf < (char *)x->buf + x->len;
}

/* all_gather, reduce_scatter, gather and scatter: a rank's part (all_gather's
 * and gather's input, the others' output) and the whole, of one block of
 * the part's size per rank: one buffer, or a list or tuple of the blocks
 * (which no copy joins). gather's output and scatter's input are the
 * root's alone; the other ranks pass None. */
static PyObject *blocks_(group_obj *self, ddpc_coll_args *a, PyObject *out, PyObject *in, int async_op) {
    const char *what = ddpc_coll_name(a->coll);
    int gathering = ddpc_coll_gathers(a->coll);
    int rooted = ddpc_coll_rooted(a->coll), at_root = rooted && self->group->rank == a->peer;
    PyObject *whole = gathering ? out : in, *part = gathering ? in : out;
    const char *whole_name = gathering ? "output" : "input", *part_name = gathering ? "input" : "output";
    if (rooted && !at_root != (whole == Py_None))
        return PyErr_Format(PyExc_ValueError, "%s: the %s is %s", what, whole_name,
                            at_root ? "the root's: it must be given there" : "the root's alone: pass None here");
    int n = self->group->size, listed = PyList_Check(whole) || PyTuple_Check(whole), nv = 0;
    if (listed && PySequence_Fast_GET_SIZE(whole) != n)
        return PyErr_Format(PyExc_ValueError, "%s: the %s list holds %zd buffers; a group of %d takes one per rank",
                            what, whole_name, PySequence_Fast_GET_SIZE(whole), n);
    Py_buffer *v = PyMem_Calloc((size_t)n + 2, sizeof *v);
    void **blocks = listed ? PyMem_Malloc((size_t)n * sizeof *blocks) : NULL;
    if (!v || (listed && !blocks)) {
        PyErr_NoMemory();
        goto fail;
    }
    size_t count, nwhole;
    if (view_(part, !gathering, &v[nv]) < 0) goto fail;
    if (count_(&v[nv++], a->dtype, &count) < 0) goto fail;
    if (listed) {
        for (int r = 0; r < n; r++) {
            if (view_(PySequence_Fast_GET_ITEM(whole, r), gathering, &v[nv]) < 0) goto fail;
            if (count_(&v[nv++], a->dtype, &nwhole) < 0) goto fail;
            if (nwhole != count) {
                PyErr_Format(PyExc_ValueError, "%s: block %d of the %s list has %zu elements and the %s %zu", what,
                             r, whole_name, nwhole, part_name, count);
                goto fail;
            }
            blocks[r] = v[nv - 1].buf;
        }
    } else if (whole != Py_None) {
        if (view_(whole, gathering, &v[nv]) < 0) goto fail;
        if (count_(&v[nv++], a->dtype, &nwhole) < 0) goto fail;
        if (nwhole != count * (size_t)n) {
            PyErr_Format(PyExc_ValueError, "%s: output has %zu elements and input %zu; with %d ranks the %s must be "
                         "%d times the %s", what, gathering ? nwhole : count, gathering ? count : nwhole, n,
                         whole_name, n, part_name);
            goto fail;
        }
    }
    for (int i = 1; i < nv; i++)
        if (overlap_(&v[0], &v[i])) {
            PyErr_Format(PyExc_ValueError, "%s: input and output must not overlap", what);
            goto fail;
        }
    void *whole_buf = nv == 2 && !listed ? v[1].buf : NULL;
    a->count = count;
    a->in = gathering ? v[0].buf : whole_buf;
    a->out = gathering ? whole_buf : v[0].buf;
    a->blocks = blocks;
    PyObject *res = launch_(self, a, v, nv, async_op);
    PyMem_Free(v);
    return res;
fail:
    if (v) release_views_(v, nv);
    PyMem_Free(v);
    PyMem_Free(blocks);
    return NULL;
}

static PyObject *group_all_gather(group_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"out", "in", "dtype", "async_op", "timeout", NULL};
    PyObject *out, *in;
    int code, async_op = 0;
    ddpc_coll_args a = {.coll = DDPC_COLL_ALLGATHER};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOi|p$O&", kwlist, &out, &in, &code, &async_op, ddpc_arg_timeout,
                                     &a.timeout_s) ||
        !group_ready_(self) || dtype_arg_(code, &a.dtype) < 0)
        return NULL;
    return blocks_(self, &a, out, in, async_op);
}

static PyObject *group_reduce_scatter(group_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"out", "in", "dtype", "op", "async_op", "timeout", NULL};
    PyObject *out, *in;
    int code, op, async_op = 0;
    ddpc_coll_args a = {.coll = DDPC_COLL_REDUCE_SCATTER};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOii|p$O&", kwlist, &out, &in, &code, &op, &async_op,
                                     ddpc_arg_timeout, &a.timeout_s) ||
        !group_ready_(self) || dtype_arg_(code, &a.dtype) < 0 || reduce_op_arg_(op, code, "reduce_scatter", &a.op) < 0)
        return NULL;
    return blocks_(self, &a, out, in, async_op);
}

/* gather and scatter: the root's output (gather) or input (scatter) is the whole. */
static PyObject *rooted_blocks_(group_obj *self, PyObject *args, PyObject *kwds, ddpc_coll coll) {
    static char *kwlist[] = {"out", "in", "dtype", "root", "async_op", "timeout", NULL};
    PyObject *out, *in;
    int code, async_op = 0;
    ddpc_coll_args a = {.coll = coll};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOii|p$O&", kwlist, &out, &in, &code, &a.peer, &async_op,
                                     ddpc_arg_timeout, &a.timeout_s) ||
        !group_ready_(self) || dtype_arg_(code, &a.dtype) < 0 || !root_arg_(self, a.peer, ddpc_coll_name(coll)))
        return NULL;
    PyObject *part = coll == DDPC_COLL_GATHER ? in : out;
    if (part == Py_None)
        return PyErr_Format(PyExc_ValueError, "%s: every rank passes its %s", ddpc_coll_name(coll),
                            coll == DDPC_COLL_GATHER ? "input" : "output");
    return blocks_(self, &a, out, in, async_op);
}

static PyObject *group_gather(group_obj *self, PyObject *args, PyObject *kwds) {
    return rooted_blocks_(self, args, kwds, DDPC_COLL_GATHER);
}

static PyObject *group_scatter(group_obj *self, PyObject *args, PyObject *kwds) {
    return rooted_blocks_(self, args, kwds, DDPC_COLL_SCATTER);
}

/* reduce: in place at the root; the other ranks' buffers are only read. */
static PyObject *group_reduce(group_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buf", "dtype", "op", "root", "async_op", "timeout", NULL};
    PyObject *obj;
    int code, op, async_op = 0;
    ddpc_coll_args a = {.coll = DDPC_COLL_REDUCE};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oiii|p$O&", kwlist, &obj, &code, &op, &a.peer, &async_op,
                                     ddpc_arg_timeout, &a.timeout_s) ||
        !group_ready_(self) || dtype_arg_(code, &a.dtype) < 0 || reduce_op_arg_(op, code, "reduce", &a.op) < 0 ||
        !root_arg_(self, a.peer, "reduce"))
        return NULL;
    int at_root = self->group->rank == a.peer;
    Py_buffer v;
    if (view_(obj, at_root, &v) < 0) return NULL;
    if (count_(&v, a.dtype, &a.count) < 0) return PyBuffer_Release(&v), NULL;
    a.in = v.buf;
    a.out = at_root ? v.buf : NULL;
    return launch_(self, &a, &v, 1, async_op);
}

static PyObject *group_barrier(group_obj *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"async_op", "timeout", NULL};
    int async_op = 0;
    double timeout = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p$O&", kwlist, &async_op, ddpc_arg_timeout, &timeout) ||
        !group_ready_(self))
        return NULL;
    ddpc_coll_args a = {.coll = DDPC_COLL_BARRIER, .dtype = DDPC_UINT8, .timeout_s = timeout};
    return launch_(self, &a, NULL, 0, async_op);
}

static PyObject *p2p_(group_obj *self, PyObject *args, ddpc_coll coll) {
    PyObject *obj;
    int code, peer, tag = 0, async_op = 0;
    if (!PyArg_ParseTuple(args, "Oii|ip", &obj, &code, &peer, &tag, &async_op) || !group_ready_(self)) return NULL;
    int source = peer;
    ddpc_coll_args a = {.coll = coll, .peer = peer, .tag = tag, .source = coll == DDPC_COLL_RECV ? &source : NULL};
    if (dtype_arg_(code, &a.dtype) < 0) return NULL;
    int any = coll == DDPC_COLL_RECV && peer == DDPC_ANY_SOURCE;
    if (!any && (peer < 0 || peer >= self->group->size || peer == self->group->rank))
        return PyErr_Format(PyExc_ValueError, "%s: peer %d is not another rank of this group of %d",
                            ddpc_coll_name(coll), peer, self->group->size);
    if (any && self->group->size == 1)
        return PyErr_Format(PyExc_ValueError, "recv from any rank: this group has no other rank");
    Py_buffer v;
    if (view_(obj, coll == DDPC_COLL_RECV, &v) < 0) return NULL;
    if (count_(&v, a.dtype, &a.count) < 0) return PyBuffer_Release(&v), NULL;
    a.in = a.out = v.buf;
    PyObject *r = launch_(self, &a, &v, 1, async_op);
    /* A blocking recv returns its sender. */
    if (r == Py_None && coll == DDPC_COLL_RECV) {
        Py_DECREF(r);
        return PyLong_FromLong(source);
    }
    return r;
}

static PyObject *group_send(group_obj *self, PyObject *args) { return p2p_(self, args, DDPC_COLL_SEND); }
static PyObject *group_recv(group_obj *self, PyObject *args) { return p2p_(self, args, DDPC_COLL_RECV); }

/* ---- SharedBuffer: host memory every local rank maps ----------------------------- */

typedef struct {
    PyObject_HEAD
    ddpc_shm_reg *reg;
    int peer;   /* -1: this rank's own buffer; else the local rank whose buffer this views */
} shared_obj;

static PyTypeObject *SharedType;

static void *shared_data_(const shared_obj *self) {
    return self->peer < 0 ? ddpc_shm_reg_data(self->reg) : ddpc_shm_reg_peer(self->reg, self->peer);
}

static int shared_getbuffer(shared_obj *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, shared_data_(self), (Py_ssize_t)ddpc_shm_reg_size(self->reg), 0,
                             flags);
}

static void shared_dealloc(shared_obj *self) {
    if (self->peer < 0) ddpc_shm_reg_release(self->reg);
    else ddpc_shm_reg_unref(self->reg);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *shared_peer(shared_obj *self, PyObject *arg) {
    long j = PyLong_AsLong(arg);
    if (j == -1 && PyErr_Occurred()) return NULL;
    int n = ddpc_shm_reg_ranks(self->reg);
    if (j < 0 || j >= n) return PyErr_Format(PyExc_IndexError, "peer: local rank %ld is not in [0, %d)", j, n);
    shared_obj *o = PyObject_New(shared_obj, SharedType);
    if (!o) return NULL;
    o->reg = ddpc_shm_reg_ref(self->reg);
    o->peer = (int)j;
    return (PyObject *)o;
}

/* The 64-bit counter at byte `offset` of the buffer, or NULL with an error. */
static void *shared_word_(shared_obj *self, Py_ssize_t offset) {
    size_t size = ddpc_shm_reg_size(self->reg);
    if (offset < 0 || offset % 8 || (size_t)offset + 8 > size) {
        PyErr_Format(PyExc_ValueError, "a signal needs a multiple of 8 bytes within the buffer's %zu, got offset %zd",
                     size, offset);
        return NULL;
    }
    return (char *)shared_data_(self) + offset;
}

static PyObject *shared_signal(shared_obj *self, PyObject *args) {
    Py_ssize_t offset;
    unsigned long long value;
    if (!PyArg_ParseTuple(args, "nK", &offset, &value)) return NULL;
    void *word = shared_word_(self, offset);
    if (!word) return NULL;
    ddpc_shm_signal(word, (uint64_t)value);
    Py_RETURN_NONE;
}

static PyObject *shared_ranks(shared_obj *self, void *unused) {
    (void)unused;
    return PyLong_FromLong(ddpc_shm_reg_ranks(self->reg));
}

static PyMethodDef shared_methods[] = {
    {"peer", (PyCFunction)shared_peer, METH_O,
     "peer(j) -> SharedBuffer: local rank j's buffer of this shared buffer, as this rank maps it"},
    {"signal", (PyCFunction)shared_signal, METH_VARARGS,
     "signal(offset, value): stores the 64-bit counter at byte `offset` (release ordering: what this rank wrote "
     "before is visible to a rank that sees the value); see ProcessGroup.await_value"},
    {"__reduce__", ddpc_refuse_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef shared_getset[] = {
    {"ranks", (getter)shared_ranks, NULL, "the local ranks sharing it", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot shared_slots[] = {
    {Py_tp_dealloc, shared_dealloc},
    {Py_tp_methods, shared_methods},
    {Py_tp_getset, shared_getset},
    {Py_bf_getbuffer, shared_getbuffer},
    {Py_tp_doc, "Zeroed host memory that every rank of a group on this host maps (ProcessGroup.share)"},
    {0, NULL},
};

static PyType_Spec shared_spec = {"ddpc._C.SharedBuffer", sizeof(shared_obj), 0, Py_TPFLAGS_DEFAULT, shared_slots};

static PyObject *group_share(group_obj *self, PyObject *arg) {
    Py_ssize_t nbytes = PyLong_AsSsize_t(arg);
    if (nbytes < 0) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "share: size must be >= 0, got %zd", nbytes);
        return NULL;
    }
    if (!group_ready_(self)) return NULL;
    shared_obj *o = PyObject_New(shared_obj, SharedType);
    if (!o) return NULL;
    o->reg = NULL;
    o->peer = -1;
    ddpc_status st;
    ddpc_group *g = group_enter_(self);
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_group_share(g, (size_t)nbytes, &o->reg);
    Py_END_ALLOW_THREADS
    group_leave_(self);
    if (st != DDPC_OK) {
        Py_DECREF(o);
        return ddpc_raise(st);
    }
    return (PyObject *)o;
}

static PyObject *group_await_value(group_obj *self, PyObject *args) {
    PyObject *buf;
    Py_ssize_t offset;
    unsigned long long value;
    const char *what = "a wait on a shared buffer";
    if (!PyArg_ParseTuple(args, "O!nK|s", SharedType, &buf, &offset, &value, &what)) return NULL;
    void *word = shared_word_((shared_obj *)buf, offset);
    if (!word || !group_ready_(self)) return NULL;
    ddpc_status st;
    ddpc_group *g = group_enter_(self);
    Py_BEGIN_ALLOW_THREADS
    st = ddpc_shm_await(g, word, (uint64_t)value, what);
    Py_END_ALLOW_THREADS
    group_leave_(self);
    if (st != DDPC_OK) return ddpc_raise(st);
    Py_RETURN_NONE;
}

static PyObject *group_close(group_obj *self, PyObject *unused) {
    (void)unused;
    group_close_(self);
    Py_RETURN_NONE;
}

/* Collectives queued from now on without a timeout of their own get the new
 * one; those already queued or running keep theirs. */
static PyObject *group_set_timeout(group_obj *self, PyObject *arg) {
    double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1 && PyErr_Occurred()) return NULL;
    if (!(seconds > 0))
        return PyErr_Format(PyExc_ValueError, "set_timeout: the timeout must be positive, got %g s", seconds);
    if (!group_ready_(self)) return NULL;
    atomic_store(&self->group->timeout_s, seconds);
    Py_RETURN_NONE;
}

static PyObject *group_get_(group_obj *self, void *which) {
    if (!group_ready_(self)) return NULL;
    ddpc_group *g = self->group;
    switch ((int)(intptr_t)which) {
    case 0: return PyLong_FromLong(g->rank);
    case 1: return PyLong_FromLong(g->size);
    case 2: return PyLong_FromLong(g->topo.local_rank);
    case 3: return PyLong_FromLong(g->topo.local_size);
    case 4: return PyLong_FromLong(g->topo.nnodes);
    default: return PyLong_FromUnsignedLongLong(ddpc_group_next_seq(g));
    }
}

static PyMethodDef group_methods[] = {
    /* A collective's timeout (seconds) bounds it once it starts; None: the
     * group's timeout at the time it is queued. */
    {"all_reduce", (PyCFunction)(void (*)(void))group_all_reduce, METH_VARARGS | METH_KEYWORDS,
     "all_reduce(buf, dtype, op, async_op=False, *, timeout=None)"},
    {"broadcast", (PyCFunction)(void (*)(void))group_broadcast, METH_VARARGS | METH_KEYWORDS,
     "broadcast(buf, dtype, src, async_op=False, *, timeout=None)"},
    /* The whole of the next four (all_gather's and gather's out, the others' in) is one buffer of every
     * rank's block, or a list or tuple of the blocks. */
    {"all_gather", (PyCFunction)(void (*)(void))group_all_gather, METH_VARARGS | METH_KEYWORDS,
     "all_gather(out, in, dtype, async_op=False, *, timeout=None): out holds size blocks of in's size, in one "
     "buffer or a list"},
    {"reduce_scatter", (PyCFunction)(void (*)(void))group_reduce_scatter, METH_VARARGS | METH_KEYWORDS,
     "reduce_scatter(out, in, dtype, op, async_op=False, *, timeout=None): in holds size blocks of out's size, in "
     "one buffer or a list"},
    {"gather", (PyCFunction)(void (*)(void))group_gather, METH_VARARGS | METH_KEYWORDS,
     "gather(out, in, dtype, root, async_op=False, *, timeout=None): out holds size blocks of in's size, in one "
     "buffer or a list, and is the root's alone: None on the other ranks"},
    {"scatter", (PyCFunction)(void (*)(void))group_scatter, METH_VARARGS | METH_KEYWORDS,
     "scatter(out, in, dtype, root, async_op=False, *, timeout=None): in holds size blocks of out's size, in one "
     "buffer or a list, and is the root's alone: None on the other ranks"},
    {"reduce", (PyCFunction)(void (*)(void))group_reduce, METH_VARARGS | METH_KEYWORDS,
     "reduce(buf, dtype, op, root, async_op=False, *, timeout=None): into the root's buf; the other ranks' are "
     "only read"},
    {"barrier", (PyCFunction)(void (*)(void))group_barrier, METH_VARARGS | METH_KEYWORDS,
     "barrier(async_op=False, *, timeout=None)"},
    {"send", (PyCFunction)group_send, METH_VARARGS, "send(buf, dtype, dst, tag=0, async_op=False)"},
    {"recv", (PyCFunction)group_recv, METH_VARARGS,
     "recv(buf, dtype, src, tag=0, async_op=False) -> sender, or Work; src -1: from any rank"},
    {"share", (PyCFunction)group_share, METH_O,
     "share(nbytes) -> SharedBuffer: zeroed memory every rank on this host maps; an all_reduce of data in it, at "
     "the same offset on every rank, skips the staging copies (collective over the ranks on this host)"},
    {"await_value", (PyCFunction)group_await_value, METH_VARARGS,
     "await_value(shared, offset, value, what=...): waits until the 64-bit counter at byte `offset` of the "
     "SharedBuffer is at least `value` (see SharedBuffer.signal); raises if the group fails, a rank on this host "
     "leaves it, or the group timeout passes first"},
    {"set_timeout", (PyCFunction)group_set_timeout, METH_O,
     "set_timeout(seconds): the timeout of the collectives queued from now on without one of their own"},
    {"close", (PyCFunction)group_close, METH_NOARGS, "release the group's threads, segment and sockets"},
    {"__reduce__", ddpc_refuse_pickle, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef group_getset[] = {
    {"rank", (getter)group_get_, NULL, "rank in this group", (void *)0},
    {"size", (getter)group_get_, NULL, "number of ranks", (void *)1},
    {"local_rank", (getter)group_get_, NULL, "index among the group's ranks on this host", (void *)2},
    {"local_size", (getter)group_get_, NULL, "group ranks on this host", (void *)3},
    {"nnodes", (getter)group_get_, NULL, "hosts the group spans", (void *)4},
    {"next_seq", (getter)group_get_, NULL, "the sequence number of the group's next collective", (void *)5},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot group_slots[] = {
    {Py_tp_init, group_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, group_dealloc},
    {Py_tp_methods, group_methods},
    {Py_tp_getset, group_getset},
    {Py_tp_doc, "ProcessGroup(store, prefix, rank, size, global_ranks, backend='cpu', timeout=300.0)"},
    {0, NULL},
};

static PyType_Spec group_spec = {"ddpc._C.ProcessGroup", sizeof(group_obj), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
                                 group_slots};

/* ---- module functions ----------------------------------------------------------- */

static PyObject *py_monitor_start(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *store;
    int rank;
    const char *prefix;
    if (!PyArg_ParseTuple(args, "O!is", StoreType, &store, &rank, &prefix) || !store_ready_((store_obj *)store))
        return NULL;
    CALL_RELEASED_(ddpc_monitor_start(((store_obj *)store)->store, rank, prefix));
    Py_RETURN_NONE;
}

static PyObject *py_monitor_stop(PyObject *m, PyObject *arg) {
    (void)m;
    double timeout = PyFloat_AsDouble(arg);
    if (PyErr_Occurred()) return NULL;
    Py_BEGIN_ALLOW_THREADS
    ddpc_monitor_stop(timeout);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_host_id(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    char id[512];
    ddpc_host_id(id, sizeof id);
    return PyUnicode_FromString(id);
}

static PyObject *py_backends(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    /* nccl is not a vtable backend: its communicator is comm/nccl.c's NcclComm. */
#ifdef DDPC_WITH_NCCL
    return Py_BuildValue("[ss]", "cpu", "nccl");
#else
    return Py_BuildValue("[s]", "cpu");
#endif
}

static PyMethodDef comm_functions[] = {
    {"backends", py_backends, METH_NOARGS, "names of the communication backends this build can run"},
    {"monitor_start", py_monitor_start, METH_VARARGS, "monitor_start(store, rank, prefix): watch the job (whose keys start with prefix) for dead ranks"},
    {"monitor_stop", py_monitor_stop, METH_O, "monitor_stop(timeout): leave the job cleanly"},
    {"host_id", py_host_id, METH_NOARGS, "identity of this host as the communicator sees it"},
    {NULL, NULL, 0, NULL},
};

int ddpc_comm_register(PyObject *m) {
    StoreType = (PyTypeObject *)PyType_FromSpec(&store_spec);
    GroupType = (PyTypeObject *)PyType_FromSpec(&group_spec);
    WorkType = (PyTypeObject *)PyType_FromSpec(&work_spec);
    SharedType = (PyTypeObject *)PyType_FromSpec(&shared_spec);
    if (!StoreType || !GroupType || !WorkType || !SharedType) return -1;
    if (PyModule_AddObjectRef(m, "Store", (PyObject *)StoreType) < 0 ||
        PyModule_AddObjectRef(m, "ProcessGroup", (PyObject *)GroupType) < 0 ||
        PyModule_AddObjectRef(m, "Work", (PyObject *)WorkType) < 0 ||
        PyModule_AddObjectRef(m, "SharedBuffer", (PyObject *)SharedType) < 0 || PyModule_AddFunctions(m, comm_functions) < 0)
        return -1;
    PyObject *ops = Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "SUM", DDPC_RED_SUM, "AVG", DDPC_RED_AVG,
                                  "MIN", DDPC_RED_MIN, "MAX", DDPC_RED_MAX, "PROD", DDPC_RED_PROD,
                                  "BOR", DDPC_RED_BOR, "BAND", DDPC_RED_BAND, "BXOR", DDPC_RED_BXOR);
    int rc = ops ? PyModule_AddObjectRef(m, "REDUCE_OPS", ops) : -1;
    Py_XDECREF(ops);
    return rc;
}
