/*
 * slurm_fake.c - a scripted SLURM adapter (slurm.h) for tests: it answers
 * from an sv_slurm_fake_t and notes what it was asked, so that a test can
 * run the supervisor's query -> decide -> requeue path without a cluster.
 */
#include "supervise/slurm_fake.h"

#include <stdio.h>
#include <string.h>

static int fake_nodes(void *ctx, const char *job_ref, sv_node_t *nodes, int cap, int *count,
                      int *states_known, char *err, size_t errcap)
{
    sv_slurm_fake_t *f = ctx;
    f->queries++;
    *count = 0;
    *states_known = 0;
    if (f->fail_nodes != SV_SLURM_OK) {
        snprintf(err, errcap, "fake: no answer about the nodes of job %s", job_ref);
        return f->fail_nodes;
    }
    if (f->n_nodes > cap) {
        snprintf(err, errcap, "fake: job %s holds %d nodes, more than %d", job_ref, f->n_nodes,
                 cap);
        return SV_SLURM_EFAIL;
    }
    memcpy(nodes, f->nodes, (size_t)f->n_nodes * sizeof *nodes);
    *count = f->n_nodes;
    *states_known = f->states_known;
    return SV_SLURM_OK;
}

static int fake_time_left(void *ctx, const char *job_ref, double *seconds, char *err,
                          size_t errcap)
{
    sv_slurm_fake_t *f = ctx;
    f->queries++;
    *seconds = -1;
    if (f->fail_time_left != SV_SLURM_OK) {
        snprintf(err, errcap, "fake: no answer about the time left of job %s", job_ref);
        return f->fail_time_left;
    }
    *seconds = f->time_left;
    return SV_SLURM_OK;
}

static int fake_requeue(void *ctx, const char *job_ref, const char (*exclude)[SV_NAME_MAX],
                        int n_exclude, char *err, size_t errcap)
{
    sv_slurm_fake_t *f = ctx;
    f->requeues++;
    snprintf(f->requeued, sizeof f->requeued, "%s", job_ref);
    f->excluded[0] = '\0';
    for (int i = 0; i < n_exclude; i++) {
        size_t len = strlen(f->excluded);
        snprintf(f->excluded + len, sizeof f->excluded - len, "%s%s", i ? "," : "", exclude[i]);
    }
    if (f->fail_requeue != SV_SLURM_OK) {
        snprintf(err, errcap, "fake: requeue of job %s refused", job_ref);
        return f->fail_requeue;
    }
    return SV_SLURM_OK;
}

static const sv_slurm_ops_t fake_ops = {
    .nodes = fake_nodes,
    .time_left = fake_time_left,
    .requeue = fake_requeue,
};

sv_slurm_t sv_slurm_fake(sv_slurm_fake_t *fake)
{
    return (sv_slurm_t){.ops = &fake_ops, .ctx = fake};
}
