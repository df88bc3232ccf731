/*
 * util.c - the helpers of util.h.
 */
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int util_fail(char *err, size_t cap, int code, const char *fmt, ...)
{
    va_list ap;

    if (!err || cap == 0)
        return code;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return code;
}

const util_name_t util_signals[4] = {
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"INT", SIGINT},
};

static double clock_s(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double util_wall_s(void) { return clock_s(CLOCK_REALTIME); }
double util_mono_s(void) { return clock_s(CLOCK_MONOTONIC); }
double util_thread_cpu_s(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

int util_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int util_mkdir_p(const char *path)
{
    char buf[UTIL_PATH_MAX];
    size_t len = path ? strlen(path) : 0;

    if (len == 0 || len >= sizeof buf) {
        errno = len ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(buf, path, len + 1);
    /* Each parent in turn, then path itself; a name that exists already
     * counts as made (the caller judges what it is). */
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        buf[i] = saved;
    }
    return 0;
}

const char *util_base_name(const char *path)
{
    const char *slash = path ? strrchr(path, '/') : NULL;
    return slash ? slash + 1 : path;
}

const char *util_name_of(const util_name_t *table, size_t count, int value,
                         const char *unknown)
{
    for (size_t i = 0; i < count; i++)
        if (table[i].value == value)
            return table[i].name;
    return unknown;
}

int util_name_parse(const util_name_t *table, size_t count, const char *name)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < count; i++)
        if (strcmp(table[i].name, name) == 0)
            return table[i].value;
    return -1;
}

const char *util_names_join(const util_name_t *table, size_t count, char *buf,
                            size_t cap)
{
    size_t len = 0;

    if (!buf || cap == 0)
        return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < count && len < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        int wrote = snprintf(buf + len, cap - len, "%s%s", sep, table[i].name);
        if (wrote < 0)
            break;
        len += (size_t)wrote;
    }
    return buf;
}

void *util_calloc_pages(size_t count, size_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t align = page > 0 ? (size_t)page : 4096;
    if (size && count > (SIZE_MAX - align) / size)
        return NULL;
    size_t bytes = (count * size + align - 1) / align * align;
    void *mem = NULL;
    if (posix_memalign(&mem, align, bytes ? bytes : align) != 0)
        return NULL;
    memset(mem, 0, bytes ? bytes : align);
    return mem;
}

/* ---- mappings populated in pieces ---------------------------------------- */

/* Linux 5.14's, for older C libraries' headers. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define MAP_PIECE ((size_t)2 << 20)

void *util_map_file(int fd, size_t len, int prot)
{
    if (len == 0) {
        errno = EINVAL;
        return MAP_FAILED;
    }
    unsigned char *map = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return MAP_FAILED;
    int advice = prot & PROT_WRITE ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    long page = sysconf(_SC_PAGESIZE);
    size_t step = page > 0 ? (size_t)page : 4096;
    for (size_t off = 0; off < len; off += MAP_PIECE) {
        size_t n = len - off < MAP_PIECE ? len - off : MAP_PIECE;
        if (advice) {
            if (madvise(map + off, n, advice) == 0)
                continue;
            if (errno != EINVAL) { /* ENOMEM, EFAULT (past the file's end), ... */
                int e = errno;
                util_unmap(map, len);
                errno = e;
                return MAP_FAILED;
            }
            advice = 0; /* a kernel without it: a read of each page faults it in */
        }
        volatile const unsigned char *p = map + off;
        unsigned char sink = 0;
        for (size_t at = 0; at < n; at += step)
            sink ^= p[at];
        (void)sink;
    }
    return map;
}

void util_unmap(void *map, size_t len)
{
    if (!map || len == 0)
        return;
    for (size_t off = 0; off < len; off += MAP_PIECE)
        munmap((unsigned char *)map + off, len - off < MAP_PIECE ? len - off : MAP_PIECE);
}

/* ---- the threaded copy --------------------------------------------------- */

/* At most this many copy threads, each given a slice of at least
 * COPY_SLICE_MIN bytes (a thread's start costs more than a smaller copy). */
#define COPY_THREADS_MAX 32
#define COPY_SLICE_MIN ((size_t)4 << 20)

/* Bytes [from, to) of the concatenation of the ranges. */
typedef struct {
    const util_copy_range_t *ranges;
    size_t count;
    size_t from, to;
} copy_part_t;

static void *copy_part(void *arg)
{
    const copy_part_t *part = arg;
    size_t base = 0;
    for (size_t i = 0; i < part->count && base < part->to; i++) {
        const util_copy_range_t *r = &part->ranges[i];
        size_t begin = part->from > base ? part->from - base : 0;
        size_t end = part->to - base < r->n ? part->to - base : r->n;
        if (begin < end && r->dst != r->src)
            memcpy((unsigned char *)r->dst + begin, (const unsigned char *)r->src + begin,
                   end - begin);
        base += r->n;
    }
    return NULL;
}

void util_copy_ranges(const util_copy_range_t *ranges, size_t count, size_t total,
                      int threads)
{
    int parts = threads < 1 ? 1 : threads > COPY_THREADS_MAX ? COPY_THREADS_MAX : threads;
    if ((size_t)parts > total / COPY_SLICE_MIN)
        parts = total / COPY_SLICE_MIN > 0 ? (int)(total / COPY_SLICE_MIN) : 1;
    copy_part_t part[COPY_THREADS_MAX];
    pthread_t thread[COPY_THREADS_MAX];
    int started[COPY_THREADS_MAX] = {0};
    for (int i = 0; i < parts; i++) {
        part[i] = (copy_part_t){ranges, count, total * (size_t)i / (size_t)parts,
                                total * (size_t)(i + 1) / (size_t)parts};
        if (i > 0)
            started[i] = pthread_create(&thread[i], NULL, copy_part, &part[i]) == 0;
    }
    copy_part(&part[0]);
    for (int i = 1; i < parts; i++) {
        if (started[i])
            pthread_join(thread[i], NULL);
        else
            copy_part(&part[i]);
    }
}
