/*
 * policy.h - ftrain-supervise's decision after each launch, as a pure
 * function: what happened (the launch's exit status, what the launcher
 * said, the failure records, the heartbeats' step, the signals this
 * supervisor got), what the allocation holds (its nodes and their states,
 * the time left) and the settings go in; what to do comes out: launch,
 * relaunch on these nodes, requeue (leaving these nodes out), or end with
 * this exit status, with the rule that decided and a reason for the log.
 * The rules, in order, are listed at the top of policy.c and in
 * docs/supervisor.md.
 *
 * HowTo: before the first launch call supervise_decide with launched = 0
 * (TERM or a stop warning may already have come); after each launch fill
 * the input from the launch that ended and call it again.  On SV_RELAUNCH
 * append {out.failure, out.culprit, status, to_ckpt_s} to the history (an
 * sv_launch_t) and relaunch on out.use; if a signal comes before the
 * relaunch starts, call supervise_decide again with the same history and
 * the new flag: the function has no state, so the second answer replaces
 * the first.  The history is this allocation's only: a requeued job starts
 * with none.
 *
 * Nothing here reads a clock, a file or the environment, or keeps state:
 * the same input always gives the same decision.
 */
#ifndef FTRAIN_SUPERVISE_POLICY_H
#define FTRAIN_SUPERVISE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "fault/failure.h"

/* A node's or a host's name, its NUL included. */
#define SV_NAME_MAX FAILURE_HOST_MAX
/* The most nodes an allocation may hold here, and earlier launches a
 * history may hold (a relaunch cap above it is refused). */
#define SV_NODES_MAX 4096
#define SV_HISTORY_MAX 64
/* The most nodes a requeue leaves out: each launch's culprit, and this one's. */
#define SV_EXCLUDE_MAX (SV_HISTORY_MAX + 1)
#define SV_WHAT_MAX 32
#define SV_REASON_MAX 768
/* The step of a launch that failed before any rank finished a step. */
#define SV_STEP_STARTUP (-1)

/* A node's state, as the SLURM adapter reports it (supervise/slurm.h):
 * flags of the states that rule it out of a relaunch. */
enum {
    SV_NODE_DOWN = 1u << 0,
    SV_NODE_DRAIN = 1u << 1,
    SV_NODE_FAIL = 1u << 2,
    SV_NODE_NOT_RESPONDING = 1u << 3,
    SV_NODE_UNKNOWN = 1u << 4, /* SLURM answered, but named no state for it */
};
#define SV_NODE_BAD \
    (SV_NODE_DOWN | SV_NODE_DRAIN | SV_NODE_FAIL | SV_NODE_NOT_RESPONDING | SV_NODE_UNKNOWN)

typedef struct {
    char name[SV_NAME_MAX];
    unsigned state; /* SV_NODE_* flags; 0: usable */
} sv_node_t;

/* What the launcher said about the launch's end (its first task's end),
 * as the main loop reads it from the launcher (srun, mpirun). */
typedef enum {
    SV_SAID_NOTHING = 0,
    SV_SAID_NODE_FAILURE, /* a node failed (host) */
    SV_SAID_TASK_EXITED,  /* the first task to end exited with code */
    SV_SAID_TASK_KILLED,  /* the first task to end died (host, what: "Killed",
                             "signal 9") */
    SV_SAID_CONTROLLER,   /* the launcher could not reach the SLURM controller */
} sv_said_kind_t;

typedef struct {
    sv_said_kind_t kind;
    char host[SV_NAME_MAX];
    int code;
    char what[SV_WHAT_MAX];
} sv_said_t;

