/*
 * commit.c - saving a checkpoint: phase one (each rank writes its shard
 * into the step's temp directory), phase two (the ranks agree; rank 0
 * writes the manifest and commits with one rename), then LATEST.  The
 * steps that the node-local tier (local.c) shares with it are declared in
 * commit.h.
 *
 * COMMIT PROTOCOL
 *
 * Names under a root:  step-<N>/ (committed), .tmp-step-<N>/ (a save in
 * progress or a crashed one), LATEST (a hint), LATEST.tmp.  <N> is the step,
 * zero-padded to 8 digits (ckpt_step_dirname).
 *
 * INVARIANTS (I2 and I10, of reading, are kept by read.c and stated at its
 * top; I7 and I9, of managing a root, by root.c)
 *   I1. A directory named step-<N>/ appears only by rename(2) of a complete
 *       .tmp-step-<N>/ whose shards and manifest.json are already fsync'd.
 *       THE COMMIT POINT is that directory rename (made durable by the fsync of
 *       the root that follows it).  The earlier rename of manifest.json.tmp to
 *       manifest.json inside the temp dir commits nothing: readers never look
 *       inside .tmp-* directories.
 *   I3. A committed checkpoint is never modified.  Saving a step that is
 *       already committed fails with CKPT_EEXIST before anything is written.
 *   I4. Rank i of W writes only .tmp-step-<N>/shard-<i>.ftsh, holding the flat
 *       bytes [floor(i*T/W), floor((i+1)*T/W)).  Only rank 0 writes the
 *       manifest, renames directories and writes LATEST.
 *   I5. Every rank returns the same success or failure from ckpt_commit: the
 *       phase-one results are allgathered and rank 0's decision is broadcast.
 *   I6. LATEST is written after the commit point and is only a hint: readers
 *       (ckpt_latest_good) walk the step-<N>/ directories and verify.
 *   I8. Nothing under the root is followed: temp dirs, shards and LATEST.tmp
 *       are created afresh (a link or FIFO with the name is removed, never
 *       written through), removal never descends through a link, files
 *       are opened O_NOFOLLOW | O_NONBLOCK and must be regular files, and a
 *       step-<N> that is a link is listed as corrupt, never resumed from.
 *
 * STATE DIAGRAM (one step N; commit_state_t names rank 0's states)
 *
 *   (none) --ckpt_shard_write: mkdir .tmp-step-N, write+fsync shard, fsync dir-->
 *   [SHARDS WRITTEN]
 *      --ckpt_commit: allgather {rc, info}; any rc != 0 --> [ABORTED]
 *                     (rank 0 removes .tmp-step-N; all ranks fail, EPEER)
 *      --ckpt_commit (rank 0): write+fsync manifest.json.tmp, rename to
 *                     manifest.json, fsync .tmp-step-N -->
 *   [MANIFEST WRITTEN, still invisible]
 *      --ckpt_commit (rank 0): rename .tmp-step-N -> step-N, fsync root -->
 *   [COMMITTED]   (the commit point)
 *      --ckpt_commit (rank 0): write+fsync LATEST.tmp, rename to LATEST,
 *                     fsync root; bcast result -->
 *   [COMMITTED, LATEST updated]
 *      --ckpt_prune: rename step-N -> .tmp-step-N, fsync root, delete --> (none)
 *
 *   A crash in any state before COMMITTED leaves only .tmp-step-N, which
 *   readers ignore and ckpt_prune removes once a newer step is committed.
 */
#include "ftrain/ckpt.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commit.h"
#include "layout.h"
#include "lock.h"
#include "manifest.h"
#include "shard.h"
#include "util.h"

/* ---- save, phase one -------------------------------------------------- */

/* The longest a save waits for a prune of its own step (lock_step). */
#define SAVE_LOCK_WAIT_S 60

/* Is there a step-<N> entry (committed, or anything by that name)? */
int ckpt_step_exists(const char *root, uint64_t step)
{
    char name[CKPT_FILE_NAME_MAX], path[CKPT_PATH_MAX];
    struct stat st;
    ckpt_step_dirname(step, name, sizeof name);
    if (ckpt_path_join(path, sizeof path, root, name) != CKPT_OK)
        return 0;
    return lstat(path, &st) == 0;
}

