/* CUDA device query, and the lazily created per-device streams and index
 * error records. */
#include "device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifdef DDPC_WITH_CUDA
#include <cuda.h> /* the driver API's types only: its two functions below come through the runtime */
#include <cuda_runtime_api.h>

#include "index_error.h"
#ifdef DDPC_WITH_NCCL
#include "comm/nccl_lib.h"
#endif

static pthread_once_t count_once_ = PTHREAD_ONCE_INIT;
static int count_;
static char reason_[512];
static pthread_mutex_t streams_mu_ = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t compute_[DDPC_MAX_DEVICES], copy_[DDPC_MAX_DEVICES];
static int initialized_; /* a context was (or is about to be) created */
static int driver_up_;   /* the driver found a GPU here (cuInit ran): a forked child cannot use CUDA */

int ddpc_cuda_initialized(void) { return __atomic_load_n(&initialized_, __ATOMIC_RELAXED); }
void ddpc_cuda_mark_initialized(void) { __atomic_store_n(&initialized_, 1, __ATOMIC_RELAXED); }
int ddpc_cuda_fork_unsafe(void) { return __atomic_load_n(&driver_up_, __ATOMIC_RELAXED); }

/* The driver's state does not survive fork: in a child of a process whose
 * driver is up, every CUDA call fails with "initialization error". The child
 * sees no GPU instead, with a reason that says what to do. */
static void forked_child_(void) {
    if (!ddpc_cuda_fork_unsafe()) return;
    count_ = 0;
    snprintf(reason_, sizeof reason_,
             "this process was forked from one that had already used CUDA, and the CUDA driver cannot be used after "
             "such a fork: start it fresh instead (ddpc.spawn(..., start_method='spawn'), ddpc-run, or "
             "multiprocessing's 'spawn' context), or fork before the first CUDA call");
}

static void count_devices_(void) {
    /* Without the handler a forked child would meet the driver's own error
     * instead of the reason above; nothing else depends on it. */
    (void)pthread_atfork(NULL, NULL, forked_child_);
    cudaError_t e = cudaGetDeviceCount(&count_);
    if (e == cudaSuccess && count_ > 0) __atomic_store_n(&driver_up_, 1, __ATOMIC_RELAXED);
    if (e != cudaSuccess) {
        snprintf(reason_, sizeof reason_, "the CUDA runtime found no usable GPU: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        count_ = 0;
        cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
    } else if (count_ == 0) {
        snprintf(reason_, sizeof reason_, "the CUDA driver reports no GPU on this machine");
    }
    if (count_ > DDPC_MAX_DEVICES) count_ = DDPC_MAX_DEVICES;
}

int ddpc_cuda_compiled(void) { return 1; }

int ddpc_cuda_device_count(void) {
    pthread_once(&count_once_, count_devices_);
    return count_;
}

const char *ddpc_cuda_unavailable_reason(void) {
    pthread_once(&count_once_, count_devices_);
    return reason_;
}

ddpc_status ddpc_cuda_require(int device) {
    int n = ddpc_cuda_device_count();
    if (n == 0) return DDPC_ERROR(DDPC_ERR_NOCUDA, "cuda:%d was requested but %s", device, reason_);
    if (device < 0 || device >= n)
        return DDPC_ERROR(DDPC_ERR_ARG, "cuda:%d was requested but this machine has %d GPU%s (cuda:0..cuda:%d)", device,
                          n, n == 1 ? "" : "s", n - 1);
    return DDPC_OK;
}

/* Since CUDA 12, cudaSetDevice creates the device's primary context (some
 * hundreds of MB of its memory). So ddpc_cuda_leave does not make current
 * again a device whose context does not exist, such as cuda:0 in a thread
 * that never used it (a rank on cuda:3 would otherwise hold a context on
 * cuda:0 after its first op): the runtime's current device stays the one
 * just used, while the thread's code still sees its own (`pending_`, which
 * ddpc_cuda_current_device reports), as PyTorch's MaybeSetDevice does. */
static _Thread_local int pending_ = -1;

typedef CUresult (*cu_device_get_fn_)(CUdevice *dev, int ordinal);
typedef CUresult (*cu_primary_ctx_state_fn_)(CUdevice dev, unsigned int *flags, int *active);
static pthread_once_t driver_once_ = PTHREAD_ONCE_INIT;
static cu_device_get_fn_ cu_device_get_;
static cu_primary_ctx_state_fn_ cu_primary_ctx_state_;

static void *driver_function_(const char *name) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
#else
    cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
        cudaGetLastError(); /* not sticky: clear it so that later checks start clean */
        return NULL;
    }
    return fn;
}

static void driver_functions_(void) {
    cu_device_get_ = (cu_device_get_fn_)driver_function_("cuDeviceGet");
    cu_primary_ctx_state_ = (cu_primary_ctx_state_fn_)driver_function_("cuDevicePrimaryCtxGetState");
}

