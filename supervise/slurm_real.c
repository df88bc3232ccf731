/*
 * slurm_real.c - the SLURM adapter over scontrol and squeue (slurm_real.h):
 * bounded calls with fixed output formats, and their parsers.
 */
#include "supervise/slurm_real.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "supervise/proc.h"
#include "util/util.h"

int slurm_parse_field(const char *record, const char *field, char *out, size_t cap)
{
    size_t flen = strlen(field);
    for (const char *p = record; (p = strstr(p, field)); p += flen) {
        /* The field's name starts a word and is followed by '='. */
        if ((p != record && !isspace((unsigned char)p[-1])) || p[flen] != '=')
            continue;
        const char *v = p + flen + 1;
        size_t n = strcspn(v, " \t\n");
        snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), v);
        if (strcmp(out, "(null)") == 0)
            out[0] = '\0';
        return 1;
    }
    if (cap)
        out[0] = '\0';
    return 0;
}

unsigned slurm_state_flags(const char *state)
{
    static const struct {
        const char *word;
        unsigned flag;
    } words[] = {
        {"DOWN", SV_NODE_DOWN},
        {"DRAIN", SV_NODE_DRAIN}, /* DRAIN, DRAINING, DRAINED */
        {"FAIL", SV_NODE_FAIL},   /* FAIL, FAILING */
        {"NOT_RESPONDING", SV_NODE_NOT_RESPONDING},
    };
    unsigned flags = 0;
    if (!state || !*state)
        return SV_NODE_UNKNOWN;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strstr(state, words[i].word))
            flags |= words[i].flag;
    /* sinfo's and scontrol's '*' suffix: the node does not respond. */
    if (strchr(state, '*'))
        flags |= SV_NODE_NOT_RESPONDING;
    return flags;
}

int slurm_parse_node_states(const char *text, sv_node_t *nodes, int n)
{
    int lines = 0;
    for (int i = 0; i < n; i++)
        nodes[i].state = SV_NODE_UNKNOWN;
    for (const char *p = text; p && *p;) {
        size_t len = strcspn(p, "\n");
        char line[8192], name[SV_NAME_MAX], state[256];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        p += len + (p[len] == '\n');
        if (!slurm_parse_field(line, "NodeName", name, sizeof name))
            continue;
        lines++;
        slurm_parse_field(line, "State", state, sizeof state);
        for (int i = 0; i < n; i++)
            if (strcmp(nodes[i].name, name) == 0)
                nodes[i].state = slurm_state_flags(state);
    }
    return lines;
}

double slurm_parse_time(const char *text)
{
    long d = 0, h = 0, m = 0, s = 0;
    char buf[64], *p = buf, *end;
    snprintf(buf, sizeof buf, "%.*s", (int)strcspn(text, "\n"), text);
    while (*p == ' ')
        p++;
    if (!isdigit((unsigned char)*p))
        return -1;
    if (strchr(p, '-')) {
        d = strtol(p, &end, 10);
        if (*end != '-')
            return -1;
        p = end + 1;
    }
    long f[3];
    int nf = 0;
    for (;;) {
        if (!isdigit((unsigned char)*p) || nf == 3)
            return -1;
        f[nf++] = strtol(p, &end, 10);
        if (*end == ':')
            p = end + 1;
        else if (*end == '\0' || *end == ' ')
            break;
        else
            return -1;
    }
    if (nf == 3)
        h = f[0], m = f[1], s = f[2];
    else if (nf == 2)
        m = f[0], s = f[1];
    else
        s = f[0];
    return (double)(((d * 24 + h) * 60 + m) * 60 + s);
}

int slurm_parse_names(const char *text, sv_node_t *nodes, int cap)
{
    int n = 0;
    for (const char *p = text; p && *p;) {
        size_t len = strcspn(p, ",\n");
        if (len > 0 && len < SV_NAME_MAX) {
            if (n == cap)
                return -1;
            snprintf(nodes[n].name, SV_NAME_MAX, "%.*s", (int)len, p);
            nodes[n++].state = 0;
        }
        p += len + (p[len] != '\0');
    }
    return n;
}

/* Run one SLURM command with the adapter's limit.  @return SV_SLURM_OK
 * (exit status 0), SV_SLURM_EFAIL or SV_SLURM_ETIMEOUT, with err. */
