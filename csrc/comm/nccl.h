/* The NCCL backend's Python-visible types (NcclComm, NcclWork) and the
 * in-process multi-device collectives used by DataParallel. */
#ifndef DDPC_COMM_NCCL_H
#define DDPC_COMM_NCCL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int ddpc_nccl_register(PyObject *module);

#endif
