/*
 * stallio.so - an LD_PRELOAD shim for tests: on one MPI rank, one file
 * operation on a chosen file never returns (it sleeps), as a call into a
 * hung network file system or a dying disk does.  The process stays alive
 * and its other threads run (the watchdog's among them): only the calling
 * thread is stuck, which is what the watchdog must catch.
 *
 *   STALLIO_RANK=R     stall only in the process whose OMPI_COMM_WORLD_RANK
 *                      (or PMIX_RANK) is R (unset: no process)
 *   STALLIO_OP=OP      the operation that stalls: open (open, openat),
 *                      read (read, pread), write (write, pwrite, pwritev),
 *                      fsync (fsync, fdatasync) or rename (rename,
 *                      renameat, renameat2)
 *   STALLIO_MATCH=S    only calls on a file whose path contains S
 *                      (default "shard-", the checkpoint's shard files):
 *                      for open, the path as given (openat's may be
 *                      relative to its directory); for calls on a
 *                      descriptor, the path it refers to now, read back
 *                      from /proc/self/fd; for rename, either name
 *   STALLIO_AFTER=N    let the first N matching calls through (default 0)
 *   STALLIO_SECONDS=S  how long the call sleeps before it goes on as usual
 *                      (default 3600)
 *   STALLIO_FAIL=E     open only: after the sleep, the chosen call fails
 *                      with errno E (a number: 5 is EIO) instead of going
 *                      on, as an open on a network file system that lost
 *                      its server for a moment does
 *   STALLIO_MARK=FILE  when the stall begins, append "PID TIME OP PATH" to
 *                      FILE (TIME in seconds since the epoch, as `date
 *                      +%s.%N` prints it), so that a test knows that the
 *                      stall happened, when, where and in which process
 *
 * The wrapped calls forward to the next definition (dlsym RTLD_NEXT).  In a
 * process that is not the chosen rank, or for other operations, a call
 * costs one test of a flag.  Counting and the stall are thread-safe: the
 * checkpoint writer's O_DIRECT writes run on its own I/O thread, and a
 * load decodes on several.  Not seen: glibc's calls from inside itself
 * (stdio) and the _FORTIFY_SOURCE variants (__read_chk and the like),
 * which ftrain's build does not use.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { OP_NONE, OP_OPEN, OP_READ, OP_WRITE, OP_FSYNC, OP_RENAME };

static int armed_op = OP_NONE; /* the operation that stalls in this process */
static const char *match = "shard-";
static long after, seconds = 3600;
static int fail_errno; /* STALLIO_FAIL: 0, or the errno the chosen open gets */
static const char *mark;
static long seen; /* matching calls so far (under lock) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void stallio_init(void)
{
    const char *want = getenv("STALLIO_RANK"), *op = getenv("STALLIO_OP");
    const char *me = getenv("OMPI_COMM_WORLD_RANK");
    const char *m = getenv("STALLIO_MATCH"), *a = getenv("STALLIO_AFTER");
    const char *s = getenv("STALLIO_SECONDS");
    if (!me)
        me = getenv("PMIX_RANK");
    if (!want || !*want || !me || atoi(want) != atoi(me) || !op)
        return;
    armed_op = strcmp(op, "open") == 0     ? OP_OPEN
               : strcmp(op, "read") == 0   ? OP_READ
               : strcmp(op, "write") == 0  ? OP_WRITE
               : strcmp(op, "fsync") == 0  ? OP_FSYNC
               : strcmp(op, "rename") == 0 ? OP_RENAME
                                           : OP_NONE;
    if (m && *m)
        match = m;
    if (a && *a)
        after = atol(a);
    if (s && *s)
        seconds = atol(s);
    mark = getenv("STALLIO_MARK");
    const char *f = getenv("STALLIO_FAIL");
    if (f && *f)
        fail_errno = atoi(f);
}

/* The path descriptor fd refers to, into buf ("" when unknown). */
static const char *fd_path(int fd, char *buf, size_t cap)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, buf, cap - 1);
    buf[n > 0 ? (size_t)n : 0] = '\0';
    return buf;
}

