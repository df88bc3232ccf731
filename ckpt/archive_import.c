/*
 * archive_import.c - import a checkpoint exported by archive_export.c (a tar
 * of one step-<N>/ directory) into a checkpoint root, through libarchive.
 *
 * An archive is untrusted input, and it may be small while declaring a
 * lot: an entry may claim up to 1 TiB, a GNU sparse entry or a compressed
 * run of zeros expands to its full size when read.  So the archive is made
 * to describe itself before anything big is written.  Invariants:
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
 * Any failure before the commit removes the temp dir, and the directories
 * the import created for root when root was missing (those still empty),
 * leaving everything as it was.
 */
#include "ftrain/ckpt.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "manifest.h"
#include "util.h"

/* Limits on what an archive may declare.  A shard of a data-parallel
 * checkpoint is one slice of the state; 1 TiB is far beyond anything this
 * trainer writes and stops a forged size from filling the disk. */
#define IMPORT_MAX_FILE_BYTES (UINT64_C(1) << 40)
#define IMPORT_MAX_ENTRIES 65536
/* libarchive's read block. */
#define IMPORT_BLOCK_BYTES (64 * 1024)
#define IMPORT_TMP_TEMPLATE ".import-XXXXXX"

/* State of one import. */
typedef struct {
    const char *archive;      /* archive path, for messages */
    const char *root;         /* destination root, for messages */
    struct archive *arc;
    void *buf;                /* CKPT_COPY_CHUNK bytes */
    int rootfd;
    int tmpfd;                /* <root>/.import-XXXXXX */
    int have_top;
    uint64_t step;            /* from the top directory name */
    char top[CKPT_FILE_NAME_MAX];   /* top directory name as in the archive */
    char canon[CKPT_FILE_NAME_MAX]; /* canonical step directory name */
    int stepfd;               /* <tmp>/<canon>, -1 until the first entry */
    int have_manifest;
    ckpt_manifest_t manifest; /* parsed from the first file entry */
    size_t nshards;
    size_t nentries;
    int committed;            /* renamed into root */
    /* The outermost directory of root (root or a parent) that this import
     * created, "" when root was there: removed again on failure. */
    char made[CKPT_PATH_MAX];
} import_t;

/* ---- names ------------------------------------------------------------ */

/* Is name one of the file names a checkpoint directory holds? */
static int is_member_name(const char *name)
{
    int index;
    return strcmp(name, CKPT_MANIFEST_NAME) == 0 ||
           ckpt_parse_shard_name(name, &index);
}

/* Parse "step-<digits>" (len bytes; 1 to 20 digits, not necessarily the
 * canonical spelling) into *step. */
static int parse_step_dir(const char *name, size_t len, uint64_t *step)
{
    size_t prefix_len = strlen(CKPT_STEP_PREFIX);
    return len > prefix_len && strncmp(name, CKPT_STEP_PREFIX, prefix_len) == 0 &&
           ckpt_parse_digits(name + prefix_len, len - prefix_len, step);
}

/* Check that no component of path is "..", before anything else. */
static int check_no_dotdot(const import_t *im, const char *path)
{
    for (const char *part = path; *part;) {
        const char *end = strchr(part, '/');
        size_t len = end ? (size_t)(end - part) : strlen(part);
        if (len == 2 && part[0] == '.' && part[1] == '.')
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': '..' "
                               "path component", im->archive, path);
        part += len;
        if (*part == '/')
            part++;
    }
    return CKPT_OK;
}

/* Check one entry's path and split off its file name.  Sets the top
 * directory on the first entry.  *is_top_dir is set for "step-<N>/" itself.
 * @return CKPT_OK or CKPT_EARCHIVE. */
