/*
 * gpu_model.cu - the GPU context (device, stream, cuBLAS handle), memory
 * helpers, error messages and the MLP of model.h on the device.  cuBLAS is
 * called through the table gpu_blas.cu loads (gpu_blas.h).
 *
 * The model mirrors model.c step for step (see its header comment for the
 * notation): forward Z = A W^T + b with cuBLAS and k_bias_act; the loss
 * kernel writes per-sample losses and hits and, for training, overwrites the
 * logits with dLoss/dlogits; backward puts dW = delta^T A (cuBLAS) and db =
 * column sums of delta straight into the caller's device gradient, added to
 * it (beta = 1) or stored (beta = 0, gpu_model_store_gradient), then delta =
 * (delta W) * act'(A) in one of two ping-pong buffers.
 *
 * Row-major through column-major cuBLAS: a row-major r x c matrix with
 * leading dimension c is the column-major c x r matrix, its transpose.  So
 *   Z (n x dout) = A (n x din) W^T      is  Z^T = op_T(W^T) A^T:
 *       sgemm(T, N, m=dout, n=n, k=din, W, ld din, A, ld din, Z, ld dout)
 *   dW (dout x din) += delta^T A         is  dW^T += A^T op_T(delta^T):
 *       sgemm(N, T, m=din, n=dout, k=n, A, ld din, delta, ld dout, dW, ld din)
 *   dA (n x din) = delta W               is  dA^T = W^T delta^T:
 *       sgemm(N, N, m=din, n=n, k=dout, W, ld din, delta, ld dout, dA, ld din)
 *
 * Batches: host inputs are copied into pinned staging buffers (skipped when
 * the caller gathered into them, gpu_model_batch_buffers) and sent with
 * cudaMemcpyAsync on the context's stream.  Per-sample losses (double) and
 * hits come back the same way and are summed on the host in sample order, as
 * model.c sums them.  All memory is allocated in gpu_model_create, except
 * a whole data set and its index buffers (gpu_model_set_data), with which
 * batches are gathered on the device from sample indices instead.
 */
#include "gpu/gpu_internal.h"
#include "gpu/gpu_blas.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "nn/model.h"
}

#define GPU_ERR_MAX 512

static thread_local char gpu_err_buf[GPU_ERR_MAX];

/* ---- errors -------------------------------------------------------------- */

/* Strip the directories of a source path for shorter messages. */
static const char *base_name(const char *file)
{
    const char *s = strrchr(file, '/');
    return s ? s + 1 : file;
}

int gpu_fail_cuda(const char *file, int line, const char *call, cudaError_t e)
{
    snprintf(gpu_err_buf, sizeof gpu_err_buf, "%s:%d: %s: %s (%s)",
             base_name(file), line, call, cudaGetErrorString(e),
             cudaGetErrorName(e));
    /* Reported now: a non-sticky error (an allocation that failed) must not
     * come back from the next cudaGetLastError() after a good launch. */
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? GPU_ENOMEM : GPU_ECUDA;
}