/* Whether `device`'s primary context exists (yes where the driver cannot tell). */
static int has_context_(int device) {
    pthread_once(&driver_once_, driver_functions_);
    CUdevice dev;
    unsigned int flags;
    int active = 1;
    if (!cu_device_get_ || !cu_primary_ctx_state_ || cu_device_get_(&dev, device) != CUDA_SUCCESS ||
        cu_primary_ctx_state_(dev, &flags, &active) != CUDA_SUCCESS)
        return 1;
    return active;
}

ddpc_status ddpc_cuda_set_device(int device) {
    CHECK(ddpc_cuda_require(device));
    ddpc_cuda_mark_initialized();
    CUDACHECK(cudaSetDevice(device));
    pending_ = -1;
    return DDPC_OK;
}

ddpc_status ddpc_cuda_current_device(int *device) {
    CHECK(ddpc_cuda_require(0));
    if (pending_ >= 0) {
        *device = pending_;
        return DDPC_OK;
    }
    CUDACHECK(cudaGetDevice(device));
    return DDPC_OK;
}

ddpc_status ddpc_cuda_enter(int device, int *prev) {
    CHECK(ddpc_cuda_require(device));
    CUDACHECK(cudaGetDevice(prev)); /* the runtime's: nested enters restore exactly */
    CUDACHECK(cudaSetDevice(device));
    return DDPC_OK;
}

/* Unchecked: `prev` was current a moment ago, so making it current again
 * cannot fail for a reason the caller could act on. A negative `prev`
 * (nothing entered) does nothing. */
void ddpc_cuda_leave(int prev) {
    int now = -1;
    if (prev < 0 || (cudaGetDevice(&now) == cudaSuccess && now == prev)) return;
    if (has_context_(prev)) {
        cudaSetDevice(prev);
    } else if (pending_ < 0) {
        pending_ = prev; /* still the thread's device for its code; see pending_ */
    }
}

ddpc_status ddpc_cuda_restore_device(int device) {
    CHECK(ddpc_cuda_require(device));
    ddpc_cuda_leave(device);
    return DDPC_OK;
}

ddpc_status ddpc_cuda_properties(int device, ddpc_device_props *props) {
    CHECK(ddpc_cuda_require(device));
    struct cudaDeviceProp p;
    CUDACHECK(cudaGetDeviceProperties(&p, device));
    snprintf(props->name, sizeof props->name, "%s", p.name);
    props->total_memory = p.totalGlobalMem;
    props->major = p.major;
    props->minor = p.minor;
    props->multi_processor_count = p.multiProcessorCount;
    props->can_map_host_memory = p.canMapHostMemory;
    props->host_register_read_only = p.hostRegisterReadOnlySupported;
    CUDACHECK(cudaDeviceGetPCIBusId(props->pci_bus_id, sizeof props->pci_bus_id, device));
    return DDPC_OK;
}

ddpc_status ddpc_cuda_synchronize(int device) {
    int prev;
    CHECK(ddpc_cuda_enter(device, &prev));
    ddpc_cuda_mark_initialized();
    cudaError_t e = cudaDeviceSynchronize();
    ddpc_cuda_leave(prev);
    CUDACHECK(e);
    return DDPC_OK;
}

static ddpc_status stream_(int device, cudaStream_t *table, void **out) {
    CHECK(ddpc_cuda_require(device));
    ddpc_status st = DDPC_OK;
    ddpc_cuda_mark_initialized();
    pthread_mutex_lock(&streams_mu_);
    if (!table[device]) {
        int prev;
        CHECKGOTO(ddpc_cuda_enter(device, &prev), st, out_);
        cudaError_t e = cudaStreamCreateWithFlags(&table[device], cudaStreamNonBlocking);
        ddpc_cuda_leave(prev);
        CUDACHECKGOTO(e, st, out_);
    }
    *out = table[device];
out_:
    pthread_mutex_unlock(&streams_mu_);
    return st;
}

ddpc_status ddpc_cuda_compute_stream(int device, void **stream) { return stream_(device, compute_, stream); }

ddpc_status ddpc_cuda_copy_stream(int device, void **stream) { return stream_(device, copy_, stream); }

ddpc_status ddpc_cuda_stream_synchronize(void *stream) {
    CUDACHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return DDPC_OK;
}

/* Each device's index error record, in pinned host memory mapped into the
 * device: kernels write it over the bus only when an index is out of range,
 * and the host reads it with a plain load, no copy and no synchronisation,
 * so a check costs nothing where nothing went wrong. host_records_ is the
 * host's view (NULL until made: no kernel of the device can have written
 * it), device_records_ the pointer the kernels take; both are published
 * once, under records_mu_, and read without it. */
