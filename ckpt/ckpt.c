/*
 * ckpt.c - the checkpoint library: layout of the flat byte space, the two
 * phase save with its single commit point, reading any byte range of a
 * committed checkpoint, and managing a root (list, latest good, prune).
 *
 * COMMIT PROTOCOL
 *
 * Names under a root:  step-<N>/ (committed), .tmp-step-<N>/ (a save in
 * progress or a crashed one), LATEST (a hint), LATEST.tmp.  <N> is the step,
 * zero-padded to 8 digits (ckpt_step_dirname).
 *
 * INVARIANTS
 *   I1. A directory named step-<N>/ appears only by rename(2) of a complete
 *       .tmp-step-<N>/ whose shards and manifest.json are already fsync'd.
 *       THE COMMIT POINT is that directory rename (made durable by the fsync of
 *       the root that follows it).  The earlier rename of manifest.json.tmp to
 *       manifest.json inside the temp dir commits nothing: readers never look
 *       inside .tmp-* directories.
 *   I2. A reader accepts only step-<N>/ holding a valid manifest.json, and
 *       trusts a shard only after its size, seek table and frame checksums
 *       match (ckpt_verify checks every byte).
 *   I3. A committed checkpoint is never modified.  Saving a step that is
 *       already committed fails with CKPT_EEXIST before anything is written.
 *   I4. Rank i of W writes only .tmp-step-<N>/shard-<i>.ftsh, holding the flat
 *       bytes [floor(i*T/W), floor((i+1)*T/W)).  Only rank 0 writes the
 *       manifest, renames directories and writes LATEST.
 *   I5. Every rank returns the same success or failure from ckpt_commit: the
 *       phase-one results are allgathered and rank 0's decision is broadcast.
 *   I6. LATEST is written after the commit point and is only a hint: readers
 *       (ckpt_latest_good) walk the step-<N>/ directories and verify.
 *   I7. Prune deletes a committed checkpoint by first renaming it back to
 *       .tmp-step-<N>/, so a crash while deleting never leaves a half-deleted
 *       step-<N>/ that looks committed.
 *   I8. Nothing under the root is followed: temp dirs, shards and LATEST.tmp
 *       are created afresh (a link or FIFO with the name is removed, never
 *       written through), removal never descends through a link, files
 *       are opened O_NOFOLLOW | O_NONBLOCK and must be regular files, and a
 *       step-<N> that is a link is listed as corrupt, never resumed from.
 *   I9. A checkpoint that fails to verify is never deleted by the library:
 *       ckpt_set_aside_after renames newer bad ones to step-<N>.corrupt so
 *       that a run resumed from an older step can save step N again.
 *   I10. A reader opens the step directory once and every file in it
 *       relative to that descriptor (openat), so a directory renamed or a
 *       link swapped in while it is read cannot mix two checkpoints; a
 *       step-<N> that is a link is refused at open, as ckpt_list lists it.
 *
 * STATE DIAGRAM (one step N)
 *
 *   (none) --ckpt_shard_write: mkdir .tmp-step-N, write+fsync shard, fsync dir-->
 *   [SHARDS WRITTEN]
 *      --ckpt_commit: allgather {rc, info}; any rc != 0 --> [ABORTED]
 *                     (rank 0 removes .tmp-step-N; all ranks fail, EPEER)
 *      --ckpt_commit (rank 0): write+fsync manifest.json.tmp, rename to
 *                     manifest.json, fsync .tmp-step-N -->
 *   [MANIFEST WRITTEN, still invisible]
 *      --ckpt_commit (rank 0): rename .tmp-step-N -> step-N, fsync root -->
 *   [COMMITTED]   (the commit point)
 *      --ckpt_commit (rank 0): write+fsync LATEST.tmp, rename to LATEST,
 *                     fsync root; bcast result -->
 *   [COMMITTED, LATEST updated]
 *      --ckpt_prune: rename step-N -> .tmp-step-N, fsync root, delete --> (none)
 *
 *   A crash in any state before COMMITTED leaves only .tmp-step-N, which
 *   readers ignore and ckpt_prune removes once a newer step is committed.
 */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"

/* ---- errors ----------------------------------------------------------- */

static _Thread_local char errbuf[512];

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t len;
    uint32_t cp;
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        len = 2, cp = p[0] & 0x1fu;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        len = 3, cp = p[0] & 0x0fu;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        len = 4, cp = p[0] & 0x07u;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0; /* overlong, a surrogate, or past U+10FFFF */
    if (cp >= 0x80 && cp <= 0x9f)
        return 0; /* a C1 control: escaped like C0 ones */
    return len;
}

size_t ckpt_text_clean(const char *s, char *buf, size_t cap)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), o = 0;
    if (cap == 0)
        return 0;
    while (n > 0) {
        size_t k = utf8_len(p, n);
        if (k == 1 && (*p < 0x20 || *p == 0x7f))
            k = 0;
        if (k == 0) { /* a control or a byte that is not UTF-8: \xNN */
            if (o + 4 >= cap)
                break;
            snprintf(buf + o, cap - o, "\\x%02x", *p);
            o += 4, p++, n--;
            continue;
        }
        if (o + k >= cap)
            break; /* never cut a character in two */
        memcpy(buf + o, p, k);
        o += k, p += k, n -= k;
    }
    buf[o] = '\0';
    return o;
}

