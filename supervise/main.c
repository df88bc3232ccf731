/*
 * main.c - ftrain-supervise: run ftrain (or FTRAIN_PROGRAM) under SLURM
 * from inside a batch job, as slurm/train.sbatch documents: launch it,
 * forward the stop signal, and after each launch gather the facts (exit
 * status, failure records, heartbeats, the launcher's words as a hint,
 * the nodes' states and the time left), ask the policy (policy.h) and do
 * what it says: relaunch on the nodes it names, requeue, or end with the
 * status it gives.
 *
 * Invariants:
 *   - the signal handlers are set before anything else (signals.h): a
 *     warning or a TERM that comes during the set-up is noted, not fatal;
 *   - a configuration error is found and reported (exit 2) before
 *     anything is launched;
 *   - every decision is supervise_decide's; this file only gathers its
 *     input and carries it out; a signal that comes between a relaunch
 *     decision and the relaunch makes it decide again;
 *   - every SLURM call is bounded (slurm_real.h, proc.h); the node-local
 *     tier's job directory (never FTRAIN_LOCAL_ROOT itself) is removed
 *     once, before a requeue or at the end;
 *   - a job of more than one node is refused (exit 2) before anything is
 *     launched when RUN_DIR is not shared (steps.h's probe); it gets a
 *     deputy on another node (deputy.h) and a heartbeat file (beat.h) that
 *     every wait keeps fresh (the tick); the heartbeat says "ended" and the
 *     deputy is ended before the supervisor ends the job itself.
 *
 *   start -> probe, heartbeat, deputy -> decide(launched 0) -> LAUNCH -> run
 *            -> facts -> decide -> RELAUNCH (deputy again if it ended) -> run
 *            -> ...  | REQUEUE -> exit 75 (or end) | END (deputy ended first)
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault/failure.h"
#include "ftrain/exit_codes.h"
#include "supervise/beat.h"
#include "supervise/deputy.h"
#include "supervise/explain.h"
#include "supervise/facts.h"
#include "supervise/launch.h"
#include "supervise/log.h"
#include "supervise/policy.h"
#include "supervise/proc.h"
#include "supervise/settings.h"
#include "supervise/signals.h"
#include "supervise/slurm_real.h"
#include "supervise/steps.h"
#include "util/util.h"

#define RECORDS_MAX 64

/* Everything the loop carries from one launch to the next. */
typedef struct {
    sv_config_t cfg;
    sv_slurm_real_t real;
    sv_slurm_t slurm;
    sv_signal_state_t sig;
    sv_launch_t history[SV_HISTORY_MAX];
    int n_history;
    sv_node_t nodes[SV_NODES_MAX];
    failure_t records[RECORDS_MAX];
    int local_cleaned;
    char detail[256];   /* the launcher's line the hint came from */
    int term_at_end;    /* TERM had come when the launch ended */
    int stop_at_end;    /* ... the stop warning */
    char err_path[4400]; /* the last launch's standard error (read: removed at the end) */
    /* The deputy's: this batch host, the job's output file, the job's nodes. */
    char host[SV_NAME_MAX];
    char std_out[4096];
    sv_node_t job_nodes[SV_NODES_MAX];
    int n_job_nodes;
} supervisor_t;

static supervisor_t sv;

static const char *env_get(const char *name)
{
    return getenv(name);
}

/* Ask SLURM for the job's nodes and their states (one bounded query). */
static void query_nodes(int *n, int *known)
{
    char err[512];
    int rc = sv.slurm.ops->nodes(sv.slurm.ctx, sv.cfg.self, sv.nodes, SV_NODES_MAX, n, known,
                                 err, sizeof err);
    if (rc != SV_SLURM_OK || !*known)
        sv_log("warning: SLURM did not say within %d s what state the job's nodes are in (%s): "
               "taking them as they are",
               sv.cfg.slurm_timeout, rc != SV_SLURM_OK ? err : "no state named");
}

/* Every wait's tick (proc.h): the heartbeat, and the deputy's end noticed. */
static void tick(void)
{
    beat_tick();
    steps_deputy_poll();
}

/* Start the deputy on a node of nodes[0..n) other than this batch host
 * (the last such: the first nodes hold the low ranks), when none runs. */
