/*
 * policy.c - ftrain-supervise's decision (policy.h): slurm/train.sbatch's
 * rules as one pure function.
 *
 * Invariants:
 *   - pure: no clock, no file, no environment, no global state; the same
 *     input gives the same decision;
 *   - END with status 0 only when the launch finished (status 0); a
 *     REQUEUE only while SLURM_RESTART_COUNT < FTRAIN_MAX_RESTARTS and no
 *     TERM came (SLURM requeues preempted jobs itself);
 *   - a RELAUNCH only after a failure that is not the user's, with no
 *     signal pending, fewer than FTRAIN_MAX_RELAUNCHES relaunches before
 *     it in this allocation, on at least FTRAIN_MIN_NODES nodes, none of
 *     them excluded or marked bad by SLURM (when SLURM answered);
 *   - a requeue leaves nodes out (ExcNodeList) only with
 *     FTRAIN_REQUEUE_EXCLUDE=1; the suspects are named either way.
 *
 * The rules, tried in this order (the first that applies decides):
 *   before the first launch (launched = 0)
 *    1 term-before-launch  TERM came: END 143; nothing started.
 *    2 stop-before-launch  the stop warning came: REQUEUE (status 75): the
 *                          time limit is within the signal lead.
 *    3 first-launch        LAUNCH on the whole allocation.
 *   after a launch
 *    4 done                status 0: END 0.
 *    5 term-after-checkpoint  status 75 and TERM came: END 75.
 *    6 checkpointed        status 75: REQUEUE (status 75).
 *    7 term-after-failure  TERM came: END with the launch's status.
 *    8 stop-killed-launcher  the stop warning came and the status is 128 +
 *                          the stop signal: the launcher died of it before
 *                          it set its handler, nothing was saved: REQUEUE.
 *      classify the failure (C1-C9 below), then
 *    9 user-error          the user's failure (bad options, data, a refused
 *                          resume): END with the status.
 *   10 failed-after-stop   the stop warning came: REQUEUE, leaving out the
 *                          nodes excluded so far and the culprit.
 *   11 same-failure        the same kind of failure as the launch before
 *                          (a rank's death, by a signal or in peer_lost
 *                          records, is one kind), not past its step
 *                          (start-up counts as a step): a
 *                          deterministic fault: END.  Never for a node lost
 *                          or the controller, nor for a rank that dies
 *                          again at start-up on the node spared for a try.
 *   12 relaunch-cap        FTRAIN_MAX_RELAUNCHES relaunches done: END.
 *      the culprit: spared once (kept for one more try) when it died at
 *      start-up, not of a node failure or a hang, ftrain runs (not
 *      FTRAIN_PROGRAM), two relaunches are left and it was not spared
 *      before; else excluded from the relaunches.
 *      the nodes: those the job holds, less those excluded and (when SLURM
 *      answered) those DOWN, DRAIN, FAIL, NOT_RESPONDING or with no state.
 *   13 too-few-nodes       fewer than FTRAIN_MIN_NODES (even with the culprit
 *                          kept: it is kept when that is enough): REQUEUE,
 *                          leaving the excluded nodes out.
 *   14 no-time             the time left is known and not longer than the
 *                          failed launch took to its first checkpoint
 *                          (FTRAIN_RELAUNCH_NEED when it saved none): REQUEUE.
 *   15 relaunch            RELAUNCH on the nodes.
 *   16 restart-cap         any REQUEUE above at SLURM_RESTART_COUNT >=
 *                          FTRAIN_MAX_RESTARTS: END with its status (75
 *                          after a checkpoint, else the launch's).
 *   The job a requeue names: <array job id>_<task id> for the array task
 *   whose SLURM_JOB_ID is the array's own id, else SLURM_JOB_ID.
 *
 * The classification (what failed, whose fault, which node), first match:
 *   C1 the launcher said a node failed: not the user's; "node", that node.
 *   C2 a hang record: not the user's; "hang", its culprit's host.
 *   C3 another record of a precise kind (not "other"; peer_lost only when
 *      no other kind is there: it follows from another's failure), the
 *      earliest: peer_lost and device are not the user's (culprit: the
 *      peer, the record's own host); nan, bad_data, resume_refused, io and
 *      run_lock are.  A peer_lost record while the launcher said a task died
 *      of a signal is that death (C6's kind, the record's culprit).
 *   C4 status 76 (a hang, no record read): not the user's; "hang".
 *   C5 the first task to end exited with a status of its own (not 75,
 *      76): the user's.
 *   C6 the first task to end died of a signal: not the user's; its node.
 *   C7 the launcher could not reach the controller: not the user's.
 *   C8 the launcher itself died of a signal (status 129-192): not the
 *      user's; "launcher <status>".
 *   C9 anything else: the user's.
 * Records refused as garbage count as none: the status decides (C4-C9),
 * and the reason says how many were refused.
 *
 * The deputy's decision (supervise_deputy_decide, rules D1-D9 in
 * policy.h): leave when the supervisor ends the job or a later run's
 * heartbeat is there; watch while the heartbeat is fresh; once silent past
 * the bound, ask SLURM, and requeue (or, at the restart cap, cancel) only
 * when the job still runs this restart on this batch host and SLURM says
 * that host is DOWN or not responding.
 */
