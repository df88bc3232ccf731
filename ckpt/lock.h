/*
 * lock.h - which steps of a checkpoint root a live process is saving or
 * pruning, told by byte-range locks on the root's lock file, so that a
 * prune never removes the temp dir of a save in flight (root.c) whatever
 * the steps: a checkpoint imported or flushed into a live run's root can
 * be newer than the run's saves, which then look like crashed ones.
 *
 * <root>/.locks is an empty file.  A process saving step N holds a shared
 * lock on its byte N from before it creates .tmp-step-<N> until the
 * commit's outcome is known on every rank (ckpt_shard_write to
 * ckpt_commit); a prune holds an exclusive lock on byte N while it removes
 * .tmp-step-<N> or step-<N>.  The locks are open file description locks
 * (F_OFD_SETLK): per open file, not per process, so two threads of one
 * process (a trainer's save and its prune) exclude each other too, and a
 * process that dies releases its locks.  Where the file system has no
 * locks, nothing is held and a prune falls back to the step rule alone
 * (docs/checkpoint-format.md, "The root's lock file").
 */
#ifndef FTRAIN_CKPT_LOCK_H
#define FTRAIN_CKPT_LOCK_H

#include <stdint.h>

#define CKPT_LOCK_NAME ".locks"

typedef enum {
    CKPT_LOCK_HELD = 0,   /* *fd holds the lock: release it with ckpt_lock_release */
    CKPT_LOCK_BUSY = 1,   /* another open file holds a conflicting lock */
    CKPT_LOCK_NONE = 2    /* no lock file or no locks here: nothing is known */
} ckpt_lock_t;

/* A save of step under root: the shared lock of its byte, waited for up to
 * wait_s seconds while a prune holds it.  Creates the lock file (root must
 * exist).  @return CKPT_LOCK_HELD and *fd, CKPT_LOCK_BUSY (still pruned
 * after wait_s) or CKPT_LOCK_NONE (*fd -1). */
ckpt_lock_t ckpt_lock_save(const char *root, uint64_t step, double wait_s, int *fd);

/* A prune of step under root: the exclusive lock of its byte, not waited
 * for.  @return CKPT_LOCK_HELD and *fd, CKPT_LOCK_BUSY (a save or another
 * prune of step is in flight; *fd -1) or CKPT_LOCK_NONE (*fd -1: nothing
 * known, as on a file system without locks). */
ckpt_lock_t ckpt_lock_prune(const char *root, uint64_t step, int *fd);

/* Release what ckpt_lock_save or ckpt_lock_prune held; accepts -1. */
void ckpt_lock_release(int fd);

/* The save locks taken by ckpt_shard_write, kept until ckpt_commit of the
 * same root, step and rank releases them (commit.c), or the rank's next
 * save under the same root does (a save that never reached a commit: the
 * node-local tier seals its own way; ckpt/local.c). */
void ckpt_lock_keep(const char *root, uint64_t step, int rank, int fd);
void ckpt_lock_drop(const char *root, uint64_t step, int rank);

#endif