static int check_path(import_t *im, const char *raw, const char **leaf,
                      int *is_top_dir)
{
    const char *path = raw, *slash, *name;
    size_t top_len;
    uint64_t step = 0;
    int rc;

    *is_top_dir = 0;
    *leaf = NULL;
    if (!path || !*path)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry with an empty name",
                           im->archive);
    if (path[0] == '/')
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': absolute path",
                           im->archive, raw);
    if ((rc = check_no_dotdot(im, raw)) != CKPT_OK)
        return rc;
    while (path[0] == '.' && path[1] == '/')
        path += 2;
    slash = strchr(path, '/');
    top_len = slash ? (size_t)(slash - path) : strlen(path);
    if (!parse_step_dir(path, top_len, &step))
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': not inside a "
                           "step-<N>/ directory", im->archive, raw);
    if (!im->have_top) {
        memcpy(im->top, path, top_len); /* parse_step_dir bounds top_len */
        im->top[top_len] = '\0';
        im->step = step;
        im->have_top = 1;
    } else if (strlen(im->top) != top_len || strncmp(im->top, path, top_len) != 0) {
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': second "
                           "top-level directory (first was '%s')",
                           im->archive, raw, im->top);
    }
    if (!slash || slash[1] == '\0') {
        *is_top_dir = 1;
        return CKPT_OK;
    }
    name = slash + 1;
    if (strchr(name, '/'))
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': nested path "
                           "inside '%s'", im->archive, raw, im->top);
    if (!is_member_name(name))
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': not a "
                           "checkpoint file name (manifest.json or "
                           "shard-<i>.ftsh)", im->archive, raw);
    *leaf = name;
    return CKPT_OK;
}

/* ---- writing files ---------------------------------------------------- */

/* Create leaf under im->stepfd for entry ename.  @return CKPT_OK and *fd,
 * CKPT_EARCHIVE (a duplicate) or CKPT_EIO. */
static int create_member(const import_t *im, const char *ename, const char *leaf,
                         int *fd)
{
    *fd = openat(im->stepfd, leaf,
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (*fd >= 0)
        return CKPT_OK;
    if (errno == EEXIST)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': duplicate",
                           im->archive, ename);
    return ckpt_seterr(CKPT_EIO, "import: cannot create '%s' from '%s': %s", leaf,
                       im->archive, strerror(errno));
}

/* fsync and close a file made by create_member; rc is the result so far.
 * The descriptor is closed whatever happens.  @return rc or the first
 * error. */
static int finish_member(const import_t *im, int fd, const char *leaf, int rc)
{
    if (rc == CKPT_OK && ckpt_fsync_fd(fd, leaf) != CKPT_OK)
        rc = ckpt_seterr(CKPT_EIO, "import: cannot fsync '%s' from '%s': %s", leaf,
                         im->archive, strerror(errno));
    if (close(fd) != 0 && rc == CKPT_OK)
        rc = ckpt_seterr(CKPT_EIO, "import: cannot close '%s' from '%s': %s", leaf,
                         im->archive, strerror(errno));
    return rc;
}

/* Read the current entry's data, exactly size bytes, into the file fd, or
 * into mem (room for size bytes) when fd < 0.  A piece that would go past
 * the declared size is refused before it is passed on, so an entry never
 * yields more than it declared, whatever the archive holds. */
static int read_entry(const import_t *im, const char *ename, const char *leaf,
                      uint64_t size, int fd, char *mem)
{
    uint64_t done = 0;
    for (;;) {
        la_ssize_t got = archive_read_data(im->arc, im->buf, CKPT_COPY_CHUNK);
        if (got == 0)
            break;
        if (got < 0)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': %s",
                               im->archive, ename, archive_error_string(im->arc));
        if ((uint64_t)got > size - done)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': more "
                               "data than its size", im->archive, ename);
        if (fd < 0)
            memcpy(mem + done, im->buf, (size_t)got);
        else if (ckpt_write_all(fd, im->buf, (size_t)got, leaf) != CKPT_OK)
            return ckpt_seterr(CKPT_EIO, "import: cannot write '%s' from '%s': %s",
                               leaf, im->archive, strerror(errno));
        done += (uint64_t)got;
    }
    if (done != size)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': truncated "
                           "(%" PRIu64 " of %" PRIu64 " bytes)",
                           im->archive, ename, done, size);
    return CKPT_OK;
}

/* Fail now rather than after filling the disk: the shards the manifest
 * names will take exactly their file_bytes (each entry is held to it). */