#include "supervise/policy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The statuses the rules give. */
#define STATUS_DONE 0
#define STATUS_REQUEUE 75
#define STATUS_HANG 76
#define STATUS_TERM 143

/* A set of node names (the excluded, the spared). */
typedef struct {
    int n;
    char name[SV_EXCLUDE_MAX][SV_NAME_MAX];
} name_set_t;

static int set_has(const name_set_t *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->name[i], name) == 0)
            return 1;
    return 0;
}

static void set_add(name_set_t *s, const char *name)
{
    if (!name[0] || set_has(s, name) || s->n >= SV_EXCLUDE_MAX)
        return;
    snprintf(s->name[s->n++], SV_NAME_MAX, "%s", name);
}

static void set_del(name_set_t *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->name[i], name) == 0) {
            memmove(s->name[i], s->name[i + 1], (size_t)(s->n - i - 1) * SV_NAME_MAX);
            s->n--;
            return;
        }
}

__attribute__((format(printf, 2, 3)))
static void say(sv_decision_t *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->reason, sizeof out->reason, fmt, ap);
    va_end(ap);
}

const char *supervise_job_ref(const char *job_id, const char *array_job_id,
                              const char *array_task_id, char *buf, size_t cap)
{
    if (array_job_id[0] && array_task_id[0] && strcmp(array_job_id, job_id) == 0)
        snprintf(buf, cap, "%s_%s", array_job_id, array_task_id);
    else
        snprintf(buf, cap, "%s", job_id);
    return buf;
}

/* ---- names -------------------------------------------------------------------- */

const char *supervise_rule_name(sv_rule_t rule)
{
    static const char *const names[] = {
        "none", "term-before-launch", "stop-before-launch", "first-launch", "done",
        "term-after-checkpoint", "checkpointed", "term-after-failure", "stop-killed-launcher",
        "user-error", "failed-after-stop", "same-failure", "relaunch-cap", "too-few-nodes",
        "no-time", "relaunch", "restart-cap",
    };
    return rule >= 0 && (size_t)rule < sizeof names / sizeof names[0] ? names[rule] : "unknown";
}

const char *supervise_action_name(sv_action_t action)
{
    static const char *const names[] = {"none", "launch", "relaunch", "requeue", "end"};
    return action >= 0 && (size_t)action < sizeof names / sizeof names[0] ? names[action]
                                                                          : "unknown";
}

const char *supervise_from_name(sv_from_t from)
{
    static const char *const names[] = {
        "none", "node-failure", "hang-record", "record", "hang-status", "task-exited",
        "task-killed", "controller", "launcher-killed", "status",
    };
    return from >= 0 && (size_t)from < sizeof names / sizeof names[0] ? names[from] : "unknown";
}

/* ---- the classification ------------------------------------------------------- */

static void failure_set(sv_failure_t *f, int infra, sv_from_t from, const char *what,
                        const char *culprit)
{
    f->infra = infra;
    f->from = from;
    snprintf(f->what, sizeof f->what, "%s", what);
    snprintf(f->culprit, sizeof f->culprit, "%s", culprit ? culprit : "");
}

