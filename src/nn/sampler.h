/*
 * sampler.h - the global, world-size-invariant data order.
 *
 * HowTo: sampler_init(&smp, n, global_batch, micro_batch, seed, err, cap);
 * for each epoch sampler_set_epoch(&smp, e) builds that epoch's permutation,
 * derived only from (seed, epoch).  Step j of an epoch takes the samples at
 * permutation positions [j*B, min((j+1)*B, n)); the last step of an epoch
 * may be short, so every sample is used exactly once per epoch (B is at
 * most n: a larger B is refused).  A step's samples are cut
 * into micro-batches of micro_batch samples (the last may be short) and the
 * micro-batches are dealt to ranks in contiguous blocks: rank r of W gets
 * micro-batches [floor(m*r/W), floor(m*(r+1)/W)).  Ranks beyond the number of
 * micro-batches get none and stay idle for that step (they still take part
 * in every collective).
 *
 * The whole data position is one number: the cursor, the samples consumed in
 * the current epoch (j*B at a step boundary).  With the epoch it is all a
 * checkpoint stores, and any world size can continue from it.
 */
#ifndef FTRAIN_SAMPLER_H
#define FTRAIN_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    SAMPLER_OK = 0,
    SAMPLER_EINVAL = -1,  /* a size < 1, a micro-batch larger than B, or B
                             larger than the data set */
    SAMPLER_ENOMEM = -2   /* no memory for the permutation */
} sampler_err_t;

typedef struct {
    int64_t samples;       /* samples in the data set */
    int64_t global_batch;  /* B */
    int64_t micro_batch;
    uint64_t seed;
    int64_t epoch;         /* epoch of the current permutation, -1 none */
    int64_t *perm;         /* `samples` indices */
} sampler_t;

/** @return SAMPLER_OK, or SAMPLER_EINVAL / SAMPLER_ENOMEM with err naming
 *  the size at fault or the memory asked for. */
int sampler_init(sampler_t *smp, int64_t samples, int64_t global_batch,
                 int64_t micro_batch, uint64_t seed, char *err, size_t cap);
/** Release; accepts NULL. */
void sampler_free(sampler_t *smp);

/** Build the permutation of `epoch` (no-op when already current). */
void sampler_set_epoch(sampler_t *smp, int64_t epoch);

/** @return steps per epoch: ceil(samples / B). */
int64_t sampler_steps_per_epoch(const sampler_t *smp);

/** @return the number of samples of step `step` of the epoch. */
int64_t sampler_step_size(const sampler_t *smp, int64_t step);

/** @return the number of micro-batches of step `step`. */
int64_t sampler_micro_count(const sampler_t *smp, int64_t step);

/** The micro-batches [*first, *first + *count) rank `rank` of `world` gets
 *  at step `step`. */
void sampler_rank_micros(const sampler_t *smp, int64_t step, int rank, int world,
                         int64_t *first, int64_t *count);

/** Sample indices of micro-batch `micro` of step `step`: *len entries at
 *  the returned pointer (into the current permutation). */
const int64_t *sampler_micro(const sampler_t *smp, int64_t step, int64_t micro,
                             int64_t *len);

#endif
