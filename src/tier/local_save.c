/*
 * local_save.c - the node-local tier's save in the background, its phase
 * machine (local_save.h): the start, the votes at step boundaries, the
 * seal and the failure path, all on the training thread.  The helper
 * thread's jobs are local_helper.c's, the partner exchange is
 * local_exchange.c's, the snapshot local_snapshot.c's.
 *
 * INVARIANTS
 *
 *   1. Every collective of a local save is made on the training thread, at
 *      step boundaries, by tier_save_start/progress/finish, which every
 *      rank calls at the same boundaries (the trainer's periodic save, the
 *      stop, the end).  The votes are small allreduces on the trainer's
 *      communicator, in the same order everywhere because each one's
 *      outcome is global: every move between phases is agreed, so every
 *      rank is in the same phase at every boundary.
 *   2. The helper thread makes no collective and never uses the trainer's
 *      communicator: comm.c's functions are plain MPI calls with no lock,
 *      the training thread uses that communicator at every step (the
 *      control reduction, the gradient allreduce, the shared tier's
 *      commit), and even under MPI_THREAD_MULTIPLE two threads making
 *      collectives on one communicator cannot keep the same order on every
 *      rank, which MPI requires.  The helper's only MPI is the partner
 *      exchange on the tier's own communicator, and only where MPI gave
 *      MPI_THREAD_MULTIPLE on every rank (local_exchange.c); under
 *      MPI_THREAD_SINGLE no thread is started and the helper's jobs run on
 *      the training thread.
 *   3. The helper runs one job at a time, and the training thread never
 *      touches what a running job uses (local_helper.c).
 *   4. At most one save is in flight (phase not IDLE); a save that falls
 *      due meanwhile is skipped, never waited for.
 *   5. ONE commit point per node: nothing is sealed on any node until
 *      every rank's shard and every partner copy is durable on every node
 *      (PUTTING's vote), and then each node's first rank renames
 *      .tmp-step-k to step-k.  So a local checkpoint is either sealed whole
 *      on a node or invisible (.tmp-step-k, which no reader opens),
 *      whenever the run ends: a crash, a kill, a stop or the end.
 *   6. A failure anywhere ends the save on every rank at the same vote
 *      (fail_save) and leaves its temp directory, invisible, behind; the
 *      node's first rank removes it before the next save takes space
 *      (remove_failed_tmps), and the drop after a resume removes it too.
 *      A stop and the end complete the save in flight (tier_save_finish);
 *      an error path (tier_close) abandons it, never sealing it.
 *   7. No wait is unbounded but by the peers and the local I/O: a phase
 *      waits at a boundary only in tier_save_finish, and there the
 *      watchdog's allowance for a save bounds a dead or stopped peer, as
 *      for every collective of the trainer.  Errors are returned, never
 *      exit().
 *
 * STATE DIAGRAM: the phase of the save in flight, the same on every rank.
 * phase_move() asserts that each move is one drawn here, and each function
 * that moves the phase asserts the phase it leaves from.
 *
 *            tier_save_start
 *     IDLE -----------------> WRITING --------------+
 *      ^                        |                   |
 *      |                        | after_write       | after_write
 *      |                        | (the training     | (the helper moves
 *      |                        |  thread moves     |  the exchange)
 *      |                        v  the exchange)    |
 *      |                    EXCHANGING              |
 *      |                        |                   |
 *      |                        | after_exchange    |
 *      |      after_put         v                   |
 *      +------(sealed)------ PUTTING <--------------+
 *
 *     WRITING, EXCHANGING, PUTTING --fail_save (failed)--> IDLE
 *
 * tier_async_close (the tier's close) abandons a save in any phase: the
 * state is released without a move, and nothing is sealed.
 *
 * A SAVE, ON EVERY RANK
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
 *                       a copy as it lands)                        [PUTTING]
 *   vote: all moved     helper: hash each copy against its writer's xxh64
 *                       (or compare the sum taken as it landed), write it
 *                       (temp name, fsync, rename), unmap          [PUTTING]
 *   vote: all durable   each node's first rank seals: manifest, rename of
 *                       .tmp-step-k to step-k, the node's commit point;
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
 */
