/*
 * util.c - errors, text cleaning, names under a checkpoint root, threads,
 * memory, clocks and the I/O helpers that every other file of the library
 * shares (one copy of each).  See util.h for the error convention.
 */
#include "util.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- errors ----------------------------------------------------------- */

static _Thread_local char last_error[CKPT_ERRMSG_MAX];

size_t ckpt_utf8_len(const unsigned char *text, size_t avail)
{
    size_t len;
    uint32_t code;
    if (text[0] < 0x80)
        return 1;
    if (text[0] >= 0xc2 && text[0] <= 0xdf)
        len = 2, code = text[0] & 0x1fu;
    else if (text[0] >= 0xe0 && text[0] <= 0xef)
        len = 3, code = text[0] & 0x0fu;
    else if (text[0] >= 0xf0 && text[0] <= 0xf4)
        len = 4, code = text[0] & 0x07u;
    else
        return 0;
    if (len > avail)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((text[i] & 0xc0) != 0x80)
            return 0;
        code = code << 6 | (text[i] & 0x3fu);
    }
    if ((len == 3 && (code < 0x800 || (code >= 0xd800 && code <= 0xdfff))) ||
        (len == 4 && (code < 0x10000 || code > 0x10ffff)))
        return 0; /* overlong, a surrogate, or past U+10FFFF */
    return len;
}

/* Length of the printable UTF-8 sequence at text (at most avail bytes), or
 * 0: a C1 control (U+0080-U+009F) is escaped like C0 ones. */
static size_t utf8_len(const unsigned char *text, size_t avail)
{
    size_t len = ckpt_utf8_len(text, avail);
    if (len == 2 && text[0] == 0xc2 && text[1] <= 0x9f)
        return 0;
    return len;
}

size_t ckpt_text_clean(const char *text, char *buf, size_t cap)
{
    const unsigned char *in = (const unsigned char *)text;
    size_t left = strlen(text), out = 0;
    const size_t escape_len = sizeof "\\xNN" - 1;
    if (cap == 0)
        return 0;
    while (left > 0) {
        size_t len = utf8_len(in, left);
        if (len == 1 && (*in < 0x20 || *in == 0x7f))
            len = 0;
        if (len == 0) { /* a control or a byte that is not UTF-8: \xNN */
            if (out + escape_len >= cap)
                break;
            snprintf(buf + out, cap - out, "\\x%02x", *in);
            out += escape_len, in++, left--;
            continue;
        }
        if (out + len >= cap)
            break; /* never cut a character in two */
        memcpy(buf + out, in, len);
        out += len, in += len, left -= len;
    }
    buf[out] = '\0';
    return out;
}

