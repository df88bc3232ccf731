/*
 * local_exchange.c - the node-local save's partner exchange
 * (local_save_internal.h): each rank sends its shard file to its partner
 * and receives the copies it keeps, with nonblocking point-to-point on a
 * communicator of the tier's own (comm_xfer_*: an MPI_Comm_dup of the
 * trainer's, made at the tier's open), so that no message of the exchange
 * can match any other point-to-point traffic while it is in flight over
 * several steps.  The MPI calls are comm.c's; this file decides when, and
 * on which thread, they are made.
 *
 * Who moves it, the same on every rank (tier_exchange_open's agreement):
 *   the helper thread (--ckpt-local-exchange thread, or auto where every
 *     rank has a core to spare), where MPI gave MPI_THREAD_MULTIPLE on
 *     every rank: it posts the exchange and tests it to its end
 *     (tier_exchange_run), then checks and writes the copies.  Only the
 *     helper touches the tier's communicator while that job runs, the
 *     training thread only the trainer's.  With shared memory Open MPI
 *     copies the bytes in whichever thread is inside MPI: now the helper,
 *     on a core of its own where the node has one to spare, not the
 *     training thread.  A peer that never comes holds the helper; the
 *     training thread ends that wait (`cancel`) when the save fails or the
 *     tier closes;
 *   else the training thread, at each step boundary for a short budget
 *     (tier_exchange_test), right after the step's reductions when the
 *     ranks are together; its bytes also move inside the next steps' MPI
 *     calls (the gradient allreduce), where they fill the time a rank waits
 *     for the slower one.  Where the ranks fill the cores that costs the
 *     training less than a helper competing with them for a core; where a
 *     core is spare, more (docs/bench-log.md, "Who moves the partner
 *     exchange").
 */
#include "tier/local_save_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

#include <xxhash.h>

/* The training thread's share of the partner exchange at one step
 * boundary: MPI_Testall for at most this long (the ranks are together
 * there; with shared memory and no progress thread the bytes move only
 * while both ends are inside MPI). */
#define TIER_EXCHANGE_BUDGET_S 0.05

/* The helper's pause between two tests of the exchange it moves, where the
 * rank has no core to spare.  Open MPI moves shared-memory bytes only inside
 * MPI calls, and a helper that tests without a pause competes for a core
 * with training; the pause leaves the core to the training at the price of
 * a slower exchange.  `auto` does not take this path on such a node: even
 * with the pause the helper cost more run time than the training thread's
 * own exchange (docs/bench-log.md, "Who moves the partner exchange"). */
#define TIER_EXCHANGE_NAP_NS 50000L
/* The pause where the rank has a core to spare (tier_t.spare_core), with
 * the helper's timer slack at 1 ns so that the kernel's default slack does
 * not stretch it: the pause throttles the exchange, and the spare core
 * absorbs the shorter one's polling (docs/bench-log.md, "The helper's
 * pause throttled the partner copy"). */
#define TIER_EXCHANGE_NAP_SPARE_NS 5000L

/* The pieces (comm_xfer_post's) of its own shard a rank's helper has in
 * flight at once, where it hashes the copies it receives as they land
 * (tier_exchange_run): the partner's pieces then land in order, a group at
 * a time, and are hashed soon after, from the cache; posted all at once,
 * Open MPI moves them side by side and they all land at the end.  Fewer in
 * flight made the copy slower than posting all at once; this many matched
 * it (docs/bench-log.md, "The partner exchange in pieces"). */
#define TIER_EXCHANGE_WINDOW 8

int tier_exchange_open(tier_t *t, comm_t *comm, int rc, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    /* Every rank opens the channel, or none: it is a collective (a dup). */
    int xrc = COMM_OK;
    if (comm_any_failed(comm, rc != TIER_OK) ||
        (xrc = comm_xfer_open(comm, &a->xfer)) == COMM_EINVAL) {
        if (rc == TIER_OK)
            rc = util_fail(err, cap, xrc == COMM_EINVAL ? TIER_EFAIL : TIER_EPEER,
                           "local tier: %s", xrc == COMM_EINVAL
                           ? "no MPI communicator for the partner exchange"
                           : "another rank could not set up its local saves");
        return rc;
    }
    if (comm_any_failed(comm, xrc != COMM_OK))
        return util_fail(err, cap, TIER_EFAIL, "local tier: MPI_Comm_dup failed");
    /* Every rank the same way, or their votes would not match. */
    int can = t->exchange_thread && a->threads_ok && comm_threads_multiple();
    a->xfer_thread = !comm_any_failed(comm, !can);
    if (a->xfer_thread && a->inplace)
        comm_xfer_window(a->xfer, TIER_EXCHANGE_WINDOW);
    return TIER_OK;
}

