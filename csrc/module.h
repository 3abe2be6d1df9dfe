/* Module-wide helpers: the one place statuses become Python exceptions. */
#ifndef DDPC_MODULE_H
#define DDPC_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "common.h"

/* ddpc.DistError (RuntimeError) and ddpc.DistTimeoutError (DistError, TimeoutError). */
extern PyObject *ddpc_DistError, *ddpc_DistTimeoutError, *ddpc_OutOfMemoryError;

/* Sets the Python exception for `st` with the recorded message, clears the
 * message, and returns NULL. */
PyObject *ddpc_raise(ddpc_status st);

#endif