static void deputy_ensure(const sv_node_t *nodes, int n)
{
    if (!beat_file()[0] || steps_deputy_poll() || steps_deputy_starts() >= STEPS_DEPUTY_STARTS)
        return;
    for (int i = n - 1; i >= 0; i--) {
        if (strcmp(nodes[i].name, sv.host) == 0)
            continue;
        steps_deputy_start(&sv.cfg, nodes[i].name, sv.host, beat_file(), sv.std_out);
        return;
    }
    sv_log("warning: no node but this batch host (%s) to run the deputy on: the batch host's "
           "loss would hold the job until its time limit",
           sv.host);
}

/* Before the first launch, for a job of more than one node: the probe that
 * RUN_DIR is shared (refused: exit 2), then the heartbeat and the deputy. */
static void guard_start(void)
{
    sv_job_facts_t f;
    char err[1024], msg[4096];
    if (sv.cfg.job_nodes <= 1)
        return;
    memset(&f, 0, sizeof f);
    if (slurm_job_facts(&sv.real, sv.cfg.self, &f, err, sizeof err) != SV_SLURM_OK)
        sv_log("warning: SLURM did not describe job %s within %d s (%s)", sv.cfg.self,
               sv.cfg.slurm_timeout, err);
    const char *list = f.node_list[0] ? f.node_list : sv.real.fallback_nodes;
    sv.n_job_nodes = list[0] ? slurm_hostnames(&sv.real, list, sv.job_nodes, SV_NODES_MAX,
                                                err, sizeof err)
                             : 0;
    if (sv.n_job_nodes < 0)
        sv.n_job_nodes = 0;
    int rc = steps_probe_run_dir(&sv.cfg, sv.cfg.job_nodes, sv.job_nodes, sv.n_job_nodes, msg,
                                 sizeof msg);
    if (rc == STEPS_NOT_SHARED) {
        sv_log("error: %s", msg);
        settings_free(&sv.cfg);
        exit(FTRAIN_EXIT_USAGE);
    }
    if (rc == STEPS_UNKNOWN)
        sv_log("warning: %s", msg);
    else
        sv_log("RUN_DIR is shared: all %d nodes of the job see it", sv.cfg.job_nodes);
    if (!sv.cfg.deputy) {
        sv_log("FTRAIN_DEPUTY=0: no deputy; the batch host's loss would hold the job until "
               "its time limit");
        return;
    }
    const char *me = getenv("SLURMD_NODENAME");
    snprintf(sv.host, sizeof sv.host, "%s", me && *me ? me : f.batch_host);
    if (f.std_out[0] == '/' && !strchr(f.std_out, '%'))
        snprintf(sv.std_out, sizeof sv.std_out, "%s", f.std_out);
    if (!sv.host[0] || !sv.n_job_nodes) {
        sv_log("warning: %s: no deputy; the batch host's loss would hold the job until its "
               "time limit",
               !sv.host[0] ? "SLURM does not name this batch host"
                           : "SLURM does not name the job's nodes");
        return;
    }
    if (beat_open(sv.cfg.run_dir, sv.cfg.self, sv.cfg.restarts, sv.host, err, sizeof err) != 0) {
        sv_log("warning: %s: no deputy", err);
        return;
    }
    proc_set_tick(tick);
    deputy_ensure(sv.job_nodes, sv.n_job_nodes);
}

/* clean_local: remove this job's node-local directory on every node the
 * job still holds where a step can run, once (one bounded srun step);
 * status: the one the job ends with. */
