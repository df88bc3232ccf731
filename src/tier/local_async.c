/*
 * local_async.c - the node-local tier's save in the background (local_tier.h,
 * "tier_save_*"): the snapshot on the training thread; this rank's shard
 * written, the partner exchange moved (by default), partner copies checked
 * and written and old steps pruned on a helper thread; the votes and the
 * seal on the training thread at step boundaries.
 *
 * THREADS AND MPI: who moves the partner exchange
 *
 *   comm.c's functions are plain MPI calls on comm->mpi, with no lock, and
 *   the training thread uses that communicator at every step (the control
 *   reduction, the gradient allreduce, the shared tier's commit).  So a
 *   helper thread never calls them: even under MPI_THREAD_MULTIPLE two
 *   threads making collectives on one communicator cannot keep the same
 *   order on every rank, which MPI requires.  Hence:
 *
 *   - every collective of a local save is made on the training thread, at
 *     step boundaries, by tier_save_start/progress/finish, which every rank
 *     calls at the same boundaries (train.c's save_if_due, the stop, the
 *     end): the votes are small allreduces on the trainer's communicator,
 *     in the same order everywhere because each one's outcome is global;
 *   - the partner copies move with MPI_Isend/MPI_Irecv on a communicator
 *     of the tier's own (comm_xfer_open: MPI_Comm_dup of comm's at
 *     tier_open, a collective on the training thread), so that no message
 *     of the exchange can match any other point-to-point traffic while it
 *     is in flight over several steps.  Who moves it:
 *       thread (--ckpt-local-exchange thread, or auto where every rank has
 *         a core to spare: tier_open; main.c then asks MPI for
 *         MPI_THREAD_MULTIPLE): the helper thread posts it and
 *         tests it to its end (JOB_EXCHANGE_PUT), then checks and writes
 *         the copies.  Only the helper touches the tier's communicator
 *         while that job runs, the training thread only the trainer's.
 *         With shared memory Open MPI copies the bytes in whichever thread
 *         is inside MPI: now the helper, which has a core to itself where
 *         the node has one to spare (a GPU trainer's host thread mostly
 *         waits), not the training thread.  A peer that never comes holds
 *         the helper, and the training thread waits for it only in
 *         tier_save_finish (the watchdog's allowance for a save bounds
 *         that, as for every collective) or ends it (job_cancel) when the
 *         save fails or the tier closes.
 *       steps (--ckpt-local-exchange steps, auto where some rank has no
 *         core to spare, or MPI gave less than MULTIPLE on some rank:
 *         tier_async_open's agreement, so that all ranks vote alike): the
 *         training thread moves it by MPI_Testall (comm_xfer_test) at each
 *         boundary for at most TIER_EXCHANGE_BUDGET_S, right after the
 *         step's reductions, when the ranks are together, and its bytes
 *         also move inside the next steps' MPI calls (the gradient
 *         allreduce), where they fill the time a rank waits for the slower
 *         one.  Where the ranks fill the cores that costs the training
 *         less than a helper competing with them for a core; where a core
 *         is spare, more (docs/bench-log.md, "Who moves the partner
 *         exchange");
 *   - otherwise the helper thread makes no MPI call and no collective: it
 *     writes the shard (state_snapshot_write, thread-safe), maps it,
 *     hashes and writes partner copies (ckpt_shard_put), and prunes
 *     (ckpt_prune); ckpt and comm keep their error messages per thread, so
 *     its messages are its own, copied into job_err.  It runs one job at a
 *     time, and the training thread never touches what a running job uses.
 *
 *   Under MPI_THREAD_SINGLE (tier_async_open asks comm_threads_allowed,
 *   MPI_Query_thread) no thread is started: the helper's jobs then run on
 *   the training thread, and the exchange moves at step boundaries.
 *
 *   The MPI calls themselves are comm.c's (comm.h: comm_xfer_* for the
 *   exchange, comm_threads_allowed, comm_threads_multiple and
 *   comm_is_main_thread for the threads): this file makes none, and the
 *   rules above are about when and on which thread it calls those.
 *
 * A SAVE, ON EVERY RANK (each move between phases is agreed by a vote)
 *
 *   start (boundary k)  copy this rank's slice of the state into the
 *                       snapshot buffer (kept from save to save, touched
 *                       once); where the helper moves the exchange, the
 *                       helper makes that copy instead, while the training
 *                       thread computes step k+1, which reads the state
 *                       but writes it only in its update, which waits for
 *                       the copy (tier_save_settle); helper: write this
 *                       rank's shard into .tmp-step-k (fsync'd), map the
 *                       file, populated (util_map_file)           [WRITING]
 *   vote: all written   allgather the shard infos; post MPI_Irecv of the
 *                       copies kept here into receive buffers kept from
 *                       save to save, MPI_Isend of the mapped file (no read
 *                       back, no new memory)                   [EXCHANGING]
 *                       (thread: the helper posts them, tests them to
 *                       their end, and goes on to PUTTING's work at once:
 *                       no vote between; in place it hashes each piece of
 *                       a copy as it lands, its own pieces sent
 *                       TIER_EXCHANGE_WINDOW at a time)          [PUTTING]
 *   vote: all moved     helper: hash each copy against its writer's xxh64
 *                       (or compare the sum taken as it landed), write it
 *                       (temp name, fsync, rename), unmap        [PUTTING]
 *   vote: all durable   each node's first rank seals: manifest, rename of
 *                       .tmp-step-k to step-k, THE node's commit point;
 *                       vote; report; helper: prune old steps        [IDLE]
 *
 * IN PLACE (local_inplace.c), where the node's root is a memory file system
 * and shards are stored: the slice is copied straight into this rank's own
 * mapped file (no snapshot buffer), as above, the helper finishes the
 * shard around it and renames it into .tmp-step-k [WRITING]; the copies
 * are received straight into mapped files (no receive buffers) that the
 * helper checks and renames [PUTTING]; after the seal each rank takes its
 * files back out of the step that falls out of `keep` (reclaim_files),
 * before the allreduce after which the node's first rank prunes, and the
 * helper maps them again for the next save.
 *
 * So nothing is sealed on any node until every rank's shard and every
 * partner copy is durable on every node, and a local checkpoint is either
 * sealed whole on a node or invisible (.tmp-step-k, which no reader opens)
 * whenever the run ends: a crash, a kill, a stop or the end.  A stop and
 * the end complete the save in flight (tier_save_finish); an error path
 * (tier_close) abandons it.  A failure anywhere ends the save on every rank
 * at the same vote and leaves its temp directory, invisible, behind; the
 * node's first rank removes it before the next save takes space
 * (remove_failed_tmps), and the drop after a resume removes it too.
 * No wait is unbounded but by the peers and the local I/O: a phase waits
 * at a boundary only in tier_save_finish, and there the watchdog's
 * allowance for a save bounds a dead or stopped peer, as for every
 * collective of the trainer.  Errors are returned, never exit().
 */
#include "tier/local_async_internal.h"

#include <assert.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "ftrain/ckpt_local.h"
#include "util/util.h"
#include "tier/local_inplace_internal.h"

/* The helper's pause between two tests of the exchange it moves, where the
 * rank has no core to spare.  Open MPI moves shared-memory bytes only inside
 * MPI calls, and a helper that tests without a pause competes for a core
 * with training; the pause leaves the core to the training at the price of
 * a slower exchange.  `auto` does not take this path on such a node: even
 * with the pause the helper cost more run time than the training thread's
 * own exchange (docs/bench-log.md, "Who moves the partner exchange"). */
