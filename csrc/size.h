/* Size: the shape type (ddpc.Size, as torch.Size), a tuple of ints. */
#ifndef DDPC_SIZE_H
#define DDPC_SIZE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A new Size holding shape[0..ndim), or NULL with an exception set. */
PyObject *ddpc_size_new(int ndim, const int64_t *shape);
int ddpc_size_register(PyObject *module);

#endif