int ckpt_seterr(int rc, const char *fmt, ...)
{
    int saved = errno;
    char raw[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* Messages carry paths and manifest strings (anyone's bytes): they
     * reach terminals and JSON as valid UTF-8 without control codes. */
    ckpt_text_clean(raw, last_error, sizeof last_error);
    errno = saved;
    return rc;
}

int ckpt_seterr_errno(int rc, const char *what, const char *path)
{
    return ckpt_seterr(rc, "%s '%s': %s", what, path, strerror(errno));
}

const char *ckpt_last_error(void)
{
    return last_error;
}

int ckpt_version(void) { return FTRAIN_VERSION_NUMBER; }

const char *ckpt_strerror(int err)
{
    switch (err) {
    case CKPT_OK: return "success";
    case CKPT_EIO: return "i/o error";
    case CKPT_ENOMEM: return "out of memory";
    case CKPT_EINVAL: return "invalid argument";
    case CKPT_ECORRUPT: return "checksum mismatch or corrupt data";
    case CKPT_EFORMAT: return "malformed manifest";
    case CKPT_ENOTFOUND: return "not found";
    case CKPT_EINCOMPLETE: return "checkpoint incomplete";
    case CKPT_EVERSION: return "unsupported format version";
    case CKPT_EEXIST: return "checkpoint already exists";
    case CKPT_EPEER: return "another rank failed";
    case CKPT_EZSTD: return "compression error";
    case CKPT_EARCHIVE: return "archive error";
    default: return "unknown error";
    }
}

int ckpt_check_size(const char *type, size_t given, size_t known, const char *hint)
{
    if (given == known)
        return CKPT_OK;
    return ckpt_seterr(CKPT_EINVAL, "%s of %zu bytes is not a size this library "
                       "(libftrain-ckpt %s) knows: its %s has %zu bytes; the program "
                       "was compiled against another ftrain/ckpt.h%s", type, given,
                       FTRAIN_VERSION, type, known, hint);
}

/* ---- names ------------------------------------------------------------ */

int ckpt_name_printable(const char *name)
{
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

void ckpt_step_dirname(uint64_t step, char *buf, size_t cap)
{
    snprintf(buf, cap, CKPT_STEP_PREFIX "%08llu", (unsigned long long)step);
}

void ckpt_tmp_dirname(uint64_t step, char *buf, size_t cap)
{
    snprintf(buf, cap, CKPT_TMP_PREFIX "%08llu", (unsigned long long)step);
}

void ckpt_shard_name(int index, char *buf, size_t cap)
{
    snprintf(buf, cap, CKPT_SHARD_PREFIX "%d" CKPT_SHARD_SUFFIX, index);
}

int ckpt_parse_digits(const char *digits, size_t len, uint64_t *value)
{
    uint64_t parsed = 0;
    if (len == 0 || len > CKPT_STEP_DIGITS_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (digits[i] < '0' || digits[i] > '9')
            return 0;
        uint64_t digit = (uint64_t)(digits[i] - '0');
        if (parsed > (UINT64_MAX - digit) / 10)
            return 0;
        parsed = parsed * 10 + digit;
    }
    *value = parsed;
    return 1;
}

int ckpt_parse_dirname(const char *name, int tmp, uint64_t *step)
{
    const char *prefix = tmp ? CKPT_TMP_PREFIX : CKPT_STEP_PREFIX;
    size_t prefix_len = strlen(prefix), ndigits;
    uint64_t value;
    char canon[CKPT_FILE_NAME_MAX];

    if (strncmp(name, prefix, prefix_len) != 0)
        return 0;
    name += prefix_len;
    ndigits = strspn(name, "0123456789");
    if (name[ndigits] != '\0' || !ckpt_parse_digits(name, ndigits, &value))
        return 0;
    /* Only the spelling ckpt_step_dirname writes: "step-1" is not one. */
    ckpt_step_dirname(value, canon, sizeof canon);
    if (strcmp(canon + strlen(CKPT_STEP_PREFIX), name) != 0)
        return 0;
    *step = value;
    return 1;
}

int ckpt_parse_shard_name(const char *name, int *index)
{
    const size_t prefix_len = strlen(CKPT_SHARD_PREFIX),
                 suffix_len = strlen(CKPT_SHARD_SUFFIX);
    size_t len = strlen(name), ndigits;
    const char *digits = name + prefix_len;
    uint64_t value;

    if (len <= prefix_len + suffix_len ||
        strncmp(name, CKPT_SHARD_PREFIX, prefix_len) != 0 ||
        strcmp(name + len - suffix_len, CKPT_SHARD_SUFFIX) != 0)
        return 0;
    ndigits = len - prefix_len - suffix_len;
    if ((ndigits > 1 && digits[0] == '0') ||
        !ckpt_parse_digits(digits, ndigits, &value) || value >= CKPT_MAX_SHARDS)
        return 0;
    *index = (int)value;
    return 1;
}

int ckpt_path_join(char *buf, size_t cap, const char *dir, const char *name)
{
    int len = snprintf(buf, cap, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= cap)
        return ckpt_seterr(CKPT_EINVAL, "path too long: %s/%s", dir, name);
    return CKPT_OK;
}

const char *ckpt_base_name(const char *path, char *buf, size_t cap)
{
    size_t len;
    const char *slash;
    snprintf(buf, cap, "%s", path);
    len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = '\0';
    slash = strrchr(buf, '/');
    return slash ? slash + 1 : buf;
}

void ckpt_parent_dir(const char *path, char *buf, size_t cap)
{
    char *slash;
    snprintf(buf, cap, "%s", path);
    while ((slash = strrchr(buf, '/')) && slash[1] == '\0' && slash != buf)
        *slash = '\0';
    slash = strrchr(buf, '/');
    if (!slash)
        snprintf(buf, cap, ".");
    else
        slash[slash == buf ? 1 : 0] = '\0'; /* "/name" -> "/" */
}

int ckpt_latest_read(const char *root, char *name, size_t cap, uint64_t *step)
{
    /* LATEST holds one step directory name and a newline. */
    const size_t latest_max = 256;
    char path[CKPT_PATH_MAX], *text = NULL, kept[sizeof last_error];
    size_t len;
    int named = 0;

    memcpy(kept, last_error, sizeof kept);
    if (ckpt_path_join(path, sizeof path, root, CKPT_LATEST_NAME) != CKPT_OK ||
        ckpt_read_small_file_at(AT_FDCWD, path, path, latest_max, &text,
                                &len) != CKPT_OK) {
        memcpy(last_error, kept, sizeof kept);
        return 0;
    }
    if (len > 0 && text[len - 1] == '\n')
        text[--len] = '\0';
    if (strlen(text) == len && len < cap && ckpt_parse_dirname(text, 0, step)) {
        memcpy(name, text, len + 1);
        named = 1;
    }
    free(text);
    return named;
}

/* ---- threads, memory and clocks --------------------------------------- */

int ckpt_default_threads(void)
{
    cpu_set_t set;
    long cpus = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = CPU_COUNT(&set);
    if (cpus < 1)
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1
           : cpus > CKPT_DEFAULT_THREADS_MAX ? CKPT_DEFAULT_THREADS_MAX
                                             : (int)cpus;
}

void *ckpt_grow(void *array, size_t *cap, size_t elem, size_t first)
{
    size_t grown = *cap ? 2 * *cap : first;
    void *bigger;
    assert(elem > 0 && grown > *cap);
    bigger = grown <= SIZE_MAX / elem ? realloc(array, grown * elem) : NULL;
    if (bigger)
        *cap = grown;
    return bigger;
}

void *ckpt_big_alloc(size_t bytes)
{
    if (bytes < CKPT_BIG_ALIGN / 2) /* a huge page would cost more than it saves */
        return malloc(bytes ? bytes : 1);
    size_t len = (bytes + CKPT_BIG_ALIGN - 1) & ~(CKPT_BIG_ALIGN - 1);
    void *buf = aligned_alloc(CKPT_BIG_ALIGN, len);
#ifdef MADV_HUGEPAGE
    if (buf)
        (void)madvise(buf, len, MADV_HUGEPAGE);
#endif
    return buf;
}

static double clock_seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ckpt_clock_mono(void)
{
    return clock_seconds(CLOCK_MONOTONIC);
}

double ckpt_clock_cpu(void)
{
    return clock_seconds(CLOCK_THREAD_CPUTIME_ID);
}

/* ---- I/O helpers ------------------------------------------------------ */

int ckpt_write_all(int fd, const void *buf, size_t len, const char *path)
{
    const char *next = buf;
    while (len > 0) {
        ssize_t done = write(fd, next, len);
        if (done < 0) {
            if (errno == EINTR)
                continue;
            return ckpt_seterr(CKPT_EIO, "%s: write: %s", path, strerror(errno));
        }
        next += done;
        len -= (size_t)done;
    }
    return CKPT_OK;
}

int ckpt_pread_all(int fd, void *buf, size_t len, uint64_t off,
                   const char *path)
{
    char *next = buf;
    while (len > 0) {
        ssize_t done = pread(fd, next, len, (off_t)off);
        if (done < 0) {
            if (errno == EINTR)
                continue;
            return ckpt_seterr(CKPT_EIO, "%s: read: %s", path, strerror(errno));
        }
        if (done == 0) {
            errno = EIO; /* the file ended before len bytes */
            return ckpt_seterr(CKPT_EIO, "%s: read: %s", path, strerror(errno));
        }
        next += done;
        len -= (size_t)done;
        off += (uint64_t)done;
    }
    return CKPT_OK;
}

int ckpt_fsync_fd(int fd, const char *path)
{
    if (fsync(fd) != 0)
        return ckpt_seterr(CKPT_EIO, "%s: fsync: %s", path, strerror(errno));
    return CKPT_OK;
}

int ckpt_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), failed;
    if (fd < 0)
        return ckpt_seterr(CKPT_EIO, "%s: fsync directory: %s", dir,
                           strerror(errno));
    failed = fsync(fd) != 0;
    int saved = errno;
    close(fd);
    errno = saved;
    if (failed)
        return ckpt_seterr(CKPT_EIO, "%s: fsync directory: %s", dir,
                           strerror(errno));
    return CKPT_OK;
}

int ckpt_mkdir_p(const char *dir)
{
    char buf[CKPT_PATH_MAX];
    size_t len = strlen(dir);
    struct stat st;

    if (len == 0 || len >= sizeof buf) {
        errno = ENAMETOOLONG;
        return ckpt_seterr(CKPT_EIO, "%.*s: cannot create: %s",
                           CKPT_MSG_PATH_MAX, dir, strerror(errno));
    }
    memcpy(buf, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", buf,
                               strerror(errno));
        buf[i] = saved;
    }
    if (stat(dir, &st) != 0)
        return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", dir,
                           strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", dir,
                           strerror(errno));
    }
    return CKPT_OK;
}