/* What told the policy what failed (the classification's rule). */
typedef enum {
    SV_FROM_NODE_FAILURE = 1, /* the launcher said a node failed */
    SV_FROM_HANG_RECORD,      /* a hang record (its culprit) */
    SV_FROM_RECORD,           /* another record of a precise kind */
    SV_FROM_HANG_STATUS,      /* exit status 76 without a hang record */
    SV_FROM_TASK_EXITED,      /* a task exited with a status of its own */
    SV_FROM_TASK_KILLED,      /* a task died of a signal first */
    SV_FROM_CONTROLLER,       /* the controller could not be reached */
    SV_FROM_LAUNCHER_KILLED,  /* the launcher itself died of a signal */
    SV_FROM_STATUS,           /* nothing else: the exit status, the user's */
} sv_from_t;

/* A failure as the policy classified it. */
typedef struct {
    int infra;                 /* 1: not the user's fault (a relaunch may help) */
    sv_from_t from;
    char what[SV_WHAT_MAX];    /* its kind, to tell the same failure again: "node",
                                  "hang", "controller", "launcher 137", a record's
                                  kind, the launcher's word ("Killed") */
    char culprit[SV_NAME_MAX]; /* the node it points at, "" */
    int64_t step;              /* the furthest step finished, SV_STEP_STARTUP */
} sv_failure_t;

/* What a decision did with the failure's culprit. */
typedef enum {
    SV_CULPRIT_NONE = 0, /* no culprit, or no relaunch decided on it */
    SV_CULPRIT_EXCLUDED, /* left out of the relaunches (and of a requeue) */
    SV_CULPRIT_SPARED,   /* kept for one more try (it died at start-up) */
    SV_CULPRIT_KEPT,     /* kept: leaving it out would leave too few nodes */
} sv_culprit_t;

/* One earlier launch of this allocation: it failed and was relaunched. */
typedef struct {
    int status;
    sv_failure_t failure;
    sv_culprit_t culprit;
    double to_ckpt_s;
} sv_launch_t;

/* The settings (train.sbatch's environment; docs/supervisor.md). */
typedef struct {
    int64_t max_restarts;   /* FTRAIN_MAX_RESTARTS (20) */
    int max_relaunches;     /* FTRAIN_MAX_RELAUNCHES (3), at most SV_HISTORY_MAX */
    int min_nodes;          /* FTRAIN_MIN_NODES (1), at least 1 */
    double relaunch_need_s; /* FTRAIN_RELAUNCH_NEED (60) */
    int requeue_exclude;    /* FTRAIN_REQUEUE_EXCLUDE (0) */
    int program;            /* 1: FTRAIN_PROGRAM runs, not ftrain */
    int stop_signal;        /* the signal forwarded to the launcher (SIGUSR1) */
} sv_settings_t;

typedef struct {
    sv_settings_t set;
    /* The job: SLURM_JOB_ID, SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID
     * ("" when unset), SLURM_RESTART_COUNT. */
    char job_id[SV_NAME_MAX], array_job_id[SV_NAME_MAX], array_task_id[SV_NAME_MAX];
    int64_t restart_count;
    /* The signals this supervisor got: TERM (time limit, preemption,
     * cancel) and the stop warning. */
    int term, stop;
    /* This allocation's earlier launches, oldest first. */
    const sv_launch_t *history;
    int n_history;
    /* The launch that ended; launched 0: none yet (the fields below are
     * then not read but for the nodes). */
    int launched;
    int status; /* its exit status; 128 + N when signal N killed it */
    int killed; /* 1: a signal killed the launcher itself (wait status) */
    sv_said_t said;
    const failure_t *records; /* its records (failure_collect), any order */
    int n_records;
    int refused_records;      /* records found but refused (garbage, truncated) */
    int64_t step_done;        /* from its heartbeats, SV_STEP_STARTUP */
    double to_ckpt_s;         /* seconds to its first checkpoint, < 0: none */
    /* The nodes the job holds now; states_known 0: SLURM did not answer
     * (only excluded nodes are left out then). */
    const sv_node_t *nodes;
    int n_nodes;
    int states_known;
    double time_left_s; /* < 0: unknown or unlimited */
} sv_input_t;

