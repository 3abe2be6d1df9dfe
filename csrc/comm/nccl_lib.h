/* NCCL loaded at run time: the table of the NCCL functions ddpc calls, and
 * the loader that fills it on first use.
 *
 * ddpc compiles against nccl.h for its types but does not link libnccl, so
 * `import ddpc` loads no NCCL and cannot pick one that a later `import torch`
 * would then be bound to (see nccl_lib.c). Every entry point that needs NCCL
 * calls ddpc_nccl_load() first and calls NCCL through `ddpc_nccl`. */
#ifndef DDPC_COMM_NCCL_LIB_H
#define DDPC_COMM_NCCL_LIB_H

#ifdef DDPC_WITH_NCCL
#include <nccl.h>

#include "common.h"

/* Every NCCL function ddpc calls, named without its "nccl" prefix. */
#define DDPC_NCCL_FUNCTIONS(X)                                                                                   \
    X(AllGather) X(AllReduce) X(Broadcast) X(CommAbort) X(CommDestroy) X(CommFinalize) X(CommGetAsyncError)      \
    X(CommInitAll) X(CommInitRankConfig) X(GetErrorString) X(GetLastError) X(GetUniqueId) X(GetVersion)          \
    X(GroupEnd) X(GroupStart) X(Recv) X(Reduce) X(ReduceScatter) X(Send)

/* ddpc_nccl.AllReduce is ncclAllReduce, with nccl.h's own signature. */
typedef struct {
#define DDPC_NCCL_FIELD_(name) __typeof__(nccl##name) *name;
    DDPC_NCCL_FUNCTIONS(DDPC_NCCL_FIELD_)
#undef DDPC_NCCL_FIELD_
} ddpc_nccl_api;

/* Valid once ddpc_nccl_load() has returned DDPC_OK. */
extern ddpc_nccl_api ddpc_nccl;

/* Loads NCCL and fills `ddpc_nccl`, once; later calls return the first
 * call's result. On failure the error lists the libraries tried and why each
 * failed. Call with the GIL held: the nvidia-nccl wheel is looked for on
 * sys.path. */
ddpc_status ddpc_nccl_load(void);
/* ddpc_nccl_load() as a yes/no, leaving no error recorded. */
int ddpc_nccl_available(void);
/* The file NCCL was loaded from; valid once ddpc_nccl_load() returned DDPC_OK. */
const char *ddpc_nccl_path(void);
#endif

#endif
