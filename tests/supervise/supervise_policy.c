/*
 * supervise_policy.c - ftrain-supervise's policy (supervise/policy.h), one
 * table row per case, each naming the rule of slurm/train.sbatch's header
 * (and of policy.c's list) it covers: relaunch inside the allocation,
 * requeue, end; the caps; the same failure at the same step; too few
 * nodes; too little time; a failure after the stop warning; user errors;
 * the launcher killed by the stop signal; the controller unreachable;
 * array tasks; records missing or refused (the fallback to the status); a
 * culprit left out.  Then the same path through the fake SLURM adapter
 * (supervise/slurm_fake.c): query, decide, requeue.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervise/policy.h"
#include "supervise/slurm_fake.h"
#include "supervise/slurm_real.h"
#include "tap.h"

/* One case.  Zero is the default everywhere: nodes n1,n2,n3 all usable,
 * step 10, no checkpoint measured, time left unknown, the settings of
 * train.sbatch (3 relaunches, 1 node, 20 restarts), job 4242. */
typedef struct {
    const char *name; /* "rule: what the case is" */
    /* The input. */
    const char *nodes;   /* "n1,n2": the nodes held (default n1,n2,n3) */
    const char *states;  /* "n3=DOWN,n1=DRAIN" ("?": SLURM did not answer) */
    int launched, status, killed, term, stop;
    sv_said_kind_t said;
    const char *said_host, *said_what;
    int said_code;
    const char *records; /* "kind@host>culprit" items, comma-separated */
    int refused;
    int startup;         /* 1: no step finished (else step, default 10) */
    long step;
    double ckpt, left;   /* 0: none, unknown */
    const char *history; /* "what@step>culprit:action;..." (step s: start-up;
                            action x excluded, s spared, k kept, n none;
                            a what other than hang, node, controller and
                            peer_lost: a task's signal, as srun names it) */
    int restarts, max_relaunches, min_nodes, requeue_exclude, program, max_restarts;
    const char *job, *ajob, *atask;
    /* What must come out. */
    sv_action_t action;
    sv_rule_t rule;
    int exit;            /* the status, for SV_END and SV_REQUEUE */
    const char *use;     /* SV_RELAUNCH: the nodes, "n1,n3" */
    const char *exclude; /* SV_REQUEUE: the ExcNodeList additions ("" none) */
    const char *what;    /* the failure's kind, when given */
    sv_culprit_t culprit;
    const char *job_ref, *says;
} case_t;

#define R(x) SV_RULE_##x
#define NOTHING 0
enum { X = -2 }; /* "max_relaunches 0" (0 is the default, 3) */

