/*
 * sink.c - the shard writer's output.  Buffered: write(2) into the page
 * cache, with early writeback (sync_file_range) every few MiB so that the
 * final fsync has little left to do.  Direct: the bytes collect in one of
 * two aligned staging buffers; each time one holds a chunk, its whole
 * blocks go to an I/O thread that writes them with O_DIRECT (no kernel
 * copy, no dirty pages evicting the training data) while the caller fills
 * the other buffer, so the device never waits for the copy and the hashing.
 * At close the staged whole blocks go direct as well; only the last partial
 * block is written buffered, after O_DIRECT is cleared.  A file system that
 * refuses O_DIRECT (EINVAL at open or at a write) gets buffered writes.
 */
#include "sink.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util.h"

#define SINK_ALIGN 4096u                   /* O_DIRECT block */
#define SINK_CHUNK (8u << 20)              /* handed to the I/O thread */
#define SINK_CAP (SINK_CHUNK + SINK_ALIGN) /* a staging buffer */
#define WRITEBACK_BYTES (8u << 20)         /* buffered: sync_file_range step */
_Static_assert(SINK_CAP >= CKPT_BIG_ALIGN / 2,
               "staging buffers must come 2 MiB-aligned from ckpt_big_alloc");

struct ckpt_sink {
    char path[CKPT_PATH_MAX];
    int fd;
    int direct;               /* staging + I/O thread in use */
    int do_fsync;
    XXH64_state_t hash;       /* of every byte put */
    uint64_t pos;             /* bytes put so far */
    uint64_t synced;          /* buffered: bytes handed to writeback */
    unsigned char *stage[2];
    int filling;              /* the staging buffer being filled */
    size_t fill;              /* bytes in stage[filling] */
    /* the I/O thread (direct), under lock */
    pthread_t io_thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    const unsigned char *job;
    size_t job_len;
    int busy, quit;
    int io_errno;             /* of its first failed write, 0 when none */
    double io_rate;           /* bytes/s, moving average; 0: none yet */
};

static int write_failed(ckpt_sink_t *sink)
{
    return ckpt_seterr(CKPT_EIO, "%s: write failed: %s", sink->path,
                       strerror(errno));
}

/* Clear O_DIRECT: what follows goes through the page cache.  @return 1 on
 * success, 0 with errno set. */
static int fd_undirect(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0;
}

/* Write len bytes; a refusal of O_DIRECT (EINVAL: not supported, or
 * misaligned after a short write) switches the descriptor to buffered
 * writes.  @return 0 or the errno of the failure. */
static int write_direct(int fd, const unsigned char *bytes, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t wrote = write(fd, bytes + done, len - done);
        if (wrote < 0) {
            int err = errno;
            if (err == EINTR)
                continue;
            int fl = fcntl(fd, F_GETFL);
            if (err == EINVAL && fl >= 0 && (fl & O_DIRECT) && fd_undirect(fd))
                continue;
            return err;
        }
        done += (size_t)wrote;
    }
    return 0;
}

static void *io_main(void *arg)
{
    ckpt_sink_t *sink = arg;
    pthread_mutex_lock(&sink->lock);
    for (;;) {
        while (!sink->busy && !sink->quit)
            pthread_cond_wait(&sink->changed, &sink->lock);
        if (!sink->busy)
            break;
        const unsigned char *bytes = sink->job;
        size_t len = sink->job_len;
        pthread_mutex_unlock(&sink->lock);
        double start = ckpt_clock_mono();
        int err = write_direct(sink->fd, bytes, len);
        double secs = ckpt_clock_mono() - start;
        pthread_mutex_lock(&sink->lock);
        if (err && !sink->io_errno)
            sink->io_errno = err;
        if (!err && len > 0)
            sink->io_rate = ckpt_ewma(sink->io_rate,
                                      (double)len / (secs > 1e-9 ? secs : 1e-9));
        sink->busy = 0;
        pthread_cond_broadcast(&sink->changed);
    }
    pthread_mutex_unlock(&sink->lock);
    return NULL;
}

