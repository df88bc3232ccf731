/*
 * train_gpu.c - the trainer's GPU mirror (train_gpu_internal.h): the device
 * model, optimizer and gradient buffers, the copies of the state between
 * device and host, and the gradient reductions of both modes on the device.
 */
#include "train/train_gpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/train.h"

/* Host arrays smaller than this are not page-locked: they gain nothing.
 * (The parameters and moments own whole pages, util_calloc_pages, so a
 * registration never meets a page registered already.) */
#define PIN_MIN_BYTES ((size_t)4 << 20)
/* Deterministic mode's micro-batch gradient slots start on this many floats
 * (256 bytes, as cudaMalloc's memory does). */
#define SLOT_ALIGN_FLOATS 64

struct gpu_mirror {
    gpu_ctx_t *ctx;
    model_t *host_model;
    optim_t *host_opt;
    size_t n_params;
    gpu_model_t *model;
    gpu_optim_t *opt;
    float *grad;                /* the step's gradient: n_params */
    float *micro_grads;         /* deterministic: slots of slot_floats */
    size_t slot_floats;         /* n_params rounded up to SLOT_ALIGN_FLOATS */
    int64_t *fixed_sum;         /* deterministic: n_params */
    float *batch_x, *batch_y;   /* pinned staging buffers of the device model */
    int32_t *batch_labels;
    void *pinned[STATE_ARRAYS]; /* host arrays page-locked for the state copy */
    float *snapshot;            /* page-locked buffer of --ckpt-async, or NULL */
    int data_on_device;
    double copy_seconds;        /* of the last download */
    /* The next update reads grad * grad_scale (fast mode: 1/n, the mean).
     * The model stores each gradient (gpu_model_store_gradient), so no
     * buffer is ever cleared before a step or by the update. */
    float grad_scale;
    /* Deterministic mode, one rank, one micro-batch: the update rounds the
     * stored gradient itself (gpu_optim_step_fixed) with this scale. */
    int fused_pending;
    int fused_exp;
    int64_t fused_nstep;
};

/* The host parameters and moments receive the device state at every save
 * (the training stall): page-locked, that copy runs at the pinned rate, not
 * the slower pageable one.  A failure only makes the copy slower. */
static void pin_host_state(gpu_mirror_t *mirror, int rank)
{
    float *host[STATE_ARRAYS];
    state_host_arrays(mirror->host_model, mirror->host_opt, host);
    size_t bytes = mirror->n_params * sizeof(float);
    for (int i = 0; i < STATE_ARRAYS && bytes >= PIN_MIN_BYTES; i++) {
        if (!host[i])
            continue;
        if (gpu_host_register(mirror->ctx, host[i], bytes) != GPU_OK) {
            fprintf(stderr, "ftrain: rank %d: warning: cannot page-lock the host copy of the "
                    "state (%s); checkpoint copies from the GPU run slower\n", rank,
                    gpu_last_error());
            break;
        }
        mirror->pinned[i] = host[i];
    }
}

/* The training set on the device when it fits: a step then sends only its
 * sample indices, not the samples (the host gather and copy of a large
 * batch can cost more than its forward pass).  Otherwise batches go through
 * the pinned staging buffers. */
static void copy_data_to_device(gpu_mirror_t *mirror, const dataset_t *set, int report)
{
    const int32_t *labels = set->classification ? set->labels : NULL;
    const float *targets = set->classification ? NULL : set->targets;
    if (set->samples > 0 &&
        gpu_model_set_data(mirror->model, set->features, labels, targets, set->samples) == GPU_OK)
        mirror->data_on_device = 1;
    else if (report)
        printf("gpu: the training set stays on the host (%s); batches are copied each step\n",
               gpu_last_error());
}