static const case_t cases[] = {
    /* ---- before the first launch ---- */
    {"1 term-before-launch: TERM before anything ran ends with 143", .term = 1,
     .action = SV_END, .rule = R(TERM_BEFORE_LAUNCH), .exit = 143},
    {"1 term-before-launch: TERM and the stop warning: TERM wins", .term = 1, .stop = 1,
     .action = SV_END, .rule = R(TERM_BEFORE_LAUNCH), .exit = 143},
    {"2 stop-before-launch: the warning before the launch requeues (75)", .stop = 1,
     .action = SV_REQUEUE, .rule = R(STOP_BEFORE_LAUNCH), .exit = 75, .exclude = ""},
    {"2+16 stop-before-launch at the restart cap: the end, 75", .stop = 1, .restarts = 20,
     .action = SV_END, .rule = R(RESTART_CAP), .exit = 75, .says = "restart cap reached"},
    {"3 first-launch: the whole allocation", .action = SV_LAUNCH, .rule = R(FIRST_LAUNCH)},
    /* ---- planned ends ---- */
    {"4 done: status 0 ends with 0", .launched = 1, .action = SV_END, .rule = R(DONE), .exit = 0},
    {"4 done: status 0 after TERM still ends with 0", .launched = 1, .term = 1,
     .action = SV_END, .rule = R(DONE), .exit = 0},
    {"5 term-after-checkpoint: 75 then TERM: no requeue (SLURM requeues preempted jobs)",
     .launched = 1, .status = 75, .term = 1, .action = SV_END, .rule = R(TERM_AFTER_CHECKPOINT),
     .exit = 75},
    {"6 checkpointed: 75 requeues", .launched = 1, .status = 75, .stop = 1,
     .action = SV_REQUEUE, .rule = R(CHECKPOINTED), .exit = 75, .job_ref = "4242"},
    {"6 checkpointed: restart 19 of 20, the cap not reached: requeue", .launched = 1,
     .status = 75, .restarts = 19, .action = SV_REQUEUE, .rule = R(CHECKPOINTED), .exit = 75},
    {"6+16 checkpointed at the restart cap (20 of 20): the end, 75", .launched = 1, .status = 75,
     .restarts = 20, .action = SV_END, .rule = R(RESTART_CAP), .exit = 75},
    {"6+16 checkpointed, FTRAIN_MAX_RESTARTS=2 reached at restart 2", .launched = 1,
     .status = 75, .restarts = 2, .max_restarts = 2, .action = SV_END, .rule = R(RESTART_CAP),
     .exit = 75},
    {"7 term-after-failure: a rank died, then TERM: the failure's status", .launched = 1,
     .status = 137, .term = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .action = SV_END, .rule = R(TERM_AFTER_FAILURE), .exit = 137},
    {"8 stop-killed-launcher: the forwarded USR1 killed the launcher (138): requeue",
     .launched = 1, .status = 128 + SIGUSR1, .stop = 1, .action = SV_REQUEUE,
     .rule = R(STOP_KILLED_LAUNCHER), .exit = 138},
    {"8+16 stop-killed-launcher at the restart cap: the end with 138", .launched = 1,
     .status = 128 + SIGUSR1, .stop = 1, .restarts = 20, .action = SV_END,
     .rule = R(RESTART_CAP), .exit = 138},
    {"8 not: status 138 with no stop warning is a launcher killed (C8): relaunch",
     .launched = 1, .status = 128 + SIGUSR1, .action = SV_RELAUNCH, .rule = R(RELAUNCH),
     .use = "n1,n2,n3", .what = "launcher 138"},
    /* ---- user errors ---- */
    {"9 user-error C5: a task exited with code 1 first: the end, no node blamed",
     .launched = 1, .status = 1, .said = SV_SAID_TASK_EXITED, .said_host = "n2", .said_code = 1,
     .action = SV_END, .rule = R(USER_ERROR), .exit = 1},
    {"9 user-error C9: bad options (status 2), nothing said", .launched = 1, .status = 2,
     .action = SV_END, .rule = R(USER_ERROR), .exit = 2},
    {"9 user-error C3: a resume_refused record", .launched = 1, .status = 1,
     .records = "resume_refused@n1", .action = SV_END, .rule = R(USER_ERROR), .exit = 1,
     .what = "resume_refused"},
    {"9 user-error C3: bad_data before a peer_lost (a consequence) decides", .launched = 1,
     .status = 1, .records = "peer_lost@n1>n2,bad_data@n2", .action = SV_END,
     .rule = R(USER_ERROR), .exit = 1, .what = "bad_data"},
    {"9 user-error C3: a nan record even with a task killed", .launched = 1, .status = 137,
     .said = SV_SAID_TASK_KILLED, .said_host = "n2", .records = "nan@n1", .action = SV_END,
     .rule = R(USER_ERROR), .exit = 137, .what = "nan"},
    {"9 fallback: garbage records refused, status 1: the status decides (the user's)",
     .launched = 1, .status = 1, .refused = 2, .action = SV_END, .rule = R(USER_ERROR),
     .exit = 1, .says = "2 failure record(s) refused"},
    /* ---- what failed: not the user's ---- */
    {"C4 fallback: status 76, no record: a hang, no culprit: relaunch on all", .launched = 1,
     .status = 76, .action = SV_RELAUNCH, .rule = R(RELAUNCH), .use = "n1,n2,n3",
     .what = "hang", .culprit = SV_CULPRIT_NONE},
    {"C4 fallback: status 76, the records garbage: relaunch all the same", .launched = 1,
     .status = 76, .refused = 3, .action = SV_RELAUNCH, .rule = R(RELAUNCH), .use = "n1,n2,n3",
     .what = "hang"},
    {"C2 a hang record naming n3: relaunch without n3 (the culprit left out)", .launched = 1,
     .status = 76, .records = "hang@n1>n3", .action = SV_RELAUNCH, .rule = R(RELAUNCH),
     .use = "n1,n2", .what = "hang", .culprit = SV_CULPRIT_EXCLUDED},
    {"C2 two hang records: the one with a culprit decides", .launched = 1, .status = 76,
     .records = "hang@n1,hang@n2>n3", .action = SV_RELAUNCH, .use = "n1,n2",
     .culprit = SV_CULPRIT_EXCLUDED},
    {"C2 a hang at start-up is never spared: its culprit is left out", .launched = 1,
     .status = 76, .startup = 1, .records = "hang@n1>n2", .action = SV_RELAUNCH,
     .use = "n1,n3", .culprit = SV_CULPRIT_EXCLUDED},
    {"C3 a peer_lost record names the peer n2: relaunch without it", .launched = 1,
     .status = 1, .records = "peer_lost@n1>n2", .action = SV_RELAUNCH, .use = "n1,n3",
     .what = "peer_lost", .culprit = SV_CULPRIT_EXCLUDED},
    {"C3 a device record on n1: relaunch without n1", .launched = 1, .status = 1,
     .records = "device@n1", .action = SV_RELAUNCH, .use = "n2,n3", .what = "device"},
    {"C3 an 'other' record says nothing: the launcher's words decide (a rank killed)",
     .launched = 1, .status = 137, .records = "other@n1", .said = SV_SAID_TASK_KILLED,
     .said_host = "n2", .said_what = "Killed", .action = SV_RELAUNCH, .use = "n1,n3",
     .what = "Killed"},
    {"C1 node failure on n3 (DOWN): relaunch on n1,n2", .launched = 1, .status = 1,
     .said = SV_SAID_NODE_FAILURE, .said_host = "n3", .states = "n3=DOWN",
     .action = SV_RELAUNCH, .use = "n1,n2", .what = "node"},
    {"C6 a rank killed on n2 at step 10: relaunch without n2", .launched = 1, .status = 137,
     .said = SV_SAID_TASK_KILLED, .said_host = "n2", .said_what = "Killed",
     .action = SV_RELAUNCH, .use = "n1,n3", .culprit = SV_CULPRIT_EXCLUDED},
    {"C7 the controller unreachable (status 1): relaunch on every node", .launched = 1,
     .status = 1, .said = SV_SAID_CONTROLLER, .startup = 1, .action = SV_RELAUNCH,
     .use = "n1,n2,n3", .what = "controller"},
    {"C8 the launcher itself killed (137, no rank's word): relaunch on every node",
     .launched = 1, .status = 137, .killed = 1, .action = SV_RELAUNCH, .use = "n1,n2,n3",
     .what = "launcher 137"},
    /* ---- a failure after the stop warning ---- */
    {"10 failed-after-stop: a rank died after the warning: requeue without it",
     .launched = 1, .status = 137, .stop = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .requeue_exclude = 1, .history = "Killed@5>n1:x", .action = SV_REQUEUE,
     .rule = R(FAILED_AFTER_STOP), .exit = 137, .exclude = "n1,n2"},
    {"10 failed-after-stop, FTRAIN_REQUEUE_EXCLUDE=0: requeue, no node left out",
     .launched = 1, .status = 137, .stop = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .action = SV_REQUEUE, .rule = R(FAILED_AFTER_STOP), .exit = 137, .exclude = ""},
    {"10+16 failed-after-stop at the restart cap: the end with the failure's status",
     .launched = 1, .status = 137, .stop = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .restarts = 20, .action = SV_END, .rule = R(RESTART_CAP), .exit = 137},
    /* ---- the same failure again ---- */
    {"11 same-failure: Killed again at step 10, where the launch before failed: the end",
     .launched = 1, .status = 137, .said = SV_SAID_TASK_KILLED, .said_host = "n3",
     .said_what = "Killed", .history = "Killed@10>n2:x", .action = SV_END,
     .rule = R(SAME_FAILURE), .exit = 137},
    {"11 same-failure: a hang again at an earlier step (8 <= 10)", .launched = 1, .status = 76,
     .step = 8, .history = "hang@10>:n", .action = SV_END, .rule = R(SAME_FAILURE), .exit = 76},
    {"11 same-failure: both at start-up (another node than the one spared)", .launched = 1,
     .status = 137, .startup = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .said_what = "Killed", .history = "Killed@s>n3:s", .action = SV_END,
     .rule = R(SAME_FAILURE), .exit = 137},
    {"11 same-failure: a death again at step 10, seen in peer_lost records before and by the "
     "launcher alone now (one rank left, no neighbour): the end",
     .launched = 1, .status = 137, .said = SV_SAID_TASK_KILLED, .said_host = "n3",
     .said_what = "Killed", .history = "peer_lost@10>n2:x", .action = SV_END,
     .rule = R(SAME_FAILURE), .exit = 137},
    {"11 same-failure: peer_lost records again at step 10 after a launcher's Killed there",
     .launched = 1, .status = 76, .records = "peer_lost@n1>n3", .history = "Killed@10>n2:x",
     .action = SV_END, .rule = R(SAME_FAILURE), .exit = 76},
    {"C3+C6: peer_lost records and the launcher's Killed: one death, the launcher's kind, the "
     "records' culprit",
     .launched = 1, .status = 137, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .said_what = "Killed", .records = "peer_lost@n1>n2", .action = SV_RELAUNCH,
     .use = "n1,n3", .what = "Killed", .culprit = SV_CULPRIT_EXCLUDED},
    {"11 not: a death after a hang at the same step: relaunch", .launched = 1, .status = 76,
     .records = "peer_lost@n1>n3", .history = "hang@10>:n", .action = SV_RELAUNCH,
     .use = "n1,n2"},
    {"11 not: past the step before (12 > 10): relaunch", .launched = 1, .status = 76,
     .step = 12, .history = "hang@10>:n", .action = SV_RELAUNCH, .rule = R(RELAUNCH)},
    {"11 not: another kind at the same step (a hang after a kill)", .launched = 1,
     .status = 76, .history = "Killed@10>n2:x", .action = SV_RELAUNCH, .use = "n1,n3"},
    {"11 not: a node lost twice at the same step is never a deterministic fault",
     .launched = 1, .status = 1, .said = SV_SAID_NODE_FAILURE, .said_host = "n3",
     .history = "node@10>n2:x", .action = SV_RELAUNCH, .use = "n1"},
    {"11 not: the controller unreachable twice at start-up", .launched = 1, .status = 1,
     .startup = 1, .said = SV_SAID_CONTROLLER, .history = "controller@s>:n",
     .action = SV_RELAUNCH, .use = "n1,n2,n3"},
    {"11 not: the spared node dies again at start-up: it is left out now", .launched = 1,
     .status = 137, .startup = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n3",
     .said_what = "Killed", .history = "Killed@s>n3:s", .action = SV_RELAUNCH,
     .use = "n1,n2", .culprit = SV_CULPRIT_EXCLUDED},
    /* ---- the relaunch cap ---- */
    {"12 relaunch-cap: 3 relaunches done (FTRAIN_MAX_RELAUNCHES=3): the end", .launched = 1,
     .status = 76, .step = 40, .history = "hang@10>:n;Killed@20>n1:x;hang@30>:n",
     .action = SV_END, .rule = R(RELAUNCH_CAP), .exit = 76},
    {"12 not reached: 2 relaunches done: relaunch 3", .launched = 1, .status = 76,
     .step = 40, .history = "hang@10>:n;Killed@20>n1:x", .action = SV_RELAUNCH,
     .use = "n2,n3", .says = "relaunch 3 of at most 3"},
    {"12 relaunch-cap: FTRAIN_MAX_RELAUNCHES=0: the first failure ends", .launched = 1,
     .status = 76, .max_relaunches = X, .action = SV_END, .rule = R(RELAUNCH_CAP), .exit = 76},
    /* ---- the culprit: spared or left out ---- */
    {"culprit spared: a rank died at start-up on n2: one more try with it", .launched = 1,
     .status = 137, .startup = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .said_what = "Killed", .action = SV_RELAUNCH, .use = "n1,n2,n3",
     .culprit = SV_CULPRIT_SPARED},
    {"culprit not spared under FTRAIN_PROGRAM: left out", .launched = 1, .status = 137,
     .startup = 1, .program = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .action = SV_RELAUNCH, .use = "n1,n3", .culprit = SV_CULPRIT_EXCLUDED},
    {"culprit not spared when one relaunch is left: left out", .launched = 1, .status = 137,
     .startup = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2", .said_what = "Killed",
     .history = "hang@10>:n;node@20>n1:x", .action = SV_RELAUNCH, .use = "n3",
     .culprit = SV_CULPRIT_EXCLUDED},
    /* ---- the nodes ---- */
    {"13 culprit kept: without n2 one node is left, FTRAIN_MIN_NODES=2", .launched = 1,
     .status = 137, .nodes = "n1,n2", .min_nodes = 2, .said = SV_SAID_TASK_KILLED,
     .said_host = "n2", .action = SV_RELAUNCH, .use = "n1,n2", .culprit = SV_CULPRIT_KEPT},
    {"13 too-few-nodes: n1 drained, even with n2 one node: requeue without n2",
     .launched = 1, .status = 137, .nodes = "n1,n2", .states = "n1=DRAIN", .min_nodes = 2,
     .requeue_exclude = 1, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .action = SV_REQUEUE, .rule = R(TOO_FEW_NODES), .exit = 137, .exclude = "n2",
     .culprit = SV_CULPRIT_EXCLUDED},
    {"13 every bad state is left out (DOWN, DRAIN, FAIL, NOT_RESPONDING, none named)",
     .launched = 1, .status = 76, .nodes = "n1,n2,n3,n4,n5,n6",
     .states = "n1=DOWN,n2=DRAIN,n3=FAIL,n4=NOT_RESPONDING,n5=UNKNOWN", .action = SV_RELAUNCH,
     .use = "n6"},
    {"13 SLURM did not answer: only the culprit is left out", .launched = 1, .status = 137,
     .states = "?n1=DOWN", .said = SV_SAID_TASK_KILLED, .said_host = "n2",
     .action = SV_RELAUNCH, .use = "n1,n3"},
    {"13 too-few-nodes: FTRAIN_MIN_NODES=3 on a 2-node job: requeue", .launched = 1,
     .status = 76, .nodes = "n1,n2", .min_nodes = 3, .action = SV_REQUEUE,
     .rule = R(TOO_FEW_NODES), .exit = 76},
    {"13 nodes left out before stay out (n1), the culprit kept to reach 2", .launched = 1,
     .status = 137, .min_nodes = 2, .history = "node@5>n1:x", .said = SV_SAID_TASK_KILLED,
     .said_host = "n3", .action = SV_RELAUNCH, .use = "n2,n3", .culprit = SV_CULPRIT_KEPT},
    /* ---- the time left ---- */
    {"14 no-time: 40 s left, nothing measured (FTRAIN_RELAUNCH_NEED 60): requeue without n2",
     .launched = 1, .status = 137, .left = 40, .requeue_exclude = 1,
     .said = SV_SAID_TASK_KILLED, .said_host = "n2", .action = SV_REQUEUE, .rule = R(NO_TIME),
     .exit = 137, .exclude = "n2", .says = "FTRAIN_RELAUNCH_NEED"},
    {"14 no-time: exactly 60 s left: requeue (not longer than the need)", .launched = 1,
     .status = 76, .left = 60, .action = SV_REQUEUE, .rule = R(NO_TIME), .exit = 76},
    {"14 not: 61 s left: relaunch", .launched = 1, .status = 76, .left = 61,
     .action = SV_RELAUNCH, .rule = R(RELAUNCH)},
    {"14 no-time: the launch took 100 s to its first checkpoint, 90 s left", .launched = 1,
     .status = 76, .ckpt = 100, .left = 90, .action = SV_REQUEUE, .rule = R(NO_TIME),
     .exit = 76, .says = "as the failed launch took"},
    {"14 not: the launch took 100 s, 120 s left: relaunch", .launched = 1, .status = 76,
     .ckpt = 100, .left = 120, .action = SV_RELAUNCH},
    /* ---- array tasks ---- */
    {"array: the task with the array's own id requeues as 4242_1", .launched = 1,
     .status = 75, .ajob = "4242", .atask = "1", .action = SV_REQUEUE, .rule = R(CHECKPOINTED),
     .exit = 75, .job_ref = "4242_1"},
    {"array: another task (id 4243) requeues by its own id", .launched = 1, .status = 75,
     .job = "4243", .ajob = "4242", .atask = "0", .action = SV_REQUEUE, .job_ref = "4243"},
    {"array: a plain job with inherited array variables requeues by its id", .launched = 1,
     .status = 75, .ajob = "4000", .atask = "3", .action = SV_REQUEUE, .job_ref = "4242"},
};