#define TIER_EXCHANGE_NAP_NS 50000L
/* The pause where the rank has a core to spare (tier_t.spare_core), with
 * the helper's timer slack at 1 ns so that it is not stretched to the
 * kernel's default 50 us: the pause throttles the exchange, and the spare
 * core absorbs the shorter one's polling (docs/bench-log.md, "The helper's
 * pause throttled the partner copy"). */
#define TIER_EXCHANGE_NAP_SPARE_NS 5000L

/* The pieces (4 MiB: comm_xfer_post) of its own shard a rank's helper has
 * in flight at once, where it hashes the copies it receives as they land
 * (job_exchange_put): the partner's pieces then land in order, a group at
 * a time, and are hashed soon after, from the cache; posted all at once,
 * Open MPI moves them side by side and they all land at the end.  Fewer
 * than 8 in flight made the copy slower than posting all at once; 8
 * matched it (docs/bench-log.md, "The partner exchange in pieces"). */
#define TIER_EXCHANGE_WINDOW 8

/* The own shard is read back in pieces of this many bytes (read() moves at
 * most about 2 GiB at once). */
#define PIECE ((uint64_t)1 << 28)
#define JOB_ERR_MAX 1024

/* One rank's part of the allgather after the writes. */
typedef struct {
    int32_t rc;
    uint32_t pad;
    ckpt_shard_info_t info;
} tier_msg_t;

typedef enum { PH_IDLE, PH_WRITING, PH_EXCHANGING, PH_PUTTING } phase_t;
typedef enum { JOB_PREPARE, JOB_WRITE, JOB_EXCHANGE_PUT, JOB_PUT, JOB_PRUNE } job_t;

struct tier_async {
    comm_xfer_t *xfer;          /* the tier's own channel (communicator) */
    int threads_ok;             /* MPI's thread level allows a helper thread */
    int xfer_thread;            /* the helper moves the exchange (MULTIPLE) */
    atomic_int cancel;          /* the training thread ends the helper's exchange */
    /* The helper thread: one job at a time. */
    pthread_t thread;
    int running;                /* a job thread started and not yet joined */
    atomic_int done;            /* that job has finished */
    job_t job;
    int job_rc;                 /* 0, or 1 with job_err */
    char job_err[JOB_ERR_MAX];
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
     * or by the helper first thing in JOB_WRITE (copy_slice); `copying` is
     * 1 from the start until the helper has made it (tier_save_settle
     * waits for that). */
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
    int summed;                 /* sum holds this save's (job_exchange_put) */
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
    phase_t phase;
    int64_t step;
    state_snapshot_t *snap;
    const unsigned char *send;  /* this rank's shard file bytes */
    uint64_t send_len;
    void *map;                  /* send, when it is a mapping */
    size_t map_len;
    int mpi_failed;             /* posting or testing the exchange failed here */
    char mpi_err[JOB_ERR_MAX];
    double started, copy_began, put_end;
    int skipped;                /* saves due while this one was in flight */
    char prune_name[CKPT_FILE_NAME_MAX];
    tier_report_t rep;          /* what the line will say, filled as it goes */
};

/* ---- buffers kept across saves ------------------------------------------ */

/* Make *buf hold at least need bytes, every page touched (so that no later
 * use pays a page fault: the kernel's zeroing of new pages is most of a
 * fresh buffer's cost).  @return 0, or 1 when out of memory (*buf is then
 * NULL and *cap 0). */
static int grow_touched(void **buf, uint64_t *cap, uint64_t need)
{
    if (*buf && *cap >= need)
        return 0;
    free(*buf);
    *cap = 0;
    if ((uint64_t)(size_t)need != need || !(*buf = malloc(need ? (size_t)need : 1)))
        return 1;
    memset(*buf, 0, (size_t)need);
    *cap = need;
    return 0;
}

/* The snapshot copy: as large as the whole state (the snapshot lays every
 * tensor out in it), but only the bytes that will hold this rank's slice,
 * [touch_lo, touch_hi), are ever used (take_slice), so only they are
 * touched; the rest is never faulted in.  @return 0 or 1 (no memory). */
static int grow_copy(struct tier_async *a, size_t floats)
{
    size_t bytes = floats * sizeof(float) + 1; /* a state of no floats gets a buffer */
    free(a->copy);
    a->copy_floats = 0;
    if (!(a->copy = malloc(bytes)))
        return 1;
    size_t lo = a->touch_hi ? (size_t)a->touch_lo : 0;
    size_t hi = a->touch_hi && a->touch_hi < bytes ? (size_t)a->touch_hi : bytes;
    if (lo < hi)
        memset((unsigned char *)a->copy + lo, 0, hi - lo);
    a->copy_floats = floats;
    return 0;
}

/* Rank r's slice of the flat space of a snapshot's tensors, by the
 * format's slice rule (ckpt_slice): the only bytes its shard holds. */
static void slice_of(const tier_t *t, int r, const state_local_view_t *view, uint64_t *lo,
                     uint64_t *hi)
{
    uint64_t total = 0;
    for (size_t i = 0; i < view->ntensors; i++)
        if (view->tensors[i].offset + view->tensors[i].nbytes > total)
            total = view->tensors[i].offset + view->tensors[i].nbytes;
    int rc = ckpt_slice(r, t->size, total, lo, hi);
    assert(rc == CKPT_OK); /* r is a rank of the tier's world */
    (void)rc;
}

/* ---- the helper thread ---------------------------------------------------- */

__attribute__((format(printf, 2, 3)))
static void job_fail(struct tier_async *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->job_err, sizeof a->job_err, fmt, ap);
    va_end(ap);
    a->job_rc = 1;
}

/* JOB_PREPARE: the snapshot copy and the receive buffers, touched.  A
 * failure is no error here: the start tries again and says so. */
static void job_prepare(tier_t *t)
{
    struct tier_async *a = t->async;
    if (a->inplace) {
        char err[JOB_ERR_MAX];
        for (int k = 0; k < a->files.nfiles; k++)
            if (a->want_len[k])
                tier_files_map(&a->files, k, a->want_len[k], err, sizeof err);
        return;
    }
    if (a->copy_floats < a->want_floats)
        grow_copy(a, a->want_floats);
    for (int i = 0; i < t->nsrc; i++)
        grow_touched(&a->recv[i], &a->recv_cap[i], a->want_recv);
}

/* Map this rank's shard file, just written, for the exchange: its pages
 * are the file's own (tmpfs, or the page cache), so nothing is read back
 * or copied.  Where it cannot be mapped, read it into a buffer kept from
 * save to save.  @return 0 or 1 (job_err set). */
