/*
 * read.c - reading a committed checkpoint: open it (its manifest validated
 * as untrusted input), look tensors up, read any byte range of the flat
 * space by decoding only the frames that overlap it (whole frames on
 * several threads), and verify every byte.
 *
 * INVARIANTS (of the commit protocol; the others are at the top of commit.c)
 *   I2. A reader accepts only step-<N>/ holding a valid manifest.json, and
 *       trusts a shard only after its size, seek table and frame checksums
 *       match (ckpt_verify checks every byte).
 *   I10. A reader opens the step directory once and every file in it
 *       relative to that descriptor (openat), so a directory renamed or a
 *       link swapped in while it is read cannot mix two checkpoints; a
 *       step-<N> that is a link is refused at open, as ckpt_list lists it.
 */
#include "ftrain/ckpt.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manifest.h"
#include "shard.h"
#include "util.h"

/* Most threads ckpt_read_range decodes frames with. */
#define READ_THREADS_MAX 64

struct ckpt {
    char dir[CKPT_PATH_MAX];
    int dirfd;                    /* the step directory, opened once (I10) */
    ckpt_manifest_t manifest;
    ckpt_shard_reader_t *readers; /* fd < 0 until first used */
    unsigned char *cache;         /* last partially used frame */
    size_t cache_cap;
    int cache_shard;
    uint32_t cache_frame;
    int threads;                  /* decoding threads of ckpt_read_range */
};

/* ---- open and close --------------------------------------------------- */

/* Open the step directory dir once (I10); *step_name gets its last path
 * component (pointing into name_buf), *is_step whether that is a canonical
 * step-<N>, and then *dir_step its N. */
static int open_dir(const char *dir, char *name_buf, size_t cap, int *dirfd,
                    const char **step_name, int *is_step, uint64_t *dir_step)
{
    struct stat st;
    /* "root/step-N/" names root/step-N: trailing slashes are not part of
     * the name (and would make the kernel follow a link there). */
    *step_name = ckpt_base_name(dir, name_buf, cap);
    *is_step = ckpt_parse_dirname(*step_name, 0, dir_step);
    /* A step-<N> itself is never followed when it is a link, as ckpt_list
     * calls such an entry corrupt (I8); a link of another name
     * (".../best") is the user's and is followed. */
    *dirfd = open(name_buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                                (*is_step ? O_NOFOLLOW : 0));
    if (*dirfd >= 0)
        return CKPT_OK;
    int err = errno;
    if (*is_step && (err == ELOOP || err == ENOTDIR) &&
        lstat(name_buf, &st) == 0 && S_ISLNK(st.st_mode))
        return ckpt_seterr(CKPT_ECORRUPT, "%s: a symbolic link, not a directory "
                           "(a step-<N> that is a link is not followed)", dir);
    /* A file where a directory was asked for is the caller's mistake, not
     * a damaged checkpoint (ECORRUPT) nor a missing one (ENOTFOUND, which
     * ckptctl verify reads as incomplete): a step-<N> that is a file under
     * a root stays corrupt to ckpt_list and ckptctl. */
    if (err == ENOTDIR && lstat(name_buf, &st) == 0 && !S_ISDIR(st.st_mode))
        return ckpt_seterr(CKPT_EINVAL, "%s: not a directory, so not a checkpoint "
                           "(a checkpoint is a step-<N> directory)", dir);
    if (err == ENOENT || err == ENOTDIR)
        return ckpt_seterr(CKPT_ENOTFOUND, "%s: no such checkpoint directory", dir);
    return ckpt_seterr(CKPT_EIO, "%s: cannot open: %s", dir, strerror(err));
}

/* Read and validate the manifest of the opened directory. */
static int load_manifest(ckpt_t *ckpt, const char *step_name, int is_step,
                         uint64_t dir_step)
{
    char path[CKPT_PATH_MAX], *text = NULL;
    size_t len;
    int rc;

    if ((rc = ckpt_path_join(path, sizeof path, ckpt->dir, CKPT_MANIFEST_NAME)))
        return rc;
    rc = ckpt_read_small_file_at(ckpt->dirfd, CKPT_MANIFEST_NAME, path,
                                 CKPT_MANIFEST_MAX, &text, &len);
    if (rc == CKPT_ENOTFOUND)
        return ckpt_seterr(CKPT_EINCOMPLETE, "%s: no manifest.json (not "
                           "committed)", ckpt->dir);
    if (rc != CKPT_OK)
        return rc;
    rc = ckpt_manifest_parse(text, len, path, &ckpt->manifest);
    free(text);
    if (rc != CKPT_OK)
        return rc;
    /* A canonical step-<N> directory must hold step N. */
    if (is_step && dir_step != ckpt->manifest.step)
        return ckpt_seterr(CKPT_EFORMAT, "%s: step is %llu but the "
                           "directory is %s", path,
                           (unsigned long long)ckpt->manifest.step, step_name);
    return CKPT_OK;
}