int tier_exchange_reserve(tier_t *t, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    int rc = TIER_OK;
    for (int i = 0; i < t->nsrc; i++) {
        a->recv_len[i] = a->all[t->srcs[i]].info.file_bytes;
        if (a->inplace) {
            /* Mapped at that size already, unless the guess was wrong. */
            a->want_len[1 + i] = a->recv_len[i];
            int mrc = tier_files_map(&a->files, 1 + i, a->recv_len[i], err, cap);
            if (mrc != TIER_OK)
                rc = mrc;
            a->dst[i] = a->files.files[1 + i].map;
        } else if (tier_grow_touched(&a->recv[i], &a->recv_cap[i], a->recv_len[i]) != TIER_OK) {
            rc = util_fail(err, cap, TIER_ENOMEM, "no memory for the partner copies");
        } else {
            a->dst[i] = a->recv[i];
        }
    }
    if (comm_xfer_reserve(a->xfer, a->send_len, t->partner, t->nsrc, a->recv_len) != COMM_OK)
        rc = util_fail(err, cap, TIER_EFAIL, "partner exchange: %s", comm_last_error());
    return rc;
}

int tier_exchange_post(tier_t *t, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    if (comm_xfer_post(a->xfer, a->send, a->send_len, t->partner, t->nsrc, t->srcs, a->dst,
                       a->recv_len) != COMM_OK)
        return util_fail(err, cap, TIER_EFAIL, "partner exchange: %s", comm_last_error());
    return TIER_OK;
}

int tier_exchange_test(tier_t *t, int *done, char *err, size_t cap)
{
    *done = 0;
    if (comm_xfer_test(t->async->xfer, TIER_EXCHANGE_BUDGET_S, done) != COMM_OK)
        return util_fail(err, cap, TIER_EFAIL, "partner exchange: %s", comm_last_error());
    return TIER_OK;
}

/* Hash what has landed of each copy since the last call (hash[i] holds
 * hashed[i] bytes of copy i).  @return 1 when something was hashed, 0
 * when nothing new had landed, or TIER_EFAIL when MPI failed (job_err
 * set). */
static int hash_landed(tier_t *t, XXH64_state_t **hash, uint64_t *hashed)
{
    struct tier_async *a = t->async;
    int any = 0;
    for (int i = 0; i < t->nsrc; i++) {
        uint64_t n = 0;
        if (comm_xfer_arrived(a->xfer, i, &n) != COMM_OK) {
            tier_job_fail(a, TIER_EFAIL, "partner exchange: %s", comm_last_error());
            return TIER_EFAIL;
        }
        if (n > hashed[i]) {
            XXH64_update(hash[i], (const char *)a->dst[i] + hashed[i], (size_t)(n - hashed[i]));
            hashed[i] = n;
            any = 1;
        }
    }
    return any;
}

/* The helper's pause between two tests (the calling thread's timer slack
 * is set here: the helper's, under MPI_THREAD_MULTIPLE). */
static long helper_nap(const tier_t *t)
{
#ifdef PR_SET_TIMERSLACK
    if (t->spare_core && prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0)
        return TIER_EXCHANGE_NAP_SPARE_NS;
#else
    (void)t;
#endif
    return TIER_EXCHANGE_NAP_NS;
}

/* Post the exchange on the tier's own communicator, which no other thread
 * uses while this job runs, and move it to its end here, pausing between
 * tests.  Where the copies land in their files (in place), each piece of a
 * copy is hashed soon after it has landed, from the cache, and the pause is
 * taken only when nothing new came: the check in JOB_PUT then compares
 * sums instead of reading every copy again (docs/bench-log.md, "The partner
 * exchange in pieces").  The training thread ends a wait on a peer that
 * never comes by setting `cancel`: the pieces still in flight are then its
 * to abandon. */
int tier_exchange_run(tier_t *t)
{
    struct tier_async *a = t->async;
    long nap = helper_nap(t);
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
    int rc = tier_exchange_post(t, a->job_err, sizeof a->job_err);
    int done = 0;
    while (rc == TIER_OK && !done && !atomic_load(&a->cancel)) {
        int got = 0;
        if (comm_xfer_test(a->xfer, 0, &done) != COMM_OK)
            rc = util_fail(a->job_err, sizeof a->job_err, TIER_EFAIL, "partner exchange: %s",
                           comm_last_error());
        else if (hashing && (got = hash_landed(t, hash, hashed)) < 0)
            rc = got;
        else if (!done && !got)
            nanosleep(&(struct timespec){0, nap}, NULL);
    }
    if (hashing && done && rc == TIER_OK) {
        for (int i = 0; i < t->nsrc; i++)
            a->sum[i] = XXH64_digest(hash[i]);
        a->summed = 1;
    }
    for (int i = 0; hash && i < t->nsrc; i++)
        XXH64_freeState(hash[i]);
    free(hash);
    free(hashed);
    if (rc == TIER_OK && !done)
        rc = util_fail(a->job_err, sizeof a->job_err, TIER_EFAIL, "partner exchange: abandoned");
    a->job_rc = rc;
    return rc;
}