static int map_own(tier_t *t, const state_local_view_t *view)
{
    struct tier_async *a = t->async;
    char step[CKPT_FILE_NAME_MAX], shard[CKPT_FILE_NAME_MAX],
        path[CONFIG_PATH_MAX + 3 * CKPT_FILE_NAME_MAX];
    ckpt_step_dirname(view->step, step, sizeof step);
    ckpt_shard_name(t->rank, shard, sizeof shard);
    /* The save's temp dir (docs/checkpoint-format.md, section 1). */
    snprintf(path, sizeof path, "%s/.tmp-%s/%s", t->root, step, shard);
    uint64_t len = view->info.file_bytes;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != len) {
        job_fail(a, "cannot open '%s' (%llu bytes) to send it: %s", path,
                 (unsigned long long)len, fd < 0 ? strerror(errno) : "not that file");
        if (fd >= 0)
            close(fd);
        return 1;
    }
    void *map = len ? util_map_file(fd, (size_t)len, PROT_READ) : MAP_FAILED;
    if (map != MAP_FAILED) {
        a->map = map;
        a->map_len = (size_t)len;
        a->send = map;
    } else if (grow_touched(&a->own, &a->own_cap, len) != 0) {
        job_fail(a, "no memory to read '%s' (%llu bytes) back", path, (unsigned long long)len);
    } else {
        for (uint64_t got = 0; got < len && !a->job_rc;) {
            size_t want = len - got > PIECE ? (size_t)PIECE : (size_t)(len - got);
            ssize_t n = pread(fd, (unsigned char *)a->own + got, want, (off_t)got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                job_fail(a, "cannot read '%s' back: %s", path, n < 0 ? strerror(errno) : "short");
            else
                got += (uint64_t)n;
        }
        a->send = a->own;
    }
    a->send_len = len;
    close(fd);
    return a->job_rc;
}

/* The copy of this rank's slice that the start planned (take_slice,
 * take_inplace) and left to the helper (where the helper moves the
 * exchange), made while the training thread computes the next step,
 * which only reads the state; tier_save_settle holds its next write until
 * `copying` is 0. */
static void copy_slice(tier_t *t)
{
    struct tier_async *a = t->async;
    if (!atomic_load(&a->copying))
        return;
    if (t->copy_delay_ms > 0) /* a test aid */
        nanosleep(&(struct timespec){t->copy_delay_ms / 1000,
                                     (long)(t->copy_delay_ms % 1000) * 1000000L}, NULL);
    util_copy_ranges(a->ranges, a->nranges, a->range_bytes, a->copy_threads);
    atomic_store(&a->copying, 0);
}

/* JOB_WRITE: this rank's slice copied (copy_slice), its shard into the
 * node's root, then mapped. */
static void job_write(tier_t *t)
{
    struct tier_async *a = t->async;
    double t0 = util_mono_s();
    copy_slice(t);
    state_local_view_t view;
    if (a->inplace) {
        /* The slice is in the file already (take_inplace). */
        tier_file_t *own = &a->files.files[0];
        int rc = ckpt_stored_shard_finish(own->map, own->len, a->lo, a->hi, a->frame_bytes,
                                          &a->own_info);
        if (rc != CKPT_OK)
            job_fail(a, "%s: %s", ckpt_strerror(rc), ckpt_last_error());
        else if (tier_files_adopt(&a->files, 0, t->root, (uint64_t)a->step, t->rank, a->job_err,
                                  sizeof a->job_err) != 0)
            a->job_rc = 1;
        a->send = own->map;
        a->send_len = own->len;
    } else if (state_snapshot_write(a->snap, t->root, t->rank, t->size) != STATE_OK ||
        state_snapshot_local(a->snap, &view) != STATE_OK)
        job_fail(a, "%s", state_snapshot_error(a->snap));
    else if (t->partner >= 0)
        map_own(t, &view);
    a->rep.write_s = util_mono_s() - t0;
}

static void unmap_own(struct tier_async *a)
{
    if (a->map)
        util_unmap(a->map, a->map_len);
    a->map = NULL;
    a->send = NULL;
}

/* JOB_PUT: each copy received, checked against its writer's checksum
 * before a byte of it is written (ckpt_shard_put), written and fsync'd;
 * then our own mapping goes (every send has completed). */
static void job_put(tier_t *t)
{
    struct tier_async *a = t->async;
    for (int i = 0; i < t->nsrc && !a->job_rc; i++) {
        const ckpt_shard_info_t *info = &a->all[t->srcs[i]].info;
        if (a->inplace) {
            /* Checked in the file it was received into (hashed as it
             * landed, or here), then renamed. */
            int rc = a->summed
                         ? ckpt_shard_check_sum(info->file_bytes, a->sum[i], info->xxh64,
                                                (uint64_t)a->step, t->srcs[i])
                         : ckpt_shard_check(a->dst[i], info->file_bytes, info->xxh64,
                                            (uint64_t)a->step, t->srcs[i]);
            if (rc != CKPT_OK)
                job_fail(a, "partner copy of rank %d: %s: %s", t->srcs[i], ckpt_strerror(rc),
                         ckpt_last_error());
            else if (tier_files_adopt(&a->files, 1 + i, t->root, (uint64_t)a->step, t->srcs[i],
                                      a->job_err, sizeof a->job_err) != 0)
                a->job_rc = 1;
            else
                a->rep.copy_bytes += info->file_bytes;
            continue;
        }
        int rc = ckpt_shard_put(t->root, (uint64_t)a->step, t->srcs[i], a->recv[i],
                                info->file_bytes, info->xxh64);
        if (rc != CKPT_OK)
            job_fail(a, "partner copy of rank %d: %s: %s", t->srcs[i], ckpt_strerror(rc),
                     ckpt_last_error());
        else
            a->rep.copy_bytes += info->file_bytes;
    }
    a->summed = 0;
    unmap_own(a);
    if (a->inplace) /* every send and receive has completed */
        tier_files_retire(&a->files, a->step);
    a->put_end = util_mono_s();
}

static void post_exchange(tier_t *t);

/* Hash what has landed of each copy since the last call (hash[i] holds
 * hashed[i] bytes of copy i).  @return 1 when something was hashed, 0
 * when nothing new had landed, -1 when MPI failed (a->mpi_err). */
static int hash_landed(tier_t *t, XXH64_state_t **hash, uint64_t *hashed)
{
    struct tier_async *a = t->async;
    int any = 0;
    for (int i = 0; i < t->nsrc; i++) {
        uint64_t n = 0;
        if (comm_xfer_arrived(a->xfer, i, &n) != COMM_OK) {
            snprintf(a->mpi_err, sizeof a->mpi_err, "partner exchange: %s", comm_last_error());
            return -1;
        }
        if (n > hashed[i]) {
            XXH64_update(hash[i], (const char *)a->dst[i] + hashed[i], (size_t)(n - hashed[i]));
            hashed[i] = n;
            any = 1;
        }
    }
    return any;
}

/* JOB_EXCHANGE_PUT (under MPI_THREAD_MULTIPLE): post the exchange on the
 * tier's own communicator, which no other thread uses while this job runs,
 * and move it to its end here, pausing TIER_EXCHANGE_NAP_NS between tests;
 * then JOB_PUT.  Where the copies land in their files (in place), each
 * piece of a copy is hashed soon after it has landed, from the cache, and
 * the pause is taken only when nothing new came: the check in JOB_PUT then
 * compares sums instead of reading every copy again (docs/bench-log.md,
 * "The partner exchange in pieces").  The training thread ends a wait on a
 * peer that never comes by setting `cancel` (fail_save,
 * tier_async_close): the pieces still in flight are then its to abandon.
 * A failure is job_err. */
