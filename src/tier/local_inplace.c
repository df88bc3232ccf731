/*
 * local_inplace.c - the node-local tier's files for the save in place
 * (local_inplace_internal.h).
 *
 * Where a node's root is memory (tmpfs, ramfs: /dev/shm, most per-job
 * TMPDIRs on diskless nodes) and local shards are stored (level 0), a
 * stored shard file is its header, the slice's raw bytes, the seek table
 * and the footer.  So the training stall copies the rank's slice straight
 * into a mapped file at CKPT_STORED_DATA_OFFSET, the helper thread writes
 * the rest around it (ckpt_stored_shard_finish) and renames the file into
 * the save's temp directory (ckpt_shard_adopt), and the partner copies are
 * received straight into mapped files that are checked and renamed the same
 * way.  There is no snapshot buffer, no receive buffer, and no write of
 * either into new tmpfs pages: the file's pages are the snapshot.
 *
 * The files are kept across saves: when a save is sealed, the step that
 * falls out of the tier's retention is pruned, and each rank first takes
 * its own files back out of it (ckpt_local_reclaim) into <root>/.spare,
 * already in memory, for the next save.  Their mappings are kept too
 * (read-only while their step is sealed: tier_files_retire), so a file
 * taken back needs no new mapping: mapping and unmapping a shard's tmpfs
 * pages costs CPU on every save, which on a node whose cores the ranks
 * fill is training time.  So a node holds its `keep` local checkpoints and
 * one spare set, as much as during a save before, and a rank's own memory
 * holds nothing besides.  On a disk-backed directory the tier writes
 * shards with write() instead (local_helper.c): there a write
 * through a shared mapping faults on every page after each writeback, and
 * a reused file's pages may have to be read back first.
 */
#include "tier/local_inplace_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "ftrain/ckpt_local.h"
#include "util/util.h"

#define TMPFS_FS_MAGIC 0x01021994
#define RAMFS_FS_MAGIC 0x858458f6

int tier_files_in_memory(const char *dir)
{
    struct statfs fs;
    if (statfs(dir, &fs) != 0)
        return 0;
    return (unsigned long)fs.f_type == TMPFS_FS_MAGIC ||
           (unsigned long)fs.f_type == RAMFS_FS_MAGIC;
}

int tier_files_clear(const char *root)
{
    char dir[CONFIG_PATH_MAX + 16];
    if (snprintf(dir, sizeof dir, "%s/" TIER_SPARE_DIR, root) >= (int)sizeof dir) {
        errno = ENAMETOOLONG;
        return TIER_EFAIL;
    }
    /* Never followed: a link (or a file) of that name is removed itself. */
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? TIER_OK : TIER_EFAIL;
    if (!S_ISDIR(st.st_mode))
        return unlink(dir) == 0 || errno == ENOENT ? TIER_OK : TIER_EFAIL;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return TIER_EFAIL;
    }
    struct dirent *e;
    int rc = TIER_OK;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            unlinkat(dirfd(d), e->d_name, 0) != 0 &&
            (errno != EISDIR || unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) != 0) &&
            errno != ENOENT)
            rc = TIER_EFAIL;
    closedir(d);
    if (rmdir(dir) != 0 && errno != ENOENT)
        rc = TIER_EFAIL;
    return rc;
}

int tier_files_init(tier_files_t *f, const char *root, int rank, int nfiles, char *err,
                    size_t cap)
{
    memset(f, 0, sizeof *f);
    char dir[CONFIG_PATH_MAX + 16];
    if (snprintf(f->root, sizeof f->root, "%s", root) >= (int)sizeof f->root ||
        snprintf(dir, sizeof dir, "%s/" TIER_SPARE_DIR, root) >= (int)sizeof dir)
        return util_fail(err, cap, TIER_EFAIL, "local tier: '%s' is too long", root);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return util_fail(err, cap, TIER_EFAIL, "local tier: cannot create '%s': %s", dir,
                         strerror(errno));
    if (!(f->files = calloc((size_t)nfiles, sizeof *f->files)) ||
        !(f->kept = calloc((size_t)nfiles * TIER_KEPT_MAX, sizeof *f->kept))) {
        free(f->files);
        f->files = NULL;
        return util_fail(err, cap, TIER_ENOMEM, "local tier: out of memory");
    }
    f->nfiles = nfiles;
    for (int j = 0; j < nfiles * TIER_KEPT_MAX; j++)
        f->kept[j].fd = -1;
    for (int k = 0; k < nfiles; k++) {
        f->files[k].fd = -1;
        snprintf(f->files[k].path, sizeof f->files[k].path, "%s/rank-%d-%d", dir, rank, k);
    }
    return TIER_OK;
}

