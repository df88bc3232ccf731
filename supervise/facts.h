/*
 * facts.h - what a launch that ended leaves behind, read into the
 * structured facts the policy takes (policy.h): the furthest step its
 * ranks finished (their heartbeat files), how long it took to its first
 * committed checkpoint (metrics.jsonl), and what the launcher said about
 * its first task's end.
 *
 * The launcher's words (srun's "Node failure on n2", "srun: error: n2:
 * task 1: Killed", mpirun's "process rank 1 ... exited on signal 9") are
 * prose, read here and nowhere else, as a hint beside the exit status and
 * the ranks' failure records (which decide first): facts_said_line is a
 * pure function, tested on captured real outputs
 * (tests/supervise/supervise_facts.c).
 *
 * HowTo: before a launch, facts_tokens(run_dir, &old) notes the heartbeat
 * tokens already there (an earlier launch's); after it,
 * facts_step_done(run_dir, &old) and facts_to_ckpt(run_dir, wall_start),
 * and facts_said_file(err_path, &said).
 *
 * Nothing here exits or prints; files that are missing or unreadable are
 * facts too (no step, no checkpoint, nothing said).
 */
#ifndef FTRAIN_SUPERVISE_FACTS_H
#define FTRAIN_SUPERVISE_FACTS_H

#include <stddef.h>
#include <stdint.h>

#include "supervise/policy.h"

#define FACTS_TOKENS_MAX 256

/* The heartbeat tokens of earlier launches (one per launch). */
typedef struct {
    char tok[FACTS_TOKENS_MAX][24];
    int n;
} facts_tokens_t;

/** Note the tokens in run_dir/heartbeat into t. */
void facts_tokens(const char *run_dir, facts_tokens_t *t);

/** Parse one heartbeat line: its token (into tok, cap 24), phase and
 *  step.  @return 1 when it is one of ftrain's heartbeat lines with all
 *  three, else 0. */
int facts_parse_heartbeat(const char *line, char tok[24], int *phase, int64_t *step);

/** @return the furthest step any rank of the launch just ended finished,
 *  from the heartbeats whose token is not in old (a step in its
 *  computation or reductions, phases 3-5, is not finished yet), or
 *  SV_STEP_STARTUP when there are none. */
int64_t facts_step_done(const char *run_dir, const facts_tokens_t *old);

/** @return the seconds from wall_start to the first checkpoint event of
 *  run_dir/metrics.jsonl at or after it (rounded up), or -1 when none. */
double facts_to_ckpt(const char *run_dir, double wall_start);

/* What facts_said_line has seen so far. */
typedef struct {
    sv_said_t said;        /* the result */
    int node_failure;      /* a node failure was said: it wins */
    int first_task;        /* the first task line was seen */
    int first_exited_own;  /* ... and it was an exit with a code of its own */
    int killed;            /* a task that died was seen */
    int controller;        /* the controller could not be reached */
    char detail[256];      /* the line the result came from, for the log
                              ("n2: task 1: Killed") */
    char ctl_detail[256];  /* the controller's line */
} facts_said_state_t;

/** Read one line of the launcher's standard error into st (pure). */
void facts_said_line(facts_said_state_t *st, const char *line);

/** The result of the lines read: st->said with the precedence of
 *  train.sbatch (a node failure, then the first task's own exit, then a
 *  task killed, then the controller). */
sv_said_t facts_said_result(const facts_said_state_t *st);

/** Read the file at path line by line into *said (nothing said when it
 *  cannot be read), and the line it came from into detail (for the log). */
void facts_said_file(const char *path, sv_said_t *said, char *detail, size_t cap);

#endif
