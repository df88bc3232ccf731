/*
 * archive.c - export a committed checkpoint into a tar file and import one
 * back, through libarchive.
 *
 * An exported archive holds exactly one top-level directory named after the
 * step (ckpt_step_dirname) with regular files only:
 *
 *     step-00000042/manifest.json
 *     step-00000042/shard-*.ftsh
 *
 * written as a plain tar, or a zstd-compressed tar when the file name ends in
 * ".tar.zst" (or ".tzst").
 *
 * Export protocol (one commit point, the rename):
 *
 *     ckpt_open + ckpt_verify   the source is good before anything is written
 *     FILE.tmp                  open (O_NOFOLLOW), tar entries, close archive
 *     fsync(FILE.tmp)           data durable before it gets its name
 *     rename(FILE.tmp, FILE)    COMMIT
 *     fsync(dir of FILE)        the name is durable
 *
 * A failure before the rename unlinks FILE.tmp, so no partial FILE is left.
 *
 * Import protocol.  An archive is untrusted input, and it may be small while
 * declaring a lot: an entry may claim up to 1 TiB, a GNU sparse entry or a
 * compressed run of zeros expands to its full size when read.  So the archive
 * is made to describe itself before anything big is written.  Invariants:
 *   - nothing is written outside <root>/.import-XXXXXX/ until the final
 *     rename, and the rename never replaces an existing entry (renameat2
 *     with RENAME_NOREPLACE);
 *   - every entry is checked before a byte of it is written: a relative path
 *     of exactly "step-<N>/<name>" (an optional leading "./" is accepted),
 *     the same step-<N> for every entry, no "." / ".." / empty component, a
 *     regular file that is not sparse (a directory entry only for step-<N>
 *     itself), a name that is "manifest.json" or "shard-<i>.ftsh" (decimal
 *     i as ckpt_shard_name writes it), a declared size within limits;
 *   - manifest.json is the first file entry (only the step-<N>/ directory
 *     entry may precede it).  It is read into memory and parsed with
 *     ckpt_manifest_parse (every field, and manifest_xxh64 when present)
 *     before it or any shard is written, and its step must be the N of
 *     step-<N>;
 *   - every later file is shard-<i>.ftsh with i below the manifest's shard
 *     count and a declared size equal to shards[i].file_bytes, and no entry
 *     is written past its declared size: the bytes written are bounded by
 *     what the manifest names (at most 1 TiB per shard);
 *   - before the first file is written, the target file system must have
 *     that many bytes free (statvfs f_bavail * f_frsize), else CKPT_EIO;
 *   - files are created by this code with O_CREAT|O_EXCL|O_NOFOLLOW relative
 *     to a directory descriptor (never archive_write_disk), so a duplicate or
 *     a planted link fails instead of being followed;
 *   - every shard the manifest names is present, and the extracted
 *     checkpoint passes ckpt_open + ckpt_verify before it gets its name.
 *
 *     mkdtemp <root>/.import-XXXXXX/            temp dir, mode 0700
 *       -> mkdirat step-<N>/                    canonical name from the step
 *       -> read + parse manifest.json           EFORMAT/ECORRUPT/EARCHIVE
 *       -> statvfs: room for the shards?        EIO if not
 *       -> write manifest, extract + fsync each shard, fsync dirs
 *       -> ckpt_open + ckpt_verify              EARCHIVE/ECORRUPT on failure
 *       -> renameat2(NOREPLACE) to <root>/step-<N>   COMMIT (EEXIST if taken)
 *       -> fsync(root), rmdir temp dir, fsync(root)
 *
 * Any failure before the commit removes the temp dir, leaving root as it was
 * (apart from creating root itself when it was missing).
 */
#include "ckpt_internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <time.h>
#include <xxhash.h>

#include "ftrain/ckpt.h"

/* Limits on what an archive may declare.  A shard of a data-parallel
 * checkpoint is one slice of the state; 1 TiB is far beyond anything this
 * trainer writes and stops a forged size from filling the disk. */
#define ARC_MAX_FILE_BYTES (UINT64_C(1) << 40)
#define ARC_MAX_MANIFEST_BYTES (UINT64_C(64) << 20)
#define ARC_MAX_ENTRIES 65536
#define ARC_IO_CHUNK (1u << 20)

/* As arc_fail for a failed system call: appends strerror(errno). */
static int arc_fail_errno(const char *what, const char *path)
{
    int e = errno;
    int rc = ckpt_seterr(CKPT_EIO, "%s '%s': %s", what, path, strerror(e));
    errno = e;
    return rc;
}

/* ---- names ------------------------------------------------------------- */