int ckpt_seterr(int rc, const char *fmt, ...)
{
    int saved = errno;
    char raw[sizeof errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* Messages carry paths and manifest strings (anyone's bytes): they
     * reach terminals and JSON as valid UTF-8 without control codes. */
    ckpt_text_clean(raw, errbuf, sizeof errbuf);
    errno = saved;
    return rc;
}

const char *ckpt_last_error(void)
{
    return errbuf;
}

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

/* ---- small things ----------------------------------------------------- */

size_t ckpt_dtype_size(ckpt_dtype_t d)
{
    switch (d) {
    case CKPT_F32: return 4;
    case CKPT_F64: return 8;
    case CKPT_I64: return 8;
    case CKPT_U8: return 1;
    case CKPT_I32: return 4;
    }
    return 0;
}

const char *ckpt_dtype_name(ckpt_dtype_t d)
{
    switch (d) {
    case CKPT_F32: return "f32";
    case CKPT_F64: return "f64";
    case CKPT_I64: return "i64";
    case CKPT_U8: return "u8";
    case CKPT_I32: return "i32";
    }
    return NULL;
}

/* The CPUs of this process's affinity mask (taskset, mpirun's binding, a
 * SLURM cpuset), else the online CPUs; 1..8. */
static int default_threads(void)
{
    cpu_set_t set;
    long cpus = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = CPU_COUNT(&set);
    if (cpus < 1)
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
}

void ckpt_opts_default(ckpt_opts_t *opts)
{
    opts->level = 1; /* level 3 with shuffle compresses at about half the
                        speed for float data; see docs/checkpoint-format.md */
    /* One encoder thread per CPU this process may use (at most 8): frames
     * are independent, so a shard compresses in parallel.  Callers running
     * several processes on the same CPUs should pass their share. */
    opts->threads = default_threads();
    opts->shuffle = 1;
    opts->frame_bytes = CKPT_FRAME_DEFAULT;
    opts->fsync = 1;
    opts->direct = 1;
    opts->adapt = 1;
}

/* Make room in a growing array v of *cap elements of elem bytes: double it
 * (first elements the first time).  Returns the array, with *cap updated, or
 * NULL when out of memory (v and *cap unchanged). */
static void *grow(void *v, size_t *cap, size_t elem, size_t first)
{
    size_t nc = *cap ? 2 * *cap : first;
    void *p = nc <= SIZE_MAX / elem ? realloc(v, nc * elem) : NULL;
    if (p)
        *cap = nc;
    return p;
}

static int check_opts(const ckpt_opts_t *o)
{
    if (o->level < 0 || o->level > 19)
        return ckpt_seterr(CKPT_EINVAL, "zstd level %d is not in 0..19 "
                           "(0: stored)", o->level);
    if (o->threads < 0 || o->threads > 256)
        return ckpt_seterr(CKPT_EINVAL, "threads %d is not in 0..256",
                           o->threads);
    if (o->frame_bytes < 1 || o->frame_bytes > CKPT_FRAME_MAX)
        return ckpt_seterr(CKPT_EINVAL, "frame_bytes %zu is not in 1..%u",
                           o->frame_bytes, CKPT_FRAME_MAX);
    return CKPT_OK;
}

void ckpt_step_dirname(uint64_t step, char *buf, size_t cap)
{
    snprintf(buf, cap, CKPT_STEP_PREFIX "%08llu", (unsigned long long)step);
}

void ckpt_shard_name(int rank, char *buf, size_t cap)
{
    snprintf(buf, cap, "shard-%d.ftsh", rank);
}

int ckpt_parse_dirname(const char *name, int tmp, uint64_t *step)
{
    const char *p = tmp ? CKPT_TMP_PREFIX : CKPT_STEP_PREFIX;
    size_t pl = strlen(p), nd;
    uint64_t v = 0;
    char canon[64];

    if (strncmp(name, p, pl) != 0)
        return 0;
    name += pl;
    nd = strspn(name, "0123456789");
    if (nd == 0 || nd > 20 || name[nd] != '\0')
        return 0;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d = (uint64_t)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    ckpt_step_dirname(v, canon, sizeof canon);
    if (strcmp(canon + strlen(CKPT_STEP_PREFIX), name) != 0)
        return 0;
    *step = v;
    return 1;
}

int ckpt_path_join(char *buf, size_t cap, const char *dir, const char *name)
{
    int k = snprintf(buf, cap, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= cap)
        return ckpt_seterr(CKPT_EINVAL, "path too long: %s/%s", dir, name);
    return CKPT_OK;
}

/* ---- I/O helpers ------------------------------------------------------ */

int ckpt_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

int ckpt_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t k = pread(fd, p, len, (off_t)off);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (k == 0) {
            errno = EIO;
            return -1;
        }
        p += k;
        len -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int ckpt_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc, saved;
    if (fd < 0)
        return -1;
    rc = fsync(fd);
    saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int ckpt_read_small_file(const char *path, size_t max, char **out,
                         size_t *len)
{
    return ckpt_read_small_file_at(AT_FDCWD, path, path, max, out, len);
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
    if (fstat(fd, &st) != 0) {
        rc = ckpt_seterr(CKPT_EIO, "%s: stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: not a regular file of at most %zu "
                         "bytes", path, max);
        goto fail;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        rc = ckpt_seterr(CKPT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (ckpt_pread_all(fd, buf, (size_t)st.st_size, 0) != 0) {
        rc = ckpt_seterr(CKPT_EIO, "%s: read: %s", path, strerror(errno));
        goto fail;
    }
    buf[st.st_size] = '\0';
    *out = buf;
    if (len)
        *len = (size_t)st.st_size;
    buf = NULL;
fail:
    free(buf);
    close(fd);
    return rc;
}

int ckpt_write_file_atomic(const char *dir, const char *name,
                           const char *tmpname, const void *data, size_t len,
                           int do_fsync)
{
    int rc = CKPT_OK, fd = -1, saved;
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX];

    if ((rc = ckpt_path_join(tmp, sizeof tmp, dir, tmpname)) != CKPT_OK ||
        (rc = ckpt_path_join(fin, sizeof fin, dir, name)) != CKPT_OK)
        return rc;
    /* The temp name may be left by a crash, or be a link or FIFO someone
     * planted: remove whatever it is (never follow it) and create afresh. */
    if (unlink(tmp) != 0 && errno != ENOENT && errno != EISDIR)
        return ckpt_seterr(CKPT_EIO, "%s: cannot remove: %s", tmp,
                           strerror(errno));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", tmp,
                           strerror(errno));
    if (ckpt_write_all(fd, data, len) != 0 || (do_fsync && fsync(fd) != 0)) {
        rc = ckpt_seterr(CKPT_EIO, "%s: write: %s", tmp, strerror(errno));
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = ckpt_seterr(CKPT_EIO, "%s: close: %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1;
    if (rename(tmp, fin) != 0) {
        rc = ckpt_seterr(CKPT_EIO, "rename %s -> %s: %s", tmp, fin,
                         strerror(errno));
        goto fail;
    }
    if (do_fsync && ckpt_fsync_dir(dir) != 0)
        return ckpt_seterr(CKPT_EIO, "%s: fsync directory: %s", dir,
                           strerror(errno));
    return CKPT_OK;
fail:
    saved = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    errno = saved;
    return rc;
}

/* ---- layout ----------------------------------------------------------- */

int ckpt_name_printable(const char *name)
{
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

/* Check a tensor's name, dtype and shape; *nbytes gets its size. */
static int check_tensor(const ckpt_tensor_t *t, size_t i, uint64_t *nbytes)
{
    uint64_t elems = 1, esz = ckpt_dtype_size(t->dtype);
    size_t nl = strnlen(t->name, CKPT_NAME_MAX);
    if (nl == 0 || nl >= CKPT_NAME_MAX)
        return ckpt_seterr(CKPT_EINVAL, "tensor %zu: name is empty or not "
                           "NUL-terminated within %d bytes", i, CKPT_NAME_MAX);
    if (!ckpt_name_printable(t->name))
        return ckpt_seterr(CKPT_EINVAL, "tensor %zu: name holds a control "
                           "character", i);
    if (esz == 0)
        return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": unknown dtype %d",
                           t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > CKPT_MAX_DIMS)
        return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": ndim %d is not in "
                           "0..%d", t->name, t->ndim, CKPT_MAX_DIMS);
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": negative shape",
                               t->name);
        if (t->shape[d] != 0 &&
            elems > ((uint64_t)1 << 53) / (uint64_t)t->shape[d])
            return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": shape overflows",
                               t->name);
        elems *= (uint64_t)t->shape[d];
    }
    if (elems > ((uint64_t)1 << 53) / esz)
        return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\": too large", t->name);
    *nbytes = elems * esz;
    return CKPT_OK;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const ckpt_tensor_t *const *)a)->name,
                  (*(const ckpt_tensor_t *const *)b)->name);
}

/* Lay out (when set != 0) or check the layout of n tensors. */
static int do_layout(ckpt_tensor_t *wt, const ckpt_tensor_t *t, size_t n,
                     uint64_t *total)
{
    int rc = CKPT_OK;
    uint64_t pos = 0, nb = 0, off;
    const ckpt_tensor_t **p = NULL;

    if (!t && n > 0)
        return ckpt_seterr(CKPT_EINVAL, "tensors is NULL");
    for (size_t i = 0; i < n; i++) {
        if ((rc = check_tensor(&t[i], i, &nb)) != CKPT_OK)
            return rc;
        off = (pos + 7) & ~(uint64_t)7;
        if (off + nb > ((uint64_t)1 << 53))
            return ckpt_seterr(CKPT_EINVAL, "tensors exceed 2^53 bytes");
        if (wt) {
            wt[i].offset = off;
            wt[i].nbytes = nb;
        } else if (t[i].offset != off || t[i].nbytes != nb) {
            return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\" is not laid out "
                               "(call ckpt_layout)", t[i].name);
        }
        pos = off + nb;
    }
    p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return ckpt_seterr(CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        p[i] = &t[i];
    qsort(p, n, sizeof *p, cmp_tensor_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(p[i - 1]->name, p[i]->name) == 0) {
            rc = ckpt_seterr(CKPT_EINVAL, "duplicate tensor name \"%s\"",
                             p[i]->name);
            break;
        }
    free(p);
    if (rc == CKPT_OK)
        *total = pos;
    return rc;
}

