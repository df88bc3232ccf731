/*
 * log.h - ftrain-supervise's log: one line per event on stdout, with a
 * timestamp, the program's name and the job, in train.sbatch's style:
 *
 *   2026-11-27T12:27:38 train.sbatch[62]: relaunch 1 of at most 3 ...
 *
 * HowTo: sv_log_init(name, job_ref) once, then sv_log("...", ...).  Lines
 * are written whole (one write each) and flushed, so that they interleave
 * with the launcher's output in the job's file in the order they happened.
 */
#ifndef FTRAIN_SUPERVISE_LOG_H
#define FTRAIN_SUPERVISE_LOG_H

/** Set the name and the job in each line (copied). */
void sv_log_init(const char *name, const char *job_ref);

/** Write the lines from now on to fd instead of standard output (the
 *  deputy, once the batch host is lost: its srun, which carried its
 *  standard output, died with that host).  -1: standard output again. */
void sv_log_to(int fd);

/** Log one event (printf format). */
void sv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
