/*
 * local_save_internal.h - what the files of the node-local tier's save
 * share (not a public header: the save's API is local_save.h).  The save
 * is cut by concern:
 *
 *   local_save.c      the phase machine on the training thread: opening and
 *                     closing the save's state, the start, the votes at step
 *                     boundaries, the seal, the failure path
 *   local_snapshot.c  what the start copies of the state, and the buffers
 *                     kept from save to save for it
 *   local_helper.c    the helper thread and its jobs (no collective)
 *   local_exchange.c  the partner exchange: nonblocking point-to-point on
 *                     the tier's own communicator
 *
 * local_tier.c opens and closes the save's state with the tier
 * (tier_async_open, tier_async_close).
 *
 * Who touches what: the training thread owns struct tier_async, but for
 * what the running job uses while the job runs (the job's fields, the
 * buffers of the save in flight); `done`, `copying` and `cancel` are the
 * only fields both threads touch at once, and they are atomic.
 */
#ifndef FTRAIN_LOCAL_SAVE_INTERNAL_H
#define FTRAIN_LOCAL_SAVE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt_local.h"
#include "parallel/comm.h"
#include "state/state.h"
#include "util/util.h"
#include "tier/local_tier.h"
#include "tier/local_save.h"
#include "tier/local_inplace_internal.h"

/* The room for a message that outlives the call that made it: the helper's
 * job has no caller's buffer, so its failure waits here for the next vote. */
#define TIER_MSG_MAX 1024

/* One rank's part of the allgather after the writes. */
typedef struct {
    int32_t rc;                 /* 0, or the TIER_E... code of its write */
    uint32_t pad;
    ckpt_shard_info_t info;
} tier_msg_t;

/* The phases of the save in flight (local_save.c's state diagram). */
typedef enum { PH_IDLE, PH_WRITING, PH_EXCHANGING, PH_PUTTING } tier_phase_t;
/* The helper's jobs (local_helper.c). */
typedef enum { JOB_PREPARE, JOB_WRITE, JOB_EXCHANGE_PUT, JOB_PUT, JOB_PRUNE } tier_job_t;

struct tier_async {
    comm_xfer_t *xfer;          /* the tier's own channel (communicator) */
    int threads_ok;             /* MPI's thread level allows a helper thread */
    int xfer_thread;            /* the helper moves the exchange (MULTIPLE) */
    atomic_int cancel;          /* the training thread ends the helper's exchange */
    /* The helper thread: one job at a time. */
    pthread_t thread;
    int running;                /* a job thread started and not yet joined */
    atomic_int done;            /* that job has finished */
    tier_job_t job;
    int job_rc;                 /* TIER_OK, or a TIER_E... code with job_err */
    char job_err[TIER_MSG_MAX];
    int on_helper;              /* that job runs on a thread of its own */
    double job_cpu;             /* that job's CPU seconds (its thread's clock) */
    double cpu;                 /* the jobs' CPU since the last report */
    /* Buffers kept from save to save (grown when too small). */
    int prepared;
    size_t want_floats;         /* what tier_save_prepare asked for */
    uint64_t want_recv;
    float *copy;                /* the snapshot copy */
    size_t copy_floats;
    uint64_t touch_lo, touch_hi; /* its bytes this rank's slice uses (hi 0: all) */
    /* The copy of this rank's slice, planned by the start and made there
     * or by the helper first thing in JOB_WRITE (tier_snapshot_copy);
     * `copying` is 1 from the start until the helper has made it
     * (tier_save_settle waits for that). */
    util_copy_range_t *ranges;
    size_t ranges_cap, nranges, range_bytes;
    int copy_threads;
    atomic_int copying;
    int failed_tmp;             /* a failed save left its temp dir: remove_failed_tmps */
    void **recv;                /* nsrc receive buffers for the copies kept here */
    uint64_t *recv_cap;
    uint64_t *recv_len;         /* the bytes of each copy of the save in flight */
    void *own;                  /* own shard read back, where it cannot be mapped */
    uint64_t own_cap;
    tier_msg_t *all;            /* size entries */
    void **dst;                 /* nsrc: where each copy is received */
    uint64_t *sum;              /* nsrc: each copy's XXH64, hashed as it landed */
    int summed;                 /* sum holds this save's (tier_exchange_run) */
    /* The save in place (local_inplace.c): on a memory file system with
     * stored shards, the files are the snapshot and the receive buffers. */
    int inplace;
    tier_files_t files;         /* [0] own shard, [1 + i] copy of srcs[i] */
    uint64_t *want_len;         /* 1 + nsrc: each file's bytes (0: unknown) */
    size_t frame_bytes;         /* of the stored shards */
    ckpt_shard_info_t own_info; /* this rank's shard, written in place */
    uint64_t lo, hi;            /* its slice */
    int leaked;                 /* an exchange never completed: its buffers stay */
    /* The save in flight. */
    tier_phase_t phase;
    int64_t step;
    state_snapshot_t *snap;
    const unsigned char *send;  /* this rank's shard file bytes */
    uint64_t send_len;
    void *map;                  /* send, when it is a mapping */
    size_t map_len;
    int posted;                 /* the training thread has posted the exchange */
    double started, copy_began, put_end;
    int skipped;                /* saves due while this one was in flight */
    char prune_name[CKPT_FILE_NAME_MAX];
    tier_report_t rep;          /* what the line will say, filled as it goes */
};

