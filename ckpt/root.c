/*
 * root.c - managing a checkpoint root: list what is there, find the newest
 * checkpoint that verifies, set newer bad ones aside, prune old ones.
 *
 * INVARIANTS (of the commit protocol; the others are at the top of commit.c)
 *   I7. Prune deletes a committed checkpoint by first renaming it back to
 *       .tmp-step-<N>/, so a crash while deleting never leaves a half-deleted
 *       step-<N>/ that looks committed.
 *   I9. A checkpoint that fails to verify is never deleted by the library:
 *       ckpt_set_aside_after renames newer bad ones to step-<N>.corrupt so
 *       that a run resumed from an older step can save step N again.
 *   I10. Prune never removes .tmp-step-<N> or step-<N> while another open
 *       file holds byte N of <root>/.locks (lock.h): a live save of step N,
 *       or another prune of it.
 */
#include "ftrain/ckpt.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lock.h"
#include "util.h"

/* The part of a library message that an entry's reason quotes, after the
 * error's name. */
#define WHY_DETAIL_MAX 200
_Static_assert(WHY_DETAIL_MAX < CKPT_ENTRY_WHY_MAX, "room for the error's name");

/* Names tried for a checkpoint set aside: .corrupt, then .corrupt-2 up to
 * .corrupt-<CORRUPT_TRIES_MAX>. */
#define CORRUPT_TRIES_MAX 1000
#define CORRUPT_SUFFIX_MAX sizeof ".corrupt-1000"

/* ---- listing ---------------------------------------------------------- */

/* Parse the name of a directory set aside (set_aside below): a step
 * directory's name and ".corrupt", or ".corrupt-<k>" with k in
 * 2..CORRUPT_TRIES_MAX written without leading zeros.  @return 1 and *step
 * on a match. */
static int parse_set_aside(const char *name, uint64_t *step)
{
    const char *dot = strstr(name, ".corrupt");
    char base[CKPT_FILE_NAME_MAX];
    if (!dot || dot == name || (size_t)(dot - name) >= sizeof base)
        return 0;
    const char *tail = dot + strlen(".corrupt");
    if (*tail) {
        if (tail[0] != '-' || tail[1] < '1' || tail[1] > '9' ||
            strspn(tail + 1, "0123456789") != strlen(tail + 1) || strlen(tail + 1) > 4)
            return 0;
        long k = strtol(tail + 1, NULL, 10);
        if (k < 2 || k > CORRUPT_TRIES_MAX)
            return 0;
    }
    memcpy(base, name, (size_t)(dot - name));
    base[dot - name] = '\0';
    return ckpt_parse_dirname(base, 0, step);
}

static int cmp_entry(const void *left, const void *right)
{
    const ckpt_entry_t *one = left, *other = right;
    if (one->step != other->step)
        return one->step < other->step ? -1 : 1;
    /* A step's live entries come before what was set aside of it, so
     * that a caller's "newest entry" is never a set-aside one. */
    int aside = (one->status == CKPT_ST_SET_ASIDE) - (other->status == CKPT_ST_SET_ASIDE);
    return aside ? aside : strcmp(one->name, other->name);
}

/* Set entry's reason to rc's name and the thread's last message. */
static void set_why(ckpt_entry_t *entry, int rc)
{
    snprintf(entry->why, sizeof entry->why, "%s: %.*s", ckpt_strerror(rc),
             WHY_DETAIL_MAX, ckpt_last_error());
}

/* Fill entry for the step directory root/entry->name. */
static void inspect_step(const char *root, int verify, ckpt_entry_t *entry)
{
    char path[CKPT_PATH_MAX];
    ckpt_t *ckpt = NULL;
    int rc;

    if (ckpt_path_join(path, sizeof path, root, entry->name) != CKPT_OK) {
        entry->status = CKPT_ST_CORRUPT;
        snprintf(entry->why, sizeof entry->why, "path too long");
        return;
    }
    rc = ckpt_open(path, &ckpt);
    if (rc == CKPT_OK) {
        entry->world_size = ckpt_world_size(ckpt);
        entry->raw_bytes = ckpt_total_bytes(ckpt);
        entry->created = ckpt_created(ckpt);
        for (int i = 0; i < entry->world_size; i++)
            entry->file_bytes += ckpt_shard_at(ckpt, i)->file_bytes;
        if (verify)
            rc = ckpt_verify(ckpt);
    }
    if (rc == CKPT_OK)
        entry->status = CKPT_ST_COMMITTED;
    else
        entry->status = rc == CKPT_EINCOMPLETE && !ckpt ? CKPT_ST_INCOMPLETE
                                                        : CKPT_ST_CORRUPT;
    if (rc != CKPT_OK)
        set_why(entry, rc);
    ckpt_close(ckpt);
}