int ckpt_layout(ckpt_tensor_t *tensors, size_t n, uint64_t *total_bytes)
{
    if (!total_bytes)
        return ckpt_seterr(CKPT_EINVAL, "total_bytes is NULL");
    return do_layout(tensors, tensors, n, total_bytes);
}

int ckpt_check_layout(const ckpt_tensor_t *t, size_t n, uint64_t *total)
{
    return do_layout(NULL, t, n, total);
}

/* Rank i of w owns [floor(i*T/w), floor((i+1)*T/w)). */
static uint64_t slice_start(int i, int w, uint64_t total)
{
    return (uint64_t)((unsigned __int128)total * (unsigned)i / (unsigned)w);
}

/* ---- save, phase one -------------------------------------------------- */

/* Is there a committed (or at least existing) step-<N> directory? */
static int step_exists(const char *root, uint64_t step)
{
    char name[64], path[CKPT_PATH_MAX];
    struct stat st;
    ckpt_step_dirname(step, name, sizeof name);
    if (ckpt_path_join(path, sizeof path, root, name) != CKPT_OK)
        return 0;
    return lstat(path, &st) == 0;
}

/* mkdir path, or accept the directory that is there (a crashed attempt at
 * the same step, or another rank's mkdir).  Anything else with that name, a
 * symbolic link in particular, is removed rather than followed: writing
 * through it would put shards, and later deletions, outside the root.
 * @return 0 or -1 with errno. */
static int make_real_dir(const char *path)
{
    struct stat st;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (mkdir(path, 0755) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
        if (lstat(path, &st) != 0)
            return -1;
        if (S_ISDIR(st.st_mode))
            return 0;
        if (unlink(path) != 0 && errno != ENOENT)
            return -1;
    }
    errno = EEXIST;
    return -1;
}

int ckpt_shard_write(const char *root, uint64_t step, int rank, int world,
                     const ckpt_tensor_t *tensors, size_t n,
                     const ckpt_opts_t *opts, ckpt_shard_info_t *info)
{
    int rc;
    ckpt_opts_t def;
    uint64_t total;
    char name[64], tmpdir[CKPT_PATH_MAX], path[CKPT_PATH_MAX];

    if (!root || !info || world < 1 || world > CKPT_MAX_SHARDS || rank < 0 ||
        rank >= world)
        return ckpt_seterr(CKPT_EINVAL, "shard_write: bad root, info, rank %d "
                           "or world %d", rank, world);
    if (step > INT64_MAX)
        return ckpt_seterr(CKPT_EINVAL, "step %llu is too large",
                           (unsigned long long)step);
    if (!opts) {
        ckpt_opts_default(&def);
        opts = &def;
    }
    if ((rc = check_opts(opts)) != CKPT_OK ||
        (rc = ckpt_check_layout(tensors, n, &total)) != CKPT_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (!tensors[i].data && tensors[i].nbytes > 0)
            return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\" has no data",
                               tensors[i].name);
    if (step_exists(root, step)) {
        ckpt_step_dirname(step, name, sizeof name);
        return ckpt_seterr(CKPT_EEXIST, "%s/%s already exists", root, name);
    }
    if (mkdir(root, 0755) == 0) {
        /* A new root: its own name must be durable too, or a crash could
         * take the root, and the checkpoints committed in it, away. */
        char parent[CKPT_PATH_MAX];
        char *slash;
        snprintf(parent, sizeof parent, "%s", root);
        while ((slash = strrchr(parent, '/')) && slash[1] == '\0' &&
               slash != parent)
            *slash = '\0';
        slash = strrchr(parent, '/');
        if (!slash)
            snprintf(parent, sizeof parent, ".");
        else
            slash[slash == parent ? 1 : 0] = '\0';
        if (opts->fsync && ckpt_fsync_dir(parent) != 0)
            return ckpt_seterr(CKPT_EIO, "%s: fsync directory: %s", parent,
                               strerror(errno));
    } else if (errno != EEXIST) {
        return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", root,
                           strerror(errno));
    }
    snprintf(name, sizeof name, CKPT_TMP_PREFIX "%08llu",
             (unsigned long long)step);
    if ((rc = ckpt_path_join(tmpdir, sizeof tmpdir, root, name)) != CKPT_OK)
        return rc;
    if (make_real_dir(tmpdir) != 0)
        return ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", tmpdir,
                           strerror(errno));
    ckpt_shard_name(rank, name, sizeof name);
    if ((rc = ckpt_path_join(path, sizeof path, tmpdir, name)) != CKPT_OK)
        return rc;
    rc = ckpt_shard_encode(path, slice_start(rank, world, total),
                           slice_start(rank + 1, world, total), tensors, n,
                           opts, info);
    if (rc != CKPT_OK)
        return rc;
    if (opts->fsync && (ckpt_fsync_dir(tmpdir) != 0 ||
                        ckpt_fsync_dir(root) != 0)) {
        rc = ckpt_seterr(CKPT_EIO, "%s: fsync directory: %s", tmpdir,
                         strerror(errno));
        unlink(path);
    }
    return rc;
}

/* ---- save, phase two -------------------------------------------------- */

/* What each rank contributes to the allgather. */
typedef struct {
    int32_t rc;
    uint32_t pad;
    ckpt_shard_info_t info;
} gather_msg_t;

/* The allgather's buffers when calloc fails (ckpt_commit); untouched, and so
 * not resident, until then.  A lock is held across the commit's collectives,
 * so each commit in flight needs its own: up to GATHER_SPARES ranks of one
 * process (threads sharing a collective) can be out of memory in one commit
 * at once; a further one waits for a spare, which can deadlock only if all
 * of them belong to the same collective. */
#define GATHER_SPARES 4
static gather_msg_t gather_spare[GATHER_SPARES][CKPT_MAX_SHARDS];
static pthread_mutex_t gather_spare_lock[GATHER_SPARES] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER};

/* Take a free spare; its index.  Blocks only when all are taken. */
static int gather_spare_take(void)
{
    for (int i = 0; i < GATHER_SPARES; i++)
        if (pthread_mutex_trylock(&gather_spare_lock[i]) == 0)
            return i;
    pthread_mutex_lock(&gather_spare_lock[0]);
    return 0;
}

/* Remove name (relative to the directory fd at): a file, link or FIFO is
 * unlinked; a directory is emptied depth first and removed.  Nothing is
 * followed: a symbolic link is removed itself, never what it points to, so
 * a link planted as .tmp-step-<N> or inside one cannot make this delete
 * files outside the root.  @return 0 or -1 with errno (the first error;
 * the rest is still attempted). */