/* Append "pid time what path" to STALLIO_MARK (time: seconds since the
 * epoch, as `date +%s.%N` prints them), with raw system calls: the
 * wrappers below must not see (or count) the shim's own file. */
static void note(const char *what, const char *path)
{
    char line[4200];
    if (!mark || !*mark)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int len = snprintf(line, sizeof line, "%ld %lld.%09ld %s %s\n", (long)getpid(),
                       (long long)now.tv_sec, now.tv_nsec, what, path);
    if (len < 0 || (size_t)len >= sizeof line)
        len = (int)strlen(line);
    long fd = syscall(SYS_openat, AT_FDCWD, mark, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                      0644);
    if (fd < 0)
        return;
    if (syscall(SYS_write, (int)fd, line, (size_t)len) != len) {
        /* the test then finds no mark and says so */
    }
    syscall(SYS_close, (int)fd);
}

/* A call of the operation STALLIO_OP: stall when it is the chosen one,
 * that is when path (or path2) contains STALLIO_MATCH and STALLIO_AFTER
 * matching calls went before it.  Keeps errno.  @return 1 when it was. */
static int stall_if_chosen(const char *what, const char *path, const char *path2)
{
    int saved = errno;
    const char *hit = path && strstr(path, match)     ? path
                      : path2 && strstr(path2, match) ? path2
                                                      : NULL;
    if (!hit)
        return 0;
    pthread_mutex_lock(&lock);
    long n = seen++;
    pthread_mutex_unlock(&lock);
    if (n != after)
        return 0;
    note(what, hit);
    struct timespec left = {(time_t)seconds, 0};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
        /* a signal: sleep the rest */
    }
    errno = saved;
    return 1;
}

/* An open that STALLIO_FAIL makes fail: -1 with its errno. */
static int failed_open(void)
{
    errno = fail_errno;
    return -1;
}

/* The same for an operation on descriptor fd. */
static void stall_fd_if_chosen(int op, const char *what, int fd)
{
    char path[4096];
    if (op != armed_op)
        return;
    int saved = errno;
    fd_path(fd, path, sizeof path);
    errno = saved;
    stall_if_chosen(what, path, NULL);
}

