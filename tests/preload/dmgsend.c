/*
 * dmgsend.so - an LD_PRELOAD shim for tests: on one MPI rank, one
 * MPI_Isend sends a copy of its buffer with one byte changed, as a message
 * damaged on its way would arrive: the sender's own buffer stays intact.
 *
 *   DMGSEND_RANK=R   only in the process whose OMPI_COMM_WORLD_RANK (or
 *                    PMIX_RANK) is R (unset or empty: no process)
 *   DMGSEND_NTH=N    the N-th MPI_Isend of that process (default 1); its
 *                    middle byte is flipped (the count is taken as bytes:
 *                    ftrain's partner exchange sends MPI_BYTE)
 *
 * In ftrain, MPI_Isend carries the node-local tier's partner copies (in
 * pieces of a few MiB, in order) and a resume's exchange, nothing else on
 * a CPU run.  Every call forwards to the next definition (dlsym
 * RTLD_NEXT); the declaration takes Open MPI's handles (pointers) as
 * void *, so the shim needs no MPI headers to build.  The damaged copy is
 * never freed (MPI owns it until the send completes; a test's process is
 * short).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef int (*isend_fn_t)(const void *buf, int count, void *type, int dest, int tag,
                          void *comm, void *req);

static atomic_int calls;

static int chosen(void)
{
    const char *want = getenv("DMGSEND_RANK");
    const char *me = getenv("OMPI_COMM_WORLD_RANK");
    if (!me)
        me = getenv("PMIX_RANK");
    return want && want[0] && me && strcmp(want, me) == 0;
}

int MPI_Isend(const void *buf, int count, void *type, int dest, int tag, void *comm,
              void *req)
{
    isend_fn_t next = (isend_fn_t)dlsym(RTLD_NEXT, "MPI_Isend");
    if (!next)
        abort();
    if (chosen() && count > 0 && buf) {
        const char *nth = getenv("DMGSEND_NTH");
        int n = nth && nth[0] ? atoi(nth) : 1;
        if (atomic_fetch_add(&calls, 1) + 1 == n) {
            unsigned char *copy = malloc((size_t)count);
            if (copy) {
                memcpy(copy, buf, (size_t)count);
                copy[count / 2] ^= 0x5a;
                return next(copy, count, type, dest, tag, comm, req);
            }
        }
    }
    return next(buf, count, type, dest, tag, comm, req);
}