/* ---- building the input ---------------------------------------------------------- */

static sv_node_t nodes[16];
static failure_t records[8];
static sv_launch_t history[8];

static unsigned state_flags(const char *word)
{
    return strcmp(word, "DOWN") == 0 ? SV_NODE_DOWN
           : strcmp(word, "DRAIN") == 0 ? SV_NODE_DRAIN
           : strcmp(word, "FAIL") == 0 ? SV_NODE_FAIL
           : strcmp(word, "NOT_RESPONDING") == 0 ? SV_NODE_NOT_RESPONDING
           : strcmp(word, "UNKNOWN") == 0 ? SV_NODE_UNKNOWN
                                          : 0;
}

/* Split spec on sep into items[] (each at most 127 bytes).  @return the count. */
static int split(const char *spec, char sep, char items[][128], int max)
{
    int n = 0;
    const char *p = spec;
    while (p && *p && n < max) {
        const char *e = strchr(p, sep);
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(items[n++], 128, "%.*s", (int)len, p);
        p = e ? e + 1 : NULL;
    }
    return n;
}

/* "a@b>c": the parts into three buffers ("" when absent). */
static void parts(const char *item, char *a, char *b, char *c)
{
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s", item);
    char *gt = strchr(tmp, '>'), *at = strchr(tmp, '@');
    snprintf(c, 64, "%.63s", gt ? gt + 1 : "");
    if (gt)
        *gt = '\0';
    snprintf(b, 64, "%.63s", at ? at + 1 : "");
    if (at)
        *at = '\0';
    snprintf(a, 64, "%.63s", tmp);
}