static void clean_local(int status)
{
    if (!sv.cfg.local_dir[0] || sv.local_cleaned)
        return;
    sv.local_cleaned = 1;
    int n = 0, known = 0, count = 0, rm_status = 0;
    query_nodes(&n, &known);
    size_t cap = (size_t)n * SV_NAME_MAX + 1;
    char *nodes = calloc(1, cap), *left = calloc(1, cap);
    for (int i = 0; nodes && left && i < n; i++) {
        int gone = known && (sv.nodes[i].state & (SV_NODE_DOWN | SV_NODE_NOT_RESPONDING));
        char *to = gone ? left : nodes;
        snprintf(to + strlen(to), cap - strlen(to), "%s%s", to[0] ? "," : "", sv.nodes[i].name);
        count += !gone;
    }
    if (left && left[0])
        sv_log("warning: the node-local tier %s is left on %s (SLURM says it is down or not "
               "responding: no step runs there); its epilog or a reboot must clear it",
               sv.cfg.local_dir, left);
    if (!nodes || !nodes[0]) {
        sv_log("warning: SLURM names no node of this job to remove the node-local tier %s "
               "from; it is left on the job's nodes (%s)",
               sv.cfg.local_dir, getenv("SLURM_JOB_NODELIST") ? getenv("SLURM_JOB_NODELIST")
                                                              : "unknown");
        free(nodes);
        free(left);
        return;
    }
    char nn[32], e1[cap + 32], e2[cap + 32], e3[64], e4[64], opt[cap + 16];
    snprintf(nn, sizeof nn, "%d", count);
    snprintf(e1, sizeof e1, "SLURM_JOB_NODELIST=%s", nodes);
    snprintf(e2, sizeof e2, "SLURM_NODELIST=%s", nodes);
    snprintf(e3, sizeof e3, "SLURM_JOB_NUM_NODES=%d", count);
    snprintf(e4, sizeof e4, "SLURM_NNODES=%d", count);
    snprintf(opt, sizeof opt, "--nodelist=%s", nodes);
    char *env[] = {e1, e2, e3, e4, NULL};
    char *argv[] = {"srun", "-N", nn, opt, "--ntasks-per-node=1", "--kill-on-bad-exit=0",
                    "rm", "-rf", "--", sv.cfg.local_dir, NULL};
    char out[256], err[256];
    /* After a TERM, KillWait (30 s by default) ends this process. */
    int rc = proc_run(argv, env, sv.sig.term ? 10 : 60, out, sizeof out, &rm_status, err,
                      sizeof err);
    if (rc == PROC_OK && rm_status == 0)
        sv_log("removed the node-local tier %s on %s", sv.cfg.local_dir, nodes);
    else if (sv.sig.term && (status == 0 || status == FTRAIN_EXIT_REQUEUE))
        sv_log("after the TERM SLURM starts no step to remove the node-local tier %s; %s's "
               "ranks removed it at their end (--ckpt-local-remove-at-end)",
               sv.cfg.local_dir, sv.cfg.trainer);
    else
        sv_log("warning: could not remove the node-local tier %s on every node (%s)%s%s; what "
               "is left there is this job's alone",
               sv.cfg.local_dir, nodes, rc == PROC_ETIMEOUT ? ": " : "",
               rc == PROC_ETIMEOUT ? err : "");
    free(nodes);
    free(left);
}

/* A stop warning in the job's first minute may be SLURM's time-limit
 * warning coming at once: say so, with the limit (one bounded query). */
static void lead_check(void)
{
    if (!sv.sig.stop || sv.sig.stop_at > 60)
        return;
    double lim = slurm_time_limit(&sv.real, sv.cfg.self);
    char limit[64] = "";
    if (lim >= 0)
        snprintf(limit, sizeof limit, " and its time limit is %.0f s", lim);
    sv_log("note: %s came %.0f s after the job started%s: if that is SLURM's time-limit "
           "warning, the time limit is within the signal lead (sbatch --signal=B:USR1@LEAD; "
           "this script asks for 180 s), and every run stops this early and is requeued, up "
           "to FTRAIN_MAX_RESTARTS=%lld times: give the job a --time well above LEAD + 30 s, "
           "or a smaller LEAD",
           sv.sig.stop == SIGUSR2 ? "USR2" : "USR1", sv.sig.stop_at, limit,
           (long long)sv.cfg.policy.max_restarts);
    sv.sig.stop_at = 61;
}

/* Carry out a requeue.  @return only when it was refused or failed (the
 * caller then ends with the decision's status). */
