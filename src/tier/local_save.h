/*
 * local_save.h - the node-local tier's save, in the background: a
 * collective local save started at a step boundary and moved on at the
 * later ones until it is sealed on every node (local_save.c, whose top
 * comment has its invariants and its state diagram).
 *
 * HowTo: once the tier is open (local_tier.h: tier_open),
 * tier_save_prepare() once the state is described (allocates the save's
 * buffers in the background); at a local checkpoint, bring the state to
 * the host at its step and call tier_save_start() (collective: the
 * training stall is a copy of this rank's slice of the state, the bytes
 * its shard holds), tier_save_settle() before anything next writes the
 * state, then tier_save_progress() at every later step boundary
 * (collective) until it says the save is sealed or failed, and
 * tier_save_finish() before a stop or the end (collective: waits for the
 * save in flight and seals it).  tier_close() abandons a save still in
 * flight, never sealing it.
 *
 * This rank's shard is written, its partner copies checked and written,
 * and old steps pruned by a helper thread that makes no collective; the
 * votes happen on the training thread at step boundaries, and the partner
 * exchange (nonblocking point-to-point on a communicator of the tier's
 * own) moves there or, where asked and allowed, on the helper thread.  At
 * most one local save is in flight.  A node's step directory is sealed
 * only after every rank's shard and every partner copy is durable on every
 * node, so a local checkpoint that is not complete stays invisible,
 * whenever the run ends.
 *
 * Errors and statuses follow local_tier.h: TIER_OK or a negative TIER_E...
 * code with the message in (err, cap); where the save stands is a
 * tier_status_t of its own.
 */
#ifndef FTRAIN_LOCAL_SAVE_H
#define FTRAIN_LOCAL_SAVE_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"
#include "state/state.h"
#include "tier/local_tier.h"

/* What one local save did, for its line and event.  Times are seconds;
 * the background ones are this rank's. */
typedef struct {
    int64_t step;                    /* the step saved */
    double total_s;                  /* from the start to the seal (wall) */
    double write_s;                  /* own shard written (and mapped), background */
    double copy_s;                   /* partner exchange and copies written, wall */
    double seal_s;                   /* the vote on the copies, the seal, the sizes */
    double stall_s;                  /* the training thread's time in the save: */
    double snapshot_s;               /*   the slice's copy (and the caller's download), */
    double exchange_s;               /*   the partner exchange's progress, */
    double waited_s;                 /*   waits for the helper thread (a stop, the end) */
    double helper_cpu_s;             /* the helper thread's CPU (user and system) for its
                                        jobs joined since the last report: this save's,
                                        and the prune and preparation after the last seal */
    int finished;                    /* completed by tier_save_finish */
    uint64_t own_bytes;              /* this rank's shard file */
    uint64_t copy_bytes;             /* partner copies this rank keeps */
    uint64_t node_bytes;             /* on rank 0's node: what its root keeps */
    uint64_t max_node_bytes;         /* the most any node's root keeps */
} tier_report_t;

/** Start allocating, and touching, the buffers a local save of st needs
 *  (the snapshot copy, the partner copies' receive buffers; in place, the
 *  mapped files instead) on the helper thread, so that no save pays for
 *  page faults on the training thread.
 *  Not collective; the first call does it, later calls return at once. */
void tier_save_prepare(tier_t *t, const state_t *st);

/** Collective: start a local save of st, on the host at its step: copy
 *  this rank's slice of it (what its shard holds) into the snapshot buffer
 *  or, in place, its shard file, or where the helper thread moves the
 *  exchange have the helper copy it (the caller calls tier_save_settle
 *  before it next writes the state), and have the helper write the shard
 *  into t->root.  started: when the caller began (a download from a device
 *  counts in the stall).  Only with no save in flight.
 *  @return TIER_OK (in flight), or a TIER_E... code (err set; on every
 *  rank, nothing in flight): TIER_EINVAL when a save is in flight already
 *  or t has no tier, TIER_ENOMEM, TIER_EPEER when another rank failed,
 *  TIER_EFAIL. */
int tier_save_start(tier_t *t, comm_t *comm, const state_t *st, double started, char *err,
                    size_t cap);

/** Before anything writes the state a save just started from (the
 *  optimizer's update, a download from the device): wait until the helper
 *  thread has copied this rank's slice of it.  Where the helper moves the
 *  partner exchange (tier_exchange_on_thread), tier_save_start only plans
 *  that copy and the helper makes it while the next step computes, which
 *  reads the state but does not write it.  Bounded by the local copy.
 *  @return the seconds waited, also counted in the save's stall (0 at
 *  once when nothing is being copied). */
double tier_save_settle(tier_t *t);

/** Collective, at a step boundary: move the save in flight on (votes, the
 *  partner exchange for a short budget unless the helper thread moves it
 *  (tier_exchange_on_thread), the next job of the helper thread; the seal
 *  once every rank's shard and copies are durable).  *status says where
 *  the save stands, the same on every rank: TIER_NONE (no save in flight),
 *  TIER_BUSY (still in flight), TIER_SEALED (sealed on every node now: rep
 *  filled) or TIER_FAILED (failed now: rep's step and times filled; sealed
 *  on no node, but for a seal that failed on some node: the others' seals
 *  stand, each node's directory whole).
 *  @return TIER_OK, or when the save failed (*status TIER_FAILED) a
 *  TIER_E... code with err set: this rank's own (TIER_EFAIL, TIER_ENOMEM),
 *  or TIER_EPEER when another rank failed. */
int tier_save_progress(tier_t *t, comm_t *comm, tier_status_t *status, tier_report_t *rep,
                       char *err, size_t cap);

/** Collective: complete the save in flight, waiting for the helper thread
 *  and the exchange (bounded by the I/O and by the peers; a dead peer is the
 *  watchdog's).  @return as tier_save_progress; *status is never
 *  TIER_BUSY. */
int tier_save_finish(tier_t *t, comm_t *comm, tier_status_t *status, tier_report_t *rep,
                     char *err, size_t cap);

/** @return 1 while a local save is in flight (the same on every rank). */
int tier_save_in_flight(const tier_t *t);
/** @return the step of the save in flight, -1 when none. */
int64_t tier_save_step(const tier_t *t);
/** A local save fell due while one is in flight: it is skipped (at most one
 *  in flight, and never a wait for it).  @return how many were skipped
 *  during the one in flight, this one included (0 when none is). */
int tier_save_skip(tier_t *t);

#endif
