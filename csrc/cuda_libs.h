/* cuBLAS and cuFFT loaded at run time: the tables of the functions ddpc
 * calls, and the loaders that fill them on first use.
 *
 * ddpc compiles against their headers but does not link them. Linked,
 * `import ddpc` mapped libcublasLt (half a gigabyte of code) into every
 * process, GPU or not: about 0.2 s and 220 MB of resident memory per
 * process, paid by each rank of a job on the cpu backend. And, as with NCCL
 * (comm/nccl_lib.h), the first libcublas.so.N in a process is the one a
 * later library needing that soname is bound to, so with ddpc imported
 * first torch got the toolkit's copy beside its own. Now a GEMM or FFT on a
 * GPU loads them, and uses the copies torch loaded where torch came first.
 * Every entry point that needs one calls its loader first and calls through
 * the table. */
#ifndef DDPC_CUDA_LIBS_H
#define DDPC_CUDA_LIBS_H

#include "common.h"

#ifdef DDPC_WITH_CUDA
#include <cublas_v2.h>
#include <cufft.h>

/* Every cuBLAS function ddpc calls: the table's field, and the library's
 * symbol (cublas_v2.h renames several to their _v2 forms). */
#define DDPC_CUBLAS_FUNCTIONS(X)                                                                                 \
    X(Create, cublasCreate_v2) X(Destroy, cublasDestroy_v2) X(SetStream, cublasSetStream_v2)                     \
    X(SetMathMode, cublasSetMathMode) X(Sgemm, cublasSgemm_v2) X(Dgemm, cublasDgemm_v2)                          \
    X(GetProperty, cublasGetProperty) X(GetStatusString, cublasGetStatusString)

#define DDPC_CUFFT_FUNCTIONS(X)                                                                                  \
    X(Create, cufftCreate) X(Destroy, cufftDestroy) X(SetAutoAllocation, cufftSetAutoAllocation)               \
    X(MakePlanMany64, cufftMakePlanMany64) X(SetStream, cufftSetStream) X(SetWorkArea, cufftSetWorkArea)         \
    X(ExecC2C, cufftExecC2C) X(ExecR2C, cufftExecR2C) X(ExecC2R, cufftExecC2R) X(ExecZ2Z, cufftExecZ2Z)          \
    X(ExecD2Z, cufftExecD2Z) X(ExecZ2D, cufftExecZ2D) X(GetProperty, cufftGetProperty)

/* ddpc_cublas.Sgemm is cublasSgemm, with cublas_v2.h's own signature. */
#define DDPC_LIB_FIELD_(field, symbol) __typeof__(symbol) *field;
typedef struct {
    DDPC_CUBLAS_FUNCTIONS(DDPC_LIB_FIELD_)
} ddpc_cublas_api;
typedef struct {
    DDPC_CUFFT_FUNCTIONS(DDPC_LIB_FIELD_)
} ddpc_cufft_api;
#undef DDPC_LIB_FIELD_

/* Valid once the matching loader has returned DDPC_OK. */
extern ddpc_cublas_api ddpc_cublas;
extern ddpc_cufft_api ddpc_cufft;
#endif

/* Loads the library and fills its table, once; later calls return the first
 * call's result. On failure the error lists the files tried and why each
 * failed. Which file, the first that loads wins:
 *   1. $DDPC_CUBLAS_LIBRARY (or $DDPC_CUFFT_LIBRARY) when set, and then
 *      nothing else: the user chose;
 *   2. a copy already in the process (torch's, after `import torch`);
 *   3. the one in the CUDA toolkit ddpc was built with;
 *   4. the soname on the dynamic linker's search path.
 * Needs no Python: callable with the GIL released. A build without CUDA
 * returns DDPC_ERR_NOCUDA. */
ddpc_status ddpc_cublas_load(void);
ddpc_status ddpc_cufft_load(void);

/* The file each was loaded from; valid once its loader returned DDPC_OK. */
const char *ddpc_cublas_path(void);
const char *ddpc_cufft_path(void);

/* The library's version as major * 10000 + minor * 100 + patch, loading it;
 * 0 where it does not load (no error is left recorded). */
int ddpc_cublas_version(void);
int ddpc_cufft_version(void);

#endif
