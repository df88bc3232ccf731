/*
 * train_internal.h - the trainer's state, shared by the training loop
 * (train.c), its start and end (train_setup.c) and the computation of one
 * step and of the evaluation (train_step.c).  Nothing else includes it.
 */
#ifndef FTRAIN_TRAIN_INTERNAL_H
#define FTRAIN_TRAIN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "parallel/comm.h"
#include "config/config.h"
#include "nn/data.h"
#include "tier/local_tier.h"
#include "train/metrics.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/sampler.h"
#include "state/state.h"
#include "train/train.h"
#include "parallel/world.h"
#include "train/save_async_internal.h"
#include "train/train_gpu_internal.h"

/* One formatted report: a line's tail of numbers or a metrics event's members. */
#define REPORT_MAX 256

/* Progress since the last progress line. */
typedef struct {
    double loss;               /* loss sum */
    int64_t hits, samples;
    double since;              /* when the window began */
} log_window_t;

typedef struct {
    const config_t *cfg;
    const world_t *world;
    comm_t *comm;
    int rank, size;
    int blas_threads;
    dataset_t train, test;
    double test_sst;           /* regression: the test targets' sum of squared
                                  deviations from their means, R^2's divisor */
    sampler_t sampler;
    model_t *model;
    optim_t *opt;
    size_t n_params;
    int64_t steps_per_epoch, total_steps;
    int64_t max_rank_micros;   /* micro-batches of one step on one rank, at most */
    float *grad;               /* n_params + 2 floats: gradient, loss sum, correct */
    float grad_scale;          /* the update's factor on grad: 1 / samples after a
                                  float reduction (the sum), 1 after a fixed-point
                                  one (already the mean) */
    int grad_zeroed;           /* grad[0..n_params) is all zeros: the last update
                                  consumed it (optim_step_consume) */
    float *micro_grads;        /* deterministic: max_rank_micros * n_params */
    double *micro_loss;        /* deterministic: per micro-batch loss sums */
    int64_t *fixed_sum;        /* deterministic: n_params + 2 */
    float *batch_x, *batch_y;  /* batch staging (the GPU mirror's pinned buffers) */
    int32_t *batch_labels;
    /* The GPU path (both NULL on the CPU): the device copy of the model and
     * optimizer; the host ones above hold the initial values and the
     * checkpoint snapshots. */
    gpu_ctx_t *gpu_ctx;
    gpu_mirror_t *gpu;
    int device_failed;         /* a device call failed on this rank: voted at the
                                  next control reduction, never acted on alone */
    metrics_t metrics;
    int trace_fd;              /* --trace-samples, -1 when off */
    state_t state;
    char ckpt_root[TRAIN_CKPT_ROOT_MAX]; /* "" without a run directory */
    /* Position and progress. */
    int64_t step;              /* updates done */
    int64_t last_saved;        /* step of the newest checkpoint of ours, -1 */
    int64_t evaluated_step;    /* the last epoch end whose evaluation ran, -1 */
    int evaluated_at_end;      /* the last step's evaluation ran */
    double last_loss;          /* mean loss of the last step, NaN before */
    double started;            /* when train_run began */
    double run_base;           /* training seconds of earlier processes (the record's) */
    double run_start;          /* when this process's training loop began; 0 before */
    double loop_end;           /* when it ended; 0 before */
    double eval_seconds;       /* spent in the loop's epoch evaluations */
    double final_eval_seconds; /* the run's last evaluation, after the loop */
    int other_signals_seen;    /* stop_other_signals() already warned of */
    int64_t run_samples;       /* samples trained by this process */
    /* This process's first step (its one-time start-up: the GPU libraries
     * load their kernels on first use, memory is first touched), kept out
     * of samples/s as the peer's warm-up steps are: 0 before it ended. */
    double first_step_seconds;
    int64_t first_step_samples;
    int64_t log_every;         /* steps between progress lines */
    log_window_t window;
    double control_last;       /* when the last control reduction (stop check) ended */
    double longest_gap;        /* the longest time between two stop checks: a step,
                                  with any evaluation or save in between */
    double reduce_seconds;     /* in the gradient reductions (reduced_steps of them) */
    double control_seconds;    /* in the control reductions */
    int64_t reduced_steps;
    /* An unplanned end of the launch before (rank 0): reported once this
     * launch has trained its first step. */
    const watchdog_leftover_t *before;
    int64_t resumed_step;      /* the step training began at, 0 for a fresh run */
    double load_seconds;       /* the resume's load, 0 for a fresh run */
    /* The node-local tier (--ckpt-local). */
    int tier_on;
    tier_t tier;
    int64_t local_saves;       /* local checkpoints of this process */
    int local_sealed, local_failed, local_skipped; /* for the summary line */
    double local_stall_seconds, local_cpu_seconds; /* of the sealed ones */
    double last_local_time;    /* when the last one ended */
    /* Checkpoints. */
    int young_daly_told;       /* the interval line was printed */
    double last_save_time;
    async_save_t async;
    int async_saves, async_failures, async_skipped;
    double async_stall_seconds;
} trainer_t;