int ckpt_create_fresh(const char *path, int flags, int *fd)
{
    *fd = -1;
    if (unlink(path) != 0 && errno != ENOENT)
        return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", path,
                           strerror(errno));
    *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags,
               0644);
    if (*fd < 0)
        return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", path,
                           strerror(errno));
    return CKPT_OK;
}

/* Nothing this library writes is nested deeper than this. */
#define REMOVE_DEPTH_MAX 16

/* ckpt_remove_tree, depth levels below where it started.  @return 0 or the
 * errno of the first failure. */
static int remove_tree_at(int at, const char *name, int depth)
{
    struct stat st;
    struct dirent *entry;
    DIR *dir;
    int fd, first_err = 0;

    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : errno;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(at, name, 0) == 0 || errno == ENOENT ? 0 : errno;
    if (depth > REMOVE_DEPTH_MAX)
        return ELOOP;
    fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : errno; /* removed meanwhile: done */
    if (!(dir = fdopendir(fd))) {
        int err = errno;
        close(fd);
        return err;
    }
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        int err = remove_tree_at(dirfd(dir), entry->d_name, depth + 1);
        if (err && !first_err)
            first_err = err;
    }
    closedir(dir);
    if (!first_err && unlinkat(at, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        return errno;
    return first_err;
}

int ckpt_remove_tree(int dirfd, const char *name, const char *path)
{
    int err = remove_tree_at(dirfd, name, 0);
    if (err == 0)
        return CKPT_OK;
    errno = err;
    return ckpt_seterr(CKPT_EIO, "%s: cannot remove: %s", path, strerror(err));
}

int ckpt_rename_noreplace_at(int from_dirfd, const char *from, int to_dirfd,
                             const char *to)
{
    struct stat st;
    if (renameat2(from_dirfd, from, to_dirfd, to, RENAME_NOREPLACE) == 0)
        return CKPT_OK;
    if (errno == EINVAL || errno == ENOSYS) {
        /* No RENAME_NOREPLACE here; a non-empty directory `to` still makes
         * renameat fail with ENOTEMPTY. */
        if (fstatat(to_dirfd, to, &st, AT_SYMLINK_NOFOLLOW) == 0)
            errno = EEXIST;
        else if (renameat(from_dirfd, from, to_dirfd, to) == 0)
            return CKPT_OK;
    }
    if (errno == EEXIST || errno == ENOTEMPTY)
        return ckpt_seterr(CKPT_EEXIST, "%s already exists", to);
    return ckpt_seterr(CKPT_EIO, "rename %s -> %s: %s", from, to, strerror(errno));
}

int ckpt_read_small_file_at(int dirfd, const char *name, const char *path,
                            size_t max, char **out, size_t *len)
{
    int rc = CKPT_OK, fd;
    struct stat st;
    char *buf = NULL;

    *out = NULL;
    /* O_NONBLOCK: a FIFO planted under this name must not block the open;
     * it is refused below as not a regular file. */
    fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return ckpt_seterr(errno == ENOENT ? CKPT_ENOTFOUND
                           : errno == ELOOP ? CKPT_EFORMAT : CKPT_EIO,
                           "%s: cannot open: %s", path,
                           errno == ELOOP ? "it is a symbolic link"
                                          : strerror(errno));
    if (fstat(fd, &st) != 0)
        rc = ckpt_seterr(CKPT_EIO, "%s: stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max)
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: not a regular file of at most %zu "
                         "bytes", path, max);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", path);
    else
        rc = ckpt_pread_all(fd, buf, (size_t)st.st_size, 0, path);
    close(fd);
    if (rc != CKPT_OK) {
        free(buf);
        return rc;
    }
    buf[st.st_size] = '\0';
    *out = buf;
    if (len)
        *len = (size_t)st.st_size;
    return CKPT_OK;
}

int ckpt_write_file_atomic(const char *dir, const char *name,
                           const char *tmpname, const void *data, size_t len,
                           int do_fsync)
{
    int rc, fd;
    char tmp[CKPT_PATH_MAX], final[CKPT_PATH_MAX];

    if ((rc = ckpt_path_join(tmp, sizeof tmp, dir, tmpname)) != CKPT_OK ||
        (rc = ckpt_path_join(final, sizeof final, dir, name)) != CKPT_OK)
        return rc;
    /* The temp name may be left by a crash, or be a link or FIFO someone
     * planted: ckpt_create_fresh never writes through it. */
    if ((rc = ckpt_create_fresh(tmp, 0, &fd)) != CKPT_OK)
        return rc;
    rc = ckpt_write_all(fd, data, len, tmp);
    if (rc == CKPT_OK && do_fsync)
        rc = ckpt_fsync_fd(fd, tmp);
    if (close(fd) != 0 && rc == CKPT_OK)
        rc = ckpt_seterr(CKPT_EIO, "%s: close: %s", tmp, strerror(errno));
    if (rc == CKPT_OK && rename(tmp, final) != 0)
        rc = ckpt_seterr(CKPT_EIO, "rename %s -> %s: %s", tmp, final,
                         strerror(errno));
    if (rc != CKPT_OK) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        return rc;
    }
    return do_fsync ? ckpt_fsync_dir(dir) : CKPT_OK;
}