/* mkdir path, or accept the directory that is there (a crashed attempt at
 * the same step, or another rank's mkdir).  Anything else with that name, a
 * symbolic link in particular, is removed rather than followed (I8): writing
 * through it would put shards, and later deletions, outside the root. */
int ckpt_make_real_dir(const char *path)
{
    struct stat st;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (mkdir(path, 0755) == 0)
            return CKPT_OK;
        if (errno != EEXIST || lstat(path, &st) != 0)
            goto fail;
        if (S_ISDIR(st.st_mode))
            return CKPT_OK;
        if (unlink(path) != 0 && errno != ENOENT)
            goto fail;
    }
    errno = EEXIST; /* something else keeps taking the name */
fail:
    return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", path, strerror(errno));
}

/* Create root when it is missing.  A new root's own name must be durable
 * too, or a crash could take it, and the checkpoints committed in it, away. */
int ckpt_make_root(const char *root, int do_fsync)
{
    char parent[CKPT_PATH_MAX];
    if (mkdir(root, 0755) != 0) {
        if (errno == EEXIST)
            return CKPT_OK;
        return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", root, strerror(errno));
    }
    ckpt_parent_dir(root, parent, sizeof parent);
    return do_fsync ? ckpt_fsync_dir(parent) : CKPT_OK;
}

/* The arguments of ckpt_shard_write; *total gets the flat space's size. */
static int check_shard_write(const char *root, uint64_t step, int rank, int world,
                             const ckpt_tensor_t *tensors, size_t ntensors,
                             const ckpt_opts_t *opts, const ckpt_shard_info_t *info,
                             uint64_t *total)
{
    int rc;
    if (!root || !info || world < 1 || world > CKPT_MAX_SHARDS || rank < 0 ||
        rank >= world)
        return ckpt_seterr(CKPT_EINVAL, "shard_write: bad root, info, rank %d "
                           "or world %d", rank, world);
    if (step > INT64_MAX)
        return ckpt_seterr(CKPT_EINVAL, "step %llu is too large",
                           (unsigned long long)step);
    if ((rc = ckpt_check_opts(opts)) != CKPT_OK ||
        (rc = ckpt_check_layout(tensors, ntensors, total)) != CKPT_OK)
        return rc;
    for (size_t i = 0; i < ntensors; i++)
        if (!tensors[i].data && tensors[i].nbytes > 0)
            return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\" has no data",
                               tensors[i].name);
    return CKPT_OK;
}

/* Tell a prune that this rank is saving step under root (lock.h): the lock
 * is kept until ckpt_commit of the same step and rank has its outcome.
 * Where a prune of the step holds it for longer than SAVE_LOCK_WAIT_S, the
 * save fails rather than write into a directory being removed. */
static int lock_step(const char *root, uint64_t step, int rank)
{
    int fd;
    switch (ckpt_lock_save(root, step, SAVE_LOCK_WAIT_S, &fd)) {
    case CKPT_LOCK_HELD:
        ckpt_lock_keep(root, step, rank, fd);
        return CKPT_OK;
    case CKPT_LOCK_BUSY:
        return ckpt_seterr(CKPT_EIO, "%s: step %llu is being pruned by another process "
                           "(its lock in %s was held for %d s)", root,
                           (unsigned long long)step, CKPT_LOCK_NAME, SAVE_LOCK_WAIT_S);
    default:
        return CKPT_OK; /* no locks here: a prune goes by the steps alone */
    }
}