static void requeue(const sv_decision_t *d, const char *reason)
{
    char names[SV_EXCLUDE_MAX * SV_NAME_MAX] = "", err[1024];
    if (sv.sig.term) {
        sv_log("%s, but TERM came before the requeue: not requeueing", reason);
        return;
    }
    if (d->wanted == SV_RULE_CHECKPOINTED)
        lead_check();
    signal(SIGUSR1, SIG_IGN); /* a late warning changes nothing now */
    signal(SIGUSR2, SIG_IGN);
    clean_local(d->status);
    if (sv.err_path[0])
        unlink(sv.err_path); /* read: the last launch's messages */
    for (int i = 0; i < d->n_suspect; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "," : "",
                 d->suspect[i]);
    if (!sv.cfg.policy.requeue_exclude && names[0])
        sv_log("the failures pointed at %s; the requeued job may run there again "
               "(FTRAIN_REQUEUE_EXCLUDE=1 leaves them out)",
               names);
    sv_log("%s: requeue job %s (restart %lld of at most %lld)%s%s", reason, d->job_ref,
           (long long)sv.cfg.restarts + 1, (long long)sv.cfg.policy.max_restarts,
           d->n_exclude ? ", without node(s) " : "", d->n_exclude ? names : "");
    int rc = sv.slurm.ops->requeue(sv.slurm.ctx, d->job_ref, d->exclude, d->n_exclude, err,
                                   sizeof err);
    if (rc > 0)
        sv_log("warning: %s: it may run on %s again", err, names);
    if (rc < 0) {
        sv_log("error: scontrol requeue %s failed; resubmit by hand (RUN_DIR=%s): %s",
               d->job_ref, sv.cfg.run_dir, err);
        return;
    }
    /* The requeue's TERM ends this process; a TERM that came during the
     * update above is taken now. */
    signal(SIGTERM, SIG_DFL);
    if (sv_signals_term())
        raise(SIGTERM);
    proc_sleep(30, NULL); /* the heartbeat kept fresh meanwhile */
    exit(FTRAIN_EXIT_REQUEUE);
}

/* End the job with status (the node-local tier removed first). */
static void finish(int status)
{
    beat_end(); /* the deputy leaves on its next read: meanwhile, the clean-up */
    steps_deputy_ending();
    if (sv.err_path[0])
        unlink(sv.err_path);
    clean_local(status);
    steps_deputy_stop();
    if (status == 0)
        sv_log("done: training finished");
    else if (status == 75 && sv.sig.term)
        sv_log("checkpointed, but TERM came before %s exited (time limit, preemption or "
               "cancel): not requeueing; SLURM requeues preempted jobs itself, after a time "
               "limit resubmit with the same RUN_DIR",
               sv.cfg.trainer);
    else if (status == 143 && sv.sig.launches == 0)
        ;
    else if (status != 75)
        sv_log("error: %s failed with status %d; not requeueing (see the ranks' messages "
               "above)",
               sv.cfg.trainer, status);
    settings_free(&sv.cfg);
    exit(status);
}

/* The records of launch id: failure_collect, with a log line for those
 * refused (truncated, garbage) or of another launch.  @return the count. */
static int collect_records(int id, int *refused)
{
    failure_launch_t expect;
    failure_scan_t scan;
    char err[512];
    failure_launch_from_env(&expect); /* the job and SLURM_RESTART_COUNT */
    expect.launch = id;
    memset(&scan, 0, sizeof scan);
    *refused = 0;
    if (failure_collect(sv.cfg.run_dir, &expect, sv.records, RECORDS_MAX, &scan, err,
                        sizeof err) != FAILURE_OK) {
        sv_log("warning: cannot read the failure records (%s): deciding from the exit status "
               "and the launcher",
               err);
        return 0;
    }
    if (scan.refused) {
        *refused = scan.refused;
        sv_log("warning: %d failure record(s) in %s/%s refused (%s): deciding from the exit "
               "status and the launcher",
               scan.refused, sv.cfg.run_dir, FAILURE_DIR, scan.first_refusal);
    }
    if (scan.stale)
        sv_log("%d failure record(s) of other launches ignored", scan.stale);
    for (int i = 0; i < scan.kept; i++)
        sv_log("failure record: rank %d on %s: %s at step %lld%s%s", sv.records[i].rank,
               sv.records[i].host, failure_kind_name(sv.records[i].kind),
               (long long)sv.records[i].step, sv.records[i].culprit_host[0] ? ", points at " : "",
               sv.records[i].culprit_host);
    return scan.kept;
}