typedef enum { SV_LAUNCH = 1, SV_RELAUNCH, SV_REQUEUE, SV_END } sv_action_t;

/* The rules, in the order they are tried (policy.c says each in full). */
typedef enum {
    SV_RULE_TERM_BEFORE_LAUNCH = 1,
    SV_RULE_STOP_BEFORE_LAUNCH,
    SV_RULE_FIRST_LAUNCH,
    SV_RULE_DONE,
    SV_RULE_TERM_AFTER_CHECKPOINT,
    SV_RULE_CHECKPOINTED,
    SV_RULE_TERM_AFTER_FAILURE,
    SV_RULE_STOP_KILLED_LAUNCHER,
    SV_RULE_USER_ERROR,
    SV_RULE_FAILED_AFTER_STOP,
    SV_RULE_SAME_FAILURE,
    SV_RULE_RELAUNCH_CAP,
    SV_RULE_TOO_FEW_NODES,
    SV_RULE_NO_TIME,
    SV_RULE_RELAUNCH,
    SV_RULE_RESTART_CAP, /* a requeue wanted at the restart cap: the end */
} sv_rule_t;

typedef struct {
    sv_action_t action;
    sv_rule_t rule;   /* the rule that decided */
    sv_rule_t wanted; /* the rule that asked for a requeue (also under
                         SV_RULE_RESTART_CAP), 0 when none */
    int status;       /* SV_END: the exit status; SV_REQUEUE: the one to end
                         with when the requeue fails */
    char job_ref[2 * SV_NAME_MAX]; /* the job a requeue names */
    int n_use;
    int use[SV_NODES_MAX]; /* SV_RELAUNCH: indexes into the input's nodes */
    int n_exclude;         /* SV_REQUEUE: nodes to leave out of the requeued
                              job (only with requeue_exclude) */
    char exclude[SV_EXCLUDE_MAX][SV_NAME_MAX];
    int n_suspect; /* the nodes the failures pointed at (for the log) */
    char suspect[SV_EXCLUDE_MAX][SV_NAME_MAX];
    sv_failure_t failure; /* this launch's, classified (launched only) */
    sv_culprit_t culprit;
    char reason[SV_REASON_MAX];
} sv_decision_t;

typedef enum { SV_OK = 0, SV_EINVAL = -1 } sv_err_t;

/** Decide what comes after the launch in in (or before the first).
 *  @return SV_OK with out filled, or SV_EINVAL (counts out of range, a
 *  NULL array with a count, settings out of range) with out->reason
 *  saying which. */
int supervise_decide(const sv_input_t *in, sv_decision_t *out);

/** The job a requeue and SLURM's queries name: <array job id>_<task id>
 *  for the array task whose SLURM_JOB_ID is the array's own id (that id
 *  names the whole array), else SLURM_JOB_ID.  Into buf.  @return buf. */
const char *supervise_job_ref(const char *job_id, const char *array_job_id,
                              const char *array_task_id, char *buf, size_t cap);

/** @return the rule's name ("same-failure" ...), the action's ("relaunch"
 *  ...) or the source's ("hang-record" ...), for logs and tests. */
const char *supervise_rule_name(sv_rule_t rule);
const char *supervise_action_name(sv_action_t action);
const char *supervise_from_name(sv_from_t from);

