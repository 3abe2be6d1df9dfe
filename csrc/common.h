/* Status codes, error recording and the CHECK macros every C file uses.
 *
 * Every internal function returns a ddpc_status. The first failure records a
 * message (with file:line) in thread-local storage; module.c turns the status
 * and that message into a Python exception in one place (ddpc_raise). Nothing
 * here ever exits or aborts the process. */
#ifndef DDPC_COMMON_H
#define DDPC_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DDPC_OK = 0,
    DDPC_ERR_ARG,      /* bad value from the caller          -> ddpc.ArgumentError, a ValueError */
    DDPC_ERR_TYPE,     /* wrong kind of object or dtype       -> ddpc.DtypeError, a TypeError */
    DDPC_ERR_OOM,      /* host allocation failed              -> MemoryError */
    DDPC_ERR_CUDA,     /* a CUDA, cuBLAS or NCCL call failed  -> RuntimeError */
    DDPC_ERR_NOCUDA,   /* CUDA asked for but not available    -> RuntimeError */
    DDPC_ERR_SYS,      /* a system call failed                -> OSError */
    DDPC_ERR_DIST,     /* a peer failed or disagreed in a collective, an NCCL call failed
                          -> ddpc.distributed.DistBackendError */
    DDPC_ERR_TIMEOUT,  /* a deadline passed                   -> ddpc.DistTimeoutError */
    DDPC_ERR_INTERNAL, /* a broken invariant                  -> RuntimeError */
    DDPC_ERR_DEVICE_OOM, /* device allocation failed          -> ddpc.OutOfMemoryError */
    DDPC_ERR_NET,      /* the store's address cannot be resolved or listened on, or a connection to it was
                          refused or lost                     -> ddpc.distributed.DistNetworkError */
    DDPC_ERR_NET_TIMEOUT, /* no connection to the store before the deadline
                          -> DistNetworkError, also a DistTimeoutError */
    DDPC_ERR_STORE,    /* the store refused a client or answered wrongly, a key vanished
                          -> ddpc.distributed.DistStoreError */
    DDPC_ERR_STORE_TIMEOUT, /* a store wait (or get) or request passed its deadline
                          -> DistStoreError, also a DistTimeoutError */
    DDPC_ERR_QUEUE_EMPTY, /* a store queue had no item for a pop that does not block
                          -> ddpc.distributed.QueueEmptyError, a DistStoreError */
    DDPC_ERR_INDEX     /* an index (or dim) outside the tensor it indexes
                          -> ddpc.IndexOutOfRangeError, an ArgumentError and an IndexError */
} ddpc_status;

/* Records the message for `st` (printf-style) and returns `st`. The message
 * of the first error wins until ddpc_clear_error(), so a cleanup path that
 * fails again does not hide the original cause. */
ddpc_status ddpc_error_at(ddpc_status st, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *ddpc_last_error(void);
void ddpc_clear_error(void);

/* The monotonic clock, in nanoseconds. */
uint64_t ddpc_now_ns(void);

#define DDPC_ERROR(st, ...) ddpc_error_at((st), __FILE__, __LINE__, __VA_ARGS__)

#define CHECK(call)                                                                \
    do {                                                                           \
        ddpc_status st_ = (call);                                                  \
        if (st_ != DDPC_OK) return st_;                                            \
    } while (0)

#define CHECKGOTO(call, res, label)                                                \
    do {                                                                           \
        (res) = (call);                                                            \
        if ((res) != DDPC_OK) goto label;                                          \
    } while (0)

/* System calls that return -1 and set errno. */
#define SYSCHECK(call, what)                                                       \
    do {                                                                           \
        if ((call) == -1)                                                          \
            return DDPC_ERROR(DDPC_ERR_SYS, "%s failed: %s", (what), strerror(errno)); \
    } while (0)

#ifdef DDPC_WITH_CUDA
#include <cuda_runtime_api.h>
/* A failed call also leaves its error as the runtime's last error (CUB's
 * launches, and kernels, for example); reading it here clears it, so the
 * failure is reported once, by the call that failed, and not again by the
 * next launch's cudaGetLastError(). Sticky errors stay, as they must. */
#define CUDACHECK(call)                                                            \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                   \
            (void)cudaGetLastError();                                              \
            return DDPC_ERROR(DDPC_ERR_CUDA, "%s failed: %s (%s)", #call,           \
                              cudaGetErrorString(e_), cudaGetErrorName(e_));       \
        }                                                                          \
    } while (0)
#define CUDACHECKGOTO(call, res, label)                                            \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                   \
            (void)cudaGetLastError();                                              \
            (res) = DDPC_ERROR(DDPC_ERR_CUDA, "%s failed: %s (%s)", #call,          \
                               cudaGetErrorString(e_), cudaGetErrorName(e_));      \
            goto label;                                                            \
        }                                                                          \
    } while (0)
#endif

#endif
