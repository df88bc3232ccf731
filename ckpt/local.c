/*
 * local.c - the node store of the node-local checkpoint tier
 * (include/ftrain/ckpt_local.h, docs/checkpoint-format.md "The node-local
 * tier"): partner copies put into a node's temp dir, shard files adopted in
 * place or reclaimed from a step about to be pruned, a node's step sealed by
 * one rename, the steps a node holds listed and verified, and the steps
 * newer than a resume dropped.  Copying a step from the node roots into the
 * shared tier is flush.c's.
 *
 * A node-local root has the layout, manifest and shard formats of any root;
 * a step directory holds the whole checkpoint's manifest but only some of
 * its shard files.  The save's own steps (root, temp dir, strays, manifest,
 * LATEST) are commit.c's, shared through commit.h.
 *
 * INVARIANTS (beside I1-I10 of commit.c, read.c and root.c, which hold here
 * with "every shard" read as "every shard present"; L4 is flush.c's)
 *   L1. A node's step-<N>/ appears only by rename of its .tmp-step-<N>/
 *       after every shard file in it was checked against the infos (size,
 *       header, footer, seek table) and manifest.json was written and
 *       fsync'd.  THE COMMIT POINT of a node is that rename (or the
 *       exchange that replaces a stale step-<N>), made durable by the fsync
 *       of the root that follows.
 *   L2. A partner copy is hashed before a byte of it is written: a copy
 *       whose XXH64 is not the writer's never reaches the disk.
 *   L3. The manifest in a local step directory is the whole checkpoint's:
 *       every shard present is checked alone against it; a shard absent is
 *       not an error on a node, only in a flush that no root can fill.
 *
 * STATE DIAGRAM (one node, step N)
 *
 *   (none) --ckpt_shard_write (own shards) / ckpt_shard_put (partner
 *            copies, hashed first) / ckpt_shard_adopt (a file built in
 *            place): .tmp-step-N/shard-<i>.ftsh, fsync'd -->
 *   [SHARDS WRITTEN]
 *      --ckpt_local_seal: check each file, remove strays, write+fsync
 *        manifest.json; any failure --> (none) (the temp dir is removed)
 *   [MANIFEST WRITTEN, still invisible]
 *      --ckpt_local_seal: rename .tmp-step-N -> step-N (or exchange with a
 *        stale step-N, then remove it), fsync root -->
 *   [SEALED]   (the node's commit point)
 *      --ckpt_local_seal: ckpt_prune keeps the newest `keep` -->
 *      --ckpt_local_drop_after / prune: rename to .tmp-step-N, remove --> (none)
 */
#include "ftrain/ckpt_local.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "commit.h"
#include "layout.h"
#include "local.h"
#include "manifest.h"
#include "shard.h"
#include "util.h"

/* A partner copy's temp name beside its final one: not a shard name, so
 * seal removes it as a stray if a crash left it. */
#define PUT_TMP_SUFFIX ".tmp"

/* ---- a local step directory, opened once ------------------------------ */

void ckpt_local_dir_close(ckpt_local_dir_t *dir)
{
    if (dir->dirfd >= 0)
        close(dir->dirfd);
    dir->dirfd = -1;
    ckpt_manifest_free(&dir->manifest);
}