/* Fill in with what launch id (just ended, res) left, and the allocation's
 * state when a relaunch may follow. */
static void gather(sv_input_t *in, const sv_launch_result_t *res, int id,
                   const facts_tokens_t *old)
{
    in->launched = 1;
    in->status = res->status;
    in->killed = res->killed;
    in->term = sv.sig.term;
    in->stop = sv.sig.stop != 0;
    in->n_nodes = 0;
    in->states_known = 0;
    in->time_left_s = -1;
    in->n_records = 0;
    memset(&in->said, 0, sizeof in->said);
    sv.detail[0] = '\0';
    sv.term_at_end = sv.sig.term;
    sv.stop_at_end = sv.sig.stop != 0;
    if (res->status == 0 || res->status == FTRAIN_EXIT_REQUEUE)
        return;
    facts_said_file(res->err_path, &in->said, sv.detail, sizeof sv.detail);
    in->n_records = collect_records(id, &in->refused_records);
    in->records = sv.records;
    in->step_done = facts_step_done(sv.cfg.run_dir, old);
    in->to_ckpt_s = facts_to_ckpt(sv.cfg.run_dir, res->wall_start);
    if (sv.sig.term)
        return;
    query_nodes(&in->n_nodes, &in->states_known);
    in->nodes = sv.nodes;
    char err[256];
    if (sv.slurm.ops->time_left(sv.slurm.ctx, sv.cfg.self, &in->time_left_s, err,
                                sizeof err) != SV_SLURM_OK)
        in->time_left_s = -1;
}

/* Log the nodes a relaunch leaves out, and why. */
static void log_left_out(const sv_input_t *in, const sv_decision_t *d, char *use, size_t cap)
{
    use[0] = '\0';
    for (int i = 0, u = 0; i < in->n_nodes; i++) {
        if (u < d->n_use && d->use[u] == i) {
            snprintf(use + strlen(use), cap - strlen(use), "%s%s", u ? "," : "",
                     in->nodes[i].name);
            u++;
        } else if (in->states_known && (in->nodes[i].state & SV_NODE_BAD)) {
            sv_log("node %s left out: SLURM says %s", in->nodes[i].name,
                   in->nodes[i].state & SV_NODE_DOWN             ? "DOWN"
                   : in->nodes[i].state & SV_NODE_DRAIN          ? "DRAIN"
                   : in->nodes[i].state & SV_NODE_FAIL           ? "FAIL"
                   : in->nodes[i].state & SV_NODE_NOT_RESPONDING ? "NOT_RESPONDING"
                                                                 : "of no state");
        } else {
            sv_log("node %s left out: the failure points at it", in->nodes[i].name);
        }
    }
}

/* Run one launch: nodes NULL for the first. */
static void run_launch(const char *nodes, int count, sv_launch_result_t *res,
                       facts_tokens_t *old, int id)
{
    sv_argv_t cmd = {0};
    char line[8192] = "";
    facts_tokens(sv.cfg.run_dir, old);
    if (nodes && launch_env_for_nodes(&sv.cfg, nodes, count) != 0)
        sv_log("warning: cannot set the relaunch's environment");
    if (launch_command(&sv.cfg, nodes, count, &cmd) != 0) {
        sv_log("error: out of memory");
        finish(FTRAIN_EXIT_USAGE);
    }
    for (int i = 0; i < cmd.n; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", i ? " " : "",
                 cmd.v[i]);
    if (nodes && res->ended > 0) /* res: the launch before's */
        sv_log("relaunch after %.3f s of this supervisor's own time (from the end of the "
               "launch before: reading the facts, asking SLURM, deciding)",
               util_mono_s() - res->ended);
    sv_log("launch: %s", line);
    launch_run(&sv.cfg, &cmd, id, &sv.sig, res);
    snprintf(sv.err_path, sizeof sv.err_path, "%s", res->err_path);
    argv_free(&cmd);
    sv_log("%s exited with status %d%s%s%s%s", sv.cfg.trainer, res->status,
           sv.sig.stop ? " (after " : "", sv.sig.stop ? (sv.sig.stop == SIGUSR2 ? "USR2" : "USR1") : "",
           sv.sig.stop ? ")" : "", sv.sig.term ? " (after TERM)" : "");
}