int ckpt_open(const char *dir, ckpt_t **out)
{
    int rc, dirfd, is_step;
    ckpt_t *ckpt;
    char name_buf[CKPT_PATH_MAX];
    const char *step_name;
    uint64_t dir_step = 0;

    if (!dir || !out)
        return ckpt_seterr(CKPT_EINVAL, "open: dir or out is NULL");
    *out = NULL;
    if (strlen(dir) >= sizeof name_buf)
        return ckpt_seterr(CKPT_EINVAL, "%.*s...: path too long",
                           CKPT_MSG_PATH_MAX, dir);
    rc = open_dir(dir, name_buf, sizeof name_buf, &dirfd, &step_name, &is_step,
                  &dir_step);
    if (rc != CKPT_OK)
        return rc;
    ckpt = calloc(1, sizeof *ckpt);
    if (!ckpt) {
        close(dirfd);
        return ckpt_seterr(CKPT_ENOMEM, "out of memory");
    }
    strcpy(ckpt->dir, dir);
    ckpt->dirfd = dirfd;
    ckpt->cache_shard = -1;
    ckpt->threads = ckpt_default_threads();
    rc = load_manifest(ckpt, step_name, is_step, dir_step);
    if (rc == CKPT_OK) {
        ckpt->readers = calloc((size_t)ckpt->manifest.nshards, sizeof *ckpt->readers);
        if (!ckpt->readers)
            rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
    }
    if (rc != CKPT_OK) {
        ckpt_close(ckpt);
        return rc;
    }
    for (int i = 0; i < ckpt->manifest.nshards; i++)
        ckpt->readers[i].fd = -1;
    *out = ckpt;
    return CKPT_OK;
}

void ckpt_close(ckpt_t *ckpt)
{
    if (!ckpt)
        return;
    if (ckpt->readers)
        for (int i = 0; i < ckpt->manifest.nshards; i++)
            ckpt_shard_reader_close(&ckpt->readers[i]);
    free(ckpt->readers);
    free(ckpt->cache);
    ckpt_manifest_free(&ckpt->manifest);
    if (ckpt->dirfd >= 0)
        close(ckpt->dirfd);
    free(ckpt);
}

uint64_t ckpt_step(const ckpt_t *ckpt) { return ckpt->manifest.step; }
uint64_t ckpt_total_bytes(const ckpt_t *ckpt) { return ckpt->manifest.total_bytes; }
int ckpt_world_size(const ckpt_t *ckpt) { return ckpt->manifest.nshards; }
size_t ckpt_num_tensors(const ckpt_t *ckpt) { return ckpt->manifest.ntensors; }
const char *ckpt_record_json(const ckpt_t *ckpt) { return ckpt->manifest.record; }
int64_t ckpt_created(const ckpt_t *ckpt) { return ckpt->manifest.created; }
int ckpt_manifest_checksummed(const ckpt_t *ckpt) { return ckpt->manifest.checksummed; }

const ckpt_tensor_t *ckpt_tensor_at(const ckpt_t *ckpt, size_t index)
{
    return index < ckpt->manifest.ntensors ? &ckpt->manifest.tensors[index] : NULL;
}

const ckpt_tensor_t *ckpt_find(const ckpt_t *ckpt, const char *name)
{
    for (size_t i = 0; name && i < ckpt->manifest.ntensors; i++)
        if (strcmp(ckpt->manifest.tensors[i].name, name) == 0)
            return &ckpt->manifest.tensors[i];
    return NULL;
}

const ckpt_shard_info_t *ckpt_shard_at(const ckpt_t *ckpt, int index)
{
    return index >= 0 && index < ckpt->manifest.nshards
               ? &ckpt->manifest.shards[index] : NULL;
}

void ckpt_set_read_threads(ckpt_t *ckpt, int threads)
{
    if (ckpt)
        ckpt->threads = threads < 1 ? 1
                        : threads > READ_THREADS_MAX ? READ_THREADS_MAX : threads;
}

/* Shard `index`'s reader, opened on first use (relative to the step
 * directory, I10). */
