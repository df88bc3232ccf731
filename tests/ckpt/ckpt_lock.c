/*
 * ckpt_lock.c - a prune never removes what a live save is writing, whatever
 * the steps (docs/checkpoint-format.md, "The root's lock file"): once a newer
 * step is committed (an import, a flush), a running trainer's saves are
 * older than it, and a prune in another process (ckptctl from cron) or in
 * the same one must leave their temp dirs alone; a crashed save's temp dir
 * still goes; a save waits for a prune of its own step; the locks follow
 * the documented protocol (a shared lock on byte N of <root>/.locks while
 * step N is saved), checked here with fcntl directly, from other processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "ckpt_test.h"
#include "tap.h"

static char root[300];
static float data[1024];

static void tensor(ckpt_tensor_t *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, CKPT_NAME_MAX, "w");
    t->dtype = CKPT_F32;
    t->ndim = 1;
    t->shape[0] = 1024;
    t->data = data;
}

static int save(uint64_t step)
{
    ckpt_tensor_t t;
    ckpt_coll_t coll = SOLO_COLL;
    uint64_t total;
    tensor(&t);
    ckpt_layout(&t, 1, &total);
    return ckpt_save(root, step, &t, 1, "{}", NULL, &coll);
}

static int exists(const char *name)
{
    char path[400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", root, name);
    return lstat(path, &st) == 0;
}

/* In a child process: ckpt_prune(root, keep); its exit status is 0 when
 * the prune returned CKPT_OK. */
static int prune_elsewhere(int keep)
{
    pid_t pid = fork();
    if (pid == 0) {
        int removed;
        _exit(ckpt_prune(root, keep, NULL, &removed) == CKPT_OK ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* In a child process: the type of a lock on byte `step` of root/.locks
 * that conflicts with an exclusive one (F_UNLCK: none), -1 on error. */
static int lock_seen(uint64_t step)
{
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        char path[400];
        snprintf(path, sizeof path, "%s/.locks", root);
        int fd = open(path, O_RDONLY);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)step,
                           .l_len = 1};
        int type = fd >= 0 && fcntl(fd, F_OFD_GETLK, &fl) == 0 ? fl.l_type : -1;
        if (write(pipefd[1], &type, sizeof type) != sizeof type)
            _exit(1);
        _exit(0);
    }
    close(pipefd[1]);
    int type = -1;
    if (read(pipefd[0], &type, sizeof type) != sizeof type)
        type = -1;
    close(pipefd[0]);
    waitpid(pid, NULL, 0);
    return type;
}

/* A child that holds a lock of `type` on byte `step` of root/.locks for
 * hold_ms, as another process's save (F_RDLCK) or prune (F_WRLCK) would;
 * returns once the lock is held.  @return the child's pid, or -1. */
static pid_t hold_lock(uint64_t step, short type, int hold_ms)
{
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        char path[400];
        snprintf(path, sizeof path, "%s/.locks", root);
        int fd = open(path, O_RDWR | O_CREAT, 0644);
        struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)step,
                           .l_len = 1};
        char held = fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) == 0;
        if (write(pipefd[1], &held, 1) != 1)
            _exit(1);
        nanosleep(&(struct timespec){hold_ms / 1000, (long)(hold_ms % 1000) * 1000000L}, NULL);
        _exit(0);
    }
    close(pipefd[1]);
    char held = 0;
    if (read(pipefd[0], &held, 1) != 1 || !held) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        pid = -1;
    }
    close(pipefd[0]);
    return pid;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    plan(17);
    tap_tmpdir(root, sizeof root, "ckpt_lock");
    for (int i = 0; i < 1024; i++)
        data[i] = (float)i * 0.5f;
    is_int(save(10), CKPT_OK, "step 10 committed (as if imported: newer than the saves below)");

    /* A save of step 5 between its two phases: its temp dir is older than
     * the newest committed step, as after an import into a live run. */
    ckpt_tensor_t t;
    ckpt_shard_info_t info;
    uint64_t total;
    tensor(&t);
    ckpt_layout(&t, 1, &total);
    is_int(ckpt_shard_write(root, 5, 0, 1, &t, 1, NULL, &info), CKPT_OK,
           "phase one of step 5 written");
    is_int(lock_seen(5), F_RDLCK, "another process sees the save's shared lock on byte 5");
    is_int(prune_elsewhere(1), 0, "a prune in another process succeeds");
    ok(exists(".tmp-step-00000005"), "and leaves the live save's temp dir");
    int removed = -1;
    is_int(ckpt_prune(root, 1, NULL, &removed), CKPT_OK, "a prune in the saving process");
    ok(exists(".tmp-step-00000005") && removed == 0, "leaves it too (removed %d)", removed);
    ckpt_coll_t coll = SOLO_COLL;
    is_int(ckpt_commit(root, 5, &t, 1, "{}", NULL, CKPT_OK, &info, &coll), CKPT_OK,
           "the save of step 5 commits");
    is_int(lock_seen(5), F_UNLCK, "its lock is gone once the commit is known");

    /* A crashed save's temp dir (no process holds its byte) still goes. */
    char path[400];
    snprintf(path, sizeof path, "%s/.tmp-step-00000003", root);
    mkdir(path, 0755);
    is_int(prune_elsewhere(2), 0, "a prune with a crashed save's temp dir");
    ok(!exists(".tmp-step-00000003"), "removes that temp dir");
    ok(exists("step-00000005") && exists("step-00000010"), "and keeps the 2 newest");

    /* A committed step whose byte another process holds (a save or a prune
     * of it in flight) is left for the next prune. */
    is_int(save(4), CKPT_OK, "step 4 committed");
    pid_t holder = hold_lock(4, F_RDLCK, 400);
    ok(holder > 0, "another process holds byte 4");
    prune_elsewhere(2);
    ok(exists("step-00000004"), "a prune then keeps step 4 beyond --keep 2");
    waitpid(holder, NULL, 0);
    prune_elsewhere(2);
    ok(!exists("step-00000004"), "and removes it once the lock is gone");

    /* A save waits for a prune of its own step, and then goes on. */
    holder = hold_lock(7, F_WRLCK, 300);
    double t0 = now_s();
    int rc = save(7);
    double waited = now_s() - t0;
    ok(holder > 0 && rc == CKPT_OK && waited >= 0.25,
       "a save of step 7 waits for the prune holding it (%.3f s), then commits (rc %d)",
       waited, rc);
    waitpid(holder, NULL, 0);
    tap_rmtree(root);
    return done_testing();
}