static int remove_tree_at(int at, const char *name, int depth)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    int fd, rc = 0, saved = 0;

    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(at, name, 0) == 0 || errno == ENOENT ? 0 : -1;
    if (depth > 16) { /* nothing this library writes is nested */
        errno = ELOOP;
        return -1;
    }
    fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1; /* removed meanwhile: done */
    if (!(d = fdopendir(fd))) {
        saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (remove_tree_at(dirfd(d), e->d_name, depth + 1) != 0 && !saved) {
            saved = errno;
            rc = -1;
        }
    }
    closedir(d);
    if (rc == 0 && unlinkat(at, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        return -1;
    errno = saved ? saved : errno;
    return rc;
}

/* Remove dir and everything in it, following no link (see remove_tree_at).
 * @return 0 or -1 with errno. */
static int remove_dir(const char *dir)
{
    return remove_tree_at(AT_FDCWD, dir, 0);
}

/* Remove everything in tmpdir that is not one of the world's shards, so a
 * crashed earlier attempt at the same step leaves nothing behind (a shard
 * name that is not a regular file goes too). */
static void remove_strays(const char *tmpdir, int world)
{
    int fd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        int r;
        char want[64];
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (sscanf(e->d_name, "shard-%d.ftsh", &r) == 1 && r >= 0 &&
            r < world &&
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode)) {
            ckpt_shard_name(r, want, sizeof want);
            if (strcmp(want, e->d_name) == 0)
                continue;
        }
        (void)remove_tree_at(dirfd(d), e->d_name, 1);
    }
    closedir(d);
}

/* Read the step named by root/LATEST; @return 1 and *step when valid. */
static int read_latest(const char *root, char *name, size_t cap,
                       uint64_t *step)
{
    char path[CKPT_PATH_MAX], *text = NULL, keep[sizeof errbuf];
    size_t len;
    int ok = 0;
    /* LATEST is optional: looking at it must not clobber the last error. */
    memcpy(keep, errbuf, sizeof keep);
    if (ckpt_path_join(path, sizeof path, root, CKPT_LATEST_NAME) != CKPT_OK ||
        ckpt_read_small_file(path, 256, &text, &len) != CKPT_OK) {
        memcpy(errbuf, keep, sizeof keep);
        return 0;
    }
    if (len > 0 && text[len - 1] == '\n')
        text[--len] = '\0';
    if (strlen(text) == len && len < cap &&
        ckpt_parse_dirname(text, 0, step)) {
        strcpy(name, text);
        ok = 1;
    }
    free(text);
    return ok;
}

/* rename(2) that never replaces an existing `to` (EEXIST instead).  Where
 * the filesystem lacks RENAME_NOREPLACE, a check then a plain rename: a
 * racing creator of `to` could still lose, but an existing entry never
 * does.  @return 0 or -1 with errno. */