/* Carry out the decision d on the input in.  @return only after a
 * relaunch (the next decision follows). */
static void act(const sv_input_t *in, const sv_decision_t *d, sv_launch_result_t *res,
                facts_tokens_t *old)
{
    char use[SV_NODES_MAX * 8] = "", reason[2048];
    sv_explain_t x = {.trainer = sv.cfg.trainer, .launcher = sv.cfg.launcher_name,
                      .stop_name = sv.cfg.stop_name, .detail = sv.detail, .use = use,
                      .term_late = in->launched && sv.sig.term && !sv.term_at_end,
                      .stop_late = in->launched && sv.sig.stop && !sv.stop_at_end};
    int id = sv.n_history + 1;
    if (d->action == SV_LAUNCH) {
        run_launch(NULL, 0, res, old, id);
        return;
    }
    explain_before(&x, in, d);
    sv_rule_t r = d->rule == SV_RULE_RESTART_CAP ? d->wanted : d->rule;
    if (d->action == SV_RELAUNCH || r == SV_RULE_TOO_FEW_NODES || r == SV_RULE_NO_TIME)
        log_left_out(in, d, use, sizeof use);
    explain_reason(&x, in, d, reason, sizeof reason);
    if (d->action == SV_REQUEUE) {
        requeue(d, reason);
        finish(d->status);
    }
    if (d->action == SV_END) {
        if (reason[0])
            sv_log("%s", reason);
        finish(d->status);
    }
    sv_log("%s", reason);
    sv_node_t *keep = calloc((size_t)d->n_use + 1, sizeof *keep);
    for (int i = 0; keep && i < d->n_use; i++)
        keep[i] = in->nodes[d->use[i]];
    if (keep)
        deputy_ensure(keep, d->n_use); /* its node may have been lost */
    free(keep);
    sv.history[sv.n_history++] = (sv_launch_t){
        .status = in->status, .failure = d->failure, .culprit = d->culprit,
        .to_ckpt_s = in->to_ckpt_s};
    run_launch(use, d->n_use, res, old, id + 1);
}

/* The loop: decide, act, until the end or a requeue. */
static void supervise(void)
{
    sv_input_t in;
    sv_decision_t d;
    sv_launch_result_t res;
    facts_tokens_t old;
    memset(&in, 0, sizeof in);
    memset(&res, 0, sizeof res);
    in.set = sv.cfg.policy;
    snprintf(in.job_id, sizeof in.job_id, "%s", sv.cfg.job_id);
    if (sv.cfg.array_task) {
        snprintf(in.array_job_id, sizeof in.array_job_id, "%s", sv.cfg.array_job_id);
        snprintf(in.array_task_id, sizeof in.array_task_id, "%s", sv.cfg.array_task_id);
    }
    in.restart_count = sv.cfg.restarts;
    in.step_done = SV_STEP_STARTUP;
    in.to_ckpt_s = -1;
    in.time_left_s = -1;
    for (;;) {
        launch_note_signals(&sv.cfg, &sv.sig);
        in.term = sv.sig.term;
        in.stop = sv.sig.stop != 0;
        in.history = sv.history;
        in.n_history = sv.n_history;
        if (supervise_decide(&in, &d) != SV_OK) {
            sv_log("error: %s", d.reason);
            finish(in.launched ? in.status : FTRAIN_EXIT_USAGE);
        }
        /* A signal while deciding: decide again with it. */
        launch_note_signals(&sv.cfg, &sv.sig);
        if (sv.sig.term != in.term || (sv.sig.stop != 0) != in.stop)
            continue;
        int id = d.action == SV_LAUNCH ? sv.n_history + 1 : sv.n_history + 2;
        act(&in, &d, &res, &old);
        gather(&in, &res, id, &old);
    }
}

/* Array variables with a SLURM_JOB_ID of another id: an array task, or
 * a job submitted from one that inherited them.  SLURM says which (one
 * bounded query, before the settings are read); inherited ones are
 * dropped.  With no answer they are taken as this job's. */