/* Fill entry for name, a directory set aside as damaged: never opened. */
static void fill_set_aside(const char *name, uint64_t step, ckpt_entry_t *entry)
{
    memset(entry, 0, sizeof *entry);
    entry->size = sizeof *entry;
    assert(strlen(name) < sizeof entry->name); /* ckpt_list skips longer names */
    strcpy(entry->name, name);
    entry->step = step;
    entry->status = CKPT_ST_SET_ASIDE;
    snprintf(entry->why, sizeof entry->why, "set aside as damaged when a run resumed from "
             "an older checkpoint; kept for inspection, never read");
}

/* Fill entry for name, a step directory (tmp 0) or a temp dir (tmp 1) in
 * the open root dir; latest is what LATEST names ("" when nothing). */
static void fill_entry(DIR *dir, const char *root, const char *name,
                       uint64_t step, int tmp, int verify, const char *latest,
                       ckpt_entry_t *entry)
{
    struct stat st;
    memset(entry, 0, sizeof *entry);
    entry->size = sizeof *entry;
    assert(strlen(name) < sizeof entry->name); /* a name ckpt_parse_dirname took */
    strcpy(entry->name, name);
    entry->step = step;
    if (tmp) {
        entry->status = CKPT_ST_INCOMPLETE;
        snprintf(entry->why, sizeof entry->why, "temporary directory of an "
                 "unfinished or crashed save");
        return;
    }
    if (fstatat(dirfd(dir), name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode)) {
        /* I8: a link is not followed, whatever it points to. */
        entry->status = CKPT_ST_CORRUPT;
        entry->is_link = 1;
        snprintf(entry->why, sizeof entry->why, "a symbolic link, not a "
                 "directory (links under a checkpoint root are not followed)");
    } else {
        inspect_step(root, verify, entry);
    }
    entry->is_latest = strcmp(latest, entry->name) == 0;
}

int ckpt_list_sized(const char *root, int verify, size_t entry_size, ckpt_entry_t **out,
                    size_t *nentries)
{
    int rc = CKPT_OK;
    DIR *dir;
    struct dirent *dirent;
    ckpt_entry_t *entries = NULL;
    size_t count = 0, cap = 0;
    char latest[CKPT_FILE_NAME_MAX] = "";
    uint64_t latest_step, step;

    if (!root || !out || !nentries)
        return ckpt_seterr(CKPT_EINVAL, "list: NULL argument");
    *out = NULL;
    *nentries = 0;
    /* One size is known so far; a later version with a longer entry fills
     * an array of a shorter one at its stride, up to its size. */
    if ((rc = ckpt_check_size("ckpt_entry_t", entry_size, sizeof *entries, "")) != CKPT_OK)
        return rc;
    dir = opendir(root);
    if (!dir)
        return ckpt_seterr(errno == ENOENT || errno == ENOTDIR
                               ? CKPT_ENOTFOUND : CKPT_EIO,
                           "%s: cannot open: %s", root, strerror(errno));
    if (!ckpt_latest_read(root, latest, sizeof latest, &latest_step))
        latest[0] = '\0';
    while ((errno = 0, dirent = readdir(dir)) != NULL) {
        int tmp = 0, aside = 0;
        if (!ckpt_parse_dirname(dirent->d_name, 0, &step)) {
            if (ckpt_parse_dirname(dirent->d_name, 1, &step))
                tmp = 1;
            else if ((verify & CKPT_LIST_SET_ASIDE) && parse_set_aside(dirent->d_name, &step))
                aside = 1;
            else
                continue;
        }
        if (count == cap) {
            ckpt_entry_t *grown = ckpt_grow(entries, &cap, sizeof *entries, 16);
            if (!grown) {
                rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
                break;
            }
            entries = grown;
        }
        if (aside)
            fill_set_aside(dirent->d_name, step, &entries[count++]);
        else
            fill_entry(dir, root, dirent->d_name, step, tmp, verify & CKPT_LIST_VERIFY,
                       latest, &entries[count++]);
    }
    if (rc == CKPT_OK && errno != 0)
        rc = ckpt_seterr(CKPT_EIO, "%s: readdir: %s", root, strerror(errno));
    closedir(dir);
    if (rc != CKPT_OK) {
        free(entries);
        return rc;
    }
    if (count > 1)
        qsort(entries, count, sizeof *entries, cmp_entry);
    *out = entries;
    *nentries = count;
    return CKPT_OK;
}

