/*
 * gpu_blas.cu - the cuBLAS loader: dlopen()s libcublas when a GPU is first
 * used and fills gpu_blas_lib with the functions ftrain calls (gpu_blas.h
 * says why it is not linked); gpu_blas_load() of gpu.h.
 */
#define GPU_BLAS_LOADER
#include "gpu/gpu_blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "gpu/gpu_internal.h"

#define GPU_STR_(x) #x
#define GPU_STR(x) GPU_STR_(x)

gpu_blas_lib_t gpu_blas_lib;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* The library's name for this toolkit's major version, then the same in
 * the toolkit's lib64 the build used (FTRAIN_CUDA_LIBDIR). */
static void blas_load_once(void)
{
    static const char *names[] = {
        "libcublas.so." GPU_STR(CUBLAS_VER_MAJOR),
#ifdef FTRAIN_CUDA_LIBDIR
        FTRAIN_CUDA_LIBDIR "/libcublas.so." GPU_STR(CUBLAS_VER_MAJOR),
#endif
    };
    void *lib = NULL;
    const char *err = "no name to try";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            err = dlerror();
    }
    if (!lib) {
        snprintf(gpu_blas_lib.why, sizeof gpu_blas_lib.why, "cannot load cuBLAS (%s): %s",
                 names[0], err ? err : "unknown error");
        return;
    }
    /* The names after cublas_v2.h's macros (cublasCreate is cublasCreate_v2). */
#define GPU_BLAS_SYM(field, name)                                                          \
    if (!(gpu_blas_lib.field = (decltype(gpu_blas_lib.field))dlsym(lib, GPU_STR(name)))) { \
        snprintf(gpu_blas_lib.why, sizeof gpu_blas_lib.why, "cuBLAS (%s) lacks %s",       \
                 names[0], GPU_STR(name));                                                  \
        return;                                                                             \
    }
    GPU_BLAS_SYM(create, cublasCreate)
    GPU_BLAS_SYM(destroy, cublasDestroy)
    GPU_BLAS_SYM(set_stream, cublasSetStream)
    GPU_BLAS_SYM(set_math_mode, cublasSetMathMode)
    GPU_BLAS_SYM(set_atomics_mode, cublasSetAtomicsMode)
    GPU_BLAS_SYM(set_pointer_mode, cublasSetPointerMode)
    GPU_BLAS_SYM(sgemm, cublasSgemm)
    GPU_BLAS_SYM(status_string, cublasGetStatusString)
    GPU_BLAS_SYM(status_name, cublasGetStatusName)
#undef GPU_BLAS_SYM
    gpu_blas_lib.loaded = 1; /* kept loaded for the life of the process */
}

int gpu_blas_try_load(void)
{
    pthread_once(&blas_once, blas_load_once);
    return gpu_blas_lib.loaded;
}

extern "C" int gpu_blas_load(void)
{
    char msg[sizeof gpu_blas_lib.why + 16];
    if (gpu_blas_try_load())
        return GPU_OK;
    snprintf(msg, sizeof msg, "gpu_blas_load: %s", gpu_blas_lib.why);
    return gpu_fail_text(GPU_ECUBLAS, msg);
}
