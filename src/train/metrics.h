/*
 * metrics.h - progress lines and DIR/metrics.jsonl (rank 0 only).
 *
 * HowTo: metrics_open(&m, run_dir_or_NULL) on rank 0; metrics_step() for each
 * logged step and metrics_event() for start, resume, eval, stop and done.
 * Each JSON line is written with one write(2) in O_APPEND mode, so a crash
 * leaves whole lines; restarts of the run keep appending.
 */
#ifndef FTRAIN_METRICS_H
#define FTRAIN_METRICS_H

#include <stdint.h>

typedef struct {
    int fd;   /* -1 when no run directory */
} metrics_t;

/** @return 0, or -1 when the file cannot be opened (errno set). */
int metrics_open(metrics_t *m, const char *run_dir);
void metrics_close(metrics_t *m);

typedef struct {
    int64_t step, epoch;
    double loss, acc, lr, samples_per_s; /* acc NaN: the row has none
                                            (regression) */
    int world_size;
} metrics_row_t;

void metrics_step(metrics_t *m, const metrics_row_t *r);

/** Append {"event": name, "step": step, "world_size": w, <extra>} where
 *  extra_json is "" or more members such as "\"from\":3". */
void metrics_event(metrics_t *m, const char *name, int64_t step, int world,
                   const char *extra_json);

#endif