/* The device model starts from the host model's initial parameters. */
static int create_device_buffers(gpu_mirror_t *mirror, const gpu_mirror_spec_t *spec)
{
    int rc = gpu_model_create(&mirror->model, mirror->ctx, model_arch(mirror->host_model),
                              spec->max_batch, model_params(mirror->host_model));
    if (rc == GPU_OK)
        rc = gpu_model_store_gradient(mirror->model, 1);
    /* One rank votes on a step's losses while its backward runs, and queues
     * the update behind it: the GPU does not idle while the host votes.
     * With several ranks each call still returns after its backward: the
     * gradient reduction that follows would otherwise already be queued
     * when a rank's device failure is voted, and the others would wait for
     * it in NCCL instead of stopping at the vote. */
    if (rc == GPU_OK && spec->alone)
        rc = gpu_model_early_return(mirror->model, 1);
    if (rc == GPU_OK)
        rc = gpu_optim_create(&mirror->opt, mirror->ctx, spec->opt_cfg, mirror->n_params);
    if (rc == GPU_OK)
        rc = gpu_model_batch_buffers(mirror->model, &mirror->batch_x, &mirror->batch_labels,
                                     &mirror->batch_y);
    if (rc == GPU_OK)
        rc = gpu_alloc(mirror->ctx, mirror->n_params * sizeof(float), (void **)&mirror->grad);
    if (rc == GPU_OK && spec->micro_slots > 0) {
        /* Which slot a micro-batch lands in depends on the world size, and
         * cuBLAS may pick another kernel (another summation order) for
         * another alignment of its output: every slot is aligned alike. */
        mirror->slot_floats = (mirror->n_params + SLOT_ALIGN_FLOATS - 1) / SLOT_ALIGN_FLOATS *
                         SLOT_ALIGN_FLOATS;
        rc = gpu_alloc(mirror->ctx, (size_t)spec->micro_slots * mirror->slot_floats * sizeof(float),
                       (void **)&mirror->micro_grads);
        if (rc == GPU_OK)
            rc = gpu_alloc(mirror->ctx, mirror->n_params * sizeof(int64_t),
                           (void **)&mirror->fixed_sum);
    }
    return rc;
}

int gpu_mirror_open(gpu_mirror_t **out, const gpu_mirror_spec_t *spec, float **batch_x,
                    int32_t **batch_labels, float **batch_y, char *err, size_t cap)
{
    *out = NULL;
    gpu_mirror_t *mirror = calloc(1, sizeof *mirror);
    if (!mirror) {
        snprintf(err, cap, "gpu: %s: out of host memory", gpu_strerror(GPU_ENOMEM));
        return TRAIN_EFAIL;
    }
    mirror->ctx = spec->ctx;
    mirror->grad_scale = 1.0f;
    mirror->host_model = spec->model;
    mirror->host_opt = spec->opt;
    mirror->n_params = model_num_params(spec->model);
    *out = mirror;
    int rc = create_device_buffers(mirror, spec);
    if (rc != GPU_OK) {
        snprintf(err, cap, "gpu: %s: %s", gpu_strerror(rc), gpu_last_error());
        return TRAIN_EFAIL;
    }
    *batch_x = mirror->batch_x;
    *batch_labels = mirror->batch_labels;
    *batch_y = mirror->batch_y;
    copy_data_to_device(mirror, spec->train, spec->report);
    pin_host_state(mirror, spec->rank);
    return TRAIN_OK;
}

void gpu_mirror_close(gpu_mirror_t *mirror)
{
    if (!mirror)
        return;
    for (int i = 0; i < STATE_ARRAYS; i++)
        gpu_host_unregister(mirror->ctx, mirror->pinned[i]);
    gpu_host_free(mirror->ctx, mirror->snapshot);
    gpu_dfree(mirror->ctx, mirror->grad);
    gpu_dfree(mirror->ctx, mirror->micro_grads);
    gpu_dfree(mirror->ctx, mirror->fixed_sum);
    gpu_optim_free(mirror->opt);
    gpu_model_free(mirror->model);
    free(mirror);
}

int gpu_mirror_has_data(const gpu_mirror_t *mirror)
{
    return mirror->data_on_device;
}

/* The device array that mirrors host array `which` (state_host_arrays). */
static float *device_array(const gpu_mirror_t *mirror, int which)
{
    switch (which) {
    case STATE_PARAMS:
        return gpu_model_params(mirror->model);
    case STATE_MOMENT1:
        return gpu_optim_state_m(mirror->opt);
    default:
        return gpu_optim_state_v(mirror->opt);
    }
}

/* This copy is the training stall of a GPU checkpoint. */
int gpu_mirror_download(gpu_mirror_t *mirror, char *err, size_t cap)
{
    float *host[STATE_ARRAYS];
    state_host_arrays(mirror->host_model, mirror->host_opt, host);
    return gpu_mirror_download_to(mirror, host, err, cap);
}