/* Parse a shard file name exactly as ckpt_shard_name writes it:
 * "shard-<i>.ftsh", i decimal without leading zeros, below CKPT_MAX_SHARDS
 * (the manifest parser's limit).  Anything else ("shard-foo.ftsh",
 * "shard-01.ftsh") could never be opened as a shard, so it is refused as a
 * name rather than extracted.  @return 1 and *index on a match, 0 otherwise. */
static int arc_parse_shard_name(const char *s, int *index)
{
    size_t len = strlen(s);
    if (len <= 11 || strncmp(s, "shard-", 6) != 0 || strcmp(s + len - 5, ".ftsh") != 0)
        return 0;
    const char *d = s + 6;
    size_t nd = len - 11;
    if (nd > 5 || (nd > 1 && d[0] == '0'))
        return 0;
    long v = 0;
    for (size_t i = 0; i < nd; i++) {
        if (d[i] < '0' || d[i] > '9')
            return 0;
        v = v * 10 + (d[i] - '0');
    }
    if (v >= CKPT_MAX_SHARDS)
        return 0;
    *index = (int)v;
    return 1;
}

/* Is s one of the file names a checkpoint directory holds? */
static int arc_is_member_name(const char *s)
{
    int i;
    return strcmp(s, CKPT_MANIFEST_NAME) == 0 || arc_parse_shard_name(s, &i);
}

/* Parse "step-<digits>" (1 to 20 digits, no overflow) into *step. */
static int arc_parse_step_dir(const char *s, size_t len, uint64_t *step)
{
    if (len < 6 || len > 25 || strncmp(s, "step-", 5) != 0)
        return 0;
    uint64_t v = 0;
    for (size_t i = 5; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *step = v;
    return 1;
}

/* Does the archive name ask for zstd compression? */
static int arc_wants_zstd(const char *path)
{
    size_t len = strlen(path);
    return (len >= 8 && strcmp(path + len - 8, ".tar.zst") == 0) ||
           (len >= 5 && strcmp(path + len - 5, ".tzst") == 0);
}

static int arc_is_plain_tar(const char *path)
{
    size_t len = strlen(path);
    return len >= 4 && strcmp(path + len - 4, ".tar") == 0;
}

/* Copy the directory part of path ("." when none) into buf. */
static void arc_dirname(const char *path, char *buf, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(buf, cap, ".");
    } else if (slash == path) {
        snprintf(buf, cap, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= cap)
            n = cap - 1;
        memcpy(buf, path, n);
        buf[n] = '\0';
    }
}

/* ---- export ------------------------------------------------------------ */

/* Append one regular file to the archive as <top>/<name>.  When expect is
 * not NULL (a shard), the bytes copied must have the size and xxh64 the
 * manifest records, so the archive holds exactly what was verified even if
 * the file changed in between. */
static int arc_add_file(struct archive *a, const char *dir, const char *top,
                        const char *name, const ckpt_shard_info_t *expect, void *buf)
{
    int rc = CKPT_OK;
    int fd = -1;
    struct archive_entry *e = NULL;
    XXH64_state_t *h = NULL;
    char path[CKPT_PATH_MAX], ename[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(ename, sizeof ename, "%s/%s", top, name);

    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = arc_fail_errno("export: cannot open", path);
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = arc_fail_errno("export: cannot stat", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ckpt_seterr(CKPT_EINVAL, "export: '%s': not a regular file", path);
        goto fail;
    }
    if (expect && (uint64_t)st.st_size != expect->file_bytes) {
        rc = ckpt_seterr(CKPT_ECORRUPT,
                         "export: '%s': size changed since it was verified", path);
        goto fail;
    }
    e = archive_entry_new();
    h = XXH64_createState();
    if (!e || !h || XXH64_reset(h, 0) != XXH_OK) {
        rc = ckpt_seterr(CKPT_ENOMEM, "export: out of memory");
        goto fail;
    }
    archive_entry_set_pathname(e, ename);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)st.st_size);
    archive_entry_set_mtime(e, st.st_mtime, 0);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    if (archive_write_header(a, e) != ARCHIVE_OK) {
        rc = ckpt_seterr(CKPT_EARCHIVE, "export: '%s': cannot write header: %s", ename,
                         archive_error_string(a));
        goto fail;
    }
    uint64_t left = (uint64_t)st.st_size;
    while (left > 0) {
        size_t want = left < ARC_IO_CHUNK ? (size_t)left : ARC_IO_CHUNK;
        ssize_t got = read(fd, buf, want);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = arc_fail_errno("export: cannot read", path);
            goto fail;
        }
        if (got == 0) {
            rc = ckpt_seterr(CKPT_EIO, "export: '%s': file shrank while exporting",
                             path);
            goto fail;
        }
        XXH64_update(h, buf, (size_t)got);
        la_ssize_t w = archive_write_data(a, buf, (size_t)got);
        if (w != got) {
            rc = ckpt_seterr(CKPT_EIO, "export: '%s': cannot write data: %s", ename,
                             archive_error_string(a));
            goto fail;
        }
        left -= (uint64_t)got;
    }
    if (expect && XXH64_digest(h) != expect->xxh64)
        rc = ckpt_seterr(CKPT_ECORRUPT,
                         "export: '%s': contents changed since it was verified", path);