static void job_exchange_put(tier_t *t)
{
    struct tier_async *a = t->async;
    long nap = TIER_EXCHANGE_NAP_NS;
#ifdef PR_SET_TIMERSLACK
    /* The calling thread's slack only (the helper's, under MPI_THREAD_MULTIPLE). */
    if (t->spare_core && prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0)
        nap = TIER_EXCHANGE_NAP_SPARE_NS;
#endif
    /* Without memory for the hash states the copies are hashed whole in
     * JOB_PUT, as in the other modes. */
    XXH64_state_t **hash = NULL;
    uint64_t *hashed = NULL;
    int hashing = a->inplace && t->nsrc > 0;
    if (hashing) {
        hash = calloc((size_t)t->nsrc, sizeof *hash);
        hashed = calloc((size_t)t->nsrc, sizeof *hashed);
        for (int i = 0; hash && i < t->nsrc && hashing; i++)
            if (!(hash[i] = XXH64_createState()) || XXH64_reset(hash[i], 0) != XXH_OK)
                hashing = 0;
        hashing = hashing && hash && hashed;
    }
    post_exchange(t);
    int done = 0;
    while (!a->mpi_failed && !done && !atomic_load(&a->cancel)) {
        int got = 0;
        if (comm_xfer_test(a->xfer, 0, &done) != COMM_OK) {
            snprintf(a->mpi_err, sizeof a->mpi_err, "partner exchange: %s", comm_last_error());
            a->mpi_failed = 1;
        } else if (hashing && (got = hash_landed(t, hash, hashed)) < 0) {
            a->mpi_failed = 1;
        } else if (!done && !got) {
            nanosleep(&(struct timespec){0, nap}, NULL);
        }
    }
    if (hashing && done && !a->mpi_failed) {
        for (int i = 0; i < t->nsrc; i++)
            a->sum[i] = XXH64_digest(hash[i]);
        a->summed = 1;
    }
    for (int i = 0; hash && i < t->nsrc; i++)
        XXH64_freeState(hash[i]);
    free(hash);
    free(hashed);
    if (a->mpi_failed)
        job_fail(a, "%s", a->mpi_err);
    else if (!done)
        job_fail(a, "partner exchange: abandoned");
    else
        job_put(t);
}

/* JOB_PRUNE (a node's first rank, after its seal): the newest `keep` steps
 * stay, never the one just sealed. */
static void job_prune(tier_t *t)
{
    struct tier_async *a = t->async;
    if (ckpt_prune(t->root, t->keep, a->prune_name, NULL) != CKPT_OK)
        job_fail(a, "%s sealed, but pruning older steps failed: %s", a->prune_name,
                 ckpt_last_error());
    if (a->inplace)
        job_prepare(t); /* the next save's files */
}

static void *job_main(void *arg)
{
    tier_t *t = arg;
    struct tier_async *a = t->async;
    double cpu0 = util_thread_cpu_s();
    /* Named, so that top -H and perf tell it from the training thread (a
     * job run on the training thread keeps that thread's name). */
    if (a->on_helper)
        pthread_setname_np(pthread_self(), "ftrain-tier");
    switch (a->job) {
    case JOB_PREPARE: job_prepare(t); break;
    case JOB_WRITE: job_write(t); break;
    case JOB_EXCHANGE_PUT: job_exchange_put(t); break;
    case JOB_PUT: job_put(t); break;
    case JOB_PRUNE: job_prune(t); break;
    }
    a->job_cpu = util_thread_cpu_s() - cpu0;
    atomic_store(&a->done, 1);
    return NULL;
}

/* Give the helper its next job (the last one is joined).  A thread that
 * cannot start (or may not: MPI_THREAD_SINGLE) is no failure: the job runs
 * here, on the training thread. */
static void run_job(tier_t *t, job_t job)
{
    struct tier_async *a = t->async;
    a->job = job;
    a->job_rc = 0;
    a->job_err[0] = '\0';
    atomic_store(&a->done, 0);
    atomic_store(&a->cancel, 0);
    /* Under MPI_THREAD_SINGLE the process may have no second thread. */
    a->on_helper = 1;
    if (a->threads_ok &&
        pthread_create(&a->thread, NULL, job_main, t) == 0) {
        a->running = 1;
        return;
    }
    a->on_helper = 0;
    job_main(t);
    a->cpu += a->job_cpu;
}

static int job_finished(const struct tier_async *a)
{
    return !a->running || atomic_load(&a->done);
}

/* Wait for the job (local work, bounded by this node's I/O; an exchange,
 * bounded by the peers: a dead or stopped one is the watchdog's, as in any
 * collective); a failed prune is only a warning, said here (its step is
 * sealed).  @return the seconds waited. */
static double job_join(tier_t *t)
{
    struct tier_async *a = t->async;
    if (!a->running)
        return 0;
    double t0 = util_mono_s();
    pthread_join(a->thread, NULL);
    a->running = 0;
    a->cpu += a->job_cpu;
    if (a->job == JOB_PRUNE && a->job_rc) {
        fprintf(stderr, "ftrain: warning: local tier %s: %s\n", t->root, a->job_err);
        a->job_rc = 0;
    }
    return util_mono_s() - t0;
}

/* ---- opening and closing ------------------------------------------------- */

int tier_async_open(tier_t *t, comm_t *comm, char *err, size_t cap)
{
    struct tier_async *a = calloc(1, sizeof *a);
    int rc = !a, main_thread = 0;
    if (a) {
        a->recv = calloc((size_t)t->nsrc + 1, sizeof *a->recv);
        a->recv_cap = calloc((size_t)t->nsrc + 1, sizeof *a->recv_cap);
        a->recv_len = calloc((size_t)t->nsrc + 1, sizeof *a->recv_len);
        a->all = calloc((size_t)t->size, sizeof *a->all);
        a->dst = calloc((size_t)t->nsrc + 1, sizeof *a->dst);
        a->sum = calloc((size_t)t->nsrc + 1, sizeof *a->sum);
        a->want_len = calloc((size_t)t->nsrc + 1, sizeof *a->want_len);
        rc = !a->recv || !a->recv_cap || !a->recv_len || !a->all || !a->dst || !a->want_len ||
             !a->sum;
        a->threads_ok = comm_threads_allowed();
        main_thread = comm_is_main_thread();
    }
    if (rc)
        snprintf(err, cap, "local tier: out of memory");
    else if (!main_thread)
        rc = util_fail(err, cap, 1, "local tier: opened off the thread that started MPI");
    else if (t->level == 0 && tier_files_in_memory(t->root)) {
        a->inplace = 1;
        rc = tier_files_init(&a->files, t->root, t->rank, 1 + t->nsrc, err, cap);
    }
    /* Every rank opens the channel, or none: it is a collective (a dup). */
    int xrc = COMM_OK;
    if (comm_any_failed(comm, rc) ||
        (xrc = comm_xfer_open(comm, &a->xfer)) == COMM_EINVAL) {
        if (!rc)
            snprintf(err, cap, "local tier: %s", xrc == COMM_EINVAL
                     ? "no MPI communicator for the partner exchange"
                     : "another rank could not set up its local saves");
        t->async = a;
        tier_async_close(t);
        return TIER_EFAIL;
    }
    t->async = a;
    if (comm_any_failed(comm, xrc != COMM_OK)) {
        snprintf(err, cap, "local tier: MPI_Comm_dup failed");
        tier_async_close(t);
        return TIER_EFAIL;
    }
    /* Every rank the same way, or their votes would not match. */
    int can = t->exchange_thread && a->threads_ok && comm_threads_multiple();
    a->xfer_thread = !comm_any_failed(comm, !can);
    if (a->xfer_thread && a->inplace)
        comm_xfer_window(a->xfer, TIER_EXCHANGE_WINDOW);
    return TIER_OK;
}

/* End the helper's job; an exchange it is waiting on is given up (the
 * caller abandons what is left of it).  @return the seconds waited. */
static double job_cancel(tier_t *t)
{
    atomic_store(&t->async->cancel, 1);
    return job_join(t);
}

