/*
 * local_tier.h - the node-local checkpoint tier of the trainer: where each
 * rank's partner copy goes, a collective local save, and the choice of a
 * local checkpoint to restore from (docs/checkpoint-format.md, "The
 * node-local tier"; README, "The node-local tier").
 *
 * HowTo: tier_open() once the communicator exists (collective: it gathers
 * every rank's node name); tier_save_prepare() once the state is described
 * (allocates the save's buffers in the background); at a local checkpoint,
 * bring the state to the host at its step and call tier_save_start()
 * (collective: the training stall is a copy of this rank's slice of the
 * state, the bytes its shard holds), then
 * tier_save_progress() at every later step boundary (collective) until it
 * says the save is sealed or failed, and tier_save_finish() before a stop
 * or the end (collective: waits for the save in flight and seals it); at a
 * resume, tier_pick() (collective) says whether the local tiers of the
 * nodes now running hold a newer complete checkpoint than the shared tier,
 * and the plan to read it (state_load_planned).  tier_close() last.
 *
 * The local save runs in the background (local_async.c, whose top comment
 * has the reasoning about threads and MPI): this rank's shard is written,
 * its partner copies checked and written, and old steps pruned by a helper
 * thread that makes no MPI call; the votes and the partner exchange
 * (nonblocking point-to-point on a communicator of the tier's own) happen
 * on the training thread at step boundaries.  At most one local save is in
 * flight.  A node's step directory is sealed only after every rank's shard
 * and every partner copy is durable on every node, so a local checkpoint
 * that is not complete stays invisible, whenever the run ends.
 *
 * Placement: a ring over nodes, not ranks.  Nodes are numbered in the order
 * their first rank appears; rank r, the j-th rank of node k, sends its copy
 * to the (j mod n)-th rank of node (k + 1) mod N, where n is that node's
 * rank count and N the number of nodes.  Two ranks of one node are never
 * partners; with one node there is no partner at all.
 */
#ifndef FTRAIN_LOCAL_TIER_H
#define FTRAIN_LOCAL_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"
#include "config/config.h"
#include "state/state.h"

#define TIER_HOST_MAX 64
/* Local checkpoints a node reports at a restore (it keeps at most 2). */
#define TIER_SCAN_MAX 4

typedef struct {
    char root[CONFIG_PATH_MAX]; /* this node's local root ("%n" expanded) */
    int rank, size;
    int nnodes;
    int *node_of;               /* size entries: each rank's node */
    char (*hosts)[TIER_HOST_MAX]; /* nnodes names, by node */
    int partner;                /* the rank that keeps this rank's copy, -1 */
    int nsrc;                   /* ranks whose copies this rank keeps */
    int *srcs;
    int leader;                 /* this rank seals its node's directory */
    int keep;                   /* local checkpoints a node keeps */
    int level;                  /* zstd level of local shards (0 stored) */
    int exchange;               /* --ckpt-local-exchange (CONFIG_EXCHANGE_*) */
    int exchange_thread;        /* asked: the helper thread moves the copies
                                   (--ckpt-local-exchange thread, or auto
                                   with a core to spare on this rank) */
    int spare_core;             /* tier_open's: the helper's exchange may
                                   poll MPI with short pauses */
    int copy_delay_ms;          /* --ckpt-local-copy-delay-ms (tests) */
    struct tier_async *async;   /* the save in the background and its buffers
                                   (local_async.c); NULL before tier_open */
} tier_t;

/* TIER_BUSY: a save is in flight and nothing is to be reported yet. */
typedef enum { TIER_OK = 0, TIER_NONE = 1, TIER_BUSY = 2, TIER_EFAIL = -1 } tier_rc_t;

/** Pure: each rank's partner under the ring-over-nodes rule above.
 *  node_of: size entries in 0..nnodes-1.  partner[r] is -1 when nnodes < 2. */
void tier_place(const int *node_of, int size, int nnodes, int *partner);

/** Expand "%n" (the node name) and "%%" in pattern into out.
 *  @return 0, or -1 when it does not fit or has another "%" sequence. */
int tier_expand(const char *pattern, const char *host, char *out, size_t cap);

/** Collective: gather the ranks' node names, place the partners, create
 *  this node's root, and duplicate comm's MPI communicator for the partner
 *  exchange.  spare_core: this rank has a core its training does not fill
 *  (a GPU run's host thread mostly waits; a CPU run with fewer BLAS threads
 *  than its cores), where --ckpt-local-exchange auto lets the helper
 *  thread move the exchange.  @return TIER_OK or TIER_EFAIL (the same
 *  everywhere). */
int tier_open(tier_t *t, const config_t *cfg, comm_t *comm, const char *host, int spare_core,
              char *err, size_t cap);