fail:
    XXH64_freeState(h);
    archive_entry_free(e);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Create a fresh temporary file beside path: "<path>.tmp.<pid>.<n>", made
 * with O_EXCL so that it is never a file, link or FIFO someone else has
 * (or another export's).  @return the descriptor, or -1 with errno set. */
static int arc_create_tmp(const char *path, char *tmp, size_t cap)
{
    static unsigned counter;
    for (int tries = 0; tries < 100; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) ^
                     (unsigned)ts.tv_nsec;
        if (snprintf(tmp, cap, "%s.tmp.%ld.%08x", path, (long)getpid(), n) >= (int)cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

int ckpt_export(const char *ckpt_dir, const char *archive_path, int replace)
{
    int rc = CKPT_OK;
    ckpt_t *c = NULL;
    struct archive *a = NULL;
    int fd = -1, tmp_made = 0;
    void *buf = NULL;
    char tmp[CKPT_PATH_MAX], top[64], parent[CKPT_PATH_MAX];

    if (!ckpt_dir || !archive_path || !*ckpt_dir || !*archive_path) {
        rc = ckpt_seterr(CKPT_EINVAL, "export: missing checkpoint or archive path");
        goto fail;
    }
    if (!arc_wants_zstd(archive_path) && !arc_is_plain_tar(archive_path)) {
        rc = ckpt_seterr(CKPT_EINVAL,
                         "export: '%s': archive name must end in .tar or .tar.zst",
                         archive_path);
        goto fail;
    }
    if (strlen(archive_path) + 32 >= sizeof tmp) {
        rc = ckpt_seterr(CKPT_EINVAL, "export: '%s': path too long", archive_path);
        goto fail;
    }
    if (!replace && access(archive_path, F_OK) == 0) {
        /* Checked again, atomically, at the rename; this saves the work. */
        rc = ckpt_seterr(CKPT_EEXIST, "export: '%s': file exists", archive_path);
        goto fail;
    }

    /* Verify first: never export a checkpoint that does not read back. */
    rc = ckpt_open(ckpt_dir, &c);
    if (rc != CKPT_OK)
        goto fail; /* ckpt_open set the message */
    rc = ckpt_verify(c);
    if (rc != CKPT_OK)
        goto fail;
    ckpt_step_dirname(ckpt_step(c), top, sizeof top);

    buf = malloc(ARC_IO_CHUNK);
    if (!buf) {
        rc = ckpt_seterr(CKPT_ENOMEM, "export: out of memory");
        goto fail;
    }
    fd = arc_create_tmp(archive_path, tmp, sizeof tmp);
    if (fd < 0) {
        rc = arc_fail_errno("export: cannot create a temporary file beside",
                            archive_path);
        goto fail;
    }
    tmp_made = 1;

    a = archive_write_new();
    if (!a) {
        rc = ckpt_seterr(CKPT_ENOMEM, "export: out of memory");
        goto fail;
    }
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        (arc_wants_zstd(archive_path) &&
         archive_write_add_filter_zstd(a) != ARCHIVE_OK) ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open_fd(a, fd) != ARCHIVE_OK) {
        rc = ckpt_seterr(CKPT_EARCHIVE, "export: '%s': cannot start archive: %s",
                         archive_path, archive_error_string(a));
        goto fail;
    }
    /* The manifest first, then the shards in rank order: exactly the files
     * the manifest names, nothing else that may lie in the directory. */
    rc = arc_add_file(a, ckpt_dir, top, CKPT_MANIFEST_NAME, NULL, buf);
    for (int i = 0; rc == CKPT_OK && i < ckpt_world_size(c); i++) {
        char shard[64];
        ckpt_shard_name(i, shard, sizeof shard);
        rc = arc_add_file(a, ckpt_dir, top, shard, ckpt_shard_at(c, i), buf);
    }
    if (rc != CKPT_OK)
        goto fail;
    if (archive_write_close(a) != ARCHIVE_OK) {
        rc = ckpt_seterr(CKPT_EIO, "export: '%s': cannot finish archive: %s", tmp,
                         archive_error_string(a));
        goto fail;
    }
    if (fsync(fd) != 0) {
        rc = arc_fail_errno("export: cannot fsync", tmp);
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = arc_fail_errno("export: cannot close", tmp);
        goto fail;
    }
    fd = -1;
    if ((replace ? rename(tmp, archive_path) : ckpt_rename_noreplace(tmp, archive_path)) != 0) {
        if (errno == EEXIST)
            rc = ckpt_seterr(CKPT_EEXIST, "export: '%s': file exists (it appeared "
                             "during the export; kept as it is)", archive_path);
        else
            rc = arc_fail_errno("export: cannot rename into place", archive_path);
        goto fail;
    }
    tmp_made = 0;
    arc_dirname(archive_path, parent, sizeof parent);
    if (ckpt_fsync_dir(parent) != 0) {
        rc = arc_fail_errno("export: cannot fsync directory", parent);
        goto fail;
    }

fail:
    if (a)
        archive_write_free(a); /* closes if still open; fd is ours */
    if (fd >= 0)
        close(fd);
    if (tmp_made)
        unlink(tmp);
    free(buf);
    ckpt_close(c);
    return rc;
}

/* ---- import ------------------------------------------------------------ */

/* Remove what an import created under dirfd/name: files, and one level of
 * subdirectories.  Best effort; used on the failure path only. */
static void arc_remove_tree(int dirfd, const char *name, int depth)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        DIR *d = fdopendir(fd);
        if (!d) {
            close(fd);
        } else {
            struct dirent *de;
            while ((de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                    continue;
                if (unlinkat(fd, de->d_name, 0) != 0 && errno == EISDIR && depth > 0)
                    arc_remove_tree(fd, de->d_name, depth - 1);
            }
            closedir(d);
        }
    }
    unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* Create dir and any missing parents (mode 0755).  @return 0 or -1. */
static int arc_mkdir_p(const char *dir)
{
    char buf[CKPT_PATH_MAX];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        buf[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* State of one import. */
typedef struct {
    const char *archive; /* archive path, for messages */
    const char *root;    /* destination root, for messages */
    int have_top;
    uint64_t step;  /* from the top directory name */
    char top[32];   /* top directory name as in the archive */
    char canon[64]; /* canonical step directory name */
    int stepfd;     /* <tmp>/<canon>, -1 until the first entry */
    int have_manifest;
    ckpt_manifest_t man; /* parsed from the first file entry */
    size_t nshards;
    size_t nentries;
} arc_import_t;

/* Check one entry's path and split off its file name.  Sets the top
 * directory on the first entry.  *is_top_dir is set for "step-<N>/" itself.
 * @return CKPT_OK or CKPT_EARCHIVE with the message set. */
static int arc_check_path(arc_import_t *im, const char *raw, const char **leaf,
                          int *is_top_dir)
{
    const char *p = raw;
    *is_top_dir = 0;
    if (!p || !*p)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry with an empty name",
                           im->archive);
    if (p[0] == '/')
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': absolute path",
                           im->archive, raw);
    /* Any ".." component anywhere, checked before anything else. */
    for (const char *s = p; *s;) {
        const char *end = strchr(s, '/');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s': '..' path component",
                               im->archive, raw);
        s += n;
        if (*s == '/')
            s++;
    }
    while (p[0] == '.' && p[1] == '/')
        p += 2;
    const char *slash = strchr(p, '/');
    size_t toplen = slash ? (size_t)(slash - p) : strlen(p);
    uint64_t step = 0;
    if (!arc_parse_step_dir(p, toplen, &step))
        return ckpt_seterr(CKPT_EARCHIVE,
                           "import: '%s': entry '%s': not inside a step-<N>/ directory",
                           im->archive, raw);
    if (!im->have_top) {
        memcpy(im->top, p, toplen);
        im->top[toplen] = '\0';
        im->step = step;
        im->have_top = 1;
    } else if (strlen(im->top) != toplen || strncmp(im->top, p, toplen) != 0) {
        return ckpt_seterr(CKPT_EARCHIVE,
                           "import: '%s': entry '%s': second top-level directory "
                           "(first was '%s')",
                           im->archive, raw, im->top);
    }
    if (!slash || slash[1] == '\0') {
        *is_top_dir = 1;
        *leaf = NULL;
        return CKPT_OK;
    }
    const char *name = slash + 1;
    if (strchr(name, '/'))
        return ckpt_seterr(CKPT_EARCHIVE,
                           "import: '%s': entry '%s': nested path inside '%s'",
                           im->archive, raw, im->top);
    if (!arc_is_member_name(name))
        return ckpt_seterr(CKPT_EARCHIVE,
                           "import: '%s': entry '%s': not a checkpoint file name "
                           "(manifest.json or shard-<i>.ftsh)",
                           im->archive, raw);
    *leaf = name;
    return CKPT_OK;
}

/* Create leaf under im->stepfd for entry ename.  @return the descriptor, or
 * -1 with the message set (*rc: EARCHIVE for a duplicate, EIO otherwise). */
static int arc_create(arc_import_t *im, const char *ename, const char *leaf, int *rc)
{
    int fd = openat(im->stepfd, leaf,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0)
        return fd;
    if (errno == EEXIST)
        *rc = ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': duplicate",
                          im->archive, ename);
    else
        *rc = ckpt_seterr(CKPT_EIO, "import: cannot create '%s' from '%s': %s", leaf,
                          im->archive, strerror(errno));
    return -1;
}