/* next_NAME: the definition this shim's NAME hides, looked up once. */
#define NEXT(type, name)                                                          \
    static type next_##name;                                                      \
    if (!next_##name)                                                             \
        next_##name = (type)dlsym(RTLD_NEXT, #name)

/* ---- open ------------------------------------------------------------------ */

/* The mode argument of open and openat, present with O_CREAT or
 * O_TMPFILE. */
#define MODE_ARG(flags, last, mode)                                               \
    do {                                                                          \
        if (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE) {          \
            va_list ap;                                                           \
            va_start(ap, last);                                                   \
            mode = (mode_t)va_arg(ap, int);                                       \
            va_end(ap);                                                           \
        }                                                                         \
    } while (0)

int open(const char *path, int flags, ...)
{
    typedef int (*fn_t)(const char *, int, ...);
    NEXT(fn_t, open);
    mode_t mode = 0;
    MODE_ARG(flags, flags, mode);
    if (armed_op == OP_OPEN && stall_if_chosen("open", path, NULL) && fail_errno)
        return failed_open();
    return next_open(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    typedef int (*fn_t)(const char *, int, ...);
    NEXT(fn_t, open64);
    mode_t mode = 0;
    MODE_ARG(flags, flags, mode);
    if (armed_op == OP_OPEN && stall_if_chosen("open", path, NULL) && fail_errno)
        return failed_open();
    return next_open64(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    typedef int (*fn_t)(int, const char *, int, ...);
    NEXT(fn_t, openat);
    mode_t mode = 0;
    MODE_ARG(flags, flags, mode);
    if (armed_op == OP_OPEN && stall_if_chosen("open", path, NULL) && fail_errno)
        return failed_open();
    return next_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    typedef int (*fn_t)(int, const char *, int, ...);
    NEXT(fn_t, openat64);
    mode_t mode = 0;
    MODE_ARG(flags, flags, mode);
    if (armed_op == OP_OPEN && stall_if_chosen("open", path, NULL) && fail_errno)
        return failed_open();
    return next_openat64(dirfd, path, flags, mode);
}

/* ---- read ------------------------------------------------------------------ */

ssize_t read(int fd, void *buf, size_t len)
{
    typedef ssize_t (*fn_t)(int, void *, size_t);
    NEXT(fn_t, read);
    stall_fd_if_chosen(OP_READ, "read", fd);
    return next_read(fd, buf, len);
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
    typedef ssize_t (*fn_t)(int, void *, size_t, off_t);
    NEXT(fn_t, pread);
    stall_fd_if_chosen(OP_READ, "pread", fd);
    return next_pread(fd, buf, len, off);
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
    typedef ssize_t (*fn_t)(int, void *, size_t, off_t);
    NEXT(fn_t, pread64);
    stall_fd_if_chosen(OP_READ, "pread", fd);
    return next_pread64(fd, buf, len, off);
}

/* ---- write ----------------------------------------------------------------- */

ssize_t write(int fd, const void *buf, size_t len)
{
    typedef ssize_t (*fn_t)(int, const void *, size_t);
    NEXT(fn_t, write);
    stall_fd_if_chosen(OP_WRITE, "write", fd);
    return next_write(fd, buf, len);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
    typedef ssize_t (*fn_t)(int, const void *, size_t, off_t);
    NEXT(fn_t, pwrite);
    stall_fd_if_chosen(OP_WRITE, "pwrite", fd);
    return next_pwrite(fd, buf, len, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
    typedef ssize_t (*fn_t)(int, const void *, size_t, off_t);
    NEXT(fn_t, pwrite64);
    stall_fd_if_chosen(OP_WRITE, "pwrite", fd);
    return next_pwrite64(fd, buf, len, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    typedef ssize_t (*fn_t)(int, const struct iovec *, int, off_t);
    NEXT(fn_t, pwritev);
    stall_fd_if_chosen(OP_WRITE, "pwritev", fd);
    return next_pwritev(fd, iov, n, off);
}

/* ---- fsync ----------------------------------------------------------------- */

int fsync(int fd)
{
    typedef int (*fn_t)(int);
    NEXT(fn_t, fsync);
    stall_fd_if_chosen(OP_FSYNC, "fsync", fd);
    return next_fsync(fd);
}

int fdatasync(int fd)
{
    typedef int (*fn_t)(int);
    NEXT(fn_t, fdatasync);
    stall_fd_if_chosen(OP_FSYNC, "fdatasync", fd);
    return next_fdatasync(fd);
}

/* ---- rename ---------------------------------------------------------------- */

int rename(const char *from, const char *to)
{
    typedef int (*fn_t)(const char *, const char *);
    NEXT(fn_t, rename);
    if (armed_op == OP_RENAME)
        stall_if_chosen("rename", from, to);
    return next_rename(from, to);
}

int renameat(int fromfd, const char *from, int tofd, const char *to)
{
    typedef int (*fn_t)(int, const char *, int, const char *);
    NEXT(fn_t, renameat);
    if (armed_op == OP_RENAME)
        stall_if_chosen("rename", from, to);
    return next_renameat(fromfd, from, tofd, to);
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags)
{
    typedef int (*fn_t)(int, const char *, int, const char *, unsigned int);
    NEXT(fn_t, renameat2);
    if (armed_op == OP_RENAME)
        stall_if_chosen("rename", from, to);
    return next_renameat2(fromfd, from, tofd, to, flags);
}