int gpu_mirror_download_to(gpu_mirror_t *mirror, float *const dst[STATE_ARRAYS], char *err,
                           size_t cap)
{
    size_t bytes = mirror->n_params * sizeof(float);
    double seconds[STATE_ARRAYS] = {0};
    int rc = GPU_OK;
    /* The parameters always; a moment where the caller gives it room. */
    for (int i = 0; i < STATE_ARRAYS && rc == GPU_OK; i++)
        if (i == STATE_PARAMS || dst[i])
            rc = gpu_download(mirror->ctx, dst[i], device_array(mirror, i), bytes, &seconds[i]);
    optim_set_updates(mirror->host_opt, gpu_optim_updates(mirror->opt));
    mirror->copy_seconds = 0;
    for (int i = 0; i < STATE_ARRAYS; i++)
        mirror->copy_seconds += seconds[i];
    if (rc != GPU_OK) {
        snprintf(err, cap, "gpu: copying the state to the host: %s", gpu_last_error());
        return TRAIN_EFAIL;
    }
    return TRAIN_OK;
}

float *gpu_mirror_snapshot_buffer(gpu_mirror_t *mirror, size_t floats)
{
    if (!mirror->snapshot &&
        gpu_host_alloc(mirror->ctx, floats * sizeof(float) + 1, (void **)&mirror->snapshot) !=
            GPU_OK)
        mirror->snapshot = NULL;
    return mirror->snapshot;
}

double gpu_mirror_copy_seconds(const gpu_mirror_t *mirror)
{
    return mirror->copy_seconds;
}

int gpu_mirror_upload(gpu_mirror_t *mirror, char *err, size_t cap)
{
    optim_t *opt = mirror->host_opt;
    size_t bytes = mirror->n_params * sizeof(float);
    float *host[STATE_ARRAYS];
    state_host_arrays(mirror->host_model, opt, host);
    int rc = GPU_OK;
    /* The parameters and the first moment always (every optimizer keeps
     * one); the second where the optimizer has it. */
    for (int i = 0; i < STATE_ARRAYS && rc == GPU_OK; i++)
        if (i != STATE_MOMENT2 || host[i])
            rc = gpu_upload(mirror->ctx, device_array(mirror, i), host[i], bytes);
    gpu_optim_set_updates(mirror->opt, optim_updates(opt));
    if (rc != GPU_OK) {
        snprintf(err, cap, "gpu: copying the restored state to the device: %s", gpu_last_error());
        return TRAIN_EFAIL;
    }
    return TRAIN_OK;
}

/* Forward/backward of n samples, storing their gradient in grad. */
static int forward_backward(gpu_mirror_t *mirror, const int64_t *idx, int n, float *grad,
                            double *loss, int64_t *hits)
{
    if (mirror->data_on_device)
        return gpu_model_forward_backward_idx(mirror->model, idx, n, grad, loss, hits);
    return gpu_model_forward_backward(mirror->model, mirror->batch_x, mirror->batch_labels,
                                      mirror->batch_y, n, grad, loss, hits);
}

int gpu_mirror_micro_gradient(gpu_mirror_t *mirror, int64_t slot, const int64_t *idx, int n,
                              double *loss, int64_t *hits, float *max_abs)
{
    float *grad = mirror->micro_grads + (size_t)slot * mirror->slot_floats;
    int rc = forward_backward(mirror, idx, n, grad, loss, hits); /* stored */
    if (rc == GPU_OK)
        rc = gpu_maxabs(mirror->ctx, grad, mirror->n_params, max_abs);
    return rc;
}

int gpu_mirror_batch_gradient(gpu_mirror_t *mirror, const int64_t *idx, int n, double *loss,
                              int64_t *hits)
{
    return forward_backward(mirror, idx, n, mirror->grad, loss, hits); /* stored */
}

/* This rank's micro-batch gradients in fixed point: a store of the first
 * (no clearing pass), then adds. */
static int fixed_sum_local(gpu_mirror_t *mirror, int64_t nmicro, int scale_exp)
{
    int rc = nmicro == 0 ? gpu_memset0(mirror->ctx, mirror->fixed_sum,
                                       mirror->n_params * sizeof(int64_t))
                         : GPU_OK;
    for (int64_t i = 0; i < nmicro && rc == GPU_OK; i++) {
        const float *slot = mirror->micro_grads + (size_t)i * mirror->slot_floats;
        rc = i == 0 ? gpu_fixed_store(mirror->ctx, mirror->fixed_sum, slot, mirror->n_params,
                                      scale_exp)
                    : gpu_fixed_accumulate(mirror->ctx, mirror->fixed_sum, slot,
                                           mirror->n_params, scale_exp);
    }
    return rc;
}