/* What a command that ran (proc_run_all) means for the adapter:
 * SV_SLURM_OK (exit status 0), SV_SLURM_EFAIL or SV_SLURM_ETIMEOUT, with err. */
static int answer(const proc_job_t *j, char *err, size_t errcap)
{
    if (j->rc != PROC_OK && errcap)
        snprintf(err, errcap, "%s", j->err);
    if (j->rc == PROC_ETIMEOUT)
        return SV_SLURM_ETIMEOUT;
    if (j->rc != PROC_OK)
        return SV_SLURM_EFAIL;
    if (j->status != 0)
        return util_fail(err, errcap, SV_SLURM_EFAIL, "%s %s failed (status %d)", j->argv[0],
                         j->argv[1], j->status);
    return SV_SLURM_OK;
}

static int query(sv_slurm_real_t *r, char *const argv[], char *out, size_t cap, char *err,
                 size_t errcap)
{
    proc_job_t j = {.argv = argv, .out = out, .cap = cap};
    proc_run_all(&j, 1, r->timeout_s);
    return answer(&j, err, errcap);
}

/* scontrol show hostnames list into out, one name a line; a list seen
 * before is not asked again (r->seen_*: a job's list only shrinks, and
 * then it is another list). */
static int expand(sv_slurm_real_t *r, const char *list, char *out, size_t cap, char *err,
                  size_t errcap)
{
    if (r->seen_names[0] && strcmp(list, r->seen_list) == 0) {
        snprintf(out, cap, "%s", r->seen_names);
        return SV_SLURM_OK;
    }
    char *argv[] = {"scontrol", "show", "hostnames", (char *)list, NULL};
    int rc = query(r, argv, out, cap, err, errcap);
    if (rc == SV_SLURM_OK && out[0] && strlen(out) < sizeof r->seen_names &&
        strlen(list) < sizeof r->seen_list) {
        snprintf(r->seen_list, sizeof r->seen_list, "%s", list);
        snprintf(r->seen_names, sizeof r->seen_names, "%s", out);
    }
    return rc;
}

static int real_nodes(void *ctx, const char *job_ref, sv_node_t *nodes, int cap, int *count,
                      int *states_known, char *err, size_t errcap)
{
    sv_slurm_real_t *r = ctx;
    static char out[1 << 20], states[1 << 20];
    char list[8192] = "", guess[8192];
    *count = 0;
    *states_known = 0;
    /* The job's record and, at the same time, the states of the nodes it
     * held when last asked (its list only shrinks: when it did, the new
     * list's states are asked after). */
    snprintf(guess, sizeof guess, "%s", r->seen_list);
    char *job[] = {"scontrol", "show", "job", "-o", (char *)job_ref, NULL};
    char *show_guess[] = {"scontrol", "show", "node", "-o", guess, NULL};
    proc_job_t q[2] = {{.argv = job, .out = out, .cap = sizeof out},
                       {.argv = show_guess, .out = states, .cap = sizeof states}};
    proc_run_all(q, guess[0] ? 2 : 1, r->timeout_s);
    int rc = answer(&q[0], err, errcap);
    r->left_at = 0;
    if (rc == SV_SLURM_OK) {
        char limit[64] = "", run[64] = "";
        slurm_parse_field(out, "NodeList", list, sizeof list);
        slurm_parse_field(out, "TimeLimit", limit, sizeof limit);
        slurm_parse_field(out, "RunTime", run, sizeof run);
        double l = slurm_parse_time(limit), t = slurm_parse_time(run);
        if (l >= 0 && t >= 0) {
            r->left_s = l > t ? l - t : 0;
            r->left_at = util_mono_s();
        }
    }
    if (!list[0])
        snprintf(list, sizeof list, "%s", r->fallback_nodes);
    if (!list[0])
        return rc != SV_SLURM_OK ? rc : util_fail(err, errcap, SV_SLURM_EFAIL,
                                                   "SLURM names no node of job %s", job_ref);
    if (expand(r, list, out, sizeof out, err, errcap) != SV_SLURM_OK || !out[0])
        snprintf(out, sizeof out, "%s", list);
    int n = slurm_parse_names(out, nodes, cap);
    if (n < 0)
        return util_fail(err, errcap, SV_SLURM_EFAIL, "job %s holds more than %d nodes",
                         job_ref, cap);
    *count = n;
    /* One query for every node's state, whatever their count. */
    char *show[] = {"scontrol", "show", "node", "-o", list, NULL};
    if (guess[0] && strcmp(guess, list) == 0)
        rc = answer(&q[1], err, errcap);
    else
        rc = query(r, show, states, sizeof states, err, errcap);
    if (rc == SV_SLURM_OK && slurm_parse_node_states(states, nodes, n) > 0)
        *states_known = 1;
    else
        for (int i = 0; i < n; i++)
            nodes[i].state = 0;
    return rc;
}