/* ---- the deputy's decision ------------------------------------------------------
 *
 * The deputy (ftrain-supervise --deputy, a one-task step on a node other
 * than the batch host) watches the supervisor's heartbeat file
 * (supervise/beat.h) and, once it has been silent for longer than its
 * bound, asks SLURM about the job and the batch host.  Its decision, a pure
 * function like supervise_decide, in this order (the first that applies):
 *
 *   D1 supervisor-ended  the heartbeat says the supervisor is ending the job
 *                        (its normal end, an end status): EXIT.
 *   D2 later-run         the heartbeat names a later restart of the job: a
 *                        new run's supervisor writes it: EXIT.
 *   D3 fresh             silent for less than the bound: WATCH.
 *   D4 ask               silent, SLURM not asked yet: ASK.
 *   D5 no-answer         SLURM did not answer: WATCH (asked again later).
 *   D6 job-moved-on      the job is no longer RUNNING, has another restart
 *                        count or another batch host: this run is over: EXIT.
 *   D7 host-alive        SLURM does not say the batch host is DOWN or not
 *                        responding: the supervisor is slow, not lost: WATCH.
 *   D8 restart-cap       SLURM_RESTART_COUNT >= FTRAIN_MAX_RESTARTS: END
 *                        (cancel the job rather than hold its allocation).
 *   D9 host-lost         REQUEUE (with FTRAIN_REQUEUE_EXCLUDE=1 leaving the
 *                        batch host out).
 */
typedef enum {
    SV_BEAT_NONE = 0, /* no heartbeat of this job read */
    SV_BEAT_RUNNING,  /* the supervisor supervises */
    SV_BEAT_ENDED,    /* it is ending the job itself */
} sv_beat_state_t;

typedef struct {
    /* The heartbeat, as last read: its state and the restart it names
     * (-1 when none was read). */
    sv_beat_state_t beat;
    int64_t beat_restart;
    double silent_s; /* since the heartbeat last changed (or the deputy began) */
    double stale_s;  /* FTRAIN_DEPUTY_STALE */
    /* SLURM, once asked: asked 0 not yet; answered 0 no answer in time. */
    int asked, answered;
    int job_running;             /* JobState=RUNNING */
    int64_t job_restarts;        /* Restarts= */
    char batch_host[SV_NAME_MAX]; /* BatchHost= ("" not said) */
    unsigned host_state;         /* the watched host's SV_NODE_* flags */
    /* This deputy: the batch host it watches, its job, its run. */
    char host[SV_NAME_MAX];
    char job_ref[2 * SV_NAME_MAX];
    int64_t restart_count, max_restarts;
    int requeue_exclude;
} sv_deputy_input_t;

typedef enum {
    SV_DEPUTY_WATCH = 1, /* go on watching */
    SV_DEPUTY_ASK,       /* ask SLURM, then decide again with its answer */
    SV_DEPUTY_EXIT,      /* leave: nothing to do (exit 0) */
    SV_DEPUTY_REQUEUE,   /* requeue the job */
    SV_DEPUTY_END,       /* cancel the job (the restart cap) */
} sv_deputy_action_t;

typedef enum {
    SV_DRULE_SUPERVISOR_ENDED = 1,
    SV_DRULE_LATER_RUN,
    SV_DRULE_FRESH,
    SV_DRULE_ASK,
    SV_DRULE_NO_ANSWER,
    SV_DRULE_JOB_MOVED_ON,
    SV_DRULE_HOST_ALIVE,
    SV_DRULE_RESTART_CAP,
    SV_DRULE_HOST_LOST,
} sv_deputy_rule_t;

typedef struct {
    sv_deputy_action_t action;
    sv_deputy_rule_t rule;
    int n_exclude; /* SV_DEPUTY_REQUEUE: the batch host, with requeue_exclude */
    char exclude[1][SV_NAME_MAX];
    char reason[SV_REASON_MAX];
} sv_deputy_decision_t;

/** The deputy's decision on in (rules D1-D9 above).  @return SV_OK, or
 *  SV_EINVAL (a stale bound not above 0, a negative restart count) with
 *  out->reason saying which. */
int supervise_deputy_decide(const sv_deputy_input_t *in, sv_deputy_decision_t *out);

/** @return the deputy rule's name ("host-lost" ...) or action's ("requeue"
 *  ...), for logs and tests. */
const char *supervise_deputy_rule_name(sv_deputy_rule_t rule);
const char *supervise_deputy_action_name(sv_deputy_action_t action);

#endif
