/*
 * proc.c - a command run with a time limit, its output taken (proc.h).
 */
#include "supervise/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

int proc_status(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return 255;
}

static void (*tick_fn)(void);

void proc_set_tick(void (*tick)(void))
{
    tick_fn = tick;
}

void proc_tick(void)
{
    if (tick_fn)
        tick_fn();
}

int proc_sleep(double seconds, const volatile sig_atomic_t *stop)
{
    double end = util_mono_s() + seconds;
    for (double now = util_mono_s(); now < end; now = util_mono_s()) {
        if (stop && *stop)
            return 1;
        proc_tick();
        double left = end - now < 0.1 ? end - now : 0.1;
        struct timespec ts = {0, (long)(left * 1e9)};
        nanosleep(&ts, NULL);
    }
    return stop && *stop ? 1 : 0;
}

void proc_child_signals(void)
{
    signal(SIGUSR1, SIG_DFL);
    signal(SIGUSR2, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* In the child: stdout to the pipe, stderr to /dev/null, the default
 * signal actions, the extra environment; then exec. */
static void child_exec(char *const argv[], char *const env[], int out_fd)
{
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
        dup2(null_fd, STDIN_FILENO);
        dup2(null_fd, STDERR_FILENO);
    }
    dup2(out_fd, STDOUT_FILENO);
    proc_child_signals();
    for (int i = 0; env && env[i]; i++)
        putenv(env[i]);
    execvp(argv[0], argv);
    _exit(127);
}

int proc_run(char *const argv[], char *const env[], int timeout_s, char *out, size_t cap,
             int *status, char *err, size_t errcap)
{
    int rc = PROC_OK, fds[2], wstatus = 0;
    size_t got = 0;
    if (cap)
        out[0] = '\0';
    *status = -1;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return util_fail(err, errcap, PROC_EFAIL, "%s: cannot make a pipe: %s", argv[0],
                         strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        rc = util_fail(err, errcap, PROC_EFAIL, "%s: cannot fork: %s", argv[0],
                       strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return rc;
    }
    if (pid == 0)
        child_exec(argv, env, fds[1]);
    close(fds[1]);
    double deadline = util_mono_s() + timeout_s, killed_at = 0;
    int open_fd = 1, exited = 0;
    double exited_at = 0;
    long nap_ns = 200000L;
    /* Until the command has ended and its output is read (a grandchild that
     * holds the pipe is given 1 s more, no longer). */
    while (!exited || (open_fd && util_mono_s() < exited_at + 1)) {
        double now = util_mono_s();
        if (!exited && !killed_at && now >= deadline) {
            kill(pid, SIGTERM);
            killed_at = now;
            rc = util_fail(err, errcap, PROC_ETIMEOUT,
                           "%s did not end within its limit of %d s", argv[0],
                           timeout_s);
        } else if (!exited && killed_at && now >= killed_at + 2) {
            kill(pid, SIGKILL);
        }
        if (open_fd) {
            struct pollfd p = {.fd = fds[0], .events = POLLIN};
            if (poll(&p, 1, 100) > 0) {
                char buf[4096];
                ssize_t n = read(fds[0], buf, sizeof buf);
                if (n <= 0) {
                    open_fd = 0;
                } else if (cap > 1 && got < cap - 1) {
                    size_t take = (size_t)n < cap - 1 - got ? (size_t)n : cap - 1 - got;
                    memcpy(out + got, buf, take);
                    got += take;
                    out[got] = '\0';
                }
            }
        } else {
            /* The output is closed; the exit comes a moment later (a
             * command that closes its output early is waited for in ever
             * longer sleeps, at most 50 ms). */
            struct timespec ts = {0, nap_ns};
            nanosleep(&ts, NULL);
            nap_ns = nap_ns * 2 < 50000000L ? nap_ns * 2 : 50000000L;
        }
        proc_tick();
        if (!exited && waitpid(pid, &wstatus, WNOHANG) == pid) {
            exited = 1;
            exited_at = util_mono_s();
        }
    }
    close(fds[0]);
    *status = proc_status(wstatus);
    if (rc == PROC_OK && *status == 127)
        rc = util_fail(err, errcap, PROC_EFAIL, "%s: not found or not executable", argv[0]);
    return rc;
}