static void build(const case_t *c, sv_input_t *in)
{
    char items[16][128], a[64], b[64], h[64];
    memset(in, 0, sizeof *in);
    in->set = (sv_settings_t){.max_restarts = c->max_restarts ? c->max_restarts : 20,
                              .max_relaunches = c->max_relaunches == X ? 0
                                                : c->max_relaunches ? c->max_relaunches : 3,
                              .min_nodes = c->min_nodes ? c->min_nodes : 1,
                              .relaunch_need_s = 60, .requeue_exclude = c->requeue_exclude,
                              .program = c->program, .stop_signal = SIGUSR1};
    snprintf(in->job_id, sizeof in->job_id, "%s", c->job ? c->job : "4242");
    snprintf(in->array_job_id, sizeof in->array_job_id, "%s", c->ajob ? c->ajob : "");
    snprintf(in->array_task_id, sizeof in->array_task_id, "%s", c->atask ? c->atask : "");
    in->restart_count = c->restarts;
    in->term = c->term, in->stop = c->stop;
    in->launched = c->launched, in->status = c->status, in->killed = c->killed;
    in->said = (sv_said_t){.kind = c->said, .code = c->said_code};
    snprintf(in->said.host, sizeof in->said.host, "%s", c->said_host ? c->said_host : "");
    snprintf(in->said.what, sizeof in->said.what, "%s", c->said_what ? c->said_what : "");
    in->refused_records = c->refused;
    in->step_done = c->startup ? SV_STEP_STARTUP : c->step ? c->step : 10;
    in->to_ckpt_s = c->ckpt ? c->ckpt : -1;
    in->time_left_s = c->left ? c->left : -1;
    in->n_nodes = split(c->nodes ? c->nodes : "n1,n2,n3", ',', items, 16);
    for (int i = 0; i < in->n_nodes; i++) {
        nodes[i] = (sv_node_t){.state = 0};
        snprintf(nodes[i].name, SV_NAME_MAX, "%.63s", items[i]);
    }
    in->nodes = nodes;
    const char *st = c->states ? c->states : "";
    in->states_known = st[0] != '?';
    int ns = split(st[0] == '?' ? st + 1 : st, ',', items, 16);
    for (int i = 0; i < ns; i++) {
        char *eq = strchr(items[i], '=');
        *eq = '\0';
        for (int j = 0; j < in->n_nodes; j++)
            if (strcmp(nodes[j].name, items[i]) == 0)
                nodes[j].state = state_flags(eq + 1);
    }
    in->n_records = split(c->records ? c->records : "", ',', items, 8);
    for (int i = 0; i < in->n_records; i++) {
        parts(items[i], a, b, h);
        failure_init(&records[i], (failure_kind_t)failure_kind_parse(a), i);
        snprintf(records[i].host, sizeof records[i].host, "%s", b);
        snprintf(records[i].culprit_host, sizeof records[i].culprit_host, "%s", h);
        records[i].time = 1000 + i;
    }
    in->records = records;
    in->n_history = split(c->history ? c->history : "", ';', items, 8);
    for (int i = 0; i < in->n_history; i++) {
        char *colon = strrchr(items[i], ':');
        char act = colon[1];
        *colon = '\0';
        parts(items[i], a, b, h);
        history[i] = (sv_launch_t){
            .culprit = act == 'x' ? SV_CULPRIT_EXCLUDED : act == 's' ? SV_CULPRIT_SPARED
                       : act == 'k' ? SV_CULPRIT_KEPT : SV_CULPRIT_NONE,
            .failure = {.infra = 1, .step = b[0] == 's' ? SV_STEP_STARTUP : atol(b)},
        };
        snprintf(history[i].failure.what, SV_WHAT_MAX, "%.31s", a);
        snprintf(history[i].failure.culprit, SV_NAME_MAX, "%s", h);
        /* Where the supervisor would have taken that kind from. */
        history[i].failure.from = strcmp(a, "hang") == 0         ? SV_FROM_HANG_RECORD
                                  : strcmp(a, "node") == 0       ? SV_FROM_NODE_FAILURE
                                  : strcmp(a, "controller") == 0 ? SV_FROM_CONTROLLER
                                  : strcmp(a, "peer_lost") == 0  ? SV_FROM_RECORD
                                                                 : SV_FROM_TASK_KILLED;
    }
    in->history = history;
}

