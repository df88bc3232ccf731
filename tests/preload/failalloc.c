/*
 * failalloc.so - an LD_PRELOAD shim for tests: on one MPI rank, large
 * allocations fail, as they do when a node runs out of memory.
 *
 *   FAILALLOC_RANK=R   fail only in the process whose OMPI_COMM_WORLD_RANK
 *                      is R (unset: no process)
 *   FAILALLOC_MIN=B    fail requests of at least B bytes (default 64 MiB,
 *                      none when FAILALLOC_CALLOC is set without it)
 *   FAILALLOC_CALLOC=N,S  fail every calloc(N, S) with exactly these
 *                      arguments (one allocation site, for example
 *                      ckpt_commit's table of N ranks' S-byte messages)
 *
 * malloc, calloc and posix_memalign are wrapped; everything else goes to
 * glibc's own allocator (__libc_*), so no dlsym is needed.  Built without
 * sanitizers: a sanitized program has its own allocator and is not tested
 * with this shim.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t s);
extern void *__libc_memalign(size_t align, size_t n);

static int armed = -1; /* -1: not decided yet */
static size_t min_bytes = (size_t)64 << 20;
static size_t calloc_n, calloc_s; /* FAILALLOC_CALLOC; 0: none */

static void init(void)
{
    if (armed < 0) {
        const char *want = getenv("FAILALLOC_RANK");
        const char *me = getenv("OMPI_COMM_WORLD_RANK");
        const char *mb = getenv("FAILALLOC_MIN");
        const char *cs = getenv("FAILALLOC_CALLOC");
        armed = want && me && atoi(want) == atoi(me);
        if (cs && strchr(cs, ',')) {
            calloc_n = (size_t)atol(cs);
            calloc_s = (size_t)atol(strchr(cs, ',') + 1);
            min_bytes = (size_t)-1;
        }
        if (mb && atol(mb) > 0)
            min_bytes = (size_t)atol(mb);
    }
}

static int fail(size_t bytes)
{
    init();
    if (armed && bytes >= min_bytes) {
        errno = ENOMEM;
        return 1;
    }
    return 0;
}

void *malloc(size_t n)
{
    return fail(n) ? NULL : __libc_malloc(n);
}

void *calloc(size_t n, size_t s)
{
    init();
    if (armed && calloc_n && n == calloc_n && s == calloc_s) {
        errno = ENOMEM;
        return NULL;
    }
    if (s && n > (size_t)-1 / s)
        return fail((size_t)-1) ? NULL : __libc_calloc(n, s);
    return fail(n * s) ? NULL : __libc_calloc(n, s);
}

int posix_memalign(void **p, size_t align, size_t n)
{
    if (fail(n))
        return ENOMEM;
    void *q = __libc_memalign(align, n);
    if (!q)
        return ENOMEM;
    *p = q;
    return 0;
}
