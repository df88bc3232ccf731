/*
 * local_helper.c - the node-local save's helper thread and its jobs
 * (local_save_internal.h): the buffers' preparation, this rank's shard
 * written (and mapped for the exchange), the partner copies checked and
 * written, old steps pruned.
 *
 * The helper runs one job at a time, started by the training thread
 * (tier_job_run) and joined by it (tier_job_join) before the next; the
 * training thread never touches what a running job uses.  A job makes no
 * collective and no MPI call, but for JOB_EXCHANGE_PUT, which moves the
 * partner exchange on the tier's own communicator (local_exchange.c) where
 * MPI gave MPI_THREAD_MULTIPLE.  ckpt and comm keep their error messages
 * per thread, so a job's messages are its own; a job's failure is a
 * TIER_E... code in job_rc and its message in job_err, which the training
 * thread reads at the next vote (the job has no caller's buffer).  Under
 * MPI_THREAD_SINGLE, or where no thread can start, a job runs on the
 * training thread instead, at once.
 */
#include "tier/local_save_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The own shard is read back in pieces of this many bytes (read() moves at
 * most about 2 GiB at once). */
#define PIECE ((uint64_t)1 << 28)

void tier_job_fail(struct tier_async *a, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->job_err, sizeof a->job_err, fmt, ap);
    va_end(ap);
    a->job_rc = code;
}

/* Read this rank's shard file, fd of len bytes at path, into a buffer kept
 * from save to save (where it cannot be mapped).  @return job_rc. */
static int read_own(struct tier_async *a, int fd, uint64_t len, const char *path)
{
    if (tier_grow_touched(&a->own, &a->own_cap, len) != TIER_OK) {
        tier_job_fail(a, TIER_ENOMEM, "no memory to read '%s' (%llu bytes) back", path,
                      (unsigned long long)len);
        return a->job_rc;
    }
    for (uint64_t got = 0; got < len && !a->job_rc;) {
        size_t want = len - got > PIECE ? (size_t)PIECE : (size_t)(len - got);
        ssize_t n = pread(fd, (unsigned char *)a->own + got, want, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            tier_job_fail(a, TIER_EFAIL, "cannot read '%s' back: %s", path,
                          n < 0 ? strerror(errno) : "short");
        else
            got += (uint64_t)n;
    }
    a->send = a->own;
    return a->job_rc;
}

/* Map this rank's shard file, just written, for the exchange: its pages
 * are the file's own (tmpfs, or the page cache), so nothing is read back
 * or copied.  Where it cannot be mapped, read it into a buffer kept from
 * save to save.  @return job_rc (job_err set). */
static int map_own(tier_t *t, const state_local_view_t *view)
{
    struct tier_async *a = t->async;
    char step[CKPT_FILE_NAME_MAX], shard[CKPT_FILE_NAME_MAX],
        path[CONFIG_PATH_MAX + 3 * CKPT_FILE_NAME_MAX];
    ckpt_step_dirname(view->step, step, sizeof step);
    ckpt_shard_name(t->rank, shard, sizeof shard);
    /* The save's temp dir (docs/checkpoint-format.md, section 1). */
    snprintf(path, sizeof path, "%s/.tmp-%s/%s", t->root, step, shard);
    uint64_t len = view->info.file_bytes;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != len) {
        tier_job_fail(a, TIER_EFAIL, "cannot open '%s' (%llu bytes) to send it: %s", path,
                      (unsigned long long)len, fd < 0 ? strerror(errno) : "not that file");
        if (fd >= 0)
            close(fd);
        return a->job_rc;
    }
    void *map = len ? util_map_file(fd, (size_t)len, PROT_READ) : MAP_FAILED;
    if (map != MAP_FAILED) {
        a->map = map;
        a->map_len = (size_t)len;
        a->send = map;
    } else {
        read_own(a, fd, len, path);
    }
    a->send_len = len;
    close(fd);
    return a->job_rc;
}

/* JOB_WRITE: this rank's slice copied (tier_snapshot_copy), its shard into
 * the node's root, then mapped. */
static void job_write(tier_t *t)
{
    struct tier_async *a = t->async;
    double t0 = util_mono_s();
    tier_snapshot_copy(t);
    state_local_view_t view;
    if (a->inplace) {
        /* The slice is in the file already (take_inplace). */
        tier_file_t *own = &a->files.files[0];
        int rc = ckpt_stored_shard_finish(own->map, own->len, a->lo, a->hi, a->frame_bytes,
                                          &a->own_info);
        if (rc != CKPT_OK)
            tier_job_fail(a, TIER_EFAIL, "%s: %s", ckpt_strerror(rc), ckpt_last_error());
        else if ((rc = tier_files_adopt(&a->files, 0, t->root, (uint64_t)a->step, t->rank,
                                        a->job_err, sizeof a->job_err)) != TIER_OK)
            a->job_rc = rc;
        a->send = own->map;
        a->send_len = own->len;
    } else if (state_snapshot_write(a->snap, t->root, t->rank, t->size) != STATE_OK ||
               state_snapshot_local(a->snap, &view) != STATE_OK) {
        tier_job_fail(a, TIER_EFAIL, "%s", state_snapshot_error(a->snap));
    } else if (t->partner >= 0) {
        map_own(t, &view);
    }
    a->rep.write_s = util_mono_s() - t0;
}

void tier_own_unmap(struct tier_async *a)
{
    if (a->map)
        util_unmap(a->map, a->map_len);
    a->map = NULL;
    a->send = NULL;
}

