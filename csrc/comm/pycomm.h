/* Registration of the communicator's Python types and functions in ddpc._C. */
#ifndef DDPC_COMM_PYCOMM_H
#define DDPC_COMM_PYCOMM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int ddpc_comm_register(PyObject *module);

#endif
