/* NVTX annotations (ddpc.cuda.nvtx, as torch.cuda.nvtx): ranges and marks
 * that Nsight Systems and other NVTX tools show on their timelines. NVTX is
 * header-only: without a tool attached (NVTX_INJECTION64_PATH) every call
 * returns at once. Builds without the CUDA toolkit have no NVTX and raise. */
#include "nvtx.h"

#ifdef DDPC_WITH_CUDA
#include <nvtx3/nvToolsExt.h>

static const char *message_(PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "an NVTX message must be a str, got %s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    return PyUnicode_AsUTF8(arg);
}

static PyObject *py_range_push(PyObject *m, PyObject *arg) {
    (void)m;
    const char *msg = message_(arg);
    return msg ? PyLong_FromLong(nvtxRangePushA(msg)) : NULL;
}

static PyObject *py_range_pop(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyLong_FromLong(nvtxRangePop());
}

static PyObject *py_range_start(PyObject *m, PyObject *arg) {
    (void)m;
    const char *msg = message_(arg);
    return msg ? PyLong_FromUnsignedLongLong((unsigned long long)nvtxRangeStartA(msg)) : NULL;
}

static PyObject *py_range_end(PyObject *m, PyObject *arg) {
    (void)m;
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    nvtxRangeEnd((nvtxRangeId_t)id);
    Py_RETURN_NONE;
}

static PyObject *py_mark(PyObject *m, PyObject *arg) {
    (void)m;
    const char *msg = message_(arg);
    if (!msg) return NULL;
    nvtxMarkA(msg);
    Py_RETURN_NONE;
}

#else

static PyObject *missing_(void) {
    PyErr_SetString(PyExc_RuntimeError, "NVTX functions not installed. Are you sure you have a CUDA build?");
    return NULL;
}

static PyObject *py_range_push(PyObject *m, PyObject *arg) { return (void)m, (void)arg, missing_(); }
static PyObject *py_range_pop(PyObject *m, PyObject *arg) { return (void)m, (void)arg, missing_(); }
static PyObject *py_range_start(PyObject *m, PyObject *arg) { return (void)m, (void)arg, missing_(); }
static PyObject *py_range_end(PyObject *m, PyObject *arg) { return (void)m, (void)arg, missing_(); }
static PyObject *py_mark(PyObject *m, PyObject *arg) { return (void)m, (void)arg, missing_(); }

#endif

static PyMethodDef nvtx_methods[] = {
    {"nvtx_range_push", py_range_push, METH_O, "nvtx_range_push(msg) -> depth of the range pushed (NVTX's value)"},
    {"nvtx_range_pop", py_range_pop, METH_NOARGS, "nvtx_range_pop() -> depth of the range popped (NVTX's value)"},
    {"nvtx_range_start", py_range_start, METH_O, "nvtx_range_start(msg) -> id of a range that may end on any thread"},
    {"nvtx_range_end", py_range_end, METH_O, "nvtx_range_end(id): ends a range nvtx_range_start began"},
    {"nvtx_mark", py_mark, METH_O, "nvtx_mark(msg): an instant event"},
    {NULL, NULL, 0, NULL},
};

int ddpc_nvtx_register(PyObject *module) { return PyModule_AddFunctions(module, nvtx_methods); }