int ckpt_shard_write(const char *root, uint64_t step, int rank, int world,
                     const ckpt_tensor_t *tensors, size_t ntensors,
                     const ckpt_opts_t *opts, ckpt_shard_info_t *info)
{
    int rc;
    ckpt_opts_t defaults;
    uint64_t total = 0, lo, hi;
    char name[CKPT_FILE_NAME_MAX], tmpdir[CKPT_PATH_MAX], path[CKPT_PATH_MAX];

    if (!opts) {
        ckpt_opts_default(&defaults);
        opts = &defaults;
    }
    rc = check_shard_write(root, step, rank, world, tensors, ntensors, opts, info, &total);
    if (rc != CKPT_OK)
        return rc;
    if (ckpt_step_exists(root, step)) { /* I3 */
        ckpt_step_dirname(step, name, sizeof name);
        return ckpt_seterr(CKPT_EEXIST, "%s/%s already exists", root, name);
    }
    if ((rc = ckpt_make_root(root, opts->fsync)) != CKPT_OK ||
        (rc = lock_step(root, step, rank)) != CKPT_OK)
        return rc;
    ckpt_tmp_dirname(step, name, sizeof name);
    if ((rc = ckpt_path_join(tmpdir, sizeof tmpdir, root, name)) != CKPT_OK ||
        (rc = ckpt_make_real_dir(tmpdir)) != CKPT_OK)
        return rc;
    ckpt_shard_name(rank, name, sizeof name);
    if ((rc = ckpt_path_join(path, sizeof path, tmpdir, name)) != CKPT_OK)
        return rc;
    lo = ckpt_slice_start(rank, world, total); /* I4 */
    hi = ckpt_slice_start(rank + 1, world, total);
    assert(lo <= hi && hi <= total);
    rc = ckpt_shard_encode(path, lo, hi, tensors, ntensors, opts, info);
    if (rc != CKPT_OK)
        return rc;
    if (opts->fsync && ((rc = ckpt_fsync_dir(tmpdir)) != CKPT_OK ||
                        (rc = ckpt_fsync_dir(root)) != CKPT_OK))
        unlink(path);
    return rc;
}

/* ---- save, phase two -------------------------------------------------- */

/* What each rank contributes to the allgather. */
typedef struct {
    int32_t rc;
    uint32_t pad;
    ckpt_shard_info_t info;
} gather_msg_t;

/* The allgather's buffers when calloc fails (ckpt_commit); untouched, and so
 * not resident, until then.  A lock is held across the commit's collectives,
 * so each commit in flight needs its own: up to GATHER_SPARES ranks of one
 * process (threads sharing a collective) can be out of memory in one commit
 * at once; a further one waits for a spare, which can deadlock only if all
 * of them belong to the same collective. */
#define GATHER_SPARES 4
static gather_msg_t gather_spare[GATHER_SPARES][CKPT_MAX_SHARDS];
static pthread_mutex_t gather_spare_lock[GATHER_SPARES] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER};

/* Take a free spare; its index.  Blocks only when all are taken. */
static int gather_spare_take(void)
{
    for (int i = 0; i < GATHER_SPARES; i++)
        if (pthread_mutex_trylock(&gather_spare_lock[i]) == 0)
            return i;
    pthread_mutex_lock(&gather_spare_lock[0]);
    return 0;
}

/* Where rank 0's commit of one step is (the state diagram above). */
typedef enum {
    ST_SHARDS_WRITTEN,
    ST_MANIFEST_WRITTEN,
    ST_COMMITTED,
    ST_LATEST_UPDATED
} commit_state_t;

/* Remove everything in tmpdir that is not one of the world's shards, so a
 * crashed earlier attempt at the same step leaves nothing behind (a shard
 * name that is not a regular file goes too).  Best effort. */
void ckpt_remove_strays(const char *tmpdir, int world)
{
    int fd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), index;
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *entry;
    struct stat st;
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        if (ckpt_parse_shard_name(entry->d_name, &index) && index < world &&
            fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
            continue;
        (void)ckpt_remove_tree(dirfd(dir), entry->d_name, entry->d_name);
    }
    closedir(dir);
}

/* Check shard index's description against its slice (I4). */
int ckpt_check_slice(const ckpt_shard_info_t *info, int index, int world,
                     uint64_t total)
{
    uint64_t lo = ckpt_slice_start(index, world, total),
             hi = ckpt_slice_start(index + 1, world, total);
    if (info->raw_offset != lo || info->raw_bytes != hi - lo)
        return ckpt_seterr(CKPT_EINVAL, "rank %d wrote bytes [%llu, +%llu), "
                           "not its slice of %llu bytes over %d ranks", index,
                           (unsigned long long)info->raw_offset,
                           (unsigned long long)info->raw_bytes,
                           (unsigned long long)total, world);
    return CKPT_OK;
}

/* Check every rank's shard description against its slice (I4) and its
 * file in tmpdir; copy them to infos. */
