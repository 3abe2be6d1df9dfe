/* NVTX ranges and marks for profilers (ddpc.cuda.nvtx). */
#ifndef DDPC_NVTX_H
#define DDPC_NVTX_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int ddpc_nvtx_register(PyObject *module);

#endif