/* fsync and close a file made by arc_create; rc is the result so far.  The
 * descriptor is closed whatever happens.  @return rc or the first error. */
static int arc_finish(arc_import_t *im, int fd, const char *leaf, int rc)
{
    if (rc == CKPT_OK && fsync(fd) != 0)
        rc = ckpt_seterr(CKPT_EIO, "import: cannot fsync '%s' from '%s': %s", leaf,
                         im->archive, strerror(errno));
    if (close(fd) != 0 && rc == CKPT_OK)
        rc = ckpt_seterr(CKPT_EIO, "import: cannot close '%s' from '%s': %s", leaf,
                         im->archive, strerror(errno));
    return rc;
}

/* Read the current entry's data, exactly size bytes, into the file fd, or
 * into mem (room for size bytes) when fd < 0.  A piece that
 * would go past the declared size is refused before it is passed on, so an
 * entry never yields more than it declared, whatever the archive holds. */
static int arc_read_entry(arc_import_t *im, struct archive *a, const char *ename,
                          const char *leaf, uint64_t size, void *buf, int fd,
                          char *mem)
{
    uint64_t done = 0;
    for (;;) {
        la_ssize_t got = archive_read_data(a, buf, ARC_IO_CHUNK);
        if (got == 0)
            break;
        if (got < 0)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': %s",
                               im->archive, ename, archive_error_string(a));
        if ((uint64_t)got > size - done)
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s': more data than its size",
                               im->archive, ename);
        if (fd < 0)
            memcpy(mem + done, buf, (size_t)got);
        else if (ckpt_write_all(fd, buf, (size_t)got) != 0)
            return ckpt_seterr(CKPT_EIO, "import: cannot write '%s' from '%s': %s",
                               leaf, im->archive, strerror(errno));
        done += (uint64_t)got;
    }
    if (done != size)
        return ckpt_seterr(CKPT_EARCHIVE,
                           "import: '%s': entry '%s': truncated (%" PRIu64 " of %" PRIu64
                           " bytes)",
                           im->archive, ename, done, size);
    return CKPT_OK;
}