static int check_room(const import_t *im, const char *ename)
{
    const ckpt_manifest_t *manifest = &im->manifest;
    uint64_t need = 0, frsize, avail, free_bytes;
    struct statvfs vfs;

    /* The parser accepts sizes up to 2^53; an archive entry may not be
     * over IMPORT_MAX_FILE_BYTES, so a manifest naming a bigger shard can
     * never be satisfied.  With at most CKPT_MAX_SHARDS shards of 2^40
     * bytes the sum cannot overflow. */
    for (int i = 0; i < manifest->nshards; i++) {
        if (manifest->shards[i].file_bytes > IMPORT_MAX_FILE_BYTES)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': %s: shards[%d]."
                               "file_bytes %" PRIu64 " exceeds the limit of %" PRIu64,
                               im->archive, ename, i, manifest->shards[i].file_bytes,
                               IMPORT_MAX_FILE_BYTES);
        need += manifest->shards[i].file_bytes;
    }
    /* f_bavail is what an unprivileged writer may use. */
    if (fstatvfs(im->tmpfd, &vfs) != 0)
        return ckpt_seterr_errno(CKPT_EIO, "import: cannot get free space of",
                                 im->root);
    frsize = vfs.f_frsize ? (uint64_t)vfs.f_frsize : (uint64_t)vfs.f_bsize;
    avail = (uint64_t)vfs.f_bavail;
    free_bytes = frsize && avail > UINT64_MAX / frsize ? UINT64_MAX : avail * frsize;
    if (need > free_bytes)
        return ckpt_seterr(CKPT_EIO, "import: '%s': not enough space in '%s': the "
                           "checkpoint needs %" PRIu64 " bytes, %" PRIu64 " are free",
                           im->archive, im->root, need, free_bytes);
    return CKPT_OK;
}

/* The manifest entry: read it into memory, parse and check it against the
 * archive, check that the file system has room for the shards it names,
 * and only then write it to disk.  After this every shard entry has a known
 * name and size to be held to. */
static int take_manifest(import_t *im, const char *ename, uint64_t size)
{
    int rc, fd;
    /* The parser's messages start with it; no message is longer. */
    char what[CKPT_ERRMSG_MAX];
    char *text = malloc(size ? (size_t)size : 1);

    if (!text)
        return ckpt_seterr(CKPT_ENOMEM, "import: out of memory");
    rc = read_entry(im, ename, CKPT_MANIFEST_NAME, size, -1, text);
    if (rc != CKPT_OK)
        goto out;
    /* The parser validates every field (and manifest_xxh64 when present);
     * its error, with its code (EFORMAT, ECORRUPT, EVERSION), is the
     * import's, reported before any shard byte is written. */
    snprintf(what, sizeof what, "import: '%s': %s", im->archive, ename);
    rc = ckpt_manifest_parse(text, (size_t)size, what, &im->manifest);
    if (rc != CKPT_OK)
        goto out;
    im->have_manifest = 1;
    if (im->manifest.step != im->step) {
        rc = ckpt_seterr(CKPT_EARCHIVE, "import: '%s': directory '%s' holds the "
                         "manifest of step %" PRIu64, im->archive, im->top,
                         im->manifest.step);
        goto out;
    }
    if ((rc = check_room(im, ename)) != CKPT_OK ||
        (rc = create_member(im, ename, CKPT_MANIFEST_NAME, &fd)) != CKPT_OK)
        goto out;
    if (ckpt_write_all(fd, text, (size_t)size, CKPT_MANIFEST_NAME) != CKPT_OK)
        rc = ckpt_seterr(CKPT_EIO, "import: cannot write '%s' from '%s': %s",
                         CKPT_MANIFEST_NAME, im->archive, strerror(errno));
    rc = finish_member(im, fd, CKPT_MANIFEST_NAME, rc);
out:
    free(text);
    return rc;
}

/* A shard entry: its index and size must be the manifest's; its data goes
 * to a new file under im->stepfd. */
static int take_shard(import_t *im, const char *ename, const char *leaf,
                      uint64_t size)
{
    int index = -1, rc, fd;
    const ckpt_manifest_t *manifest = &im->manifest;

    ckpt_parse_shard_name(leaf, &index); /* check_path checked the form */
    if (index < 0 || index >= manifest->nshards)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': shard %d, but "
                           "the manifest names %d shard%s", im->archive, ename,
                           index, manifest->nshards, manifest->nshards == 1 ? "" : "s");
    if (size != manifest->shards[index].file_bytes)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': declares %"
                           PRIu64 " bytes, the manifest's shards[%d].file_bytes is %"
                           PRIu64, im->archive, ename, size, index,
                           manifest->shards[index].file_bytes);
    if ((rc = create_member(im, ename, leaf, &fd)) != CKPT_OK)
        return rc;
    rc = read_entry(im, ename, leaf, size, fd, NULL);
    rc = finish_member(im, fd, leaf, rc);
    if (rc == CKPT_OK)
        im->nshards++;
    return rc;
}