/* The record that says the most (C2, C3): a hang with a culprit, else a
 * hang; else the earliest of a precise kind, peer_lost last.  NULL when
 * none is precise. */
static const failure_t *telling_record(const sv_input_t *in)
{
    const failure_t *hang = NULL, *best = NULL;
    for (int i = 0; i < in->n_records; i++) {
        const failure_t *r = &in->records[i];
        if (r->kind == FAILURE_HANG) {
            int better = !hang || (r->culprit_host[0] && !hang->culprit_host[0]) ||
                         ((!!r->culprit_host[0] == !!hang->culprit_host[0]) && r->time < hang->time);
            if (better)
                hang = r;
        } else if (r->kind != FAILURE_OTHER) {
            int lost = r->kind == FAILURE_PEER_LOST;
            int best_lost = best && best->kind == FAILURE_PEER_LOST;
            if (!best || (best_lost && !lost) || (lost == best_lost && r->time < best->time))
                best = r;
        }
    }
    return hang ? hang : best;
}

/* What failed, whose fault and which node (C1-C9). */
static void classify(const sv_input_t *in, sv_failure_t *f)
{
    const failure_t *rec = telling_record(in);
    char what[SV_WHAT_MAX];
    memset(f, 0, sizeof *f);
    f->step = in->step_done < 0 ? SV_STEP_STARTUP : in->step_done;
    if (in->said.kind == SV_SAID_NODE_FAILURE) {
        failure_set(f, 1, SV_FROM_NODE_FAILURE, "node", in->said.host);
    } else if (rec && rec->kind == FAILURE_HANG) {
        failure_set(f, 1, SV_FROM_HANG_RECORD, "hang", rec->culprit_host);
    } else if (rec && rec->kind == FAILURE_PEER_LOST && in->said.kind == SV_SAID_TASK_KILLED) {
        /* One death, seen twice: the neighbours' records say who (the
         * culprit), the launcher how (the signal: the kind a relaunch on
         * one rank, with no neighbour, would be told by the launcher alone). */
        failure_set(f, 1, SV_FROM_TASK_KILLED, in->said.what[0] ? in->said.what : "killed",
                    rec->culprit_host);
    } else if (rec) {
        int infra = rec->kind == FAILURE_PEER_LOST || rec->kind == FAILURE_DEVICE;
        const char *culprit = rec->kind == FAILURE_PEER_LOST ? rec->culprit_host
                              : rec->kind == FAILURE_DEVICE  ? rec->host
                                                             : "";
        failure_set(f, infra, SV_FROM_RECORD, failure_kind_name(rec->kind), culprit);
    } else if (in->status == STATUS_HANG) {
        failure_set(f, 1, SV_FROM_HANG_STATUS, "hang", NULL);
    } else if (in->said.kind == SV_SAID_TASK_EXITED && in->said.code != STATUS_REQUEUE &&
               in->said.code != STATUS_HANG) {
        failure_set(f, 0, SV_FROM_TASK_EXITED, "exit", NULL);
    } else if (in->said.kind == SV_SAID_TASK_KILLED) {
        failure_set(f, 1, SV_FROM_TASK_KILLED, in->said.what[0] ? in->said.what : "killed",
                    in->said.host);
    } else if (in->said.kind == SV_SAID_CONTROLLER) {
        failure_set(f, 1, SV_FROM_CONTROLLER, "controller", NULL);
    } else if (in->killed || (in->status > 128 && in->status <= 192)) {
        snprintf(what, sizeof what, "launcher %d", in->status);
        failure_set(f, 1, SV_FROM_LAUNCHER_KILLED, what, NULL);
    } else {
        failure_set(f, 0, SV_FROM_STATUS, "exit", NULL);
    }
}

/* ---- the decision's parts ------------------------------------------------------- */

/* Fill out's requeue: the job, the suspects, the exclusions (with the
 * option), the status to end with when it fails; or, at the restart cap,
 * the end (rule 16). */
