/*
 * ckpt_stop.h - the stop path of libftrain-ckpt, for any trainer: signal
 * handlers that only set a flag, the question "was a stop requested here",
 * and the agreement of all ranks on one stop step through the caller's own
 * collective (a ckpt_coll_t, as ckpt_commit uses: MPI, NCCL's bootstrap,
 * torch.distributed...).
 *
 * The contract a program follows to be requeue-safe under
 * slurm/train.sbatch (ftrain's own exit codes):
 *   - on the stop signal (USR1 by default; TERM and INT too), finish the
 *     current step, agree on the stop step, save a checkpoint collectively,
 *     and exit CKPT_EXIT_REQUEUE (75) once it is committed;
 *   - exit 0 when training is finished, anything else on a failure;
 *   - resume from the newest good checkpoint of the run directory it is
 *     given (FTRAIN_RUN_DIR in its environment under the batch script).
 *
 * HowTo:
 *   ckpt_stop_install(SIGUSR1);               // once, early
 *   for (step = first; step < last; step++) {
 *       train_one_step();
 *       int64_t stop_at; int sig;
 *       ckpt_stop_agree(&coll, step + 1, &stop_at, &sig);  // every rank, every step
 *       if (stop_at >= 0) { save(step + 1); exit(CKPT_EXIT_REQUEUE); }
 *   }
 */
#ifndef FTRAIN_CKPT_STOP_H
#define FTRAIN_CKPT_STOP_H

#include <stdint.h>

#include "ftrain/ckpt.h"
#include "ftrain/exit_codes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit codes of the contract (ftrain/exit_codes.h has them all). */
#define CKPT_EXIT_DONE FTRAIN_EXIT_DONE
#define CKPT_EXIT_REQUEUE FTRAIN_EXIT_REQUEUE

/**
 * Install handlers for stop_signal (SIGUSR1 or SIGUSR2), SIGTERM and
 * SIGINT that record the first signal and its time, and nothing else
 * (sigaction, no SA_RESTART: a blocking call returns EINTR).  Calling it
 * again replaces the stop signal (the other one of USR1 and USR2 goes back
 * to its default action when it had this handler); a signal already
 * recorded stays recorded.  The record is process-wide, in lock-free
 * atomics: any thread may take the signal, any thread may read it.
 * @return CKPT_OK, or CKPT_EINVAL (another stop signal) / CKPT_EIO
 *         (sigaction failed; ckpt_last_error() says why).
 */
CKPT_API int ckpt_stop_install(int stop_signal);

/** @return the first stop signal this process received, 0 when none. */
CKPT_API int ckpt_stop_requested(void);

/** @return the wall-clock time (seconds since the epoch) of that signal,
 *  0 when none. */
CKPT_API double ckpt_stop_time(void);

/**
 * Collective: every rank passes the step it would stop at now (usually the
 * number of steps it has completed).  When some rank was signalled, every
 * rank gets the same *stop_step: the largest step passed (a rank that is
 * behind trains on to it), and *signo the first signal (the earliest, the
 * lowest rank on a tie); else *stop_step = -1 and *signo = 0.  coll NULL
 * is a single process.  Uses coll->allgather once, on every rank: a rank
 * whose step is negative, or whose stop_step or signo is NULL, still takes
 * part (and returns CKPT_EINVAL, the others CKPT_EPEER), so no rank waits
 * in a collective another skipped.  On any failure *stop_step is -1 and
 * *signo 0 (where not NULL).
 * @return CKPT_OK; CKPT_EINVAL (a bad argument; with a bad coll - no
 *         allgather, rank outside 0..size-1 - the collective is not
 *         entered); CKPT_EPEER (the allgather failed, or another rank
 *         passed bad arguments); CKPT_ENOMEM (no memory for the votes of a
 *         world above 64 ranks: the collective is not entered, so treat it
 *         as fatal).
 */
CKPT_API int ckpt_stop_agree(const ckpt_coll_t *coll, int64_t step, int64_t *stop_step,
                             int *signo);

#ifdef __cplusplus
}
#endif
#endif