static int check_shards(const char *tmpdir, const gather_msg_t *all, int world,
                        uint64_t total, ckpt_shard_info_t *infos)
{
    char name[CKPT_FILE_NAME_MAX], path[CKPT_PATH_MAX];
    struct stat st;
    int rc;
    for (int i = 0; i < world; i++) {
        infos[i] = all[i].info;
        if ((rc = ckpt_check_slice(&infos[i], i, world, total)) != CKPT_OK)
            return rc;
        ckpt_shard_name(i, name, sizeof name);
        if ((rc = ckpt_path_join(path, sizeof path, tmpdir, name)) != CKPT_OK)
            return rc;
        if (stat(path, &st) != 0 || (uint64_t)st.st_size != infos[i].file_bytes)
            return ckpt_seterr(CKPT_EINCOMPLETE, "%s: missing or of the wrong "
                               "size", path);
    }
    return CKPT_OK;
}

/* Write manifest.json into dir: temp name, fsync, rename, fsync dir. */
int ckpt_manifest_store(const char *dir, const ckpt_manifest_t *manifest,
                        int do_fsync)
{
    char *text = NULL;
    int rc;

    if ((rc = ckpt_manifest_dump(manifest, &text)) != CKPT_OK)
        return rc;
    rc = ckpt_write_file_atomic(dir, CKPT_MANIFEST_NAME, CKPT_MANIFEST_TMP,
                                text, strlen(text), do_fsync);
    free(text);
    return rc;
}

/* Write manifest.json into tmpdir, durable before the commit point (I1). */
int ckpt_write_manifest(const char *tmpdir, uint64_t step,
                        const ckpt_tensor_t *tensors, size_t ntensors, uint64_t total,
                        const char *record_json, const ckpt_opts_t *opts,
                        const ckpt_shard_info_t *infos, int world)
{
    ckpt_manifest_t manifest;

    memset(&manifest, 0, sizeof manifest);
    manifest.version = CKPT_FORMAT_VERSION;
    manifest.step = step;
    manifest.created = (int64_t)time(NULL);
    manifest.total_bytes = total;
    manifest.ntensors = ntensors;
    manifest.tensors = (ckpt_tensor_t *)tensors; /* only read */
    manifest.nshards = world;
    manifest.shards = (ckpt_shard_info_t *)infos; /* only read */
    manifest.opts = *opts;
    manifest.record = (char *)record_json;       /* only read */
    return ckpt_manifest_store(tmpdir, &manifest, opts->fsync);
}

/* Point LATEST at name, after the commit point (I6).  It never moves back
 * to an older step that exists (an asynchronous save may commit after a
 * newer one), and failing to write it does not undo the commit. */
void ckpt_update_latest(const char *root, const char *name, uint64_t step,
                        int do_fsync)
{
    char latest[CKPT_FILE_NAME_MAX + 1]; /* the name and a newline */
    uint64_t latest_step;
    if (ckpt_latest_read(root, latest, sizeof latest, &latest_step) &&
        latest_step > step && ckpt_step_exists(root, latest_step))
        return;
    snprintf(latest, sizeof latest, "%s\n", name);
    (void)ckpt_write_file_atomic(root, CKPT_LATEST_NAME, CKPT_LATEST_TMP, latest,
                                 strlen(latest), do_fsync);
}

