/*
 * slowstart.so - an LD_PRELOAD shim for tests: a shared library whose
 * constructor takes long, as cuBLAS's and NCCL's do (most of a second, more
 * from a cold shared file system), so that a test can send a signal while
 * a process is still loading its libraries, before main.
 *
 *   SLOWSTART_MARK=FILE  written when the slow constructor starts: the
 *                        process id, a line (each process its own line)
 *   SLOWSTART_MS=N       how long it takes (default 1500 ms)
 *
 * The constructor removes LD_PRELOAD from the environment, so programs this
 * process starts (Open MPI's helper daemons) are not slowed as well.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((constructor)) static void slowstart(void)
{
    const char *mark = getenv("SLOWSTART_MARK"), *ms = getenv("SLOWSTART_MS");
    long n = ms && *ms ? atol(ms) : 1500;
    struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
    unsetenv("LD_PRELOAD");
    if (mark && *mark) {
        char line[32];
        int fd = open(mark, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        int len = snprintf(line, sizeof line, "%ld\n", (long)getpid());
        if (fd >= 0) {
            if (write(fd, line, (size_t)len) != len) {
                /* the test then finds no pid and fails */
            }
            close(fd);
        }
    }
    while (nanosleep(&ts, &ts) != 0) {
        /* a signal: sleep the rest */
    }
}