int ckpt_local_dir_open(ckpt_local_dir_t *dir, const char *path)
{
    char name_buf[CKPT_PATH_MAX], mpath[CKPT_PATH_MAX], *text = NULL;
    const char *name;
    uint64_t named_step = 0;
    size_t len;
    int rc, is_step;

    memset(dir, 0, sizeof *dir);
    dir->dirfd = -1;
    if (strlen(path) >= sizeof dir->path)
        return ckpt_seterr(CKPT_EINVAL, "%.*s...: path too long",
                           CKPT_MSG_PATH_MAX, path);
    strcpy(dir->path, path);
    name = ckpt_base_name(path, name_buf, sizeof name_buf);
    is_step = ckpt_parse_dirname(name, 0, &named_step);
    dir->dirfd = open(name_buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                                    (is_step ? O_NOFOLLOW : 0));
    if (dir->dirfd < 0) {
        int err = errno;
        struct stat st;
        if ((err == ELOOP || err == ENOTDIR) && lstat(name_buf, &st) == 0 &&
            !S_ISDIR(st.st_mode))
            return ckpt_seterr(CKPT_ECORRUPT, "%s: not a directory (a step-<N> "
                               "that is a link is not followed)", path);
        if (err == ENOENT || err == ENOTDIR)
            return ckpt_seterr(CKPT_ENOTFOUND, "%s: no such step directory", path);
        return ckpt_seterr(CKPT_EIO, "%s: cannot open: %s", path, strerror(err));
    }
    if ((rc = ckpt_path_join(mpath, sizeof mpath, path, CKPT_MANIFEST_NAME)))
        return rc;
    rc = ckpt_read_small_file_at(dir->dirfd, CKPT_MANIFEST_NAME, mpath,
                                 CKPT_MANIFEST_MAX, &text, &len);
    if (rc == CKPT_ENOTFOUND)
        return ckpt_seterr(CKPT_EINCOMPLETE, "%s: no manifest.json (not sealed)",
                           path);
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt_manifest_parse(text, len, mpath, &dir->manifest);
    free(text);
    if (rc == CKPT_OK && is_step && named_step != dir->manifest.step)
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: step is %llu but the directory is %s",
                         mpath, (unsigned long long)dir->manifest.step, name);
    return rc;
}

int ckpt_local_shard_held(int dirfd, int index, const ckpt_shard_info_t *info)
{
    char name[CKPT_FILE_NAME_MAX];
    struct stat st;
    ckpt_shard_name(index, name, sizeof name);
    return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
           S_ISREG(st.st_mode) && (uint64_t)st.st_size == info->file_bytes;
}

/* Is there no entry at all named as shard index (ENOENT)? */
static int shard_absent(int dirfd, int index)
{
    char name[CKPT_FILE_NAME_MAX];
    struct stat st;
    ckpt_shard_name(index, name, sizeof name);
    return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
}

/* Open shard index of the directory dirfd (path, for messages) as a reader
 * checked against info: size, header, footer and seek table.  With verify,
 * also every byte and the file's checksum. */
static int check_shard(int dirfd, const char *dir, int index,
                       const ckpt_shard_info_t *info, int verify)
{
    char name[CKPT_FILE_NAME_MAX], path[CKPT_PATH_MAX];
    ckpt_shard_reader_t reader;
    int rc;
    ckpt_shard_name(index, name, sizeof name);
    if ((rc = ckpt_path_join(path, sizeof path, dir, name)) != CKPT_OK)
        return rc;
    rc = ckpt_shard_reader_open(&reader, dirfd, name, path, info);
    if (rc == CKPT_OK && verify)
        rc = ckpt_shard_verify(&reader, info);
    ckpt_shard_reader_close(&reader);
    return rc;
}

/* ---- putting a partner copy ------------------------------------------- */

int ckpt_shard_check(const void *data, uint64_t len, uint64_t xxh64, uint64_t step,
                     int index)
{
    if (!data || index < 0 || index >= CKPT_MAX_SHARDS)
        return ckpt_seterr(CKPT_EINVAL, "shard check: no data, or shard index %d", index);
    if ((uint64_t)(size_t)len != len)
        return ckpt_seterr(CKPT_EINVAL, "shard check: %llu bytes do not fit in memory",
                           (unsigned long long)len);
    return ckpt_shard_check_sum(len, XXH64(data, (size_t)len, 0), xxh64, step, index);
}

int ckpt_shard_check_sum(uint64_t len, uint64_t sum, uint64_t xxh64, uint64_t step, int index)
{
    char name[CKPT_FILE_NAME_MAX];
    if (index < 0 || index >= CKPT_MAX_SHARDS)
        return ckpt_seterr(CKPT_EINVAL, "shard check: shard index %d", index);
    ckpt_shard_name(index, name, sizeof name);
    if (sum != xxh64)
        return ckpt_seterr(CKPT_ECORRUPT, "partner copy of %s for step %llu: "
                           "checksum %016llx, the writer's is %016llx (damaged "
                           "in transfer?); not written", name,
                           (unsigned long long)step, (unsigned long long)sum,
                           (unsigned long long)xxh64);
    if (len < CKPT_SHARD_HEADER_BYTES + CKPT_SHARD_FOOTER_BYTES)
        return ckpt_seterr(CKPT_ECORRUPT, "partner copy of %s for step %llu: %llu "
                           "bytes, too short for a shard file; not written", name,
                           (unsigned long long)step, (unsigned long long)len);
    return CKPT_OK;
}

