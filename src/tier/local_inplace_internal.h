/*
 * local_inplace_internal.h - the files of the node-local tier's save in
 * place (local_inplace.c), for the save (local_save_internal.h) and
 * local_tier.c: on tmpfs, with stored shards, a rank's shard is copied
 * straight into a mapped file and its partner copies are received straight
 * into mapped files, and the files of a step that falls out of the tier's
 * retention are taken back for the next save, so no buffer besides the
 * tier's own files is needed.  Errors follow local_tier.h.
 */
#ifndef FTRAIN_LOCAL_INPLACE_INTERNAL_H
#define FTRAIN_LOCAL_INPLACE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "tier/local_tier.h"

/* The directory under a node's root that holds its ranks' spare files. */
#define TIER_SPARE_DIR ".spare"

/* One file: a spare (at path), or adopted into a save (its path is gone,
 * the mapping stays until unmapped). */
typedef struct {
    char path[CONFIG_PATH_MAX + 48];
    int fd;                  /* -1: not open */
    unsigned char *map;      /* NULL: not mapped */
    uint64_t len;            /* the mapping's bytes */
    int adopted;             /* renamed into a save: no longer at path */
} tier_file_t;

/* A file adopted into a save that was sealed, still mapped (read-only),
 * so that when its step falls out of the tier's retention and the file is
 * taken back, it needs no new mapping: mapping and unmapping a shard's
 * tmpfs pages costs CPU on every save (docs/bench-log.md, "The overhead by
 * run time"). */
typedef struct {
    int fd;                  /* -1: the entry is free */
    unsigned char *map;
    uint64_t len;
    int64_t step;            /* the save it was adopted into */
} tier_kept_t;

/* Mappings kept per file: the node's `keep` sealed steps and the one just
 * sealed before the oldest is taken back. */
#define TIER_KEPT_MAX 4

/* One rank's files: [0] its own shard, [1 + i] the i-th partner copy it
 * keeps; kept[k * TIER_KEPT_MAX + j] file k's mappings of sealed steps. */
typedef struct {
    char root[CONFIG_PATH_MAX];
    int nfiles;
    tier_file_t *files;
    tier_kept_t *kept;
} tier_files_t;

/** Is dir on a memory file system (tmpfs, ramfs), where a mapped file is
 *  memory?  @return 1 or 0 (0 also when it cannot be told). */
int tier_files_in_memory(const char *dir);

/** Remove root's spare directory and the files in it (a node's first rank,
 *  at the tier's open, before any rank of the node uses it); a file or a
 *  link of that name is removed itself, never followed.
 *  @return TIER_OK, or TIER_EFAIL with errno set. */
int tier_files_clear(const char *root);

/** Name rank's nfiles files under root's spare directory (created when
 *  missing).  Nothing is opened.  @return TIER_OK, or a TIER_E... code
 *  (err set). */
int tier_files_init(tier_files_t *f, const char *root, int rank, int nfiles, char *err,
                    size_t cap);

/** Have file k mapped, writable, with exactly len bytes, every page in
 *  memory: the spare at its path is reused (resized) or created (and the
 *  spare directory, and the root one level, when they went); one still
 *  mapped at len is left as it is.  Any thread.  @return TIER_OK, or
 *  TIER_EFAIL (err set; the file is then not mapped). */
int tier_files_map(tier_files_t *f, int k, uint64_t len, char *err, size_t cap);

/** @return whether file k is mapped at len bytes and still a spare. */
int tier_files_ready(const tier_files_t *f, int k, uint64_t len);

/** Make file k durable (msync, fsync) and adopt it into root's save of
 *  step as shard `index` (ckpt_shard_adopt).  Its mapping stays.
 *  @return TIER_OK, or TIER_EFAIL (err set). */
int tier_files_adopt(tier_files_t *f, int k, const char *root, uint64_t step, int index,
                     char *err, size_t cap);

/** Once every file of the save of step is adopted and every send and
 *  receive into them has completed: each adopted file's mapping is kept,
 *  read-only, as file k's mapping of that step (the oldest kept one is
 *  unmapped when there is no room), and the file is no longer file k's
 *  spare.  Files not adopted stay as they are. */
void tier_files_retire(tier_files_t *f, int64_t step);

/** Take shard `index` of root's sealed step back as file k's spare
 *  (ckpt_local_reclaim).  When file k's mapping of that step was kept and
 *  the file taken back is that same file, the mapping becomes the spare's
 *  again, writable (no new mapping); else that mapping goes and the next
 *  map makes one.  A spare mapped meanwhile is unmapped first.  @return 0,
 *  or 1 when nothing was taken (the next map creates the file). */
int tier_files_reclaim(tier_files_t *f, int k, const char *root, uint64_t step, int index);

/** Drop the kept mappings of steps older than step (steps the prune
 *  removes, not taken back): a mapping would keep a removed file's memory
 *  alive. */
void tier_files_drop_before(tier_files_t *f, int64_t step);

/** Unmap and close every file, and every kept mapping (the spares stay at
 *  their paths). */
void tier_files_unmap_all(tier_files_t *f);

/** Release: unmap, close, and remove the spares (remove: 0 keeps them). */
void tier_files_free(tier_files_t *f, int remove);

#endif
