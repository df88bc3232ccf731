/*
 * local_snapshot.c - what a node-local save copies of the state, and the
 * buffers it keeps for that from save to save (local_save_internal.h).
 *
 * A rank's shard holds only its slice of the flat space of the state's
 * tensors (ckpt_slice), so the start copies only that slice: into the
 * snapshot buffer, or in place straight into this rank's mapped shard
 * file.  The copy is planned here as ranges; the training thread makes it
 * in tier_save_start, or, where the helper thread moves the partner
 * exchange, the helper makes it first thing in its write job while the
 * next step computes (that step reads the state and writes it only in its
 * update, which waits in tier_save_settle).  The buffers are allocated and
 * touched ahead of the first save by the helper (tier_save_prepare), so
 * that no save pays for page faults on the training thread.
 */
#include "tier/local_save_internal.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- buffers kept across saves ------------------------------------------ */

int tier_grow_touched(void **buf, uint64_t *cap, uint64_t need)
{
    if (*buf && *cap >= need)
        return TIER_OK;
    free(*buf);
    *cap = 0;
    if ((uint64_t)(size_t)need != need || !(*buf = malloc(need ? (size_t)need : 1)))
        return TIER_ENOMEM;
    /* Every page touched, so that no later use pays a page fault: the
     * kernel's zeroing of new pages is most of a fresh buffer's cost. */
    memset(*buf, 0, (size_t)need);
    *cap = need;
    return TIER_OK;
}

/* The snapshot copy: as large as the whole state (the snapshot lays every
 * tensor out in it), but only the bytes that will hold this rank's slice,
 * [touch_lo, touch_hi), are ever used (take_slice), so only they are
 * touched; the rest is never faulted in.  @return TIER_OK or
 * TIER_ENOMEM. */
static int grow_copy(struct tier_async *a, size_t floats)
{
    size_t bytes = floats * sizeof(float) + 1; /* a state of no floats gets a buffer */
    free(a->copy);
    a->copy_floats = 0;
    if (!(a->copy = malloc(bytes)))
        return TIER_ENOMEM;
    size_t lo = a->touch_hi ? (size_t)a->touch_lo : 0;
    size_t hi = a->touch_hi && a->touch_hi < bytes ? (size_t)a->touch_hi : bytes;
    if (lo < hi)
        memset((unsigned char *)a->copy + lo, 0, hi - lo);
    a->copy_floats = floats;
    return TIER_OK;
}

/* Rank r's slice of the flat space of a snapshot's tensors, by the
 * format's slice rule (ckpt_slice): the only bytes its shard holds. */
void tier_slice_of(const tier_t *t, int r, const state_local_view_t *view, uint64_t *lo,
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

void tier_snapshot_buffers(tier_t *t)
{
    struct tier_async *a = t->async;
    if (a->inplace) {
        char err[TIER_MSG_MAX];
        for (int k = 0; k < a->files.nfiles; k++)
            if (a->want_len[k])
                tier_files_map(&a->files, k, a->want_len[k], err, sizeof err);
        return;
    }
    if (a->copy_floats < a->want_floats)
        grow_copy(a, a->want_floats);
    for (int i = 0; i < t->nsrc; i++)
        tier_grow_touched(&a->recv[i], &a->recv_cap[i], a->want_recv);
}

/* Where this rank's slice lies in the snapshot copy ([touch_lo, touch_hi):
 * the snapshot lays the tensors out back to back, in order), and in place
 * each file's size, from a snapshot of st without a copy. */
static void plan_buffers(tier_t *t, const state_t *st)
{
    struct tier_async *a = t->async;
    state_snapshot_t *probe = NULL;
    char err[256];
    state_local_view_t view;
    if (state_snapshot_take(st, t->size, NULL, 0, NULL, 0, t->level, &probe, err, sizeof err) !=
        STATE_OK) {
        state_snapshot_free(probe);
        return;
    }
    state_snapshot_local(probe, &view);
    uint64_t lo, hi, at = 0;
    tier_slice_of(t, t->rank, &view, &lo, &hi);
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
            tier_slice_of(t, t->srcs[i], &view, &lo, &hi);
            a->want_len[1 + i] = ckpt_stored_shard_bytes(hi - lo, a->frame_bytes);
        }
    }
    state_snapshot_free(probe);
}

void tier_save_prepare(tier_t *t, const state_t *st)
{
    struct tier_async *a = t->async;
    if (!a || a->prepared || a->running)
        return;
    a->prepared = 1;
    a->want_floats = state_floats(st);
    plan_buffers(t, st);
    if (!a->inplace) {
        /* The copies kept here are other ranks' shards: stored (level 0),
         * a shard file is its slice of the flat space and a little more
         * (frame headers, the seek table); ckpt_slice_start cuts the space
         * evenly. */
        uint64_t slice = (uint64_t)a->want_floats * sizeof(float) / (uint64_t)t->size + 1;
        a->want_recv = t->nsrc ? slice + slice / 64 + ((uint64_t)1 << 20) : 0;
    }
    tier_job_run(t, JOB_PREPARE);
}