/* The checks of a shard's destination: root, index, step.  @return CKPT_OK
 * or CKPT_EINVAL. */
static int check_dest(const char *root, uint64_t step, int index, const char *what)
{
    if (!root || !*root || index < 0 || index >= CKPT_MAX_SHARDS)
        return ckpt_seterr(CKPT_EINVAL, "%s: bad root or shard index %d", what, index);
    if (step > INT64_MAX)
        return ckpt_seterr(CKPT_EINVAL, "step %llu is too large", (unsigned long long)step);
    return CKPT_OK;
}

/* Make <root>/.tmp-step-<step> (and root, one level); its path to tmpdir. */
static int make_tmpdir(const char *root, uint64_t step, char *tmpdir, size_t cap)
{
    char tmp_name[CKPT_FILE_NAME_MAX];
    int rc;
    if ((rc = ckpt_make_root(root, 1)) != CKPT_OK)
        return rc;
    ckpt_tmp_dirname(step, tmp_name, sizeof tmp_name);
    if ((rc = ckpt_path_join(tmpdir, cap, root, tmp_name)) != CKPT_OK)
        return rc;
    return ckpt_make_real_dir(tmpdir);
}

int ckpt_shard_put(const char *root, uint64_t step, int index, const void *data,
                   uint64_t len, uint64_t xxh64)
{
    char name[CKPT_FILE_NAME_MAX], tmp_name[CKPT_FILE_NAME_MAX + sizeof PUT_TMP_SUFFIX],
         tmpdir[CKPT_PATH_MAX];
    int rc;

    if ((rc = check_dest(root, step, index, "shard_put")) != CKPT_OK)
        return rc;
    /* L2: the copy is checked before anything is written. */
    if ((rc = ckpt_shard_check(data, len, xxh64, step, index)) != CKPT_OK)
        return rc;
    if ((rc = make_tmpdir(root, step, tmpdir, sizeof tmpdir)) != CKPT_OK)
        return rc;
    ckpt_shard_name(index, name, sizeof name);
    snprintf(tmp_name, sizeof tmp_name, "%s" PUT_TMP_SUFFIX, name);
    /* Temp name, fsync, rename, fsync the temp dir; the temp file is
     * removed on failure (a full disk). */
    rc = ckpt_write_file_atomic(tmpdir, name, tmp_name, data, (size_t)len, 1);
    if (rc == CKPT_OK)
        rc = ckpt_fsync_dir(root); /* the temp dir's own name */
    return rc;
}

