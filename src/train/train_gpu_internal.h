/*
 * train_gpu_internal.h - the trainer's GPU mirror: the device copy of the
 * model and optimizer, the device gradient buffers and the reductions on
 * them.  The host model and optimizer keep the initial values and receive
 * the device state before every checkpoint (gpu_mirror_download); after a
 * resume the restored host state goes back (gpu_mirror_upload).
 *
 * Used by the training loop only.  Device calls return GPU_OK or a gpu_err_t:
 * a failure there is this rank's alone, and the loop votes it at the next
 * control reduction so that every rank stops together.  Calls that make a
 * collective or copy the state return TRAIN_OK or TRAIN_EFAIL with the
 * message in (err, cap).
 */
#ifndef FTRAIN_TRAIN_GPU_INTERNAL_H
#define FTRAIN_TRAIN_GPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"
#include "nn/data.h"
#include "gpu/gpu.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "state/state.h"

/* Deterministic mode sums the loss in 2^LOSS_FIXED_BITS fixed point, on
 * the CPU path and on this one alike. */
#define LOSS_FIXED_BITS 24

typedef struct gpu_mirror gpu_mirror_t;

/* What the mirror is made from. */
typedef struct {
    gpu_ctx_t *ctx;
    model_t *model;              /* host model: architecture, initial parameters */
    optim_t *opt;                /* host optimizer: receives the device moments */
    const optim_cfg_t *opt_cfg;  /* with the run's total steps */
    const dataset_t *train;      /* copied to the device when it fits */
    int max_batch;               /* samples of one forward pass */
    int64_t micro_slots;         /* deterministic: gradient slots (micro-batches
                                    of one step on this rank), else 0 */
    int rank;
    int alone;                   /* 1 when the world is this one rank */
    int report;                  /* print where the training set stays */
} gpu_mirror_spec_t;

/** Create the mirror; batch_x, batch_labels and batch_y get the device
 *  model's pinned staging buffers.  @return TRAIN_OK or TRAIN_EFAIL. */
int gpu_mirror_open(gpu_mirror_t **out, const gpu_mirror_spec_t *spec, float **batch_x,
                    int32_t **batch_labels, float **batch_y, char *err, size_t cap);
/** Release; accepts NULL.  Call before freeing the host model and optimizer. */
void gpu_mirror_close(gpu_mirror_t *mirror);

/** @return 1 when the training set is on the device (a step then sends only
 *  its sample indices), 0 when batches go through the staging buffers. */
int gpu_mirror_has_data(const gpu_mirror_t *mirror);

/** Device state -> host model and optimizer.  @return TRAIN_OK or TRAIN_EFAIL. */
int gpu_mirror_download(gpu_mirror_t *mirror, char *err, size_t cap);
/** The same state into any host arrays, dst[STATE_ARRAYS] in the order
 *  of state_host_arrays (the parameters, then the optimizer's moments
 *  where it has them: NULL skips one): an asynchronous save downloads
 *  straight into its snapshot, with no second host copy. */
int gpu_mirror_download_to(gpu_mirror_t *mirror, float *const dst[STATE_ARRAYS], char *err,
                           size_t cap);
/** A page-locked buffer of floats for the asynchronous save's snapshot,
 *  made at the first call and freed by gpu_mirror_close; NULL when it
 *  cannot be had (the caller then uses pageable memory). */
float *gpu_mirror_snapshot_buffer(gpu_mirror_t *mirror, size_t floats);
/** @return the seconds the last gpu_mirror_download took. */
double gpu_mirror_copy_seconds(const gpu_mirror_t *mirror);
/** Host model and optimizer -> device (after a resume).
 *  @return TRAIN_OK or TRAIN_EFAIL. */
int gpu_mirror_upload(gpu_mirror_t *mirror, char *err, size_t cap);

/** Deterministic mode: the gradient of one micro-batch (n samples: idx when
 *  the data is on the device, else the staging buffers) into its own slot,
 *  with its loss sum, hits and max |g| (NaN propagates).  @return a gpu_err_t. */
int gpu_mirror_micro_gradient(gpu_mirror_t *mirror, int64_t slot, const int64_t *idx, int n,
                              double *loss, int64_t *hits, float *max_abs);
/** Fast mode: the gradient of this rank's n >= 0 samples (as above) stored
 *  as the step's gradient (zeros for none).  @return a gpu_err_t. */
int gpu_mirror_batch_gradient(gpu_mirror_t *mirror, const int64_t *idx, int n, double *loss,
                              int64_t *hits);

/** Collective, deterministic mode: the micro-batch slots in fixed point at
 *  scale 2^scale_exp, summed over the ranks (device communicator) with the
 *  loss (2^24 fixed point of micro_loss) and hits (host), then averaged over
 *  the step's step_samples into the step's gradient.  A device failure sets
 *  *device_failed and still takes part in every collective.
 *  @return TRAIN_OK, or TRAIN_EFAIL when a collective failed. */
int gpu_mirror_reduce_fixed(gpu_mirror_t *mirror, comm_t *comm, int64_t nmicro,
                            const double *micro_loss, int scale_exp, int64_t step_samples,
                            double *loss, int64_t *hits, int *device_failed, char *err,
                            size_t cap);
/** Collective, fast mode: the float sum of the step's gradient, loss and
 *  hits over the ranks, averaged over step_samples.
 *  @return TRAIN_OK, or TRAIN_EFAIL when a collective failed. */
int gpu_mirror_reduce_float(gpu_mirror_t *mirror, comm_t *comm, int64_t step_samples, double *loss,
                            int64_t *hits, int *device_failed, char *err, size_t cap);
/** The optimizer update with the reduced gradient.  @return a gpu_err_t
 *  (queued: a failure may only show at the next synchronizing call). */
int gpu_mirror_update(gpu_mirror_t *mirror, int64_t step);

/** Loss sum and hits of n host samples.  @return a gpu_err_t. */
int gpu_mirror_evaluate(gpu_mirror_t *mirror, const float *x, const int32_t *labels,
                        const float *y, int n, double *loss, int64_t *hits);

#endif
