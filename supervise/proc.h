/*
 * proc.h - run a short command with a time limit and take its standard
 * output: every scontrol, squeue, sinfo call and the node-local tier's
 * clean-up step go through here, so none can hold the job.
 *
 * HowTo: char out[4096]; int status; int rc = proc_run(argv, NULL, 20, out,
 * sizeof out, &status, err, sizeof err); rc PROC_OK: the command ended
 * (status: its exit status, 128 + N when signal N killed it); PROC_ETIMEOUT:
 * it did not end in time (it got TERM, then KILL 2 s later, and was
 * reaped); PROC_EFAIL: it could not be started.  Output past cap - 1 bytes
 * is read and dropped.  Standard error goes to /dev/null.
 *
 * Nothing here exits or prints.
 */
#ifndef FTRAIN_SUPERVISE_PROC_H
#define FTRAIN_SUPERVISE_PROC_H

#include <signal.h>
#include <stddef.h>

enum { PROC_OK = 0, PROC_EFAIL = -1, PROC_ETIMEOUT = -2 };

/** Run argv (argv[0] found on PATH) with the environment plus env
 *  ("NAME=VALUE" strings, NULL-terminated, or NULL), for at most timeout_s
 *  seconds.  @return PROC_OK, PROC_EFAIL or PROC_ETIMEOUT (err says which
 *  command and the limit). */
int proc_run(char *const argv[], char *const env[], int timeout_s, char *out, size_t cap,
             int *status, char *err, size_t errcap);

/** In a forked child, before exec: the default actions of the signals
 *  the supervisor takes (USR1, USR2, TERM) and no signal blocked, so that
 *  the command (srun, scontrol, a step) gets them as if run from a shell.
 *  Async-signal-safe. */
void proc_child_signals(void);

/* Commands proc_run_all runs at once, at most. */
#define PROC_JOBS_MAX 4

/* One command of proc_run_all: argv and env as for proc_run, its output
 * into out (cap bytes); after the run, rc (PROC_OK, PROC_EFAIL or
 * PROC_ETIMEOUT), status and, unless PROC_OK, err. */
typedef struct {
    char *const *argv;
    char *const *env;
    char *out;
    size_t cap;
    int rc, status;
    char err[512];
} proc_job_t;

/** Run the n commands of jobs (n <= PROC_JOBS_MAX) at the same time, each
 *  with the same limit of timeout_s seconds, and return when all have
 *  ended (or been killed at their limit): two SLURM queries cost one
 *  query's time. */
void proc_run_all(proc_job_t *jobs, int n, int timeout_s);

/** @return the status a wait status stands for: the exit code, or 128 + N
 *  for a process signal N killed. */
int proc_status(int wstatus);

/** A function every wait of proc_run (and of the launch's loop, launch.h)
 *  calls about every 0.1 s: the supervisor keeps its heartbeat fresh with
 *  it (beat.h) through bounded calls that take long.  NULL: none. */
void proc_set_tick(void (*tick)(void));

/** Call the tick function, if one is set. */
void proc_tick(void);

/** Sleep seconds (bounded, EINTR or not), calling the tick function about
 *  every 0.1 s; @return early, with 1, when stop is set and becomes non-zero
 *  (a signal's flag), else 0. */
int proc_sleep(double seconds, const volatile sig_atomic_t *stop);

#endif
