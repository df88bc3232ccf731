/*
 * watchdog.h - hang detection: a thread per rank that notices when this
 * rank has made no progress for too long, and says where and why.
 *
 * HowTo: after MPI is up, every rank calls watchdog_start(&opts) once; the
 * training loop marks each phase it enters with watchdog_phase(phase,
 * step) (a mutex and a clock read: cheap enough for every collective);
 * watchdog_stop() before MPI ends.  The thread
 *   - writes a small heartbeat file per rank (phase, step, a counter, host,
 *     pid) into opts.heartbeat_dir every watchdog_beat_period(), when there is one
 *     (the run directory, which every rank sees), so that a rank that hangs
 *     can tell which rank stopped making progress without MPI: a peer that
 *     is stopped or dead cannot answer a message, but its file stays;
 *   - when the current phase has lasted longer than its allowance
 *     (watchdog_allowance), reads the heartbeats, names the rank(s) that
 *     stopped or fell behind, writes a failure record of kind "hang" naming
 *     the first of them as the culprit (when opts.run_dir is set:
 *     fault/failure.h), and calls opts.fire(report) once.  fire ends the
 *     job (the trainer's choice; this module never exits).
 * Signal handlers and the training loop are untouched: the thread only
 * reads what watchdog_phase recorded.
 */
#ifndef FTRAIN_WATCHDOG_H
#define FTRAIN_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

/* The phases, in the order a step goes through them (a heartbeat's
 * position in the run is (step, phase), so the order matters: a rank whose
 * own part of a load or save is done is past one still at it).  The
 * numbers are written into heartbeats (slurm/train.sbatch reads them). */
typedef enum {
    WATCHDOG_START = 0, /* start-up: data, model, communicator */
    WATCHDOG_LOAD,      /* a resume's checkpoint load: this rank's part */
    WATCHDOG_LOAD_SYNC, /* ...read; waiting for the other ranks' parts */
    WATCHDOG_COMPUTE,   /* forward/backward of step N */
    WATCHDOG_CONTROL,   /* the control reduction of step N */
    WATCHDOG_REDUCE,    /* the gradient allreduce of step N */
    WATCHDOG_UPDATE,    /* the update of step N, its log line, a test delay */
    WATCHDOG_EVAL,      /* the evaluation after step N */
    WATCHDOG_SAVE,      /* the checkpoint of step N: this rank's shard */
    WATCHDOG_SAVE_SYNC, /* ...written; the commit, waiting for the others */
    WATCHDOG_FINISH,    /* the end: reports, closing */
    WATCHDOG_PHASES
} watchdog_phase_t;

/* --hang-timeout's "derived from the run" (the default); 0 is off. */
#define WATCHDOG_AUTO (-1.0)
/* The derived limit: this multiple of the longest step phase, evaluation
 * or save seen so far, and never less than the floor. */
#define WATCHDOG_MULTIPLE 10.0
#define WATCHDOG_FLOOR_S 45.0
/* Own allowances: start-up and a resume's load; the first evaluation or
 * save (nothing measured yet); the end (its reports wait up to 10 s). */
#define WATCHDOG_START_S 600.0
#define WATCHDOG_FIRST_S 300.0
#define WATCHDOG_FINISH_S 60.0
/* Heartbeat period: the limit / WATCHDOG_BEATS_PER_LIMIT within these
 * bounds (a file write per rank and period: few on a shared file system);
 * a hang's diagnosis watches the heartbeats for WATCHDOG_LOOKS periods. */
#define WATCHDOG_BEATS_PER_LIMIT 30.0
#define WATCHDOG_BEAT_MIN_S 0.5
#define WATCHDOG_BEAT_MAX_S 5.0
#define WATCHDOG_LOOKS 3
/* Once a stop signal came, a rank waiting in a step's collective (the
 * control reduction, the gradient allreduce) waits at most this multiple
 * of the longest step, and at least the floor: a peer that died (srun
 * --kill-on-bad-exit and mpirun TERM the survivors) or is stopped cannot
 * take part in the stop, and the survivors would otherwise wait out the
 * whole limit, or SLURM's KillWait. */
#define WATCHDOG_STOP_FLOOR_S 5.0

/* Room for a report: a few lines per rank named. */
#define WATCHDOG_REPORT_MAX 4096

