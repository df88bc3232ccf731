/*
 * exit_codes.h - the exit statuses ftrain, the batch script and any trainer
 * that follows the stop contract (ckpt_stop.h) share.  They are the contract
 * between a training process and whatever launched it: a supervisor decides
 * from these numbers (and the structured files a run leaves), never from the
 * text a process printed.  docs/exit-codes.md has the table with what a
 * launcher does on each.
 *
 * HowTo: a trainer returns FTRAIN_EXIT_REQUEUE once its stop checkpoint is
 * committed and FTRAIN_EXIT_DONE when training finished; a launcher
 * requeues on FTRAIN_EXIT_REQUEUE, relaunches on FTRAIN_EXIT_HANG and on a
 * rank killed by a signal, and ends on FTRAIN_EXIT_FAILURE and
 * FTRAIN_EXIT_USAGE (the same launch would fail the same way).
 *
 * This header is installed and has no dependencies: it is safe to include
 * from C and C++, and its values never change within a major version.
 */
#ifndef FTRAIN_EXIT_CODES_H
#define FTRAIN_EXIT_CODES_H

/* Training finished: nothing left to do. */
#define FTRAIN_EXIT_DONE 0
/* A failure a relaunch would repeat: bad data, a refused resume, a
 * checkpoint that could not be written, a collective that failed. */
#define FTRAIN_EXIT_FAILURE 1
/* Bad options or environment, found before any work was done. */
#define FTRAIN_EXIT_USAGE 2
/* Stopped by a signal after a committed checkpoint: requeue me. */
#define FTRAIN_EXIT_REQUEUE 75
/* A hang: a rank made no progress for too long and the watchdog ended the
 * job; the newest committed checkpoint is good, a relaunch resumes from it. */
#define FTRAIN_EXIT_HANG 76
/* A process ended by signal N with nothing saved exits 128 + N (the
 * shell's convention); FTRAIN_EXIT_SIGNAL(N) names it. */
#define FTRAIN_EXIT_SIGNAL(n) (128 + (n))

#endif
