/* cuBLAS and cuFFT loaded at run time (see cuda_libs.h for why and in what
 * order the files are tried). */
#include "cuda_libs.h"

#ifdef DDPC_WITH_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "dynlib.h"

#define STR_(x) #x
#define SONAME_(base, major) base STR_(major)

ddpc_cublas_api ddpc_cublas;
ddpc_cufft_api ddpc_cufft;

/* One library: what to look for, and the outcome of its one load. */
typedef struct {
    const char *name;   /* as the messages name it */
    const char *soname; /* the major version built against */
    const char *env;    /* the variable that picks the file */
    int major, minor;   /* the version built against */
    /* Fills the table from `h`; returns the first symbol it lacks, or NULL. */
    const char *(*resolve)(void *h);
    pthread_mutex_t mu;
    int tried; /* under mu; once set, the three below no longer change */
    ddpc_status result;
    char path[PATH_MAX];
    char why[8192];
} lib_;

/* Filled aside, so a table is never half set. */
#define DDPC_LIB_RESOLVE_(field, symbol)                                                                         \
    if (!(api.field = (__typeof__(api.field))dlsym(h, #symbol))) return #symbol;

static const char *resolve_cublas_(void *h) {
    ddpc_cublas_api api;
    DDPC_CUBLAS_FUNCTIONS(DDPC_LIB_RESOLVE_)
    ddpc_cublas = api;
    return NULL;
}

static const char *resolve_cufft_(void *h) {
    ddpc_cufft_api api;
    DDPC_CUFFT_FUNCTIONS(DDPC_LIB_RESOLVE_)
    ddpc_cufft = api;
    return NULL;
}
#undef DDPC_LIB_RESOLVE_

static lib_ cublas_ = {.name = "cuBLAS", .soname = SONAME_("libcublas.so.", CUBLAS_VER_MAJOR),
                       .env = "DDPC_CUBLAS_LIBRARY", .major = CUBLAS_VER_MAJOR, .minor = CUBLAS_VER_MINOR,
                       .resolve = resolve_cublas_, .mu = PTHREAD_MUTEX_INITIALIZER};
static lib_ cufft_ = {.name = "cuFFT", .soname = SONAME_("libcufft.so.", CUFFT_VER_MAJOR),
                      .env = "DDPC_CUFFT_LIBRARY", .major = CUFFT_VER_MAJOR, .minor = CUFFT_VER_MINOR,
                      .resolve = resolve_cufft_, .mu = PTHREAD_MUTEX_INITIALIZER};

/* The first file of the search order (see cuda_libs.h) that loads. */
static void *open_first_(const lib_ *lib, char *tried, size_t n) {
    const char *env = getenv(lib->env);
    if (env && *env) return ddpc_dynlib_open(env, lib->env, tried, n);
    void *h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h) return h;
    ddpc_dynlib_note(tried, n, "a copy already in this process", "none");
    char built[PATH_MAX];
    snprintf(built, sizeof built, "%s/%s", DDPC_CUDA_LIBDIR, lib->soname);
    h = ddpc_dynlib_open(built, "the CUDA toolkit ddpc was built with", tried, n);
    if (h) return h;
    return ddpc_dynlib_open(lib->soname, "the dynamic linker's search path", tried, n);
}

/* Loads the library and fills its table; lib->mu is held. */
static ddpc_status load_(lib_ *lib) {
    char tried[4096] = "";
    void *h = open_first_(lib, tried, sizeof tried);
    if (!h) {
        snprintf(lib->why, sizeof lib->why,
                 "cannot load %s (%s); tried:%s\nInstall the CUDA toolkit's %s or set %s to a %s", lib->name,
                 lib->soname, tried, lib->name, lib->env, lib->soname);
        return DDPC_ERR_CUDA;
    }
    ddpc_dynlib_path(h, lib->soname, lib->path, sizeof lib->path);
    const char *missing = lib->resolve(h);
    if (missing) {
        snprintf(lib->why, sizeof lib->why,
                 "%s has no %s, which ddpc calls; ddpc was built against %s %d.%d. Load a %s of that major version, "
                 "for example by setting %s to its %s",
                 lib->path, missing, lib->name, lib->major, lib->minor, lib->name, lib->env, lib->soname);
        dlclose(h);
        return DDPC_ERR_CUDA;
    }
    return DDPC_OK;
}

static ddpc_status load_once_(lib_ *lib) {
    pthread_mutex_lock(&lib->mu);
    if (!lib->tried) {
        lib->result = load_(lib);
        lib->tried = 1;
    }
    ddpc_status st = lib->result;
    pthread_mutex_unlock(&lib->mu);
    return st == DDPC_OK ? DDPC_OK : DDPC_ERROR(st, "%s", lib->why);
}

ddpc_status ddpc_cublas_load(void) { return load_once_(&cublas_); }
ddpc_status ddpc_cufft_load(void) { return load_once_(&cufft_); }
const char *ddpc_cublas_path(void) { return cublas_.path; }
const char *ddpc_cufft_path(void) { return cufft_.path; }

/* major * 10000 + minor * 100 + patch from a library's GetProperty. */
#define VERSION_(get, ok)                                                                                        \
    do {                                                                                                         \
        int major = 0, minor = 0, patch = 0;                                                                     \
        if (get(MAJOR_VERSION, &major) != (ok) || get(MINOR_VERSION, &minor) != (ok) ||                          \
            get(PATCH_LEVEL, &patch) != (ok))                                                                    \
            return 0;                                                                                            \
        return major * 10000 + minor * 100 + patch;                                                              \
    } while (0)

int ddpc_cublas_version(void) {
    if (ddpc_cublas_load() != DDPC_OK) {
        ddpc_clear_error();
        return 0;
    }
    VERSION_(ddpc_cublas.GetProperty, CUBLAS_STATUS_SUCCESS);
}

int ddpc_cufft_version(void) {
    if (ddpc_cufft_load() != DDPC_OK) {
        ddpc_clear_error();
        return 0;
    }
    VERSION_(ddpc_cufft.GetProperty, CUFFT_SUCCESS);
}
#undef VERSION_

#else
static ddpc_status no_cuda_(const char *name) {
    return DDPC_ERROR(DDPC_ERR_NOCUDA, "%s: ddpc was built without CUDA", name);
}
ddpc_status ddpc_cublas_load(void) { return no_cuda_("cuBLAS"); }
ddpc_status ddpc_cufft_load(void) { return no_cuda_("cuFFT"); }
const char *ddpc_cublas_path(void) { return ""; }
const char *ddpc_cufft_path(void) { return ""; }
int ddpc_cublas_version(void) { return 0; }
int ddpc_cufft_version(void) { return 0; }
#endif
