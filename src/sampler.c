/*
 * sampler.c - per-epoch permutations and the dealing of micro-batches.
 *
 * The permutation is a Fisher-Yates shuffle driven by rng_make(seed, epoch),
 * so it depends on nothing but (seed, epoch).  See sampler.h for the layout
 * of steps and micro-batches.
 */
#include "ftrain/sampler.h"

#include <stdlib.h>

#include "ftrain/rng.h"

int sampler_init(sampler_t *s, int64_t n, int64_t global_batch,
                 int64_t micro_batch, uint64_t seed)
{
    s->perm = NULL;
    if (n < 1 || global_batch < 1 || micro_batch < 1 || micro_batch > global_batch)
        return -1;
    s->n = n;
    s->global_batch = global_batch;
    s->micro_batch = micro_batch;
    s->seed = seed;
    s->epoch = -1;
    s->perm = malloc((size_t)n * sizeof *s->perm);
    return s->perm ? 0 : -2;
}

void sampler_free(sampler_t *s)
{
    if (!s)
        return;
    free(s->perm);
    s->perm = NULL;
}

void sampler_set_epoch(sampler_t *s, int64_t e)
{
    if (s->epoch == e)
        return;
    rng_t r = rng_make(s->seed, (uint64_t)e);
    for (int64_t i = 0; i < s->n; i++)
        s->perm[i] = i;
    for (int64_t i = s->n - 1; i > 0; i--) {
        int64_t k = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int64_t t = s->perm[i];
        s->perm[i] = s->perm[k];
        s->perm[k] = t;
    }
    s->epoch = e;
}

int64_t sampler_steps_per_epoch(const sampler_t *s)
{
    return (s->n + s->global_batch - 1) / s->global_batch;
}

int64_t sampler_step_size(const sampler_t *s, int64_t j)
{
    int64_t start = j * s->global_batch;
    int64_t left = s->n - start;
    return left < s->global_batch ? left : s->global_batch;
}

int64_t sampler_micro_count(const sampler_t *s, int64_t j)
{
    return (sampler_step_size(s, j) + s->micro_batch - 1) / s->micro_batch;
}

void sampler_rank_micros(const sampler_t *s, int64_t j, int r, int w,
                         int64_t *first, int64_t *count)
{
    int64_t m = sampler_micro_count(s, j);
    int64_t a = m * r / w, b = m * (r + 1) / w;
    *first = a;
    *count = b - a;
}

const int64_t *sampler_micro(const sampler_t *s, int64_t j, int64_t i,
                             int64_t *len)
{
    int64_t size = sampler_step_size(s, j);
    int64_t off = i * s->micro_batch;
    int64_t l = size - off;
    *len = l < s->micro_batch ? l : s->micro_batch;
    return s->perm + j * s->global_batch + off;
}
