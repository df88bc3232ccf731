/*
 * archive_export.c - export a committed checkpoint into a tar file through
 * libarchive (archive_import.c reads one back).
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
 *     FILE.tmp.<pid>.<n>        created O_EXCL, tar entries, close archive
 *     fsync(FILE.tmp...)        data durable before it gets its name
 *     rename(FILE.tmp..., FILE) COMMIT (never over FILE unless replace)
 *     fsync(dir of FILE)        the name is durable
 *
 * A failure before the rename unlinks the temp file, so no partial FILE is
 * left.
 */
#include "ftrain/ckpt.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util.h"

/* What export appends to the archive's name for its temp file:
 * ".tmp.<pid>.<8 hex digits>", a pid of at most 19 digits. */
#define TMP_SUFFIX_MAX (sizeof ".tmp.." + 19 + 8)
/* Tries at a temp name that nobody has. */
#define TMP_TRIES 100

/* Does the archive name ask for zstd compression? */
static int wants_zstd(const char *path)
{
    size_t len = strlen(path);
    return (len >= 8 && strcmp(path + len - 8, ".tar.zst") == 0) ||
           (len >= 5 && strcmp(path + len - 5, ".tzst") == 0);
}

static int is_plain_tar(const char *path)
{
    size_t len = strlen(path);
    return len >= 4 && strcmp(path + len - 4, ".tar") == 0;
}

/* The archive being written. */
typedef struct {
    struct archive *arc;
    const char *archive_path; /* FILE, for messages (it is written under a
                                 temp name) */
    void *buf;                /* CKPT_COPY_CHUNK bytes */
} writer_t;

/* Report that writing the archive failed at entry ename (doing what), with
 * the system's reason when there is one: libarchive says only "Write
 * error" of a full disk.  @return CKPT_EIO, or otherwise when libarchive
 * gives no system error. */
static int write_failed(const writer_t *w, int otherwise, const char *doing,
                        const char *ename)
{
    int err = archive_errno(w->arc);
    const char *msg = archive_error_string(w->arc);
    return ckpt_seterr(err > 0 ? CKPT_EIO : otherwise,
                       "export: cannot write '%s' (%s%s): %s", w->archive_path, doing,
                       ename, err > 0 ? strerror(err) : msg ? msg : "unknown error");
}

/* Copy the open file fd (path, size bytes) into the archive's current entry
 * ename; *xxh64 gets the hash of what was copied. */
static int copy_data(const writer_t *w, int fd, const char *path, const char *ename,
                     uint64_t size, uint64_t *xxh64)
{
    void *buf = w->buf;
    XXH64_state_t hash;
    XXH64_reset(&hash, 0);
    while (size > 0) {
        size_t want = size < CKPT_COPY_CHUNK ? (size_t)size : CKPT_COPY_CHUNK;
        ssize_t got = read(fd, buf, want);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return ckpt_seterr_errno(CKPT_EIO, "export: cannot read", path);
        if (got == 0)
            return ckpt_seterr(CKPT_EIO, "export: '%s': file shrank while "
                               "exporting", path);
        XXH64_update(&hash, buf, (size_t)got);
        if (archive_write_data(w->arc, buf, (size_t)got) != got)
            return write_failed(w, CKPT_EIO, "at ", ename);
        size -= (uint64_t)got;
    }
    *xxh64 = XXH64_digest(&hash);
    return CKPT_OK;
}

/* Append one regular file to the archive as <top>/<name>.  When expect is
 * not NULL (a shard), the bytes copied must have the size and xxh64 the
 * manifest records, so the archive holds exactly what was verified even if
 * the file changed in between. */
