/*
 * run_lock.c - one launch at a time per run directory (run_lock.h).
 */
#include "app/run_lock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

/* The lock file's text: who holds it. */
#define HOLDER_MAX 512
#define RETRY_NS 100000000L

static int held_fd = -1;

/* The whole file, exclusively. */
static int try_lock(int fd)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* What the holder wrote ("" when nothing), without its newline. */
static void read_holder(int fd, char *buf, size_t cap)
{
    ssize_t n = pread(fd, buf, cap - 1, 0);
    buf[n > 0 ? (size_t)n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

/* The value of "key=value" in the holder's text, into out ("" when none). */
static void holder_field(const char *text, const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    size_t len = strlen(key);
    for (const char *p = text; (p = strstr(p, key)) != NULL; p += len)
        if ((p == text || p[-1] == ' ') && p[len] == '=') {
            snprintf(out, cap, "%.*s", (int)strcspn(p + len + 1, " "), p + len + 1);
            return;
        }
}

/* Say who holds the lock now (ours), for the next launch's message. */
static void write_holder(int fd, const char *host)
{
    const char *job = getenv("SLURM_JOB_ID");
    char text[HOLDER_MAX];
    int len = snprintf(text, sizeof text, "pid=%ld host=%s job=%s started=%lld\n",
                       (long)getpid(), host, job && *job ? job : "-", (long long)time(NULL));
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        /* the lock holds without the text; a refusal then names no holder */
    }
}

/* 1 when dir holds what only a checkpoint root holds: LATEST, or a
 * step-<N> entry. */
static int is_ckpt_root(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/LATEST", dir);
    if (access(path, F_OK) == 0)
        return 1;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));)
        found = strncmp(e->d_name, "step-", 5) == 0 && e->d_name[5] >= '0' && e->d_name[5] <= '9';
    closedir(d);
    return found;
}

int run_lock_take(const char *run_dir, const char *host, double wait_s, char *err, size_t cap)
{
    if (is_ckpt_root(run_dir)) {
        char parent[4096];
        snprintf(parent, sizeof parent, "%s", run_dir);
        size_t n = strlen(parent);
        while (n > 1 && parent[n - 1] == '/')
            parent[--n] = '\0';
        char *slash = strrchr(parent, '/');
        const char *up = slash ? (slash == parent ? "/" : (*slash = '\0', parent)) : ".";
        return util_fail(err, cap, RUN_LOCK_EROOT,
                         "--run-dir '%s' is a checkpoint root (it holds LATEST or step-N), not a "
                         "run directory; give the directory that holds it (--run-dir '%s'), "
                         "whose checkpoints are in its ckpt/", run_dir, up);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", run_dir, RUN_LOCK_NAME);
    if (util_mkdir_p(run_dir) != 0)
        return RUN_LOCK_OK; /* the run directory's own set-up says why */
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return RUN_LOCK_OK; /* likewise: a run directory we cannot write */
    struct timespec pause = {0, RETRY_NS};
    for (double waited = 0;; waited += RETRY_NS * 1e-9) {
        if (try_lock(fd) == 0) {
            write_holder(fd, host);
            run_lock_release();
            held_fd = fd;
            return RUN_LOCK_OK;
        }
        if (errno != EAGAIN && errno != EACCES) {
            close(fd); /* no locks on this file system: nothing is known */
            return RUN_LOCK_OK;
        }
        if (waited >= wait_s)
            break;
        if (waited == 0) {
            /* Say at once what the wait is for, not only when it fails. */
            char text[HOLDER_MAX], pid[32], where[256], job[64];
            read_holder(fd, text, sizeof text);
            holder_field(text, "pid", pid, sizeof pid);
            holder_field(text, "host", where, sizeof where);
            holder_field(text, "job", job, sizeof job);
            fprintf(stderr, "ftrain: run directory '%s' is in use by another launch (pid %s on "
                    "host %s, SLURM job %s); waiting up to %.0f s for it to end\n", run_dir,
                    pid[0] ? pid : "?", where[0] ? where : "?", job[0] ? job : "-", wait_s);
        }
        nanosleep(&pause, NULL);
    }
    char text[HOLDER_MAX], pid[32], where[256], job[64], started[32], since[64] = "";
    read_holder(fd, text, sizeof text);
    close(fd);
    holder_field(text, "pid", pid, sizeof pid);
    holder_field(text, "host", where, sizeof where);
    holder_field(text, "job", job, sizeof job);
    holder_field(text, "started", started, sizeof started);
    time_t when = (time_t)atoll(started);
    struct tm tm;
    if (when > 0 && gmtime_r(&when, &tm))
        strftime(since, sizeof since, ", since %Y-%m-%d %H:%M:%S UTC", &tm);
    const char *mine = getenv("SLURM_JOB_ID");
    if (mine && *mine && strcmp(job, mine) == 0) {
        fprintf(stderr, "ftrain: warning: run directory '%s': the launch before in this job "
                "(pid %s on %s) still holds %s after %.0f s, as a process of a lost node does "
                "until the file system lets it go; going on\n", run_dir, pid[0] ? pid : "?",
                where[0] ? where : "?", RUN_LOCK_NAME, wait_s);
        return RUN_LOCK_OK;
    }
    return util_fail(err, cap, RUN_LOCK_EBUSY,
                     "run directory '%s' is in use by another launch: pid %s on host %s (%s%s%s)"
                     ", which still held '%s/%s' after %.0f s; two launches on one run "
                     "directory would overwrite each other's checkpoints: wait for it to end, "
                     "or use another --run-dir", run_dir, pid[0] ? pid : "?",
                     where[0] ? where : "?", job[0] && strcmp(job, "-") ? "SLURM job " : "",
                     job[0] && strcmp(job, "-") ? job : "not under SLURM", since, run_dir,
                     RUN_LOCK_NAME, wait_s);
}

void run_lock_release(void)
{
    if (held_fd >= 0)
        close(held_fd);
    held_fd = -1;
}
