/*
 * gpu.h - the MLP of model.h, its optimizers and the deterministic
 * fixed-point reduction on one CUDA GPU (cuBLAS + small CUDA kernels).
 *
 * HowTo:
 *   gpu_ctx_t *ctx;     gpu_init(&ctx, ordinal)         one per process
 *   model_init(&m, &arch, seed, B)                       host init, as on the CPU
 *   gpu_model_t *gm;    gpu_model_create(&gm, ctx, &arch, B, model_params(m))
 *   gpu_optim_t *go;    gpu_optim_create(&go, ctx, &ocfg, P)
 *   float *dgrad;       gpu_alloc(ctx, P * sizeof(float), (void **)&dgrad)
 *   per step:
 *     gpu_memset0(ctx, dgrad, P * sizeof(float))
 *     gpu_model_forward_backward(gm, x, labels, y, n, dgrad, &loss, &hits)
 *     ... reduce dgrad (comm_nccl.h on the device, or download + MPI) ...
 *     gpu_optim_step(go, gpu_model_params(gm), dgrad, step)
 *   checkpoint: gpu_download() the parameters and gpu_optim_state_m/v() into
 *   host arrays (the trainer page-locks the host model's and optimizer's
 *   own with gpu_host_register: a pageable copy is slower); resume: gpu_upload() them
 *   back and gpu_optim_set_updates().
 *   gpu_optim_free(go); gpu_model_free(gm); gpu_dfree(ctx, dgrad); gpu_close(ctx)
 *
 * Deterministic reduction (docs/determinism.md) on the device, per
 * micro-batch gradient g_i (device, P floats):
 *   gpu_maxabs(ctx, g_i, P, &m)                 local max |g|, exact
 *   ... control reduction gives the global max M, then e as in train_step.c ...
 *   gpu_fixed_accumulate(ctx, acc, g_i, P, e)   acc += llrint(g * 2^e)
 *   ... int64 allreduce of acc ...
 *   gpu_fixed_to_float(ctx, grad, acc, P, e, nstep)
 * One rank with one micro-batch needs no sum: gpu_optim_step_fixed(go,
 * params, g_0, e, nstep, step) rounds and updates in one pass.
 *
 * Same math as the CPU: parameter layout, initialisation (done on the host by
 * model_init), activations, losses and "gradient = SUM over the samples" are
 * those of model.h; the optimizer formulas and their operation order are
 * those of optim.c, with every float operation rounded separately (the .cu
 * files are built with -fmad=false, IEEE division and square root), so an
 * optimizer step gives the same bits as optim_step on an x86-64 host.  The
 * matrix products (cuBLAS, pedantic math, no TF32) sum in another order than
 * OpenBLAS, so forward/backward results agree with model.c to float
 * tolerance, not bit for bit.  On one GPU model every call is deterministic:
 * the same inputs give the same bits (no float atomics, fixed reduction
 * orders, one stream, one cuBLAS handle).
 *
 * Memory: pointers named d* or documented as "device" are device memory;
 * x, labels and y of the model calls are host memory (pageable, or the
 * pinned staging buffers from gpu_model_batch_buffers(), which skips one host
 * copy).  Every call is ordered on the context's stream; calls that return
 * host results (losses, hits, max) synchronize it.
 *
 * Errors: every int function returns GPU_OK or a negative gpu_err_t;
 * gpu_strerror() names the class and gpu_last_error() gives this thread's
 * message of the last failure, with the file:line and text of the failing
 * CUDA or cuBLAS call.  Built without CUDA (make CUDA=0) every function
 * exists and returns GPU_ENOTBUILT.
 */
#ifndef FTRAIN_GPU_H
#define FTRAIN_GPU_H

#include <stddef.h>
#include <stdint.h>