/* In place, copy i: checked in the file it was received into (hashed as
 * it landed, or here), then renamed into the save.  @return job_rc. */
static int put_inplace(tier_t *t, int i, const ckpt_shard_info_t *info)
{
    struct tier_async *a = t->async;
    int rc = a->summed ? ckpt_shard_check_sum(info->file_bytes, a->sum[i], info->xxh64,
                                              (uint64_t)a->step, t->srcs[i])
                       : ckpt_shard_check(a->dst[i], info->file_bytes, info->xxh64,
                                          (uint64_t)a->step, t->srcs[i]);
    if (rc != CKPT_OK)
        tier_job_fail(a, TIER_EFAIL, "partner copy of rank %d: %s: %s", t->srcs[i],
                      ckpt_strerror(rc), ckpt_last_error());
    else if ((rc = tier_files_adopt(&a->files, 1 + i, t->root, (uint64_t)a->step, t->srcs[i],
                                    a->job_err, sizeof a->job_err)) != TIER_OK)
        a->job_rc = rc;
    else
        a->rep.copy_bytes += info->file_bytes;
    return a->job_rc;
}

/* JOB_PUT: each copy received, checked against its writer's checksum
 * before a byte of it is written (ckpt_shard_put), written and fsync'd;
 * then our own mapping goes (every send has completed). */
static void job_put(tier_t *t)
{
    struct tier_async *a = t->async;
    for (int i = 0; i < t->nsrc && !a->job_rc; i++) {
        const ckpt_shard_info_t *info = &a->all[t->srcs[i]].info;
        if (a->inplace) {
            put_inplace(t, i, info);
            continue;
        }
        int rc = ckpt_shard_put(t->root, (uint64_t)a->step, t->srcs[i], a->recv[i],
                                info->file_bytes, info->xxh64);
        if (rc != CKPT_OK)
            tier_job_fail(a, TIER_EFAIL, "partner copy of rank %d: %s: %s", t->srcs[i],
                          ckpt_strerror(rc), ckpt_last_error());
        else
            a->rep.copy_bytes += info->file_bytes;
    }
    a->summed = 0;
    tier_own_unmap(a);
    if (a->inplace) /* every send and receive has completed */
        tier_files_retire(&a->files, a->step);
    a->put_end = util_mono_s();
}

/* JOB_PRUNE (a node's first rank, after its seal): the newest `keep` steps
 * stay, never the one just sealed. */
static void job_prune(tier_t *t)
{
    struct tier_async *a = t->async;
    if (ckpt_prune(t->root, t->keep, a->prune_name, NULL) != CKPT_OK)
        tier_job_fail(a, TIER_EFAIL, "%s sealed, but pruning older steps failed: %s",
                      a->prune_name, ckpt_last_error());
    if (a->inplace)
        tier_snapshot_buffers(t); /* the next save's files */
}

static void *job_main(void *arg)
{
    tier_t *t = arg;
    struct tier_async *a = t->async;
    double cpu0 = util_thread_cpu_s();
    /* Named, so that top -H and perf tell it from the training thread (a
     * job run on the training thread keeps that thread's name). */
    if (a->on_helper)
        pthread_setname_np(pthread_self(), "ftrain-tier");
    switch (a->job) {
    case JOB_PREPARE: tier_snapshot_buffers(t); break;
    case JOB_WRITE: job_write(t); break;
    case JOB_EXCHANGE_PUT:
        if (tier_exchange_run(t) == TIER_OK)
            job_put(t);
        break;
    case JOB_PUT: job_put(t); break;
    case JOB_PRUNE: job_prune(t); break;
    }
    a->job_cpu = util_thread_cpu_s() - cpu0;
    atomic_store(&a->done, 1);
    return NULL;
}

void tier_job_run(tier_t *t, tier_job_t job)
{
    struct tier_async *a = t->async;
    a->job = job;
    a->job_rc = TIER_OK;
    a->job_err[0] = '\0';
    atomic_store(&a->done, 0);
    atomic_store(&a->cancel, 0);
    /* A thread that cannot start (or may not: under MPI_THREAD_SINGLE the
     * process may have no second thread) is no failure: the job runs here,
     * on the training thread. */
    a->on_helper = 1;
    if (a->threads_ok &&
        pthread_create(&a->thread, NULL, job_main, t) == 0) {
        a->running = 1;
        return;
    }
    a->on_helper = 0;
    job_main(t);
    a->cpu += a->job_cpu;
}

int tier_job_finished(const struct tier_async *a)
{
    return !a->running || atomic_load(&a->done);
}

/* The wait is bounded: local work by this node's I/O, an exchange by the
 * peers (a dead or stopped one is the watchdog's, as in any collective).
 * A failed prune is only a warning, said here (its step is sealed). */
double tier_job_join(tier_t *t)
{
    struct tier_async *a = t->async;
    if (!a->running)
        return 0;
    double t0 = util_mono_s();
    pthread_join(a->thread, NULL);
    a->running = 0;
    a->cpu += a->job_cpu;
    if (a->job == JOB_PRUNE && a->job_rc) {
        fprintf(stderr, "ftrain: warning: local tier %s: %s\n", t->root, a->job_err);
        a->job_rc = TIER_OK;
    }
    return util_mono_s() - t0;
}

/* An exchange the helper is waiting on is given up; the caller abandons
 * what is left of it. */
double tier_job_cancel(tier_t *t)
{
    atomic_store(&t->async->cancel, 1);
    return tier_job_join(t);
}