int gpu_fail_cublas(const char *file, int line, const char *call,
                    cublasStatus_t s)
{
    snprintf(gpu_err_buf, sizeof gpu_err_buf, "%s:%d: %s: %s (%s)",
             base_name(file), line, call, cublasGetStatusString(s),
             cublasGetStatusName(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? GPU_ENOMEM : GPU_ECUBLAS;
}

int gpu_fail_msg(int rc, const char *file, int line, const char *msg)
{
    snprintf(gpu_err_buf, sizeof gpu_err_buf, "%s:%d: %s", base_name(file),
             line, msg);
    return rc;
}

int gpu_fail_text(int rc, const char *msg)
{
    snprintf(gpu_err_buf, sizeof gpu_err_buf, "%s", msg);
    return rc;
}

extern "C" const char *gpu_last_error(void)
{
    return gpu_err_buf;
}

/* ---- context and memory -------------------------------------------------- */

extern "C" int gpu_init(gpu_ctx_t **out, int ordinal)
{
    int rc = GPU_OK;
    int count = 0;
    cudaError_t cerr = cudaSuccess;
    gpu_ctx_t *ctx = NULL;

    if (!out)
        return GPU_EINVAL;
    *out = NULL;
    cerr = cudaGetDeviceCount(&count);
    if (cerr != cudaSuccess) {
        cudaGetLastError(); /* clear it: "no device" is an answer here */
        snprintf(gpu_err_buf, sizeof gpu_err_buf,
                 "gpu_init: no GPU visible (cudaGetDeviceCount: %s)",
                 cudaGetErrorString(cerr));
        return GPU_ENODEV;
    }
    if (ordinal < 0 || ordinal >= count) {
        snprintf(gpu_err_buf, sizeof gpu_err_buf,
                 "gpu_init: no GPU %d (%d visible)", ordinal, count);
        return GPU_ENODEV;
    }
    ctx = (gpu_ctx_t *)calloc(1, sizeof(*ctx));
    if (!ctx)
        GPU_FAIL(GPU_ENOMEM, "gpu_init: out of host memory");
    ctx->ordinal = ordinal;
    if (!gpu_blas_try_load())
        GPU_FAIL(GPU_ECUBLAS, gpu_blas_lib.why);
    GPU_CUDA(cudaSetDevice(ordinal));
    GPU_CUDA(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    GPU_BLAS(cublasCreate(&ctx->blas));
    GPU_BLAS(cublasSetStream(ctx->blas, ctx->stream));
    /* Reproducible sgemm: the prescribed float32 precision in every phase
     * (no TF32 or other reduced-precision tensor-core paths), and no
     * atomics in the algorithms cuBLAS may pick. */
    GPU_BLAS(cublasSetMathMode(ctx->blas, CUBLAS_PEDANTIC_MATH));
    GPU_BLAS(cublasSetAtomicsMode(ctx->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
    GPU_BLAS(cublasSetPointerMode(ctx->blas, CUBLAS_POINTER_MODE_HOST));
    GPU_CUDA(cudaMalloc((void **)&ctx->d_max, sizeof(unsigned int)));
    GPU_CUDA(cudaHostAlloc((void **)&ctx->h_max, sizeof(unsigned int),
                           cudaHostAllocDefault));
    *out = ctx;
    return GPU_OK;
fail:
    gpu_close(ctx);
    return rc;
}

extern "C" void gpu_close(gpu_ctx_t *ctx)
{
    if (!ctx)
        return;
    cudaSetDevice(ctx->ordinal);
    if (ctx->stream)
        cudaStreamSynchronize(ctx->stream);
    if (ctx->blas)
        cublasDestroy(ctx->blas);
    cudaFree(ctx->d_max);
    cudaFreeHost(ctx->h_max);
    if (ctx->stream)
        cudaStreamDestroy(ctx->stream);
    free(ctx);
}

extern "C" void *gpu_stream(gpu_ctx_t *ctx)
{
    return ctx ? (void *)ctx->stream : NULL;
}

extern "C" int gpu_ordinal(const gpu_ctx_t *ctx)
{
    return ctx ? ctx->ordinal : -1;
}

extern "C" int gpu_sync(gpu_ctx_t *ctx)
{
    int rc = GPU_OK;
    if (!ctx)
        return GPU_EINVAL;
    GPU_CUDA(cudaStreamSynchronize(ctx->stream));
    return GPU_OK;
fail:
    return rc;
}

extern "C" int gpu_alloc(gpu_ctx_t *ctx, size_t bytes, void **dptr)
{
    int rc = GPU_OK;
    if (!dptr)
        return GPU_EINVAL;
    *dptr = NULL;
    if (!ctx || bytes == 0)
        return GPU_EINVAL;
    GPU_CUDA(cudaSetDevice(ctx->ordinal));
    GPU_CUDA(cudaMalloc(dptr, bytes));
    return GPU_OK;
fail:
    *dptr = NULL;
    return rc;
}

extern "C" void gpu_dfree(gpu_ctx_t *ctx, void *dptr)
{
    if (!dptr)
        return;
    if (ctx)
        cudaSetDevice(ctx->ordinal);
    cudaFree(dptr);
}

extern "C" int gpu_host_alloc(gpu_ctx_t *ctx, size_t bytes, void **hptr)
{
    int rc = GPU_OK;
    if (!hptr)
        return GPU_EINVAL;
    *hptr = NULL;
    if (!ctx || bytes == 0)
        return GPU_EINVAL;
    GPU_CUDA(cudaSetDevice(ctx->ordinal));
    GPU_CUDA(cudaHostAlloc(hptr, bytes, cudaHostAllocDefault));
    return GPU_OK;
fail:
    *hptr = NULL;
    return rc;
}

extern "C" void gpu_host_free(gpu_ctx_t *ctx, void *hptr)
{
    (void)ctx;
    if (hptr)
        cudaFreeHost(hptr);
}

extern "C" int gpu_host_register(gpu_ctx_t *ctx, void *hptr, size_t bytes)
{
    int rc = GPU_OK;
    if (!ctx || !hptr || bytes == 0)
        return GPU_EINVAL;
    GPU_CUDA(cudaSetDevice(ctx->ordinal));
    GPU_CUDA(cudaHostRegister(hptr, bytes, cudaHostRegisterDefault));
    return GPU_OK;
fail:
    return rc;
}

extern "C" void gpu_host_unregister(gpu_ctx_t *ctx, void *hptr)
{
    if (!hptr)
        return;
    if (ctx)
        cudaSetDevice(ctx->ordinal);
    cudaHostUnregister(hptr);
    cudaGetLastError(); /* not registered: nothing to undo */
}

extern "C" int gpu_memset0(gpu_ctx_t *ctx, void *dptr, size_t bytes)
{
    int rc = GPU_OK;
    if (!ctx || (bytes > 0 && !dptr))
        return GPU_EINVAL;
    if (bytes == 0)
        return GPU_OK;
    GPU_CUDA(cudaMemsetAsync(dptr, 0, bytes, ctx->stream));
    return GPU_OK;
fail:
    return rc;
}

extern "C" int gpu_upload(gpu_ctx_t *ctx, void *dst, const void *src,
                          size_t bytes)
{
    int rc = GPU_OK;
    if (!ctx || (bytes > 0 && (!dst || !src)))
        return GPU_EINVAL;
    if (bytes == 0)
        return GPU_OK;
    GPU_CUDA(cudaSetDevice(ctx->ordinal));
    GPU_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                             ctx->stream));
    GPU_CUDA(cudaStreamSynchronize(ctx->stream));
    return GPU_OK;
fail:
    return rc;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

extern "C" int gpu_download(gpu_ctx_t *ctx, void *dst, const void *src,
                            size_t bytes, double *seconds)
{
    int rc = GPU_OK;
    double t0 = mono_s();
    if (seconds)
        *seconds = 0.0;
    if (!ctx || (bytes > 0 && (!dst || !src)))
        return GPU_EINVAL;
    if (bytes == 0)
        return GPU_OK;
    GPU_CUDA(cudaSetDevice(ctx->ordinal));
    GPU_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                             ctx->stream));
    GPU_CUDA(cudaStreamSynchronize(ctx->stream));
    if (seconds)
        *seconds = mono_s() - t0;
    return GPU_OK;
fail:
    return rc;
}

/* ---- the model ----------------------------------------------------------- */

struct gpu_model {
    gpu_ctx_t *ctx;
    model_arch_t arch;
    int max_batch;
    size_t nparams;
    size_t w_off[MODEL_MAX_LAYERS];
    size_t b_off[MODEL_MAX_LAYERS];
    float *dparams;
    float *dact[MODEL_MAX_LAYERS + 1];   /* dact[1..L], max_batch x dims[l] */
    float *dwork[2];                     /* backward deltas of hidden layers */
    float *dx, *dy;                      /* device batch */
    int32_t *dlab;
    double *dloss;                       /* per-sample losses */
    int *dhit;                           /* per-sample hits */
    float *hx, *hy;                      /* pinned staging */
    int32_t *hlab;
    double *hloss;
    int *hhit;
    /* gpu_model_set_data: a whole data set on the device */
    int64_t set_n;
    float *dset_x, *dset_y;
    int32_t *dset_lab;
    int64_t *didx, *hidx;                /* max_batch indices, pinned */
    /* gpu_model_store_gradient: calls store their gradient (no adding) */
    int grad_store;
    /* gpu_model_early_return: forward/backward calls wait for loss_ready
     * (recorded after the loss copies), not for the whole stream */
    int early_return;
    cudaEvent_t loss_ready;
};

/* Return 1 when a is an architecture model.c accepts (model_init is the
 * judge: the same rules, one place). */
static int arch_ok(const model_arch_t *a, int max_batch)
{
    model_t *probe = NULL;
    if (!a || max_batch < 1 || a->nlayers < 1 || a->nlayers > MODEL_MAX_LAYERS)
        return 0;
    /* A one-sample probe validates without a big workspace. */
    if (model_init(&probe, a, 0, 1, NULL, 0) != MODEL_OK)
        return 0;
    model_free(probe);
    return 1;
}

extern "C" int gpu_model_create(gpu_model_t **out, gpu_ctx_t *ctx,
                                const model_arch_t *arch, int max_batch,
                                const float *host_params)
{
    int rc = GPU_OK;
    gpu_model_t *gm = NULL;
    size_t nb = 0, hid = 0, in = 0, k = 0;
    int L = 0;

    if (!out)
        return GPU_EINVAL;
    *out = NULL;
    if (!ctx || !host_params || !arch_ok(arch, max_batch) ||
        max_batch > (1 << 20))
        return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                            "gpu_model_create: bad architecture or batch size");
    gm = (gpu_model_t *)calloc(1, sizeof(*gm));
    if (!gm)
        GPU_FAIL(GPU_ENOMEM, "gpu_model_create: out of host memory");
    gm->ctx = ctx;
    gm->arch = *arch;
    for (int i = arch->nlayers + 1; i <= MODEL_MAX_LAYERS; i++)
        gm->arch.dims[i] = 0;
    gm->max_batch = max_batch;
    L = arch->nlayers;
    for (int l = 0; l < L; l++) {
        model_layer_offsets(arch, l, &gm->w_off[l], &gm->b_off[l]);
        gm->nparams = gm->b_off[l] + (size_t)arch->dims[l + 1];
    }
    nb = (size_t)max_batch;
    for (int l = 1; l < L; l++)
        if ((size_t)arch->dims[l] > hid)
            hid = (size_t)arch->dims[l];
    in = (size_t)arch->dims[0];
    k = (size_t)arch->dims[L];

    GPU_CUDA(cudaSetDevice(ctx->ordinal));
    GPU_CUDA(cudaMalloc((void **)&gm->dparams, gm->nparams * sizeof(float)));
    for (int l = 1; l <= L; l++)
        GPU_CUDA(cudaMalloc((void **)&gm->dact[l],
                            nb * (size_t)arch->dims[l] * sizeof(float)));
    if (hid) {
        GPU_CUDA(cudaMalloc((void **)&gm->dwork[0], nb * hid * sizeof(float)));
        GPU_CUDA(cudaMalloc((void **)&gm->dwork[1], nb * hid * sizeof(float)));
    }
    GPU_CUDA(cudaMalloc((void **)&gm->dx, nb * in * sizeof(float)));
    GPU_CUDA(cudaMalloc((void **)&gm->dy, nb * k * sizeof(float)));
    GPU_CUDA(cudaMalloc((void **)&gm->dlab, nb * sizeof(int32_t)));
    GPU_CUDA(cudaMalloc((void **)&gm->dloss, nb * sizeof(double)));
    GPU_CUDA(cudaMalloc((void **)&gm->dhit, nb * sizeof(int)));
    GPU_CUDA(cudaHostAlloc((void **)&gm->hx, nb * in * sizeof(float),
                           cudaHostAllocDefault));
    GPU_CUDA(cudaHostAlloc((void **)&gm->hy, nb * k * sizeof(float),
                           cudaHostAllocDefault));
    GPU_CUDA(cudaHostAlloc((void **)&gm->hlab, nb * sizeof(int32_t),
                           cudaHostAllocDefault));
    GPU_CUDA(cudaHostAlloc((void **)&gm->hloss, nb * sizeof(double),
                           cudaHostAllocDefault));
    GPU_CUDA(cudaHostAlloc((void **)&gm->hhit, nb * sizeof(int),
                           cudaHostAllocDefault));
    GPU_CUDA(cudaEventCreateWithFlags(&gm->loss_ready, cudaEventDisableTiming));
    GPU_CUDA(cudaMemcpyAsync(gm->dparams, host_params,
                             gm->nparams * sizeof(float),
                             cudaMemcpyHostToDevice, ctx->stream));
    GPU_CUDA(cudaStreamSynchronize(ctx->stream));
    *out = gm;
    return GPU_OK;
fail:
    gpu_model_free(gm);
    return rc;
}

extern "C" void gpu_model_free(gpu_model_t *gm)
{
    if (!gm)
        return;
    cudaSetDevice(gm->ctx->ordinal);
    cudaStreamSynchronize(gm->ctx->stream);
    cudaFree(gm->dparams);
    for (int l = 0; l <= MODEL_MAX_LAYERS; l++)
        cudaFree(gm->dact[l]);
    cudaFree(gm->dwork[0]);
    cudaFree(gm->dwork[1]);
    cudaFree(gm->dx);
    cudaFree(gm->dy);
    cudaFree(gm->dlab);
    cudaFree(gm->dloss);
    cudaFree(gm->dhit);
    cudaFreeHost(gm->hx);
    cudaFreeHost(gm->hy);
    cudaFreeHost(gm->hlab);
    cudaFreeHost(gm->hloss);
    cudaFreeHost(gm->hhit);
    cudaFree(gm->dset_x);
    cudaFree(gm->dset_y);
    cudaFree(gm->dset_lab);
    cudaFree(gm->didx);
    cudaFreeHost(gm->hidx);
    if (gm->loss_ready)
        cudaEventDestroy(gm->loss_ready);
    free(gm);
}

extern "C" size_t gpu_model_num_params(const gpu_model_t *gm)
{
    return gm ? gm->nparams : 0;
}

extern "C" float *gpu_model_params(gpu_model_t *gm)
{
    return gm ? gm->dparams : NULL;
}

extern "C" int gpu_model_store_gradient(gpu_model_t *gm, int store)
{
    if (!gm)
        return GPU_EINVAL;
    gm->grad_store = store != 0;
    return GPU_OK;
}

extern "C" int gpu_model_early_return(gpu_model_t *gm, int early)
{
    if (!gm)
        return GPU_EINVAL;
    gm->early_return = early != 0;
    return GPU_OK;
}

extern "C" int gpu_model_batch_buffers(gpu_model_t *gm, float **x,
                                       int32_t **labels, float **y)
{
    if (!gm)
        return GPU_EINVAL;
    if (x)
        *x = gm->hx;
    if (labels)
        *labels = gm->hlab;
    if (y)
        *y = gm->hy;
    return GPU_OK;
}

/* The argument rules of model.c's check_call: labels within the outputs. */
static int check_call(const gpu_model_t *gm, const float *x,
                      const int32_t *labels, const float *y, int n)
{
    if (!gm || n < 0 || (n > 0 && !x))
        return GPU_EINVAL;
    if (gm->arch.loss == LOSS_XENT) {
        if (n > 0 && !labels)
            return GPU_EINVAL;
        const int32_t k = gm->arch.dims[gm->arch.nlayers];
        for (int i = 0; i < n; i++)
            if (labels[i] < 0 || labels[i] >= k)
                return GPU_EINVAL;
    } else if (n > 0 && !y) {
        return GPU_EINVAL;
    }
    return GPU_OK;
}

/* Copy n samples to the device through the pinned staging buffers. */
static int stage(gpu_model_t *gm, const float *x, const int32_t *labels,
                 const float *y, int n)
{
    int rc = GPU_OK;
    cudaStream_t s = gm->ctx->stream;
    const size_t in = (size_t)gm->arch.dims[0];
    const size_t k = (size_t)gm->arch.dims[gm->arch.nlayers];
    const size_t xb = (size_t)n * in * sizeof(float);

    if (x != gm->hx)
        memcpy(gm->hx, x, xb);
    GPU_CUDA(cudaMemcpyAsync(gm->dx, gm->hx, xb, cudaMemcpyHostToDevice, s));
    if (gm->arch.loss == LOSS_XENT) {
        if (labels != gm->hlab)
            memcpy(gm->hlab, labels, (size_t)n * sizeof(int32_t));
        GPU_CUDA(cudaMemcpyAsync(gm->dlab, gm->hlab, (size_t)n * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, s));
    } else {
        if (y != gm->hy)
            memcpy(gm->hy, y, (size_t)n * k * sizeof(float));
        GPU_CUDA(cudaMemcpyAsync(gm->dy, gm->hy, (size_t)n * k * sizeof(float),
                                 cudaMemcpyHostToDevice, s));
    }
    return GPU_OK;
fail:
    return rc;
}

/* Forward n staged samples; leaves layer outputs in dact[1..L]. */
static int forward(gpu_model_t *gm, int n)
{
    int rc = GPU_OK;
    const model_arch_t *a = &gm->arch;
    const int L = a->nlayers;
    const float one = 1.0f, zero = 0.0f;
    for (int l = 0; l < L; l++) {
        const int din = a->dims[l], dout = a->dims[l + 1];
        const float *in = l == 0 ? gm->dx : gm->dact[l];
        const float *w = gm->dparams + gm->w_off[l];
        const float *b = gm->dparams + gm->b_off[l];
        float *z = gm->dact[l + 1];
        GPU_BLAS(cublasSgemm(gm->ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, dout, n,
                             din, &one, w, din, in, din, &zero, z, dout));
        gpuk_bias_act(gm->ctx->stream, z, b, n, dout,
                      l == L - 1 ? GPUK_LINEAR
                      : a->act == ACT_RELU ? GPUK_RELU : GPUK_TANH);
        GPU_CUDA(cudaGetLastError());
    }
    return GPU_OK;
fail:
    return rc;
}

/* Per-sample losses and hits of n forwarded samples (and with want_grad the
 * output deltas over the last layer), then queue their copy to the host. */
static int loss_out(gpu_model_t *gm, int n, int want_grad)
{
    int rc = GPU_OK;
    cudaStream_t s = gm->ctx->stream;
    const int k = gm->arch.dims[gm->arch.nlayers];
    float *out = gm->dact[gm->arch.nlayers];
    if (gm->arch.loss == LOSS_XENT)
        gpuk_xent(s, out, gm->dlab, n, k, want_grad, gm->dloss, gm->dhit);
    else
        gpuk_mse(s, out, gm->dy, n, k, want_grad, gm->dloss, gm->dhit);
    GPU_CUDA(cudaGetLastError());
    GPU_CUDA(cudaMemcpyAsync(gm->hloss, gm->dloss, (size_t)n * sizeof(double),
                             cudaMemcpyDeviceToHost, s));
    GPU_CUDA(cudaMemcpyAsync(gm->hhit, gm->dhit, (size_t)n * sizeof(int),
                             cudaMemcpyDeviceToHost, s));
    /* Every copy from a pinned host buffer of the call is queued before
     * this point, so once it has passed they may all be refilled. */
    GPU_CUDA(cudaEventRecord(gm->loss_ready, s));
    return GPU_OK;
fail:
    return rc;
}

/* Wait and sum the copied per-sample results in order.  early: wait only
 * for the loss copies (loss_out's event), the work queued after them (the
 * backward) still running; else for the whole stream. */
static int collect(gpu_model_t *gm, int n, int early, double *loss_sum, int64_t *correct)
{
    int rc = GPU_OK;
    double loss = 0.0;
    int64_t hits = 0;
    if (early)
        GPU_CUDA(cudaEventSynchronize(gm->loss_ready));
    else
        GPU_CUDA(cudaStreamSynchronize(gm->ctx->stream));
    for (int i = 0; i < n; i++) {
        loss += gm->hloss[i];
        hits += gm->hhit[i];
    }
    *loss_sum = loss;
    *correct = hits;
    return GPU_OK;
fail:
    return rc;
}

/* Backward from the deltas left over the last layer's outputs, into dgrad:
 * added, or stored (gpu_model_store_gradient: the weight products run with
 * beta 0 and the bias sums overwrite, so dgrad is neither cleared first
 * nor read). */
static int backward(gpu_model_t *gm, int n, float *dgrad)
{
    int rc = GPU_OK;
    const model_arch_t *a = &gm->arch;
    const int L = a->nlayers;
    const float one = 1.0f, zero = 0.0f;
    const float beta = gm->grad_store ? 0.0f : 1.0f;
    const float *delta = gm->dact[L];
    int pp = 0;
    for (int l = L - 1; l >= 0; l--) {
        const int din = a->dims[l], dout = a->dims[l + 1];
        const float *in = l == 0 ? gm->dx : gm->dact[l];
        const float *w = gm->dparams + gm->w_off[l];
        float *gw = dgrad + gm->w_off[l];
        float *gb = dgrad + gm->b_off[l];
        GPU_BLAS(cublasSgemm(gm->ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, din, dout,
                             n, &one, in, din, delta, dout, &beta, gw, din));
        gpuk_colsum_acc(gm->ctx->stream, gb, delta, n, dout, !gm->grad_store);
        GPU_CUDA(cudaGetLastError());
        if (l == 0)
            break;
        float *da = gm->dwork[pp];
        pp ^= 1;
        GPU_BLAS(cublasSgemm(gm->ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, din, n,
                             dout, &one, w, din, delta, dout, &zero, da, din));
        gpuk_act_back(gm->ctx->stream, da, gm->dact[l],
                      (size_t)n * (size_t)din,
                      a->act == ACT_RELU ? GPUK_RELU : GPUK_TANH);
        GPU_CUDA(cudaGetLastError());
        delta = da;
    }
    return GPU_OK;
fail:
    return rc;
}

/* A stored gradient of no samples is zero. */
static int store_empty(gpu_model_t *gm, float *dgrad)
{
    int rc = GPU_OK;
    if (gm->grad_store)
        GPU_CUDA(cudaMemsetAsync(dgrad, 0, gm->nparams * sizeof(float), gm->ctx->stream));
    return GPU_OK;
fail:
    return rc;
}

extern "C" int gpu_model_forward_backward(gpu_model_t *gm, const float *x,
                                          const int32_t *labels, const float *y,
                                          int n, float *dgrad, double *loss_sum,
                                          int64_t *correct)
{
    int rc = GPU_OK;
    double loss = 0.0;
    int64_t hits = 0;

    if (check_call(gm, x, labels, y, n) != GPU_OK || n > gm->max_batch ||
        !dgrad)
        return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                            "gpu_model_forward_backward: bad arguments");
    if (n > 0) {
        if ((rc = stage(gm, x, labels, y, n)) != GPU_OK ||
            (rc = forward(gm, n)) != GPU_OK ||
            (rc = loss_out(gm, n, 1)) != GPU_OK ||
            (rc = backward(gm, n, dgrad)) != GPU_OK ||
            (rc = collect(gm, n, gm->early_return, &loss, &hits)) != GPU_OK)
            goto fail;
    } else if ((rc = store_empty(gm, dgrad)) != GPU_OK) {
        goto fail;
    }
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = hits;
    return GPU_OK;
fail:
    /* Copies from the pinned staging buffers may still be queued: the
     * caller refills those buffers next. */
    (void)cudaStreamSynchronize(gm->ctx->stream);
    return rc;
}