static void requeue(const sv_input_t *in, sv_decision_t *out, sv_rule_t rule, int status,
                    const name_set_t *suspects)
{
    char why[SV_REASON_MAX];
    out->wanted = rule;
    out->status = status;
    for (int i = 0; suspects && i < suspects->n; i++) {
        snprintf(out->suspect[out->n_suspect++], SV_NAME_MAX, "%s", suspects->name[i]);
        if (in->set.requeue_exclude)
            snprintf(out->exclude[out->n_exclude++], SV_NAME_MAX, "%s", suspects->name[i]);
    }
    if (in->restart_count >= in->set.max_restarts) {
        snprintf(why, sizeof why, "%s", out->reason);
        out->action = SV_END;
        out->rule = SV_RULE_RESTART_CAP;
        out->n_exclude = 0;
        say(out, "%s; restart cap reached (%lld of FTRAIN_MAX_RESTARTS=%lld): not requeueing",
            why, (long long)in->restart_count, (long long)in->set.max_restarts);
        return;
    }
    out->action = SV_REQUEUE;
    out->rule = rule;
}

/* The nodes a relaunch may use into out->use: held, not excluded, not
 * marked bad (when SLURM answered). */
static void healthy(const sv_input_t *in, const name_set_t *excluded, sv_decision_t *out)
{
    out->n_use = 0;
    for (int i = 0; i < in->n_nodes; i++) {
        if (set_has(excluded, in->nodes[i].name))
            continue;
        if (in->states_known && (in->nodes[i].state & SV_NODE_BAD))
            continue;
        out->use[out->n_use++] = i;
    }
}

/* 1 when f is a rank that died: the launcher saw a task die of a signal,
 * or its neighbours wrote peer_lost records (they do not know the signal). */
static int a_death(const sv_failure_t *f)
{
    return f->from == SV_FROM_TASK_KILLED || strcmp(f->what, "peer_lost") == 0;
}

/* 1 when this failure is the one before again, not past its step (rule
 * 11); retrying is the node spared for this launch ("" none).  A death is
 * a death however it was seen. */
static int same_again(const sv_failure_t *f, const sv_launch_t *last, const char *retrying)
{
    if (!last || strcmp(f->what, "node") == 0 || strcmp(f->what, "controller") == 0 ||
        (strcmp(f->what, last->failure.what) != 0 && !(a_death(f) && a_death(&last->failure))))
        return 0;
    if (retrying[0] && strcmp(f->culprit, retrying) == 0 && f->step == SV_STEP_STARTUP)
        return 0;
    int64_t s = f->step, was = last->failure.step;
    return s == was || (s != SV_STEP_STARTUP && was != SV_STEP_STARTUP && s <= was);
}

/* Check what the function relies on.  @return SV_OK or SV_EINVAL. */
static int check_input(const sv_input_t *in, sv_decision_t *out)
{
    const char *bad = in->n_nodes < 0 || in->n_nodes > SV_NODES_MAX ? "n_nodes"
                      : in->n_nodes && !in->nodes                   ? "nodes"
                      : in->n_history < 0 || in->n_history > SV_HISTORY_MAX ? "n_history"
                      : in->n_history && !in->history                       ? "history"
                      : in->n_records < 0                                   ? "n_records"
                      : in->n_records && !in->records                       ? "records"
                      : in->set.min_nodes < 1                               ? "min_nodes"
                      : in->set.max_relaunches < 0 || in->set.max_relaunches > SV_HISTORY_MAX
                          ? "max_relaunches"
                      : in->set.max_restarts < 0 ? "max_restarts"
                                                 : NULL;
    if (!bad)
        return SV_OK;
    say(out, "supervise_decide: input '%s' is out of range", bad);
    return SV_EINVAL;
}

/* ---- the rules ---------------------------------------------------------------- */

/* Rules 1-3. */
static void before_launch(const sv_input_t *in, sv_decision_t *out)
{
    if (in->term) {
        out->action = SV_END;
        out->rule = SV_RULE_TERM_BEFORE_LAUNCH;
        out->status = STATUS_TERM;
        say(out, "TERM before the launch: nothing started, nothing to requeue");
    } else if (in->stop) {
        say(out, "stop requested before the launch (nothing to save): the time limit is "
            "within the signal lead");
        requeue(in, out, SV_RULE_STOP_BEFORE_LAUNCH, STATUS_REQUEUE, NULL);
    } else {
        out->action = SV_LAUNCH;
        out->rule = SV_RULE_FIRST_LAUNCH;
        say(out, "first launch in this allocation, on its %d node(s)", in->n_nodes);
    }
}

