/*
 * metrics.c - the run's metrics.jsonl.
 *
 * One JSON object per line; each line goes out in a single write(2) on an
 * O_APPEND descriptor so that lines never interleave or tear on a crash.
 */
#include "train/metrics.h"
#include "util/util.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int metrics_open(metrics_t *m, const char *run_dir)
{
    m->fd = -1;
    if (!run_dir || !*run_dir)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    m->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    return m->fd < 0 ? -1 : 0;
}

void metrics_close(metrics_t *m)
{
    if (m && m->fd >= 0)
        close(m->fd);
    if (m)
        m->fd = -1;
}

static void metrics_write(metrics_t *m, const char *line, int len)
{
    if (m->fd < 0 || len <= 0)
        return;
    ssize_t w = write(m->fd, line, (size_t)len);
    (void)w; /* metrics are best effort: a full disk must not stop training */
}

void metrics_step(metrics_t *m, const metrics_row_t *r)
{
    char line[512], acc[64] = "";
    if (!isnan(r->acc))
        snprintf(acc, sizeof acc, "\"acc\":%.6g,", r->acc);
    int n = snprintf(line, sizeof line,
                     "{\"step\":%lld,\"epoch\":%lld,\"loss\":%.6g,%s"
                     "\"lr\":%.6g,\"samples_per_s\":%.1f,\"world_size\":%d,"
                     "\"time\":%.3f}\n",
                     (long long)r->step, (long long)r->epoch, r->loss, acc, r->lr,
                     r->samples_per_s, r->world_size, util_wall_s());
    if (n < (int)sizeof line)
        metrics_write(m, line, n);
}

void metrics_event(metrics_t *m, const char *name, int64_t step, int world,
                   const char *extra_json)
{
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "{\"event\":\"%s\",\"step\":%lld,\"world_size\":%d,\"time\":%.3f%s%s}\n",
                     name, (long long)step, world, util_wall_s(),
                     extra_json && *extra_json ? "," : "", extra_json ? extra_json : "");
    if (n < (int)sizeof line)
        metrics_write(m, line, n);
}