static pthread_mutex_t records_mu_ = PTHREAD_MUTEX_INITIALIZER;
static ddpc_index_error *host_records_[DDPC_MAX_DEVICES], *device_records_[DDPC_MAX_DEVICES];

static ddpc_status make_record_(int device) {
    ddpc_status st = DDPC_OK;
    void *host = NULL, *on_device = NULL;
    int prev = -1;
    pthread_mutex_lock(&records_mu_);
    if (device_records_[device]) goto out_; /* another thread made it first */
    ddpc_cuda_mark_initialized();
    CHECKGOTO(ddpc_cuda_enter(device, &prev), st, out_);
    CUDACHECKGOTO(cudaHostAlloc(&host, sizeof(ddpc_index_error), cudaHostAllocMapped), st, out_);
    memset(host, 0, sizeof(ddpc_index_error)); /* CLEAR, in epoch 0 */
    CUDACHECKGOTO(cudaHostGetDevicePointer(&on_device, host, 0), st, out_);
    __atomic_store_n(&host_records_[device], (ddpc_index_error *)host, __ATOMIC_RELEASE);
    __atomic_store_n(&device_records_[device], (ddpc_index_error *)on_device, __ATOMIC_RELEASE);
out_:
    if (st != DDPC_OK && host) cudaFreeHost(host); /* best effort: the allocation's error is the one to report */
    if (prev >= 0) ddpc_cuda_leave(prev);
    pthread_mutex_unlock(&records_mu_);
    return st;
}

ddpc_status ddpc_cuda_index_check(int device, int op, ddpc_k_index_check *check) {
    CHECK(ddpc_cuda_require(device));
    if (!__atomic_load_n(&device_records_[device], __ATOMIC_ACQUIRE)) CHECK(make_record_(device));
    const ddpc_index_error *host = __atomic_load_n(&host_records_[device], __ATOMIC_ACQUIRE);
    *check = (ddpc_k_index_check){.record = __atomic_load_n(&device_records_[device], __ATOMIC_ACQUIRE),
                                  .epoch = __atomic_load_n(&host->state, __ATOMIC_ACQUIRE) >> 2, .op = op};
    return DDPC_OK;
}

ddpc_status ddpc_cuda_check_index_errors(int device, const char *when) {
    if (device < 0 || device >= DDPC_MAX_DEVICES) return DDPC_OK;
    ddpc_index_error *record = __atomic_load_n(&host_records_[device], __ATOMIC_ACQUIRE);
    ddpc_index_error e;
    if (!record || !ddpc_index_error_take(record, &e)) return DDPC_OK;
    char where[160];
    snprintf(where, sizeof where, " (found on cuda:%d %s; the op ran asynchronously)", device, when);
    return ddpc_index_error_at(__FILE__, __LINE__, &e, where);
}

ddpc_status ddpc_cuda_stream_after(int waiter_device, void *waiter, int device, void *stream) {
    cudaEvent_t ev;
    ddpc_status st = DDPC_OK;
    int prev;
    CHECK(ddpc_cuda_enter(device, &prev));
    CUDACHECKGOTO(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), st, leave_);
    CUDACHECKGOTO(cudaEventRecord(ev, (cudaStream_t)stream), st, out_);
    CUDACHECKGOTO(cudaSetDevice(waiter_device), st, out_);
    CUDACHECKGOTO(cudaStreamWaitEvent((cudaStream_t)waiter, ev, 0), st, out_);
out_:
    cudaEventDestroy(ev); /* safe once recorded: the wait keeps what it needs */
leave_:
    ddpc_cuda_leave(prev);
    return st;
}

ddpc_status ddpc_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    int prev;
    CHECK(ddpc_cuda_enter(device, &prev));
    ddpc_cuda_mark_initialized();
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    ddpc_cuda_leave(prev);
    CUDACHECK(e);
    return DDPC_OK;
}

ddpc_status ddpc_cuda_event_create(int device, int timing, void **event) {
    int prev;
    CHECK(ddpc_cuda_enter(device, &prev));
    ddpc_cuda_mark_initialized();
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming);
    ddpc_cuda_leave(prev);
    CUDACHECK(e);
    *event = ev;
    return DDPC_OK;
}

/* Runs `call` with `device` current: an event belongs to the device it was
 * created on, and is recorded or waited for on that device's compute stream. */
#define ON_COMPUTE_STREAM_(device, call)                                           \
    do {                                                                           \
        void *stream_;                                                             \
        int prev_;                                                                 \
        CHECK(ddpc_cuda_compute_stream(device, &stream_));                         \
        CHECK(ddpc_cuda_enter(device, &prev_));                                    \
        cudaStream_t s_ = (cudaStream_t)stream_;                                   \
        cudaError_t err_ = (call);                                                 \
        ddpc_cuda_leave(prev_);                                                    \
        if (err_ != cudaSuccess)                                                   \
            return DDPC_ERROR(DDPC_ERR_CUDA, "%s failed: %s (%s)", #call,           \
                              cudaGetErrorString(err_), cudaGetErrorName(err_));   \
    } while (0)

