/*
 * gpu_stub.c - gpu_strerror(), and every gpu.h function as a stub returning
 * GPU_ENOTBUILT when ftrain is built without CUDA (make CUDA=0, or no nvcc
 * found), so callers need no #ifdef.  With CUDA the real functions live in
 * gpu_model.cu, gpu_kernels.cu and gpu_blas.cu.
 */
#include "gpu/gpu.h"

#include <stdlib.h>

#include "util/util.h"

static const util_name_t gpu_errors[] = {
    {"success", GPU_OK},
    {"invalid argument", GPU_EINVAL},
    {"out of memory", GPU_ENOMEM},
    {"CUDA error", GPU_ECUDA},
    {"cuBLAS error", GPU_ECUBLAS},
    {"no such GPU", GPU_ENODEV},
    {"built without CUDA", GPU_ENOTBUILT},
};

const char *gpu_strerror(int err)
{
    return util_name_of(gpu_errors, UTIL_COUNT(gpu_errors), err, "unknown error");
}

#ifndef FTRAIN_CUDA

const char *gpu_last_error(void)
{
    return "built without CUDA";
}

int gpu_init(gpu_ctx_t **out, int ordinal)
{
    if (out)
        *out = NULL;
    return GPU_ENOTBUILT;
}

void gpu_close(gpu_ctx_t *ctx) {}
int gpu_blas_load(void) { return GPU_ENOTBUILT; }
void *gpu_stream(gpu_ctx_t *ctx) { return NULL; }
int gpu_ordinal(const gpu_ctx_t *ctx) { return -1; }
int gpu_sync(gpu_ctx_t *ctx) { return GPU_ENOTBUILT; }

int gpu_alloc(gpu_ctx_t *ctx, size_t bytes, void **dptr)
{
    if (dptr)
        *dptr = NULL;
    return GPU_ENOTBUILT;
}

void gpu_dfree(gpu_ctx_t *ctx, void *dptr) {}

int gpu_host_alloc(gpu_ctx_t *ctx, size_t bytes, void **hptr)
{
    if (hptr)
        *hptr = NULL;
    return GPU_ENOTBUILT;
}

void gpu_host_free(gpu_ctx_t *ctx, void *hptr) {}
int gpu_host_register(gpu_ctx_t *ctx, void *hptr, size_t bytes) { return GPU_ENOTBUILT; }
void gpu_host_unregister(gpu_ctx_t *ctx, void *hptr) {}
int gpu_memset0(gpu_ctx_t *ctx, void *dptr, size_t bytes) { return GPU_ENOTBUILT; }

int gpu_upload(gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes)
{
    return GPU_ENOTBUILT;
}

int gpu_download(gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes,
                 double *seconds)
{
    if (seconds)
        *seconds = 0.0;
    return GPU_ENOTBUILT;
}

int gpu_model_create(gpu_model_t **out, gpu_ctx_t *ctx, const model_arch_t *arch,
                     int max_batch, const float *host_params)
{
    if (out)
        *out = NULL;
    return GPU_ENOTBUILT;
}

void gpu_model_free(gpu_model_t *gm) {}
size_t gpu_model_num_params(const gpu_model_t *gm) { return 0; }
float *gpu_model_params(gpu_model_t *gm) { return NULL; }

int gpu_model_store_gradient(gpu_model_t *gm, int store) { return GPU_ENOTBUILT; }
int gpu_model_early_return(gpu_model_t *gm, int early) { return GPU_ENOTBUILT; }

int gpu_model_batch_buffers(gpu_model_t *gm, float **x, int32_t **labels,
                            float **y)
{
    return GPU_ENOTBUILT;
}

int gpu_model_forward_backward(gpu_model_t *gm, const float *x,
                               const int32_t *labels, const float *y, int n,
                               float *dgrad, double *loss_sum, int64_t *correct)
{
    return GPU_ENOTBUILT;
}

int gpu_model_set_data(gpu_model_t *gm, const float *x, const int32_t *labels,
                       const float *y, int64_t n)
{
    return GPU_ENOTBUILT;
}

int gpu_model_forward_backward_idx(gpu_model_t *gm, const int64_t *idx, int n,
                                   float *dgrad, double *loss_sum, int64_t *correct)
{
    return GPU_ENOTBUILT;
}

int gpu_model_evaluate(gpu_model_t *gm, const float *x, const int32_t *labels,
                       const float *y, int n, double *loss_sum, int64_t *correct)
{
    return GPU_ENOTBUILT;
}

int gpu_optim_create(gpu_optim_t **out, gpu_ctx_t *ctx, const optim_cfg_t *cfg,
                     size_t nparams)
{
    if (out)
        *out = NULL;
    return GPU_ENOTBUILT;
}

void gpu_optim_free(gpu_optim_t *go) {}

int gpu_optim_step(gpu_optim_t *go, float *dparams, const float *dgrad,
                   int64_t step)
{
    return GPU_ENOTBUILT;
}

int gpu_optim_step_consume(gpu_optim_t *go, float *dparams, float *dgrad, float gs,
                           int clear, int64_t step)
{
    return GPU_ENOTBUILT;
}

int gpu_optim_step_fixed(gpu_optim_t *go, float *dparams, const float *g, int e, int64_t nstep,
                         int64_t step)
{
    return GPU_ENOTBUILT;
}

float *gpu_optim_state_m(gpu_optim_t *go) { return NULL; }
float *gpu_optim_state_v(gpu_optim_t *go) { return NULL; }
int64_t gpu_optim_updates(const gpu_optim_t *go) { return 0; }
void gpu_optim_set_updates(gpu_optim_t *go, int64_t updates) {}

int gpu_maxabs(gpu_ctx_t *ctx, const float *dbuf, size_t count, float *out)
{
    return GPU_ENOTBUILT;
}

int gpu_fixed_accumulate(gpu_ctx_t *ctx, int64_t *acc, const float *grad,
                         size_t count, int exponent)
{
    return GPU_ENOTBUILT;
}

int gpu_fixed_store(gpu_ctx_t *ctx, int64_t *acc, const float *grad, size_t count,
                    int exponent)
{
    return GPU_ENOTBUILT;
}

int gpu_fixed_round(gpu_ctx_t *ctx, float *out, const float *grad, size_t count,
                    int exponent, int64_t nstep)
{
    return GPU_ENOTBUILT;
}

int gpu_fixed_to_float(gpu_ctx_t *ctx, float *grad, const int64_t *acc, size_t count,
                       int exponent, int64_t nstep)
{
    return GPU_ENOTBUILT;
}

int gpu_scale(gpu_ctx_t *ctx, float *grad, size_t count, float factor)
{
    return GPU_ENOTBUILT;
}

#endif /* !FTRAIN_CUDA */