int ckpt_rename_noreplace(const char *from, const char *to)
{
    struct stat st;
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    if (lstat(to, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(from, to);
}

/* Rank 0's part of the commit, once every rank's shard is written. */
static int commit_rank0(const char *root, uint64_t step,
                        const ckpt_tensor_t *tensors, size_t n, uint64_t total,
                        const char *record_json, const ckpt_opts_t *opts,
                        const gather_msg_t *all, int world)
{
    int rc = CKPT_OK;
    char name[64], tname[64], tmpdir[CKPT_PATH_MAX], fin[CKPT_PATH_MAX],
         path[CKPT_PATH_MAX], latest[80], *text = NULL;
    ckpt_manifest_t m;
    ckpt_shard_info_t *infos = NULL;
    struct stat st;
    uint64_t lstep;

    ckpt_step_dirname(step, name, sizeof name);
    snprintf(tname, sizeof tname, CKPT_TMP_PREFIX "%08llu",
             (unsigned long long)step);
    if ((rc = ckpt_path_join(tmpdir, sizeof tmpdir, root, tname)) ||
        (rc = ckpt_path_join(fin, sizeof fin, root, name)))
        return rc;
    if (lstat(fin, &st) == 0) {
        /* It appeared after phase one (an import, another job): this
         * save's temp dir is removed like any failed commit's. */
        rc = ckpt_seterr(CKPT_EEXIST, "%s already exists", fin);
        goto fail;
    }
    infos = calloc((size_t)world, sizeof *infos);
    if (!infos) {
        rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < world; i++) {
        char sname[64];
        infos[i] = all[i].info;
        if (infos[i].raw_offset != slice_start(i, world, total) ||
            infos[i].raw_bytes != slice_start(i + 1, world, total) -
                                      slice_start(i, world, total)) {
            rc = ckpt_seterr(CKPT_EINVAL, "rank %d wrote bytes [%llu, +%llu), "
                             "not its slice of %llu bytes over %d ranks", i,
                             (unsigned long long)infos[i].raw_offset,
                             (unsigned long long)infos[i].raw_bytes,
                             (unsigned long long)total, world);
            goto fail;
        }
        ckpt_shard_name(i, sname, sizeof sname);
        if ((rc = ckpt_path_join(path, sizeof path, tmpdir, sname)) != CKPT_OK)
            goto fail;
        if (stat(path, &st) != 0 || (uint64_t)st.st_size != infos[i].file_bytes) {
            rc = ckpt_seterr(CKPT_EINCOMPLETE, "%s: missing or of the wrong "
                             "size", path);
            goto fail;
        }
    }
    remove_strays(tmpdir, world);

    memset(&m, 0, sizeof m);
    m.version = CKPT_FORMAT_VERSION;
    m.step = step;
    m.created = (int64_t)time(NULL);
    m.total_bytes = total;
    m.ntensors = n;
    m.tensors = (ckpt_tensor_t *)tensors;
    m.nshards = world;
    m.shards = infos;
    m.opts = *opts;
    m.record = (char *)record_json;
    if ((rc = ckpt_manifest_dump(&m, &text)) != CKPT_OK)
        goto fail;
    rc = ckpt_write_file_atomic(tmpdir, CKPT_MANIFEST_NAME, CKPT_MANIFEST_TMP,
                                text, strlen(text), opts->fsync);
    if (rc != CKPT_OK)
        goto fail;

    /* The commit point: the directory becomes visible under its final name.
     * RENAME_NOREPLACE keeps a step-<N> that appeared meanwhile intact. */
    if (ckpt_rename_noreplace(tmpdir, fin) != 0) {
        if (errno == EEXIST || errno == ENOTEMPTY) {
            rc = ckpt_seterr(CKPT_EEXIST, "%s already exists", fin);
            goto fail;
        }
        rc = ckpt_seterr(CKPT_EIO, "rename %s -> %s: %s", tmpdir, fin,
                         strerror(errno));
        goto fail;
    }
    if (opts->fsync && ckpt_fsync_dir(root) != 0) {
        /* Renamed but perhaps not durable: report it, never undo it (I3). */
        rc = ckpt_seterr(CKPT_EIO, "%s: fsync directory after commit: %s",
                         root, strerror(errno));
        goto out;
    }

    /* LATEST is a hint written after the commit point; it never moves back
     * to an older step that exists (an asynchronous save may commit after
     * a newer one), and failing to write it does not undo the commit. */
    if (!read_latest(root, latest, sizeof latest, &lstep) || lstep <= step ||
        !step_exists(root, lstep)) {
        snprintf(latest, sizeof latest, "%s\n", name);
        (void)ckpt_write_file_atomic(root, CKPT_LATEST_NAME, CKPT_LATEST_TMP,
                                     latest, strlen(latest), opts->fsync);
    }
    goto out;
fail:
    /* Not committed: the temp dir is garbage now that all ranks are past
     * phase one. */
    if (rc != CKPT_EEXIST || lstat(fin, &st) == 0)
        (void)remove_dir(tmpdir);
out:
    free(text);
    free(infos);
    return rc;
}

int ckpt_commit(const char *root, uint64_t step, const ckpt_tensor_t *tensors,
                size_t n, const char *record_json, const ckpt_opts_t *opts,
                int local_rc, const ckpt_shard_info_t *info,
                const ckpt_coll_t *coll)
{
    int rc = CKPT_OK, rank = coll ? coll->rank : 0, world = coll ? coll->size : 1;
    int32_t decision = CKPT_OK;
    gather_msg_t msg, *all = NULL;
    ckpt_opts_t def;
    uint64_t total = 0;

    if (world < 1 || world > CKPT_MAX_SHARDS || rank < 0 || rank >= world ||
        (coll && (!coll->allgather || !coll->bcast)))
        return ckpt_seterr(CKPT_EINVAL, "commit: bad collective (rank %d of "
                           "%d)", rank, world);
    if (!opts) {
        ckpt_opts_default(&def);
        opts = &def;
    }
    memset(&msg, 0, sizeof msg);
    msg.rc = local_rc;
    if (msg.rc == CKPT_OK && (!root || !info))
        msg.rc = ckpt_seterr(CKPT_EINVAL, "commit: root or info is NULL");
    if (msg.rc == CKPT_OK)
        msg.rc = check_opts(opts);
    if (msg.rc == CKPT_OK)
        msg.rc = ckpt_check_layout(tensors, n, &total);
    if (msg.rc == CKPT_OK && rank == 0) {
        /* Validate the record where it is used, before anything is written. */
        ckpt_manifest_t probe;
        char *text = NULL;
        memset(&probe, 0, sizeof probe);
        probe.record = (char *)record_json;
        msg.rc = ckpt_manifest_dump(&probe, &text);
        free(text);
    }
    if (msg.rc == CKPT_OK)
        msg.info = *info;
    /* Every rank must reach the allgather, or the others wait for ever:
     * without memory for it, take the spare buffer and vote failure. */
    int spare = -1;
    all = calloc((size_t)world, sizeof *all);
    if (!all) {
        spare = gather_spare_take();
        all = gather_spare[spare];
        if (msg.rc == CKPT_OK)
            msg.rc = ckpt_seterr(CKPT_ENOMEM, "commit of step %llu: out of memory for "
                                 "%d ranks' shard descriptions", (unsigned long long)step, world);
    }
    if (!coll) {
        all[0] = msg;
    } else if (coll->allgather(coll->ctx, &msg, all, sizeof msg) != 0) {
        rc = ckpt_seterr(CKPT_EPEER, "commit of step %llu: allgather failed",
                         (unsigned long long)step);
        goto fail;
    }
    if (rank == 0) {
        int bad = -1;
        for (int i = 0; i < world && bad < 0; i++)
            if (all[i].rc != CKPT_OK)
                bad = i;
        if (bad >= 0) {
            char name[64], tmpdir[CKPT_PATH_MAX];
            decision = CKPT_EPEER;
            if (bad > 0)
                ckpt_seterr(CKPT_EPEER, "rank %d failed to write its shard "
                            "of step %llu (%s); nothing committed", bad,
                            (unsigned long long)step,
                            ckpt_strerror(all[bad].rc));
            /* Every rank is past phase one: the temp dir is garbage. */
            snprintf(name, sizeof name, CKPT_TMP_PREFIX "%08llu",
                     (unsigned long long)step);
            if (root && ckpt_path_join(tmpdir, sizeof tmpdir, root, name) ==
                            CKPT_OK)
                (void)remove_dir(tmpdir);
        } else {
            decision = commit_rank0(root, step, tensors, n, total,
                                    record_json, opts, all, world);
        }
    }
    if (coll && coll->bcast(coll->ctx, &decision, sizeof decision, 0) != 0) {
        rc = ckpt_seterr(CKPT_EPEER, "commit of step %llu: bcast failed",
                         (unsigned long long)step);
        goto fail;
    }
    if (msg.rc != CKPT_OK)
        rc = msg.rc; /* this rank's own failure; its message is already set */
    else if (decision == CKPT_EPEER && rank != 0)
        rc = ckpt_seterr(CKPT_EPEER, "another rank failed; step %llu was not "
                         "committed", (unsigned long long)step);
    else if (decision != CKPT_OK && rank != 0)
        rc = ckpt_seterr(decision, "rank 0 failed to commit step %llu: %s",
                         (unsigned long long)step, ckpt_strerror(decision));
    else
        rc = decision;
fail:
    if (spare >= 0)
        pthread_mutex_unlock(&gather_spare_lock[spare]);
    else
        free(all);
    return rc;
}

int ckpt_save(const char *root, uint64_t step, ckpt_tensor_t *tensors,
              size_t n, const char *record_json, const ckpt_opts_t *opts,
              const ckpt_coll_t *coll)
{
    int rank = coll ? coll->rank : 0, world = coll ? coll->size : 1, rc;
    uint64_t total;
    ckpt_shard_info_t info;

    memset(&info, 0, sizeof info);
    rc = ckpt_layout(tensors, n, &total);
    if (rc == CKPT_OK)
        rc = ckpt_shard_write(root, step, rank, world, tensors, n, opts, &info);
    return ckpt_commit(root, step, tensors, n, record_json, opts, rc, &info,
                       coll);
}

/* ---- reading ---------------------------------------------------------- */

struct ckpt {
    char dir[CKPT_PATH_MAX];
    int dfd;                      /* the step directory, opened once (I10) */
    ckpt_manifest_t m;
    ckpt_shard_reader_t *readers; /* fd < 0 until first used */
    unsigned char *cache;         /* last partially used frame */
    size_t cache_cap;
    int cache_shard;
    uint32_t cache_frame;
    int threads;                  /* decoding threads of ckpt_read_range */
};

int ckpt_open(const char *dir, ckpt_t **out)
{
    int rc = CKPT_OK, dfd = -1, is_step;
    ckpt_t *c = NULL;
    char path[CKPT_PATH_MAX], name[CKPT_PATH_MAX], *text = NULL;
    const char *base;
    size_t len, l;
    struct stat st;
    uint64_t dstep = 0;

    if (!dir || !out)
        return ckpt_seterr(CKPT_EINVAL, "open: dir or out is NULL");
    *out = NULL;
    /* "root/step-N/" names root/step-N: trailing slashes are not part of
     * the name (and would make the kernel follow a link there). */
    if (strlen(dir) >= sizeof name)
        return ckpt_seterr(CKPT_EINVAL, "%.200s...: path too long", dir);
    strcpy(name, dir);
    l = strlen(name);
    while (l > 1 && name[l - 1] == '/')
        name[--l] = '\0';
    base = strrchr(name, '/');
    base = base ? base + 1 : name;
    is_step = ckpt_parse_dirname(base, 0, &dstep);
    /* I10: the directory is opened once and every file is opened relative
     * to it, so a rename or a link swapped in while it is read cannot mix
     * two checkpoints.  A step-<N> itself is never followed when it is a
     * link, as ckpt_list calls such an entry corrupt (I8); a link of
     * another name (".../best") is the user's and is followed. */
    dfd = open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (is_step ? O_NOFOLLOW : 0));
    if (dfd < 0) {
        int e = errno;
        if (is_step && (e == ELOOP || e == ENOTDIR) &&
            lstat(name, &st) == 0 && S_ISLNK(st.st_mode))
            return ckpt_seterr(CKPT_ECORRUPT, "%s: a symbolic link, not a directory "
                               "(a step-<N> that is a link is not followed)", dir);
        if (e == ENOTDIR && lstat(name, &st) == 0 && !S_ISDIR(st.st_mode))
            return ckpt_seterr(CKPT_ECORRUPT, "%s: not a directory", dir);
        if (e == ENOENT || e == ENOTDIR)
            return ckpt_seterr(CKPT_ENOTFOUND, "%s: no such checkpoint directory", dir);
        return ckpt_seterr(CKPT_EIO, "%s: cannot open: %s", dir, strerror(e));
    }
    if ((rc = ckpt_path_join(path, sizeof path, dir, CKPT_MANIFEST_NAME)))
        goto fail;
    rc = ckpt_read_small_file_at(dfd, CKPT_MANIFEST_NAME, path, CKPT_MANIFEST_MAX,
                                 &text, &len);
    if (rc == CKPT_ENOTFOUND)
        rc = ckpt_seterr(CKPT_EINCOMPLETE, "%s: no manifest.json (not "
                         "committed)", dir);
    if (rc != CKPT_OK)
        goto fail;
    c = calloc(1, sizeof *c);
    if (!c) {
        rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
        goto fail;
    }
    strcpy(c->dir, dir);
    c->dfd = dfd;
    dfd = -1;
    c->cache_shard = -1;
    c->threads = default_threads();
    if ((rc = ckpt_manifest_parse(text, len, path, &c->m)) != CKPT_OK)
        goto fail;
    /* A canonical step-<N> directory must hold step N. */
    if (is_step && dstep != c->m.step) {
        rc = ckpt_seterr(CKPT_EFORMAT, "%s: step is %llu but the "
                         "directory is %s", path,
                         (unsigned long long)c->m.step, base);
        goto fail;
    }
    c->readers = calloc((size_t)c->m.nshards, sizeof *c->readers);
    if (!c->readers) {
        rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < c->m.nshards; i++)
        c->readers[i].fd = -1;
    *out = c;
    c = NULL;
fail:
    if (dfd >= 0)
        close(dfd);
    free(text);
    ckpt_close(c);
    return rc;
}

void ckpt_close(ckpt_t *c)
{
    if (!c)
        return;
    if (c->readers)
        for (int i = 0; i < c->m.nshards; i++)
            ckpt_shard_reader_close(&c->readers[i]);
    free(c->readers);
    free(c->cache);
    ckpt_manifest_free(&c->m);
    if (c->dfd >= 0)
        close(c->dfd);
    free(c);
}

uint64_t ckpt_step(const ckpt_t *c) { return c->m.step; }
uint64_t ckpt_total_bytes(const ckpt_t *c) { return c->m.total_bytes; }
int ckpt_world_size(const ckpt_t *c) { return c->m.nshards; }
size_t ckpt_num_tensors(const ckpt_t *c) { return c->m.ntensors; }
const char *ckpt_record_json(const ckpt_t *c) { return c->m.record; }
int64_t ckpt_created(const ckpt_t *c) { return c->m.created; }
int ckpt_manifest_checksummed(const ckpt_t *c) { return c->m.checksummed; }

const ckpt_tensor_t *ckpt_tensor_at(const ckpt_t *c, size_t i)
{
    return i < c->m.ntensors ? &c->m.tensors[i] : NULL;
}

const ckpt_tensor_t *ckpt_find(const ckpt_t *c, const char *name)
{
    for (size_t i = 0; name && i < c->m.ntensors; i++)
        if (strcmp(c->m.tensors[i].name, name) == 0)
            return &c->m.tensors[i];
    return NULL;
}

const ckpt_shard_info_t *ckpt_shard_at(const ckpt_t *c, int i)
{
    return i >= 0 && i < c->m.nshards ? &c->m.shards[i] : NULL;
}

/* Open shard s's reader if it is not open yet. */
static int reader(ckpt_t *c, int s, ckpt_shard_reader_t **out)
{
    int rc;
    char name[64], path[CKPT_PATH_MAX];
    if (c->readers[s].fd >= 0) {
        *out = &c->readers[s];
        return CKPT_OK;
    }
    ckpt_shard_name(s, name, sizeof name);
    if ((rc = ckpt_path_join(path, sizeof path, c->dir, name)) != CKPT_OK)
        return rc;
    rc = ckpt_shard_reader_open(&c->readers[s], c->dfd, name, path, &c->m.shards[s]);
    if (rc == CKPT_OK)
        *out = &c->readers[s];
    return rc;
}

/* The shard holding flat byte pos (pos < total). */
static int find_shard(const ckpt_t *c, uint64_t pos)
{
    int lo = 0, hi = c->m.nshards;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (c->m.shards[mid].raw_offset <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void ckpt_set_read_threads(ckpt_t *c, int threads)
{
    if (c)
        c->threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
}

/* Frame-parallel reading.  The whole frames of a range are jobs; K threads
 * (the caller among them) take them in order, each with its own decoder,
 * and decode straight into place.  The readers are only read (pread at
 * frame offsets), so they are shared.  The failed job with the lowest index
 * among those that ran gives the error. */
typedef struct {
    const ckpt_shard_reader_t *r;
    uint32_t frame;
    unsigned char *dst;
} read_job_t;

typedef struct {
    const read_job_t *jobs;
    size_t n, next;
    pthread_mutex_t mu;
    int rc;
    size_t bad;       /* the failed job with the lowest index */
    char msg[512];    /* its message: the workers' ckpt_seterr is per thread */
} read_pool_t;

static void *read_worker(void *arg)
{
    read_pool_t *p = arg;
    ckpt_decoder_t d;
    memset(&d, 0, sizeof d);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t k = p->rc ? p->n : p->next++;
        pthread_mutex_unlock(&p->mu);
        if (k >= p->n)
            break;
        const read_job_t *j = &p->jobs[k];
        int rc = ckpt_shard_read_frame_dec(j->r, &d, j->frame, j->dst);
        if (rc != CKPT_OK) {
            pthread_mutex_lock(&p->mu);
            if (!p->rc || k < p->bad) {
                p->rc = rc;
                p->bad = k;
                snprintf(p->msg, sizeof p->msg, "%s", ckpt_last_error());
            }
            pthread_mutex_unlock(&p->mu);
        }
    }
    ckpt_decoder_free(&d);
    return NULL;
}

static int run_read_jobs(const read_job_t *jobs, size_t n, int threads)
{
    read_pool_t p;
    pthread_t th[64];
    int k = threads < 1 ? 1 : threads > 64 ? 64 : threads, started = 0;
    if ((size_t)k > n)
        k = (int)n;
    memset(&p, 0, sizeof p);
    p.jobs = jobs;
    p.n = n;
    if (pthread_mutex_init(&p.mu, NULL) != 0)
        return ckpt_seterr(CKPT_ENOMEM, "cannot create a mutex");
    for (int i = 1; i < k; i++) {
        if (pthread_create(&th[started], NULL, read_worker, &p) != 0)
            break; /* fewer threads: the caller and those started do it all */
        started++;
    }
    read_worker(&p);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p.mu);
    return p.rc ? ckpt_seterr(p.rc, "%s", p.msg) : CKPT_OK;
}

int ckpt_read_range(ckpt_t *c, uint64_t offset, uint64_t len, void *dst)
{
    int rc = CKPT_OK;
    uint64_t pos = offset, end;
    unsigned char *out = dst;
    read_job_t *jobs = NULL;
    size_t njobs = 0, jcap = 0;

    if (!c || (!dst && len > 0) || offset > c->m.total_bytes ||
        len > c->m.total_bytes - offset)
        return ckpt_seterr(CKPT_EINVAL, "read_range: [%llu, +%llu) is outside "
                           "the checkpoint", (unsigned long long)offset,
                           (unsigned long long)len);
    end = offset + len;
    while (pos < end) {
        int s = find_shard(c, pos);
        ckpt_shard_reader_t *r;
        const ckpt_frame_t *f;
        uint32_t fi;
        uint64_t local, a, take;

        if ((rc = reader(c, s, &r)) != CKPT_OK)
            goto fail;
        local = pos - c->m.shards[s].raw_offset;
        fi = ckpt_shard_find_frame(r, local);
        f = &r->frames[fi];
        a = local - f->raw_offset;
        take = f->raw_size - a < end - pos ? f->raw_size - a : end - pos;
        if (a == 0 && take == f->raw_size && c->threads > 1) {
            if (njobs == jcap) { /* a whole frame: a job for later */
                read_job_t *p = grow(jobs, &jcap, sizeof *jobs, 64);
                if (!p) {
                    rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
                    goto fail;
                }
                jobs = p;
            }
            jobs[njobs].r = r;
            jobs[njobs].frame = fi;
            jobs[njobs].dst = out + (pos - offset);
            njobs++;
        } else if (a == 0 && take == f->raw_size) {
            rc = ckpt_shard_read_frame(r, fi, out + (pos - offset));
            if (rc != CKPT_OK)
                goto fail;
        } else {
            if (c->cache_shard != s || c->cache_frame != fi) {
                if (c->cache_cap < f->raw_size) {
                    void *p = realloc(c->cache, f->raw_size);
                    if (!p) {
                        rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
                        goto fail;
                    }
                    c->cache = p;
                    c->cache_cap = f->raw_size;
                }
                c->cache_shard = -1;
                rc = ckpt_shard_read_frame(r, fi, c->cache);
                if (rc != CKPT_OK)
                    goto fail;
                c->cache_shard = s;
                c->cache_frame = fi;
            }
            memcpy(out + (pos - offset), c->cache + a, take);
        }
        pos += take;
    }
    if (njobs == 1)
        rc = ckpt_shard_read_frame((ckpt_shard_reader_t *)jobs[0].r, jobs[0].frame,
                                   jobs[0].dst);
    else if (njobs > 1)
        rc = run_read_jobs(jobs, njobs, c->threads);
fail:
    free(jobs);
    return rc;
}

int ckpt_read_tensor(ckpt_t *c, const char *name, void *dst, uint64_t cap)
{
    const ckpt_tensor_t *t = c ? ckpt_find(c, name) : NULL;
    if (!t)
        return ckpt_seterr(CKPT_ENOTFOUND, "%s: no tensor \"%s\"",
                           c ? c->dir : "(null)", name ? name : "(null)");
    if (cap < t->nbytes)
        return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\" needs %llu bytes, "
                           "buffer has %llu", name,
                           (unsigned long long)t->nbytes,
                           (unsigned long long)cap);
    return ckpt_read_range(c, t->offset, t->nbytes, dst);
}

