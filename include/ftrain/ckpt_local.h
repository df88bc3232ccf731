/*
 * ckpt_local.h - the node-local checkpoint tier (docs/checkpoint-format.md,
 * "The node-local tier"): a store on each node, and the flush from the
 * nodes' stores into the shared tier.
 *
 * A node-local root has the layout of any checkpoint root, and the same
 * manifest and shard formats, but a committed step directory holds only the
 * shards that this node keeps: those its own ranks wrote and the partner
 * copies it received from ranks on another node.  Its manifest is the whole
 * checkpoint's (every shard's size and checksum), so each shard present can
 * be checked alone, and the union of the nodes' directories is a complete
 * checkpoint.  The commit point per node is the rename of
 * .tmp-step-<N> to step-<N>, made only after every rank's own shard and
 * partner copy is written and checked (the trainer's vote): a half-written
 * local checkpoint is never visible.  A node-local root has no LATEST file;
 * readers use ckpt_local_scan().
 *
 * HowTo, the node store (one save, on every node; ckpt/local.c):
 *   1. each rank: ckpt_shard_write(local_root, step, rank, world, ...) as for
 *      the shared tier (same shard, same info);
 *   2. the rank that keeps rank r's partner copy: ckpt_shard_put(local_root,
 *      step, r, bytes, len, info_of_r.xxh64);
 *   3. all: agree that 1 and 2 succeeded everywhere; then one rank per node:
 *      ckpt_local_seal(local_root, step, ..., infos of all shards, world).
 * Restore: ckpt_local_scan() on each node, pick a step whose shards the
 * nodes hold between them, then ckpt_open() the step directory (shards open
 * lazily) and ckpt_read_range() the ranges of the shards present;
 * ckpt_local_verify() reads a node's step whole.  After a resume from step
 * S (from either tier), one rank per node calls
 * ckpt_local_drop_after(local_root, S) before the first save: a step-<N>
 * with N > S left from before the failure would make that save's
 * ckpt_shard_write fail with CKPT_EEXIST (it refuses to write a step that
 * is committed), and its temp dir could hold leftovers of a crashed save.
 *
 * HowTo, in place (steps 1 and 2 without a buffer: stored shards in mapped
 * files on a memory file system; also ckpt/local.c):
 *   1. own shard: put the slice at CKPT_STORED_DATA_OFFSET of a file of
 *      ckpt_stored_shard_bytes() bytes, ckpt_stored_shard_finish(), fsync,
 *      ckpt_shard_adopt();
 *   2. partner copy: receive it into such a file, ckpt_shard_check() (or
 *      ckpt_shard_check_sum() over bytes hashed as they arrived), fsync,
 *      ckpt_shard_adopt();
 *   then step 3 as above.  A file can be taken back out of a step about to
 *   be pruned (ckpt_local_reclaim) and reused for a later save.
 *
 * HowTo, the flush (ckpt/flush.c): ckpt_local_flush() copies one sealed
 * step from the step directories of several node-local roots (paths this
 * process can read) into the shared tier, as a complete checkpoint that any
 * reader opens; it writes nothing there unless every shard is held by some
 * root.
 */
#ifndef FTRAIN_CKPT_LOCAL_H
#define FTRAIN_CKPT_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Write a shard file received from another rank (a partner copy) as
 * <root>/.tmp-step-<step>/shard-<index>.ftsh: under a temporary name, fsync,
 * renamed into place, the directory fsync'd.  The root and temp directory
 * are created when missing (the root one level: its parent must exist).
 * The bytes' XXH64 must be xxh64 (the writer's ckpt_shard_info_t.xxh64),
 * and len at least a shard file's header and footer, else nothing is left
 * and CKPT_ECORRUPT.  A step-<step> already in root is no obstacle (seal
 * replaces it).
 * @return CKPT_OK, CKPT_ECORRUPT, CKPT_EINVAL (index out of range, NULL,
 *         step above INT64_MAX), CKPT_EIO (a full disk included: the
 *         partial file is removed).
 */
CKPT_API int ckpt_shard_put(const char *root, uint64_t step, int index, const void *data,
                            uint64_t len, uint64_t xxh64);

/**
 * A stored shard built in place (the trainer's local save on tmpfs: the
 * shard's bytes are copied straight into a mapped file, no second copy).
 * A stored shard file is a 16-byte header, the slice's raw bytes, the seek
 * table and the footer (docs/checkpoint-format.md, section 4), so the
 * caller can put the raw bytes at CKPT_STORED_DATA_OFFSET of a buffer of
 * ckpt_stored_shard_bytes() bytes and have ckpt_stored_shard_finish() write
 * the rest around them.
 */
#define CKPT_STORED_DATA_OFFSET 16u