int ckpt_shard_adopt(const char *root, uint64_t step, int index, const char *path)
{
    char name[CKPT_FILE_NAME_MAX], tmpdir[CKPT_PATH_MAX], dest[CKPT_PATH_MAX];
    int rc;

    if ((rc = check_dest(root, step, index, "shard_adopt")) != CKPT_OK)
        return rc;
    if (!path || !*path)
        return ckpt_seterr(CKPT_EINVAL, "shard_adopt: no file");
    struct stat st; /* checked before anything is made for it */
    if (lstat(path, &st) != 0)
        return ckpt_seterr(CKPT_EIO, "shard_adopt: %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ckpt_seterr(CKPT_EIO, "shard_adopt: %s: not a regular file", path);
    if ((rc = make_tmpdir(root, step, tmpdir, sizeof tmpdir)) != CKPT_OK)
        return rc;
    ckpt_shard_name(index, name, sizeof name);
    if ((rc = ckpt_path_join(dest, sizeof dest, tmpdir, name)) != CKPT_OK)
        return rc;
    if (rename(path, dest) != 0)
        return ckpt_seterr(CKPT_EIO, "rename %s -> %s: %s", path, dest, strerror(errno));
    if ((rc = ckpt_fsync_dir(tmpdir)) != CKPT_OK)
        return rc;
    return ckpt_fsync_dir(root); /* the temp dir's own name */
}

int ckpt_local_reclaim(const char *root, uint64_t step, int index, const char *path)
{
    char dir[CKPT_PATH_MAX], from[CKPT_PATH_MAX], name[CKPT_FILE_NAME_MAX];
    int rc;

    if ((rc = check_dest(root, step, index, "local_reclaim")) != CKPT_OK)
        return rc;
    if (!path || !*path)
        return ckpt_seterr(CKPT_EINVAL, "local_reclaim: no destination");
    ckpt_step_dirname(step, name, sizeof name);
    if ((rc = ckpt_path_join(dir, sizeof dir, root, name)) != CKPT_OK)
        return rc;
    ckpt_shard_name(index, name, sizeof name);
    if ((rc = ckpt_path_join(from, sizeof from, dir, name)) != CKPT_OK)
        return rc;
    struct stat st;
    if (lstat(from, &st) != 0)
        return ckpt_seterr(errno == ENOENT || errno == ENOTDIR ? CKPT_ENOTFOUND : CKPT_EIO,
                           "%s: %s", from, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ckpt_seterr(CKPT_ENOTFOUND, "%s: not a regular file", from);
    if (rename(from, path) != 0)
        return ckpt_seterr(errno == ENOENT ? CKPT_ENOTFOUND : CKPT_EIO, "rename %s -> %s: %s",
                           from, path, strerror(errno));
    return CKPT_OK;
}

/* ---- sealing a node's step -------------------------------------------- */

/* The arguments of ckpt_local_seal; *total gets the flat space's size. */
static int check_seal(const char *root, uint64_t step, const ckpt_tensor_t *tensors,
                      size_t ntensors, const char *record_json,
                      const ckpt_opts_t *opts, const ckpt_shard_info_t *infos,
                      int nshards, int keep, uint64_t *total)
{
    ckpt_manifest_t probe;
    char *text = NULL;
    int rc;

    if (!root || !*root || !infos || nshards < 1 || nshards > CKPT_MAX_SHARDS)
        return ckpt_seterr(CKPT_EINVAL, "local_seal: bad root, infos or shard "
                           "count %d", nshards);
    if (keep < 1)
        return ckpt_seterr(CKPT_EINVAL, "local_seal: keep %d is below 1", keep);
    if (step > INT64_MAX)
        return ckpt_seterr(CKPT_EINVAL, "step %llu is too large",
                           (unsigned long long)step);
    if ((rc = ckpt_check_opts(opts)) != CKPT_OK ||
        (rc = ckpt_check_layout(tensors, ntensors, total)) != CKPT_OK)
        return rc;
    for (int i = 0; i < nshards; i++)
        if ((rc = ckpt_check_slice(&infos[i], i, nshards, *total)) != CKPT_OK)
            return rc;
    memset(&probe, 0, sizeof probe);
    probe.record = (char *)record_json; /* only read */
    rc = ckpt_manifest_dump(&probe, &text);
    free(text);
    return rc;
}

/* Check every shard file in tmpdir that is one of the nshards against its
 * info (L1); count them into *present. */
static int check_present(const char *tmpdir, const ckpt_shard_info_t *infos,
                         int nshards, int *present)
{
    int fd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), rc = CKPT_OK;
    *present = 0;
    if (fd < 0) {
        if (errno == ENOENT)
            return ckpt_seterr(CKPT_EINCOMPLETE, "%s: no such directory: no shard "
                               "was written or put for this step", tmpdir);
        return ckpt_seterr(CKPT_EIO, "%s: cannot open: %s", tmpdir, strerror(errno));
    }
    for (int i = 0; i < nshards && rc == CKPT_OK; i++) {
        if (shard_absent(fd, i))
            continue;
        rc = check_shard(fd, tmpdir, i, &infos[i], 0);
        if (rc == CKPT_OK)
            (*present)++;
    }
    close(fd);
    if (rc == CKPT_OK && *present == 0)
        rc = ckpt_seterr(CKPT_EINCOMPLETE, "%s: no shard file of the %d", tmpdir,
                         nshards);
    return rc;
}

/* The node's commit point (L1): tmpdir becomes final, and the root is
 * fsync'd (when do_fsync).  A final already there (a stale step from before
 * a resume, or anything by that name) is exchanged with it atomically and
 * removed from under the temp name once the exchange is durable; where the
 * file system cannot exchange, it is removed first.  *committed says
 * whether the rename happened (an fsync may still have failed). */
static int publish(const char *root, const char *tmpdir, const char *final,
                   int do_fsync, int *committed)
{
    int rc = ckpt_rename_noreplace_at(AT_FDCWD, tmpdir, AT_FDCWD, final), stale = 0;
    *committed = 0;
    if (rc == CKPT_EEXIST) {
        if (renameat2(AT_FDCWD, tmpdir, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            stale = 1; /* now under the temp name, which no reader opens */
            rc = CKPT_OK;
        } else if (errno != EINVAL && errno != ENOSYS) {
            return ckpt_seterr(CKPT_EIO, "exchange %s <-> %s: %s", tmpdir, final,
                               strerror(errno));
        } else if ((rc = ckpt_remove_tree(AT_FDCWD, final, final)) == CKPT_OK) {
            rc = ckpt_rename_noreplace_at(AT_FDCWD, tmpdir, AT_FDCWD, final);
        }
    }
    if (rc != CKPT_OK)
        return rc;
    *committed = 1;
    if (do_fsync && (rc = ckpt_fsync_dir(root)) != CKPT_OK)
        return ckpt_seterr(rc, "%s: fsync directory after sealing %s: %s", root, final,
                           strerror(errno));
    if (stale)
        (void)ckpt_remove_tree(AT_FDCWD, tmpdir, tmpdir);
    return CKPT_OK;
}

int ckpt_local_seal(const char *root, uint64_t step, const ckpt_tensor_t *tensors,
                    size_t ntensors, const char *record_json, const ckpt_opts_t *opts,
                    const ckpt_shard_info_t *infos, int nshards, int keep, int *present)
{
    char name[CKPT_FILE_NAME_MAX], tmp_name[CKPT_FILE_NAME_MAX], tmpdir[CKPT_PATH_MAX],
         final[CKPT_PATH_MAX];
    ckpt_opts_t defaults;
    uint64_t total = 0;
    int rc, held = 0, committed = 0;

    if (present)
        *present = 0;
    if (!opts) {
        ckpt_opts_default(&defaults);
        opts = &defaults;
    }
    rc = check_seal(root, step, tensors, ntensors, record_json, opts, infos, nshards,
                    keep, &total);
    if (rc != CKPT_OK)
        return rc;
    ckpt_step_dirname(step, name, sizeof name);
    ckpt_tmp_dirname(step, tmp_name, sizeof tmp_name);
    if ((rc = ckpt_path_join(tmpdir, sizeof tmpdir, root, tmp_name)) != CKPT_OK ||
        (rc = ckpt_path_join(final, sizeof final, root, name)) != CKPT_OK)
        return rc;
    /* [SHARDS WRITTEN] -> [MANIFEST WRITTEN] */
    rc = check_present(tmpdir, infos, nshards, &held);
    if (rc == CKPT_OK) {
        ckpt_remove_strays(tmpdir, nshards);
        rc = ckpt_write_manifest(tmpdir, step, tensors, ntensors, total, record_json,
                                 opts, infos, nshards);
    }
    /* -> [SEALED]: the commit point */
    if (rc == CKPT_OK)
        rc = publish(root, tmpdir, final, opts->fsync, &committed);
    if (!committed)
        goto fail;
    if (present)
        *present = held;
    if (rc != CKPT_OK) /* sealed, but perhaps not durable: never undone */
        return rc;
    rc = ckpt_prune(root, keep, name, NULL);
    if (rc != CKPT_OK)
        rc = ckpt_seterr(rc, "%s sealed, but pruning older steps failed: %s", final,
                         ckpt_last_error());
    return rc;
fail: {
    /* The node's save of this step failed: its temp dir is garbage (its
     * message is kept over the removal's). */
    char msg[CKPT_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", ckpt_last_error());
    (void)ckpt_remove_tree(AT_FDCWD, tmpdir, tmpdir);
    return ckpt_seterr(rc, "%s", msg);
}
}

/* ---- listing and verifying -------------------------------------------- */

static int cmp_step_desc(const void *left, const void *right)
{
    const ckpt_local_step_t *one = left, *other = right;
    return one->step < other->step ? 1 : one->step > other->step ? -1 : 0;
}

/* Describe the opened step directory dir into *out. */
static int describe(const ckpt_local_dir_t *dir, ckpt_local_step_t *out)
{
    const ckpt_manifest_t *manifest = &dir->manifest;
    memset(out, 0, sizeof *out);
    out->present = calloc((size_t)manifest->nshards, 1);
    if (!out->present)
        return ckpt_seterr(CKPT_ENOMEM, "out of memory");
    out->step = manifest->step;
    out->nshards = manifest->nshards;
    out->total_bytes = manifest->total_bytes;
    for (int i = 0; i < manifest->nshards; i++) {
        if (!ckpt_local_shard_held(dir->dirfd, i, &manifest->shards[i]))
            continue;
        out->present[i] = 1;
        out->npresent++;
        out->present_bytes += manifest->shards[i].file_bytes;
    }
    return CKPT_OK;
}

int ckpt_local_scan(const char *root, ckpt_local_step_t **out, size_t *count)
{
    DIR *dir;
    struct dirent *entry;
    ckpt_local_step_t *steps = NULL;
    size_t nsteps = 0, cap = 0;
    int rc = CKPT_OK;

    if (!root || !out || !count)
        return ckpt_seterr(CKPT_EINVAL, "local_scan: NULL argument");
    *out = NULL;
    *count = 0;
    if (!(dir = opendir(root))) {
        if (errno == ENOENT)
            return CKPT_OK; /* no root yet: no step */
        return ckpt_seterr(CKPT_EIO, "%s: cannot open: %s", root, strerror(errno));
    }
    while (rc == CKPT_OK && (errno = 0, entry = readdir(dir)) != NULL) {
        char path[CKPT_PATH_MAX];
        uint64_t step;
        struct stat st;
        ckpt_local_dir_t step_dir;
        if (!ckpt_parse_dirname(entry->d_name, 0, &step) ||
            fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode) || /* a link is never followed (I8) */
            ckpt_path_join(path, sizeof path, root, entry->d_name) != CKPT_OK)
            continue;
        int opened = ckpt_local_dir_open(&step_dir, path);
        if (opened == CKPT_ENOMEM)
            rc = opened;
        if (opened == CKPT_OK && nsteps == cap) {
            ckpt_local_step_t *grown = ckpt_grow(steps, &cap, sizeof *steps, 16);
            if (!grown)
                rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
            else
                steps = grown;
        }
        if (opened == CKPT_OK && rc == CKPT_OK &&
            (rc = describe(&step_dir, &steps[nsteps])) == CKPT_OK)
            nsteps++;
        ckpt_local_dir_close(&step_dir);
        /* Anything else that fails to open (no manifest, a bad one, gone
         * meanwhile) is not a sealed step: left out. */
    }
    if (rc == CKPT_OK && errno != 0)
        rc = ckpt_seterr(CKPT_EIO, "%s: readdir: %s", root, strerror(errno));
    closedir(dir);
    if (rc != CKPT_OK) {
        ckpt_local_scan_free(steps, nsteps);
        return rc;
    }
    if (nsteps > 1)
        qsort(steps, nsteps, sizeof *steps, cmp_step_desc);
    *out = steps;
    *count = nsteps;
    return CKPT_OK;
}

void ckpt_local_scan_free(ckpt_local_step_t *steps, size_t count)
{
    if (!steps)
        return;
    for (size_t i = 0; i < count; i++)
        free(steps[i].present);
    free(steps);
}

int ckpt_local_verify(const char *stepdir, int *missing)
{
    ckpt_local_dir_t dir;
    unsigned char *absent = NULL;
    int rc, nabsent = 0;

    if (missing)
        *missing = 0;
    if (!stepdir)
        return ckpt_seterr(CKPT_EINVAL, "local_verify: NULL directory");
    rc = ckpt_local_dir_open(&dir, stepdir);
    if (rc == CKPT_OK && !(absent = calloc((size_t)dir.manifest.nshards, 1)))
        rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
    if (rc == CKPT_OK) {
        const ckpt_manifest_t *manifest = &dir.manifest;
        for (int i = 0; i < manifest->nshards; i++)
            nabsent += absent[i] = (unsigned char)shard_absent(dir.dirfd, i);
        if (missing)
            *missing = nabsent;
        for (int i = 0; i < manifest->nshards && rc == CKPT_OK; i++)
            if (!absent[i])
                rc = check_shard(dir.dirfd, dir.path, i, &manifest->shards[i], 1);
    }
    free(absent);
    ckpt_local_dir_close(&dir);
    return rc;
}

/* ---- dropping steps newer than a resume ------------------------------- */

/* Remove the committed step directory root/name of step: renamed to its
 * temp name first (I7), the root fsync'd, then removed. */
static int drop_step(const char *root, const char *name, uint64_t step)
{
    char path[CKPT_PATH_MAX], tmp_path[CKPT_PATH_MAX], tmp_name[CKPT_FILE_NAME_MAX];
    int rc;
    ckpt_tmp_dirname(step, tmp_name, sizeof tmp_name);
    if ((rc = ckpt_path_join(path, sizeof path, root, name)) != CKPT_OK ||
        (rc = ckpt_path_join(tmp_path, sizeof tmp_path, root, tmp_name)) != CKPT_OK ||
        (rc = ckpt_remove_tree(AT_FDCWD, tmp_path, tmp_path)) != CKPT_OK)
        return rc;
    if (rename(path, tmp_path) != 0)
        return errno == ENOENT ? CKPT_OK
                               : ckpt_seterr(CKPT_EIO, "rename %s -> %s: %s", path,
                                             tmp_path, strerror(errno));
    if ((rc = ckpt_fsync_dir(root)) != CKPT_OK)
        return rc;
    return ckpt_remove_tree(AT_FDCWD, tmp_path, tmp_path);
}

static void count_moved(void *ctx, const char *from, const char *to)
{
    (void)from, (void)to;
    (*(int *)ctx)++;
}

int ckpt_local_drop_after(const char *root, uint64_t step, int *removed)
{
    ckpt_entry_t *entries = NULL;
    size_t count = 0;
    int rc, dropped = 0;

    if (removed)
        *removed = 0;
    if (!root || !*root)
        return ckpt_seterr(CKPT_EINVAL, "local_drop_after: no root");
    rc = ckpt_list(root, 0, &entries, &count);
    if (rc == CKPT_ENOTFOUND)
        return CKPT_OK;
    for (size_t i = 0; rc == CKPT_OK && i < count; i++) {
        const ckpt_entry_t *entry = &entries[i];
        char path[CKPT_PATH_MAX];
        if (entry->step <= step)
            continue;
        if (entry->name[0] == '.') { /* a save's temp dir */
            if ((rc = ckpt_path_join(path, sizeof path, root, entry->name)) == CKPT_OK &&
                (rc = ckpt_remove_tree(AT_FDCWD, path, path)) == CKPT_OK)
                dropped++;
        } else if (entry->status == CKPT_ST_COMMITTED) {
            if ((rc = drop_step(root, entry->name, entry->step)) == CKPT_OK)
                dropped++;
        }
    }
    free(entries);
    /* What is left above step is corrupt or a link: moved aside (I9). */
    if (rc == CKPT_OK)
        rc = ckpt_set_aside_after(root, step, count_moved, &dropped);
    if (dropped > 0) {
        int synced = ckpt_fsync_dir(root);
        if (rc == CKPT_OK)
            rc = synced;
    }
    if (removed)
        *removed = dropped;
    return rc;
}