static int real_time_left(void *ctx, const char *job_ref, double *seconds, char *err,
                          size_t errcap)
{
    sv_slurm_real_t *r = ctx;
    char out[256];
    char *argv[] = {"squeue", "-h", "-j", (char *)job_ref, "-o", "%L", NULL};
    *seconds = -1;
    /* The job record nodes() just read says it (whole seconds, as %L). */
    double age = util_mono_s() - r->left_at;
    if (r->left_at > 0 && age >= 0 && age < SLURM_REAL_FRESH_S) {
        *seconds = r->left_s > age ? r->left_s - age : 0;
        return SV_SLURM_OK;
    }
    int rc = query(r, argv, out, sizeof out, err, errcap);
    if (rc == SV_SLURM_OK)
        *seconds = slurm_parse_time(out);
    return rc;
}

int slurm_parse_array_task(const char *record, const char *job_id, const char *aj,
                           const char *at)
{
    char id[SV_NAME_MAX], a[SV_NAME_MAX], t[SV_NAME_MAX];
    if (!slurm_parse_field(record, "JobId", id, sizeof id) || strcmp(id, job_id) != 0)
        return -1;
    slurm_parse_field(record, "ArrayJobId", a, sizeof a);
    slurm_parse_field(record, "ArrayTaskId", t, sizeof t);
    return strcmp(a, aj) == 0 && strcmp(t, at) == 0;
}

int slurm_array_task(sv_slurm_real_t *r, const char *job_id, const char *aj, const char *at)
{
    static char out[1 << 16];
    char err[256];
    char *argv[] = {"scontrol", "show", "job", "-o", (char *)job_id, NULL};
    if (query(r, argv, out, sizeof out, err, sizeof err) != SV_SLURM_OK)
        return -1;
    return slurm_parse_array_task(out, job_id, aj, at);
}

double slurm_time_limit(sv_slurm_real_t *r, const char *job_ref)
{
    char out[256], err[256];
    char *argv[] = {"squeue", "-h", "-j", (char *)job_ref, "-o", "%l", NULL};
    return query(r, argv, out, sizeof out, err, sizeof err) == SV_SLURM_OK
               ? slurm_parse_time(out)
               : -1;
}

static int real_requeue(void *ctx, const char *job_ref, const char (*exclude)[SV_NAME_MAX],
                        int n_exclude, char *err, size_t errcap)
{
    sv_slurm_real_t *r = ctx;
    static char out[1 << 16];
    char old[4096] = "", *list = NULL;
    int rc = SV_SLURM_EFAIL;
    if (n_exclude > 0) {
        /* SLURM changes ExcNodeList only once the job no longer runs:
         * after the requeue, the old list kept. */
        char *job[] = {"scontrol", "show", "job", "-o", (char *)job_ref, NULL};
        if (query(r, job, out, sizeof out, err, errcap) == SV_SLURM_OK)
            slurm_parse_field(out, "ExcNodeList", old, sizeof old);
        size_t len = strlen(old) + 32 + (size_t)n_exclude * SV_NAME_MAX;
        if (!(list = malloc(len)))
            return util_fail(err, errcap, SV_SLURM_EFAIL, "out of memory");
        snprintf(list, len, "ExcNodeList=%s", old);
        for (int i = 0; i < n_exclude; i++)
            snprintf(list + strlen(list), len - strlen(list), "%s%s",
                     i == 0 && !old[0] ? "" : ",", exclude[i]);
    }
    char *requeue[] = {"scontrol", "requeue", (char *)job_ref, NULL};
    for (int try = 1; try <= 3 && rc != SV_SLURM_OK; try++) {
        rc = query(r, requeue, out, sizeof out, err, errcap);
        if (rc != SV_SLURM_OK && try < 3)
            proc_sleep(r->requeue_pause_s, NULL); /* the heartbeat kept fresh */
    }
    if (rc == SV_SLURM_OK && list) {
        char jobid[256];
        snprintf(jobid, sizeof jobid, "JobId=%s", job_ref);
        char *update[] = {"scontrol", "update", jobid, list, NULL};
        char uerr[256];
        if (query(r, update, out, sizeof out, uerr, sizeof uerr) != SV_SLURM_OK)
            rc = util_fail(err, errcap, 1, "SLURM did not take %s for the requeued job (%s)",
                           list, uerr);
    }
    free(list);
    return rc;
}

