/*
 * local_tier.h - the node-local checkpoint tier of the trainer: where each
 * rank's partner copy goes, opening and closing the tier, and the choice
 * of a local checkpoint to restore from (docs/checkpoint-format.md, "The
 * node-local tier"; README, "The node-local tier").  The save itself, in
 * the background, has a header of its own: local_save.h.
 *
 * HowTo: tier_open() once the communicator exists (collective: it gathers
 * every rank's node name); then the saves (local_save.h); at a resume,
 * tier_pick() (collective) says whether the local tiers of the nodes now
 * running hold a newer complete checkpoint than the shared tier, and the
 * plan to read it (state_load_planned).  tier_close() last, and at the end
 * of a run, tier_remove_at_end() when asked.
 *
 * Errors: a tier function that can fail returns TIER_OK (0) or a negative
 * TIER_E... code (tier_strerror names it) and puts its message into the
 * caller's (err, cap).  Where a call also says where things stand (a
 * save in flight, sealed, failed; nothing to restore), that is a status of
 * its own (tier_status_t, or a field of an out-parameter), never a return
 * code.
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
                                   (local_save_internal.h); NULL before tier_open */
} tier_t;

/* The tier's errors: what a tier function returns, 0 or negative.  A
 * collective's failure is the same on every rank, its code need not be: the
 * rank that failed gives its own, the others TIER_EPEER. */
typedef enum {
    TIER_OK = 0,
    TIER_EFAIL = -1,  /* this rank's part failed: a file, a mapping, MPI (err says which) */
    TIER_ENOMEM = -2, /* this rank is out of memory */
    TIER_EPEER = -3,  /* another rank failed (err names it; it says why on its stderr) */
    TIER_EPATH = -4,  /* --ckpt-local cannot be used as given (err says why) */
    TIER_EINVAL = -5  /* called out of turn: no tier, or a save in flight already */
} tier_err_t;

/** @return a short name for a tier error code (a static string). */
const char *tier_strerror(int err);

/* Where the tier stands: statuses, never errors.  They are positive, so
 * that none reads as TIER_OK or as an error code. */
typedef enum {
    TIER_NONE = 1,    /* nothing to do: no save in flight */
    TIER_BUSY = 2,    /* a save is in flight and nothing is to be reported yet */
    TIER_SEALED = 3,  /* the save is sealed on every node now */
    TIER_FAILED = 4   /* the save failed now, on every rank */
} tier_status_t;

/** Pure: each rank's partner under the ring-over-nodes rule above.
 *  node_of: size entries in 0..nnodes-1.  partner[r] is -1 when nnodes < 2. */
void tier_place(const int *node_of, int size, int nnodes, int *partner);

/** Expand "%n" (the node name) and "%%" in pattern into out.
 *  @return TIER_OK, or TIER_EFAIL when it does not fit or has another "%"
 *  sequence. */
int tier_expand(const char *pattern, const char *host, char *out, size_t cap);

/** Collective: gather the ranks' node names, place the partners, create
 *  this node's root, and duplicate comm's MPI communicator for the partner
 *  exchange.  spare_core: this rank has a core its training does not fill
 *  (a GPU run's host thread mostly waits; a CPU run with fewer BLAS threads
 *  than its cores), where --ckpt-local-exchange auto lets the helper
 *  thread move the exchange.  @return TIER_OK, or a TIER_E... code (err
 *  set; a failure on every rank at once): TIER_EPATH when the directory
 *  cannot be used as given, TIER_ENOMEM, TIER_EPEER when another rank
 *  failed, TIER_EFAIL. */
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
 *  leader: the closed tier's.  @return TIER_OK when every node removed its
 *  tier, else on every rank TIER_EFAIL (err says what this rank kept) or
 *  TIER_EPEER (another node kept something). */
int tier_remove_at_end(const char *root, int leader, const char *pattern, comm_t *comm,
                       char *err, size_t cap);

/** @return 1 when this rank saves in place: its node's root is a memory
 *  file system (tmpfs, ramfs) and local shards are stored (level 0), so its
 *  shard is copied straight into a mapped file and its partner copies are
 *  received straight into mapped files, kept from save to save
 *  (local_inplace.c); 0 when it writes them with write().  tier_open
 *  decides it. */
int tier_in_place(const tier_t *t);

/** @return 1 when the partner exchange runs on the helper thread (asked
 *  for, and MPI gave MPI_THREAD_MULTIPLE on every rank), 0 when it moves at
 *  step boundaries on the training thread; the same on every rank.
 *  tier_open decides it. */
int tier_exchange_on_thread(const tier_t *t);

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
 *  root).  @return TIER_OK with pick filled (pick->step -1: the nodes
 *  hold nothing newer, and there is nothing to free), or a TIER_E... code
 *  (err set; the same everywhere). */
int tier_pick(tier_t *t, comm_t *comm, int64_t newer_than, int64_t older_than,
              tier_pick_t *pick, char *err, size_t cap);
/** Release a plan and remove the private manifest copy, if any. */
void tier_pick_free(tier_t *t, tier_pick_t *pick);

#endif