/** Release.  A save still in flight is abandoned, never sealed (its temp
 *  directory stays invisible): the helper thread is joined; buffers an
 *  unfinished exchange may still write into are left allocated. */
void tier_close(tier_t *t);

/** Collective, after every rank's tier_close(): at the end of a run whose
 *  newest state is committed on the shared tier (--ckpt-local-remove-at-end),
 *  each node's leader removes its node's tier: the local checkpoints and
 *  temp directories (ckpt_local_drop_after), the spare files, the lock file
 *  and the node markers, then the directory itself, and its parent when the
 *  pattern's last component holds %n and the parent is left empty (the
 *  batch script's per-job directory).  A step set aside as corrupt, or a
 *  file ftrain did not make, is kept, and with it the directory.  root and
 *  leader: the closed tier's.  @return 0 when every node removed its tier,
 *  else 1 on every rank (err says what this rank kept, or that another node
 *  kept something). */
int tier_remove_at_end(const char *root, int leader, const char *pattern, comm_t *comm,
                       char *err, size_t cap);

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
 *  counts in the stall).  Only with no save in flight.  @return TIER_OK (in flight) or TIER_EFAIL (err set, the same
 *  everywhere; nothing in flight). */
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
 *  partner exchange for at most TIER_EXCHANGE_BUDGET_S unless the helper
 *  thread moves it (tier_exchange_on_thread), the next job of the
 *  helper thread; the seal once every rank's shard and copies are durable).
 *  @return TIER_NONE (no save in flight), TIER_BUSY (still in flight),
 *  TIER_OK (sealed on every node now: rep filled) or TIER_EFAIL (failed
 *  now: err set, rep's step and times filled; sealed on no node, but for a
 *  seal that failed on some node: the others' seals stand, each node's
 *  directory whole).  The same on every rank. */
int tier_save_progress(tier_t *t, comm_t *comm, tier_report_t *rep, char *err, size_t cap);

/** Collective: complete the save in flight, waiting for the helper thread
 *  and the exchange (bounded by the I/O and by the peers; a dead peer is the
 *  watchdog's).  @return as tier_save_progress, never TIER_BUSY. */
int tier_save_finish(tier_t *t, comm_t *comm, tier_report_t *rep, char *err, size_t cap);

/** @return 1 when this rank saves in place: its node's root is a memory
 *  file system (tmpfs, ramfs) and local shards are stored (level 0), so its
 *  shard is copied straight into a mapped file and its partner copies are
 *  received straight into mapped files, kept from save to save
 *  (local_inplace.c); 0 when it writes them with write(). */
int tier_in_place(const tier_t *t);

/** @return 1 when the partner exchange runs on the helper thread (asked
 *  for, and MPI gave MPI_THREAD_MULTIPLE on every rank), 0 when it moves at
 *  step boundaries on the training thread; the same on every rank. */
int tier_exchange_on_thread(const tier_t *t);

/** @return 1 while a local save is in flight (the same on every rank). */
int tier_save_in_flight(const tier_t *t);
/** @return the step of the save in flight, -1 when none. */
int64_t tier_save_step(const tier_t *t);
/** A local save fell due while one is in flight: it is skipped (at most one
 *  in flight, and never a wait for it).  @return how many were skipped
 *  during the one in flight, this one included (0 when none is). */
int tier_save_skip(tier_t *t);

/* The training thread's share of the partner exchange at one step
 * boundary: MPI_Testall for at most this long (the ranks are together
 * there; with shared memory and no progress thread the bytes move only
 * while both ends are inside MPI). */
#define TIER_EXCHANGE_BUDGET_S 0.05

/* A restore plan. */
typedef struct {
    int64_t step;
    int nshards;
    int *holder;                /* nshards: the rank that reads shard s */
    char dir[CONFIG_PATH_MAX + 64]; /* this rank's step directory to open */
    char where[512];            /* "shards 0-1 on n1, 2-3 on n3": for the line */
} tier_pick_t;

/** Collective: the newest step, newer than newer_than and older than
 *  older_than (INT64_MAX: no bound; a resume tries the next older one when
 *  a step cannot be read), whose shards the nodes now running hold between
 *  them.  A rank whose node holds none of
 *  it gets the manifest from one that does (in a private directory of its
 *  root).  @return TIER_OK with pick filled, TIER_NONE (nothing newer),
 *  or TIER_EFAIL. */
int tier_pick(tier_t *t, comm_t *comm, int64_t newer_than, int64_t older_than,
              tier_pick_t *pick, char *err, size_t cap);
/** Release a plan and remove the private manifest copy, if any. */
void tier_pick_free(tier_t *t, tier_pick_t *pick);

#endif
