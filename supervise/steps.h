/*
 * steps.h - the supervisor's own small steps beside the launches: the
 * probe that RUN_DIR is shared across the job's nodes, and the deputy step
 * (deputy.h) that survives the batch host's loss.
 *
 * The probe (a job of more than one node, before anything is launched):
 * the supervisor writes a token file into RUN_DIR and runs one bounded
 * step of one task per node (srun --overlap, STEPS_PROBE_TIMEOUT_S) that
 * tests the token is there and leaves a marker beside it, named after its
 * node.  The step's exit status is the fact: 0, every node sees RUN_DIR;
 * anything else, some node does not (the missing markers name which), and
 * the supervisor refuses to start (exit 2).  A probe that does not end in
 * time, or that failed with no marker at all (not even this node's, whose
 * task sees the token whatever the file system: the step did not run),
 * says nothing either way (a warning; the launch goes on).
 *
 * The deputy step: srun --overlap -N1 -n1 --nodelist=NODE running
 * ftrain-supervise --deputy; its lines reach the job's output through srun
 * (on this host), and once it finds this host lost, straight into the job's
 * output file (--job-output) when SLURM names one.  It is started once the heartbeat (beat.h) is
 * written, watched from the supervisor's tick (steps_deputy_poll: an end
 * is logged), started again on another node before a relaunch when it has
 * ended (at most STEPS_DEPUTY_STARTS times), and ended at the supervisor's
 * own end: the heartbeat says "ended" first, the deputy leaves on its next
 * read; after STEPS_DEPUTY_STOP_S srun gets TERM, 2 s later KILL.  A
 * requeue needs no stop: SLURM ends every step of the job.
 *
 * Nothing here decides: the caller (main.c) asks, logs and carries on.
 */
#ifndef FTRAIN_SUPERVISE_STEPS_H
#define FTRAIN_SUPERVISE_STEPS_H

#include <stddef.h>

#include "supervise/settings.h"

#define STEPS_PROBE_TIMEOUT_S 60
#define STEPS_DEPUTY_STOP_S 3.0
#define STEPS_DEPUTY_STARTS 3

enum { STEPS_SHARED = 0, STEPS_NOT_SHARED = -1, STEPS_UNKNOWN = 1 };

/** Probe that RUN_DIR is seen by every node of the job (n_job of them;
 *  nodes[0..n) their names when known, else n 0).  @return STEPS_SHARED,
 *  STEPS_NOT_SHARED (msg: the refusal, naming the nodes) or STEPS_UNKNOWN
 *  (msg: why it could not tell). */
int steps_probe_run_dir(const sv_config_t *c, int n_job, const sv_node_t *nodes, int n,
                        char *msg, size_t cap);

/** Start the deputy on node, watching host (this batch host) through the
 *  heartbeat file beat (beat.h); std_out the job's output file ("" when
 *  SLURM names none), for the deputy's lines once this host is lost.  @return 0, or -1 (it could not be started; logged). */
int steps_deputy_start(const sv_config_t *c, const char *node, const char *host,
                       const char *beat, const char *std_out);

/** Reap the deputy step if it ended, and log its end once.  @return 1 while
 *  it runs, 0 when none runs. */
int steps_deputy_poll(void);

/** The node the deputy runs on ("" none), and how many were started. */
const char *steps_deputy_node(void);
int steps_deputy_starts(void);

/** The heartbeat says "ended": the deputy step's end, from now on, is
 *  expected (logged as such, not as a loss). */
void steps_deputy_ending(void);

/** End the deputy step (the heartbeat says "ended" already): wait for it
 *  STEPS_DEPUTY_STOP_S, then TERM, then KILL; logged. */
void steps_deputy_stop(void);

#endif
