/*
 * train.h - the training loop.
 *
 * HowTo: train_run(&cfg, &world, comm, &res, err, sizeof err) loads the data,
 * builds the model and optimizer, resumes when asked, and trains until the
 * configured end or an agreed stop.  Rank 0 prints progress and writes
 * metrics; every rank returns the same result.
 */
#ifndef FTRAIN_TRAIN_H
#define FTRAIN_TRAIN_H

#include <stdint.h>

#include "ftrain/comm.h"
#include "ftrain/config.h"
#include "ftrain/gpu.h"
#include "ftrain/world.h"

typedef enum {
    TRAIN_DONE = 0,     /* trained to the end */
    TRAIN_STOPPED = 1,  /* a stop signal was agreed; see res.saved */
    TRAIN_EFAIL = -1,   /* data, checkpoint, resume or collective failure */
    TRAIN_EMISMATCH = -2 /* the checkpoint belongs to another architecture */
} train_rc_t;

typedef struct {
    int64_t step, epoch;
    double loss, test_loss, test_acc;
    int evaluated;            /* test_* are from an evaluation */
    uint64_t param_hash;
    int stop_signal;          /* signal that stopped the run (0 none) */
    double stop_time;         /* wall-clock time of the first signal */
    int saved;                /* a checkpoint exists for the final step */
    char ckpt[1024];          /* its directory */
    double reduce_ms_per_step;/* gradient reduction time per step */
    double control_ms_per_step;/* stop/control reduction time per step */
    double samples_per_s;
    int async_saves;          /* --ckpt-async saves finished */
    int async_failures;       /* of which failed (exit code 1) */
    int async_skipped;        /* periodic saves skipped: one was in flight */
    double async_stall_ms;    /* mean training stall per async save */
} train_result_t;

/** Run training on the CPU (gpu NULL) or on the GPU of gpu (then c must be
 *  a device-capable communicator, comm_open_nccl).  @return a train_rc_t;
 *  err holds the message on failure. */
int train_run(const config_t *cfg, const world_t *w, comm_t *c, gpu_ctx_t *gpu,
              train_result_t *res, char *err, size_t cap);

/** @return the 64-bit hash (xxh64, seed 0) of n floats' bytes. */
uint64_t train_param_hash(const float *p, size_t n);

#endif
