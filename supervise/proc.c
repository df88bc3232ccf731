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

/* One command of proc_run_all while it runs. */
typedef struct {
    pid_t pid;
    int fd, open_fd, exited, wstatus;
    double exited_at, killed_at;
    size_t got;
} run_t;

/* Start job j: fork, exec, the pipe.  @return PROC_OK or PROC_EFAIL. */
static int start_one(proc_job_t *j, run_t *r)
{
    int fds[2];
    memset(r, 0, sizeof *r);
    r->fd = -1;
    if (j->cap)
        j->out[0] = '\0';
    j->status = -1;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return j->rc = util_fail(j->err, sizeof j->err, PROC_EFAIL, "%s: cannot make a pipe: %s",
                                 j->argv[0], strerror(errno));
    r->pid = fork();
    if (r->pid < 0) {
        j->rc = util_fail(j->err, sizeof j->err, PROC_EFAIL, "%s: cannot fork: %s", j->argv[0],
                          strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return j->rc;
    }
    if (r->pid == 0)
        child_exec(j->argv, j->env, fds[1]);
    close(fds[1]);
    r->fd = fds[0];
    r->open_fd = 1;
    return j->rc = PROC_OK;
}

/* Read what r's pipe has into j->out (past cap - 1 bytes it is dropped). */
static void take_output(proc_job_t *j, run_t *r)
{
    char buf[4096];
    ssize_t n = read(r->fd, buf, sizeof buf);
    if (n <= 0) {
        r->open_fd = 0;
    } else if (j->cap > 1 && r->got < j->cap - 1) {
        size_t take = (size_t)n < j->cap - 1 - r->got ? (size_t)n : j->cap - 1 - r->got;
        memcpy(j->out + r->got, buf, take);
        r->got += take;
        j->out[r->got] = '\0';
    }
}

/* The time limit of a command that has not ended: TERM at the deadline,
 * KILL 2 s later. */
static void enforce_limit(proc_job_t *j, run_t *r, double now, double deadline, int timeout_s)
{
    if (r->exited)
        return;
    if (!r->killed_at && now >= deadline) {
        kill(r->pid, SIGTERM);
        r->killed_at = now;
        j->rc = util_fail(j->err, sizeof j->err, PROC_ETIMEOUT,
                          "%s did not end within its limit of %d s", j->argv[0], timeout_s);
    } else if (r->killed_at && now >= r->killed_at + 2) {
        kill(r->pid, SIGKILL);
    }
}

/* 1 while r still needs waiting for: not ended, or its output still open
 * (a grandchild that holds the pipe is given 1 s more, no longer). */
static int pending(const run_t *r)
{
    return r->pid > 0 && (!r->exited || (r->open_fd && util_mono_s() < r->exited_at + 1));
}

void proc_run_all(proc_job_t *jobs, int n, int timeout_s)
{
    run_t runs[PROC_JOBS_MAX];
    struct pollfd p[PROC_JOBS_MAX];
    if (n > PROC_JOBS_MAX)
        n = PROC_JOBS_MAX;
    for (int k = 0; k < n; k++)
        start_one(&jobs[k], &runs[k]);
    double deadline = util_mono_s() + timeout_s;
    long nap_ns = 200000L;
    for (;;) {
        int waiting = 0, np = 0, at[PROC_JOBS_MAX];
        for (int k = 0; k < n; k++) {
            if (!pending(&runs[k]))
                continue;
            waiting = 1;
            enforce_limit(&jobs[k], &runs[k], util_mono_s(), deadline, timeout_s);
            if (runs[k].open_fd) {
                p[np] = (struct pollfd){.fd = runs[k].fd, .events = POLLIN};
                at[np++] = k;
            }
        }
        if (!waiting)
            break;
        if (np > 0 && poll(p, (nfds_t)np, 100) > 0) {
            for (int i = 0; i < np; i++)
                if (p[i].revents)
                    take_output(&jobs[at[i]], &runs[at[i]]);
        } else if (np == 0) {
            /* Every output is closed; the exits come a moment later (a
             * command that closes its output early is waited for in ever
             * longer sleeps, at most 50 ms). */
            struct timespec ts = {0, nap_ns};
            nanosleep(&ts, NULL);
            nap_ns = nap_ns * 2 < 50000000L ? nap_ns * 2 : 50000000L;
        }
        proc_tick();
        for (int k = 0; k < n; k++)
            if (runs[k].pid > 0 && !runs[k].exited &&
                waitpid(runs[k].pid, &runs[k].wstatus, WNOHANG) == runs[k].pid) {
                runs[k].exited = 1;
                runs[k].exited_at = util_mono_s();
            }
    }
    for (int k = 0; k < n; k++) {
        if (runs[k].fd >= 0)
            close(runs[k].fd);
        if (runs[k].pid <= 0)
            continue;
        jobs[k].status = proc_status(runs[k].wstatus);
        if (jobs[k].rc == PROC_OK && jobs[k].status == 127)
            jobs[k].rc = util_fail(jobs[k].err, sizeof jobs[k].err, PROC_EFAIL,
                                   "%s: not found or not executable", jobs[k].argv[0]);
    }
}

int proc_run(char *const argv[], char *const env[], int timeout_s, char *out, size_t cap,
             int *status, char *err, size_t errcap)
{
    proc_job_t j = {.argv = argv, .env = env, .out = out, .cap = cap};
    proc_run_all(&j, 1, timeout_s);
    *status = j.status;
    if (j.rc != PROC_OK && errcap)
        snprintf(err, errcap, "%s", j.err);
    return j.rc;
}