int ckpt_verify(ckpt_t *c)
{
    int rc = CKPT_OK;
    ckpt_shard_reader_t *r;
    if (!c)
        return ckpt_seterr(CKPT_EINVAL, "verify: NULL checkpoint");
    for (int s = 0; s < c->m.nshards && rc == CKPT_OK; s++) {
        if ((rc = reader(c, s, &r)) == CKPT_OK)
            rc = ckpt_shard_verify(r, &c->m.shards[s]);
    }
    return rc;
}

/* ---- managing a root -------------------------------------------------- */

static int cmp_entry(const void *a, const void *b)
{
    const ckpt_entry_t *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Fill e for the step directory root/e->name. */
static void inspect_step(const char *root, int verify, ckpt_entry_t *e)
{
    char path[CKPT_PATH_MAX];
    ckpt_t *c = NULL;
    int rc;

    if (ckpt_path_join(path, sizeof path, root, e->name) != CKPT_OK) {
        e->status = CKPT_ST_CORRUPT;
        snprintf(e->why, sizeof e->why, "path too long");
        return;
    }
    rc = ckpt_open(path, &c);
    if (rc == CKPT_OK) {
        e->world_size = ckpt_world_size(c);
        e->raw_bytes = ckpt_total_bytes(c);
        e->created = ckpt_created(c);
        for (int i = 0; i < e->world_size; i++)
            e->file_bytes += ckpt_shard_at(c, i)->file_bytes;
        if (verify)
            rc = ckpt_verify(c);
    }
    if (rc == CKPT_OK)
        e->status = CKPT_ST_COMMITTED;
    else
        e->status = rc == CKPT_EINCOMPLETE && !c ? CKPT_ST_INCOMPLETE
                                                 : CKPT_ST_CORRUPT;
    if (rc != CKPT_OK)
        snprintf(e->why, sizeof e->why, "%s: %.200s", ckpt_strerror(rc),
                 ckpt_last_error());
    ckpt_close(c);
}

int ckpt_list(const char *root, int verify, ckpt_entry_t **out, size_t *n)
{
    int rc = CKPT_OK;
    DIR *d = NULL;
    struct dirent *de;
    ckpt_entry_t *v = NULL;
    size_t cnt = 0, cap = 0;
    char latest[80] = "";
    uint64_t lstep;

    if (!root || !out || !n)
        return ckpt_seterr(CKPT_EINVAL, "list: NULL argument");
    *out = NULL;
    *n = 0;
    d = opendir(root);
    if (!d)
        return ckpt_seterr(errno == ENOENT || errno == ENOTDIR
                               ? CKPT_ENOTFOUND : CKPT_EIO,
                           "%s: cannot open: %s", root, strerror(errno));
    if (!read_latest(root, latest, sizeof latest, &lstep))
        latest[0] = '\0';
    while ((errno = 0, de = readdir(d)) != NULL) {
        uint64_t step;
        int tmp = 0;
        ckpt_entry_t *e;
        struct stat st;
        if (!ckpt_parse_dirname(de->d_name, 0, &step)) {
            if (!ckpt_parse_dirname(de->d_name, 1, &step))
                continue;
            tmp = 1;
        }
        if (cnt == cap) {
            ckpt_entry_t *p = grow(v, &cap, sizeof *v, 16);
            if (!p) {
                rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
                goto fail;
            }
            v = p;
        }
        e = &v[cnt++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%.63s", de->d_name);
        e->step = step;
        if (tmp) {
            e->status = CKPT_ST_INCOMPLETE;
            snprintf(e->why, sizeof e->why, "temporary directory of an "
                     "unfinished or crashed save");
        } else if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                   S_ISLNK(st.st_mode)) {
            /* I8: a link is not followed, whatever it points to. */
            e->status = CKPT_ST_CORRUPT;
            e->is_link = 1;
            snprintf(e->why, sizeof e->why, "a symbolic link, not a directory (links "
                     "under a checkpoint root are not followed)");
            e->is_latest = strcmp(latest, e->name) == 0;
        } else {
            inspect_step(root, verify, e);
            e->is_latest = strcmp(latest, e->name) == 0;
        }
    }
    if (errno != 0) {
        rc = ckpt_seterr(CKPT_EIO, "%s: readdir: %s", root, strerror(errno));
        goto fail;
    }
    if (cnt > 1)
        qsort(v, cnt, sizeof *v, cmp_entry);
    *out = v;
    *n = cnt;
    v = NULL;
fail:
    free(v);
    closedir(d);
    return rc;
}

int ckpt_latest_good(const char *root, char *path, size_t cap,
                     void (*skipped)(void *ctx, const char *name,
                                     const char *why),
                     void *ctx)
{
    int rc = CKPT_OK, nsteps = 0, latest_seen = 0;
    ckpt_entry_t *v = NULL;
    size_t n = 0;
    char latest[80], why[300];
    uint64_t lstep;

    if (!path || cap == 0)
        return ckpt_seterr(CKPT_EINVAL, "latest_good: no output buffer");
    path[0] = '\0';
    if ((rc = ckpt_list(root, 0, &v, &n)) != CKPT_OK)
        return rc;
    for (size_t i = n; i-- > 0;) {
        ckpt_entry_t *e = &v[i];
        char dir[CKPT_PATH_MAX];
        ckpt_t *c = NULL;
        if (e->name[0] == '.')
            continue;
        nsteps++;
        latest_seen |= e->is_latest;
        if (e->status == CKPT_ST_COMMITTED) {
            rc = ckpt_path_join(dir, sizeof dir, root, e->name);
            if (rc == CKPT_OK)
                rc = ckpt_open(dir, &c);
            if (rc == CKPT_OK)
                rc = ckpt_verify(c);
            ckpt_close(c);
            if (rc == CKPT_OK) {
                if (strlen(dir) >= cap) {
                    rc = ckpt_seterr(CKPT_EINVAL, "latest_good: path buffer "
                                     "too small for %s", dir);
                    goto fail;
                }
                strcpy(path, dir);
                goto fail; /* done; rc is CKPT_OK */
            }
            snprintf(e->why, sizeof e->why, "%s: %.200s", ckpt_strerror(rc),
                     ckpt_last_error());
        }
        if (skipped)
            skipped(ctx, e->name, e->why);
    }
    if (nsteps == 0) {
        rc = ckpt_seterr(CKPT_ENOTFOUND, "%s: no checkpoint", root);
    } else {
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: none of %d checkpoints verifies",
                         root, nsteps);
    }
    if (!latest_seen && read_latest(root, latest, sizeof latest, &lstep) &&
        skipped) {
        snprintf(why, sizeof why, "names %s, which does not exist", latest);
        skipped(ctx, CKPT_LATEST_NAME, why);
    }
fail:
    free(v);
    return rc;
}