/* Rules 4-8; @return 1 when one of them decided. */
static int planned_end(const sv_input_t *in, sv_decision_t *out)
{
    out->status = in->status;
    if (in->status == STATUS_DONE) {
        out->action = SV_END;
        out->rule = SV_RULE_DONE;
        say(out, "done: training finished");
    } else if (in->status == STATUS_REQUEUE && in->term) {
        out->action = SV_END;
        out->rule = SV_RULE_TERM_AFTER_CHECKPOINT;
        say(out, "checkpointed, but TERM came (time limit, preemption or cancel): not "
            "requeueing; SLURM requeues preempted jobs itself");
    } else if (in->status == STATUS_REQUEUE) {
        say(out, "checkpointed");
        requeue(in, out, SV_RULE_CHECKPOINTED, STATUS_REQUEUE, NULL);
    } else if (in->term) {
        out->action = SV_END;
        out->rule = SV_RULE_TERM_AFTER_FAILURE;
        say(out, "failed with status %d after TERM: not relaunching", in->status);
    } else if (in->stop && in->status == 128 + in->set.stop_signal) {
        say(out, "the launcher was ended by the forwarded stop signal (status %d) before it "
            "could take it: nothing saved since the checkpoint before", in->status);
        requeue(in, out, SV_RULE_STOP_KILLED_LAUNCHER, in->status, NULL);
    } else {
        return 0;
    }
    return 1;
}

/* The culprit: spared, or excluded (before the node count). */
static void place_culprit(const sv_input_t *in, const name_set_t *spared, name_set_t *excluded,
                          sv_decision_t *out)
{
    const sv_failure_t *f = &out->failure;
    if (!f->culprit[0])
        return;
    if (!in->set.program && f->step == SV_STEP_STARTUP && strcmp(f->what, "node") != 0 &&
        strcmp(f->what, "hang") != 0 && in->n_history + 2 <= in->set.max_relaunches &&
        !set_has(spared, f->culprit)) {
        out->culprit = SV_CULPRIT_SPARED;
    } else {
        out->culprit = SV_CULPRIT_EXCLUDED;
        set_add(excluded, f->culprit);
    }
}

/* Rules 13-15, once the culprit is placed. */
static void relaunch_or_requeue(const sv_input_t *in, name_set_t *excluded, sv_decision_t *out)
{
    const char *culprit = out->failure.culprit;
    healthy(in, excluded, out);
    if (out->n_use < in->set.min_nodes && out->culprit == SV_CULPRIT_EXCLUDED) {
        /* Only suspected, not lost: rather the culprit than no relaunch. */
        set_del(excluded, culprit);
        healthy(in, excluded, out);
        if (out->n_use >= in->set.min_nodes) {
            out->culprit = SV_CULPRIT_KEPT;
        } else { /* too few even with it: it stays out, of a requeue too */
            set_add(excluded, culprit);
            healthy(in, excluded, out);
        }
    }
    if (out->n_use < in->set.min_nodes) {
        say(out, "%d healthy node(s) left, fewer than FTRAIN_MIN_NODES=%d", out->n_use,
            in->set.min_nodes);
        requeue(in, out, SV_RULE_TOO_FEW_NODES, in->status, excluded);
        return;
    }
    double need = in->to_ckpt_s >= 0 ? in->to_ckpt_s : in->set.relaunch_need_s;
    if (in->time_left_s >= 0 && in->time_left_s <= need) {
        say(out, "%.0f s left in the allocation, and a launch needs %.0f s to its first "
            "checkpoint (%s)", in->time_left_s, need,
            in->to_ckpt_s >= 0 ? "as the failed launch took" : "FTRAIN_RELAUNCH_NEED");
        requeue(in, out, SV_RULE_NO_TIME, in->status, excluded);
        return;
    }
    out->action = SV_RELAUNCH;
    out->rule = SV_RULE_RELAUNCH;
    say(out, "relaunch %d of at most %d on %d node(s) after %s%s%s", in->n_history + 1,
        in->set.max_relaunches, out->n_use, out->failure.what,
        out->culprit == SV_CULPRIT_SPARED ? "; its node kept for one more try: "
        : out->culprit == SV_CULPRIT_KEPT ? "; its node kept (too few without it): "
        : out->culprit == SV_CULPRIT_EXCLUDED ? "; left out: "
                                              : "",
        out->culprit ? culprit : "");
}