void tier_async_close(tier_t *t)
{
    struct tier_async *a = t->async;
    if (!a)
        return;
    job_cancel(t);
    if ((a->phase == PH_EXCHANGING || (a->phase == PH_PUTTING && a->xfer_thread)) &&
        comm_xfer_abandon(a->xfer))
        a->leaked = 1;
    state_snapshot_free(a->snap);
    if (a->leaked) {
        /* MPI may still read the mapping or write the buffers: they stay,
         * and so does the communicator, until the process ends. */
        t->async = NULL;
        return;
    }
    unmap_own(a);
    tier_files_free(&a->files, 1);
    free(a->dst);
    free(a->sum);
    free(a->want_len);
    for (int i = 0; a->recv && i < t->nsrc; i++)
        free(a->recv[i]);
    free(a->recv);
    free(a->recv_cap);
    free(a->recv_len);
    free(a->own);
    free(a->copy);
    free(a->ranges);
    free(a->all);
    comm_xfer_close(a->xfer); /* its communicator too, unless MPI has ended */
    free(a);
    t->async = NULL;
}

/* ---- a save ------------------------------------------------------------------ */

int tier_in_place(const tier_t *t)
{
    return t->async && t->async->inplace;
}

int tier_exchange_on_thread(const tier_t *t)
{
    return t->async && t->async->xfer_thread;
}

int tier_save_in_flight(const tier_t *t)
{
    return t->async && t->async->phase != PH_IDLE;
}

int64_t tier_save_step(const tier_t *t)
{
    return tier_save_in_flight(t) ? t->async->step : -1;
}

int tier_save_skip(tier_t *t)
{
    return tier_save_in_flight(t) ? ++t->async->skipped : 0;
}

double tier_save_settle(tier_t *t)
{
    struct tier_async *a = t ? t->async : NULL;
    if (!a || !atomic_load(&a->copying))
        return 0;
    /* `copying` is set only as JOB_WRITE starts, on a thread of its own
     * (running) or on this one, which makes the copy before it returns. */
    double t0 = util_mono_s();
    while (a->running && atomic_load(&a->copying))
        nanosleep(&(struct timespec){0, 20000}, NULL);
    double waited = util_mono_s() - t0;
    a->rep.stall_s += waited;
    a->rep.waited_s += waited;
    return waited;
}

void tier_save_prepare(tier_t *t, const state_t *st)
{
    struct tier_async *a = t->async;
    if (!a || a->prepared || a->running)
        return;
    a->prepared = 1;
    a->want_floats = state_floats(st);
    /* Where the slice will lie in the copy: the snapshot lays the tensors
     * out back to back, in order (a snapshot without a copy says how). */
    state_snapshot_t *probe = NULL;
    char err[256];
    state_local_view_t view;
    if (state_snapshot_take(st, t->size, NULL, 0, NULL, 0, t->level, &probe, err, sizeof err) ==
        STATE_OK) {
        state_snapshot_local(probe, &view);
        uint64_t lo, hi, at = 0;
        slice_of(t, t->rank, &view, &lo, &hi);
        a->touch_lo = UINT64_MAX;
        for (size_t i = 0; i < view.ntensors; i++) {
            const ckpt_tensor_t *x = &view.tensors[i];
            uint64_t begin = x->offset > lo ? x->offset : lo;
            uint64_t end = x->offset + x->nbytes < hi ? x->offset + x->nbytes : hi;
            if (begin < end) {
                if (a->touch_lo == UINT64_MAX)
                    a->touch_lo = at + (begin - x->offset);
                a->touch_hi = at + (end - x->offset);
            }
            at += x->nbytes;
        }
        if (a->touch_lo == UINT64_MAX)
            a->touch_lo = a->touch_hi = 0;
        if (a->inplace) {
            /* Each file's size: a stored shard of its writer's slice. */
            a->frame_bytes = view.opts->frame_bytes;
            a->want_len[0] = ckpt_stored_shard_bytes(hi - lo, a->frame_bytes);
            for (int i = 0; i < t->nsrc; i++) {
                slice_of(t, t->srcs[i], &view, &lo, &hi);
                a->want_len[1 + i] = ckpt_stored_shard_bytes(hi - lo, a->frame_bytes);
            }
        }
    }
    state_snapshot_free(probe);
    if (a->inplace) {
        run_job(t, JOB_PREPARE);
        return;
    }
    /* The copies kept here are other ranks' shards: stored (level 0), a
     * shard file is its slice of the flat space and a little more (frame
     * headers, the seek table); ckpt_slice_start cuts the space evenly. */
    uint64_t slice = (uint64_t)a->want_floats * sizeof(float) / (uint64_t)t->size + 1;
    a->want_recv = t->nsrc ? slice + slice / 64 + ((uint64_t)1 << 20) : 0;
    run_job(t, JOB_PREPARE);
}

/* Room for n copy ranges (kept from save to save).  @return 0 or 1. */
static int ranges_room(struct tier_async *a, size_t n)
{
    if (n <= a->ranges_cap)
        return 0;
    util_copy_range_t *r = realloc(a->ranges, n * sizeof *r);
    if (!r)
        return 1;
    a->ranges = r;
    a->ranges_cap = n;
    return 0;
}

/* Snapshot st into the copy buffer, but copy only this rank's slice of the
 * flat space (slice_of), the only bytes its shard holds: 1/W of a whole
 * copy.  The state's three host arrays are declared placed
 * (state_snapshot_take copies none of their tensors), and the slice's bytes
 * of each tensor are to be copied from a second snapshot that points at the
 * live state: the ranges are planned here and copied by tier_save_start or
 * the helper (copy_slice); the rest of the buffer is never written nor read (nor
 * faulted in: grow_copy).  Where the arrays cannot be placed, the whole
 * state is copied here, on the training thread.  @return STATE_OK or
 * STATE_EFAIL (err set). */
static int take_slice(tier_t *t, const state_t *st, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    const float *host[3] = {model_params(st->model), optim_state_m(st->optim),
                            optim_state_v(st->optim)};
    state_placed_t placed[3];
    size_t nplaced = 0;
    for (int i = 0; i < 3; i++)
        if (host[i])
            placed[nplaced++] = (state_placed_t){host[i], model_num_params(st->model)};
    state_snapshot_t *live = NULL;
    state_local_view_t from, to;
    uint64_t lo, hi;
    if (state_snapshot_take(st, t->size, NULL, 0, NULL, 0, t->level, &live, err, cap) !=
            STATE_OK ||
        state_snapshot_take(st, t->size, a->copy, a->copy_floats, placed, nplaced, t->level,
                            &a->snap, err, cap) != STATE_OK ||
        (state_snapshot_local(live, &from), state_snapshot_local(a->snap, &to),
         from.ntensors != to.ntensors) ||
        ranges_room(a, to.ntensors + 1) != 0) {
        state_snapshot_free(live);
        state_snapshot_free(a->snap);
        a->snap = NULL;
        return state_snapshot_take(st, t->size, a->copy, a->copy_floats, NULL, 0, t->level,
                                   &a->snap, err, cap);
    }
    slice_of(t, t->rank, &to, &lo, &hi);
    size_t count = 0, bytes = 0;
    for (size_t i = 0; i < to.ntensors; i++) {
        const ckpt_tensor_t *dst = &to.tensors[i];
        uint64_t begin = dst->offset > lo ? dst->offset : lo;
        uint64_t end = dst->offset + dst->nbytes < hi ? dst->offset + dst->nbytes : hi;
        if (begin >= end)
            continue;
        a->ranges[count++] = (util_copy_range_t){
            (unsigned char *)dst->data + (begin - dst->offset),
            (const unsigned char *)from.tensors[i].data + (begin - dst->offset),
            (size_t)(end - begin)};
        bytes += (size_t)(end - begin);
    }
    /* Copied by tier_save_start or the helper (copy_slice): the pointers
     * are the live state's arrays and the copy buffer, which outlive
     * `live`. */
    a->nranges = count;
    a->range_bytes = bytes;
    a->copy_threads = to.opts->threads;
    state_snapshot_free(live);
    return STATE_OK;
}