int ckpt_set_aside_after(const char *root, uint64_t step,
                         void (*moved)(void *ctx, const char *from,
                                       const char *to),
                         void *ctx)
{
    ckpt_entry_t *v = NULL;
    size_t n = 0;
    int rc, nmoved = 0;

    if ((rc = ckpt_list(root, 0, &v, &n)) != CKPT_OK)
        return rc == CKPT_ENOTFOUND ? CKPT_OK : rc;
    for (size_t i = 0; i < n && rc == CKPT_OK; i++) {
        char from[CKPT_PATH_MAX], to[CKPT_PATH_MAX], name[96];
        int k;
        if (v[i].name[0] == '.' || v[i].step <= step)
            continue;
        if (ckpt_path_join(from, sizeof from, root, v[i].name) != CKPT_OK)
            continue;
        for (k = 1; k <= 1000; k++) {
            if (k == 1)
                snprintf(name, sizeof name, "%s.corrupt", v[i].name);
            else
                snprintf(name, sizeof name, "%s.corrupt-%d", v[i].name, k);
            if (ckpt_path_join(to, sizeof to, root, name) != CKPT_OK)
                break;
            if (ckpt_rename_noreplace(from, to) == 0)
                break;
            if (errno != EEXIST && errno != ENOTEMPTY) {
                rc = ckpt_seterr(CKPT_EIO, "rename %s -> %s: %s", from, to,
                                 strerror(errno));
                break;
            }
        }
        if (rc == CKPT_OK && k > 1000)
            rc = ckpt_seterr(CKPT_EIO, "%s: no free name to move it aside",
                             from);
        if (rc == CKPT_OK) {
            nmoved++;
            if (moved)
                moved(ctx, v[i].name, name);
        }
    }
    if (nmoved && ckpt_fsync_dir(root) != 0 && rc == CKPT_OK)
        rc = ckpt_seterr(CKPT_EIO, "%s: fsync directory: %s", root,
                         strerror(errno));
    free(v);
    return rc;
}