/* Rank 0's part of the commit, once every rank's shard is written. */
static int commit_rank0(const char *root, uint64_t step,
                        const ckpt_tensor_t *tensors, size_t ntensors, uint64_t total,
                        const char *record_json, const ckpt_opts_t *opts,
                        const gather_msg_t *all, int world)
{
    int rc;
    commit_state_t state = ST_SHARDS_WRITTEN;
    char name[CKPT_FILE_NAME_MAX], tmp_name[CKPT_FILE_NAME_MAX],
         tmpdir[CKPT_PATH_MAX], final[CKPT_PATH_MAX];
    ckpt_shard_info_t *infos = NULL;
    struct stat st;

    ckpt_step_dirname(step, name, sizeof name);
    ckpt_tmp_dirname(step, tmp_name, sizeof tmp_name);
    if ((rc = ckpt_path_join(tmpdir, sizeof tmpdir, root, tmp_name)) ||
        (rc = ckpt_path_join(final, sizeof final, root, name)))
        return rc;
    if (lstat(final, &st) == 0) {
        /* It appeared after phase one (an import, another job): this
         * save's temp dir is removed like any failed commit's. */
        rc = ckpt_seterr(CKPT_EEXIST, "%s already exists", final);
        goto abort;
    }
    infos = calloc((size_t)world, sizeof *infos);
    if (!infos) {
        rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
        goto abort;
    }
    if ((rc = check_shards(tmpdir, all, world, total, infos)) != CKPT_OK)
        goto abort;
    ckpt_remove_strays(tmpdir, world);
    rc = ckpt_write_manifest(tmpdir, step, tensors, ntensors, total, record_json, opts,
                             infos, world);
    if (rc != CKPT_OK)
        goto abort;
    state = ST_MANIFEST_WRITTEN;

    /* The commit point (I1): the directory becomes visible under its final
     * name.  RENAME_NOREPLACE keeps a step-<N> that appeared meanwhile (I3). */
    assert(state == ST_MANIFEST_WRITTEN);
    if ((rc = ckpt_rename_noreplace_at(AT_FDCWD, tmpdir, AT_FDCWD, final)) != CKPT_OK)
        goto abort;
    state = ST_COMMITTED;
    if (opts->fsync && ckpt_fsync_dir(root) != CKPT_OK) {
        /* Renamed but perhaps not durable: report it, never undo it (I3). */
        rc = ckpt_seterr(CKPT_EIO, "%s: fsync directory after commit: %s",
                         root, strerror(errno));
        goto out;
    }
    ckpt_update_latest(root, name, step, opts->fsync);
    state = ST_LATEST_UPDATED;
    goto out;
abort:
    /* Not committed: the temp dir is garbage now that all ranks are past
     * phase one. */
    assert(state < ST_COMMITTED && rc != CKPT_OK);
    if (rc != CKPT_EEXIST || lstat(final, &st) == 0)
        (void)ckpt_remove_tree(AT_FDCWD, tmpdir, tmpdir);
out:
    free(infos);
    return rc;
}

/* This rank's vote: its phase-one result, then what it can check of the
 * commit's arguments; rank 0 also checks the record, where it is used,
 * before anything is written.  *total gets the flat space's size. */
static int local_vote(int local_rc, const char *root, const ckpt_shard_info_t *info,
                      const ckpt_tensor_t *tensors, size_t ntensors,
                      const char *record_json, const ckpt_opts_t *opts, int rank,
                      uint64_t *total)
{
    int rc = local_rc;
    if (rc == CKPT_OK && (!root || !info))
        rc = ckpt_seterr(CKPT_EINVAL, "commit: root or info is NULL");
    if (rc == CKPT_OK)
        rc = ckpt_check_opts(opts);
    if (rc == CKPT_OK)
        rc = ckpt_check_layout(tensors, ntensors, total);
    if (rc == CKPT_OK && rank == 0) {
        ckpt_manifest_t probe;
        char *text = NULL;
        memset(&probe, 0, sizeof probe);
        probe.record = (char *)record_json; /* only read */
        rc = ckpt_manifest_dump(&probe, &text);
        free(text);
    }
    return rc;
}

/* Rank 0's decision from every rank's vote. */
static int decide(const char *root, uint64_t step, const ckpt_tensor_t *tensors,
                  size_t ntensors, uint64_t total, const char *record_json,
                  const ckpt_opts_t *opts, const gather_msg_t *all, int world)
{
    char name[CKPT_FILE_NAME_MAX], tmpdir[CKPT_PATH_MAX];
    int bad = -1;
    for (int i = 0; i < world && bad < 0; i++)
        if (all[i].rc != CKPT_OK)
            bad = i;
    if (bad < 0)
        return commit_rank0(root, step, tensors, ntensors, total, record_json, opts,
                            all, world);
    if (bad > 0)
        ckpt_seterr(CKPT_EPEER, "rank %d failed to write its shard of step %llu "
                    "(%s); nothing committed", bad, (unsigned long long)step,
                    ckpt_strerror(all[bad].rc));
    /* Every rank is past phase one: the temp dir is garbage. */
    ckpt_tmp_dirname(step, name, sizeof name);
    if (root && ckpt_path_join(tmpdir, sizeof tmpdir, root, name) == CKPT_OK)
        (void)ckpt_remove_tree(AT_FDCWD, tmpdir, tmpdir);
    return CKPT_EPEER;
}

