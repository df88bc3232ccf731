/*
 * state.h - what an ftrain checkpoint holds, and resume with reshard.
 *
 * HowTo: fill a state_t with pointers to the live model and optimizer and
 * the position (step, epoch, cursor); state_save() turns it into named
 * tensors plus a JSON record and saves it collectively through ckpt/;
 * state_resolve() picks the checkpoint to resume from (rank 0 looks, all
 * ranks learn); state_load() restores a state_t from a checkpoint written by
 * any number of ranks.  See docs/checkpoint-format.md for the record.
 */
#ifndef FTRAIN_STATE_H
#define FTRAIN_STATE_H

#include <stdint.h>

#include "ftrain/ckpt.h"
#include "parallel/comm.h"
#include "config/config.h"
#include "nn/model.h"
#include "nn/optim.h"

#define STATE_PATH_MAX 1024
/* A checkpoint root's identity: 16 hex digits and the NUL. */
#define STATE_ROOT_ID_SIZE 17

/* The host arrays of the training state, in this order: the model's
 * parameters and the optimizer's two moments, n_params floats each (the
 * second moment is NULL for SGD).  This is their one list: the
 * checkpoint's tensors, the GPU mirror's copies, the asynchronous save's
 * snapshot and a fresh start's reset all walk it (state_host_arrays). */
enum { STATE_PARAMS, STATE_MOMENT1, STATE_MOMENT2, STATE_ARRAYS };

/** The host arrays of model and opt, in the order above, into arrays; an
 *  array the optimizer does not keep is NULL. */
void state_host_arrays(model_t *model, optim_t *opt, float *arrays[STATE_ARRAYS]);

typedef struct {
    model_t *model;
    optim_t *optim;
    const config_t *cfg;
    int64_t step;            /* updates done */
    int64_t epoch;           /* epoch of the next step */
    int64_t cursor;          /* samples of that epoch already consumed */
    int eval_pending;        /* step ends an epoch whose evaluation has not
                                run (a stop skipped it); the resume runs it */
    int64_t steps_per_epoch;
    int64_t n_train;         /* samples in the training set */
    uint64_t data_fp;        /* data_fingerprint() of the training set */
    int threads;             /* BLAS threads per rank */
    int ckpt_threads;        /* default checkpoint encoder threads */
    model_init_t init;       /* the rule the weights started from: --init,
                                or after a resume the checkpoint's */
    char resumed_from[STATE_PATH_MAX]; /* lineage: "" for a fresh start */
    char root_id[STATE_ROOT_ID_SIZE]; /* the run's checkpoint root (state_root_id);
                                         "" without a run directory */
    double run_seconds;      /* training seconds of the run up to step, all
                                processes together (state_load: as saved) */
} state_t;

typedef enum {
    STATE_OK = 0,
    STATE_FRESH = 1,      /* state_resolve: nothing to resume from, start fresh */
    STATE_EFAIL = -1,     /* I/O, checkpoint, memory or collective failure */
    STATE_EMISMATCH = -2  /* architecture or trajectory options differ */
} state_err_t;

/* A save in three phases, so that the middle one can run in a background
 * thread (--ckpt-async):
 *   take    copy (or point at) the live buffers and build the record  [main]
 *   write   this rank's shard, local I/O only, no collective      [any thread]
 *   commit  collective: gather shard infos, rank 0 commits             [main] */
typedef struct state_snapshot state_snapshot_t;

/* A host array (the parameters, a moment) whose tensors a snapshot copy
 * holds already. */
typedef struct {
    const float *host;
    size_t floats;
} state_placed_t;

/** Describe st as a checkpoint of step st->step for `world` ranks.  With
 *  copy != NULL the state is copied into it (copy_floats floats, at least
 *  state_floats(st)) so training may go on; the caller keeps the buffer.
 *  The tensors that lie in placed[0..nplaced) are in the copy already (a
 *  GPU downloaded each array there whole, at the state_copy_offset of its
 *  start) and are not copied; an array whose tensors are not back to back
 *  in the copy is refused.  @return STATE_OK or STATE_EFAIL (err set). */