/** The size of a shard file that holds raw_bytes in stored frames of
 *  frame_bytes raw bytes each (ckpt_opts_t.frame_bytes): what
 *  ckpt_shard_write writes at level 0.  @return 0 when frame_bytes is not in
 *  1..256 MiB or the frames would be too many. */
CKPT_API uint64_t ckpt_stored_shard_bytes(uint64_t raw_bytes, size_t frame_bytes);

/**
 * Complete a stored shard file in memory: file holds file_bytes bytes
 * (ckpt_stored_shard_bytes(hi - lo, frame_bytes)), whose hi - lo bytes at
 * CKPT_STORED_DATA_OFFSET are already the slice [lo, hi) of the flat space
 * (alignment gaps zero).  Writes the header, the seek table and the footer
 * around them and fills *info; the file's bytes are then exactly what
 * ckpt_shard_write writes at level 0 with frames of frame_bytes.  Reads the
 * slice once per frame for both checksums.  Pure: no I/O.
 * @return CKPT_OK or CKPT_EINVAL (NULL, a reversed slice, a wrong size).
 */
CKPT_API int ckpt_stored_shard_finish(void *file, uint64_t file_bytes, uint64_t lo,
                                      uint64_t hi, size_t frame_bytes,
                                      ckpt_shard_info_t *info);

/**
 * Check shard file bytes received from another rank (a partner copy of
 * shard `index` of `step`), as ckpt_shard_put does before it writes: their
 * XXH64 must be xxh64 (the writer's ckpt_shard_info_t.xxh64) and len at
 * least a shard file's header and footer.
 * @return CKPT_OK, CKPT_ECORRUPT or CKPT_EINVAL (NULL, len beyond memory).
 */
CKPT_API int ckpt_shard_check(const void *data, uint64_t len, uint64_t xxh64, uint64_t step,
                              int index);

/**
 * ckpt_shard_check for bytes the caller hashed itself, as they arrived:
 * sum is XXH64 (seed 0) of all len bytes.  The same checks and messages.
 * @return CKPT_OK, CKPT_ECORRUPT or CKPT_EINVAL (index out of range).
 */
CKPT_API int ckpt_shard_check_sum(uint64_t len, uint64_t sum, uint64_t xxh64, uint64_t step,
                                  int index);

/**
 * Put a shard file that is complete and durable at path (on root's file
 * system; the caller fsync'd it) into the save of `step`: renamed to
 * <root>/.tmp-step-<step>/shard-<index>.ftsh, replacing a file of that
 * name; the temp directory is created when missing (and the root, one
 * level); the temp directory and the root are fsync'd.  The file's bytes
 * are not read: check them first (ckpt_shard_check, or they are this
 * rank's own, from ckpt_stored_shard_finish).  A mapping of the file stays
 * valid.
 * @return CKPT_OK, CKPT_EINVAL (NULL, index out of range, step above
 *         INT64_MAX), CKPT_EIO (path missing or not a regular file:
 *         nothing is made; a failed rename: path is then unchanged).
 */
CKPT_API int ckpt_shard_adopt(const char *root, uint64_t step, int index, const char *path);

/**
 * Take shard-<index>.ftsh out of the committed step-<step> of a node-local
 * root, renamed to path (on the same file system), to reuse its file and
 * its memory for a later save.  Only for a step that is about to be pruned:
 * the step no longer holds that shard on this node (ckpt_local_scan says
 * so; a restore does not count on it).  The root is not fsync'd.
 * @return CKPT_OK, CKPT_ENOTFOUND (no such step or file: nothing moved),
 *         CKPT_EINVAL (NULL, index out of range), CKPT_EIO.
 */
CKPT_API int ckpt_local_reclaim(const char *root, uint64_t step, int index, const char *path);

/**
 * Seal a node's local checkpoint: check that every shard file present in
 * <root>/.tmp-step-<step> is one of the nshards in infos, of the size it
 * gives (others are removed), write manifest.json (the whole checkpoint's,
 * as ckpt_commit would), and rename the temp directory to step-<step>; a
 * step-<step> already there (a stale one from before a resume) is replaced.
 * Then keep only the newest `keep` committed steps of this root (>= 1),
 * never the one just sealed.
 * Not collective: call it on one rank per node once every rank agreed.
 * present: how many shard files the sealed directory holds (may be NULL).
 * Each file present must also be this checkpoint's: its header, footer and
 * seek table must match infos[i] (nframes, raw_bytes, table_xxh64), which
 * catches a leftover of another save of the same step at the cost of
 * reading a few KiB per file.  The infos must describe the slices of
 * ckpt_layout's flat space over nshards writers, as ckpt_commit checks.
 * Arguments are checked before anything is touched; any later failure
 * removes the temp directory (the node's save of this step failed; a retry
 * starts clean) and leaves committed steps as they were.
 * @return CKPT_OK, CKPT_EINCOMPLETE (no shard file at all), CKPT_ECORRUPT
 *         (a file of the wrong size, or another checkpoint's), CKPT_EINVAL
 *         (NULL root or infos, nshards, keep, a slice, the layout, the
 *         record, the options), CKPT_EIO.  A failure after the commit point
 *         (the root's fsync, pruning older steps) is returned with *present
 *         set: the step is sealed, perhaps not durably.
 */