/* model.h and optim.h are C headers without linkage blocks of their own. */
#ifdef __cplusplus
extern "C" {
#endif

#include "nn/model.h"
#include "nn/optim.h"

typedef enum {
    GPU_OK = 0,
    GPU_EINVAL = -1,     /* bad argument */
    GPU_ENOMEM = -2,     /* host or device allocation failed */
    GPU_ECUDA = -3,      /* a CUDA runtime call or kernel failed */
    GPU_ECUBLAS = -4,    /* a cuBLAS call failed */
    GPU_ENODEV = -5,     /* no such GPU */
    GPU_ENOTBUILT = -6   /* built without CUDA */
} gpu_err_t;

typedef struct gpu_ctx gpu_ctx_t;
typedef struct gpu_model gpu_model_t;
typedef struct gpu_optim gpu_optim_t;

/* ---- context and memory ------------------------------------------------ */

/**
 * Select GPU `ordinal` for this thread, create a non-blocking stream and a
 * cuBLAS handle (pedantic math: no TF32, no reduced precision).
 * @return GPU_OK, GPU_ENODEV (ordinal not visible), GPU_ECUDA, GPU_ECUBLAS,
 *         GPU_ENOMEM or GPU_ENOTBUILT.
 */
int gpu_init(gpu_ctx_t **out, int ordinal);
/** Synchronize and release the context; accepts NULL. */
void gpu_close(gpu_ctx_t *ctx);
/**
 * Load cuBLAS (gpu_init does it on its first call; nothing else needs
 * it).  cuBLAS is not linked but opened with dlopen, so that a process
 * that uses no GPU does not pay the ~0.6 s of CPU its constructors take.
 * Needs no GPU.  @return GPU_OK, GPU_ECUBLAS (the library or one of its
 * functions cannot be found: gpu_last_error() says which) or
 * GPU_ENOTBUILT.
 */
int gpu_blas_load(void);

/** @return the context's cudaStream_t as a void pointer (NULL for NULL). */
void *gpu_stream(gpu_ctx_t *ctx);
/** @return the GPU ordinal of the context, -1 for NULL. */
int gpu_ordinal(const gpu_ctx_t *ctx);
/** Wait for all work queued on the context's stream.
 *  @return GPU_OK or GPU_ECUDA (a kernel or copy failed). */
int gpu_sync(gpu_ctx_t *ctx);

/** Device allocation of `bytes` (> 0).  @return GPU_OK, GPU_EINVAL or
 *  GPU_ENOMEM. */
int gpu_alloc(gpu_ctx_t *ctx, size_t bytes, void **dptr);
/** Free device memory from gpu_alloc; accepts NULL. */
void gpu_dfree(gpu_ctx_t *ctx, void *dptr);
/** Pinned (page-locked) host allocation, for fast copies.
 *  @return GPU_OK, GPU_EINVAL or GPU_ENOMEM. */
int gpu_host_alloc(gpu_ctx_t *ctx, size_t bytes, void **hptr);
/** Free memory from gpu_host_alloc; accepts NULL. */
void gpu_host_free(gpu_ctx_t *ctx, void *hptr);
/** Page-lock `bytes` of existing host memory at `hptr` (cudaHostRegister),
 *  so that copies to and from it run at the pinned rate; undo it with
 *  gpu_host_unregister before the memory is freed.
 *  @return GPU_OK, GPU_EINVAL, GPU_ECUDA (the memory stays usable, only
 *  slower to copy) or GPU_ENOTBUILT. */
int gpu_host_register(gpu_ctx_t *ctx, void *hptr, size_t bytes);
/** Undo gpu_host_register; accepts NULL. */
void gpu_host_unregister(gpu_ctx_t *ctx, void *hptr);
/** Zero `bytes` of device memory (queued on the stream).
 *  @return GPU_OK, GPU_EINVAL or GPU_ECUDA. */
int gpu_memset0(gpu_ctx_t *ctx, void *dptr, size_t bytes);

/**
 * Copy host -> device and wait for it.  Pinned sources copy fastest.
 * @return GPU_OK, GPU_EINVAL or GPU_ECUDA.
 */
int gpu_upload(gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes);
/**
 * Copy device -> host and wait for it (a checkpoint's parameter and
 * optimizer-state snapshot: that copy is the training stall).  *seconds (may
 * be NULL) gets the wall time of the copy including the wait for earlier
 * work on the stream.
 * @return GPU_OK, GPU_EINVAL or GPU_ECUDA.
 */
int gpu_download(gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes,
                 double *seconds);

/* ---- the model ------------------------------------------------------- */

/**
 * Create the device model for `arch` with workspace for up to max_batch
 * samples per call, and upload host_params (model_num_params floats, the
 * layout of model.h; normally model_params() of a model_init()ed model).
 * @return GPU_OK, GPU_EINVAL (bad arch, max_batch or NULL params),
 *         GPU_ENOMEM, GPU_ECUDA.
 */
int gpu_model_create(gpu_model_t **out, gpu_ctx_t *ctx, const model_arch_t *arch,
                     int max_batch, const float *host_params);
/** Release; accepts NULL. */
void gpu_model_free(gpu_model_t *gm);

/** @return the number of float parameters (0 for NULL). */
size_t gpu_model_num_params(const gpu_model_t *gm);
/** @return the device parameter array (model.h layout), NULL for NULL. */
float *gpu_model_params(gpu_model_t *gm);

/**
 * store != 0: the forward/backward calls below STORE the gradient of their
 * samples into dgrad (its earlier contents are never read, and a call of
 * no samples stores zeros) instead of adding it, which saves clearing dgrad
 * first and reading it in the matrix products.  store == 0 (the default)
 * adds.  @return GPU_OK or GPU_EINVAL.
 */
int gpu_model_store_gradient(gpu_model_t *gm, int store);

/**
 * early != 0: the forward/backward calls below return as soon as their
 * losses and hits are on the host, with the backward still running on the
 * context's stream (gpu_stream()), so the caller can prepare what follows
 * while the GPU works.  Everything the caller queues on that stream later
 * (an update, a gpu_download of dgrad, the next call) runs after the
 * backward; dgrad must not be read any other way before a synchronizing
 * call.  An error of the running backward is reported by the next call that
 * synchronizes.  The pinned staging buffers may be refilled at once, as
 * without it.  early == 0 (the default): the calls return when the whole
 * backward is done.  Nothing computed changes.  @return GPU_OK or GPU_EINVAL.
 */
int gpu_model_early_return(gpu_model_t *gm, int early);

/**
 * Pinned host staging buffers of max_batch samples: x (max_batch x dims[0]),
 * labels (max_batch) and y (max_batch x outputs).  Gathering a batch straight
 * into them and passing these pointers to the calls below saves a host copy.
 * Any out pointer may be NULL.  @return GPU_OK or GPU_EINVAL.
 */
int gpu_model_batch_buffers(gpu_model_t *gm, float **x, int32_t **labels,
                            float **y);

/**
 * Forward and backward over n samples (0 <= n <= max_batch), exactly the
 * contract of model_forward_backward(): x, labels (classification) or y
 * (regression) are host arrays; the SUM over the samples of each sample's
 * gradient is ADDED into dgrad (device, gpu_model_num_params floats), or
 * stored there after gpu_model_store_gradient(gm, 1).
 * *loss_sum (may be NULL) gets the sum of per-sample losses, summed on the
 * host in sample order in double; *correct (may be NULL) the argmax hits
 * (classification) or samples with every |err| < 0.05 (regression).
 * Synchronizes the stream (after gpu_model_early_return(gm, 1): waits only
 * for the losses).
 * @return GPU_OK, GPU_EINVAL (bad sizes, NULL buffers, a label out of
 *         range), GPU_ECUDA or GPU_ECUBLAS.
 */
int gpu_model_forward_backward(gpu_model_t *gm, const float *x,
                               const int32_t *labels, const float *y, int n,
                               float *dgrad, double *loss_sum, int64_t *correct);

/**
 * Keep a whole data set on the device: n samples of x (n x dims[0] floats)
 * and labels (classification) or y (n x dims[L] floats), copied once, so
 * that gpu_model_forward_backward_idx() gathers batches on the GPU instead
 * of on the host.  Labels are checked here, once.  Replaces an earlier set:
 * after GPU_EINVAL the earlier set stays, after any other failure no set is
 * kept.  The set is refused (GPU_ENOMEM) when it would take more than half
 * of the device's free memory: the caller stages batches through the host
 * instead.
 * @return GPU_OK, GPU_EINVAL (sizes, NULL arrays, a label out of range),
 * GPU_ENOMEM or GPU_ECUDA.
 */
int gpu_model_set_data(gpu_model_t *gm, const float *x, const int32_t *labels,
                       const float *y, int64_t n);

/**
 * gpu_model_forward_backward() over the samples idx[0..n) of the set given
 * to gpu_model_set_data(): the same results, bit for bit, as staging those
 * samples from the host (the gather only copies).  idx is a host array;
 * every index must be in [0, set size).
 * @return as gpu_model_forward_backward(); GPU_EINVAL also when no set was
 * given or an index is out of range.
 */
int gpu_model_forward_backward_idx(gpu_model_t *gm, const int64_t *idx, int n,
                                   float *dgrad, double *loss_sum, int64_t *correct);

/**
 * Forward only over n >= 0 samples, in chunks of max_batch, as
 * model_evaluate().  Synchronizes the stream.
 * @return GPU_OK, GPU_EINVAL, GPU_ECUDA or GPU_ECUBLAS.
 */
int gpu_model_evaluate(gpu_model_t *gm, const float *x, const int32_t *labels,
                       const float *y, int n, double *loss_sum, int64_t *correct);

/* ---- the optimizer ---------------------------------------------------- */

/**
 * Device optimizer state for nparams parameters (cfg as optim_init; the
 * learning-rate schedule is optim_lr(cfg, step)).  State starts at zero.
 * @return GPU_OK, GPU_EINVAL (bad config or nparams), GPU_ENOMEM, GPU_ECUDA.
 */
int gpu_optim_create(gpu_optim_t **out, gpu_ctx_t *ctx, const optim_cfg_t *cfg,
                     size_t nparams);
/** Release; accepts NULL. */
void gpu_optim_free(gpu_optim_t *go);

/**
 * Apply update number `step` (0-based) to dparams with the averaged
 * gradient dgrad (both device, nparams floats), as optim_step().  Queued on
 * the stream; does not synchronize.
 * @return GPU_OK, GPU_EINVAL or GPU_ECUDA.
 */
int gpu_optim_step(gpu_optim_t *go, float *dparams, const float *dgrad,
                   int64_t step);
/**
 * As gpu_optim_step with the gradient read as dgrad[i] * gs (optim.c's
 * optim_step_consume: gs = 1 is exact) and, when clear, dgrad left all zeros
 * (each element cleared where the update read it, no pass of its own).
 * @return GPU_OK, GPU_EINVAL or GPU_ECUDA.
 */
int gpu_optim_step_consume(gpu_optim_t *go, float *dparams, float *dgrad, float gs,
                           int clear, int64_t step);
/**
 * The update of one rank's one micro-batch in deterministic mode, in one
 * pass: gpu_fixed_round(ctx, tmp, g, nparams, e, nstep) then
 * gpu_optim_step(go, dparams, tmp, step), bit for bit, without tmp (the
 * rounded gradient is made in registers where the update reads it).  g is
 * the device gradient sum (nparams floats) and is not changed.
 * @return GPU_OK, GPU_EINVAL (nstep < 1, NULL) or GPU_ECUDA.
 */
int gpu_optim_step_fixed(gpu_optim_t *go, float *dparams, const float *g, int e,
                         int64_t nstep, int64_t step);
/** @return the device momentum / first-moment buffer (nparams floats). */
float *gpu_optim_state_m(gpu_optim_t *go);
/** @return the device second-moment buffer, NULL for SGD. */
float *gpu_optim_state_v(gpu_optim_t *go);
/** @return the number of updates applied (0 for NULL). */
int64_t gpu_optim_updates(const gpu_optim_t *go);
/** Set the update count (after restoring the state from a checkpoint). */
void gpu_optim_set_updates(gpu_optim_t *go, int64_t n);

/* ---- reductions and the fixed-point gradient --------------------------- */

/**
 * *out = max |d[i]| over n device floats, exact; NaN when any element is
 * NaN (as train_step.c's loop); 0 for n = 0.  Synchronizes the stream.
 * @return GPU_OK, GPU_EINVAL or GPU_ECUDA.
 */
int gpu_maxabs(gpu_ctx_t *ctx, const float *d, size_t n, float *out);

/**
 * acc[i] += llrint((double)g[i] * 2^e) for n device elements (acc int64,
 * g float), bit-identical to the CPU formula.  Queued, no sync.
 * @return GPU_OK, GPU_EINVAL or GPU_ECUDA.
 */
int gpu_fixed_accumulate(gpu_ctx_t *ctx, int64_t *acc, const float *g,
                         size_t n, int e);

/**
 * acc[i] = llrint((double)g[i] * 2^e): gpu_fixed_accumulate into a cleared
 * acc, without the clearing.  Queued, no sync.
 * @return GPU_OK, GPU_EINVAL or GPU_ECUDA.
 */
int gpu_fixed_store(gpu_ctx_t *ctx, int64_t *acc, const float *g, size_t n, int e);

/**
 * out[i] = (float)((double)llrint((double)g[i] * 2^e) * (2^-e / nstep)):
 * gpu_fixed_store then gpu_fixed_to_float in one pass, bit for bit (the
 * sum of one rank's one micro-batch).  out may be g.  Queued, no sync.
 * @return GPU_OK, GPU_EINVAL (nstep < 1) or GPU_ECUDA.
 */
int gpu_fixed_round(gpu_ctx_t *ctx, float *out, const float *g, size_t n, int e,
                    int64_t nstep);

/**
 * g[i] = (float)((double)acc[i] * (2^-e / nstep)) for n device elements,
 * bit-identical to the CPU formula.  Queued, no sync.
 * @return GPU_OK, GPU_EINVAL (nstep < 1) or GPU_ECUDA.
 */
int gpu_fixed_to_float(gpu_ctx_t *ctx, float *g, const int64_t *acc, size_t n,
                       int e, int64_t nstep);

/**
 * g[i] *= s for n device floats (the fast mode's 1/nstep).  Queued.
 * @return GPU_OK, GPU_EINVAL or GPU_ECUDA.
 */
int gpu_scale(gpu_ctx_t *ctx, float *g, size_t n, float s);

/* ---- errors -------------------------------------------------------------- */

/** @return a static name for an error code. */
const char *gpu_strerror(int err);
/** @return this thread's message of the last failure ("" when none), e.g.
 *  "src/gpu/gpu_model.cu:212: cudaMalloc(...): out of memory". */
const char *gpu_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
