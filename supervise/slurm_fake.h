/*
 * slurm_fake.h - a scripted SLURM adapter (slurm.h) for tests: set what it
 * answers, query it through sv_slurm_fake(&fake) as through the real one,
 * then read what it was asked.
 */
#ifndef FTRAIN_SUPERVISE_SLURM_FAKE_H
#define FTRAIN_SUPERVISE_SLURM_FAKE_H

#include "supervise/slurm.h"

/* What the fake answers, and what it was asked.  Set the answers, then
 * query through sv_slurm_fake(&fake). */
typedef struct {
    /* Answers. */
    sv_node_t nodes[64];
    int n_nodes;
    int states_known;
    double time_left;   /* -1: unlimited */
    int fail_nodes;     /* the sv_slurm_err_t the nodes query returns */
    int fail_time_left; /* ... the time-left query */
    int fail_requeue;   /* ... a requeue */
    /* What it was asked. */
    int queries;        /* nodes and time-left queries */
    int requeues;
    char requeued[2 * SV_NAME_MAX];         /* the last requeue's job */
    char excluded[SV_EXCLUDE_MAX * SV_NAME_MAX]; /* its exclusions, comma-separated */
} sv_slurm_fake_t;

/** An adapter over fake (not copied: it must outlive the adapter). */
sv_slurm_t sv_slurm_fake(sv_slurm_fake_t *fake);

#endif