/* Rules 9-15, after a failure the planned ends did not take. */
static void after_failure(const sv_input_t *in, sv_decision_t *out)
{
    name_set_t excluded = {0}, spared = {0};
    const sv_launch_t *last = in->n_history ? &in->history[in->n_history - 1] : NULL;
    const char *retrying = last && last->culprit == SV_CULPRIT_SPARED ? last->failure.culprit : "";
    for (int i = 0; i < in->n_history; i++) {
        if (in->history[i].culprit == SV_CULPRIT_EXCLUDED)
            set_add(&excluded, in->history[i].failure.culprit);
        if (in->history[i].culprit == SV_CULPRIT_SPARED)
            set_add(&spared, in->history[i].failure.culprit);
    }
    classify(in, &out->failure);
    const sv_failure_t *f = &out->failure;
    char refused[64] = "";
    if (in->refused_records)
        snprintf(refused, sizeof refused, " (%d failure record(s) refused: decided from the "
                 "status)", in->refused_records);
    if (!f->infra) {
        out->action = SV_END;
        out->rule = SV_RULE_USER_ERROR;
        say(out, "failed with status %d: not a lost rank, node or hang (%s, %s)%s: not "
            "relaunching", in->status, supervise_from_name(f->from), f->what, refused);
    } else if (in->stop) {
        set_add(&excluded, f->culprit);
        say(out, "failed (%s) after the stop warning: time is nearly up", f->what);
        requeue(in, out, SV_RULE_FAILED_AFTER_STOP, in->status, &excluded);
    } else if (same_again(f, last, retrying)) {
        out->action = SV_END;
        out->rule = SV_RULE_SAME_FAILURE;
        say(out, "failed again (%s) before getting past the step where the launch before "
            "failed the same way: a deterministic fault, not relaunching", f->what);
    } else if (in->n_history >= in->set.max_relaunches) {
        out->action = SV_END;
        out->rule = SV_RULE_RELAUNCH_CAP;
        say(out, "%d relaunches in this allocation (FTRAIN_MAX_RELAUNCHES=%d): not relaunching",
            in->n_history, in->set.max_relaunches);
    } else {
        place_culprit(in, &spared, &excluded, out);
        relaunch_or_requeue(in, &excluded, out);
    }
}

int supervise_decide(const sv_input_t *in, sv_decision_t *out)
{
    memset(out, 0, sizeof *out);
    if (check_input(in, out) != SV_OK)
        return SV_EINVAL;
    supervise_job_ref(in->job_id, in->array_job_id, in->array_task_id, out->job_ref,
                      sizeof out->job_ref);
    if (!in->launched)
        before_launch(in, out);
    else if (!planned_end(in, out))
        after_failure(in, out);
    return SV_OK;
}

/* ---- the deputy (policy.h: rules D1-D9) ----------------------------------------- */

const char *supervise_deputy_rule_name(sv_deputy_rule_t rule)
{
    static const char *const names[] = {
        "none", "supervisor-ended", "later-run", "fresh", "ask", "no-answer",
        "job-moved-on", "host-alive", "restart-cap", "host-lost",
    };
    return rule >= 0 && (size_t)rule < sizeof names / sizeof names[0] ? names[rule] : "unknown";
}

const char *supervise_deputy_action_name(sv_deputy_action_t action)
{
    static const char *const names[] = {"none", "watch", "ask", "exit", "requeue", "end"};
    return action >= 0 && (size_t)action < sizeof names / sizeof names[0] ? names[action]
                                                                          : "unknown";
}

static void deputy_say(sv_deputy_decision_t *out, sv_deputy_action_t action,
                       sv_deputy_rule_t rule, const char *fmt, ...)
{
    va_list ap;
    out->action = action;
    out->rule = rule;
    va_start(ap, fmt);
    vsnprintf(out->reason, sizeof out->reason, fmt, ap);
    va_end(ap);
}