/* The manifest entry: read it into memory (at most ARC_MAX_MANIFEST_BYTES),
 * parse and check it against the archive, check that the file system has
 * room for the shards it names, and only then write it to disk.  After this
 * every shard entry has a known name and size to be held to. */
static int arc_take_manifest(arc_import_t *im, struct archive *a, int tmpfd,
                             const char *ename, uint64_t size, void *buf)
{
    int rc;
    char *text = malloc(size ? (size_t)size : 1);
    if (!text)
        return ckpt_seterr(CKPT_ENOMEM, "import: out of memory");
    rc = arc_read_entry(im, a, ename, CKPT_MANIFEST_NAME, size, buf, -1, text);
    if (rc != CKPT_OK)
        goto out;

    /* The parser validates every field (and manifest_xxh64 when present);
     * its error, with its code (EFORMAT, ECORRUPT, EVERSION), is the
     * import's, reported before any shard byte is written. */
    char what[CKPT_PATH_MAX + 160];
    snprintf(what, sizeof what, "import: '%s': %s", im->archive, ename);
    rc = ckpt_manifest_parse(text, (size_t)size, what, &im->man);
    if (rc != CKPT_OK)
        goto out;
    im->have_manifest = 1;
    if (im->man.step != im->step) {
        rc = ckpt_seterr(CKPT_EARCHIVE,
                         "import: '%s': directory '%s' holds the manifest of step "
                         "%" PRIu64,
                         im->archive, im->top, im->man.step);
        goto out;
    }
    /* The parser accepts sizes up to 2^53; an archive entry may not be over
     * ARC_MAX_FILE_BYTES, so a manifest naming a bigger shard can never be
     * satisfied.  With at most CKPT_MAX_SHARDS shards of 2^40 bytes the sum
     * below cannot overflow. */
    uint64_t need = 0;
    for (int i = 0; i < im->man.nshards; i++) {
        if (im->man.shards[i].file_bytes > ARC_MAX_FILE_BYTES) {
            rc = ckpt_seterr(CKPT_EARCHIVE,
                             "import: '%s': %s: shards[%d].file_bytes %" PRIu64
                             " exceeds the limit of %" PRIu64,
                             im->archive, ename, i, im->man.shards[i].file_bytes,
                             ARC_MAX_FILE_BYTES);
            goto out;
        }
        need += im->man.shards[i].file_bytes;
    }
    /* Fail now rather than after filling the disk: the shards will take
     * exactly `need` bytes (each is held to its file_bytes).  f_bavail is
     * what an unprivileged writer may use. */
    struct statvfs vfs;
    if (fstatvfs(tmpfd, &vfs) != 0) {
        rc = arc_fail_errno("import: cannot get free space of", im->root);
        goto out;
    }
    uint64_t frsize = vfs.f_frsize ? (uint64_t)vfs.f_frsize : (uint64_t)vfs.f_bsize;
    uint64_t avail = (uint64_t)vfs.f_bavail;
    uint64_t free_bytes = frsize && avail > UINT64_MAX / frsize ? UINT64_MAX
                                                                : avail * frsize;
    if (need > free_bytes) {
        rc = ckpt_seterr(CKPT_EIO,
                         "import: '%s': not enough space in '%s': the checkpoint "
                         "needs %" PRIu64 " bytes, %" PRIu64 " are free",
                         im->archive, im->root, need, free_bytes);
        goto out;
    }

    int fd = arc_create(im, ename, CKPT_MANIFEST_NAME, &rc);
    if (fd < 0)
        goto out;
    if (ckpt_write_all(fd, text, (size_t)size) != 0)
        rc = ckpt_seterr(CKPT_EIO, "import: cannot write '%s' from '%s': %s",
                         CKPT_MANIFEST_NAME, im->archive, strerror(errno));
    rc = arc_finish(im, fd, CKPT_MANIFEST_NAME, rc);
out:
    free(text);
    return rc;
}

