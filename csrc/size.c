/* size.c: ddpc.Size, the type of Buffer.shape and Tensor.shape.
 *
 * A tuple of ints, as torch.Size: slicing, `+` (on either side of a tuple)
 * and `*` give a Size again, numel() is the product, and it pickles as a
 * Size. It lives in C because every shape read in the package builds one:
 * a Python subclass of tuple made each read several times slower, which
 * showed in the step time of small models. */
#include "size.h"

static PyTypeObject *size_type_;  /* made once at module init */

static PyObject *size_of_tuple_(PyObject *items) {
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    PyObject *s = size_type_->tp_alloc(size_type_, n);
    if (!s) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(items, i);
        Py_INCREF(v);
        PyTuple_SET_ITEM(s, i, v);
    }
    return s;
}

PyObject *ddpc_size_new(int ndim, const int64_t *shape) {
    PyObject *s = size_type_->tp_alloc(size_type_, ndim);
    if (!s) return NULL;
    for (int i = 0; i < ndim; i++) {
        PyObject *v = PyLong_FromLongLong(shape[i]);
        if (!v) {
            Py_DECREF(s);
            return NULL;
        }
        PyTuple_SET_ITEM(s, i, v);
    }
    return s;
}

/* Size(sizes=()): each entry an int or an object with __index__ (a 0-d
 * integer tensor), as torch.Size; floats and bools are refused. */
static PyObject *size_new_(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sizes", NULL};
    PyObject *sizes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:Size", kwlist, &sizes)) return NULL;
    PyObject *fast = sizes ? PySequence_Fast(sizes, "ddpc.Size() takes an iterable of 'int'") : PyTuple_New(0);
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *s = type->tp_alloc(type, n);
    if (!s) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        PyObject *v = PyBool_Check(item) || !PyIndex_Check(item) ? NULL : PyNumber_Index(item);
        if (!v) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "ddpc.Size() takes an iterable of 'int' (item %zd is '%s')", i,
                             Py_TYPE(item)->tp_name);
            goto fail;
        }
        PyTuple_SET_ITEM(s, i, v);
    }
    Py_DECREF(fast);
    return s;
fail:
    Py_XDECREF(s);
    Py_DECREF(fast);
    return NULL;
}

static void size_dealloc_(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyTuple_Type.tp_dealloc(self);  /* frees through type->tp_free */
    Py_DECREF(type);                /* a heap type is held by each instance */
}

static int size_traverse_(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    return PyTuple_Type.tp_traverse(self, visit, arg);
}

/* A tuple result of tuple's own slot, as a Size. */
static PyObject *as_size_(PyObject *got) {
    if (!got || Py_IS_TYPE(got, size_type_)) return got;
    PyObject *s = size_of_tuple_(got);
    Py_DECREF(got);
    return s;
}

static PyObject *size_subscript_(PyObject *self, PyObject *key) {
    PyObject *got = PyTuple_Type.tp_as_mapping->mp_subscript(self, key);
    return PySlice_Check(key) ? as_size_(got) : got;
}

static PyObject *size_add_(PyObject *a, PyObject *b) {
    if (!PyTuple_Check(a) || !PyTuple_Check(b)) Py_RETURN_NOTIMPLEMENTED;
    return as_size_(PyTuple_Type.tp_as_sequence->sq_concat(a, b));
}

static PyObject *size_multiply_(PyObject *a, PyObject *b) {
    PyObject *size = PyTuple_Check(a) ? a : b, *times = size == a ? b : a;
    if (!PyIndex_Check(times)) Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = PyNumber_AsSsize_t(times, PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred()) return NULL;
    return as_size_(PyTuple_Type.tp_as_sequence->sq_repeat(size, n));
}

static PyObject *size_repr_(PyObject *self) {
    PyObject *list = PySequence_List(self);
    if (!list) return NULL;
    PyObject *r = PyUnicode_FromFormat("ddpc.Size(%R)", list);
    Py_DECREF(list);
    return r;
}

static PyObject *size_numel_(PyObject *self, PyObject *unused) {
    (void)unused;
    PyObject *n = PyLong_FromLong(1);
    for (Py_ssize_t i = 0; n && i < PyTuple_GET_SIZE(self); i++) {
        PyObject *next = PyNumber_Multiply(n, PyTuple_GET_ITEM(self, i));
        Py_DECREF(n);
        n = next;
    }
    return n;
}

static PyObject *size_reduce_(PyObject *self, PyObject *unused) {
    (void)unused;
    PyObject *items = PySequence_Tuple(self);
    if (!items) return NULL;
    return Py_BuildValue("(O(N))", (PyObject *)Py_TYPE(self), items);
}

static PyMethodDef size_methods_[] = {
    {"numel", size_numel_, METH_NOARGS, "The number of elements of a tensor of this shape: the product of the sizes."},
    {"__reduce__", size_reduce_, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int ddpc_size_register(PyObject *module) {
    PyObject *bases = PyTuple_Pack(1, (PyObject *)&PyTuple_Type);
    if (!bases) return -1;
    PyType_Slot slots[] = {
        {Py_tp_doc, "Size(sizes=()): a tensor's shape, a tuple of ints, as torch.Size.\n\n"
                    "Slicing, + and * give a Size again; numel() is the product of the sizes."},
        {Py_tp_new, size_new_},
        {Py_tp_dealloc, size_dealloc_},
        {Py_tp_traverse, size_traverse_},
        {Py_tp_repr, size_repr_},
        {Py_tp_methods, size_methods_},
        {Py_mp_subscript, size_subscript_},
        {Py_nb_add, size_add_},
        {Py_nb_multiply, size_multiply_},
        {0, NULL},
    };
    PyType_Spec spec = {
        .name = "ddpc.Size",
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
        .slots = slots,
    };
    PyObject *type = PyType_FromModuleAndSpec(module, &spec, bases);
    Py_DECREF(bases);
    if (!type) return -1;
    size_type_ = (PyTypeObject *)type;
    return PyModule_AddObjectRef(module, "Size", type) < 0 ? -1 : 0;
}
