/*
 * commit.h - the steps of a save that the node-local tier (local.c) shares
 * with the shared tier's commit (commit.c, where they are defined and where
 * the commit protocol they serve is written down): making the root and the
 * temp directory, checking a shard description against its slice, clearing
 * strays out of a temp directory, writing the manifest, pointing LATEST.
 * Depends on util.h and manifest.h.
 */
#ifndef FTRAIN_CKPT_COMMIT_H
#define FTRAIN_CKPT_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"
#include "manifest.h"

/* Is there a root/step-<N> entry (committed, or anything by that name)?
 * @return 1 or 0. */
int ckpt_step_exists(const char *root, uint64_t step);

/* mkdir path, or accept the directory that is there; anything else with
 * that name (a symbolic link in particular) is removed, never followed.
 * @return CKPT_OK or CKPT_EIO. */
int ckpt_make_real_dir(const char *path);

/* Create root when it is missing (one level), fsyncing its parent when
 * do_fsync.  @return CKPT_OK or CKPT_EIO. */
int ckpt_make_root(const char *root, int do_fsync);

/* Check shard `index`'s description against its slice of a flat space of
 * total bytes written by world ranks (I4 of commit.c).  @return CKPT_OK or
 * CKPT_EINVAL, naming the rank. */
int ckpt_check_slice(const ckpt_shard_info_t *info, int index, int world,
                     uint64_t total);

/* Remove everything in tmpdir that is not a regular file named as one of
 * the world's shards.  Best effort. */
void ckpt_remove_strays(const char *tmpdir, int world);

/* Write manifest.json into dir (temp name, fsync when do_fsync, rename,
 * fsync dir) from a manifest held in memory.  @return CKPT_OK,
 * CKPT_EINVAL (record not an object), CKPT_ENOMEM or CKPT_EIO. */
int ckpt_manifest_store(const char *dir, const ckpt_manifest_t *manifest,
                        int do_fsync);

/* Write the manifest of a save of step (created now) into tmpdir, durable
 * before the commit point.  @return as ckpt_manifest_store. */
int ckpt_write_manifest(const char *tmpdir, uint64_t step,
                        const ckpt_tensor_t *tensors, size_t ntensors,
                        uint64_t total, const char *record_json,
                        const ckpt_opts_t *opts, const ckpt_shard_info_t *infos,
                        int world);

/* Point root/LATEST at name (the step directory of step), after a commit
 * point; never back to an older step that exists.  Failing to write it is
 * not an error (LATEST is a hint). */
void ckpt_update_latest(const char *root, const char *name, uint64_t step,
                        int do_fsync);

#endif