CKPT_API int ckpt_local_seal(const char *root, uint64_t step, const ckpt_tensor_t *tensors,
                             size_t ntensors, const char *record_json,
                             const ckpt_opts_t *opts, const ckpt_shard_info_t *infos,
                             int nshards, int keep, int *present);

/* One committed step of a node-local root, as found (not re-verified). */
typedef struct {
    uint64_t step;
    int nshards;              /* the checkpoint's shards (its writer's world) */
    int npresent;             /* shard files this node holds */
    uint8_t *present;         /* nshards flags: 1 when shard-<i>.ftsh is here */
    uint64_t total_bytes;
    uint64_t present_bytes;   /* file bytes held here */
} ckpt_local_step_t;

/**
 * List the committed steps of a node-local root, newest first: each one's
 * manifest parsed and checked (as ckpt_open does), and which shard files it
 * holds (a file of the wrong size, or that is not a regular file, counts
 * as absent).  Temp directories, step directories without a valid
 * manifest and symbolic links are left out.  *out is malloc'd: free it
 * with ckpt_local_scan_free (which accepts NULL).
 * @return CKPT_OK (*count may be 0; a missing root is no step), CKPT_EIO,
 *         CKPT_ENOMEM, CKPT_EINVAL (a NULL argument).
 */
CKPT_API int ckpt_local_scan(const char *root, ckpt_local_step_t **out, size_t *count);
CKPT_API void ckpt_local_scan_free(ckpt_local_step_t *steps, size_t count);

/**
 * Verify the shards present in a node-local step directory against its
 * manifest (every byte, every checksum), and say which are missing.
 * *missing (may be NULL) gets the count of absent shards (no file of that
 * name; a file there that is truncated, replaced or a link is corrupt),
 * set whenever the manifest could be read.
 * @return CKPT_OK when every present shard verifies (missing ones are not an
 *         error here), or the first error (CKPT_ECORRUPT, CKPT_EFORMAT,
 *         CKPT_EINCOMPLETE (no manifest), CKPT_ENOTFOUND, CKPT_EINVAL...).
 */
CKPT_API int ckpt_local_verify(const char *stepdir, int *missing);

/**
 * Assemble one complete checkpoint of step `step` from the step directories
 * of several node-local roots (nroots of them) into `root` (the shared tier):
 * each shard is copied from the first root that holds it and verifies, the
 * manifest written, the whole verified, and committed by rename as any
 * checkpoint (LATEST updated).  The destination's path goes to out (may be
 * NULL).  A copy verifies when its bytes hash to the manifest's xxh64 (it
 * is hashed while copied); a bad one is dropped and the next root's taken.
 * The manifests of the roots holding the step must describe the same
 * checkpoint (all but their creation time and options); the result keeps
 * the earliest creation time.  Before anything is written, every shard
 * must be held (a regular file of its size) by one of the roots, and
 * <root>/step-<step> must not exist; the copy is staged in a temp dir
 * <root>/.flush-step-<N>-XXXXXX (only a crash leaves one behind; it is
 * safe to delete once no flush runs) and renamed into place, never over
 * an existing directory.  root is created when missing (one level).
 * @return CKPT_OK, CKPT_EINCOMPLETE (a shard none of them holds, named in
 *         the message; or no root holds the step), CKPT_EEXIST,
 *         CKPT_ECORRUPT (a shard with no good copy; manifests that
 *         disagree), CKPT_EINVAL (also out too small for the path, before
 *         anything is written), CKPT_ENOMEM, CKPT_EIO.
 */
CKPT_API int ckpt_local_flush(const char *const *local_roots, size_t nroots, uint64_t step,
                              const char *root, char *out, size_t cap);

/**
 * Remove from a node-local root every step newer than `step`: committed
 * step directories (each renamed to its temp name first, so a crash never
 * leaves a half-removed step-<N>) and temp directories of saves; a
 * step-<N> whose manifest is invalid, or that is a link, is moved aside to
 * step-<N>.corrupt (ckpt_set_aside_after), never deleted.  For a run that
 * resumed from `step`: its saves of later steps then start clean.  Not
 * collective: one rank per node.  *removed (may be NULL) gets the count of
 * directories removed or moved aside.
 * @return CKPT_OK (also for a missing root), CKPT_EINVAL, CKPT_ENOMEM,
 *         CKPT_EIO.
 */
CKPT_API int ckpt_local_drop_after(const char *root, uint64_t step, int *removed);

#ifdef __cplusplus
}
#endif
#endif
