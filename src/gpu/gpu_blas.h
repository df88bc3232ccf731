/*
 * gpu_blas.h - cuBLAS, loaded when a GPU is first used (not a public
 * header; gpu_blas.cu loads it, gpu_model.cu calls it).
 *
 * cuBLAS is not linked: loading libcublas (and libcublasLt) runs their
 * constructors, about 0.6 s of CPU in every process that links them, which
 * a CPU-only run (and ftrain --help) would pay for nothing.  gpu_init()
 * loads it with dlopen (gpu_blas_try_load) and takes the few functions
 * ftrain uses into gpu_blas_lib; a file that includes this header calls
 * them through that table under their usual names (the macros at the end).
 */
#ifndef FTRAIN_GPU_BLAS_H
#define FTRAIN_GPU_BLAS_H

#include <cublas_v2.h>

/* The functions ftrain calls, set once by gpu_blas_try_load(). */
typedef struct {
    decltype(&cublasCreate) create;
    decltype(&cublasDestroy) destroy;
    decltype(&cublasSetStream) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSetAtomicsMode) set_atomics_mode;
    decltype(&cublasSetPointerMode) set_pointer_mode;
    decltype(&cublasSgemm) sgemm;
    decltype(&cublasGetStatusString) status_string;
    decltype(&cublasGetStatusName) status_name;
    int loaded;          /* 1: every entry is set */
    char why[256];       /* why it could not be loaded */
} gpu_blas_lib_t;

extern gpu_blas_lib_t gpu_blas_lib;

/* 1 when cuBLAS is loaded (loading it the first time; thread-safe), else 0
 * with gpu_blas_lib.why saying why. */
int gpu_blas_try_load(void);

/* cuBLAS calls go through the table.  The loader (gpu_blas.cu) defines
 * GPU_BLAS_LOADER: it needs cublas_v2.h's own names (cublasCreate is
 * cublasCreate_v2) to look the functions up. */
#ifndef GPU_BLAS_LOADER
#undef cublasCreate
#undef cublasDestroy
#undef cublasSetStream
#undef cublasSetPointerMode
#undef cublasSgemm
#define cublasCreate gpu_blas_lib.create
#define cublasDestroy gpu_blas_lib.destroy
#define cublasSetStream gpu_blas_lib.set_stream
#define cublasSetMathMode gpu_blas_lib.set_math_mode
#define cublasSetAtomicsMode gpu_blas_lib.set_atomics_mode
#define cublasSetPointerMode gpu_blas_lib.set_pointer_mode
#define cublasSgemm gpu_blas_lib.sgemm
#define cublasGetStatusString gpu_blas_lib.status_string
#define cublasGetStatusName gpu_blas_lib.status_name
#endif

#endif