/* The save in place: snapshot st's description (its tensors point at the
 * live state, and nothing reads them but the seal, for their shapes), and
 * plan the copy of this rank's slice of the flat space straight into its
 * own file, at the place a stored shard holds it, which tier_save_start or
 * the helper makes (copy_slice); alignment gaps get zeros here.  The file
 * is mapped here on the training thread when the helper could not do it.
 * @return STATE_OK or STATE_EFAIL (err set). */
static int take_inplace(tier_t *t, const state_t *st, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    state_local_view_t view;
    if (state_snapshot_take(st, t->size, NULL, 0, NULL, 0, t->level, &a->snap, err, cap) !=
        STATE_OK)
        return STATE_EFAIL;
    state_snapshot_local(a->snap, &view);
    slice_of(t, t->rank, &view, &a->lo, &a->hi);
    a->frame_bytes = view.opts->frame_bytes;
    uint64_t len = ckpt_stored_shard_bytes(a->hi - a->lo, a->frame_bytes);
    if (ranges_room(a, view.ntensors + 1) != 0)
        return util_fail(err, cap, STATE_EFAIL, "out of memory");
    if (tier_files_map(&a->files, 0, len, err, cap) != 0)
        return STATE_EFAIL;
    unsigned char *raw = a->files.files[0].map + CKPT_STORED_DATA_OFFSET;
    uint64_t filled = a->lo;
    size_t count = 0, bytes = 0;
    for (size_t i = 0; i < view.ntensors; i++) {
        const ckpt_tensor_t *x = &view.tensors[i];
        uint64_t begin = x->offset > a->lo ? x->offset : a->lo;
        uint64_t end = x->offset + x->nbytes < a->hi ? x->offset + x->nbytes : a->hi;
        if (begin >= end)
            continue;
        if (begin > filled)
            memset(raw + (filled - a->lo), 0, (size_t)(begin - filled));
        a->ranges[count++] = (util_copy_range_t){raw + (begin - a->lo),
                                                 (const unsigned char *)x->data +
                                                     (begin - x->offset),
                                                 (size_t)(end - begin)};
        bytes += (size_t)(end - begin);
        filled = end;
    }
    if (a->hi > filled)
        memset(raw + (filled - a->lo), 0, (size_t)(a->hi - filled));
    a->nranges = count; /* copied by tier_save_start or the helper */
    a->range_bytes = bytes;
    a->copy_threads = view.opts->threads;
    return STATE_OK;
}

static int vote(tier_t *t, comm_t *comm, int not_done, int failed, int64_t out[2], char *err,
                size_t cap);

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT;
}

/* The node's first rank, before a save takes space: the temp dirs that
 * failed saves left (fail_save keeps them; every rank of the node has
 * passed it, as a save starts at a later step boundary).  On a full local
 * file system they hold what the next save needs: left, every later save
 * failed for want of the space a dead one held. */
static void remove_failed_tmps(tier_t *t)
{
    DIR *dir = t->leader ? opendir(t->root) : NULL;
    if (!dir)
        return;
    char path[sizeof t->root + 256 + 2];
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        uint64_t step;
        if (!ckpt_parse_dirname(e->d_name, 1, &step))
            continue;
        snprintf(path, sizeof path, "%s/%s", t->root, e->d_name);
        if (nftw(path, remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0)
            fprintf(stderr, "ftrain: warning: local tier: cannot remove '%s', which a failed "
                    "save left: %s\n", path, strerror(errno));
    }
    closedir(dir);
}

int tier_save_start(tier_t *t, comm_t *comm, const state_t *st, double started, char *err,
                    size_t cap)
{
    struct tier_async *a = t->async;
    if (!a || a->phase != PH_IDLE)
        return util_fail(err, cap, TIER_EFAIL, "%s",
                         a ? "another one is in flight" : "no tier");
    if (a->failed_tmp) {
        remove_failed_tmps(t);
        a->failed_tmp = 0;
    }
    tier_save_prepare(t, st);
    double waited = job_join(t); /* the buffers' preparation, or the last prune */
    int rc = 0;
    err[0] = '\0';
    a->nranges = 0;
    if (a->leaked)
        rc = util_fail(err, cap, 1, "the partner exchange of an earlier local checkpoint "
                       "never completed: local checkpoints are off");
    else if (a->inplace) {
        if (take_inplace(t, st, err, cap) != STATE_OK)
            rc = 1;
    } else if (a->copy_floats < state_floats(st) && grow_copy(a, state_floats(st)) != 0)
        rc = util_fail(err, cap, 1, "out of memory for the snapshot (%zu bytes)",
                       state_floats(st) * sizeof(float));
    else if (take_slice(t, st, err, cap) != STATE_OK)
        rc = 1;
    /* Where the training thread moves the exchange (the ranks fill the
     * cores), it copies its slice now too: a helper copying beside the
     * training's threads competes with them for the cores and cost more run
     * time than it took off the stall (docs/bench-log.md, "The snapshot
     * copied while the next step computes").  Else the helper copies it
     * (copy_slice). */
    if (!rc && a->nranges && !a->xfer_thread) {
        util_copy_ranges(a->ranges, a->nranges, a->range_bytes, a->copy_threads);
        a->nranges = 0;
    }
    int64_t v[2];
    char vote_err[JOB_ERR_MAX];
    if (vote(t, comm, 0, rc, v, vote_err, sizeof vote_err) != 0 || v[1]) {
        /* Rank 0 reports the start's failure: its own reason, else which
         * rank failed; that rank says why on its own stderr. */
        if (rc && t->rank != 0)
            fprintf(stderr, "ftrain: rank %d: local checkpoint of step %lld not started: %s\n",
                    t->rank, (long long)st->step, err);
        if (!rc && v[1])
            snprintf(err, cap, "rank %lld could not take its snapshot (its reason is on its "
                     "stderr)", (long long)v[1] - 1);
        else if (!rc)
            snprintf(err, cap, "%s", vote_err);
        state_snapshot_free(a->snap);
        a->snap = NULL;
        return TIER_EFAIL;
    }
    memset(&a->rep, 0, sizeof a->rep);
    a->step = st->step;
    a->started = started;
    a->mpi_failed = 0;
    a->skipped = 0;
    a->rep.step = st->step;
    a->rep.waited_s = waited;
    a->rep.snapshot_s = util_mono_s() - started;
    a->phase = PH_WRITING;
    atomic_store(&a->copying, a->nranges > 0);
    run_job(t, JOB_WRITE);
    a->rep.stall_s = util_mono_s() - started;
    return TIER_OK;
}

/* Collective: rank 0's record, for every node's manifest.  A rank's own
 * differs in what its clock says (run_seconds, saved_at), and the
 * manifests of one step must be the same on every node (ckpt_local_flush
 * puts one checkpoint together from several nodes' and compares them), as
 * the shared tier's commit writes rank 0's.  Every rank takes part, a
 * failed one too (*failed set, err said); @return the record (free it), or
 * NULL with *failed set. */
