/*
 * local.h - what the node store (local.c) and the flush (flush.c) of the
 * node-local tier share: a node-local step directory opened once, with its
 * manifest read as untrusted input, and whether it holds a shard.  Internal
 * to the library (hidden in the shared library, never installed).
 */
#ifndef FTRAIN_CKPT_LOCAL_INTERNAL_H
#define FTRAIN_CKPT_LOCAL_INTERNAL_H

#include <stdint.h>

#include "ftrain/ckpt.h"
#include "manifest.h"

/* One step directory of a node-local root: its descriptor (every file is
 * opened relative to it, I10) and its manifest, validated. */
typedef struct {
    char path[CKPT_PATH_MAX];
    int dirfd;
    ckpt_manifest_t manifest;
} ckpt_local_dir_t;

/* Open the step directory path and read its manifest as untrusted input,
 * as ckpt_open does: a canonical step-<N> is never followed when it is a
 * link, and must hold step N.  Close dir with ckpt_local_dir_close, also on
 * failure.
 * @return CKPT_OK, CKPT_ENOTFOUND, CKPT_EINCOMPLETE (no manifest),
 *         CKPT_EFORMAT, CKPT_ECORRUPT, CKPT_EVERSION, CKPT_EINVAL,
 *         CKPT_ENOMEM or CKPT_EIO. */
int ckpt_local_dir_open(ckpt_local_dir_t *dir, const char *path);

/* Close what ckpt_local_dir_open opened (dirfd -1 afterwards); accepts a
 * directory that failed to open. */
void ckpt_local_dir_close(ckpt_local_dir_t *dir);

/* Is shard index held in the directory dirfd: a regular file (not
 * followed) of the size info gives?  The file is not read: this is scan's
 * and a flush's notion of "holds".  @return 1 or 0. */
int ckpt_local_shard_held(int dirfd, int index, const ckpt_shard_info_t *info);

#endif
