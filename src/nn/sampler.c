/*
 * sampler.c - per-epoch permutations and the dealing of micro-batches.
 *
 * The permutation is a Fisher-Yates shuffle driven by rng_make(seed, epoch),
 * so it depends on nothing but (seed, epoch).  See sampler.h for the layout
 * of steps and micro-batches.
 */
#include "nn/sampler.h"

#include <stdlib.h>

#include "nn/rng.h"
#include "util/util.h"

int sampler_init(sampler_t *smp, int64_t samples, int64_t global_batch,
                 int64_t micro_batch, uint64_t seed, char *err, size_t cap)
{
    smp->perm = NULL;
    if (samples < 1 || global_batch < 1 || micro_batch < 1)
        return util_fail(err, cap, SAMPLER_EINVAL,
                         "sampler: %lld samples, global batch %lld, micro-batch %lld: "
                         "each must be at least 1",
                         (long long)samples, (long long)global_batch, (long long)micro_batch);
    if (micro_batch > global_batch)
        return util_fail(err, cap, SAMPLER_EINVAL,
                         "sampler: micro-batch %lld is larger than the global batch %lld",
                         (long long)micro_batch, (long long)global_batch);
    /* Every step would take the whole set, not B samples: the run would
     * say one batch and train another (its samples/s too). */
    if (global_batch > samples) {
        /* The advice must be a value the option check accepts: a multiple
         * of the micro-batch (one exists: micro_batch <= samples here, or
         * the set is smaller than one micro-batch). */
        long long fit = (long long)(samples / micro_batch * micro_batch);
        if (fit == 0)
            return util_fail(err, cap, SAMPLER_EINVAL,
                             "--micro-batch %lld is larger than the training set, which has "
                             "%lld samples: give --micro-batch %lld or less (and a "
                             "--global-batch it divides)",
                             (long long)micro_batch, (long long)samples, (long long)samples);
        return util_fail(err, cap, SAMPLER_EINVAL,
                         "--global-batch %lld is larger than the training set, which has "
                         "%lld samples: give --global-batch %lld or less, a multiple of "
                         "--micro-batch %lld",
                         (long long)global_batch, (long long)samples, fit,
                         (long long)micro_batch);
    }
    if ((uint64_t)samples > SIZE_MAX / sizeof *smp->perm)
        return util_fail(err, cap, SAMPLER_ENOMEM,
                         "sampler: a permutation of %lld samples does not fit in memory",
                         (long long)samples);
    smp->samples = samples;
    smp->global_batch = global_batch;
    smp->micro_batch = micro_batch;
    smp->seed = seed;
    smp->epoch = -1;
    smp->perm = malloc((size_t)samples * sizeof *smp->perm);
    if (!smp->perm)
        return util_fail(err, cap, SAMPLER_ENOMEM,
                         "sampler: out of memory for the permutation of %lld samples",
                         (long long)samples);
    return SAMPLER_OK;
}

void sampler_free(sampler_t *smp)
{
    if (!smp)
        return;
    free(smp->perm);
    smp->perm = NULL;
}

void sampler_set_epoch(sampler_t *smp, int64_t epoch)
{
    if (smp->epoch == epoch)
        return;
    rng_t rng = rng_make(smp->seed, (uint64_t)epoch);
    for (int64_t i = 0; i < smp->samples; i++)
        smp->perm[i] = i;
    for (int64_t i = smp->samples - 1; i > 0; i--) {
        int64_t k = (int64_t)rng_below(&rng, (uint64_t)i + 1);
        int64_t tmp = smp->perm[i];
        smp->perm[i] = smp->perm[k];
        smp->perm[k] = tmp;
    }
    smp->epoch = epoch;
}

int64_t sampler_steps_per_epoch(const sampler_t *smp)
{
    return (smp->samples + smp->global_batch - 1) / smp->global_batch;
}

int64_t sampler_step_size(const sampler_t *smp, int64_t step)
{
    int64_t start = step * smp->global_batch;
    int64_t left = smp->samples - start;
    return left < smp->global_batch ? left : smp->global_batch;
}

int64_t sampler_micro_count(const sampler_t *smp, int64_t step)
{
    return (sampler_step_size(smp, step) + smp->micro_batch - 1) / smp->micro_batch;
}

void sampler_rank_micros(const sampler_t *smp, int64_t step, int rank, int world,
                         int64_t *first, int64_t *count)
{
    int64_t micros = sampler_micro_count(smp, step);
    int64_t begin = micros * rank / world, end = micros * (rank + 1) / world;
    *first = begin;
    *count = end - begin;
}

const int64_t *sampler_micro(const sampler_t *smp, int64_t step, int64_t micro,
                             int64_t *len)
{
    int64_t size = sampler_step_size(smp, step);
    int64_t offset = micro * smp->micro_batch;
    int64_t left = size - offset;
    *len = left < smp->micro_batch ? left : smp->micro_batch;
    return smp->perm + step * smp->global_batch + offset;
}