static char *agreed_record(tier_t *t, comm_t *comm, const char *mine, int *failed, char *err,
                           size_t cap)
{
    uint64_t len = t->rank == 0 ? strlen(mine) + 1 : 0;
    if (comm_bcast(comm, &len, sizeof len, 0) != COMM_OK) {
        *failed = util_fail(err, cap, 1, "sharing the record: %s", comm_last_error());
        return NULL;
    }
    char *text = len > 1 ? malloc(len) : NULL;
    if (text && t->rank == 0)
        memcpy(text, mine, len);
    /* Every rank must have room before the record is sent. */
    if (comm_any_failed(comm, !text)) {
        free(text);
        *failed = util_fail(err, cap, 1, "no record to seal with (rank 0 had none, or a rank "
                            "had no memory for it)");
        return NULL;
    }
    if (comm_bcast(comm, text, (size_t)len, 0) != COMM_OK) {
        free(text);
        *failed = util_fail(err, cap, 1, "sharing the record: %s", comm_last_error());
        return NULL;
    }
    return text;
}

/* Collective: the vote of one phase.  Each rank gives whether its part is
 * not done yet and whether it failed; out[0] > 0 when some rank is not
 * done, out[1] the highest failed rank + 1 (0: none).  @return 0, or 1
 * when the reduction itself failed (err set). */
static int vote(tier_t *t, comm_t *comm, int not_done, int failed, int64_t out[2], char *err,
                size_t cap)
{
    out[0] = not_done != 0;
    out[1] = failed ? t->rank + 1 : 0;
    if (comm_allreduce(comm, out, 2, COMM_I64, COMM_MAX) == COMM_OK)
        return 0;
    return util_fail(err, cap, 1, "vote: %s", comm_last_error());
}

/* End the save in flight as failed (every rank at the same vote): join the
 * helper, release what the save held.  Requests that never completed leave
 * their buffers allocated for good (MPI may still use them).  err is set
 * already.  @return TIER_EFAIL. */
static int fail_save(tier_t *t)
{
    struct tier_async *a = t->async;
    a->rep.waited_s += job_cancel(t);
    if (comm_xfer_abandon(a->xfer))
        a->leaked = 1;
    if (!a->leaked) {
        unmap_own(a);
        tier_files_unmap_all(&a->files); /* the next save maps them anew */
    }
    state_snapshot_free(a->snap);
    a->snap = NULL;
    a->phase = PH_IDLE;
    a->failed_tmp = 1; /* removed before the next save takes space */
    return TIER_EFAIL;
}

/* The message of a failure some rank had: ours when it was ours. */
static int fail_with(tier_t *t, int64_t failed_rank1, const char *what, const char *mine,
                     char *err, size_t cap)
{
    /* Rank 0 reports it: its own reason, else which rank failed; a rank
     * that failed says why on its own stderr. */
    if (mine && mine[0]) {
        if (t->rank != 0)
            fprintf(stderr, "ftrain: rank %d: local checkpoint of step %lld failed: %s\n",
                    t->rank, (long long)t->async->step, mine);
        snprintf(err, cap, "%s; nothing sealed", mine);
    } else {
        snprintf(err, cap, "rank %lld %s (its reason is on its stderr); nothing sealed",
                 (long long)failed_rank1 - 1, what);
    }
    return fail_save(t);
}

/* Receive buffers for the copies kept here (grown when the guess was
 * short: once, on the training thread), and room for the exchange's
 * requests.  @return 0 or 1. */
static int ensure_buffers(tier_t *t, char *why, size_t cap)
{
    struct tier_async *a = t->async;
    int bad = 0;
    for (int i = 0; i < t->nsrc; i++) {
        a->recv_len[i] = a->all[t->srcs[i]].info.file_bytes;
        if (a->inplace) {
            /* Mapped at that size already, unless the guess was wrong. */
            a->want_len[1 + i] = a->recv_len[i];
            bad |= tier_files_map(&a->files, 1 + i, a->recv_len[i], why, cap);
            a->dst[i] = a->files.files[1 + i].map;
        } else if (grow_touched(&a->recv[i], &a->recv_cap[i], a->recv_len[i]) != 0) {
            bad = util_fail(why, cap, 1, "no memory for the partner copies");
        } else {
            a->dst[i] = a->recv[i];
        }
    }
    if (comm_xfer_reserve(a->xfer, a->send_len, t->partner, t->nsrc, a->recv_len) != COMM_OK)
        bad = util_fail(why, cap, 1, "partner exchange: %s", comm_last_error());
    return bad;
}

/* Post the exchange (comm_xfer_post): the copies kept here, then our own
 * shard to the partner, in pieces tagged by their index.  A failure is
 * voted on; the pieces posted before it stay in flight (fail_save). */
static void post_exchange(tier_t *t)
{
    struct tier_async *a = t->async;
    if (comm_xfer_post(a->xfer, a->send, a->send_len, t->partner, t->nsrc, t->srcs, a->dst,
                       a->recv_len) != COMM_OK) {
        snprintf(a->mpi_err, sizeof a->mpi_err, "partner exchange: %s", comm_last_error());
        a->mpi_failed = 1;
    }
}

/* WRITING: once every rank's shard is written, learn every shard's info
 * and post the exchange. */
static int after_write(tier_t *t, comm_t *comm, int wait, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    int64_t v[2];
    if (wait)
        a->rep.waited_s += job_join(t);
    int finished = job_finished(a);
    if (vote(t, comm, !finished, 0, v, err, cap) != 0)
        return fail_save(t);
    if (v[0])
        return TIER_BUSY;
    a->rep.waited_s += job_join(t); /* done already: no wait */
    tier_msg_t me = {.rc = a->job_rc};
    state_local_view_t view;
    if (a->inplace)
        me.info = a->own_info;
    else if (state_snapshot_local(a->snap, &view) == STATE_OK)
        me.info = view.info;
    else
        me.rc = 1;
    if (comm_allgather(comm, &me, a->all, sizeof me) != COMM_OK) {
        snprintf(err, cap, "gathering shards: %s", comm_last_error());
        return fail_save(t);
    }
    a->rep.own_bytes = me.info.file_bytes;
    for (int r = 0; r < t->size; r++)
        if (a->all[r].rc)
            return fail_with(t, r + 1, "could not write its shard", me.rc ? a->job_err : "",
                             err, cap);
    char why[JOB_ERR_MAX] = "";
    int bad = ensure_buffers(t, why, sizeof why);
    int any = comm_any_failed(comm, bad);
    if (any) {
        snprintf(err, cap, "%s", bad ? why : "another rank had no room for the partner copies");
        return fail_save(t);
    }
    a->copy_began = util_mono_s();
    if (a->xfer_thread) {
        /* The helper moves the bytes, then checks and writes the copies;
         * the next vote is after_put's. */
        a->phase = PH_PUTTING;
        run_job(t, JOB_EXCHANGE_PUT);
        return TIER_BUSY;
    }
    post_exchange(t);
    a->phase = PH_EXCHANGING;
    return TIER_BUSY;
}

/* EXCHANGING: move the bytes on for a while, then vote; once every rank's
 * are all there, the helper checks and writes the copies. */