/* One rank as the start gathered it. */
typedef struct {
    int pid;
    char host[64];
} watchdog_peer_t;

typedef void (*watchdog_fire_fn)(const char *report, void *arg);

typedef struct {
    int rank, size;
    const watchdog_peer_t *peers; /* size entries (copied), or NULL */
    double timeout_s;             /* > 0 fixed, WATCHDOG_AUTO, 0 off */
    const char *heartbeat_dir;    /* NULL or "": no heartbeats */
    uint64_t token;               /* the same on every rank of this job */
    watchdog_fire_fn fire;        /* called once, on the watchdog thread */
    int (*stop_requested)(void);  /* NULL, or non-zero once a stop signal came
                                     (async-signal-safe to read) */
    void *arg;
    const char *run_dir;          /* NULL or "": no failure record; else a hang
                                     writes one (fault/failure.h) before fire */
} watchdog_opts_t;

typedef enum { WATCHDOG_OK = 0, WATCHDOG_EFAIL = -1 } watchdog_err_t;

/** Start the thread (phase WATCHDOG_START, step 0).  With timeout_s 0 it
 *  still writes heartbeats.  @return WATCHDOG_OK, or WATCHDOG_EFAIL with
 *  err set (already started, no thread). */
int watchdog_start(const watchdog_opts_t *opts, char *err, size_t cap);
/** This rank enters phase for step (progress).  A no-op when not started. */
void watchdog_phase(watchdog_phase_t phase, int64_t step);
/** Where this rank is: the phase and step of its last watchdog_phase
 *  (WATCHDOG_START and 0 when not started).  For a failure record. */
void watchdog_where(watchdog_phase_t *phase, int64_t *step);
/** Have the thread write this rank's heartbeat now, and wait (at most
 *  1 s) until it has: the last sign of life before a fault that --fault
 *  raises, so that the next launch knows when it came.  A no-op without
 *  heartbeats. */
void watchdog_beat_now(void);
/** Stop and join the thread, remove this rank's heartbeat.  Accepts "not
 *  started". */
void watchdog_stop(void);

/** The measurements the limit derives from: the longest step phase,
 *  evaluation and save so far (< 0: none yet). */
typedef struct {
    double step_s, eval_s, save_s;
} watchdog_seen_t;

/** Seconds phase may go without progress, for --hang-timeout timeout_s
 *  (> 0, or WATCHDOG_AUTO) and what was seen.  Pure: for tests. */
double watchdog_allowance(watchdog_phase_t phase, double timeout_s, const watchdog_seen_t *seen);

/** The allowance once a stop signal came: in the control reduction and the
 *  gradient allreduce, once a step was measured, min(watchdog_allowance,
 *  max(WATCHDOG_STOP_FLOOR_S, WATCHDOG_MULTIPLE x the longest step));
 *  otherwise watchdog_allowance.
 *  Pure: for tests. */
double watchdog_stop_allowance(watchdog_phase_t phase, double timeout_s,
                               const watchdog_seen_t *seen);

/** Seconds between heartbeats for --hang-timeout timeout_s (the same on
 *  every rank: it depends on the option only).  Pure: for tests. */
double watchdog_beat_period(double timeout_s);

/** What the heartbeats of an earlier run in the same directory say.  A rank
 *  that ends cleanly removes its heartbeat (watchdog_stop), so files left
 *  over mean that run ended unplanned: killed, crashed or ended by a hang. */
typedef struct {
    int ranks;                 /* heartbeat files found (0: a clean end, or none) */
    int64_t step_done;         /* the furthest step a rank had finished */
    double first_silent;       /* wall clock of the earliest last heartbeat: when
                                  the first rank stopped (the failure), to within
                                  a heartbeat period */
    double last_silent;        /* of the latest: about when the job ended */
    int first_rank, first_pid; /* the rank that went silent first */
    char first_host[64];
} watchdog_leftover_t;

/** Read the heartbeats an earlier run left in dir, then remove them (a
 *  later start must not read them again).  Call before watchdog_start, on
 *  one rank.  A missing dir is "none".  @return WATCHDOG_OK. */
int watchdog_leftovers(const char *dir, watchdog_leftover_t *out);

/** "the gradient allreduce of step 12" and the like, into buf. */
const char *watchdog_phase_text(watchdog_phase_t phase, int64_t step, char *buf, size_t cap);

#endif
