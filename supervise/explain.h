/*
 * explain.h - the log's words for each decision, in train.sbatch's lines
 * (users grep them: "failure at step 12: a rank died: n2: task 1: Killed",
 * "relaunch 1 of at most 3 on 2 node(s) n1,n3 ...", "... : requeue job
 * 4242 ..."): the policy decides, this file only says it.
 *
 * HowTo: fill an sv_explain_t with what the decision does not hold (the
 * names, the launcher's line, whether a signal came after the launch
 * ended); explain_before(&x, &in, &d) logs the lines that come before the
 * action (the failure, the nodes kept or left out, a signal during the
 * decision); explain_reason(&x, &in, &d, buf, cap) writes the reason a
 * requeue or an end is logged with ("" when the end says it itself).
 */
#ifndef FTRAIN_SUPERVISE_EXPLAIN_H
#define FTRAIN_SUPERVISE_EXPLAIN_H

#include <stddef.h>

#include "supervise/policy.h"

typedef struct {
    const char *trainer;   /* "ftrain" or the program's name */
    const char *launcher;  /* "srun", "mpirun" */
    const char *stop_name; /* "USR1" */
    const char *detail;    /* the launcher's line the hint came from, "" */
    const char *use;       /* a relaunch's nodes, comma-separated */
    int term_late;         /* TERM came after the launch ended */
    int stop_late;         /* the stop warning came after the launch ended */
} sv_explain_t;

/** Log what comes before the action (see above). */
void explain_before(const sv_explain_t *x, const sv_input_t *in, const sv_decision_t *d);

/** The reason for a requeue or an end into buf; "" when nothing is to be
 *  added.  @return buf. */
const char *explain_reason(const sv_explain_t *x, const sv_input_t *in, const sv_decision_t *d,
                           char *buf, size_t cap);

/** The failure in words ("a rank died: n2: task 1: Killed", "node n2
 *  failed") into buf.  @return buf. */
const char *explain_failure(const sv_explain_t *x, const sv_input_t *in,
                            const sv_failure_t *f, char *buf, size_t cap);

#endif
