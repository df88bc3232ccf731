/*
 * launch.h - one launch of the job step: the launcher's command line (srun
 * --mpi=pmix ... or mpirun ...) as an argv vector, its start with
 * FTRAIN_LAUNCH_ID set, and the wait for its end while the stop signal is
 * forwarded to it.
 *
 * Invariants (the stop signal's forwarding, as train.sbatch did it):
 *   - only the stop signal (USR1 or USR2) is ever sent to the launcher,
 *     never TERM: srun answers TERM by killing the ranks at once;
 *   - a launcher younger than 2 s is not signalled: it may not have set its
 *     handlers yet (the default action of USR1 would kill it); the first
 *     send waits until it is 2 s old;
 *   - once a stop signal came, it is sent again every 10 s while the
 *     launcher runs: srun drops a signal that comes before its step exists,
 *     and ftrain ignores repeats;
 *   - every wait is bounded: the launcher's by the job's time limit (SLURM
 *     ends the job), and after TERM by LAUNCH_TERM_WAIT_S, after which the
 *     launcher is killed and that is logged.
 *
 * States of one launch:
 *   started (launch_start) -> running (launch_wait polls: stop forwarded,
 *   TERM noted, stderr copied) -> ended (waitpid: status) -> read (the
 *   caller collects the facts).
 *
 * HowTo: launch_command(cfg, nodes, count, &cmd) builds the command (nodes
 * NULL: the whole allocation); launch_run(cfg, &cmd, id, &state, &res) runs
 * it and returns when it ended, res.status and res.killed filled; the
 * launcher's standard error is shown on this process's and kept in
 * res.err_path for the facts (facts.h).
 */
#ifndef FTRAIN_SUPERVISE_LAUNCH_H
#define FTRAIN_SUPERVISE_LAUNCH_H

#include "supervise/settings.h"

/* After TERM, the most seconds the launcher is waited for. */
#define LAUNCH_TERM_WAIT_S 300
/* The youngest launcher that is sent the stop signal, and the resend period. */
#define LAUNCH_GRACE_S 2.0
#define LAUNCH_RESEND_S 10.0

/* The signals' state across launches: the first stop warning and TERM. */
typedef struct {
    int stop;        /* the stop signal that came (SIGUSR1/2), 0 none */
    double stop_at;  /* seconds after the start when it came */
    int term;        /* TERM came */
    int launches;    /* launches started */
    double start;    /* the supervisor's start (monotonic) */
} sv_signal_state_t;

typedef struct {
    int status;      /* the exit status; 128 + N when signal N killed it */
    int killed;      /* a signal killed the launcher itself */
    double wall_start; /* the wall clock at the fork (seconds) */
    double seconds;  /* how long it ran */
    double ended;    /* monotonic seconds when its end was seen */
    char err_path[4400]; /* its standard error, kept for the facts */
} sv_launch_result_t;

/** The launcher's command: nodes (comma-separated) and count for a relaunch
 *  on part of the allocation, NULL and 0 for the first.  @return 0 or -1
 *  (out of memory). */
int launch_command(const sv_config_t *c, const char *nodes, int count, sv_argv_t *cmd);

/** Set the environment of a relaunch on nodes (SLURM_JOB_NODELIST and
 *  friends; SLURM_TASKS_PER_NODE for mpirun).  @return 0 or -1. */
int launch_env_for_nodes(const sv_config_t *c, const char *nodes, int count);

/** Note the signals that came (log them); forward the stop signal to pid
 *  when pid > 0.  Called by launch_run and between launches. */
void launch_note_signals(const sv_config_t *c, sv_signal_state_t *s);

/** Run cmd as launch number id (FTRAIN_LAUNCH_ID) and wait for it.
 *  @return 0, or -1 when it could not be started (res->status 127). */
int launch_run(const sv_config_t *c, const sv_argv_t *cmd, int id, sv_signal_state_t *s,
               sv_launch_result_t *res);

#endif