/* The names of d's relaunch nodes or exclusions, comma-separated. */
static const char *use_list(const sv_input_t *in, const sv_decision_t *d, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (int i = 0; i < d->n_use; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "",
                 in->nodes[d->use[i]].name);
    return buf;
}

static const char *exclude_list(const sv_decision_t *d, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (int i = 0; i < d->n_exclude; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "", d->exclude[i]);
    return buf;
}

/* One row: every expectation it states must hold. */
static void run_case(const case_t *c)
{
    sv_input_t in;
    static sv_decision_t d;
    char use[256], exc[256], bad[512] = "";
    build(c, &in);
    int rc = supervise_decide(&in, &d);
    size_t n = 0;
#define MISS(...) (n += (size_t)snprintf(bad + n, sizeof bad - n, __VA_ARGS__))
    if (rc != SV_OK)
        MISS(" rc %d (%s)", rc, d.reason);
    if (d.action != c->action)
        MISS(" action %s, not %s", supervise_action_name(d.action), supervise_action_name(c->action));
    if (c->rule && d.rule != c->rule)
        MISS(" rule %s, not %s", supervise_rule_name(d.rule), supervise_rule_name(c->rule));
    if ((c->action == SV_END || c->action == SV_REQUEUE) && c->rule && d.status != c->exit)
        MISS(" status %d, not %d", d.status, c->exit);
    if (c->use && strcmp(use_list(&in, &d, use, sizeof use), c->use) != 0)
        MISS(" nodes '%s', not '%s'", use, c->use);
    if (c->exclude && strcmp(exclude_list(&d, exc, sizeof exc), c->exclude) != 0)
        MISS(" excluded '%s', not '%s'", exc, c->exclude);
    if (c->what && strcmp(d.failure.what, c->what) != 0)
        MISS(" what '%s', not '%s'", d.failure.what, c->what);
    if (c->culprit && d.culprit != c->culprit)
        MISS(" culprit action %d, not %d", (int)d.culprit, (int)c->culprit);
    if (c->job_ref && strcmp(d.job_ref, c->job_ref) != 0)
        MISS(" job '%s', not '%s'", d.job_ref, c->job_ref);
    if (c->says && !strstr(d.reason, c->says))
        MISS(" reason without '%s'", c->says);
#undef MISS
    if (!ok(bad[0] == '\0', "%s", c->name))
        tap_why("  %s; reason: %s", bad, d.reason);
}

