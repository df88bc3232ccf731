/*
 * rng.h - small counter-based random numbers.
 *
 * HowTo: rng_t r = rng_make(seed, stream); rng_next(&r); rng_uniform(&r).
 * The whole state is one 64-bit counter plus a key, so a position can be
 * saved, restored and derived (seed, stream) without history: the epoch's
 * permutation is rng_make(seed, epoch), layer l's initial weights come
 * from rng_make(seed, 0x1417 + l) (MODEL_RNG_STREAM in src/nn/model.c) and its
 * initial biases (--init torch) from rng_make(seed, 0xb1a5000000000000 + l)
 * (MODEL_BIAS_RNG_STREAM).
 * Generator: SplitMix64 over (key + counter * golden gamma).
 */
#ifndef FTRAIN_RNG_H
#define FTRAIN_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t key;
    uint64_t counter;
} rng_t;

static inline uint64_t rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/** A generator for (seed, stream); different streams are independent. */
static inline rng_t rng_make(uint64_t seed, uint64_t stream)
{
    rng_t r;
    r.key = rng_mix64(seed ^ rng_mix64(stream + 0x9e3779b97f4a7c15ULL));
    r.counter = 0;
    return r;
}

/** @return the next 64 random bits. */
static inline uint64_t rng_next(rng_t *r)
{
    r->counter++;
    return rng_mix64(r->key + r->counter * 0x9e3779b97f4a7c15ULL);
}

/** @return a uniform double in [0, 1) with 53 random bits. */
static inline double rng_uniform(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/** @return a uniform integer in [0, n), n > 0, without modulo bias. */
static inline uint64_t rng_below(rng_t *r, uint64_t n)
{
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = rng_next(r);
    while (x >= lim);
    return x % n;
}

#endif