/* Unmap and close one mapping (a spare's or a kept one), and mark it so. */
static void release(int *fd, unsigned char **map, uint64_t *len)
{
    if (*map)
        util_unmap(*map, (size_t)*len);
    if (*fd >= 0)
        close(*fd);
    *map = NULL;
    *fd = -1;
    *len = 0;
}

static void unmap_one(tier_file_t *x)
{
    release(&x->fd, &x->map, &x->len);
}

static void drop_kept(tier_kept_t *e)
{
    release(&e->fd, &e->map, &e->len);
}

int tier_files_ready(const tier_files_t *f, int k, uint64_t len)
{
    const tier_file_t *x = &f->files[k];
    return x->map && !x->adopted && x->len == len;
}

int tier_files_map(tier_files_t *f, int k, uint64_t len, char *err, size_t cap)
{
    tier_file_t *x = &f->files[k];
    if (tier_files_ready(f, k, len))
        return TIER_OK;
    unmap_one(x);
    x->adopted = 0;
    if (len == 0 || (uint64_t)(size_t)len != len || (uint64_t)(off_t)len != len)
        return util_fail(err, cap, TIER_EFAIL, "local tier: a file of %llu bytes cannot be "
                         "mapped",
                         (unsigned long long)len);
    int fd = open(x->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 && errno == ENOENT) {
        /* The node's directory went (removed by hand): made again, one
         * level, as a save's temp directory is. */
        char dir[CONFIG_PATH_MAX + 16];
        snprintf(dir, sizeof dir, "%s/" TIER_SPARE_DIR, f->root);
        if ((mkdir(f->root, 0755) == 0 || errno == EEXIST) &&
            (mkdir(dir, 0755) == 0 || errno == EEXIST))
            fd = open(x->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    }
    struct stat st;
    int e = 0;
    if (fd < 0 || fstat(fd, &st) != 0)
        e = errno;
    else if (!S_ISREG(st.st_mode))
        e = EINVAL;
    else if (ftruncate(fd, (off_t)len) != 0)
        e = errno;
    else /* every page allocated now, on this thread, not at the first write */
        e = posix_fallocate(fd, 0, (off_t)len);
    if (e) {
        if (fd >= 0)
            close(fd);
        return util_fail(err, cap, TIER_EFAIL, "local tier: cannot make '%s' %llu bytes: %s%s",
                         x->path, (unsigned long long)len, strerror(e),
                         e == ENOSPC ? " (the node's memory file system is full)" : "");
    }
    /* Populated in pieces (util_map_file): the training thread runs on. */
    void *map = util_map_file(fd, (size_t)len, PROT_READ | PROT_WRITE);
    if (map == MAP_FAILED) {
        e = errno;
        close(fd);
        return util_fail(err, cap, TIER_EFAIL, "local tier: cannot map '%s' (%llu bytes): %s",
                         x->path, (unsigned long long)len, strerror(e));
    }
    x->fd = fd;
    x->map = map;
    x->len = len;
    return TIER_OK;
}

int tier_files_adopt(tier_files_t *f, int k, const char *root, uint64_t step, int index,
                     char *err, size_t cap)
{
    tier_file_t *x = &f->files[k];
    if (!x->map || x->adopted)
        return util_fail(err, cap, TIER_EFAIL, "local tier: file %d is not mapped", k);
    if (msync(x->map, (size_t)x->len, MS_SYNC) != 0 || fsync(x->fd) != 0)
        return util_fail(err, cap, TIER_EFAIL, "local tier: cannot sync '%s': %s", x->path,
                         strerror(errno));
    int rc = ckpt_shard_adopt(root, step, index, x->path);
    if (rc != CKPT_OK)
        return util_fail(err, cap, TIER_EFAIL, "%s: %s", ckpt_strerror(rc), ckpt_last_error());
    x->adopted = 1;
    return TIER_OK;
}

void tier_files_retire(tier_files_t *f, int64_t step)
{
    for (int k = 0; f->files && k < f->nfiles; k++) {
        tier_file_t *x = &f->files[k];
        if (!x->adopted || !x->map)
            continue;
        tier_kept_t *kept = &f->kept[k * TIER_KEPT_MAX], *e = NULL;
        for (int j = 0; j < TIER_KEPT_MAX && !e; j++)
            if (kept[j].fd < 0)
                e = &kept[j];
        if (!e) { /* no room: the oldest goes */
            e = &kept[0];
            for (int j = 1; j < TIER_KEPT_MAX; j++)
                if (kept[j].step < e->step)
                    e = &kept[j];
            drop_kept(e);
        }
        /* A sealed checkpoint's bytes: no write through this mapping. */
        mprotect(x->map, (size_t)x->len, PROT_READ);
        *e = (tier_kept_t){.fd = x->fd, .map = x->map, .len = x->len, .step = step};
        x->fd = -1;
        x->map = NULL;
        x->len = 0;
        x->adopted = 0;
    }
}

int tier_files_reclaim(tier_files_t *f, int k, const char *root, uint64_t step, int index)
{
    tier_file_t *x = &f->files[k];
    unmap_one(x);
    x->adopted = 0;
    tier_kept_t *e = NULL;
    for (int j = 0; j < TIER_KEPT_MAX && !e; j++)
        if (f->kept[k * TIER_KEPT_MAX + j].fd >= 0 &&
            f->kept[k * TIER_KEPT_MAX + j].step == (int64_t)step)
            e = &f->kept[k * TIER_KEPT_MAX + j];
    if (ckpt_local_reclaim(root, step, index, x->path) != CKPT_OK) {
        if (e)
            drop_kept(e);
        return 1;
    }
    if (!e)
        return 0;
    /* The file now at the spare's path must be the one mapped: same file
     * (device, inode), same size, and writable again. */
    struct stat held, now;
    if (fstat(e->fd, &held) == 0 && lstat(x->path, &now) == 0 && S_ISREG(now.st_mode) &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino &&
        (uint64_t)now.st_size == e->len &&
        mprotect(e->map, (size_t)e->len, PROT_READ | PROT_WRITE) == 0) {
        x->fd = e->fd;
        x->map = e->map;
        x->len = e->len;
        e->fd = -1;
        e->map = NULL;
        e->len = 0;
    } else {
        drop_kept(e);
    }
    return 0;
}

void tier_files_drop_before(tier_files_t *f, int64_t step)
{
    for (int j = 0; f->kept && j < f->nfiles * TIER_KEPT_MAX; j++)
        if (f->kept[j].fd >= 0 && f->kept[j].step < step)
            drop_kept(&f->kept[j]);
}

void tier_files_unmap_all(tier_files_t *f)
{
    for (int k = 0; f->files && k < f->nfiles; k++)
        unmap_one(&f->files[k]);
    for (int j = 0; f->kept && j < f->nfiles * TIER_KEPT_MAX; j++)
        drop_kept(&f->kept[j]);
}

void tier_files_free(tier_files_t *f, int remove)
{
    for (int k = 0; f->files && k < f->nfiles; k++) {
        unmap_one(&f->files[k]);
        if (remove && !f->files[k].adopted)
            unlink(f->files[k].path);
    }
    for (int j = 0; f->kept && j < f->nfiles * TIER_KEPT_MAX; j++)
        drop_kept(&f->kept[j]); /* sealed steps' files: they stay */
    free(f->files);
    free(f->kept);
    memset(f, 0, sizeof *f);
}