/* The last path component of path, trailing slashes ignored, into buf;
 * @return buf's component, or NULL for a NULL path. */
static const char *base_name(const char *path, char *buf, size_t cap)
{
    size_t l;
    const char *b;
    if (!path)
        return NULL;
    snprintf(buf, cap, "%s", path);
    l = strlen(buf);
    while (l > 1 && buf[l - 1] == '/')
        buf[--l] = '\0';
    b = strrchr(buf, '/');
    return b ? b + 1 : buf;
}

/* ckpt_prune, never removing the checkpoints named use or use2 (NULL: none;
 * compared by the last path component). */
static int prune_impl(const char *root, int keep, const char *in_use,
                      const char *in_use2, int *removed)
{
    int rc = CKPT_OK, nrm = 0, kept = 0, have_newest = 0;
    ckpt_entry_t *v = NULL;
    size_t n = 0;
    uint64_t newest = 0;
    const char *use, *use2;
    char usebuf[CKPT_PATH_MAX], usebuf2[CKPT_PATH_MAX];

    if (removed)
        *removed = 0;
    if (keep < 0)
        return ckpt_seterr(CKPT_EINVAL, "prune: keep %d is negative", keep);
    use = base_name(in_use, usebuf, sizeof usebuf);
    use2 = base_name(in_use2, usebuf2, sizeof usebuf2);
    if ((rc = ckpt_list(root, 0, &v, &n)) != CKPT_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (v[i].name[0] != '.' && v[i].status == CKPT_ST_COMMITTED) {
            newest = v[i].step;
            have_newest = 1;
        }
    for (size_t i = n; i-- > 0;) {
        ckpt_entry_t *e = &v[i];
        char path[CKPT_PATH_MAX], tpath[CKPT_PATH_MAX], tname[64];
        if (e->name[0] == '.') {
            if (!have_newest || e->step >= newest)
                continue;
            if (ckpt_path_join(path, sizeof path, root, e->name) != CKPT_OK)
                continue;
            if (remove_dir(path) != 0) {
                rc = ckpt_seterr(CKPT_EIO, "%s: cannot remove: %s", path,
                                 strerror(errno));
                goto fail;
            }
            nrm++;
            continue;
        }
        if (e->status != CKPT_ST_COMMITTED)
            continue; /* left for inspection */
        if (kept < keep || (use && strcmp(use, e->name) == 0) ||
            (use2 && strcmp(use2, e->name) == 0)) {
            kept += kept < keep;
            continue;
        }
        /* I7: make it a temp dir first, so a crash cannot leave a
         * half-deleted step-<N> that looks committed. */
        snprintf(tname, sizeof tname, CKPT_TMP_PREFIX "%08llu",
                 (unsigned long long)e->step);
        if (ckpt_path_join(path, sizeof path, root, e->name) != CKPT_OK ||
            ckpt_path_join(tpath, sizeof tpath, root, tname) != CKPT_OK)
            continue;
        int r = remove_dir(tpath);
        if (r == 0 && rename(path, tpath) != 0) {
            if (errno == ENOENT)
                continue; /* another prune (the trainer's, ckptctl's) took it */
            r = -1;
        }
        if (r != 0 || ckpt_fsync_dir(root) != 0 || remove_dir(tpath) != 0) {
            rc = ckpt_seterr(CKPT_EIO, "%s: cannot remove: %s", path,
                             strerror(errno));
            goto fail;
        }
        nrm++;
    }
fail:
    if (nrm > 0)
        (void)ckpt_fsync_dir(root);
    if (removed)
        *removed = nrm;
    free(v);
    return rc;
}

int ckpt_prune(const char *root, int keep, const char *in_use, int *removed)
{
    return prune_impl(root, keep, in_use, NULL, removed);
}

int ckpt_prune_keep_good(const char *root, int keep, const char *in_use,
                         int *removed, char *good, size_t cap)
{
    char path[CKPT_PATH_MAX];
    int rc = ckpt_latest_good(root, path, sizeof path, NULL, NULL);
    if (good && cap)
        good[0] = '\0';
    if (rc == CKPT_OK && good && cap)
        snprintf(good, cap, "%s", path);
    if (rc != CKPT_OK && rc != CKPT_ENOTFOUND && rc != CKPT_ECORRUPT)
        return rc;
    return prune_impl(root, keep, in_use, rc == CKPT_OK ? path : NULL,
                      removed);
}