/* Copy the current entry's data (a shard, size bytes) into a new file leaf
 * under im->stepfd. */
static int arc_extract_file(arc_import_t *im, struct archive *a, const char *ename,
                            const char *leaf, uint64_t size, void *buf)
{
    int rc = CKPT_OK;
    int fd = arc_create(im, ename, leaf, &rc);
    if (fd < 0)
        return rc;
    rc = arc_read_entry(im, a, ename, leaf, size, buf, fd, NULL);
    return arc_finish(im, fd, leaf, rc);
}

/* Read every entry of the archive into tmpfd/<canonical step dir>. */
static int arc_extract_all(arc_import_t *im, struct archive *a, int rootfd, int tmpfd,
                           void *buf)
{
    int rc = CKPT_OK;
    struct archive_entry *e;
    for (;;) {
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': %s%s", im->archive,
                               im->nentries ? "after entry "
                                            : "not a readable tar "
                                              "archive: ",
                               archive_error_string(a) ? archive_error_string(a)
                                                       : "unknown error");
        if (++im->nentries > ARC_MAX_ENTRIES)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': more than %d entries",
                               im->archive, ARC_MAX_ENTRIES);
        const char *ename = archive_entry_pathname(e);
        const char *leaf = NULL;
        int is_top_dir = 0;
        rc = arc_check_path(im, ename, &leaf, &is_top_dir);
        if (rc != CKPT_OK)
            return rc;
        mode_t type = archive_entry_filetype(e);
        if (archive_entry_hardlink(e))
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': hard link",
                               im->archive, ename);
        if (archive_entry_symlink(e) || type == AE_IFLNK)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': symbolic link",
                               im->archive, ename);
        if (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFIFO ||
            type == AE_IFSOCK)
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s': device, fifo or socket",
                               im->archive, ename);
        if (is_top_dir) {
            if (type != AE_IFDIR)
                return ckpt_seterr(CKPT_EARCHIVE,
                                   "import: '%s': entry '%s': not a directory",
                                   im->archive, ename);
        } else if (type != AE_IFREG) {
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s': not a regular file",
                               im->archive, ename);
        }
        int is_manifest = !is_top_dir && strcmp(leaf, CKPT_MANIFEST_NAME) == 0;
        /* The manifest comes first so that every shard can be checked
         * against it before a byte of the shard is written. */
        if (!is_top_dir && !is_manifest && !im->have_manifest)
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s' comes before "
                               "%s/manifest.json: the manifest must be the first "
                               "file of the archive (ckptctl export writes it "
                               "first; by hand: tar cf X.tar %s/manifest.json "
                               "%s/shard-*.ftsh)",
                               im->archive, ename, im->top, im->top, im->top);
        if (is_manifest && im->have_manifest)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': duplicate",
                               im->archive, ename);
        /* libarchive fills the holes of a sparse entry with zeros: a tiny
         * archive could expand to its whole declared size.  Export never
         * writes one. */
        if (!is_top_dir && archive_entry_sparse_count(e) > 0)
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s': sparse file (not "
                               "accepted: holes would be written as zeros)",
                               im->archive, ename);

        if (im->stepfd < 0) {
            /* First entry: fix the destination name and fail fast when it is
             * taken (the final rename checks again, atomically). */
            struct stat st;
            ckpt_step_dirname(im->step, im->canon, sizeof im->canon);
            if (fstatat(rootfd, im->canon, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return ckpt_seterr(CKPT_EEXIST,
                                   "import: '%s': checkpoint '%s' already exists "
                                   "in '%s'",
                                   im->archive, im->canon, im->root);
            if (mkdirat(tmpfd, im->canon, 0755) != 0)
                return ckpt_seterr(CKPT_EIO, "import: cannot create '%s': %s",
                                   im->canon, strerror(errno));
            im->stepfd = openat(tmpfd, im->canon,
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (im->stepfd < 0)
                return ckpt_seterr(CKPT_EIO, "import: cannot open '%s': %s", im->canon,
                                   strerror(errno));
        }
        if (is_top_dir) {
            if (archive_read_data_skip(a) != ARCHIVE_OK)
                return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': %s",
                                   im->archive, ename, archive_error_string(a));
            continue;
        }

        if (!archive_entry_size_is_set(e) || archive_entry_size(e) < 0)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': no size",
                               im->archive, ename);
        uint64_t size = (uint64_t)archive_entry_size(e);
        uint64_t limit = is_manifest ? ARC_MAX_MANIFEST_BYTES : ARC_MAX_FILE_BYTES;
        if (size > limit)
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s': size %" PRIu64
                               " bytes exceeds the limit of %" PRIu64,
                               im->archive, ename, size, limit);
        if (is_manifest) {
            rc = arc_take_manifest(im, a, tmpfd, ename, size, buf);
            if (rc != CKPT_OK)
                return rc;
            continue;
        }

        /* A shard: its index and size must be the manifest's. */
        int idx = -1;
        arc_parse_shard_name(leaf, &idx); /* arc_check_path checked the form */
        if (idx < 0 || idx >= im->man.nshards)
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s': shard %d, but the manifest "
                               "names %d shard%s",
                               im->archive, ename, idx, im->man.nshards,
                               im->man.nshards == 1 ? "" : "s");
        if (size != im->man.shards[idx].file_bytes)
            return ckpt_seterr(CKPT_EARCHIVE,
                               "import: '%s': entry '%s': declares %" PRIu64
                               " bytes, the manifest's shards[%d].file_bytes is "
                               "%" PRIu64,
                               im->archive, ename, size, idx,
                               im->man.shards[idx].file_bytes);
        rc = arc_extract_file(im, a, ename, leaf, size, buf);
        if (rc != CKPT_OK)
            return rc;
        im->nshards++;
    }
    if (im->nentries == 0)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': archive is empty",
                           im->archive);
    if (!im->have_manifest)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': no %s/manifest.json",
                           im->archive, im->top);
    /* Names are in range and unique (O_EXCL), so a short count means a
     * missing shard: name the first one. */
    if (im->nshards != (size_t)im->man.nshards) {
        char name[64] = "";
        struct stat st;
        int i = 0;
        for (; i < im->man.nshards; i++) {
            ckpt_shard_name(i, name, sizeof name);
            if (fstatat(im->stepfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
                break;
        }
        return ckpt_seterr(CKPT_EARCHIVE,
                           "import: '%s': no %s/%s (%zu shard files, the manifest "
                           "names %d)",
                           im->archive, im->top, name, im->nshards, im->man.nshards);
    }
    return CKPT_OK;
}

int ckpt_import(const char *archive_path, const char *root, char *out, size_t cap)
{
    int rc = CKPT_OK;
    struct archive *a = NULL;
    ckpt_t *c = NULL;
    void *buf = NULL;
    int rootfd = -1, tmpfd = -1;
    const char *tmpname = NULL; /* leaf of the temp dir once it exists */
    char tmp[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    arc_import_t im;
    memset(&im, 0, sizeof im);
    im.archive = archive_path;
    im.root = root;
    im.stepfd = -1;

    if (!archive_path || !root || !*archive_path || !*root) {
        rc = ckpt_seterr(CKPT_EINVAL, "import: missing archive or root path");
        goto fail;
    }
    /* Room for "<root>/.import-XXXXXX/step-<20 digits>/<shard name>". */
    if (strlen(root) + 128 >= CKPT_PATH_MAX) {
        rc = ckpt_seterr(CKPT_EINVAL, "import: '%s': path too long", root);
        goto fail;
    }
    if (out && cap < strlen(root) + 32) {
        rc = ckpt_seterr(CKPT_EINVAL, "import: output buffer too small");
        goto fail;
    }
    buf = malloc(ARC_IO_CHUNK);
    a = archive_read_new();
    if (!buf || !a) {
        rc = ckpt_seterr(CKPT_ENOMEM, "import: out of memory");
        goto fail;
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    if (archive_read_open_filename(a, archive_path, 64 * 1024) != ARCHIVE_OK) {
        /* Missing file, unreadable file, or no recognisable tar header. */
        struct stat st;
        if (stat(archive_path, &st) != 0)
            rc = arc_fail_errno("import: cannot open archive", archive_path);
        else
            rc = ckpt_seterr(CKPT_EARCHIVE,
                             "import: '%s': not a readable tar "
                             "archive: %s",
                             archive_path, archive_error_string(a));
        goto fail;
    }

    if (arc_mkdir_p(root) != 0) {
        rc = arc_fail_errno("import: cannot create root", root);
        goto fail;
    }
    rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        rc = arc_fail_errno("import: cannot open root", root);
        goto fail;
    }
    snprintf(tmp, sizeof tmp, "%s/.import-XXXXXX", root);
    if (!mkdtemp(tmp)) {
        rc = arc_fail_errno("import: cannot create temp dir in", root);
        goto fail;
    }
    tmpname = strrchr(tmp, '/') + 1;
    tmpfd = openat(rootfd, tmpname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tmpfd < 0) {
        rc = arc_fail_errno("import: cannot open temp dir", tmp);
        goto fail;
    }

    rc = arc_extract_all(&im, a, rootfd, tmpfd, buf);
    if (rc != CKPT_OK)
        goto fail;
    if (fsync(im.stepfd) != 0 || fsync(tmpfd) != 0) {
        rc = arc_fail_errno("import: cannot fsync", tmp);
        goto fail;
    }

    /* The extracted files must form a good checkpoint of the named step. */
    rc = ckpt_path_join(path, sizeof path, tmp, im.canon);
    if (rc != CKPT_OK) {
        rc = ckpt_seterr(rc, "import: '%s': path too long", tmp);
        goto fail;
    }
    rc = ckpt_open(path, &c);
    if (rc == CKPT_OK)
        rc = ckpt_verify(c);
    if (rc != CKPT_OK) {
        /* The message names files in the temp dir, which is about to go:
         * name them as the archive does ("step-<N>/shard-0.ftsh"). */
        char why[768];
        const char *m = ckpt_last_error();
        const char *hit = strstr(m, tmp);
        size_t tl = strlen(tmp);
        if (hit && hit[tl] == '/')
            snprintf(why, sizeof why, "%.*s%s", (int)(hit - m), m, hit + tl + 1);
        else
            snprintf(why, sizeof why, "%s", m);
        rc = ckpt_seterr(rc, "import: '%s': checkpoint does not verify: %s",
                         archive_path, why[0] ? why : ckpt_strerror(rc));
        goto fail;
    }
    /* The step and the shard count were checked against the manifest
     * during extraction; ckpt_open read the same bytes. */
    ckpt_close(c);
    c = NULL;

    /* COMMIT: give the checkpoint its name, never replacing one. */
    if (renameat2(tmpfd, im.canon, rootfd, im.canon, RENAME_NOREPLACE) != 0) {
        int e = errno;
        if (e == EEXIST || e == ENOTEMPTY) {
            rc = ckpt_seterr(CKPT_EEXIST,
                             "import: '%s': checkpoint '%s' already exists in '%s'",
                             archive_path, im.canon, root);
            goto fail;
        }
        if (e != EINVAL && e != ENOSYS) {
            rc = ckpt_seterr(CKPT_EIO, "import: cannot rename '%s' into '%s': %s",
                             im.canon, root, strerror(e));
            goto fail;
        }
        /* A file system without RENAME_NOREPLACE: check, then rename (a
         * non-empty target still makes rename fail with ENOTEMPTY). */
        struct stat st;
        if (fstatat(rootfd, im.canon, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            rc = ckpt_seterr(CKPT_EEXIST,
                             "import: '%s': checkpoint '%s' already exists in '%s'",
                             archive_path, im.canon, root);
            goto fail;
        }
        if (renameat(tmpfd, im.canon, rootfd, im.canon) != 0) {
            rc = ckpt_seterr(CKPT_EIO, "import: cannot rename '%s' into '%s': %s",
                             im.canon, root, strerror(errno));
            goto fail;
        }
    }
    if (fsync(rootfd) != 0) {
        rc = arc_fail_errno("import: cannot fsync", root);
        /* The checkpoint is in place; still report that it may not be durable. */
    }
    close(tmpfd);
    tmpfd = -1;
    unlinkat(rootfd, tmpname, AT_REMOVEDIR);
    tmpname = NULL;
    if (fsync(rootfd) != 0 && rc == CKPT_OK)
        rc = arc_fail_errno("import: cannot fsync", root);
    if (out && cap)
        snprintf(out, cap, "%s/%s", root, im.canon);

fail:
    ckpt_close(c);
    ckpt_manifest_free(&im.man);
    if (im.stepfd >= 0)
        close(im.stepfd);
    if (tmpfd >= 0)
        close(tmpfd);
    if (tmpname && rootfd >= 0)
        arc_remove_tree(rootfd, tmpname, 1);
    if (rootfd >= 0)
        close(rootfd);
    if (a)
        archive_read_free(a);
    free(buf);
    return rc;
}
