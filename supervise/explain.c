/*
 * explain.c - the log's words for the policy's decisions (explain.h).
 */
#include "supervise/explain.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "supervise/log.h"

/* The step in words: a number, or "start-up". */
static const char *step_text(int64_t step, char *buf, size_t cap)
{
    if (step == SV_STEP_STARTUP)
        return "start-up";
    snprintf(buf, cap, "%" PRId64, step);
    return buf;
}

const char *explain_failure(const sv_explain_t *x, const sv_input_t *in,
                            const sv_failure_t *f, char *buf, size_t cap)
{
    int sig = in->status - 128;
    const char *name = sig > 0 && sig < 65 ? sigabbrev_np(sig) : NULL;
    switch (f->from) {
    case SV_FROM_NODE_FAILURE:
        snprintf(buf, cap, "node %s failed", f->culprit);
        break;
    case SV_FROM_HANG_RECORD: {
        /* The record that named the culprit: its rank, and who wrote it. */
        const failure_t *rec = NULL;
        for (int i = 0; i < in->n_records && !rec; i++)
            if (in->records[i].kind == FAILURE_HANG &&
                strcmp(in->records[i].culprit_host, f->culprit) == 0)
                rec = &in->records[i];
        if (rec && rec->culprit_rank != FAILURE_NO_RANK)
            snprintf(buf, cap,
                     "a hang: rank %d (host %s) stopped making progress (the watchdog's failure "
                     "record, from rank %d)",
                     rec->culprit_rank, f->culprit, rec->rank);
        else
            snprintf(buf, cap, "a hang: host %s stopped making progress (the watchdog's failure "
                     "record)", f->culprit[0] ? f->culprit : "(none)");
        break;
    }
    case SV_FROM_RECORD:
        snprintf(buf, cap, "a failure record of kind %s%s%s", f->what,
                 f->culprit[0] ? " on " : "", f->culprit);
        break;
    case SV_FROM_HANG_STATUS:
        snprintf(buf, cap, "a hang (exit 76)");
        break;
    case SV_FROM_TASK_KILLED:
        if (x->detail && x->detail[0])
            snprintf(buf, cap, "a rank died: %s", x->detail);
        else
            snprintf(buf, cap, "a rank died: %s: %s", f->culprit, f->what);
        break;
    case SV_FROM_CONTROLLER:
        snprintf(buf, cap, "%s could not reach the SLURM controller (%s)", x->launcher,
                 x->detail && x->detail[0] ? x->detail : "no detail");
        break;
    case SV_FROM_LAUNCHER_KILLED:
        if (name)
            snprintf(buf, cap,
                     "%s itself was killed by signal %s (status %d) with no rank's message: "
                     "not the options or the data",
                     x->launcher, name, in->status);
        else
            snprintf(buf, cap,
                     "%s itself was killed by signal %d (status %d) with no rank's message: "
                     "not the options or the data",
                     x->launcher, sig, in->status);
        break;
    default:
        snprintf(buf, cap, "status %d (%s)", in->status, f->what);
        break;
    }
    return buf;
}

/* 1 when the rule comes after an infrastructure failure was classified. */
static int after_infra(sv_rule_t r)
{
    return r == SV_RULE_FAILED_AFTER_STOP || r == SV_RULE_SAME_FAILURE ||
           r == SV_RULE_RELAUNCH_CAP || r == SV_RULE_TOO_FEW_NODES || r == SV_RULE_NO_TIME ||
           r == SV_RULE_RELAUNCH;
}

void explain_before(const sv_explain_t *x, const sv_input_t *in, const sv_decision_t *d)
{
    char why[640], s[32];
    sv_rule_t r = d->rule == SV_RULE_RESTART_CAP ? d->wanted : d->rule;
    if (r == SV_RULE_TERM_BEFORE_LAUNCH)
        sv_log("TERM before launch; not starting %s", x->trainer);
    else if (r == SV_RULE_STOP_BEFORE_LAUNCH)
        sv_log("stop requested before launch; not starting %s", x->trainer);
    else if (r == SV_RULE_TERM_AFTER_FAILURE && x->term_late)
        sv_log("TERM came before relaunch %d could start: not relaunching; the job ends with "
               "the failed launch's status %d",
               in->n_history + 1, in->status);
    else if (r == SV_RULE_STOP_KILLED_LAUNCHER)
        sv_log("%s was ended by the forwarded %s (status %d) before it could take it: nothing "
               "saved since the checkpoint before, which the next run resumes from",
               x->trainer, x->stop_name, in->status);
    if (!after_infra(r))
        return;
    sv_log("failure at step %s: %s", step_text(d->failure.step, s, sizeof s),
           explain_failure(x, in, &d->failure, why, sizeof why));
    if (r == SV_RULE_FAILED_AFTER_STOP && x->stop_late)
        sv_log("%s came before relaunch %d could start: not relaunching", x->stop_name,
               in->n_history + 1);
    if (d->culprit == SV_CULPRIT_SPARED)
        sv_log("node %s kept for one more try: the rank there died before its first step; it "
               "is left out if that happens again",
               d->failure.culprit);
    else if (d->culprit == SV_CULPRIT_KEPT)
        sv_log("node %s kept: leaving it out would leave fewer than FTRAIN_MIN_NODES=%d",
               d->failure.culprit, in->set.min_nodes);
}