static void drop_set(gpu_model_t *gm)
{
    cudaFree(gm->dset_x);
    cudaFree(gm->dset_y);
    cudaFree(gm->dset_lab);
    gm->dset_x = gm->dset_y = NULL;
    gm->dset_lab = NULL;
    gm->set_n = 0;
}

extern "C" int gpu_model_set_data(gpu_model_t *gm, const float *x,
                                  const int32_t *labels, const float *y,
                                  int64_t n)
{
    int rc = GPU_OK;
    if (!gm || n < 1 || n > INT64_C(1) << 40 || !x)
        return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                            "gpu_model_set_data: bad arguments");
    const int xent = gm->arch.loss == LOSS_XENT;
    const size_t in = (size_t)gm->arch.dims[0];
    const size_t k = (size_t)gm->arch.dims[gm->arch.nlayers];
    if (xent ? !labels : !y)
        return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                            "gpu_model_set_data: no labels or targets");
    if (xent)
        for (int64_t i = 0; i < n; i++)
            if (labels[i] < 0 || (size_t)labels[i] >= k)
                return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                                    "gpu_model_set_data: a label out of range");
    const size_t xbytes = (size_t)n * in * sizeof(float);
    const size_t ybytes = xent ? (size_t)n * sizeof(int32_t)
                               : (size_t)n * k * sizeof(float);
    size_t free_b = 0, total_b = 0;
    drop_set(gm);
    GPU_CUDA(cudaSetDevice(gm->ctx->ordinal));
    GPU_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (xbytes + ybytes > free_b / 2) {
        snprintf(gpu_err_buf, sizeof gpu_err_buf,
                 "gpu_model_set_data: %zu MiB of data, %zu MiB free on the GPU",
                 (xbytes + ybytes) >> 20, free_b >> 20);
        return GPU_ENOMEM;
    }
    if (!gm->didx)
        GPU_CUDA(cudaMalloc((void **)&gm->didx, (size_t)gm->max_batch * sizeof(int64_t)));
    if (!gm->hidx)
        GPU_CUDA(cudaHostAlloc((void **)&gm->hidx, (size_t)gm->max_batch * sizeof(int64_t),
                               cudaHostAllocDefault));
    GPU_CUDA(cudaMalloc((void **)&gm->dset_x, xbytes));
    if (xent)
        GPU_CUDA(cudaMalloc((void **)&gm->dset_lab, ybytes));
    else
        GPU_CUDA(cudaMalloc((void **)&gm->dset_y, ybytes));
    /* From pageable memory, once, on the context's stream (a plain
     * cudaMemcpy would go on the legacy stream, which the non-blocking
     * context stream is not ordered after), then waited for. */
    GPU_CUDA(cudaMemcpyAsync(gm->dset_x, x, xbytes, cudaMemcpyHostToDevice, gm->ctx->stream));
    if (xent)
        GPU_CUDA(cudaMemcpyAsync(gm->dset_lab, labels, ybytes, cudaMemcpyHostToDevice,
                                 gm->ctx->stream));
    else
        GPU_CUDA(cudaMemcpyAsync(gm->dset_y, y, ybytes, cudaMemcpyHostToDevice,
                                 gm->ctx->stream));
    GPU_CUDA(cudaStreamSynchronize(gm->ctx->stream));
    gm->set_n = n;
    return GPU_OK;
