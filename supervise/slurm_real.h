/*
 * slurm_real.h - the SLURM adapter (slurm.h) over scontrol and squeue:
 * every call bounded by FTRAIN_SLURM_TIMEOUT (proc.h), with fixed output
 * formats (squeue -o %L, scontrol's one-line records -o), read by the
 * pure parsers below.
 *
 *   nodes      scontrol show job -o REF        (NodeList=)
 *              scontrol show hostnames LIST    (one name a line)
 *              scontrol show node -o LIST      (NodeName= State=, one a line)
 *   time left  squeue -h -j REF -o %L          ([D-]H:MM:SS, M:SS, UNLIMITED)
 *   job facts  scontrol show job -o REF        (JobState= Restarts= BatchHost=
 *                                               NodeList= StdOut=)
 *   one node   scontrol show node -o NODE      (State=)
 *   cancel     scancel REF
 *   requeue    scontrol requeue REF            (3 tries, 5 s apart), then, to
 *              leave nodes out, scontrol update JobId=REF ExcNodeList=OLD,NEW;
 *              a requeue made whose update SLURM refused returns 1 (a
 *              warning in err), not an error: the job is requeued all the
 *              same
 *
 * HowTo: sv_slurm_real_t r = {.timeout_s = 20}; sv_slurm_t s =
 * sv_slurm_real(&r); then as slurm.h says.  The parsers take the
 * commands' text and never fail on odd input: what they cannot read is
 * "not said".
 */
#ifndef FTRAIN_SUPERVISE_SLURM_REAL_H
#define FTRAIN_SUPERVISE_SLURM_REAL_H

#include <stddef.h>
#include <stdint.h>

#include "supervise/slurm.h"

typedef struct {
    int timeout_s; /* FTRAIN_SLURM_TIMEOUT */
    char fallback_nodes[8192]; /* the environment's node list, when SLURM names none */
    int requeue_pause_s; /* between requeue tries (5) */
    /* What the newest job record said (nodes()), so that the decision after
     * a launch asks SLURM twice, not four times: the node list's expansion
     * while the list is the same, and the time left (TimeLimit - RunTime)
     * for SLURM_REAL_FRESH_S after it.  Zero-initialised: nothing known. */
    char seen_list[8192], seen_names[8192];
    double left_s, left_at; /* left_at: monotonic seconds, 0: none */
} sv_slurm_real_t;

/* How long a job record's time left stands in for squeue's (seconds). */
#define SLURM_REAL_FRESH_S 2.0

/** An adapter over r (not copied). */
sv_slurm_t sv_slurm_real(sv_slurm_real_t *r);

/** The value of FIELD= in a one-line scontrol record (scontrol show job -o,
 *  show node -o) into out; "(null)" counts as empty.  @return 1 when the
 *  field is there, else 0. */
int slurm_parse_field(const char *record, const char *field, char *out, size_t cap);

/** SLURM's state words ("IDLE+DRAIN", "DOWN*", "MIXED+NOT_RESPONDING") as
 *  SV_NODE_* flags (0: usable); an empty state is SV_NODE_UNKNOWN. */
unsigned slurm_state_flags(const char *state);

/** Set the states of nodes[0..n) from scontrol show node -o's lines; a
 *  node no line names gets SV_NODE_UNKNOWN.  @return the lines read. */
int slurm_parse_node_states(const char *text, sv_node_t *nodes, int n);

/** squeue's time (%L, %l): [D-]H:MM:SS, M:SS or SS in seconds; -1 for
 *  UNLIMITED, INVALID, NOT_SET or anything else. */
double slurm_parse_time(const char *text);

/** Split names (one a line, or comma-separated) into nodes, at most cap.
 *  @return the count, or -1 when more than cap. */
int slurm_parse_names(const char *text, sv_node_t *nodes, int cap);

/** Whether the array variables SLURM_ARRAY_JOB_ID=aj and
 *  SLURM_ARRAY_TASK_ID=at are job_id's own, from its record (scontrol show
 *  job -o JOB_ID): a job submitted from inside an array task inherits the
 *  task's.  @return 1 they are, 0 they are not, -1 the record is not
 *  job_id's (no answer: take them as its own). */
int slurm_parse_array_task(const char *record, const char *job_id, const char *aj,
                           const char *at);

/** The same, asked of SLURM (one bounded query).  @return as above. */
int slurm_array_task(sv_slurm_real_t *r, const char *job_id, const char *aj, const char *at);

/** The job's time limit in seconds (squeue %l), -1 when unknown. */
double slurm_time_limit(sv_slurm_real_t *r, const char *job_ref);

/* What one job record says (scontrol show job -o REF), for the deputy and
 * the supervisor's start. */
typedef struct {
    char state[32];              /* JobState= ("" not said) */
    int64_t restarts;            /* Restarts=, -1 not said */
    char batch_host[SV_NAME_MAX]; /* BatchHost= */
    char node_list[8192];        /* NodeList= (a host list, n[1-3]) */
    char std_out[4096];          /* StdOut= (the job's output file) */
} sv_job_facts_t;

/** Read a one-line job record of job_id into f.  @return 1 when the
 *  record is job_id's (JobId=), else 0 (f then says nothing). */
int slurm_parse_job(const char *record, const char *job_id, sv_job_facts_t *f);

/** The same, asked of SLURM (one bounded query).  @return SV_SLURM_OK,
 *  SV_SLURM_EFAIL (refused, or a record of another job) or
 *  SV_SLURM_ETIMEOUT, with err. */
int slurm_job_facts(sv_slurm_real_t *r, const char *job_ref, sv_job_facts_t *f, char *err,
                    size_t errcap);

/** The state flags of one node (scontrol show node -o NODE: one bounded
 *  query) into *flags.  @return as slurm_job_facts; a record that does not
 *  name the node is SV_SLURM_EFAIL. */
int slurm_node_flags(sv_slurm_real_t *r, const char *node, unsigned *flags, char *err,
                     size_t errcap);

/** Expand a host list (n[1-3]) into nodes with scontrol show hostnames
 *  (one bounded query), at most cap.  @return the count, or -1 (err). */
int slurm_hostnames(sv_slurm_real_t *r, const char *list, sv_node_t *nodes, int cap,
                    char *err, size_t errcap);

/** Cancel job_ref (scancel, one bounded call).  @return SV_SLURM_OK or an
 *  error, with err. */
int slurm_cancel(sv_slurm_real_t *r, const char *job_ref, char *err, size_t errcap);

#endif
