/*
 * lock.c - the byte-range locks of a checkpoint root's lock file: which
 * steps a live process is saving or pruning (lock.h says why and how).
 */
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* How often a save asks again for a step a prune holds. */
#define LOCK_RETRY_NS 10000000L

/* root/.locks, opened for writing where we may (an exclusive lock needs
 * it), else for reading.  @return the fd, or -1. */
static int open_lock_file(const char *root, int *writable)
{
    char path[CKPT_PATH_MAX];
    if (ckpt_path_join(path, sizeof path, root, CKPT_LOCK_NAME) != CKPT_OK)
        return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    *writable = fd >= 0;
    if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM))
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    return fd;
}

/* The lock of step's byte (the last representable byte stands for the
 * steps beyond it: sharing it only makes a prune more careful). */
static struct flock step_range(uint64_t step, short type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = step < (uint64_t)INT64_MAX - 1 ? (off_t)step : (off_t)(INT64_MAX - 1);
    fl.l_len = 1;
    return fl;
}

static int is_busy(int err)
{
    return err == EAGAIN || err == EACCES;
}

ckpt_lock_t ckpt_lock_save(const char *root, uint64_t step, double wait_s, int *fd)
{
    int writable;
    *fd = open_lock_file(root, &writable);
    if (*fd < 0)
        return CKPT_LOCK_NONE;
    struct flock fl = step_range(step, F_RDLCK);
    struct timespec pause = {0, LOCK_RETRY_NS};
    double waited = 0;
    for (;;) {
        if (fcntl(*fd, F_OFD_SETLK, &fl) == 0)
            return CKPT_LOCK_HELD;
        if (!is_busy(errno))
            break; /* no locks on this file system */
        if (waited >= wait_s) {
            close(*fd);
            *fd = -1;
            return CKPT_LOCK_BUSY;
        }
        nanosleep(&pause, NULL);
        waited += LOCK_RETRY_NS * 1e-9;
    }
    close(*fd);
    *fd = -1;
    return CKPT_LOCK_NONE;
}

ckpt_lock_t ckpt_lock_prune(const char *root, uint64_t step, int *fd)
{
    int writable;
    *fd = open_lock_file(root, &writable);
    if (*fd < 0)
        return CKPT_LOCK_NONE;
    struct flock fl = step_range(step, F_WRLCK);
    ckpt_lock_t got = CKPT_LOCK_NONE;
    if (writable) {
        if (fcntl(*fd, F_OFD_SETLK, &fl) == 0)
            return CKPT_LOCK_HELD;
        got = is_busy(errno) ? CKPT_LOCK_BUSY : CKPT_LOCK_NONE;
    } else if (fcntl(*fd, F_OFD_GETLK, &fl) == 0) {
        /* A lock file we may not write: we can only look. */
        got = fl.l_type != F_UNLCK ? CKPT_LOCK_BUSY : CKPT_LOCK_NONE;
    }
    close(*fd);
    *fd = -1;
    return got;
}

void ckpt_lock_release(int fd)
{
    if (fd >= 0)
        close(fd); /* an open file description's locks go with its last fd */
}

/* ---- the save locks between phase one and phase two -------------------- */

typedef struct kept {
    struct kept *next;
    uint64_t step;
    int rank, fd;
    char root[];
} kept_t;

static pthread_mutex_t kept_mutex = PTHREAD_MUTEX_INITIALIZER;
static kept_t *kept_list;

/* Unlink the entry of root, step (any step when any_step) and rank; the
 * caller frees it. */
static kept_t *kept_take(const char *root, uint64_t step, int any_step, int rank)
{
    for (kept_t **at = &kept_list; *at; at = &(*at)->next)
        if ((any_step || (*at)->step == step) && (*at)->rank == rank &&
            strcmp((*at)->root, root) == 0) {
            kept_t *found = *at;
            *at = found->next;
            return found;
        }
    return NULL;
}

void ckpt_lock_keep(const char *root, uint64_t step, int rank, int fd)
{
    size_t len = strlen(root) + 1;
    kept_t *entry = malloc(sizeof *entry + len);
    pthread_mutex_lock(&kept_mutex);
    /* A rank saves one step of a root at a time: a lock it still keeps
     * there is of a save that never reached ckpt_commit (abandoned, or the
     * node-local tier's, which seals without it). */
    kept_t *old = kept_take(root, 0, 1, rank), *more;
    while (old && (more = kept_take(root, 0, 1, rank)) != NULL) {
        ckpt_lock_release(more->fd);
        free(more);
    }
    if (entry) {
        entry->step = step;
        entry->rank = rank;
        entry->fd = fd;
        memcpy(entry->root, root, len);
        entry->next = kept_list;
        kept_list = entry;
    }
    pthread_mutex_unlock(&kept_mutex);
    if (old) {
        ckpt_lock_release(old->fd);
        free(old);
    }
    if (!entry) /* no memory to remember it: the save goes on unlocked */
        ckpt_lock_release(fd);
}

void ckpt_lock_drop(const char *root, uint64_t step, int rank)
{
    if (!root)
        return;
    pthread_mutex_lock(&kept_mutex);
    kept_t *entry = kept_take(root, step, 0, rank);
    pthread_mutex_unlock(&kept_mutex);
    if (entry) {
        ckpt_lock_release(entry->fd);
        free(entry);
    }
}