fail:
    drop_set(gm);
    return rc;
}

extern "C" int gpu_model_forward_backward_idx(gpu_model_t *gm, const int64_t *idx,
                                              int n, float *dgrad,
                                              double *loss_sum, int64_t *correct)
{
    int rc = GPU_OK;
    double loss = 0.0;
    int64_t hits = 0;
    if (!gm || !gm->set_n || n < 0 || n > gm->max_batch || !dgrad || (n > 0 && !idx))
        return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                            "gpu_model_forward_backward_idx: bad arguments or no data set");
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= gm->set_n)
            return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                                "gpu_model_forward_backward_idx: an index out of range");
    if (n > 0) {
        cudaStream_t s = gm->ctx->stream;
        const int in = gm->arch.dims[0];
        const int k = gm->arch.dims[gm->arch.nlayers];
        /* The last call waited at least for its loss copies, which come
         * after its index copy: the pinned index buffer is free to refill. */
        memcpy(gm->hidx, idx, (size_t)n * sizeof(int64_t));
        GPU_CUDA(cudaMemcpyAsync(gm->didx, gm->hidx, (size_t)n * sizeof(int64_t),
                                 cudaMemcpyHostToDevice, s));
        gpuk_gather_rows(s, gm->dx, gm->dset_x, gm->didx, n, in);
        if (gm->arch.loss == LOSS_XENT)
            gpuk_gather_rows(s, gm->dlab, gm->dset_lab, gm->didx, n, 1);
        else
            gpuk_gather_rows(s, gm->dy, gm->dset_y, gm->didx, n, k);
        GPU_CUDA(cudaGetLastError());
        if ((rc = forward(gm, n)) != GPU_OK ||
            (rc = loss_out(gm, n, 1)) != GPU_OK ||
            (rc = backward(gm, n, dgrad)) != GPU_OK ||
            (rc = collect(gm, n, gm->early_return, &loss, &hits)) != GPU_OK)
            goto fail;
    } else if ((rc = store_empty(gm, dgrad)) != GPU_OK) {
        goto fail;
    }
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = hits;
    return GPU_OK;
