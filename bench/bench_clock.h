/*
 * bench_clock.h - the one clock of the benchmark programs in bench/: seconds
 * on CLOCK_MONOTONIC, so a figure is never bent by a wall-clock step.
 */
#ifndef FTRAIN_BENCH_CLOCK_H
#define FTRAIN_BENCH_CLOCK_H

#include <time.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
