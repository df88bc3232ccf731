/*
 * save_async.c - the asynchronous save of the trainer (save_async_internal.h):
 * snapshot on the training thread, shard written by a background thread,
 * commit on the training thread.
 */
#include "train/save_async_internal.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One spare byte: a state of no floats still gets a buffer (malloc(0) may
 * return NULL, which would read as out of memory). */
static float *alloc_copy(size_t floats)
{
    return malloc(floats * sizeof(float) + 1);
}

int async_save_reserve(async_save_t *save, const state_t *st, comm_t *comm, float *buffer,
                       char *err, size_t cap)
{
    save->copy_floats = state_floats(st);
    save->copy_borrowed = buffer != NULL;
    save->copy = buffer ? buffer : alloc_copy(save->copy_floats);
    if (save->copy)
        memset(save->copy, 0, save->copy_floats * sizeof(float));
    if (comm_any_failed(comm, !save->copy)) {
        snprintf(err, cap, "out of memory for the --ckpt-async snapshot (%zu bytes)",
                 save->copy_floats * sizeof(float));
        return TRAIN_EFAIL;
    }
    return TRAIN_OK;
}

static void *write_shard(void *arg)
{
    async_save_t *save = arg;
    state_snapshot_write(save->snapshot, save->root, save->rank, save->world);
    atomic_store(&save->written, 1);
    return NULL;
}

/* This rank's half of the start: snapshot and writer thread.
 * @return STATE_OK or STATE_EFAIL (err set). */
static int start_writer(async_save_t *save, const state_t *st, int level, char *err, size_t cap)
{
    if (!save->copy) {
        save->copy_floats = state_floats(st);
        save->copy = alloc_copy(save->copy_floats);
    }
    if (!save->copy) {
        snprintf(err, cap, "out of memory for the snapshot");
        return STATE_EFAIL;
    }
    int rc = state_snapshot_take(st, save->world, save->copy, save->copy_floats, save->placed,
                                 save->nplaced, level, &save->snapshot, err, cap);
    save->nplaced = 0;
    if (rc == STATE_OK && pthread_create(&save->writer, NULL, write_shard, save) != 0) {
        snprintf(err, cap, "cannot start the checkpoint writer thread");
        rc = STATE_EFAIL;
    }
    return rc;
}

int async_save_start(async_save_t *save, const state_t *st, comm_t *comm, const char *root,
                     int level, double started, double gpu_copy_seconds, char *err, size_t cap)
{
    save->root = root;
    save->rank = comm_rank(comm);
    save->world = comm_size(comm);
    save->step = st->step;
    atomic_store(&save->written, 0);
    int rc = start_writer(save, st, level, err, cap);
    if (comm_any_failed(comm, rc)) {
        if (rc == STATE_OK) { /* we started, another rank did not */
            pthread_join(save->writer, NULL);
            snprintf(err, cap, "another rank could not start its checkpoint writer");
        }
        state_snapshot_free(save->snapshot);
        save->snapshot = NULL;
        return TRAIN_EFAIL;
    }
    save->in_flight = 1;
    save->started = started;
    save->snapshot_seconds = util_mono_s() - started;
    save->gpu_copy_seconds = gpu_copy_seconds;
    return TRAIN_OK;
}

void async_save_placed(async_save_t *save, const float *const *host_arrays, size_t count,
                       size_t floats)
{
    save->nplaced = 0;
    for (size_t i = 0; i < count && i < ASYNC_PLACED_MAX; i++)
        if (host_arrays[i])
            save->placed[save->nplaced++] = (state_placed_t){host_arrays[i], floats};
}

int async_save_writing(const async_save_t *save)
{
    return save->in_flight && !atomic_load(&save->written);
}

int async_save_commit(async_save_t *save, comm_t *comm, async_commit_t *done, char *err,
                      size_t cap)
{
    double t0 = util_mono_s();
    pthread_join(save->writer, NULL);
    /* Every rank's writer is done past this point, so a wait for a slower
     * rank's falls in writer_wait_seconds too, not in the commit's
     * allgather (a failure here fails that allgather next). */
    (void)comm_any_failed(comm, 0);
    double t1 = util_mono_s();
    int rc = state_snapshot_commit(save->snapshot, comm, save->root, done->dir, sizeof done->dir,
                                   err, cap);
    double end = util_mono_s();
    save->in_flight = 0;
    state_snapshot_free(save->snapshot);
    save->snapshot = NULL;
    done->step = save->step;
    done->background_seconds = end - save->started;
    done->stall_seconds = save->snapshot_seconds + (end - t1);
    done->writer_wait_seconds = t1 - t0;
    done->snapshot_seconds = save->snapshot_seconds;
    done->gpu_copy_seconds = save->gpu_copy_seconds;
    return rc == STATE_OK ? TRAIN_OK : TRAIN_EFAIL;
}

void async_save_free(async_save_t *save)
{
    if (save->in_flight) {
        pthread_join(save->writer, NULL);
        state_snapshot_free(save->snapshot);
        save->snapshot = NULL;
        save->in_flight = 0;
    }
    if (!save->copy_borrowed)
        free(save->copy);
    save->copy = NULL;
}