/* ---- the start's snapshot ---------------------------------------------------- */

/* Room for n copy ranges (kept from save to save).  @return TIER_OK or
 * TIER_ENOMEM. */
static int ranges_room(struct tier_async *a, size_t n)
{
    if (n <= a->ranges_cap)
        return TIER_OK;
    util_copy_range_t *r = realloc(a->ranges, n * sizeof *r);
    if (!r)
        return TIER_ENOMEM;
    a->ranges = r;
    a->ranges_cap = n;
    return TIER_OK;
}

/* Snapshot st into the copy buffer, but copy only this rank's slice of the
 * flat space (tier_slice_of), the only bytes its shard holds: 1/W of a
 * whole copy.  The state's three host arrays are declared placed
 * (state_snapshot_take copies none of their tensors), and the slice's bytes
 * of each tensor are to be copied from a second snapshot that points at the
 * live state: the ranges are planned here and copied by the start or the
 * helper (tier_snapshot_copy); the rest of the buffer is never written nor
 * read (nor faulted in: grow_copy).  Where the arrays cannot be placed, the
 * whole state is copied here, on the training thread.  @return TIER_OK or
 * TIER_EFAIL (err set). */
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
        ranges_room(a, to.ntensors + 1) != TIER_OK) {
        state_snapshot_free(live);
        state_snapshot_free(a->snap);
        a->snap = NULL;
        return state_snapshot_take(st, t->size, a->copy, a->copy_floats, NULL, 0, t->level,
                                   &a->snap, err, cap) == STATE_OK ? TIER_OK : TIER_EFAIL;
    }
    tier_slice_of(t, t->rank, &to, &lo, &hi);
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
    /* Copied by the start or the helper (tier_snapshot_copy): the pointers
     * are the live state's arrays and the copy buffer, which outlive
     * `live`. */
    a->nranges = count;
    a->range_bytes = bytes;
    a->copy_threads = to.opts->threads;
    state_snapshot_free(live);
    return TIER_OK;
}

/* The save in place: snapshot st's description (its tensors point at the
 * live state, and nothing reads them but the seal, for their shapes), and
 * plan the copy of this rank's slice of the flat space straight into its
 * own file, at the place a stored shard holds it, which the start or the
 * helper makes (tier_snapshot_copy); alignment gaps get zeros here.  The
 * file is mapped here on the training thread when the helper could not do
 * it.  @return TIER_OK, or a TIER_E... code (err set). */
static int take_inplace(tier_t *t, const state_t *st, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    state_local_view_t view;
    if (state_snapshot_take(st, t->size, NULL, 0, NULL, 0, t->level, &a->snap, err, cap) !=
        STATE_OK)
        return TIER_EFAIL;
    state_snapshot_local(a->snap, &view);
    tier_slice_of(t, t->rank, &view, &a->lo, &a->hi);
    a->frame_bytes = view.opts->frame_bytes;
    uint64_t len = ckpt_stored_shard_bytes(a->hi - a->lo, a->frame_bytes);
    if (ranges_room(a, view.ntensors + 1) != TIER_OK)
        return util_fail(err, cap, TIER_ENOMEM, "out of memory");
    int rc = tier_files_map(&a->files, 0, len, err, cap);
    if (rc != TIER_OK)
        return rc;
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
    a->nranges = count; /* copied by the start or the helper */
    a->range_bytes = bytes;
    a->copy_threads = view.opts->threads;
    return TIER_OK;
}

int tier_snapshot_take(tier_t *t, const state_t *st, char *err, size_t cap)
{
    struct tier_async *a = t->async;
    int rc = TIER_OK;
    a->nranges = 0;
    if (a->inplace)
        rc = take_inplace(t, st, err, cap);
    else if (a->copy_floats < state_floats(st) && grow_copy(a, state_floats(st)) != TIER_OK)
        rc = util_fail(err, cap, TIER_ENOMEM, "out of memory for the snapshot (%zu bytes)",
                       state_floats(st) * sizeof(float));
    else
        rc = take_slice(t, st, err, cap);
    /* Where the training thread moves the exchange (the ranks fill the
     * cores), it copies its slice now too: a helper copying beside the
     * training's threads competes with them for the cores and cost more run
     * time than it took off the stall (docs/bench-log.md, "The snapshot
     * copied while the next step computes").  Else the helper copies it
     * (tier_snapshot_copy). */
    if (rc == TIER_OK && a->nranges && !a->xfer_thread) {
        util_copy_ranges(a->ranges, a->nranges, a->range_bytes, a->copy_threads);
        a->nranges = 0;
    }
    return rc;
}

void tier_snapshot_copy(tier_t *t)
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
