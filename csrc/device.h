/* CUDA devices: availability, properties, and the per-device streams.
 *
 * Each device has a compute stream (every op runs on it, so ops are ordered
 * without host synchronisation) and a copy stream (loader H2D prefetch). Both
 * are created lazily, non-blocking with respect to the legacy default stream.
 * In a CPU-only build, or where no driver or GPU is present, every function
 * that needs a device returns DDPC_ERR_NOCUDA with the reason. */
#ifndef DDPC_DEVICE_H
#define DDPC_DEVICE_H

#include "common.h"
#include "index_check.h"

#define DDPC_CPU (-1)
#define DDPC_MAX_DEVICES 64

typedef struct {
    char name[256];
    size_t total_memory;
    int major, minor;
    int multi_processor_count;
    char pci_bus_id[32];
    /* Whether host memory can be mapped into the device, and registered
     * read-only (which a read-only file mapping needs): the loader's direct
     * gather reads its sources through such mappings. */
    int can_map_host_memory, host_register_read_only;
} ddpc_device_props;

int ddpc_cuda_compiled(void);
/* Whether this process has created (or begun creating) a CUDA context. */
int ddpc_cuda_initialized(void);
void ddpc_cuda_mark_initialized(void);
/* Whether the CUDA driver is up in this process, so that a forked child could not use CUDA. */
int ddpc_cuda_fork_unsafe(void);
/* Number of usable GPUs; 0 (never an error) when there is no driver or GPU. */
int ddpc_cuda_device_count(void);
/* Why ddpc_cuda_device_count() is 0, or "" when it is not. */
const char *ddpc_cuda_unavailable_reason(void);
/* DDPC_OK when `device` names a usable GPU, else a clear NOCUDA/ARG error. */
ddpc_status ddpc_cuda_require(int device);
ddpc_status ddpc_cuda_set_device(int device);
ddpc_status ddpc_cuda_current_device(int *device);
/* Makes `device` current for the calling thread and saves the device that
 * was (ddpc_cuda_leave puts it back): ops leave the caller's current device,
 * which "cuda" without an index names, as they found it. */
ddpc_status ddpc_cuda_enter(int device, int *prev);
void ddpc_cuda_leave(int prev);
/* ddpc_cuda_leave for Python code (the end of a ddpc.cuda.device block):
 * `device` becomes current again where its context exists, else only for
 * this thread's code, without creating a context on it. */
ddpc_status ddpc_cuda_restore_device(int device);
ddpc_status ddpc_cuda_properties(int device, ddpc_device_props *props);
ddpc_status ddpc_cuda_synchronize(int device);
/* cudaStream_t of the device's compute and copy streams, as void *. */
ddpc_status ddpc_cuda_compute_stream(int device, void **stream);
ddpc_status ddpc_cuda_copy_stream(int device, void **stream);
/* Makes `waiter` (a stream of `waiter_device`) wait for everything queued so
 * far on `stream` (a stream of `device`), through an event: no host sync. */
ddpc_status ddpc_cuda_stream_after(int waiter_device, void *waiter, int device, void *stream);
/* What a kernel of op `op` (a ddpc_index_op) on `device` reports an index
 * out of range to: the device's error record (kernels/index_check.h), made
 * on the device's first use. */
ddpc_status ddpc_cuda_index_check(int device, int op, ddpc_k_index_check *check);
/* The index error a kernel recorded on `device`, if any: the record is
 * cleared and the error returned as the op's host loop returns it, its
 * message saying where it was found (`when`: "when the device was next
 * synchronized", ...), so it is raised once; DDPC_OK where none is recorded.
 * A read of host memory, no synchronisation: call it where the host has
 * waited for the device (every error of the work waited for is then in the
 * record) or is about to launch work (errors may still be on their way; a
 * later check finds them). */
ddpc_status ddpc_cuda_check_index_errors(int device, const char *when);
/* The `when` of the checks before a launch. */
#define DDPC_AT_LAUNCH "when a later op was launched"
/* Host synchronisation on one stream (GIL must already be released). */
ddpc_status ddpc_cuda_stream_synchronize(void *stream);
/* Free and total device memory as the driver reports them. */
ddpc_status ddpc_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
/* Events for Python code (ddpc.cuda.Event), as cudaEvent_t in a void *:
 * created on `device` (with timing or without), recorded on or waited for
 * by that device's compute stream, queried, waited for by the host (GIL
 * released by the caller), and timed between two recorded timing events. */
ddpc_status ddpc_cuda_event_create(int device, int timing, void **event);
ddpc_status ddpc_cuda_event_record(void *event, int device);
ddpc_status ddpc_cuda_event_wait(void *event, int device);
ddpc_status ddpc_cuda_event_query(void *event, int *done);
ddpc_status ddpc_cuda_event_synchronize(void *event);
ddpc_status ddpc_cuda_event_elapsed(void *start, void *end, float *ms);
void ddpc_cuda_event_destroy(void *event);
/* Versions as integers (e.g. 12040), or 0 where unavailable. */
int ddpc_cuda_runtime_version(void);
int ddpc_cuda_driver_version(void);
/* 0 also where NCCL cannot be loaded (see comm/nccl_lib.h); call with the GIL held. */
int ddpc_nccl_version(void);

#endif