int state_snapshot_take(const state_t *st, int world, float *copy, size_t copy_floats,
                        const state_placed_t *placed, size_t nplaced, int level,
                        state_snapshot_t **out, char *err, size_t cap);
/** Where, in floats from its start, a snapshot copy holds the tensor whose
 *  host data is host_data.  @return STATE_OK, or STATE_EFAIL when st has
 *  no such tensor. */
int state_copy_offset(const state_t *st, const void *host_data, size_t *offset);
/** @return the number of floats a snapshot copy of st needs. */
size_t state_floats(const state_t *st);
/** Phase one: write this rank's shard; no collective, thread-safe.  The
 *  result is kept in the snapshot for the commit.  @return STATE_OK or
 *  STATE_EFAIL. */
int state_snapshot_write(state_snapshot_t *snap, const char *root, int rank, int world);
/** The checkpoint commit's collectives over comm (ckpt_coll_t): each waits
 * without spinning (comm_wait_all) before its MPI collective. */
ckpt_coll_t state_ckpt_coll(comm_t *comm);

/** Phase two, collective: commit if every rank's write succeeded.  out gets
 *  the step dir.  @return the same on every rank. */
int state_snapshot_commit(state_snapshot_t *snap, comm_t *comm, const char *root, char *out,
                          size_t outcap, char *err, size_t cap);
/** Release; accepts NULL. */
void state_snapshot_free(state_snapshot_t *snap);

/** What the node-local tier needs of a written snapshot (its own commit). */
typedef struct {
    uint64_t step;
    const ckpt_tensor_t *tensors;
    size_t ntensors;
    const char *record;
    const ckpt_opts_t *opts;
    ckpt_shard_info_t info;   /* this rank's shard, once written */
} state_local_view_t;
/** Fill view from snap.  @return STATE_OK when this rank's shard was
 *  written, else STATE_EFAIL (state_snapshot_error says why). */
int state_snapshot_local(const state_snapshot_t *snap, state_local_view_t *view);
const char *state_snapshot_error(const state_snapshot_t *snap);

/** Collective save of st into root (DIR/ckpt): take + write + commit.  out
 *  gets the step dir.
 *  @return STATE_OK or STATE_EFAIL with err set (same on every rank). */
int state_save(const state_t *st, comm_t *comm, const char *root, int level,
               char *out, size_t outcap, char *err, size_t cap);

/** Rank 0, at the start: the identity of the checkpoint root `root` (which
 *  exists), read from its .root-id file, made there first when it has none
 *  (16 random hex digits, fsync'd).  Every checkpoint records it; a
 *  node-local checkpoint is resumed from only by a run of the same root, so
 *  a new run directory, or a root moved away to start afresh, never
 *  continues from another run's local checkpoints.
 *  @return STATE_OK and id, or STATE_EFAIL (err names the file). */
int state_root_id(const char *root, char id[STATE_ROOT_ID_SIZE], char *err, size_t cap);

/** Collective: decide what to resume from for cfg->resume ("auto", "none" or
 *  a directory).  Rank 0 looks and reports skipped (corrupt) checkpoints on
 *  stderr; the answer is broadcast.
 *  @return STATE_OK with path set, STATE_FRESH for a fresh start, or
 *  STATE_EFAIL (checkpoints exist but none is good, or a named one is bad). */
int state_resolve(const config_t *cfg, comm_t *comm, const char *root,
                  char *path, size_t cap, char *err, size_t errcap);

/** Collective load from dir into st (model/optim already created for the
 *  configured architecture).  *saved_world gets the checkpoint's world size.
 *  @return STATE_OK, STATE_EMISMATCH (message names the difference) or
 *  STATE_EFAIL; the same on every rank. */
int state_load(state_t *st, comm_t *comm, const char *dir, int *saved_world,
               char *err, size_t cap);
/** state_load with a plan: saved shard s (of nholder) is read by rank
 *  holder[s] from dir, which may differ from rank to rank (each node's own
 *  copy of a node-local step directory holding only some shards), and
 *  broadcast from there.  @return as state_load. */
int state_load_planned(state_t *st, comm_t *comm, const char *dir, const int *holder,
                       int nholder, int *saved_world, char *err, size_t cap);

#endif