/* ---- reading the archive ---------------------------------------------- */

/* Refuse links, devices and anything but the top directory and regular
 * files; and a file before the manifest. */
static int check_entry_kind(const import_t *im, struct archive_entry *entry,
                            const char *ename, const char *leaf, int is_top_dir)
{
    mode_t type = archive_entry_filetype(entry);
    if (archive_entry_hardlink(entry))
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': hard link",
                           im->archive, ename);
    if (archive_entry_symlink(entry) || type == AE_IFLNK)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': symbolic link",
                           im->archive, ename);
    if (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFIFO || type == AE_IFSOCK)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': device, fifo "
                           "or socket", im->archive, ename);
    if (is_top_dir)
        return type == AE_IFDIR ? CKPT_OK
                                : ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry "
                                              "'%s': not a directory",
                                              im->archive, ename);
    if (type != AE_IFREG)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': not a regular "
                           "file", im->archive, ename);
    int is_manifest = strcmp(leaf, CKPT_MANIFEST_NAME) == 0;
    /* The manifest comes first so that every shard can be checked against
     * it before a byte of the shard is written. */
    if (!is_manifest && !im->have_manifest)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s' comes before "
                           "%s/manifest.json: the manifest must be the first file "
                           "of the archive (ckptctl export writes it first; by "
                           "hand: tar cf X.tar %s/manifest.json %s/shard-*.ftsh)",
                           im->archive, ename, im->top, im->top, im->top);
    if (is_manifest && im->have_manifest)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': duplicate",
                           im->archive, ename);
    /* libarchive fills the holes of a sparse entry with zeros: a tiny
     * archive could expand to its whole declared size.  Export never
     * writes one. */
    if (archive_entry_sparse_count(entry) > 0)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': sparse file "
                           "(not accepted: holes would be written as zeros)",
                           im->archive, ename);
    return CKPT_OK;
}

/* On the first entry: fix the destination name, fail fast when it is taken
 * (the final rename checks again, atomically), make it in the temp dir. */
static int make_step_dir(import_t *im)
{
    struct stat st;
    ckpt_step_dirname(im->step, im->canon, sizeof im->canon);
    if (fstatat(im->rootfd, im->canon, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return ckpt_seterr(CKPT_EEXIST, "import: '%s': checkpoint '%s' already "
                           "exists in '%s'", im->archive, im->canon, im->root);
    if (mkdirat(im->tmpfd, im->canon, 0755) != 0)
        return ckpt_seterr(CKPT_EIO, "import: cannot create '%s': %s", im->canon,
                           strerror(errno));
    im->stepfd = openat(im->tmpfd, im->canon,
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (im->stepfd < 0)
        return ckpt_seterr(CKPT_EIO, "import: cannot open '%s': %s", im->canon,
                           strerror(errno));
    return CKPT_OK;
}

/* Check and take the archive's current entry. */
static int take_entry(import_t *im, struct archive_entry *entry)
{
    const char *ename = archive_entry_pathname(entry), *leaf = NULL;
    int is_top_dir = 0, rc;
    uint64_t size, limit;

    if ((rc = check_path(im, ename, &leaf, &is_top_dir)) != CKPT_OK ||
        (rc = check_entry_kind(im, entry, ename, leaf, is_top_dir)) != CKPT_OK)
        return rc;
    if (im->stepfd < 0 && (rc = make_step_dir(im)) != CKPT_OK)
        return rc;
    if (is_top_dir) {
        if (archive_read_data_skip(im->arc) != ARCHIVE_OK)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': %s",
                               im->archive, ename, archive_error_string(im->arc));
        return CKPT_OK;
    }
    if (!archive_entry_size_is_set(entry) || archive_entry_size(entry) < 0)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': no size",
                           im->archive, ename);
    size = (uint64_t)archive_entry_size(entry);
    int is_manifest = strcmp(leaf, CKPT_MANIFEST_NAME) == 0;
    limit = is_manifest ? CKPT_MANIFEST_MAX : IMPORT_MAX_FILE_BYTES;
    if (size > limit)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': entry '%s': size %" PRIu64
                           " bytes exceeds the limit of %" PRIu64,
                           im->archive, ename, size, limit);
    return is_manifest ? take_manifest(im, ename, size)
                       : take_shard(im, ename, leaf, size);
}

