/*
 * util.h - small helpers the trainer's modules share: error messages,
 * directories, paths, and the tables that map an enumeration's values to
 * their names and back.
 *
 * Error convention of the trainer's modules (sampler, optim, data, model,
 * state, stop, device, world): a function that can fail returns its
 * module's code (0 is success, each failure a distinct negative value) and,
 * where the code alone cannot say what went wrong, fills a caller's
 * (char *err, size_t cap) buffer with a message naming the problem.  err
 * may be NULL (cap is then ignored).  util_fail() does both in one
 * statement.  The comm library keeps its own convention: a code plus
 * comm_last_error().
 */
#ifndef FTRAIN_UTIL_H
#define FTRAIN_UTIL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Format a message into err (when err is not NULL and cap > 0), truncating
 *  to cap.  @return code, so that `return util_fail(err, cap, CODE, ...)`
 *  reports and fails at once. */
int util_fail(char *err, size_t cap, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Create path and every missing parent (mode 0755), as mkdir -p.  A name
 *  that exists already counts as made, whatever it is: the caller checks
 *  that it is a directory it can use.  @return 0, or -1 with errno set
 *  (ENAMETOOLONG for a path of UTIL_PATH_MAX bytes or more, ENOENT for an
 *  empty one). */
int util_mkdir_p(const char *path);

/** fsync the directory dir, so that a name made, renamed or removed in it
 *  lasts.  @return 0, or -1 with errno set. */
int util_fsync_dir(const char *dir);

/** Clocks, in seconds: the wall clock (CLOCK_REALTIME: times that other
 *  processes and hosts compare, such as a signal's time), the monotonic
 *  clock (durations), and the calling thread's CPU time (user and system;
 *  0 where the clock is missing).  clock_gettime is async-signal-safe, so
 *  these are too. */
double util_wall_s(void);
double util_mono_s(void);
double util_thread_cpu_s(void);

/** The longest path util_mkdir_p accepts, its terminating NUL included. */
#define UTIL_PATH_MAX 4096

/** @return the last component of path: what follows its last '/' (path
 *  itself when it has none).  Trailing slashes are not stripped. */
const char *util_base_name(const char *path);

/* Zeroed memory for count elements of size bytes that starts on a page and
 * fills whole pages, so no other allocation shares its pages: a GPU can
 * page-lock it (cudaHostRegister) without meeting a page locked already.
 * NULL when out of memory or when the size overflows; release with free(). */
void *util_calloc_pages(size_t count, size_t size);

/** Map len bytes of the open file fd, shared, with prot (PROT_READ, or
 *  PROT_READ | PROT_WRITE), every page present when it returns: populated
 *  in pieces of 2 MiB (MADV_POPULATE_WRITE or _READ; where the kernel has
 *  neither, one byte of each page is read), not by MAP_POPULATE.  For a
 *  helper thread: MAP_POPULATE holds the process's memory-map lock for the
 *  whole file (a second, for a GiB of new pages), and any mmap or munmap
 *  of the training thread meanwhile (malloc's large blocks, MPI's) waits
 *  that long, and so does every page fault after it.  @return the mapping,
 *  or MAP_FAILED with errno set. */
void *util_map_file(int fd, size_t len, int prot);

/** Unmap [map, map + len) in pieces of 2 MiB, for the same reason: the
 *  lock is held for one piece's page tables at a time.  NULL or len 0 does
 *  nothing. */
void util_unmap(void *map, size_t len);

/** One piece of a copy: n bytes from src to dst (skipped when dst == src:
 *  the bytes are at their place already). */
typedef struct {
    void *dst;
    const void *src;
    size_t n;
} util_copy_range_t;

/** Copy count ranges (total: the sum of their n) on up to threads threads
 *  (at most 32, each given at least 4 MiB; a thread that cannot start is
 *  done by the caller's): a save's snapshot copy, the training stall. */
void util_copy_ranges(const util_copy_range_t *ranges, size_t count, size_t total,
                      int threads);

/** One entry of a name table: a name and the enumeration value it names. */
typedef struct {
    const char *name;
    int value;
} util_name_t;

/** @return the name of value in table (count entries), or unknown. */
const char *util_name_of(const util_name_t *table, size_t count, int value,
                         const char *unknown);

/** @return the value named name in table (exact match), or -1 when no
 *  entry has that name (or name is NULL). */
int util_name_parse(const util_name_t *table, size_t count, const char *name);

/** Write the names of table in order as "a, b or c" into buf (truncated to
 *  cap).  @return buf. */
const char *util_names_join(const util_name_t *table, size_t count, char *buf,
                            size_t cap);

/** The number of entries of a name table (an array, not a pointer). */
#define UTIL_COUNT(table) (sizeof(table) / sizeof((table)[0]))

/** The signals that stop a run, by their names without "SIG": the first
 *  UTIL_STOP_SIGNAL_CHOICES (USR1, USR2) may be chosen as the stop signal
 *  (--stop-signal), TERM and INT always stop one.  The one table of them
 *  in ftrain (the library's ckpt/stop.c names the same four for its own
 *  messages). */
extern const util_name_t util_signals[4];
#define UTIL_STOP_SIGNAL_CHOICES 2

/** Define the three functions of one enumeration's name table, as its
 *  module's header declares them:
 *    const char *PREFIX_name(TYPE value);   the name, or "unknown"
 *    int PREFIX_parse(const char *name);    the value, or -1
 *    const char *PREFIX_names(char *buf, size_t cap);  "a, b or c"
 *  over TABLE, a util_name_t array in scope. */
#define UTIL_NAME_FUNCTIONS(prefix, type, table)                              \
    const char *prefix##_name(type value)                                    \
    {                                                                         \
        return util_name_of(table, UTIL_COUNT(table), (int)value, "unknown"); \
    }                                                                         \
    int prefix##_parse(const char *name)                                      \
    {                                                                         \
        return util_name_parse(table, UTIL_COUNT(table), name);               \
    }                                                                         \
    const char *prefix##_names(char *buf, size_t cap)                         \
    {                                                                         \
        return util_names_join(table, UTIL_COUNT(table), buf, cap);           \
    }

#ifdef __cplusplus
}
#endif

#endif
