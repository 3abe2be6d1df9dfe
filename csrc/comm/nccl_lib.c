/* Loading NCCL at run time (the table is declared in comm/nccl_lib.h).
 *
 * Why not link -lnccl: the dynamic linker knows a library by its soname, and
 * the first libnccl.so.2 in a process is the one every later library that
 * needs libnccl.so.2 is bound to. Linked, `import ddpc` loaded the NCCL found
 * at build time (often the CUDA toolkit's), and a later `import torch` bound
 * libtorch_cuda.so to it and failed on the newer symbols that copy lacks.
 *
 * Which library, the first that loads wins:
 *   1. $DDPC_NCCL_LIBRARY when set, and then nothing else: the user chose;
 *   2. a libnccl.so.2 already in the process (torch's, after `import torch`);
 *   3. the nvidia-nccl wheel's, looked for under each sys.path entry as torch
 *      looks for it, so it is the copy torch would load;
 *   4. the one setup.py found at build time (DDPC_NCCL_LIBDIR);
 *   5. libnccl.so.2 on the dynamic linker's search path.
 *
 * Why RTLD_LOCAL: NCCL's symbols stay out of the global scope, so no library
 * loaded later resolves an nccl* symbol against ddpc's copy by name (ddpc
 * calls only through the pointers dlsym gave it). RTLD_LOCAL does not hide
 * the soname, though: a library loaded later that needs libnccl.so.2 still
 * gets the copy ddpc loaded. So one order still fails: ddpc loads NCCL from
 * 4 or 5 (no wheel on sys.path, for example torch from conda), that copy is
 * older than torch's, and torch is imported after it. Importing torch first,
 * or pointing DDPC_NCCL_LIBRARY at torch's libnccl.so.2, avoids it. */
#include "comm/nccl_lib.h"

#ifdef DDPC_WITH_NCCL
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynlib.h"

#define SONAME_ "libnccl.so.2"

ddpc_nccl_api ddpc_nccl;

static pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
static int tried_;           /* under mu_; once set, the three below no longer change */
static ddpc_status result_;
static char path_[PATH_MAX]; /* the library loaded */
static char why_[8192];      /* why none was */

/* The nvidia-nccl wheel's library: nvidia/nccl/lib under a sys.path entry.
 * Runs no Python code, so the GIL is not given up while mu_ is held. */
static int wheel_library_(char *out, size_t n) {
    PyObject *dirs = PySys_GetObject("path");
    if (!dirs || !PyList_Check(dirs)) return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(dirs); i++) {
        PyObject *item = PyList_GET_ITEM(dirs, i);
        const char *dir = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (!dir) {
            PyErr_Clear(); /* an entry that is not a str, or not UTF-8, cannot hold the wheel */
            continue;
        }
        int k = snprintf(out, n, "%s/nvidia/nccl/lib/" SONAME_, *dir ? dir : ".");
        if (k > 0 && (size_t)k < n && access(out, R_OK) == 0) return 1;
    }
    return 0;
}

/* The first library of the search order (see the top of this file) that loads. */
static void *open_first_(char *tried, size_t n) {
    const char *env = getenv("DDPC_NCCL_LIBRARY");
    if (env && *env) return ddpc_dynlib_open(env, "DDPC_NCCL_LIBRARY", tried, n);
    void *h = dlopen(SONAME_, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h) return h;
    ddpc_dynlib_note(tried, n, "a copy already in this process", "none");
    char wheel[PATH_MAX];
    if (wheel_library_(wheel, sizeof wheel)) {
        h = ddpc_dynlib_open(wheel, "the nvidia-nccl wheel", tried, n);
        if (h) return h;
    } else {
        ddpc_dynlib_note(tried, n, "the nvidia-nccl wheel", "no nvidia/nccl/lib/" SONAME_ " under any sys.path entry");
    }
    h = ddpc_dynlib_open(DDPC_NCCL_LIBDIR "/" SONAME_, "the NCCL ddpc was built with", tried, n);
    if (h) return h;
    return ddpc_dynlib_open(SONAME_, "the dynamic linker's search path", tried, n);
}

/* The error for a library that lacks `symbol`, naming the library's version; closes it. */
static ddpc_status missing_(void *h, const char *symbol) {
    __typeof__(ncclGetVersion) *get_version = (__typeof__(ncclGetVersion) *)dlsym(h, "ncclGetVersion");
    int v = 0;
    char version[64] = "an NCCL of unknown version";
    if (get_version && get_version(&v) == ncclSuccess)
        snprintf(version, sizeof version, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    snprintf(why_, sizeof why_,
             "%s (%s) has no %s, which ddpc calls; ddpc was built against NCCL %d.%d.%d. Load a newer NCCL, for "
             "example by setting DDPC_NCCL_LIBRARY to its " SONAME_,
             path_, version, symbol, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    dlclose(h);
    return DDPC_ERR_CUDA;
}

/* Loads the library and fills the table; mu_ and the GIL are held. */
static ddpc_status load_(void) {
    char tried[4096] = "";
    void *h = open_first_(tried, sizeof tried);
    if (!h) {
        snprintf(why_, sizeof why_,
                 "cannot load NCCL (" SONAME_ "); tried:%s\nInstall NCCL (for example the nvidia-nccl-cu12 or "
                 "nvidia-nccl-cu13 wheel, matching your CUDA) or set DDPC_NCCL_LIBRARY to a " SONAME_,
                 tried);
        return DDPC_ERR_CUDA;
    }
    ddpc_dynlib_path(h, SONAME_, path_, sizeof path_);
    /* Filled aside, so `ddpc_nccl` is never half set. */
    ddpc_nccl_api api;
#define DDPC_NCCL_RESOLVE_(name)                                                                                   \
    if (!(api.name = (__typeof__(api.name))dlsym(h, "nccl" #name))) return missing_(h, "nccl" #name);
    DDPC_NCCL_FUNCTIONS(DDPC_NCCL_RESOLVE_)
#undef DDPC_NCCL_RESOLVE_
    ddpc_nccl = api;
    return DDPC_OK;
}

ddpc_status ddpc_nccl_load(void) {
    pthread_mutex_lock(&mu_);
    if (!tried_) {
        result_ = load_();
        tried_ = 1;
    }
    ddpc_status st = result_;
    pthread_mutex_unlock(&mu_);
    return st == DDPC_OK ? DDPC_OK : DDPC_ERROR(st, "%s", why_);
}

int ddpc_nccl_available(void) {
    if (ddpc_nccl_load() == DDPC_OK) return 1;
    ddpc_clear_error();
    return 0;
}

const char *ddpc_nccl_path(void) { return path_; }
#endif