/* ---- the newest good checkpoint --------------------------------------- */

/* Open and fully verify root/name; its path goes to dir. */
static int verify_step(const char *root, const char *name, char *dir, size_t cap)
{
    ckpt_t *ckpt = NULL;
    int rc = ckpt_path_join(dir, cap, root, name);
    if (rc == CKPT_OK)
        rc = ckpt_open(dir, &ckpt);
    if (rc == CKPT_OK)
        rc = ckpt_verify(ckpt);
    ckpt_close(ckpt);
    return rc;
}

int ckpt_latest_good(const char *root, char *path, size_t cap,
                     void (*skipped)(void *ctx, const char *name,
                                     const char *why),
                     void *ctx)
{
    int rc, nsteps = 0, latest_seen = 0;
    ckpt_entry_t *entries = NULL;
    size_t nentries = 0;
    char dir[CKPT_PATH_MAX], latest[CKPT_FILE_NAME_MAX],
         why[sizeof "names , which does not exist" + CKPT_FILE_NAME_MAX];
    uint64_t latest_step;

    if (!path || cap == 0)
        return ckpt_seterr(CKPT_EINVAL, "latest_good: no output buffer");
    path[0] = '\0';
    if ((rc = ckpt_list(root, 0, &entries, &nentries)) != CKPT_OK)
        return rc;
    for (size_t i = nentries; i-- > 0;) { /* newest first */
        ckpt_entry_t *entry = &entries[i];
        if (entry->name[0] == '.')
            continue;
        nsteps++;
        latest_seen |= entry->is_latest;
        /* Every step directory, whatever the listing made of it: the
         * listing keeps no error code, and only the code tells a damaged
         * checkpoint from one that could not be read. */
        rc = verify_step(root, entry->name, dir, sizeof dir);
        if (rc == CKPT_OK) {
            if (strlen(dir) >= cap)
                rc = ckpt_seterr(CKPT_EINVAL, "latest_good: path buffer "
                                 "too small for %s", dir);
            else
                strcpy(path, dir);
            goto out;
        }
        if (rc == CKPT_EIO || rc == CKPT_ENOMEM) {
            /* Not a verdict on the checkpoint (a file system that failed
             * for a moment, no descriptors or memory): an older one would
             * silently redo work, and the caller would set this one aside
             * as bad.  Stop here and say why. */
            char cause[CKPT_ERRMSG_MAX];
            snprintf(cause, sizeof cause, "%s", ckpt_last_error());
            rc = ckpt_seterr(rc, "%s/%s could not be read, so whether it is good is not "
                             "known: %s", root, entry->name, cause);
            goto out;
        }
        set_why(entry, rc);
        if (skipped)
            skipped(ctx, entry->name, entry->why);
    }
    if (nsteps == 0)
        rc = ckpt_seterr(CKPT_ENOTFOUND, "%s: no checkpoint", root);
    else
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: none of %d checkpoints verifies",
                         root, nsteps);
    if (!latest_seen && skipped &&
        ckpt_latest_read(root, latest, sizeof latest, &latest_step)) {
        snprintf(why, sizeof why, "names %s, which does not exist", latest);
        skipped(ctx, CKPT_LATEST_NAME, why);
    }
out:
    free(entries);
    return rc;
}

/* ---- setting bad checkpoints aside ------------------------------------ */

/* Rename root/name to the first free root/name.corrupt[-k] (I9: moved, never
 * deleted); its name goes to aside. */
static int set_aside(const char *root, const char *name, char *aside, size_t cap)
{
    char from[CKPT_PATH_MAX], to[CKPT_PATH_MAX];
    int rc = ckpt_path_join(from, sizeof from, root, name);
    for (int k = 1; rc == CKPT_OK && k <= CORRUPT_TRIES_MAX; k++) {
        if (k == 1)
            snprintf(aside, cap, "%s.corrupt", name);
        else
            snprintf(aside, cap, "%s.corrupt-%d", name, k);
        if ((rc = ckpt_path_join(to, sizeof to, root, aside)) != CKPT_OK)
            break;
        rc = ckpt_rename_noreplace_at(AT_FDCWD, from, AT_FDCWD, to);
        if (rc != CKPT_EEXIST)
            return rc;
        rc = CKPT_OK; /* that name is taken: try the next */
    }
    if (rc == CKPT_OK)
        rc = ckpt_seterr(CKPT_EIO, "%s: no free name to move it aside", from);
    return rc;
}