/* What this rank returns, given its own vote and rank 0's decision (I5). */
static int outcome(int own_rc, int decision, int rank, uint64_t step)
{
    if (own_rc != CKPT_OK)
        return own_rc; /* its message is already set */
    if (decision == CKPT_EPEER && rank != 0)
        return ckpt_seterr(CKPT_EPEER, "another rank failed; step %llu was not "
                           "committed", (unsigned long long)step);
    if (decision != CKPT_OK && rank != 0)
        return ckpt_seterr(decision, "rank 0 failed to commit step %llu: %s",
                           (unsigned long long)step, ckpt_strerror(decision));
    return decision;
}

int ckpt_commit(const char *root, uint64_t step, const ckpt_tensor_t *tensors,
                size_t ntensors, const char *record_json, const ckpt_opts_t *opts,
                int local_rc, const ckpt_shard_info_t *info,
                const ckpt_coll_t *coll)
{
    int rc, rank = coll ? coll->rank : 0, world = coll ? coll->size : 1, spare = -1;
    int32_t decision = CKPT_OK;
    gather_msg_t vote, *all;
    ckpt_opts_t defaults;
    uint64_t total = 0;

    if (world < 1 || world > CKPT_MAX_SHARDS || rank < 0 || rank >= world ||
        (coll && (!coll->allgather || !coll->bcast))) {
        ckpt_lock_drop(root, step, rank);
        return ckpt_seterr(CKPT_EINVAL, "commit: bad collective (rank %d of "
                           "%d)", rank, world);
    }
    if (!opts) {
        ckpt_opts_default(&defaults);
        opts = &defaults;
    }
    memset(&vote, 0, sizeof vote);
    vote.rc = local_vote(local_rc, root, info, tensors, ntensors, record_json, opts, rank,
                         &total);
    if (vote.rc == CKPT_OK)
        vote.info = *info;
    /* Every rank must reach the allgather, or the others wait for ever:
     * without memory for it, take a spare buffer and vote failure. */
    all = calloc((size_t)world, sizeof *all);
    if (!all) {
        spare = gather_spare_take();
        all = gather_spare[spare];
        if (vote.rc == CKPT_OK)
            vote.rc = ckpt_seterr(CKPT_ENOMEM, "commit of step %llu: out of memory "
                                  "for %d ranks' shard descriptions",
                                  (unsigned long long)step, world);
    }
    if (!coll) {
        all[0] = vote;
    } else if (coll->allgather(coll->ctx, &vote, all, sizeof vote) != 0) {
        rc = ckpt_seterr(CKPT_EPEER, "commit of step %llu: allgather failed",
                         (unsigned long long)step);
        goto out;
    }
    if (rank == 0)
        decision = decide(root, step, tensors, ntensors, total, record_json, opts, all,
                          world);
    if (coll && coll->bcast(coll->ctx, &decision, sizeof decision, 0) != 0) {
        rc = ckpt_seterr(CKPT_EPEER, "commit of step %llu: bcast failed",
                         (unsigned long long)step);
        goto out;
    }
    rc = outcome(vote.rc, decision, rank, step);
    assert(rc != CKPT_OK || decision == CKPT_OK); /* I5 */
out:
    if (spare >= 0)
        pthread_mutex_unlock(&gather_spare_lock[spare]);
    else
        free(all);
    ckpt_lock_drop(root, step, rank); /* the outcome is known: a prune may look */
    return rc;
}

int ckpt_save(const char *root, uint64_t step, ckpt_tensor_t *tensors,
              size_t ntensors, const char *record_json, const ckpt_opts_t *opts,
              const ckpt_coll_t *coll)
{
    int rank = coll ? coll->rank : 0, world = coll ? coll->size : 1, rc;
    uint64_t total;
    ckpt_shard_info_t info;

    /* ckpt_commit's check, before a byte is written: a shard written for a
     * collective that cannot commit would be left in a temp dir. */
    if (world < 1 || world > CKPT_MAX_SHARDS || rank < 0 || rank >= world ||
        (coll && (!coll->allgather || !coll->bcast)))
        return ckpt_seterr(CKPT_EINVAL, "save: bad collective (rank %d of %d)", rank, world);
    memset(&info, 0, sizeof info);
    rc = ckpt_layout(tensors, ntensors, &total);
    if (rc == CKPT_OK)
        rc = ckpt_shard_write(root, step, rank, world, tensors, ntensors, opts, &info);
    return ckpt_commit(root, step, tensors, ntensors, record_json, opts, rc, &info,
                       coll);
}