static int add_file(const writer_t *w, const char *dir, const char *top,
                    const char *name, const ckpt_shard_info_t *expect)
{
    int rc = CKPT_OK, fd;
    struct archive_entry *entry = NULL;
    struct stat st;
    uint64_t xxh64 = 0;
    char path[CKPT_PATH_MAX], ename[2 * CKPT_FILE_NAME_MAX];

    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(ename, sizeof ename, "%s/%s", top, name);
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return ckpt_seterr_errno(CKPT_EIO, "export: cannot open", path);
    if (fstat(fd, &st) != 0)
        rc = ckpt_seterr_errno(CKPT_EIO, "export: cannot stat", path);
    else if (!S_ISREG(st.st_mode))
        rc = ckpt_seterr(CKPT_EINVAL, "export: '%s': not a regular file", path);
    else if (expect && (uint64_t)st.st_size != expect->file_bytes)
        rc = ckpt_seterr(CKPT_ECORRUPT, "export: '%s': size changed since it "
                         "was verified", path);
    else if (!(entry = archive_entry_new()))
        rc = ckpt_seterr(CKPT_ENOMEM, "export: out of memory");
    if (rc == CKPT_OK) {
        archive_entry_set_pathname(entry, ename);
        archive_entry_set_filetype(entry, AE_IFREG);
        archive_entry_set_perm(entry, 0644);
        archive_entry_set_size(entry, (la_int64_t)st.st_size);
        archive_entry_set_mtime(entry, st.st_mtime, 0);
        archive_entry_set_uid(entry, 0);
        archive_entry_set_gid(entry, 0);
        if (archive_write_header(w->arc, entry) != ARCHIVE_OK)
            rc = write_failed(w, CKPT_EARCHIVE, "the header of ", ename);
    }
    if (rc == CKPT_OK)
        rc = copy_data(w, fd, path, ename, (uint64_t)st.st_size, &xxh64);
    if (rc == CKPT_OK && expect && xxh64 != expect->xxh64)
        rc = ckpt_seterr(CKPT_ECORRUPT, "export: '%s': contents changed since it "
                         "was verified", path);
    archive_entry_free(entry);
    close(fd);
    return rc;
}

/* Create a fresh temporary file beside path: "<path>.tmp.<pid>.<n>", made
 * with O_EXCL so that it is never a file, link or FIFO someone else has
 * (or another export's).  Its name goes to tmp.  A file name is at most
 * NAME_MAX bytes, and the temp name must be one too: of a long name only
 * the first bytes are used, so that any name FILE may have can be written. */
static int create_tmp(const char *path, char *tmp, size_t cap, int *fd)
{
    static unsigned counter;
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash + 1 - path) : 0;
    size_t base_len = strlen(path + dir_len);
    if (base_len > NAME_MAX - TMP_SUFFIX_MAX)
        base_len = NAME_MAX - TMP_SUFFIX_MAX;
    for (int tries = 0; tries < TMP_TRIES; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned salt = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) ^
                        (unsigned)ts.tv_nsec;
        if (snprintf(tmp, cap, "%.*s%.*s.tmp.%ld.%08x", (int)dir_len, path,
                     (int)base_len, path + dir_len, (long)getpid(), salt) >= (int)cap) {
            errno = ENAMETOOLONG;
            return ckpt_seterr_errno(CKPT_EIO, "export: cannot create a temporary "
                                     "file beside", path);
        }
        *fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (*fd >= 0)
            return CKPT_OK;
        if (errno != EEXIST)
            break;
    }
    return ckpt_seterr_errno(CKPT_EIO, "export: cannot create the temporary file", tmp);
}

/* Write the archive of the verified checkpoint ckpt (at ckpt_dir) to fd:
 * the manifest first, then the shards in rank order, exactly the files the
 * manifest names and nothing else that may lie in the directory. */
static int write_archive(ckpt_t *ckpt, const char *ckpt_dir, const char *archive_path,
                         int fd)
{
    int rc = CKPT_OK;
    char top[CKPT_FILE_NAME_MAX], shard[CKPT_FILE_NAME_MAX];
    struct archive *arc = archive_write_new();
    void *buf = malloc(CKPT_COPY_CHUNK);
    const writer_t w = {arc, archive_path, buf};

    if (!arc || !buf) {
        rc = ckpt_seterr(CKPT_ENOMEM, "export: out of memory");
        goto out;
    }
    if (archive_write_set_format_pax_restricted(arc) != ARCHIVE_OK ||
        (wants_zstd(archive_path) && archive_write_add_filter_zstd(arc) != ARCHIVE_OK) ||
        archive_write_set_bytes_in_last_block(arc, 1) != ARCHIVE_OK ||
        archive_write_open_fd(arc, fd) != ARCHIVE_OK) {
        rc = ckpt_seterr(CKPT_EARCHIVE, "export: '%s': cannot start archive: %s",
                         archive_path, archive_error_string(arc));
        goto out;
    }
    ckpt_step_dirname(ckpt_step(ckpt), top, sizeof top);
    rc = add_file(&w, ckpt_dir, top, CKPT_MANIFEST_NAME, NULL);
    for (int i = 0; rc == CKPT_OK && i < ckpt_world_size(ckpt); i++) {
        ckpt_shard_name(i, shard, sizeof shard);
        rc = add_file(&w, ckpt_dir, top, shard, ckpt_shard_at(ckpt, i));
    }
    if (rc == CKPT_OK && archive_write_close(arc) != ARCHIVE_OK)
        rc = write_failed(&w, CKPT_EIO, "at the end", "");
out:
    if (arc)
        archive_write_free(arc); /* closes if still open; fd is the caller's */
    free(buf);
    return rc;
}

