/*
 * save_async_internal.h - the trainer's asynchronous save (--ckpt-async):
 * at most one in flight.  The start copies the state into a snapshot (the
 * training stall) and a background thread writes this rank's shard (local
 * I/O only); the commit, a collective, runs on the training thread at a
 * step boundary where the control reduction shows every rank's writer is
 * done (async_save_writing votes it).
 *
 * The caller brings the state to the host and sets its position first, and
 * keeps the run's counts and the reporting.  Functions return TRAIN_OK or
 * TRAIN_EFAIL with the message in (err, cap).
 */
#ifndef FTRAIN_SAVE_ASYNC_INTERNAL_H
#define FTRAIN_SAVE_ASYNC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"
#include "state/state.h"
#include "train/train.h"

/* The most tensors a start may find in the copy already: the host arrays
 * of the state (state_host_arrays). */
#define ASYNC_PLACED_MAX STATE_ARRAYS

typedef struct {
    pthread_t writer;
    int in_flight;              /* a save is in flight (same on every rank) */
    atomic_int written;         /* this rank's writer has finished */
    state_snapshot_t *snapshot;
    int64_t step;
    double started;             /* when the save began, before the state copy */
    double snapshot_seconds;    /* the start's stall: state copy and snapshot */
    double gpu_copy_seconds;    /* the device -> host part of it, -1 on the CPU */
    const char *root;
    int rank, world;
    float *copy;                /* the snapshot copy, allocated once and reused */
    size_t copy_floats;
    int copy_borrowed;          /* the caller owns copy (a page-locked buffer) */
    state_placed_t placed[ASYNC_PLACED_MAX]; /* host arrays already in the copy */
    size_t nplaced;
} async_save_t;

/* One committed (or failed) asynchronous save. */
typedef struct {
    int64_t step;
    char dir[TRAIN_CKPT_DIR_MAX];
    double background_seconds;  /* from the start to the end of the commit */
    double stall_seconds;       /* training stall: snapshot and commit */
    double snapshot_seconds;
    /* The commit's wait until every rank's writer is done, not in
     * stall_seconds: about 0 at a step boundary (the trainer commits there
     * only once every writer is done); at a stop or the run's end it is
     * time after training (the trainer reports it apart). */
    double writer_wait_seconds;
    double gpu_copy_seconds;    /* -1 on the CPU */
} async_commit_t;

/** Collective: allocate and touch the snapshot copy for st now, so that no
 *  save pays for faulting its pages in during training.  buffer, when not
 *  NULL, is the caller's (state_floats(st) floats, page-locked for a GPU's
 *  download) and is used instead; the caller frees it after
 *  async_save_free.  @return TRAIN_OK, or TRAIN_EFAIL when any rank is out
 *  of memory. */
int async_save_reserve(async_save_t *save, const state_t *st, comm_t *comm, float *buffer,
                       char *err, size_t cap);

/** The next start finds the tensors of these host arrays (floats each) in
 *  the copy already (downloaded there from a GPU, at the state_copy_offset
 *  of each array's start), and copies only the rest.  NULL entries are
 *  skipped; at most ASYNC_PLACED_MAX; cleared by the start. */
void async_save_placed(async_save_t *save, const float *const *host_arrays, size_t count,
                       size_t floats);

/** Collective: snapshot st (already on the host, at its step) and start
 *  writing it to root in the background.  started is when the caller began
 *  the save (the stall counts from there), gpu_copy_seconds the device copy
 *  part of it (-1 on the CPU).  @return TRAIN_OK, or TRAIN_EFAIL when any
 *  rank could not start (nothing is in flight then). */
int async_save_start(async_save_t *save, const state_t *st, comm_t *comm, const char *root,
                     int level, double started, double gpu_copy_seconds, char *err, size_t cap);

/** @return 1 while a save is in flight and this rank's writer is not done. */
int async_save_writing(const async_save_t *save);

/** Collective, with a save in flight: wait for every rank's writer, then
 *  commit.
 *  done describes the save either way.  @return TRAIN_OK or TRAIN_EFAIL
 *  (nothing is in flight afterwards). */
int async_save_commit(async_save_t *save, comm_t *comm, async_commit_t *done, char *err,
                      size_t cap);

/** Stop a writer in flight without committing (a failure path) and free. */
void async_save_free(async_save_t *save);

#endif
