/* Module-wide helpers: the one place statuses become Python exceptions. */
#ifndef DDPC_MODULE_H
#define DDPC_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "common.h"

/* ddpc.DistError (RuntimeError) and its subclasses: ddpc.DistTimeoutError (DistError, TimeoutError);
 * ddpc.distributed.DistBackendError, DistNetworkError and DistStoreError, as torch.distributed's, with
 * QueueEmptyError a DistStoreError; DistNetworkTimeoutError and DistStoreTimeoutError, which are also
 * DistTimeoutErrors. */
extern PyObject *ddpc_DistError, *ddpc_DistTimeoutError, *ddpc_DistBackendError, *ddpc_DistBackendTimeoutError,
    *ddpc_DistNetworkError, *ddpc_DistNetworkTimeoutError, *ddpc_DistStoreError, *ddpc_DistStoreTimeoutError, *ddpc_QueueEmptyError;
extern PyObject *ddpc_OutOfMemoryError, *ddpc_ArgumentError, *ddpc_DtypeError, *ddpc_IndexOutOfRangeError;

/* Sets the Python exception for `st` with the recorded message, clears the
 * message, and returns NULL. */
PyObject *ddpc_raise(ddpc_status st);

/* __reduce__ of the handles tied to this process (loaders, mapped files,
 * stores, groups, work, communicators): raises TypeError, returns NULL. */
PyObject *ddpc_refuse_pickle(PyObject *self, PyObject *unused);

#endif