int slurm_parse_job(const char *record, const char *job_id, sv_job_facts_t *f)
{
    char id[SV_NAME_MAX], v[64];
    memset(f, 0, sizeof *f);
    f->restarts = -1;
    if (!record || !slurm_parse_field(record, "JobId", id, sizeof id) ||
        strcmp(id, job_id) != 0)
        return 0;
    slurm_parse_field(record, "JobState", f->state, sizeof f->state);
    if (slurm_parse_field(record, "Restarts", v, sizeof v) && v[0] &&
        strspn(v, "0123456789") == strlen(v) && strlen(v) < 10)
        f->restarts = strtoll(v, NULL, 10);
    slurm_parse_field(record, "BatchHost", f->batch_host, sizeof f->batch_host);
    slurm_parse_field(record, "NodeList", f->node_list, sizeof f->node_list);
    slurm_parse_field(record, "StdOut", f->std_out, sizeof f->std_out);
    return 1;
}

int slurm_job_facts(sv_slurm_real_t *r, const char *job_ref, sv_job_facts_t *f, char *err,
                    size_t errcap)
{
    static char out[1 << 16];
    char *argv[] = {"scontrol", "show", "job", "-o", (char *)job_ref, NULL};
    memset(f, 0, sizeof *f);
    f->restarts = -1;
    int rc = query(r, argv, out, sizeof out, err, errcap);
    if (rc != SV_SLURM_OK)
        return rc;
    /* An array task's record names its own JobId, not <array>_<task>. */
    char id[SV_NAME_MAX] = "";
    slurm_parse_field(out, "JobId", id, sizeof id);
    const char *want = strchr(job_ref, '_') ? id : job_ref;
    if (!slurm_parse_job(out, want, f))
        return util_fail(err, errcap, SV_SLURM_EFAIL, "scontrol show job %s: no record of it",
                         job_ref);
    return SV_SLURM_OK;
}

int slurm_node_flags(sv_slurm_real_t *r, const char *node, unsigned *flags, char *err,
                     size_t errcap)
{
    static char out[1 << 14];
    char *argv[] = {"scontrol", "show", "node", "-o", (char *)node, NULL};
    sv_node_t one;
    *flags = 0;
    int rc = query(r, argv, out, sizeof out, err, errcap);
    if (rc != SV_SLURM_OK)
        return rc;
    snprintf(one.name, sizeof one.name, "%s", node);
    if (slurm_parse_node_states(out, &one, 1) < 1 || one.state == SV_NODE_UNKNOWN)
        return util_fail(err, errcap, SV_SLURM_EFAIL, "scontrol show node %s: no state of it",
                         node);
    *flags = one.state;
    return SV_SLURM_OK;
}

int slurm_hostnames(sv_slurm_real_t *r, const char *list, sv_node_t *nodes, int cap,
                    char *err, size_t errcap)
{
    static char out[1 << 16];
    if (expand(r, list, out, sizeof out, err, errcap) != SV_SLURM_OK)
        return -1;
    int n = slurm_parse_names(out, nodes, cap);
    if (n < 0)
        return util_fail(err, errcap, -1, "more than %d nodes in %s", cap, list);
    return n;
}

int slurm_cancel(sv_slurm_real_t *r, const char *job_ref, char *err, size_t errcap)
{
    char out[256];
    char *argv[] = {"scancel", (char *)job_ref, NULL};
    return query(r, argv, out, sizeof out, err, errcap);
}

static const sv_slurm_ops_t real_ops = {real_nodes, real_time_left, real_requeue};

sv_slurm_t sv_slurm_real(sv_slurm_real_t *r)
{
    return (sv_slurm_t){&real_ops, r};
}