/* Which micro-batches of a step this rank computes. */
typedef struct {
    int64_t epoch, index;      /* the step's epoch and its index in it */
    int64_t first_micro, nmicro;
    int64_t samples;           /* of the whole step, all ranks */
} step_plan_t;

/* One step's local results, then (after step_reduce) the global ones. */
typedef struct {
    double max_abs_grad;       /* local max |g|, NaN as INFINITY */
    double loss;               /* loss sum */
    int64_t hits;
    int loss_bad;              /* this rank's loss cannot be reduced */
} step_sums_t;

/* A test-set evaluation: the mean loss, and the accuracy (classification)
 * or R^2 (regression). */
typedef struct {
    double loss, acc, r2;
    int cut_short;             /* a stop signal cut it short (on every rank) */
} eval_result_t;

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* train_recovery.c */

/** Rank 0, once: the Young/Daly interval for a save that cost cost_s. */
void train_tell_young_daly(trainer_t *t, int64_t step, double cost_s);
/** Rank 0, after a launch's first step: the recovery line, when the launch
 *  before ended unplanned (t->before). */
void train_report_recovery(trainer_t *t);
/** --fault: raise the fault when this rank has done its step. */
void train_inject_fault(const trainer_t *t);

/* train_setup.c */

/** Collective: the run directory, the data, model, optimizer and buffers
 *  (and the GPU mirror when gpu is not NULL), on every rank or on none.
 *  t is ready for trainer_close() whatever the result.
 *  @return TRAIN_OK or TRAIN_EFAIL. */
int trainer_open(trainer_t *t, const config_t *cfg, const world_t *world, comm_t *comm,
                 gpu_ctx_t *gpu, char *err, size_t cap);
/** Collective: resume from the checkpoint --resume picks, when there is
 *  one.  @return TRAIN_OK, TRAIN_EMISMATCH or TRAIN_EFAIL. */
int trainer_resume(trainer_t *t, char *err, size_t cap);
/** Release everything; a save in flight is abandoned, never committed. */
void trainer_close(trainer_t *t);

/* train_step.c */

/** Forward/backward of this rank's share of the step; a device failure
 *  sets t->device_failed. */
void step_compute(trainer_t *t, const step_plan_t *plan, step_sums_t *sums);
/** Collective: sum the gradient over all ranks and average it over the
 *  step's samples (grad_max: the global max |g| of the control reduction);
 *  sums get the global loss sum and hits.  @return TRAIN_OK or TRAIN_EFAIL. */
int step_reduce(trainer_t *t, const step_plan_t *plan, double grad_max, step_sums_t *sums,
                char *err, size_t cap);
/** The optimizer update with the reduced gradient. */
void step_update(trainer_t *t);
/** Wait until the device work of the steps so far is done (on one rank a
 * step's call returns with its backward and update still running on the
 * GPU): before the clock is read for a step's end, or for the start of an
 * evaluation or a save. */
void step_settle(trainer_t *t);
/** Collective: evaluate on the test set, chunks dealt to ranks; a stop
 *  signal cuts it short on every rank.  @return TRAIN_OK or TRAIN_EFAIL. */
int evaluate_test_set(trainer_t *t, eval_result_t *out, char *err, size_t cap);

#endif