static int shard_reader(ckpt_t *ckpt, int index, ckpt_shard_reader_t **out)
{
    int rc;
    char name[CKPT_FILE_NAME_MAX], path[CKPT_PATH_MAX];
    ckpt_shard_reader_t *reader = &ckpt->readers[index];
    if (reader->fd < 0) {
        ckpt_shard_name(index, name, sizeof name);
        if ((rc = ckpt_path_join(path, sizeof path, ckpt->dir, name)) != CKPT_OK)
            return rc;
        rc = ckpt_shard_reader_open(reader, ckpt->dirfd, name, path,
                                    &ckpt->manifest.shards[index]);
        if (rc != CKPT_OK)
            return rc;
    }
    *out = reader;
    return CKPT_OK;
}

/* The shard holding flat byte pos (pos < total): the last one starting at
 * or before it, so never an empty one. */
static int find_shard(const ckpt_t *ckpt, uint64_t pos)
{
    int lo = 0, hi = ckpt->manifest.nshards;
    assert(pos < ckpt->manifest.total_bytes);
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (ckpt->manifest.shards[mid].raw_offset <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* ---- reading ranges --------------------------------------------------- */

/* Frame-parallel reading.  The whole frames of a range are jobs; K threads
 * (the caller among them) take them in order, each with its own decoder,
 * and decode straight into place.  The readers are only read (pread at
 * frame offsets), so they are shared.  The failed job with the lowest index
 * among those that ran gives the error, whatever the thread count. */
typedef struct {
    ckpt_shard_reader_t *reader;
    uint32_t frame;
    unsigned char *dst;
} read_job_t;

typedef struct {
    read_job_t *jobs;
    size_t njobs, cap;
} read_plan_t;

typedef struct {
    const read_job_t *jobs;
    size_t njobs, next;
    pthread_mutex_t lock;
    int rc;
    size_t failed;              /* the failed job with the lowest index */
    char msg[CKPT_ERRMSG_MAX];  /* its message: ckpt_seterr's is per thread */
} read_pool_t;

static void *read_worker(void *arg)
{
    read_pool_t *pool = arg;
    ckpt_decoder_t decoder;
    memset(&decoder, 0, sizeof decoder);
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        size_t job_index = pool->rc ? pool->njobs : pool->next++;
        pthread_mutex_unlock(&pool->lock);
        if (job_index >= pool->njobs)
            break;
        const read_job_t *job = &pool->jobs[job_index];
        int rc = ckpt_shard_read_frame_dec(job->reader, &decoder, job->frame, job->dst);
        if (rc != CKPT_OK) {
            pthread_mutex_lock(&pool->lock);
            if (!pool->rc || job_index < pool->failed) {
                pool->rc = rc;
                pool->failed = job_index;
                snprintf(pool->msg, sizeof pool->msg, "%s", ckpt_last_error());
            }
            pthread_mutex_unlock(&pool->lock);
        }
    }
    ckpt_decoder_free(&decoder);
    return NULL;
}

static int run_read_jobs(const read_plan_t *plan, int threads)
{
    read_pool_t pool;
    pthread_t thread[READ_THREADS_MAX];
    int nthreads = threads < 1 ? 1 : threads > READ_THREADS_MAX ? READ_THREADS_MAX
                                                                : threads,
        started = 0;

    if (plan->njobs == 1) /* no thread to start */
        return ckpt_shard_read_frame(plan->jobs[0].reader, plan->jobs[0].frame,
                                     plan->jobs[0].dst);
    if ((size_t)nthreads > plan->njobs)
        nthreads = (int)plan->njobs;
    memset(&pool, 0, sizeof pool);
    pool.jobs = plan->jobs;
    pool.njobs = plan->njobs;
    if (pthread_mutex_init(&pool.lock, NULL) != 0)
        return ckpt_seterr(CKPT_ENOMEM, "cannot create a mutex");
    for (int i = 1; i < nthreads; i++) {
        if (pthread_create(&thread[started], NULL, read_worker, &pool) != 0)
            break; /* fewer threads: the caller and those started do it all */
        started++;
    }
    read_worker(&pool);
    for (int i = 0; i < started; i++)
        pthread_join(thread[i], NULL);
    pthread_mutex_destroy(&pool.lock);
    return pool.rc ? ckpt_seterr(pool.rc, "%s", pool.msg) : CKPT_OK;
}

/* Read flat bytes from pos (before end) into dst, at most to the end of the
 * frame holding pos: a whole frame becomes a job of plan (when several
 * threads decode) or is decoded in place; part of a frame goes through the
 * one-frame cache.  *taken gets the bytes done (or planned). */
static int read_piece(ckpt_t *ckpt, uint64_t pos, uint64_t end,
                      unsigned char *dst, read_plan_t *plan, uint64_t *taken)
{
    int shard = find_shard(ckpt, pos), rc;
    ckpt_shard_reader_t *reader;
    if ((rc = shard_reader(ckpt, shard, &reader)) != CKPT_OK)
        return rc;
    uint64_t local = pos - ckpt->manifest.shards[shard].raw_offset;
    uint32_t index = ckpt_shard_find_frame(reader, local);
    const ckpt_frame_t *frame = &reader->frames[index];
    uint64_t skip = local - frame->raw_offset;
    uint64_t take = frame->raw_size - skip < end - pos ? frame->raw_size - skip
                                                       : end - pos;
    assert(skip < frame->raw_size && take > 0);
    *taken = take;
    if (skip == 0 && take == frame->raw_size && ckpt->threads > 1) {
        if (plan->njobs == plan->cap) {
            read_job_t *jobs = ckpt_grow(plan->jobs, &plan->cap, sizeof *jobs, 64);
            if (!jobs)
                return ckpt_seterr(CKPT_ENOMEM, "out of memory");
            plan->jobs = jobs;
        }
        plan->jobs[plan->njobs++] = (read_job_t){reader, index, dst};
        return CKPT_OK;
    }
    if (skip == 0 && take == frame->raw_size)
        return ckpt_shard_read_frame(reader, index, dst);
    if (ckpt->cache_shard != shard || ckpt->cache_frame != index) {
        if (ckpt->cache_cap < frame->raw_size) {
            unsigned char *cache = realloc(ckpt->cache, frame->raw_size);
            if (!cache)
                return ckpt_seterr(CKPT_ENOMEM, "out of memory");
            ckpt->cache = cache;
            ckpt->cache_cap = frame->raw_size;
        }
        ckpt->cache_shard = -1;
        if ((rc = ckpt_shard_read_frame(reader, index, ckpt->cache)) != CKPT_OK)
            return rc;
        ckpt->cache_shard = shard;
        ckpt->cache_frame = index;
    }
    memcpy(dst, ckpt->cache + skip, take);
    return CKPT_OK;
}

int ckpt_read_range(ckpt_t *ckpt, uint64_t offset, uint64_t len, void *dst)
{
    int rc = CKPT_OK;
    uint64_t pos = offset, end, taken = 0;
    unsigned char *out = dst;
    read_plan_t plan = {NULL, 0, 0};

    if (!ckpt || (!dst && len > 0) || offset > ckpt->manifest.total_bytes ||
        len > ckpt->manifest.total_bytes - offset)
        return ckpt_seterr(CKPT_EINVAL, "read_range: [%llu, +%llu) is outside "
                           "the checkpoint", (unsigned long long)offset,
                           (unsigned long long)len);
    end = offset + len;
    while (rc == CKPT_OK && pos < end) {
        rc = read_piece(ckpt, pos, end, out + (pos - offset), &plan, &taken);
        pos += taken;
    }
    if (rc == CKPT_OK && plan.njobs > 0)
        rc = run_read_jobs(&plan, ckpt->threads);
    free(plan.jobs);
    return rc;
}

int ckpt_read_tensor(ckpt_t *ckpt, const char *name, void *dst, uint64_t cap)
{
    const ckpt_tensor_t *tensor = ckpt ? ckpt_find(ckpt, name) : NULL;
    if (!tensor)
        return ckpt_seterr(CKPT_ENOTFOUND, "%s: no tensor \"%s\"",
                           ckpt ? ckpt->dir : "(null)", name ? name : "(null)");
    if (cap < tensor->nbytes)
        return ckpt_seterr(CKPT_EINVAL, "tensor \"%s\" needs %llu bytes, "
                           "buffer has %llu", name,
                           (unsigned long long)tensor->nbytes,
                           (unsigned long long)cap);
    return ckpt_read_range(ckpt, tensor->offset, tensor->nbytes, dst);
}

int ckpt_verify(ckpt_t *ckpt)
{
    int rc = CKPT_OK;
    ckpt_shard_reader_t *reader;
    if (!ckpt)
        return ckpt_seterr(CKPT_EINVAL, "verify: NULL checkpoint");
    for (int i = 0; i < ckpt->manifest.nshards && rc == CKPT_OK; i++)
        if ((rc = shard_reader(ckpt, i, &reader)) == CKPT_OK)
            rc = ckpt_shard_verify(reader, &ckpt->manifest.shards[i]);
    return rc;
}