static void inherited_array(void)
{
    const char *id = getenv("SLURM_JOB_ID"), *aj = getenv("SLURM_ARRAY_JOB_ID"),
               *at = getenv("SLURM_ARRAY_TASK_ID"), *t = getenv("FTRAIN_SLURM_TIMEOUT");
    if (!id || !*id || !aj || !*aj || !at || !*at || strcmp(aj, id) == 0)
        return;
    sv_slurm_real_t r = {.timeout_s = 20};
    if (t && strspn(t, "0123456789") == strlen(t) && strlen(t) > 0 && strlen(t) < 6 && atoi(t) > 0)
        r.timeout_s = atoi(t);
    if (slurm_array_task(&r, id, aj, at) == 0) {
        unsetenv("SLURM_ARRAY_JOB_ID");
        unsetenv("SLURM_ARRAY_TASK_ID");
    }
}

int main(int argc, char **argv)
{
    char err[4096];
    if (argc > 1 && strcmp(argv[1], "--deputy") == 0)
        return deputy_main(argc, argv);
    /* First: a warning during the set-up must not kill this process. */
    sv.sig.start = util_mono_s();
    if (sv_signals_install() != 0) {
        fprintf(stderr, "ftrain-supervise: cannot set the signal handlers: %s\n",
                strerror(errno));
        return FTRAIN_EXIT_USAGE;
    }
    inherited_array();
    int rc = settings_load(&sv.cfg, argc, argv, env_get, err, sizeof err);
    sv_log_init(sv.cfg.log_name, sv.cfg.job_ref[0] ? sv.cfg.job_ref : getenv("SLURM_JOB_ID"));
    if (rc == 1) {
        fputs(err, stdout);
        return 0;
    }
    if (rc != 0) {
        sv_log("error: %s", err);
        settings_free(&sv.cfg);
        return FTRAIN_EXIT_USAGE;
    }
    if (sv.cfg.policy.program &&
        (setenv("FTRAIN_RUN_DIR", sv.cfg.run_dir, 1) != 0 ||
         setenv("FTRAIN_STOP_SIGNAL", sv.cfg.stop_name, 1) != 0))
        return FTRAIN_EXIT_USAGE;
    if (sv.cfg.launcher == SV_MPIRUN && geteuid() == 0)
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1), setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    sv.real.timeout_s = sv.cfg.slurm_timeout;
    sv.real.requeue_pause_s = 5;
    const char *list = getenv("SLURM_JOB_NODELIST");
    snprintf(sv.real.fallback_nodes, sizeof sv.real.fallback_nodes, "%s", list ? list : "");
    sv.slurm = sv_slurm_real(&sv.real);
    const char *nn = getenv("SLURM_JOB_NUM_NODES"), *nt = getenv("SLURM_NTASKS");
    char tpn[32] = "default";
    if (sv.cfg.tasks_per_node > 0)
        snprintf(tpn, sizeof tpn, "%d", sv.cfg.tasks_per_node);
    sv_log("start: job %s restart %lld/%lld nodes %s (%s) tasks %s per node %s (on a relaunch "
           "%d) launcher %s run_dir %s relaunches up to %d, min nodes %d%s%s%s",
           sv.cfg.job_ref, (long long)sv.cfg.restarts, (long long)sv.cfg.policy.max_restarts,
           nn ? nn : "?", list ? list : "?", nt ? nt : "default", tpn, sv.cfg.per_node,
           sv.cfg.launcher_name, sv.cfg.run_dir, sv.cfg.policy.max_relaunches,
           sv.cfg.policy.min_nodes, sv.cfg.local_dir[0] ? ", node-local tier " : "",
           sv.cfg.local_dir, sv.cfg.local_dir[0] ? "/<node>" : "");
    if (sv.cfg.job_nodes > 0 && sv.cfg.policy.min_nodes > sv.cfg.job_nodes)
        sv_log("warning: FTRAIN_MIN_NODES=%d is more than the %d node(s) this job has: an "
               "unplanned failure requeues the job (a new allocation, a wait in the queue), "
               "never relaunches it here; set it to at most the smallest node count of sbatch "
               "-N",
               sv.cfg.policy.min_nodes, sv.cfg.job_nodes);
    guard_start();
    supervise();
    return 0;
}
