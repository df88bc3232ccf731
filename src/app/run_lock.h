/*
 * run_lock.h - one launch at a time per run directory.
 *
 * Two launches on one --run-dir (a job submitted twice, a requeue while
 * the old allocation still runs) would read each other's heartbeats as a
 * crash, save the same step names and prune each other's checkpoints.  So
 * rank 0 holds an exclusive lock on RUN_DIR/launch.lock for its whole run
 * (an open file description lock: released when the process ends, however
 * it ends) and writes who holds it there.  A second launch waits up to
 * RUN_LOCK_WAIT_S seconds for it (a launch before that is still exiting)
 * and then refuses, naming the holder.
 *
 * One exception: a holder of the same SLURM job.  Inside one allocation
 * the batch script relaunches only after the step before ended; a lock
 * still held then belongs to a process on a lost node, which a network
 * file system keeps until its lease runs out.  The launch goes on with a
 * warning.  Where the file system has no locks, nothing is checked.
 */
#ifndef FTRAIN_RUN_LOCK_H
#define FTRAIN_RUN_LOCK_H

#include <stddef.h>

#define RUN_LOCK_NAME "launch.lock"
#define RUN_LOCK_WAIT_S 10

typedef enum {
    RUN_LOCK_OK = 0,     /* held, or nothing to hold (no locks here) */
    RUN_LOCK_EBUSY = -1, /* another launch holds it (err names it) */
    RUN_LOCK_EROOT = -2  /* the directory is a checkpoint root, not a run
                            directory (err names its run directory) */
} run_lock_err_t;

/** Rank 0: take the run directory's lock (making run_dir if it is
 *  missing), waiting up to wait_s seconds; host names this process.  The
 *  lock is held until run_lock_release or the process ends.
 *  A directory that is itself a checkpoint root (it holds LATEST or a
 *  step-N directory: RUN/ckpt given for RUN) is refused before anything is
 *  written into it.
 *  @return RUN_LOCK_OK, or RUN_LOCK_EBUSY or RUN_LOCK_EROOT with err set. */
int run_lock_take(const char *run_dir, const char *host, double wait_s, char *err,
                  size_t cap);

/** Release the lock run_lock_take holds (none: nothing). */
void run_lock_release(void);

#endif