static int after_exchange(tier_t *t, comm_t *comm, int wait, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    for (;;) {
        int done = 0;
        double t0 = util_mono_s();
        if (!a->mpi_failed &&
            comm_xfer_test(a->xfer, TIER_EXCHANGE_BUDGET_S, &done) != COMM_OK) {
            snprintf(a->mpi_err, sizeof a->mpi_err, "partner exchange: %s", comm_last_error());
            a->mpi_failed = 1;
        }
        a->rep.exchange_s += util_mono_s() - t0;
        int64_t v[2];
        if (vote(t, comm, !done, a->mpi_failed, v, err, cap) != 0)
            return fail_save(t);
        if (v[1])
            return fail_with(t, v[1], "failed in the partner exchange",
                             a->mpi_failed ? a->mpi_err : "", err, cap);
        if (!v[0])
            break;
        if (!wait)
            return TIER_BUSY;
    }
    a->phase = PH_PUTTING;
    run_job(t, JOB_PUT);
    return TIER_BUSY;
}

/* What this node's root keeps once the prune after this seal is done: its
 * newest `keep` sealed steps (its first rank's view), and in place one
 * spare set of files for the next save, as large as the newest step's. */
static uint64_t kept_bytes(const tier_t *t)
{
    ckpt_local_step_t *steps = NULL;
    size_t count = 0;
    uint64_t sum = 0;
    if (ckpt_local_scan(t->root, &steps, &count) == CKPT_OK) {
        for (size_t i = 0; i < count && i < (size_t)t->keep; i++)
            sum += steps[i].present_bytes;
        if (t->async->inplace && count > 0)
            sum += steps[0].present_bytes;
    }
    ckpt_local_scan_free(steps, count);
    return sum;
}

/* In place, once every node sealed: when the node holds more than `keep`
 * steps, the prune after this seal removes the older ones; take this
 * rank's files back out of the newest of those (local_inplace.c) for the
 * next save, whichever run sealed it: after a relaunch, the steps of the
 * run before hold files of the same sizes when the world is the same (and
 * of other sizes, resized, when it is not), so only the first save of a
 * relaunched run needs new memory.  Every rank of a node reads the same
 * directory before its first rank prunes (the allreduce after this), and
 * takes its own shard and the copies it keeps, which no other rank of the
 * node takes.  Nothing taken is no failure: the next save makes new
 * files. */
static void reclaim_files(tier_t *t)
{
    struct tier_async *a = t->async;
    ckpt_local_step_t *steps = NULL;
    size_t count = 0;
    if (ckpt_local_scan(t->root, &steps, &count) == CKPT_OK && count > (size_t)t->keep &&
        steps[t->keep].step < (uint64_t)a->step) {
        uint64_t old = steps[t->keep].step;
        tier_files_reclaim(&a->files, 0, t->root, old, t->rank);
        for (int i = 0; i < t->nsrc; i++)
            tier_files_reclaim(&a->files, 1 + i, t->root, old, t->srcs[i]);
        /* Any other step the prune removes keeps no mapping of ours. */
        tier_files_drop_before(&a->files, (int64_t)steps[t->keep - 1].step);
    }
    ckpt_local_scan_free(steps, count);
}

/* PUTTING: once every rank's copies are durable, each node's first rank
 * seals its directory (no prune: the helper does that after), and the
 * ranks agree that every node sealed. */
static int after_put(tier_t *t, comm_t *comm, int wait, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    int64_t v[2];
    if (wait)
        a->rep.waited_s += job_join(t);
    int finished = job_finished(a);
    if (vote(t, comm, !finished, finished && a->job_rc, v, err, cap) != 0)
        return fail_save(t);
    if (v[1])
        return fail_with(t, v[1], a->xfer_thread ? "failed in the partner exchange or could "
                         "not keep a partner copy" : "could not keep a partner copy",
                         a->job_rc ? a->job_err : "", err, cap);
    if (v[0])
        return TIER_BUSY;
    a->rep.waited_s += job_join(t);
    a->rep.copy_s = a->put_end - a->copy_began;
    double t0 = util_mono_s();
    int rc = 0;
    ckpt_shard_info_t *infos = calloc((size_t)t->size, sizeof *infos);
    state_local_view_t view;
    if (!infos || state_snapshot_local(a->snap, &view) != STATE_OK)
        rc = util_fail(err, cap, 1, "out of memory for the seal");
    for (int r = 0; infos && r < t->size; r++)
        infos[r] = a->all[r].info;
    ckpt_step_dirname((uint64_t)a->step, a->prune_name, sizeof a->prune_name);
    char *record = agreed_record(t, comm, rc ? "" : view.record, &rc, err, cap);
    if (!rc && t->leader) {
        int seal = ckpt_local_seal(t->root, (uint64_t)a->step, view.tensors, view.ntensors,
                                   record, view.opts, infos, t->size, INT_MAX, NULL);
        if (seal != CKPT_OK)
            rc = util_fail(err, cap, 1, "sealing on %s: %s: %s", t->hosts[t->node_of[t->rank]],
                           ckpt_strerror(seal), ckpt_last_error());
    }
    free(infos);
    free(record);
    int any = comm_any_failed(comm, rc);
    if (any) {
        if (!rc)
            snprintf(err, cap, "another node could not seal it");
        return fail_save(t);
    }
    if (a->inplace)
        reclaim_files(t); /* before the allreduce below, after which the prune runs */
    /* Rank 0's node, and the largest. */
    uint64_t bytes = t->leader ? kept_bytes(t) : 0;
    int64_t sizes[2] = {(int64_t)(t->rank == 0 ? bytes : 0), (int64_t)bytes};
    if (comm_allreduce(comm, sizes, 2, COMM_I64, COMM_MAX) == COMM_OK) {
        a->rep.node_bytes = (uint64_t)sizes[0];
        a->rep.max_node_bytes = (uint64_t)sizes[1];
    }
    a->rep.seal_s = util_mono_s() - t0;
    state_snapshot_free(a->snap);
    a->snap = NULL;
    a->phase = PH_IDLE;
    if (t->leader)
        run_job(t, JOB_PRUNE); /* in place: then the next save's files */
    else if (a->inplace)
        run_job(t, JOB_PREPARE);
    return TIER_OK;
}

/* Collective: move the save on as far as it goes at this boundary (wait: to
 * its end). */
static int advance(tier_t *t, comm_t *comm, int wait, tier_report_t *rep, char *err,
                   size_t cap)
{
    struct tier_async *a = t->async;
    if (!a || a->phase == PH_IDLE)
        return TIER_NONE;
    double t0 = util_mono_s();
    int rc = TIER_BUSY;
    err[0] = '\0';
    for (;;) {
        phase_t before = a->phase;
        if (before == PH_WRITING)
            rc = after_write(t, comm, wait, err, cap);
        else if (before == PH_EXCHANGING)
            rc = after_exchange(t, comm, wait, err, cap);
        else
            rc = after_put(t, comm, wait, err, cap);
        if (rc != TIER_BUSY || a->phase == before)
            break;
        if (a->phase == PH_PUTTING && !wait)
            break; /* the helper has just begun: the next boundary looks */
    }
    a->rep.stall_s += util_mono_s() - t0;
    if (rc != TIER_BUSY) {
        a->rep.total_s = util_mono_s() - a->started;
        a->rep.finished = wait;
        /* The jobs joined since the last report: this save's, and the
         * prune and files' preparation after the last seal. */
        a->rep.helper_cpu_s = a->cpu;
        a->cpu = 0;
        *rep = a->rep;
    }
    return rc;
}

int tier_save_progress(tier_t *t, comm_t *comm, tier_report_t *rep, char *err, size_t cap)
{
    return advance(t, comm, 0, rep, err, cap);
}

int tier_save_finish(tier_t *t, comm_t *comm, tier_report_t *rep, char *err, size_t cap)
{
    return advance(t, comm, 1, rep, err, cap);
}