/* ---- the fake adapter: query, decide, requeue ------------------------------------- */

static void test_through_fake(void)
{
    sv_slurm_fake_t fake = {.n_nodes = 3, .states_known = 1, .time_left = 3600};
    for (int i = 0; i < 3; i++)
        snprintf(fake.nodes[i].name, SV_NAME_MAX, "n%d", i + 1);
    fake.nodes[2].state = SV_NODE_DRAIN;
    sv_slurm_t slurm = sv_slurm_fake(&fake);
    case_t c = {.launched = 1, .status = 137, .said = SV_SAID_TASK_KILLED, .said_host = "n2",
                .requeue_exclude = 1, .ajob = "4242", .atask = "1"};
    sv_input_t in;
    static sv_decision_t d;
    char err[256] = "", use[256];
    build(&c, &in);
    sv_node_t held[64];
    int count = 0, known = 0;
    ok(slurm.ops->nodes(slurm.ctx, "4242_1", held, 64, &count, &known, err, sizeof err) ==
           SV_SLURM_OK && count == 3 && known,
       "fake adapter: the job's 3 nodes and their states");
    in.nodes = held, in.n_nodes = count, in.states_known = known;
    slurm.ops->time_left(slurm.ctx, "4242_1", &in.time_left_s, err, sizeof err);
    supervise_decide(&in, &d);
    ok(d.action == SV_RELAUNCH && strcmp(use_list(&in, &d, use, sizeof use), "n1") == 0,
       "  a rank killed on n2, n3 drained: relaunch on n1 (%s)", d.reason);
    fake.time_left = 30;
    slurm.ops->time_left(slurm.ctx, "4242_1", &in.time_left_s, err, sizeof err);
    supervise_decide(&in, &d);
    int rc = d.action == SV_REQUEUE
                 ? slurm.ops->requeue(slurm.ctx, d.job_ref, d.exclude, d.n_exclude, err, sizeof err)
                 : -99;
    ok(rc == SV_SLURM_OK && fake.requeues == 1 && strcmp(fake.requeued, "4242_1") == 0 &&
       strcmp(fake.excluded, "n2") == 0,
       "  30 s left: the requeue of 4242_1 leaves n2 out (got '%s' without '%s')", fake.requeued,
       fake.excluded);
    fake.fail_nodes = SV_SLURM_ETIMEOUT;
    rc = slurm.ops->nodes(slurm.ctx, "4242_1", held, 64, &count, &known, err, sizeof err);
    ok(rc == SV_SLURM_ETIMEOUT && count == 0 && !known && strstr(err, "no answer"),
       "  a query SLURM does not answer is an error, not a wait (%s)", err);
    is_int(fake.queries, 4, "  the fake counted every query");
}