#include "tier/local_save_internal.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the phases ---------------------------------------------------------------- */

/* 1 when the state diagram above has a move from `from` to `to` for a save
 * whose exchange the helper moves (xfer_thread) or not. */
static int phase_may_move(tier_phase_t from, tier_phase_t to, int xfer_thread)
{
    switch (from) {
    case PH_IDLE: return to == PH_WRITING;
    case PH_WRITING:
        return to == PH_IDLE || to == (xfer_thread ? PH_PUTTING : PH_EXCHANGING);
    case PH_EXCHANGING: return !xfer_thread && (to == PH_PUTTING || to == PH_IDLE);
    case PH_PUTTING: return to == PH_IDLE;
    }
    return 0;
}

/* Every move of the phase goes through here. */
static void phase_move(struct tier_async *a, tier_phase_t to)
{
    assert(phase_may_move(a->phase, to, a->xfer_thread));
    a->phase = to;
}

/* ---- opening and closing ------------------------------------------------- */

int tier_async_open(tier_t *t, comm_t *comm, char *err, size_t cap)
{
    struct tier_async *a = calloc(1, sizeof *a);
    int rc = a ? TIER_OK : TIER_ENOMEM, main_thread = 0;
    if (a) {
        a->recv = calloc((size_t)t->nsrc + 1, sizeof *a->recv);
        a->recv_cap = calloc((size_t)t->nsrc + 1, sizeof *a->recv_cap);
        a->recv_len = calloc((size_t)t->nsrc + 1, sizeof *a->recv_len);
        a->all = calloc((size_t)t->size, sizeof *a->all);
        a->dst = calloc((size_t)t->nsrc + 1, sizeof *a->dst);
        a->sum = calloc((size_t)t->nsrc + 1, sizeof *a->sum);
        a->want_len = calloc((size_t)t->nsrc + 1, sizeof *a->want_len);
        if (!a->recv || !a->recv_cap || !a->recv_len || !a->all || !a->dst || !a->want_len ||
            !a->sum)
            rc = TIER_ENOMEM;
        a->threads_ok = comm_threads_allowed();
        main_thread = comm_is_main_thread();
    }
    if (rc != TIER_OK)
        snprintf(err, cap, "local tier: out of memory");
    else if (!main_thread)
        rc = util_fail(err, cap, TIER_EFAIL, "local tier: opened off the thread that started MPI");
    else if (t->level == 0 && tier_files_in_memory(t->root)) {
        a->inplace = 1;
        rc = tier_files_init(&a->files, t->root, t->rank, 1 + t->nsrc, err, cap);
    }
    t->async = a;
    rc = tier_exchange_open(t, comm, rc, err, cap);
    if (rc != TIER_OK)
        tier_async_close(t);
    return rc;
}