/* The compression a file that is no readable tar starts with, when it is
 * one import does not read (only none, zstd and gzip, open_archive), as
 * "; it is xz-compressed ..."; else "". */
static const char *filter_hint(const char *path)
{
    static const struct {
        const char *magic;
        size_t len;
        const char *hint;
    } known[] = {
        {"\xfd" "7zXZ\0", 6, "; it is xz-compressed, which import does not read: "
                              "recompress it as .tar.zst (or .tar.gz)"},
        {"BZh", 3, "; it is bzip2-compressed, which import does not read: "
                   "recompress it as .tar.zst (or .tar.gz)"},
        {"\x04\x22\x4d\x18", 4, "; it is lz4-compressed, which import does not read: "
                                "recompress it as .tar.zst (or .tar.gz)"},
    };
    unsigned char head[8] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return "";
    ssize_t n = read(fd, head, sizeof head);
    close(fd);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (n >= (ssize_t)known[i].len && memcmp(head, known[i].magic, known[i].len) == 0)
            return known[i].hint;
    return "";
}

/* Read every entry of the archive into the temp dir's step directory. */
static int extract_all(import_t *im)
{
    struct archive_entry *entry;
    int rc;
    for (;;) {
        int status = archive_read_next_header(im->arc, &entry);
        if (status == ARCHIVE_EOF)
            break;
        if (status < ARCHIVE_WARN)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': %s%s%s", im->archive,
                               im->nentries ? "after entry "
                                            : "not a readable tar archive: ",
                               archive_error_string(im->arc)
                                   ? archive_error_string(im->arc)
                                   : "unknown error",
                               im->nentries ? "" : filter_hint(im->archive));
        if (++im->nentries > IMPORT_MAX_ENTRIES)
            return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': more than %d entries",
                               im->archive, IMPORT_MAX_ENTRIES);
        if ((rc = take_entry(im, entry)) != CKPT_OK)
            return rc;
    }
    if (im->nentries == 0)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': archive is empty",
                           im->archive);
    if (!im->have_manifest)
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': no %s/manifest.json",
                           im->archive, im->top);
    /* Names are in range and unique (O_EXCL), so a short count means a
     * missing shard: name the first one. */
    if (im->nshards != (size_t)im->manifest.nshards) {
        char name[CKPT_FILE_NAME_MAX] = "";
        struct stat st;
        for (int i = 0; i < im->manifest.nshards; i++) {
            ckpt_shard_name(i, name, sizeof name);
            if (fstatat(im->stepfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
                break;
        }
        return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': no %s/%s (%zu shard "
                           "files, the manifest names %d)", im->archive, im->top,
                           name, im->nshards, im->manifest.nshards);
    }
    return CKPT_OK;
}

/* ---- import ----------------------------------------------------------- */

/* The extracted files (tmp/<canon>) must form a good checkpoint.  The step
 * and the shard count were checked against the manifest during extraction;
 * ckpt_open reads the same bytes. */
static int verify_extracted(const import_t *im, const char *tmp)
{
    char path[CKPT_PATH_MAX], why[CKPT_ERRMSG_MAX];
    ckpt_t *ckpt = NULL;
    int rc = ckpt_path_join(path, sizeof path, tmp, im->canon);
    if (rc != CKPT_OK)
        return ckpt_seterr(rc, "import: '%s': path too long", tmp);
    rc = ckpt_open(path, &ckpt);
    if (rc == CKPT_OK)
        rc = ckpt_verify(ckpt);
    ckpt_close(ckpt);
    if (rc == CKPT_OK)
        return CKPT_OK;
    /* The message names files in the temp dir, which is about to go: name
     * them as the archive does ("step-<N>/shard-0.ftsh"). */
    const char *msg = ckpt_last_error(), *hit = strstr(msg, tmp);
    size_t tmp_len = strlen(tmp);
    if (hit && hit[tmp_len] == '/')
        snprintf(why, sizeof why, "%.*s%s", (int)(hit - msg), msg, hit + tmp_len + 1);
    else
        snprintf(why, sizeof why, "%s", msg);
    return ckpt_seterr(rc, "import: '%s': checkpoint does not verify: %s",
                       im->archive, why[0] ? why : ckpt_strerror(rc));
}

