/*
 * local_tier.h - the node-local checkpoint tier of the trainer: where each
 * rank's partner copy goes, a collective local save, and the choice of a
 * local checkpoint to restore from (docs/checkpoint-format.md, "The
 * node-local tier"; README, "The node-local tier").
 *
 * HowTo: tier_open() once the communicator exists (collective: it gathers
 * every rank's node name); at a local checkpoint, write the snapshot's
 * shard into tier.root (state_snapshot_write) and call tier_save()
 * (collective); at a resume, tier_pick() (collective) says whether the
 * local tiers of the nodes now running hold a newer complete checkpoint
 * than the shared tier, and the plan to read it (state_load_planned).
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

#include "ftrain/comm.h"
#include "ftrain/config.h"
#include "ftrain/state.h"

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
} tier_t;

typedef enum { TIER_OK = 0, TIER_NONE = 1, TIER_EFAIL = -1 } tier_rc_t;

/** Pure: each rank's partner under the ring-over-nodes rule above.
 *  node_of: size entries in 0..nnodes-1.  partner[r] is -1 when nnodes < 2. */
void tier_place(const int *node_of, int size, int nnodes, int *partner);

/** Expand "%n" (the node name) and "%%" in pattern into out.
 *  @return 0, or -1 when it does not fit or has another "%" sequence. */
int tier_expand(const char *pattern, const char *host, char *out, size_t cap);

/** Collective: gather the ranks' node names, place the partners, create
 *  this node's root.  @return TIER_OK or TIER_EFAIL (the same everywhere). */
int tier_open(tier_t *t, const config_t *cfg, comm_t *comm, const char *host, char *err,
              size_t cap);
void tier_close(tier_t *t);

/* What one local save did, for its line and event. */
typedef struct {
    double write_s, copy_s, seal_s;  /* own shard, partner exchange, commit */
    uint64_t own_bytes;              /* this rank's shard file */
    uint64_t copy_bytes;             /* partner copies this rank keeps */
    uint64_t node_bytes;             /* on rank 0's node: what its root holds */
    uint64_t max_node_bytes;         /* the most any node's root holds */
} tier_report_t;

/** Collective: this rank's shard of snap is written into t->root already
 *  (state_snapshot_write); send it to the partner, keep the copies sent to
 *  us, and when every rank's shard and copy is in place, seal each node's
 *  directory.  @return TIER_OK or TIER_EFAIL (err set), the same on every
 *  rank; a failed local save leaves no committed local checkpoint. */
int tier_save(tier_t *t, comm_t *comm, state_snapshot_t *snap, tier_report_t *rep,
              char *err, size_t cap);

/* A restore plan. */
typedef struct {
    int64_t step;
    int nshards;
    int *holder;                /* nshards: the rank that reads shard s */
    char dir[CONFIG_PATH_MAX + 64]; /* this rank's step directory to open */
    char where[512];            /* "shards 0-1 on n1, 2-3 on n3": for the line */
} tier_pick_t;

/** Collective: the newest step, newer than newer_than, whose shards the
 *  nodes now running hold between them.  A rank whose node holds none of
 *  it gets the manifest from one that does (in a private directory of its
 *  root).  @return TIER_OK with pick filled, TIER_NONE (nothing newer),
 *  or TIER_EFAIL. */
int tier_pick(tier_t *t, comm_t *comm, int64_t newer_than, tier_pick_t *pick, char *err,
              size_t cap);
/** Release a plan and remove the private manifest copy, if any. */
void tier_pick_free(tier_t *t, tier_pick_t *pick);

#endif
