/*
 * train.h - the training loop.
 *
 * HowTo: once the world, the device and the communicator are agreed (main.c),
 * every rank calls train_run(&cfg, &world, comm, gpu, &before, &res, err, sizeof err)
 * with gpu NULL for the CPU.  It loads the data, builds the model and
 * optimizer, resumes when asked, and trains until the configured end or an
 * agreed stop.  Rank 0 prints progress and writes metrics; every rank
 * returns the same code and result, and res.outcome says whether the run
 * was done or stopped.
 */
#ifndef FTRAIN_TRAIN_H
#define FTRAIN_TRAIN_H

#include <stdint.h>

#include "parallel/comm.h"
#include "config/config.h"
#include "gpu/gpu.h"
#include "fault/watchdog.h"
#include "parallel/world.h"

/* A checkpoint root (the run directory's "ckpt") and a step directory in
 * it; and the room for an error message. */
#define TRAIN_CKPT_ROOT_MAX (CONFIG_PATH_MAX + sizeof "/ckpt")
#define TRAIN_STEP_NAME_MAX 32 /* "step-" and up to 20 digits */
#define TRAIN_CKPT_DIR_MAX (TRAIN_CKPT_ROOT_MAX + TRAIN_STEP_NAME_MAX)
#define TRAIN_ERR_MAX 2048

/* The trainer's one error convention: train_run and every piece of the
 * trainer return TRAIN_OK or a negative error, with the message in their
 * (err, cap) buffer.  How a run ended is not among them: train_run
 * reports it in train_result_t.outcome. */
typedef enum {
    TRAIN_OK = 0,
    TRAIN_EFAIL = -1,     /* checkpoint, resume or collective failure, the rest */
    TRAIN_EMISMATCH = -2, /* the checkpoint belongs to another architecture */
    TRAIN_EDIVERGED = -3, /* a loss or gradient not finite, or runaway */
    TRAIN_EDEVICE = -4,   /* a rank's device failed */
    TRAIN_EDATA = -5      /* the data set cannot be read or is invalid */
} train_rc_t;

/* How a run that returned TRAIN_OK ended. */
typedef enum {
    TRAIN_RUNNING = 0,   /* not ended yet (or failed: train_run's error says why) */
    TRAIN_DONE = 1,      /* trained to the end */
    TRAIN_STOPPED = 2    /* a stop signal was agreed; see saved */
} train_outcome_t;

typedef struct {
    train_outcome_t outcome;  /* done or stopped, when train_run returned TRAIN_OK */
    int64_t step, epoch;
    double loss, test_loss, test_acc;
    double test_r2;           /* regression: R^2 over the test set */
    int regression;           /* the data set is a regression (test_r2, not
                                 test_acc, is its metric) */
    int evaluated;            /* test_* are from an evaluation */
    int64_t eval_step;        /* the step that evaluation was of */
    uint64_t param_hash;
    int stop_signal;          /* signal that stopped the run (0 none) */
    double stop_time;         /* wall-clock time of the first signal */
    int saved;                /* a checkpoint exists for the final step */
    char ckpt[TRAIN_CKPT_DIR_MAX]; /* its directory */
    double reduce_ms_per_step;/* gradient reduction time per step */
    double control_ms_per_step;/* stop/control reduction time per step */
    double samples_per_s;     /* training steps only: evaluations excluded, and
                                 the first step when more than one ran */
    double eval_seconds;      /* the loop's epoch evaluations took this long */
    double first_step_seconds;/* this process's first step, when it was kept
                                 out of samples_per_s; else 0 */
    int async_saves;          /* --ckpt-async saves finished */
    int async_failures;       /* of which failed (exit code 1) */
    int async_skipped;        /* periodic saves skipped: one was in flight */
    double async_stall_ms;    /* mean training stall per async save */
    int local_sealed;         /* --ckpt-local saves sealed on every node */
    int local_failed;         /* local saves that failed or did not start */
    int local_skipped;        /* local saves skipped: one was in flight */
    double local_stall_ms;    /* mean training stall per sealed local save */
    double local_cpu_ms;      /* mean helper CPU per sealed local save (rank 0's) */
} train_result_t;

/** Run training on the CPU (gpu NULL) or on the GPU of gpu (then comm must
 *  be a device-capable communicator, comm_open_nccl).  before: on rank 0,
 *  the heartbeats an earlier launch left (watchdog_leftovers), from which
 *  the recovery line measures the work lost; NULL or none elsewhere.
 *  res->outcome says how the run ended (done or stopped).
 *  @return TRAIN_OK, or TRAIN_EFAIL or TRAIN_EMISMATCH with the message in
 *  err; every rank returns the same. */
int train_run(const config_t *cfg, const world_t *world, comm_t *comm, gpu_ctx_t *gpu,
              const watchdog_leftover_t *before, train_result_t *res, char *err, size_t cap);

/** @return the 64-bit hash (xxh64, seed 0) of n floats' bytes. */
uint64_t train_param_hash(const float *params, size_t n);

#endif