void tier_async_close(tier_t *t)
{
    struct tier_async *a = t->async;
    if (!a)
        return;
    tier_job_cancel(t);
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
    tier_own_unmap(a);
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

/* ---- the save in flight, asked ------------------------------------------------ */

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

/* ---- votes and failures ---------------------------------------------------------- */

/* Collective: the vote of one phase.  Each rank gives whether its part is
 * not done yet and whether it failed; out[0] > 0 when some rank is not
 * done, out[1] the highest failed rank + 1 (0: none).  @return TIER_OK,
 * or TIER_EFAIL when the reduction itself failed (err set). */
static int vote(tier_t *t, comm_t *comm, int not_done, int failed, int64_t out[2], char *err,
                size_t cap)
{
    out[0] = not_done != 0;
    out[1] = failed ? t->rank + 1 : 0;
    if (comm_allreduce(comm, out, 2, COMM_I64, COMM_MAX) == COMM_OK)
        return TIER_OK;
    return util_fail(err, cap, TIER_EFAIL, "vote: %s", comm_last_error());
}

/* End the save in flight as failed (every rank at the same vote): join the
 * helper, release what the save held.  Requests that never completed leave
 * their buffers allocated for good (MPI may still use them).  err is set
 * already.  @return code, the failure's TIER_E... code. */
static int fail_save(tier_t *t, int code)
{
    struct tier_async *a = t->async;
    assert(code < 0);
    a->rep.waited_s += tier_job_cancel(t);
    if (comm_xfer_abandon(a->xfer))
        a->leaked = 1;
    if (!a->leaked) {
        tier_own_unmap(a);
        tier_files_unmap_all(&a->files); /* the next save maps them anew */
    }
    state_snapshot_free(a->snap);
    a->snap = NULL;
    phase_move(a, PH_IDLE);
    a->failed_tmp = 1; /* removed before the next save takes space */
    return code;
}

/* The failure some rank had, as a vote told it (failed_rank1: its rank +
 * 1): ours when mine holds a message (mine_rc its code), else another
 * rank's (TIER_EPEER). */
static int fail_with(tier_t *t, int64_t failed_rank1, const char *what, int mine_rc,
                     const char *mine, char *err, size_t cap)
{
    /* Rank 0 reports it: its own reason, else which rank failed; a rank
     * that failed says why on its own stderr. */
    if (mine && mine[0]) {
        if (t->rank != 0)
            fprintf(stderr, "ftrain: rank %d: local checkpoint of step %lld failed: %s\n",
                    t->rank, (long long)t->async->step, mine);
        snprintf(err, cap, "%s; nothing sealed", mine);
        return fail_save(t, mine_rc < 0 ? mine_rc : TIER_EFAIL);
    }
    snprintf(err, cap, "rank %lld %s (its reason is on its stderr); nothing sealed",
             (long long)failed_rank1 - 1, what);
    return fail_save(t, TIER_EPEER);
}

/* ---- the start ------------------------------------------------------------------- */

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

/* The start's vote failed (rc: this rank's code, or TIER_OK; v: the vote,
 * or vote_err when the vote itself failed): rank 0 reports the failure,
 * its own reason, else which rank failed; that rank says why on its own
 * stderr.  @return the failure's code. */
static int start_failed(tier_t *t, const state_t *st, int rc, const int64_t v[2], int voted,
                        const char *vote_err, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    if (rc != TIER_OK && t->rank != 0)
        fprintf(stderr, "ftrain: rank %d: local checkpoint of step %lld not started: %s\n",
                t->rank, (long long)st->step, err);
    if (rc == TIER_OK && voted && v[1])
        rc = util_fail(err, cap, TIER_EPEER, "rank %lld could not take its snapshot (its "
                       "reason is on its stderr)", (long long)v[1] - 1);
    else if (rc == TIER_OK)
        rc = util_fail(err, cap, TIER_EFAIL, "%s", vote_err);
    state_snapshot_free(a->snap);
    a->snap = NULL;
    return rc;
}

int tier_save_start(tier_t *t, comm_t *comm, const state_t *st, double started, char *err,
                    size_t cap)
{
    struct tier_async *a = t->async;
    if (!a || a->phase != PH_IDLE)
        return util_fail(err, cap, TIER_EINVAL, "%s",
                         a ? "another one is in flight" : "no tier");
    if (a->failed_tmp) {
        remove_failed_tmps(t);
        a->failed_tmp = 0;
    }
    tier_save_prepare(t, st);
    double waited = tier_job_join(t); /* the buffers' preparation, or the last prune */
    int rc = TIER_OK;
    err[0] = '\0';
    a->nranges = 0;
    if (a->leaked)
        rc = util_fail(err, cap, TIER_EFAIL, "the partner exchange of an earlier local "
                       "checkpoint never completed: local checkpoints are off");
    else
        rc = tier_snapshot_take(t, st, err, cap);
    int64_t v[2];
    char vote_err[TIER_MSG_MAX];
    int vrc = vote(t, comm, 0, rc != TIER_OK, v, vote_err, sizeof vote_err);
    if (vrc != TIER_OK || v[1])
        return start_failed(t, st, rc, v, vrc == TIER_OK, vote_err, err, cap);
    memset(&a->rep, 0, sizeof a->rep);
    a->step = st->step;
    a->started = started;
    a->posted = 0;
    a->skipped = 0;
    a->rep.step = st->step;
    a->rep.waited_s = waited;
    a->rep.snapshot_s = util_mono_s() - started;
    phase_move(a, PH_WRITING);
    atomic_store(&a->copying, a->nranges > 0);
    tier_job_run(t, JOB_WRITE);
    a->rep.stall_s = util_mono_s() - started;
    return TIER_OK;
}

/* ---- the moves at step boundaries -------------------------------------------------- */

/* WRITING: once every rank's shard is written, learn every shard's info
 * and go on to the exchange.  @return TIER_OK, or the save's failure. */
static int after_write(tier_t *t, comm_t *comm, int wait, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    assert(a->phase == PH_WRITING);
    int64_t v[2];
    if (wait)
        a->rep.waited_s += tier_job_join(t);
    int finished = tier_job_finished(a);
    if (vote(t, comm, !finished, 0, v, err, cap) != TIER_OK)
        return fail_save(t, TIER_EFAIL);
    if (v[0])
        return TIER_OK;
    a->rep.waited_s += tier_job_join(t); /* done already: no wait */
    tier_msg_t me = {.rc = a->job_rc};
    state_local_view_t view;
    if (a->inplace)
        me.info = a->own_info;
    else if (state_snapshot_local(a->snap, &view) == STATE_OK)
        me.info = view.info;
    else
        me.rc = TIER_EFAIL;
    if (comm_allgather(comm, &me, a->all, sizeof me) != COMM_OK) {
        snprintf(err, cap, "gathering shards: %s", comm_last_error());
        return fail_save(t, TIER_EFAIL);
    }
    a->rep.own_bytes = me.info.file_bytes;
    for (int r = 0; r < t->size; r++)
        if (a->all[r].rc)
            return fail_with(t, r + 1, "could not write its shard", me.rc,
                             me.rc ? a->job_err : "", err, cap);
    char why[TIER_MSG_MAX] = "";
    int rc = tier_exchange_reserve(t, why, sizeof why);
    if (comm_any_failed(comm, rc != TIER_OK)) {
        snprintf(err, cap, "%s", rc != TIER_OK ? why : "another rank had no room for the "
                 "partner copies");
        return fail_save(t, rc != TIER_OK ? rc : TIER_EPEER);
    }
    a->copy_began = util_mono_s();
    if (a->xfer_thread) {
        /* The helper moves the bytes, then checks and writes the copies;
         * the next vote is after_put's. */
        phase_move(a, PH_PUTTING);
        tier_job_run(t, JOB_EXCHANGE_PUT);
        return TIER_OK;
    }
    phase_move(a, PH_EXCHANGING); /* posted at once, by after_exchange */
    return TIER_OK;
}

/* EXCHANGING: post the exchange (the first time), move the bytes on for a
 * while, then vote; once every rank's are all there, the helper checks and
 * writes the copies.  A failure to post or to test is this boundary's
 * vote's.  @return TIER_OK, or the save's failure. */
static int after_exchange(tier_t *t, comm_t *comm, int wait, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    assert(a->phase == PH_EXCHANGING && !a->xfer_thread);
    char mine[TIER_MSG_MAX] = "";
    int rc = TIER_OK;
    if (!a->posted) {
        a->posted = 1;
        rc = tier_exchange_post(t, mine, sizeof mine);
    }
    for (;;) {
        int done = 0;
        double t0 = util_mono_s();
        if (rc == TIER_OK)
            rc = tier_exchange_test(t, &done, mine, sizeof mine);
        a->rep.exchange_s += util_mono_s() - t0;
        int64_t v[2];
        if (vote(t, comm, !done, rc != TIER_OK, v, err, cap) != TIER_OK)
            return fail_save(t, TIER_EFAIL);
        if (v[1])
            return fail_with(t, v[1], "failed in the partner exchange", rc, mine, err, cap);
        if (!v[0])
            break;
        if (!wait)
            return TIER_OK;
    }
    phase_move(a, PH_PUTTING);
    tier_job_run(t, JOB_PUT);
    return TIER_OK;
}

/* Collective: rank 0's record, for every node's manifest.  A rank's own
 * differs in what its clock says (run_seconds, saved_at), and the
 * manifests of one step must be the same on every node (ckpt_local_flush
 * puts one checkpoint together from several nodes' and compares them), as
 * the shared tier's commit writes rank 0's.  Every rank takes part, a
 * failed one too (*rc set, err said); @return the record (free it), or
 * NULL with *rc set. */
static char *agreed_record(tier_t *t, comm_t *comm, const char *mine, int *rc, char *err,
                           size_t cap)
{
    uint64_t len = t->rank == 0 ? strlen(mine) + 1 : 0;
    if (comm_bcast(comm, &len, sizeof len, 0) != COMM_OK) {
        *rc = util_fail(err, cap, TIER_EFAIL, "sharing the record: %s", comm_last_error());
        return NULL;
    }
    char *text = len > 1 ? malloc(len) : NULL;
    if (text && t->rank == 0)
        memcpy(text, mine, len);
    /* Every rank must have room before the record is sent. */
    if (comm_any_failed(comm, !text)) {
        free(text);
        *rc = util_fail(err, cap, TIER_EFAIL, "no record to seal with (rank 0 had none, or a "
                        "rank had no memory for it)");
        return NULL;
    }
    if (comm_bcast(comm, text, (size_t)len, 0) != COMM_OK) {
        free(text);
        *rc = util_fail(err, cap, TIER_EFAIL, "sharing the record: %s", comm_last_error());
        return NULL;
    }
    return text;
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

/* Collective, once every rank's copies are durable: each node's first rank
 * seals its directory (no prune: the helper does that after), the ranks
 * agree that every node sealed, and learn what the nodes keep.
 * @return TIER_OK, or a TIER_E... code (err set; the same everywhere that
 * it failed: the seals of the nodes that sealed stand). */
static int seal(tier_t *t, comm_t *comm, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    int rc = TIER_OK;
    ckpt_shard_info_t *infos = calloc((size_t)t->size, sizeof *infos);
    state_local_view_t view;
    if (!infos || state_snapshot_local(a->snap, &view) != STATE_OK)
        rc = util_fail(err, cap, TIER_ENOMEM, "out of memory for the seal");
    for (int r = 0; infos && r < t->size; r++)
        infos[r] = a->all[r].info;
    ckpt_step_dirname((uint64_t)a->step, a->prune_name, sizeof a->prune_name);
    char *record = agreed_record(t, comm, rc != TIER_OK ? "" : view.record, &rc, err, cap);
    if (rc == TIER_OK && t->leader) {
        int crc = ckpt_local_seal(t->root, (uint64_t)a->step, view.tensors, view.ntensors,
                                  record, view.opts, infos, t->size, INT_MAX, NULL);
        if (crc != CKPT_OK)
            rc = util_fail(err, cap, TIER_EFAIL, "sealing on %s: %s: %s",
                           t->hosts[t->node_of[t->rank]], ckpt_strerror(crc), ckpt_last_error());
    }
    free(infos);
    free(record);
    if (comm_any_failed(comm, rc != TIER_OK))
        return rc != TIER_OK ? rc : util_fail(err, cap, TIER_EPEER, "another node could not "
                                              "seal it");
    if (a->inplace)
        reclaim_files(t); /* before the allreduce below, after which the prune runs */
    /* Rank 0's node, and the largest. */
    uint64_t bytes = t->leader ? kept_bytes(t) : 0;
    int64_t sizes[2] = {(int64_t)(t->rank == 0 ? bytes : 0), (int64_t)bytes};
    if (comm_allreduce(comm, sizes, 2, COMM_I64, COMM_MAX) == COMM_OK) {
        a->rep.node_bytes = (uint64_t)sizes[0];
        a->rep.max_node_bytes = (uint64_t)sizes[1];
    }
    return TIER_OK;
}

/* PUTTING: once every rank's copies are durable, seal; then the helper
 * prunes (in place: and prepares the next save's files).  @return TIER_OK
 * (sealed once the phase is IDLE), or the save's failure. */
static int after_put(tier_t *t, comm_t *comm, int wait, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    assert(a->phase == PH_PUTTING);
    int64_t v[2];
    if (wait)
        a->rep.waited_s += tier_job_join(t);
    int finished = tier_job_finished(a);
    if (vote(t, comm, !finished, finished && a->job_rc, v, err, cap) != TIER_OK)
        return fail_save(t, TIER_EFAIL);
    if (v[1])
        return fail_with(t, v[1], a->xfer_thread ? "failed in the partner exchange or could "
                         "not keep a partner copy" : "could not keep a partner copy",
                         a->job_rc, a->job_rc ? a->job_err : "", err, cap);
    if (v[0])
        return TIER_OK;
    a->rep.waited_s += tier_job_join(t);
    a->rep.copy_s = a->put_end - a->copy_began;
    double t0 = util_mono_s();
    int rc = seal(t, comm, err, cap);
    if (rc != TIER_OK)
        return fail_save(t, rc);
    a->rep.seal_s = util_mono_s() - t0;
    state_snapshot_free(a->snap);
    a->snap = NULL;
    phase_move(a, PH_IDLE);
    if (t->leader)
        tier_job_run(t, JOB_PRUNE); /* in place: then the next save's files */
    else if (a->inplace)
        tier_job_run(t, JOB_PREPARE);
    return TIER_OK;
}

/* Collective: move the save on as far as it goes at this boundary (wait: to
 * its end), and say where it stands. */
static int advance(tier_t *t, comm_t *comm, int wait, tier_status_t *status, tier_report_t *rep,
                   char *err, size_t cap)
{
    struct tier_async *a = t->async;
    if (!a || a->phase == PH_IDLE) {
        *status = TIER_NONE;
        return TIER_OK;
    }
    double t0 = util_mono_s();
    int rc = TIER_OK;
    err[0] = '\0';
    for (;;) {
        tier_phase_t before = a->phase;
        if (before == PH_WRITING)
            rc = after_write(t, comm, wait, err, cap);
        else if (before == PH_EXCHANGING)
            rc = after_exchange(t, comm, wait, err, cap);
        else
            rc = after_put(t, comm, wait, err, cap);
        if (rc != TIER_OK || a->phase == PH_IDLE || a->phase == before)
            break;
        if (a->phase == PH_PUTTING && !wait)
            break; /* the helper has just begun: the next boundary looks */
    }
    a->rep.stall_s += util_mono_s() - t0;
    *status = rc != TIER_OK ? TIER_FAILED : a->phase == PH_IDLE ? TIER_SEALED : TIER_BUSY;
    if (*status != TIER_BUSY) {
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

int tier_save_progress(tier_t *t, comm_t *comm, tier_status_t *status, tier_report_t *rep,
                       char *err, size_t cap)
{
    return advance(t, comm, 0, status, rep, err, cap);
}

int tier_save_finish(tier_t *t, comm_t *comm, tier_status_t *status, tier_report_t *rep,
                     char *err, size_t cap)
{
    return advance(t, comm, 1, status, rep, err, cap);
}