const char *explain_reason(const sv_explain_t *x, const sv_input_t *in, const sv_decision_t *d,
                           char *buf, size_t cap)
{
    char why[640], s1[32], s2[32], need[160];
    sv_rule_t r = d->rule == SV_RULE_RESTART_CAP ? d->wanted : d->rule;
    const sv_launch_t *last = in->n_history ? &in->history[in->n_history - 1] : NULL;
    if (in->to_ckpt_s >= 0)
        snprintf(need, sizeof need, "a launch took %.0f s to its first checkpoint", in->to_ckpt_s);
    else
        snprintf(need, sizeof need,
                 "a launch needs FTRAIN_RELAUNCH_NEED=%.0f s to its first checkpoint (the "
                 "launch before saved none)",
                 in->set.relaunch_need_s);
    buf[0] = '\0';
    switch (r) {
    case SV_RULE_STOP_BEFORE_LAUNCH:
        snprintf(buf, cap, "stop requested before the launch (nothing to save)");
        break;
    case SV_RULE_CHECKPOINTED:
        snprintf(buf, cap, "checkpointed");
        break;
    case SV_RULE_STOP_KILLED_LAUNCHER:
        snprintf(buf, cap, "stopped before it could checkpoint");
        break;
    case SV_RULE_USER_ERROR:
        snprintf(buf, cap,
                 "%s failed with status %d: not a lost rank, node or hang (bad options, data or "
                 "a refused resume%s%s: see the ranks' messages above); not relaunching",
                 x->trainer, in->status, d->failure.from == SV_FROM_RECORD ? "; failure record: " : "",
                 d->failure.from == SV_FROM_RECORD ? d->failure.what : "");
        break;
    case SV_RULE_FAILED_AFTER_STOP:
        if (x->stop_late)
            snprintf(buf, cap, "failed with status %d, then %s came (time is nearly up)",
                     in->status, x->stop_name);
        else
            snprintf(buf, cap, "failed after %s (time is nearly up)", x->stop_name);
        break;
    case SV_RULE_SAME_FAILURE:
        snprintf(buf, cap,
                 "error: failed again at step %s (%s) before getting past step %s, where the "
                 "launch before failed the same way: a deterministic fault, not bad luck; not "
                 "relaunching (see the ranks' messages above)",
                 step_text(d->failure.step, s1, sizeof s1),
                 explain_failure(x, in, &d->failure, why, sizeof why),
                 last ? step_text(last->failure.step, s2, sizeof s2) : "?");
        break;
    case SV_RULE_RELAUNCH_CAP:
        snprintf(buf, cap,
                 "error: %d relaunches in this allocation (FTRAIN_MAX_RELAUNCHES=%d): not "
                 "relaunching",
                 in->n_history, in->set.max_relaunches);
        break;
    case SV_RULE_TOO_FEW_NODES:
        snprintf(buf, cap, "%d healthy node(s) left (%s), fewer than FTRAIN_MIN_NODES=%d",
                 d->n_use, x->use && x->use[0] ? x->use : "none", in->set.min_nodes);
        break;
    case SV_RULE_NO_TIME:
        snprintf(buf, cap, "%.0f s left in the allocation, and %s", in->time_left_s, need);
        break;
    case SV_RULE_RELAUNCH:
        if (in->time_left_s >= 0)
            snprintf(s1, sizeof s1, "%.0f s left; ", in->time_left_s);
        else
            s1[0] = '\0';
        snprintf(buf, cap,
                 "relaunch %d of at most %d on %d node(s) %s (%s%s); %s resumes from the "
                 "newest good checkpoint",
                 in->n_history + 1, in->set.max_relaunches, d->n_use, x->use, s1, need,
                 x->trainer);
        break;
    default:
        break;
    }
    if (d->rule == SV_RULE_RESTART_CAP) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%srestart cap reached (%lld of FTRAIN_MAX_RESTARTS=%lld): not requeueing",
                 len ? "; " : "", (long long)in->restart_count, (long long)in->set.max_restarts);
    }
    return buf;
}