int supervise_deputy_decide(const sv_deputy_input_t *in, sv_deputy_decision_t *out)
{
    memset(out, 0, sizeof *out);
    if (!(in->stale_s > 0) || in->restart_count < 0 || in->max_restarts < 0) {
        snprintf(out->reason, sizeof out->reason,
                 "supervise_deputy_decide: input '%s' is out of range",
                 !(in->stale_s > 0) ? "stale_s" : in->restart_count < 0 ? "restart_count"
                                                                        : "max_restarts");
        return SV_EINVAL;
    }
    unsigned lost = in->host_state & (SV_NODE_DOWN | SV_NODE_NOT_RESPONDING);
    if (in->beat == SV_BEAT_ENDED && in->beat_restart == in->restart_count) {
        deputy_say(out, SV_DEPUTY_EXIT, SV_DRULE_SUPERVISOR_ENDED,
                   "the supervisor on %s is ending the job itself", in->host);
    } else if (in->beat != SV_BEAT_NONE && in->beat_restart > in->restart_count) {
        deputy_say(out, SV_DEPUTY_EXIT, SV_DRULE_LATER_RUN,
                   "the heartbeat is restart %lld's, a later run of the job than this one "
                   "(restart %lld)",
                   (long long)in->beat_restart, (long long)in->restart_count);
    } else if (in->silent_s < in->stale_s) {
        deputy_say(out, SV_DEPUTY_WATCH, SV_DRULE_FRESH, "the supervisor's heartbeat is fresh");
    } else if (!in->asked) {
        deputy_say(out, SV_DEPUTY_ASK, SV_DRULE_ASK,
                   "the supervisor on %s has been silent for %.0f s (FTRAIN_DEPUTY_STALE=%.0f): "
                   "asking SLURM about it",
                   in->host, in->silent_s, in->stale_s);
    } else if (!in->answered) {
        deputy_say(out, SV_DEPUTY_WATCH, SV_DRULE_NO_ANSWER,
                   "the supervisor on %s has been silent for %.0f s, and SLURM did not answer "
                   "in time: asking again",
                   in->host, in->silent_s);
    } else if (!in->job_running || in->job_restarts != in->restart_count ||
               (in->batch_host[0] && strcmp(in->batch_host, in->host) != 0)) {
        deputy_say(out, SV_DEPUTY_EXIT, SV_DRULE_JOB_MOVED_ON,
                   "SLURM says job %s is %s (restart %lld, batch host %s): this run of it "
                   "(restart %lld on %s) is over",
                   in->job_ref, in->job_running ? "running" : "not running",
                   (long long)in->job_restarts, in->batch_host[0] ? in->batch_host : "unnamed",
                   (long long)in->restart_count, in->host);
    } else if (!lost) {
        deputy_say(out, SV_DEPUTY_WATCH, SV_DRULE_HOST_ALIVE,
                   "the supervisor on %s has been silent for %.0f s, but SLURM does not say %s "
                   "is down or not responding: waiting",
                   in->host, in->silent_s, in->host);
    } else if (in->restart_count >= in->max_restarts) {
        deputy_say(out, SV_DEPUTY_END, SV_DRULE_RESTART_CAP,
                   "the batch host %s is lost (silent for %.0f s, SLURM says %s); restart cap "
                   "reached (%lld of FTRAIN_MAX_RESTARTS=%lld): cancelling job %s rather than "
                   "holding its allocation",
                   in->host, in->silent_s, lost & SV_NODE_DOWN ? "DOWN" : "NOT_RESPONDING",
                   (long long)in->restart_count, (long long)in->max_restarts, in->job_ref);
    } else {
        deputy_say(out, SV_DEPUTY_REQUEUE, SV_DRULE_HOST_LOST,
                   "the batch host %s is lost (the supervisor silent for %.0f s, SLURM says "
                   "%s): requeue job %s (restart %lld of at most %lld)%s%s",
                   in->host, in->silent_s, lost & SV_NODE_DOWN ? "DOWN" : "NOT_RESPONDING",
                   in->job_ref, (long long)in->restart_count + 1, (long long)in->max_restarts,
                   in->requeue_exclude ? ", without node " : "",
                   in->requeue_exclude ? in->host : "");
        if (in->requeue_exclude) {
            snprintf(out->exclude[0], SV_NAME_MAX, "%s", in->host);
            out->n_exclude = 1;
        }
    }
    return SV_OK;
}
