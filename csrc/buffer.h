/* Buffer: contiguous n-d storage on the host or a CUDA device.
 *
 * A Buffer either owns a block from alloc.c or views memory owned by another
 * object (a parent Buffer, a numpy array through the buffer protocol, or a
 * DLPack producer), holding a reference to that owner for its lifetime. Host
 * buffers export the buffer protocol, so numpy views them without a copy.
 *
 * A Buffer knows the views whose base it is, so that share_memory_() can
 * move host memory into a shared-memory segment in place: every view of it
 * is re-pointed at the same elements there; release_storage_() and
 * restore_storage_() free host or device memory and later re-fill it the same
 * way, so tensors saved for backward outlive a gap with no memory behind them. */
#ifndef DDPC_BUFFER_H
#define DDPC_BUFFER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "alloc.h"
#include "common.h"
#include "device.h"
#include "dtype.h"

#define DDPC_MAX_NDIM 8

typedef struct ddpc_buffer_ {
    PyObject_HEAD
    void *data;
    int ndim;
    int64_t shape[DDPC_MAX_NDIM];
    int64_t numel;
    ddpc_dtype dtype;
    int device;              /* DDPC_CPU or a CUDA ordinal */
    int readonly;
    ddpc_block *block;       /* owned memory, NULL for a view */
    PyObject *base;          /* owner of a view's memory */
    Py_buffer *imported;     /* buffer-protocol view held for `base` */
    Py_ssize_t exports;      /* live buffer-protocol and DLPack exports (holders of the address) */
    Py_ssize_t py_shape[DDPC_MAX_NDIM], py_strides[DDPC_MAX_NDIM];
    PyObject *weakreflist;
    uint64_t version;        /* in-place writes, counted on the buffer that holds the memory (see buffer.c) */
    int own_version;         /* a view counting its writes apart from its owner's (Tensor.data) */
    int released;            /* release_storage_() freed the block; views keep their offsets (see buffer.c) */
    struct ddpc_buffer_ *views;                 /* first of the views whose base this is */
    struct ddpc_buffer_ *prev_view, *next_view; /* siblings in the base's list */
} ddpc_buffer;

/* The Buffer type object (set at module init). */
extern PyTypeObject *ddpc_BufferType;

static inline int ddpc_buffer_check(PyObject *o) { return PyObject_TypeCheck(o, ddpc_BufferType); }
static inline size_t ddpc_buffer_nbytes(const ddpc_buffer *b) { return (size_t)b->numel * ddpc_dtype_size(b->dtype); }

/* New owning buffer (uninitialised memory). Sets a Python exception on failure. */
ddpc_buffer *ddpc_buffer_new(int ndim, const int64_t *shape, ddpc_dtype dtype, int device, int pinned);
/* New view of `parent`'s memory at `data` with the given shape. */
ddpc_buffer *ddpc_buffer_view(ddpc_buffer *parent, void *data, int ndim, const int64_t *shape, ddpc_dtype dtype);

/* Parses a Python device spec: None/"cpu" -> DDPC_CPU, "cuda" -> current, "cuda:N", int N. */
int ddpc_parse_device(PyObject *obj, int *device);
/* Parses a dtype given as an int code or a name ("float32", ...). */
int ddpc_parse_dtype(PyObject *obj, ddpc_dtype *dtype);
/* Fills `shape` from a sequence of non-negative ints; returns ndim or -1 with an exception set. */
int ddpc_parse_shape(PyObject *seq, int64_t *shape, int64_t *numel);

int ddpc_buffer_register(PyObject *module);

#endif