static void test_bad_input(void)
{
    sv_input_t in;
    static sv_decision_t d;
    case_t c = {.launched = 1, .status = 76};
    build(&c, &in);
    in.n_nodes = SV_NODES_MAX + 1;
    ok(supervise_decide(&in, &d) == SV_EINVAL && strstr(d.reason, "n_nodes"),
       "more nodes than SV_NODES_MAX: refused, naming the input (%s)", d.reason);
    build(&c, &in);
    in.set.min_nodes = 0;
    ok(supervise_decide(&in, &d) == SV_EINVAL && strstr(d.reason, "min_nodes"),
       "FTRAIN_MIN_NODES 0: refused (%s)", d.reason);
    char ref[64];
    is_str(supervise_job_ref("77", "", "", ref, sizeof ref), "77", "a plain job is its id");
}

/* ---- the deputy's decision (rules D1-D9) ------------------------------------------- */

/* One deputy case.  Zero is the default: the heartbeat of this run
 * (restart 0) running, silent 0 s of a 60 s bound, SLURM not asked; job
 * 4242 RUNNING at restart 0 on batch host n1 (when answered), n1 healthy;
 * 20 restarts allowed. */
typedef struct {
    const char *name;
    sv_beat_state_t beat; /* 0: running (SV_BEAT_NONE is -1 here: see NONE) */
    int beat_restart;     /* the heartbeat's restart */
    double silent;
    int asked, answered;
    int not_running, job_restarts;
    const char *batch_host; /* NULL: n1; "": not said */
    const char *state;      /* the watched host's state words, "DOWN*" */
    int restarts, max_restarts, requeue_exclude;
    sv_deputy_action_t action;
    sv_deputy_rule_t rule;
    const char *exclude, *says;
} dcase_t;

#define D(x) SV_DRULE_##x
#define NONE ((sv_beat_state_t)-1)

static const dcase_t dcases[] = {
    {"D1 supervisor-ended: the heartbeat says ended: leave (the supervisor's normal end)",
     .beat = SV_BEAT_ENDED, .action = SV_DEPUTY_EXIT, .rule = D(SUPERVISOR_ENDED)},
    {"D1 supervisor-ended: ended, even silent long and SLURM saying the host is DOWN",
     .beat = SV_BEAT_ENDED, .silent = 500, .asked = 1, .answered = 1, .state = "DOWN*",
     .action = SV_DEPUTY_EXIT, .rule = D(SUPERVISOR_ENDED)},
    {"D2 later-run: a heartbeat of restart 1 read by the deputy of restart 0: leave",
     .beat_restart = 1, .silent = 500, .action = SV_DEPUTY_EXIT, .rule = D(LATER_RUN),
     .says = "restart 1's"},
    {"D3 fresh: silent 59 s of 60: watch, SLURM not asked", .silent = 59,
     .action = SV_DEPUTY_WATCH, .rule = D(FRESH)},
    {"D3 fresh: a relaunch in progress keeps the heartbeat fresh: watch", .silent = 2,
     .action = SV_DEPUTY_WATCH, .rule = D(FRESH)},
    {"D3 fresh: an ended heartbeat of an earlier restart is no end of this run", .beat = SV_BEAT_ENDED,
     .beat_restart = 0, .restarts = 1, .silent = 3, .action = SV_DEPUTY_WATCH, .rule = D(FRESH)},
    {"D4 ask: silent 60 s of 60, not asked yet: ask SLURM", .silent = 60,
     .action = SV_DEPUTY_ASK, .rule = D(ASK), .says = "silent for 60 s"},
    {"D4 ask: no heartbeat read at all (none yet, unreadable), silent past the bound: ask",
     .beat = NONE, .silent = 61, .action = SV_DEPUTY_ASK, .rule = D(ASK)},
    {"D5 no-answer: SLURM did not answer: watch, never act on no facts", .silent = 90,
     .asked = 1, .state = "DOWN", .action = SV_DEPUTY_WATCH, .rule = D(NO_ANSWER)},
    {"D6 job-moved-on: the job is no longer RUNNING (requeued, ended): leave", .silent = 90,
     .asked = 1, .answered = 1, .not_running = 1, .state = "DOWN", .action = SV_DEPUTY_EXIT,
     .rule = D(JOB_MOVED_ON)},
    {"D6 job-moved-on: SLURM counts restart 1 (requeued and running again): leave",
     .silent = 90, .asked = 1, .answered = 1, .job_restarts = 1, .state = "DOWN",
     .action = SV_DEPUTY_EXIT, .rule = D(JOB_MOVED_ON)},
    {"D6 job-moved-on: another batch host: leave", .silent = 90, .asked = 1, .answered = 1,
     .batch_host = "n2", .state = "DOWN", .action = SV_DEPUTY_EXIT, .rule = D(JOB_MOVED_ON)},
    {"D7 host-alive: silent, the host ALLOCATED: the supervisor is slow, not lost: watch",
     .silent = 90, .asked = 1, .answered = 1, .state = "ALLOCATED",
     .action = SV_DEPUTY_WATCH, .rule = D(HOST_ALIVE)},
    {"D7 host-alive: DRAIN is no loss: watch", .silent = 90, .asked = 1, .answered = 1,
     .state = "ALLOCATED+DRAIN", .action = SV_DEPUTY_WATCH, .rule = D(HOST_ALIVE)},
    {"D7 host-alive: a planned stop (the heartbeat fresh again) never gets here", .silent = 1,
     .asked = 1, .answered = 1, .state = "DOWN", .action = SV_DEPUTY_WATCH, .rule = D(FRESH)},
    {"D8 restart-cap: the host lost at restart 20 of 20: cancel the job", .silent = 90,
     .asked = 1, .answered = 1, .state = "DOWN", .restarts = 20, .job_restarts = 20,
     .beat_restart = 20, .action = SV_DEPUTY_END, .rule = D(RESTART_CAP),
     .says = "restart cap reached"},
    {"D9 host-lost: silent 90 s, SLURM says DOWN: requeue", .silent = 90, .asked = 1,
     .answered = 1, .state = "DOWN*", .action = SV_DEPUTY_REQUEUE, .rule = D(HOST_LOST),
     .exclude = "", .says = "requeue job 4242 (restart 1 of at most 20)"},
    {"D9 host-lost: NOT_RESPONDING (before SLURM sets it DOWN) is enough", .silent = 61,
     .asked = 1, .answered = 1, .state = "ALLOCATED*", .action = SV_DEPUTY_REQUEUE,
     .rule = D(HOST_LOST), .says = "NOT_RESPONDING"},
    {"D9 host-lost: BatchHost not said by SLURM: this run's host taken", .silent = 61,
     .asked = 1, .answered = 1, .batch_host = "", .state = "DOWN", .action = SV_DEPUTY_REQUEUE,
     .rule = D(HOST_LOST)},
    {"D9 host-lost: with FTRAIN_REQUEUE_EXCLUDE=1 the batch host is left out", .silent = 90,
     .asked = 1, .answered = 1, .state = "DOWN", .requeue_exclude = 1,
     .action = SV_DEPUTY_REQUEUE, .rule = D(HOST_LOST), .exclude = "n1",
     .says = "without node n1"},
    {"D9 host-lost: restart 3 of 20: requeue (restart 4)", .silent = 90, .asked = 1,
     .answered = 1, .state = "DOWN", .restarts = 3, .job_restarts = 3, .beat_restart = 3,
     .action = SV_DEPUTY_REQUEUE, .rule = D(HOST_LOST), .says = "restart 4 of at most 20"},
};