/* COMMIT: give the checkpoint its name in root, never replacing one; then
 * make the name durable and drop the empty temp dir. */
static int commit_import(import_t *im, const char *tmp_name)
{
    int rc = ckpt_rename_noreplace_at(im->tmpfd, im->canon, im->rootfd, im->canon);
    if (rc == CKPT_EEXIST)
        return ckpt_seterr(CKPT_EEXIST, "import: '%s': checkpoint '%s' already "
                           "exists in '%s'", im->archive, im->canon, im->root);
    if (rc != CKPT_OK)
        return ckpt_seterr(CKPT_EIO, "import: cannot rename '%s' into '%s': %s",
                           im->canon, im->root, strerror(errno));
    im->committed = 1;
    /* The checkpoint is in place; still report that it may not be durable. */
    if (ckpt_fsync_fd(im->rootfd, im->root) != CKPT_OK)
        rc = ckpt_seterr_errno(CKPT_EIO, "import: cannot fsync", im->root);
    close(im->tmpfd);
    im->tmpfd = -1;
    unlinkat(im->rootfd, tmp_name, AT_REMOVEDIR);
    if (ckpt_fsync_fd(im->rootfd, im->root) != CKPT_OK && rc == CKPT_OK)
        rc = ckpt_seterr_errno(CKPT_EIO, "import: cannot fsync", im->root);
    return rc;
}

/* Open the archive for reading; an unreadable file is CKPT_EIO, one that is
 * not a tar CKPT_EARCHIVE. */
static int open_archive(import_t *im)
{
    struct stat st;
    im->buf = malloc(CKPT_COPY_CHUNK);
    im->arc = archive_read_new();
    if (!im->buf || !im->arc)
        return ckpt_seterr(CKPT_ENOMEM, "import: out of memory");
    /* Only the filters an export writes, and the common gzip: "all" would
     * let libarchive run external programs (lrzip, grzip...) on untrusted
     * input where their library is missing. */
    archive_read_support_filter_none(im->arc);
    archive_read_support_filter_zstd(im->arc);
    archive_read_support_filter_gzip(im->arc);
    archive_read_support_format_tar(im->arc);
    if (archive_read_open_filename(im->arc, im->archive, IMPORT_BLOCK_BYTES) ==
        ARCHIVE_OK)
        return CKPT_OK;
    if (stat(im->archive, &st) != 0)
        return ckpt_seterr_errno(CKPT_EIO, "import: cannot open archive", im->archive);
    return ckpt_seterr(CKPT_EARCHIVE, "import: '%s': not a readable tar archive: %s%s",
                       im->archive, archive_error_string(im->arc), filter_hint(im->archive));
}

/* Note in im->made the outermost directory of root (root itself or one of
 * its parents) that does not exist, "" when root does.  The walk goes up
 * with ckpt_parent_dir, as remove_made does, so the names compare. */
static void find_missing(import_t *im)
{
    char path[CKPT_PATH_MAX], parent[CKPT_PATH_MAX];
    struct stat st;
    im->made[0] = '\0';
    snprintf(path, sizeof path, "%s", im->root);
    while (lstat(path, &st) != 0 && errno == ENOENT) {
        snprintf(im->made, sizeof im->made, "%s", path);
        ckpt_parent_dir(path, parent, sizeof parent);
        if (strcmp(parent, path) == 0)
            break;
        snprintf(path, sizeof path, "%s", parent);
    }
}

/* A refused import leaves nothing behind: remove the directories it made
 * for root, innermost first, up to im->made.  rmdir removes only an empty
 * directory, so one that someone else has put something in stays. */
static void remove_made(const import_t *im)
{
    char path[CKPT_PATH_MAX], parent[CKPT_PATH_MAX];
    if (!im->made[0])
        return;
    snprintf(path, sizeof path, "%s", im->root);
    for (;;) {
        if (rmdir(path) != 0 && errno != ENOENT) /* ENOENT: mkdir_p stopped short */
            return;
        if (strcmp(path, im->made) == 0)
            return;
        ckpt_parent_dir(path, parent, sizeof parent);
        if (strcmp(parent, path) == 0)
            return;
        snprintf(path, sizeof path, "%s", parent);
    }
}

