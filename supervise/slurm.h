/*
 * slurm.h - what ftrain-supervise asks of SLURM, behind one ops table: the
 * nodes the job holds now and their states, the time it has left, and a
 * requeue (with nodes left out).  Nothing else: the launch itself (srun,
 * mpirun) is the main loop's.  Two implementations: the real one over
 * scontrol and squeue (to come: each query bounded by
 * FTRAIN_SLURM_TIMEOUT), and slurm_fake.c, scripted, for tests.
 *
 * HowTo: sv_slurm_t s = ...; s.ops->nodes(s.ctx, nodes, SV_NODES_MAX, &n,
 * &known, err, sizeof err) before a decision (one query for the nodes and
 * their states, whatever their count), s.ops->time_left(...) when the
 * decision needs it, and s.ops->requeue(s.ctx, decision.job_ref,
 * decision.exclude, decision.n_exclude, ...) on SV_REQUEUE.  A query SLURM
 * does not answer in time is an error, never a wait without end; the
 * caller then decides without the answer (states_known 0, time left
 * unknown), as the policy allows.
 */
#ifndef FTRAIN_SUPERVISE_SLURM_H
#define FTRAIN_SUPERVISE_SLURM_H

#include <stddef.h>

#include "supervise/policy.h"

typedef enum {
    SV_SLURM_OK = 0,
    SV_SLURM_EFAIL = -1,    /* SLURM refused or failed (err says how) */
    SV_SLURM_ETIMEOUT = -2, /* SLURM did not answer in time */
} sv_slurm_err_t;

typedef struct {
    /** The nodes job_ref holds now (SLURM's NodeList shrinks when a node
     *  fails under --no-kill), at most cap into nodes, with their states
     *  (SV_NODE_* flags); *states_known 0 when SLURM named the nodes but
     *  not their states.  @return SV_SLURM_OK, SV_SLURM_EFAIL (more than
     *  cap nodes included) or SV_SLURM_ETIMEOUT, with err. */
    int (*nodes)(void *ctx, const char *job_ref, sv_node_t *nodes, int cap, int *count,
                 int *states_known, char *err, size_t errcap);
    /** The seconds job_ref has left into *seconds, -1 when unlimited.
     *  @return SV_SLURM_OK, SV_SLURM_EFAIL or SV_SLURM_ETIMEOUT, with err. */
    int (*time_left)(void *ctx, const char *job_ref, double *seconds, char *err,
                     size_t errcap);
    /** Requeue job_ref (the same job id, SLURM_RESTART_COUNT + 1) and add
     *  the n_exclude nodes of exclude to its ExcNodeList.  A real requeue
     *  ends this process (SLURM sends it TERM).  @return SV_SLURM_OK, or
     *  SV_SLURM_EFAIL / SV_SLURM_ETIMEOUT with err (the caller ends with the
     *  decision's status). */
    int (*requeue)(void *ctx, const char *job_ref, const char (*exclude)[SV_NAME_MAX],
                   int n_exclude, char *err, size_t errcap);
} sv_slurm_ops_t;

/* An adapter: its ops and their context. */
typedef struct {
    const sv_slurm_ops_t *ops;
    void *ctx;
} sv_slurm_t;

#endif