static void run_dcase(const dcase_t *c)
{
    sv_deputy_input_t in;
    sv_deputy_decision_t d;
    char bad[512] = "";
    size_t n = 0;
    memset(&in, 0, sizeof in);
    in.beat = c->beat == NONE ? SV_BEAT_NONE : c->beat ? c->beat : SV_BEAT_RUNNING;
    in.beat_restart = c->beat == NONE ? -1 : c->beat_restart;
    in.silent_s = c->silent;
    in.stale_s = 60;
    in.asked = c->asked;
    in.answered = c->answered;
    in.job_running = !c->not_running;
    in.job_restarts = c->job_restarts;
    snprintf(in.batch_host, sizeof in.batch_host, "%s", c->batch_host ? c->batch_host : "n1");
    in.host_state = c->state ? slurm_state_flags(c->state) : 0;
    snprintf(in.host, sizeof in.host, "n1");
    snprintf(in.job_ref, sizeof in.job_ref, "4242");
    in.restart_count = c->restarts;
    in.max_restarts = c->max_restarts ? c->max_restarts : 20;
    in.requeue_exclude = c->requeue_exclude;
    int rc = supervise_deputy_decide(&in, &d);
#define MISS(...) (n += (size_t)snprintf(bad + n, sizeof bad - n, __VA_ARGS__))
    if (rc != SV_OK)
        MISS(" rc %d (%s)", rc, d.reason);
    if (d.action != c->action)
        MISS(" action %s, not %s", supervise_deputy_action_name(d.action),
             supervise_deputy_action_name(c->action));
    if (d.rule != c->rule)
        MISS(" rule %s, not %s", supervise_deputy_rule_name(d.rule),
             supervise_deputy_rule_name(c->rule));
    if (c->exclude && strcmp(d.n_exclude ? d.exclude[0] : "", c->exclude) != 0)
        MISS(" excluded '%s', not '%s'", d.n_exclude ? d.exclude[0] : "", c->exclude);
    if (c->says && !strstr(d.reason, c->says))
        MISS(" reason without '%s'", c->says);
#undef MISS
    if (!ok(bad[0] == '\0', "deputy %s", c->name))
        tap_why("  %s; reason: %s", bad, d.reason);
}

static void test_deputy_bad_input(void)
{
    sv_deputy_input_t in;
    sv_deputy_decision_t d;
    memset(&in, 0, sizeof in);
    in.max_restarts = 20;
    ok(supervise_deputy_decide(&in, &d) == SV_EINVAL && strstr(d.reason, "stale_s"),
       "deputy: a stale bound of 0 is refused, naming the input (%s)", d.reason);
}

int main(void)
{
    int n = (int)(sizeof cases / sizeof cases[0]);
    int nd = (int)(sizeof dcases / sizeof dcases[0]);
    plan(n + 8 + nd + 1);
    diag("%d policy cases, %d deputy cases", n, nd);
    for (int i = 0; i < n; i++)
        run_case(&cases[i]);
    test_through_fake();
    test_bad_input();
    for (int i = 0; i < nd; i++)
        run_dcase(&dcases[i]);
    test_deputy_bad_input();
    return done_testing();
}