/* Wait for the I/O thread to finish its job.  @return CKPT_OK, or CKPT_EIO
 * with the errno of its first failed write. */
static int io_wait(ckpt_sink_t *sink)
{
    pthread_mutex_lock(&sink->lock);
    while (sink->busy)
        pthread_cond_wait(&sink->changed, &sink->lock);
    int err = sink->io_errno;
    pthread_mutex_unlock(&sink->lock);
    if (!err)
        return CKPT_OK;
    errno = err;
    return write_failed(sink);
}

/* Stop the I/O thread (after its job) and free the staging buffers. */
static void io_stop(ckpt_sink_t *sink)
{
    if (sink->direct) {
        pthread_mutex_lock(&sink->lock);
        while (sink->busy)
            pthread_cond_wait(&sink->changed, &sink->lock);
        sink->quit = 1;
        pthread_cond_broadcast(&sink->changed);
        pthread_mutex_unlock(&sink->lock);
        pthread_join(sink->io_thread, NULL);
        pthread_mutex_destroy(&sink->lock);
        pthread_cond_destroy(&sink->changed);
        sink->direct = 0;
    }
    free(sink->stage[0]);
    free(sink->stage[1]);
    sink->stage[0] = sink->stage[1] = NULL;
}

/* Start direct mode on an O_DIRECT descriptor.  @return 1, or 0 when it
 * cannot (the caller then writes buffered). */
static int io_start(ckpt_sink_t *sink)
{
    sink->stage[0] = ckpt_big_alloc(SINK_CAP); /* 2 MiB-aligned: fine for O_DIRECT */
    sink->stage[1] = ckpt_big_alloc(SINK_CAP);
    if (!sink->stage[0] || !sink->stage[1])
        return 0;
    if (pthread_mutex_init(&sink->lock, NULL) != 0)
        return 0;
    if (pthread_cond_init(&sink->changed, NULL) != 0) {
        pthread_mutex_destroy(&sink->lock);
        return 0;
    }
    if (pthread_create(&sink->io_thread, NULL, io_main, sink) != 0) {
        pthread_mutex_destroy(&sink->lock);
        pthread_cond_destroy(&sink->changed);
        return 0;
    }
    sink->direct = 1;
    return 1;
}

int ckpt_sink_open(ckpt_sink_t **out, const char *path, const ckpt_opts_t *opts)
{
    int rc = CKPT_OK;
    ckpt_sink_t *sink = calloc(1, sizeof *sink);

    *out = NULL;
    if (!sink)
        return ckpt_seterr(CKPT_ENOMEM, "%s: out of memory for a shard writer",
                           path);
    if (strlen(path) >= sizeof sink->path) {
        free(sink);
        return ckpt_seterr(CKPT_EINVAL, "%.*s...: path too long",
                           CKPT_MSG_PATH_MAX, path);
    }
    strcpy(sink->path, path);
    sink->fd = -1;
    sink->do_fsync = opts->fsync;
    XXH64_reset(&sink->hash, 0);
    if (opts->direct) {
        rc = ckpt_create_fresh(path, O_DIRECT, &sink->fd);
        if (rc != CKPT_OK && errno == EINVAL) {
            rc = CKPT_OK; /* the file system refuses O_DIRECT: buffered */
        } else if (rc == CKPT_OK && !io_start(sink)) {
            io_stop(sink);
            if (!fd_undirect(sink->fd))
                rc = ckpt_seterr(CKPT_EIO, "%s: cannot create: %s", path,
                                 strerror(errno));
        }
    }
    if (rc == CKPT_OK && sink->fd < 0)
        rc = ckpt_create_fresh(path, 0, &sink->fd);
    if (rc != CKPT_OK) {
        ckpt_sink_abort(sink);
        return rc;
    }
    *out = sink;
    return CKPT_OK;
}

/* Hand the whole blocks of the buffer being filled to the I/O thread and
 * carry the rest over to the other buffer, which becomes the one filled. */