ddpc_status ddpc_cuda_event_record(void *event, int device) {
    ON_COMPUTE_STREAM_(device, cudaEventRecord((cudaEvent_t)event, s_));
    return DDPC_OK;
}

ddpc_status ddpc_cuda_event_wait(void *event, int device) {
    ON_COMPUTE_STREAM_(device, cudaStreamWaitEvent(s_, (cudaEvent_t)event, 0));
    return DDPC_OK;
}

ddpc_status ddpc_cuda_event_query(void *event, int *done) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: clear it so the next check does not see it */
        *done = 0;
        return DDPC_OK;
    }
    CUDACHECK(e);
    *done = 1;
    return DDPC_OK;
}

ddpc_status ddpc_cuda_event_synchronize(void *event) {
    CUDACHECK(cudaEventSynchronize((cudaEvent_t)event));
    return DDPC_OK;
}

ddpc_status ddpc_cuda_event_elapsed(void *start, void *end, float *ms) {
    CUDACHECK(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return DDPC_OK;
}

void ddpc_cuda_event_destroy(void *event) { cudaEventDestroy((cudaEvent_t)event); }

int ddpc_cuda_runtime_version(void) {
    int v = 0;
    return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : 0;
}

int ddpc_cuda_driver_version(void) {
    int v = 0;
    return cudaDriverGetVersion(&v) == cudaSuccess ? v : 0;
}

int ddpc_nccl_version(void) {
#ifdef DDPC_WITH_NCCL
    int v = 0;
    return ddpc_nccl_available() && ddpc_nccl.GetVersion(&v) == ncclSuccess ? v : 0;
#else
    return 0;
#endif
}

#else /* CPU-only build */

static const char *nocuda_ = "this ddpc was built without CUDA (rebuild with a CUDA toolkit and without DDPC_CUDA=0)";

int ddpc_cuda_compiled(void) { return 0; }
int ddpc_cuda_initialized(void) { return 0; }
void ddpc_cuda_mark_initialized(void) {}
int ddpc_cuda_fork_unsafe(void) { return 0; }
int ddpc_cuda_device_count(void) { return 0; }
const char *ddpc_cuda_unavailable_reason(void) { return nocuda_; }

ddpc_status ddpc_cuda_require(int device) {
    return DDPC_ERROR(DDPC_ERR_NOCUDA, "cuda:%d was requested but %s", device, nocuda_);
}

ddpc_status ddpc_cuda_set_device(int device) { return ddpc_cuda_require(device); }
ddpc_status ddpc_cuda_restore_device(int device) { return ddpc_cuda_require(device); }
ddpc_status ddpc_cuda_current_device(int *device) {
    *device = 0;
    return ddpc_cuda_require(0);
}
ddpc_status ddpc_cuda_properties(int device, ddpc_device_props *props) {
    (void)props;
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_synchronize(int device) { return ddpc_cuda_require(device); }
ddpc_status ddpc_cuda_compute_stream(int device, void **stream) {
    *stream = NULL;
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_copy_stream(int device, void **stream) {
    *stream = NULL;
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_stream_synchronize(void *stream) {
    (void)stream;
    return ddpc_cuda_require(0);
}
ddpc_status ddpc_cuda_index_check(int device, int op, ddpc_k_index_check *check) {
    *check = (ddpc_k_index_check){.record = NULL, .op = op};
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_check_index_errors(int device, const char *when) {
    (void)device, (void)when;
    return DDPC_OK;
}
ddpc_status ddpc_cuda_stream_after(int waiter_device, void *waiter, int device, void *stream) {
    (void)waiter_device, (void)waiter, (void)stream;
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_event_create(int device, int timing, void **event) {
    (void)timing;
    *event = NULL;
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_event_record(void *event, int device) {
    (void)event;
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_event_wait(void *event, int device) {
    (void)event;
    return ddpc_cuda_require(device);
}
ddpc_status ddpc_cuda_event_query(void *event, int *done) {
    (void)event;
    *done = 1;
    return ddpc_cuda_require(0);
}
ddpc_status ddpc_cuda_event_synchronize(void *event) {
    (void)event;
    return ddpc_cuda_require(0);
}
ddpc_status ddpc_cuda_event_elapsed(void *start, void *end, float *ms) {
    (void)start, (void)end;
    *ms = 0;
    return ddpc_cuda_require(0);
}
void ddpc_cuda_event_destroy(void *event) { (void)event; }
int ddpc_cuda_runtime_version(void) { return 0; }
int ddpc_cuda_driver_version(void) { return 0; }
int ddpc_nccl_version(void) { return 0; }

#endif
