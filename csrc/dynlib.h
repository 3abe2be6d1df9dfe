/* Loading a shared library at run time: what every loader of ddpc shares
 * (NCCL in comm/nccl_lib.c, cuBLAS and cuFFT in cuda_libs.c). Each loader
 * tries its candidates in order and, where none loads, reports the list of
 * what it tried and why each failed. */
#ifndef DDPC_DYNLIB_H
#define DDPC_DYNLIB_H

#include <stddef.h>

/* Appends one "  source: reason" line to `tried`, the list of what was tried. */
void ddpc_dynlib_note(char *tried, size_t n, const char *source, const char *reason);

/* dlopen(path) with RTLD_LOCAL, so that no library loaded later resolves a
 * symbol against this copy by name; on failure, notes why under `source`. */
void *ddpc_dynlib_open(const char *path, const char *source, char *tried, size_t n);

/* The file `h` was loaded from, or `fallback` where the loader cannot say. */
void ddpc_dynlib_path(void *h, const char *fallback, char *out, size_t n);

#endif