/* ---- local_save.c ---------------------------------------------------------- */

/** Collective, at the end of tier_open: the save's state and the tier's
 *  own channel for the partner exchange (comm_xfer_open: a duplicate of
 *  comm's MPI communicator).  @return TIER_OK, or a TIER_E... code (err
 *  set; a failure on every rank). */
int tier_async_open(tier_t *t, comm_t *comm, char *err, size_t cap);

/** Release the save's state (tier_close): a save in flight is abandoned,
 *  never sealed.  Accepts a tier whose async part was never opened. */
void tier_async_close(tier_t *t);

/* ---- local_snapshot.c ------------------------------------------------------ */

/** Make *buf hold at least need bytes, every page touched.  @return
 *  TIER_OK, or TIER_ENOMEM (*buf is then NULL and *cap 0). */
int tier_grow_touched(void **buf, uint64_t *cap, uint64_t need);

/** Rank r's slice [*lo, *hi) of the flat space of a snapshot's tensors. */
void tier_slice_of(const tier_t *t, int r, const state_local_view_t *view, uint64_t *lo,
                   uint64_t *hi);

/** The helper's JOB_PREPARE: the snapshot copy and the receive buffers
 *  (in place, the files) as tier_save_prepare asked, touched.  A failure
 *  is no error here: the start tries again and says so. */
void tier_snapshot_buffers(tier_t *t);

/** The start's snapshot of st (a->snap), and the plan of the copy of this
 *  rank's slice (a->ranges), made here unless the helper moves the
 *  exchange (then tier_snapshot_copy makes it).  @return TIER_OK, or a
 *  TIER_E... code (err set; nothing in a->snap). */
int tier_snapshot_take(tier_t *t, const state_t *st, char *err, size_t cap);

/** The helper's copy of the slice the start planned, when it left it to the
 *  helper; clears `copying`, which tier_save_settle waits on. */
void tier_snapshot_copy(tier_t *t);

/* ---- local_helper.c -------------------------------------------------------- */

/** Give the helper its next job (the last one is joined).  Under
 *  MPI_THREAD_SINGLE, or when no thread can start, it runs here. */
void tier_job_run(tier_t *t, tier_job_t job);
/** @return 1 when no job runs on the helper or it has finished. */
int tier_job_finished(const struct tier_async *a);
/** Wait for the job.  @return the seconds waited. */
double tier_job_join(tier_t *t);
/** End the job, giving up an exchange it waits on.  @return the seconds
 *  waited. */
double tier_job_cancel(tier_t *t);
/** The job failed: code and its message into job_rc and job_err. */
void tier_job_fail(struct tier_async *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Unmap this rank's own shard file, mapped for the exchange. */
void tier_own_unmap(struct tier_async *a);

/* ---- local_exchange.c ------------------------------------------------------ */

/** Collective, in tier_async_open: open the tier's own channel on every
 *  rank or on none, then agree whether the helper moves the exchange (the
 *  same on every rank).  rc: this rank's failure so far (err set).
 *  @return TIER_OK, or a TIER_E... code (err set; on every rank). */
int tier_exchange_open(tier_t *t, comm_t *comm, int rc, char *err, size_t cap);

/** The training thread, before the exchange: receive buffers (or, in
 *  place, files) for the copies kept here, and room for the requests.
 *  @return TIER_OK, or a TIER_E... code (err set). */
int tier_exchange_reserve(tier_t *t, char *err, size_t cap);
/** Post the exchange: the copies kept here, then this rank's own shard.
 *  @return TIER_OK, or TIER_EFAIL (err set; pieces posted stay in flight). */
int tier_exchange_post(tier_t *t, char *err, size_t cap);
/** The training thread's share of the exchange at one step boundary:
 *  tests it for a short budget.  *done: every piece has moved here.
 *  @return TIER_OK, or TIER_EFAIL (err set). */
int tier_exchange_test(tier_t *t, int *done, char *err, size_t cap);
/** The helper's JOB_EXCHANGE_PUT, first half: post the exchange and move it
 *  to its end (or until cancelled), hashing copies as they land in place.
 *  @return TIER_OK, or a TIER_E... code (tier_job_fail said why). */
int tier_exchange_run(tier_t *t);

#endif