/* Create root if missing and a fresh temp dir in it (path to tmp; its name
 * to *tmp_name, pointing into tmp). */
static int make_tmp_dir(import_t *im, char *tmp, size_t cap, const char **tmp_name)
{
    find_missing(im);
    if (ckpt_mkdir_p(im->root) != CKPT_OK)
        return ckpt_seterr_errno(CKPT_EIO, "import: cannot create root", im->root);
    im->rootfd = open(im->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (im->rootfd < 0)
        return ckpt_seterr_errno(CKPT_EIO, "import: cannot open root", im->root);
    snprintf(tmp, cap, "%s/" IMPORT_TMP_TEMPLATE, im->root);
    if (!mkdtemp(tmp))
        return ckpt_seterr_errno(CKPT_EIO, "import: cannot create temp dir in",
                                 im->root);
    *tmp_name = strrchr(tmp, '/') + 1;
    im->tmpfd = openat(im->rootfd, *tmp_name,
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (im->tmpfd < 0)
        return ckpt_seterr_errno(CKPT_EIO, "import: cannot open temp dir", tmp);
    return CKPT_OK;
}

/* The arguments of ckpt_import. */
static int check_import(const char *archive_path, const char *root, const char *out,
                        size_t cap)
{
    if (!archive_path || !*archive_path)
        return ckpt_seterr(CKPT_EINVAL, "import: no archive path (NULL or empty)");
    if (!root || !*root)
        return ckpt_seterr(CKPT_EINVAL, "import: no root path (NULL or empty)");
    /* Room for "<root>/.import-XXXXXX/step-<N>/<shard name>". */
    if (strlen(root) + 2 * CKPT_FILE_NAME_MAX >= CKPT_PATH_MAX)
        return ckpt_seterr(CKPT_EINVAL, "import: '%s': path too long", root);
    /* Room for "<root>/step-<N>". */
    if (out && cap < strlen(root) + CKPT_FILE_NAME_MAX / 2)
        return ckpt_seterr(CKPT_EINVAL, "import: output buffer too small");
    return CKPT_OK;
}

int ckpt_import(const char *archive_path, const char *root, char *out, size_t cap)
{
    int rc;
    const char *tmp_name = NULL; /* the temp dir's name once it exists */
    char tmp[CKPT_PATH_MAX];
    import_t im;

    memset(&im, 0, sizeof im);
    im.archive = archive_path;
    im.root = root;
    im.rootfd = im.tmpfd = im.stepfd = -1;
    rc = check_import(archive_path, root, out, cap);
    if (rc == CKPT_OK)
        rc = open_archive(&im);
    if (rc == CKPT_OK)
        rc = make_tmp_dir(&im, tmp, sizeof tmp, &tmp_name);
    if (rc == CKPT_OK)
        rc = extract_all(&im);
    if (rc == CKPT_OK && (ckpt_fsync_fd(im.stepfd, tmp) != CKPT_OK ||
                          ckpt_fsync_fd(im.tmpfd, tmp) != CKPT_OK))
        rc = ckpt_seterr_errno(CKPT_EIO, "import: cannot fsync", tmp);
    if (rc == CKPT_OK)
        rc = verify_extracted(&im, tmp);
    if (rc == CKPT_OK) {
        if (im.stepfd >= 0)
            close(im.stepfd);
        im.stepfd = -1;
        rc = commit_import(&im, tmp_name);
    }
    if (im.committed) {
        tmp_name = NULL; /* the temp dir is empty or gone */
        if (out && cap)
            snprintf(out, cap, "%s/%s", root, im.canon);
    }
    ckpt_manifest_free(&im.manifest);
    if (im.stepfd >= 0)
        close(im.stepfd);
    if (im.tmpfd >= 0)
        close(im.tmpfd);
    if (tmp_name && im.rootfd >= 0) /* not committed: nothing is left */
        (void)ckpt_remove_tree(im.rootfd, tmp_name, tmp);
    if (im.rootfd >= 0)
        close(im.rootfd);
    if (!im.committed)
        remove_made(&im);
    if (im.arc)
        archive_read_free(im.arc);
    free(im.buf);
    return rc;
}
