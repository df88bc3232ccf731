/*
 * train_internal.h - the trainer's state, shared by the training loop
 * (train.c) and its chapters: the start and end (train_setup.c), the
 * computation of one step and of the evaluation (train_step.c), the save
 * paths (train_save.c), the stop (train_stop.c), the progress and
 * evaluation reports (train_report.c) and the recovery line, the
 * checkpoint interval advice and --fault (train_recovery.c).  Nothing else
 * includes it.  Every function here that can fail returns TRAIN_OK or a
 * negative train_rc_t, with the message in (err, cap).
 */
#ifndef FTRAIN_TRAIN_INTERNAL_H
#define FTRAIN_TRAIN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

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

/* The data sets and the order they are read in. */
typedef struct {
    dataset_t train, test;
    double test_sst;           /* regression: the test targets' sum of squared
                                  deviations from their means, R^2's divisor */
    sampler_t sampler;
} trainer_data_t;

/* The run's length and where training stands in it. */
typedef struct {
    int64_t steps_per_epoch, total_steps;
    int64_t max_rank_micros;   /* micro-batches of one step on one rank, at most */
    int64_t step;              /* updates done */
    int64_t resumed_step;      /* the step training began at, 0 for a fresh run */
    int64_t evaluated_step;    /* the last epoch end whose evaluation ran, -1 */
    int evaluated_at_end;      /* the last step's evaluation ran */
    double last_loss;          /* mean loss of the last step, NaN before */
} trainer_run_t;

/* The host model and optimizer: the training state on the CPU; on a GPU
 * the initial values and the checkpoint snapshots. */
typedef struct {
    model_t *model;
    optim_t *opt;
    size_t n_params;
} trainer_nn_t;

/* The buffers one step works in. */
typedef struct {
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
} trainer_buffers_t;

/* The GPU path: the device copy of the model and optimizer (both NULL on
 * the CPU). */
typedef struct {
    gpu_ctx_t *ctx;
    gpu_mirror_t *mirror;
    int failed;                /* a device call failed on this rank: voted at the
                                  next control reduction, never acted on alone */
} trainer_device_t;

/* The clocks (util_mono_s) the run's timing is measured from. */
typedef struct {
    double started;            /* when train_run began */
    double run_base;           /* training seconds of earlier processes (the record's) */
    double run_start;          /* when this process's training loop began; 0 before */
    double loop_end;           /* when it ended; 0 before */
    double control_last;       /* when the last control reduction (stop check) ended */
} trainer_clock_t;

/* What this process measured and counted, for the timing line, the
 * result and the recovery line. */
typedef struct {
    int64_t run_samples;       /* samples trained by this process */
    /* This process's first step (its one-time start-up: the GPU libraries
     * load their kernels on first use, memory is first touched), kept out
     * of samples/s as the peer's warm-up steps are: 0 before it ended. */
    double first_step_seconds;
    int64_t first_step_samples;
    double eval_seconds;       /* spent in the loop's epoch evaluations */
    double final_eval_seconds; /* the run's last evaluation, after the loop */
    double longest_gap;        /* the longest time between two stop checks: a step,
                                  with any evaluation or save in between */
    double reduce_seconds;     /* in the gradient reductions (reduced_steps of them) */
    double control_seconds;    /* in the control reductions */
    int64_t reduced_steps;
    double load_seconds;       /* the resume's load, 0 for a fresh run */
} trainer_stats_t;

/* What rank 0 prints as training goes, and what it has told already. */
typedef struct {
    int64_t every;             /* steps between progress lines; 0: by time */
    log_window_t window;       /* loss and accuracy since the last line */
    /* The rate's window: at least REPORT_RATE_WINDOW_S long, so that a
     * line every step does not print the noise of one step's clock. */
    struct {
        double since;          /* when this window began */
        int64_t samples;       /* samples since then */
        double last;           /* samples/s of the last full window, 0 none */
    } rate;
    int other_signals_seen;    /* stop_other_signals() already warned of */
    /* An unplanned end of the launch before (rank 0): reported once this
     * launch has trained its first step. */
    const watchdog_leftover_t *before;
} trainer_log_t;

/* The shared tier's checkpoints: where, and when the last was saved. */
typedef struct {
    char root[TRAIN_CKPT_ROOT_MAX]; /* "" without a run directory */
    int64_t last_saved;        /* step of the newest checkpoint of ours, -1 */
    double last_time;          /* when the last save ended (the interval's start) */
    int young_daly_told;       /* the interval line was printed */
} trainer_ckpt_t;

/* The asynchronous save (--ckpt-async) and its counts for the summary. */
typedef struct {
    async_save_t save;
    int saves, failures, skipped;
    double stall_seconds;
} trainer_async_t;

/* The node-local tier (--ckpt-local) and its counts for the summary. */
typedef struct {
    int on;
    tier_t tier;
    int64_t saves;             /* local checkpoints of this process */
    int sealed, failed, skipped;
    double stall_seconds, cpu_seconds; /* of the sealed ones */
    double last_time;          /* when the last one ended */
} trainer_local_t;

