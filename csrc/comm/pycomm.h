/* Registration of the communicator's Python types and functions in ddpc._C. */
#ifndef DDPC_COMM_PYCOMM_H
#define DDPC_COMM_PYCOMM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int ddpc_comm_register(PyObject *module);

/* O& converter of a collective's `timeout` keyword: a positive number of
 * seconds, or None for the group's timeout at the time the call is queued
 * (0 in *seconds). */
int ddpc_arg_timeout(PyObject *o, double *seconds);

#endif