static int handoff(ckpt_sink_t *sink)
{
    size_t whole = sink->fill & ~(size_t)(SINK_ALIGN - 1);
    int rc = io_wait(sink);
    if (rc != CKPT_OK)
        return rc;
    unsigned char *full = sink->stage[sink->filling],
                  *next = sink->stage[sink->filling ^ 1];
    pthread_mutex_lock(&sink->lock);
    assert(!sink->busy);
    sink->job = full;
    sink->job_len = whole;
    sink->busy = 1;
    pthread_cond_broadcast(&sink->changed);
    pthread_mutex_unlock(&sink->lock);
    memcpy(next, full + whole, sink->fill - whole); /* the thread reads [0, whole) */
    sink->fill -= whole;
    sink->filling ^= 1;
    return CKPT_OK;
}

int ckpt_sink_put(ckpt_sink_t *sink, const void *data, size_t len)
{
    const unsigned char *next = data;
    int rc;

    XXH64_update(&sink->hash, data, len);
    sink->pos += len;
    if (!sink->direct) {
        if (ckpt_write_all(sink->fd, data, len, sink->path) != CKPT_OK)
            return write_failed(sink);
        if (sink->do_fsync && sink->pos - sink->synced >= WRITEBACK_BYTES) {
            (void)sync_file_range(sink->fd, (off_t)sink->synced,
                                  (off_t)(sink->pos - sink->synced),
                                  SYNC_FILE_RANGE_WRITE);
            sink->synced = sink->pos;
        }
        return CKPT_OK;
    }
    while (len > 0) {
        size_t take = SINK_CAP - sink->fill;
        if (take > len)
            take = len;
        memcpy(sink->stage[sink->filling] + sink->fill, next, take);
        sink->fill += take;
        next += take;
        len -= take;
        assert(sink->fill <= SINK_CAP);
        if (sink->fill >= SINK_CHUNK && (rc = handoff(sink)) != CKPT_OK)
            return rc;
    }
    return CKPT_OK;
}

uint64_t ckpt_sink_pos(const ckpt_sink_t *sink)
{
    return sink->pos;
}

int ckpt_sink_direct(const ckpt_sink_t *sink)
{
    return sink->direct;
}

double ckpt_sink_rate(ckpt_sink_t *sink)
{
    if (!sink->direct)
        return 0;
    pthread_mutex_lock(&sink->lock);
    double rate = sink->io_rate;
    pthread_mutex_unlock(&sink->lock);
    return rate;
}

int ckpt_sink_close(ckpt_sink_t *sink, uint64_t *xxh64)
{
    int rc = CKPT_OK;
    if (sink->direct) {
        /* The whole blocks still staged go direct too (buffered, they would
         * leave the fsync below a chunk to flush); only the last partial
         * block goes through the page cache. */
        if (sink->fill >= SINK_ALIGN)
            rc = handoff(sink);
        if (rc == CKPT_OK)
            rc = io_wait(sink);
        if (rc == CKPT_OK && !fd_undirect(sink->fd))
            rc = write_failed(sink);
        if (rc == CKPT_OK &&
            ckpt_write_all(sink->fd, sink->stage[sink->filling], sink->fill,
                           sink->path) != CKPT_OK)
            rc = write_failed(sink);
        io_stop(sink);
    }
    if (rc == CKPT_OK && sink->do_fsync && fsync(sink->fd) != 0)
        rc = write_failed(sink);
    if (close(sink->fd) != 0 && rc == CKPT_OK)
        rc = write_failed(sink);
    sink->fd = -1;
    if (rc == CKPT_OK)
        *xxh64 = XXH64_digest(&sink->hash);
    else
        unlink(sink->path);
    free(sink);
    return rc;
}

void ckpt_sink_abort(ckpt_sink_t *sink)
{
    if (!sink)
        return;
    io_stop(sink);
    if (sink->fd >= 0) {
        close(sink->fd);
        unlink(sink->path);
    }
    free(sink);
}