/* The trainer: who runs, then one named part per concern. */
typedef struct {
    const config_t *cfg;       /* &cfg_own */
    config_t cfg_own;          /* the run's options, --global-batch resolved */
    const world_t *world;
    comm_t *comm;
    int rank, size;
    int blas_threads;
    trainer_data_t data;
    trainer_run_t run;
    trainer_nn_t nn;
    trainer_buffers_t buf;
    trainer_device_t dev;
    state_t state;             /* what a checkpoint records */
    metrics_t metrics;
    int trace_fd;              /* --trace-samples, -1 when off */
    trainer_clock_t clock;
    trainer_stats_t stats;
    trainer_log_t log;
    trainer_ckpt_t ckpt;
    trainer_async_t async;
    trainer_local_t local;
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

/* The bits of the control reduction's save vote (rank 0's alone). */
enum { SAVE_VOTE_SHARED = 1, SAVE_VOTE_LOCAL = 2 };

/* "No signal" in a MAX reduction of negated signal times. */
#define NO_SIGNAL_TIME (-1e300)

/* An agreed stop: which signal, first seen by which rank, and when. */
typedef struct {
    int signo, first_rank;
    double signalled, agreed;  /* wall-clock: the first signal, the agreement */
} stop_info_t;

/* train_report.c */

/** Rank 0: the line describing the run (and a note when a resume left
 *  nothing to train), and the start event. */
void report_start(trainer_t *t);
/** The epochs `steps` steps make, as a person reads them: "12" when whole,
 *  else with tenths rounded down ("12.5", "0.6"). */
void report_epochs(int64_t steps, int64_t steps_per_epoch, char *buf, size_t cap);
/** Count the step just done (plan, sums: its samples and reduced sums);
 *  rank 0 prints progress every --log-every steps and at the last. */
void report_progress(trainer_t *t, const step_plan_t *plan, const step_sums_t *sums);
/** Rank 0 prints the evaluation ev of the current step ("eval: WHAT ...")
 *  and logs its eval event (with "final":true for the one at the end of a
 *  run that did not end on an epoch); every rank keeps it in res. */
void report_eval(trainer_t *t, train_result_t *res, const eval_result_t *ev, const char *what,
                 int final);

/* train_save.c: every function is collective. */

/** Save `step` to the shared tier now and wait for the commit.
 *  @return TRAIN_OK or TRAIN_EFAIL. */
int save_checkpoint(trainer_t *t, int64_t step, train_result_t *res, char *err, size_t cap);
/** With an asynchronous save in flight: wait for the writers and commit.
 *  A failure is reported and counted, and training goes on.
 *  after_training: at a stop or the run's end, where the wait for the
 *  writers is reported apart from the training stall. */
void save_commit_async(trainer_t *t, train_result_t *res, int after_training);
/** Move the node-local save in flight on; with when set ("the stop", "the
 *  end"), wait for it and seal it.  Reported once sealed or failed. */
void save_progress_local(trainer_t *t, const char *when);
/** After a step: the saves that are due (--ckpt-every, --ckpt-local-every,
 *  votes: the control reduction's SAVE_VOTE_* bits), never at the last
 *  step (the end saves it).  @return TRAIN_OK, or TRAIN_EFAIL when a
 *  shared save failed. */
int save_if_due(trainer_t *t, int votes, train_result_t *res, char *err, size_t cap);

/* train_stop.c */

/** Rank-local: warn of each arrival of a USR signal that is not the stop
 *  signal (it is ignored), so that whoever sent it learns why the run
 *  goes on. */
void train_stop_warn_others(trainer_t *t);
/** Collective, once a stop is agreed: which rank saw a signal first and
 *  which signal it was, into stop.  neg_first: the agreed -(earliest
 *  signal time); agreed: when the agreement ended (wall clock).
 *  @return TRAIN_OK or TRAIN_EFAIL. */
int train_stop_first_signal(trainer_t *t, double neg_first, double agreed, stop_info_t *stop,
                            char *err, size_t cap);
/** Collective, after an agreed stop: finish the saves in flight, save this
 *  step, report the stop; res->outcome becomes TRAIN_STOPPED.
 *  @return TRAIN_OK, or TRAIN_EFAIL when the stop's save failed. */
int train_stop_and_save(trainer_t *t, stop_info_t *stop, train_result_t *res, char *err,
                        size_t cap);
/** Collective, after an evaluation outside the loop's steps was cut short
 *  by a stop signal: agree on the first signal and stop at this step.
 *  @return as train_stop_and_save. */
int train_stop_after_eval(trainer_t *t, train_result_t *res, char *err, size_t cap);

/* train_recovery.c */

/** Rank 0, once: the Young/Daly interval for a save that cost cost_s. */
void train_tell_young_daly(trainer_t *t, int64_t step, double cost_s);
/** Rank 0, after a launch's first step: the recovery line, when the launch
 *  before ended unplanned (t->log.before). */
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