int ckpt_set_aside_after(const char *root, uint64_t step,
                         void (*moved)(void *ctx, const char *from,
                                       const char *to),
                         void *ctx)
{
    ckpt_entry_t *entries = NULL;
    size_t nentries = 0;
    int rc, nmoved = 0;
    char aside[CKPT_FILE_NAME_MAX + CORRUPT_SUFFIX_MAX];

    if ((rc = ckpt_list(root, 0, &entries, &nentries)) != CKPT_OK)
        return rc == CKPT_ENOTFOUND ? CKPT_OK : rc;
    for (size_t i = 0; i < nentries && rc == CKPT_OK; i++) {
        if (entries[i].name[0] == '.' || entries[i].step <= step)
            continue;
        rc = set_aside(root, entries[i].name, aside, sizeof aside);
        if (rc == CKPT_OK) {
            nmoved++;
            if (moved)
                moved(ctx, entries[i].name, aside);
        }
    }
    if (nmoved) {
        int synced = ckpt_fsync_dir(root);
        if (rc == CKPT_OK)
            rc = synced;
    }
    free(entries);
    return rc;
}

/* ---- pruning ---------------------------------------------------------- */

/* Delete the committed checkpoint root/entry->name: renamed to
 * .tmp-step-<N> first (I7), the root fsync'd, then removed.  The caller
 * holds the step's prune lock (lock.h): a save of the same step in flight
 * would be writing the .tmp-step-<N> this removes first.
 * @return CKPT_OK, CKPT_ENOTFOUND (gone: another prune, the trainer's or
 * ckptctl's, took it), CKPT_EINVAL or CKPT_EIO. */
static int delete_step(const char *root, const ckpt_entry_t *entry)
{
    char path[CKPT_PATH_MAX], tmp_path[CKPT_PATH_MAX], tmp_name[CKPT_FILE_NAME_MAX];
    int rc;

    assert(entry->status == CKPT_ST_COMMITTED); /* I9: never a bad one */
    ckpt_tmp_dirname(entry->step, tmp_name, sizeof tmp_name);
    if ((rc = ckpt_path_join(path, sizeof path, root, entry->name)) != CKPT_OK ||
        (rc = ckpt_path_join(tmp_path, sizeof tmp_path, root, tmp_name)) != CKPT_OK)
        return rc;
    /* A crashed save of the same step may have left its temp dir. */
    rc = ckpt_remove_tree(AT_FDCWD, tmp_path, tmp_path);
    if (rc == CKPT_OK && rename(path, tmp_path) != 0) {
        if (errno == ENOENT)
            return CKPT_ENOTFOUND;
        rc = CKPT_EIO;
    }
    if (rc == CKPT_OK)
        rc = ckpt_fsync_dir(root);
    if (rc == CKPT_OK)
        rc = ckpt_remove_tree(AT_FDCWD, tmp_path, tmp_path);
    if (rc != CKPT_OK)
        return ckpt_seterr(CKPT_EIO, "%s: cannot remove: %s", path, strerror(errno));
    return CKPT_OK;
}

/* Should prune keep this committed entry?  Counts it among the `keep`
 * newest while there is room. */
static int keeps(const ckpt_entry_t *entry, int keep, int *kept,
                 const char *in_use, const char *in_use2)
{
    if (*kept < keep) {
        (*kept)++;
        return 1;
    }
    return (in_use && strcmp(in_use, entry->name) == 0) ||
           (in_use2 && strcmp(in_use2, entry->name) == 0);
}

/* ckpt_prune, never removing the checkpoints named in_use or in_use2
 * (NULL: none; compared by the last path component). */