/* Fixed point on the device, the int64 sum through the device communicator
 * (NCCL), loss and hits on the host (MPI).  One rank with one micro-batch
 * has no sum to make: the update rounds the gradient as it reads it
 * (gpu_optim_step_fixed), with the operations of the store, the identity
 * sum and the conversion, so the same bits, and no pass of its own. */
int gpu_mirror_reduce_fixed(gpu_mirror_t *mirror, comm_t *comm, int64_t nmicro,
                            const double *micro_loss, int scale_exp, int64_t step_samples,
                            double *loss, int64_t *hits, int *device_failed, char *err,
                            size_t cap)
{
    const int alone = comm_size(comm) == 1;
    const int fused = alone && nmicro == 1;
    int rc = fused ? GPU_OK : fixed_sum_local(mirror, nmicro, scale_exp);
    mirror->fused_pending = fused;
    mirror->fused_exp = scale_exp;
    mirror->fused_nstep = step_samples;
    int64_t loss_hits[2] = {0, *hits};
    for (int64_t i = 0; i < nmicro; i++)
        loss_hits[0] += llrint(ldexp(micro_loss[i], LOSS_FIXED_BITS));
    mirror->grad_scale = 1.0f; /* already the mean: times 1 is exact */
    /* A device failure here is this rank's alone: it still takes part in
     * both reductions (the others are in them), and the failure is voted
     * at the next control reduction, where every rank stops together. */
    if (rc != GPU_OK)
        *device_failed = 1;
    if ((!alone && comm_allreduce(comm, mirror->fixed_sum, mirror->n_params, COMM_I64,
                                  COMM_SUM) != COMM_OK) ||
        comm_allreduce(comm, loss_hits, 2, COMM_I64, COMM_SUM) != COMM_OK) {
        snprintf(err, cap, "gradient reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    if (!*device_failed && !fused &&
        gpu_fixed_to_float(mirror->ctx, mirror->grad, mirror->fixed_sum, mirror->n_params,
                           scale_exp, step_samples) != GPU_OK)
        *device_failed = 1;
    *loss = ldexp((double)loss_hits[0], -LOSS_FIXED_BITS);
    *hits = loss_hits[1];
    return TRAIN_OK;
}

int gpu_mirror_reduce_float(gpu_mirror_t *mirror, comm_t *comm, int64_t step_samples, double *loss,
                            int64_t *hits, int *device_failed, char *err, size_t cap)
{
    double loss_hits[2] = {*loss, (double)*hits};
    mirror->fused_pending = 0; /* the update reads grad */
    if (comm_allreduce(comm, mirror->grad, mirror->n_params, COMM_F32, COMM_SUM) != COMM_OK ||
        comm_allreduce(comm, loss_hits, 2, COMM_F64, COMM_SUM) != COMM_OK) {
        snprintf(err, cap, "gradient reduction failed: %s", comm_last_error());
        return TRAIN_EFAIL;
    }
    *loss = loss_hits[0];
    *hits = (int64_t)llrint(loss_hits[1]);
    (void)device_failed; /* nothing on the device here: the mean is the update's */
    /* The update turns the sum into the mean as it reads it: a pass of its
     * own would cost as much as the update's reading (optim_step_consume on
     * the CPU). */
    mirror->grad_scale = 1.0f / (float)step_samples;
    return TRAIN_OK;
}

int gpu_mirror_update(gpu_mirror_t *mirror, int64_t step)
{
    if (mirror->fused_pending) {
        mirror->fused_pending = 0;
        return gpu_optim_step_fixed(mirror->opt, gpu_model_params(mirror->model),
                                    mirror->micro_grads, mirror->fused_exp,
                                    mirror->fused_nstep, step);
    }
    return gpu_optim_step_consume(mirror->opt, gpu_model_params(mirror->model), mirror->grad,
                                  mirror->grad_scale, 0, step);
}

int gpu_mirror_evaluate(gpu_mirror_t *mirror, const float *x, const int32_t *labels,
                        const float *y, int n, double *loss, int64_t *hits)
{
    return gpu_model_evaluate(mirror->model, x, labels, y, n, loss, hits);
}