/* Give the written, durable temp file its name (the commit) and make the
 * name durable.  The temp file is removed when the rename fails. */
static int publish(const char *tmp, const char *archive_path, int replace)
{
    char parent[CKPT_PATH_MAX];
    int rc;
    if (replace)
        rc = rename(tmp, archive_path) == 0 ? CKPT_OK : CKPT_EIO;
    else
        rc = ckpt_rename_noreplace_at(AT_FDCWD, tmp, AT_FDCWD, archive_path);
    if (rc != CKPT_OK) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        if (rc == CKPT_EEXIST)
            return ckpt_seterr(CKPT_EEXIST, "export: '%s': file exists (it "
                               "appeared during the export; kept as it is)",
                               archive_path);
        return ckpt_seterr_errno(CKPT_EIO, "export: cannot rename into place",
                                 archive_path);
    }
    ckpt_parent_dir(archive_path, parent, sizeof parent);
    if (ckpt_fsync_dir(parent) != CKPT_OK)
        return ckpt_seterr_errno(CKPT_EIO, "export: cannot fsync directory", parent);
    return CKPT_OK;
}

/* The arguments of ckpt_export. */
static int check_export(const char *ckpt_dir, const char *archive_path, int replace)
{
    if (!ckpt_dir || !archive_path || !*ckpt_dir || !*archive_path)
        return ckpt_seterr(CKPT_EINVAL, "export: missing checkpoint or archive path");
    if (!wants_zstd(archive_path) && !is_plain_tar(archive_path))
        return ckpt_seterr(CKPT_EINVAL, "export: '%s': archive name must end in "
                           ".tar, .tar.zst or .tzst", archive_path);
    if (strlen(archive_path) + TMP_SUFFIX_MAX >= CKPT_PATH_MAX)
        return ckpt_seterr(CKPT_EINVAL, "export: '%s': path too long", archive_path);
    if (!replace && access(archive_path, F_OK) == 0)
        /* Checked again, atomically, at the rename; this saves the work. */
        return ckpt_seterr(CKPT_EEXIST, "export: '%s': file exists", archive_path);
    return CKPT_OK;
}

int ckpt_export(const char *ckpt_dir, const char *archive_path, int replace)
{
    int rc, fd = -1;
    ckpt_t *ckpt = NULL;
    char tmp[CKPT_PATH_MAX];

    if ((rc = check_export(ckpt_dir, archive_path, replace)) != CKPT_OK)
        return rc;
    /* Verify first: never export a checkpoint that does not read back. */
    rc = ckpt_open(ckpt_dir, &ckpt);
    if (rc == CKPT_OK)
        rc = ckpt_verify(ckpt);
    if (rc == CKPT_OK)
        rc = create_tmp(archive_path, tmp, sizeof tmp, &fd);
    if (rc == CKPT_OK) {
        rc = write_archive(ckpt, ckpt_dir, archive_path, fd);
        if (rc == CKPT_OK && ckpt_fsync_fd(fd, tmp) != CKPT_OK)
            rc = ckpt_seterr_errno(CKPT_EIO, "export: cannot fsync", tmp);
        if (close(fd) != 0 && rc == CKPT_OK)
            rc = ckpt_seterr_errno(CKPT_EIO, "export: cannot close", tmp);
        if (rc == CKPT_OK)
            rc = publish(tmp, archive_path, replace);
        else
            unlink(tmp); /* no partial archive is left */
    }
    ckpt_close(ckpt);
    return rc;
}