static int prune(const char *root, int keep, const char *in_use,
                 const char *in_use2, int *removed)
{
    int rc = CKPT_OK, nremoved = 0, kept = 0, have_newest = 0;
    ckpt_entry_t *entries = NULL;
    size_t nentries = 0;
    uint64_t newest = 0;
    char use_buf[CKPT_PATH_MAX], use_buf2[CKPT_PATH_MAX];
    const char *use = in_use ? ckpt_base_name(in_use, use_buf, sizeof use_buf) : NULL,
               *use2 = in_use2 ? ckpt_base_name(in_use2, use_buf2, sizeof use_buf2)
                               : NULL;

    if (removed)
        *removed = 0;
    if (keep < 0)
        return ckpt_seterr(CKPT_EINVAL, "prune: keep %d is negative", keep);
    if ((rc = ckpt_list(root, 0, &entries, &nentries)) != CKPT_OK)
        return rc;
    for (size_t i = 0; i < nentries; i++)
        if (entries[i].name[0] != '.' && entries[i].status == CKPT_ST_COMMITTED) {
            newest = entries[i].step;
            have_newest = 1;
        }
    for (size_t i = nentries; rc == CKPT_OK && i-- > 0;) { /* newest first */
        const ckpt_entry_t *entry = &entries[i];
        char path[CKPT_PATH_MAX];
        int lock = -1;
        if (entry->name[0] == '.') {
            /* A crashed save's temp dir, once a newer step is committed;
             * not one a live save holds (lock.h): after an import or a
             * flush of a newer step, a running trainer's saves are older
             * than the newest committed step too. */
            if (!have_newest || entry->step >= newest ||
                ckpt_path_join(path, sizeof path, root, entry->name) != CKPT_OK ||
                ckpt_lock_prune(root, entry->step, &lock) == CKPT_LOCK_BUSY)
                continue;
            if ((rc = ckpt_remove_tree(AT_FDCWD, path, path)) == CKPT_OK)
                nremoved++;
            ckpt_lock_release(lock);
            continue;
        }
        if (entry->status != CKPT_ST_COMMITTED || /* left for inspection (I9) */
            keeps(entry, keep, &kept, use, use2) ||
            ckpt_lock_prune(root, entry->step, &lock) == CKPT_LOCK_BUSY)
            continue;
        rc = delete_step(root, entry);
        ckpt_lock_release(lock);
        if (rc == CKPT_OK)
            nremoved++;
        else if (rc == CKPT_ENOTFOUND)
            rc = CKPT_OK;
    }
    if (nremoved > 0)
        (void)ckpt_fsync_dir(root);
    if (removed)
        *removed = nremoved;
    free(entries);
    return rc;
}

int ckpt_prune_set_aside(const char *root, int *removed)
{
    ckpt_entry_t *entries = NULL;
    size_t nentries = 0;
    int rc, nremoved = 0;
    if (removed)
        *removed = 0;
    if ((rc = ckpt_list(root, CKPT_LIST_SET_ASIDE, &entries, &nentries)) != CKPT_OK)
        return rc;
    for (size_t i = 0; i < nentries && rc == CKPT_OK; i++) {
        char path[CKPT_PATH_MAX];
        if (entries[i].status != CKPT_ST_SET_ASIDE)
            continue;
        if ((rc = ckpt_path_join(path, sizeof path, root, entries[i].name)) == CKPT_OK &&
            (rc = ckpt_remove_tree(AT_FDCWD, path, path)) == CKPT_OK)
            nremoved++;
    }
    if (nremoved > 0)
        (void)ckpt_fsync_dir(root);
    if (removed)
        *removed = nremoved;
    free(entries);
    return rc;
}

int ckpt_prune(const char *root, int keep, const char *in_use, int *removed)
{
    return prune(root, keep, in_use, NULL, removed);
}

int ckpt_prune_keep_good(const char *root, int keep, const char *in_use,
                         int *removed, char *good, size_t cap)
{
    char path[CKPT_PATH_MAX];
    int rc = ckpt_latest_good(root, path, sizeof path, NULL, NULL);
    if (good && cap)
        good[0] = '\0';
    /* A path cut to fit would name another directory: refused before
     * anything is removed, as ckpt_latest_good does. */
    if (rc == CKPT_OK && good && strlen(path) >= cap)
        return ckpt_seterr(CKPT_EINVAL, "prune_keep_good: output buffer of %zu bytes too "
                           "small for %s", cap, path);
    if (rc == CKPT_OK && good)
        memcpy(good, path, strlen(path) + 1);
    if (rc != CKPT_OK && rc != CKPT_ENOTFOUND && rc != CKPT_ECORRUPT)
        return rc;
    return prune(root, keep, in_use, rc == CKPT_OK ? path : NULL, removed);
}
