/*
 * sampler.h - the global, world-size-invariant data order.
 *
 * HowTo: sampler_init(&s, n, global_batch, micro_batch, seed); for each epoch
 * sampler_set_epoch(&s, e) builds that epoch's permutation, derived only from
 * (seed, epoch).  Step j of an epoch takes the samples at permutation
 * positions [j*B, min((j+1)*B, n)); the last step of an epoch may be short,
 * so every sample is used exactly once per epoch.  A step's samples are cut
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

#include <stdint.h>

typedef struct {
    int64_t n;             /* samples in the data set */
    int64_t global_batch;  /* B */
    int64_t micro_batch;
    uint64_t seed;
    int64_t epoch;         /* epoch of the current permutation, -1 none */
    int64_t *perm;         /* n indices */
} sampler_t;

/** @return 0, or -1 for bad sizes (n, B or micro_batch < 1, micro > B), -2
 *  for no memory. */
int sampler_init(sampler_t *s, int64_t n, int64_t global_batch,
                 int64_t micro_batch, uint64_t seed);
/** Release; accepts NULL. */
void sampler_free(sampler_t *s);

/** Build the permutation of epoch e (no-op when already current). */
void sampler_set_epoch(sampler_t *s, int64_t e);

/** @return steps per epoch: ceil(n / B). */
int64_t sampler_steps_per_epoch(const sampler_t *s);

/** @return the number of samples of step j of the epoch. */
int64_t sampler_step_size(const sampler_t *s, int64_t j);

/** @return the number of micro-batches of step j. */
int64_t sampler_micro_count(const sampler_t *s, int64_t j);

/** The micro-batches [*first, *first + *count) rank r of W gets at step j. */
void sampler_rank_micros(const sampler_t *s, int64_t j, int r, int w,
                         int64_t *first, int64_t *count);

/** Sample indices of micro-batch i of step j: *len entries at the returned
 *  pointer (into the current permutation). */
const int64_t *sampler_micro(const sampler_t *s, int64_t j, int64_t i,
                             int64_t *len);

#endif