fail:
    (void)cudaStreamSynchronize(gm->ctx->stream); /* the index buffer is refilled next */
    return rc;
}

extern "C" int gpu_model_evaluate(gpu_model_t *gm, const float *x,
                                  const int32_t *labels, const float *y, int n,
                                  double *loss_sum, int64_t *correct)
{
    int rc = GPU_OK;
    double loss = 0.0;
    int64_t hits = 0;

    if (check_call(gm, x, labels, y, n) != GPU_OK)
        return gpu_fail_msg(GPU_EINVAL, __FILE__, __LINE__,
                            "gpu_model_evaluate: bad arguments");
    for (int start = 0; start < n; start += gm->max_batch) {
        const size_t din = (size_t)gm->arch.dims[0];
        const size_t k = (size_t)gm->arch.dims[gm->arch.nlayers];
        int c = n - start < gm->max_batch ? n - start : gm->max_batch;
        double l = 0.0;
        int64_t h = 0;
        if ((rc = stage(gm, x + (size_t)start * din, labels ? labels + start : NULL,
                        y ? y + (size_t)start * k : NULL, c)) != GPU_OK ||
            (rc = forward(gm, c)) != GPU_OK ||
            (rc = loss_out(gm, c, 0)) != GPU_OK ||
            (rc = collect(gm, c, 0, &l, &h)) != GPU_OK)
            goto fail;
        loss += l;
        hits += h;
    }
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = hits;
    return GPU_OK;
fail:
    (void)cudaStreamSynchronize(gm->ctx->stream); /* as in forward_backward */
    return rc;
}
