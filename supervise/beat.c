/*
 * beat.c - the supervisor's heartbeat file (beat.h): writer and parser.
 */
#include "supervise/beat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

static struct {
    char path[4400];
    char job[2 * SV_NAME_MAX];
    int64_t restart;
    char host[SV_NAME_MAX];
    uint64_t seq;
    double last;
    int ended;
} beat;

int beat_path(const char *run_dir, const char *job_ref, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/.supervisor-%s.heartbeat", run_dir, job_ref);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Write the line now.  @return 0 or -1 (errno). */
static int beat_write(void)
{
    char line[BEAT_LINE_LEN + 1];
    int n = snprintf(line, sizeof line, "%s %d job %s restart %lld host %s pid %ld seq %llu state %s",
                     BEAT_MAGIC, BEAT_VERSION, beat.job, (long long)beat.restart, beat.host,
                     (long)getpid(), (unsigned long long)++beat.seq,
                     beat.ended ? "ended" : "running");
    if (n < 0 || n >= BEAT_LINE_LEN) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memset(line + n, ' ', (size_t)(BEAT_LINE_LEN - 1 - n));
    line[BEAT_LINE_LEN - 1] = '\n';
    int fd = open(beat.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t w = pwrite(fd, line, BEAT_LINE_LEN, 0);
    int e = errno;
    /* close flushes to the server on NFS (close-to-open). */
    if (close(fd) != 0 && w == BEAT_LINE_LEN)
        return -1;
    errno = e;
    beat.last = util_mono_s();
    return w == BEAT_LINE_LEN ? 0 : -1;
}

int beat_open(const char *run_dir, const char *job_ref, int64_t restart, const char *host,
              char *err, size_t cap)
{
    memset(&beat, 0, sizeof beat);
    if (beat_path(run_dir, job_ref, beat.path, sizeof beat.path) != 0 ||
        strlen(job_ref) >= sizeof beat.job || strlen(host) >= sizeof beat.host ||
        strchr(job_ref, ' ') || strchr(host, ' ') || !*host)
        return util_fail(err, cap, -1, "cannot name the heartbeat file for job '%s' on '%s'",
                         job_ref, host);
    snprintf(beat.job, sizeof beat.job, "%s", job_ref);
    snprintf(beat.host, sizeof beat.host, "%s", host);
    beat.restart = restart;
    if (beat_write() != 0) {
        int e = errno;
        beat.path[0] = '\0';
        return util_fail(err, cap, -1, "cannot write the heartbeat file %s/.supervisor-%s.heartbeat (%s)",
                         run_dir, job_ref, strerror(e));
    }
    return 0;
}

void beat_tick(void)
{
    if (beat.path[0] && util_mono_s() >= beat.last + BEAT_PERIOD_S)
        beat_write(); /* a failed write is a missed beat: the deputy asks SLURM */
}

void beat_end(void)
{
    if (!beat.path[0])
        return;
    beat.ended = 1;
    beat_write();
}

const char *beat_file(void)
{
    return beat.path;
}

int beat_parse(const char *text, sv_beat_line_t *line)
{
    char magic[32], job[2 * SV_NAME_MAX], host[SV_NAME_MAX], state[16], k[7][16];
    int version = 0, used = 0;
    long long restart = -1;
    long pid = 0;
    unsigned long long seq = 0;
    memset(line, 0, sizeof *line);
    if (!text)
        return -1;
    /* The field widths follow the buffers (checked below at compile time). */
    _Static_assert(SV_NAME_MAX == 64, "beat_parse's field widths assume SV_NAME_MAX 64");
    int got = sscanf(text, "%31s %d %15s %127s %15s %lld %15s %63s %15s %ld %15s %llu %15s %15s%n",
                     magic, &version, k[0], job, k[1], &restart, k[2], host, k[3], &pid, k[4],
                     &seq, k[5], state, &used);
    if (got != 14 || strcmp(magic, BEAT_MAGIC) != 0 || version != BEAT_VERSION ||
        strcmp(k[0], "job") != 0 || strcmp(k[1], "restart") != 0 ||
        strcmp(k[2], "host") != 0 || strcmp(k[3], "pid") != 0 || strcmp(k[4], "seq") != 0 ||
        strcmp(k[5], "state") != 0 || restart < 0)
        return -1;
    /* The rest of the line is blanks up to the newline. */
    if (text[used + strspn(text + used, " ")] != '\n')
        return -1;
    if (strcmp(state, "running") == 0)
        line->state = SV_BEAT_RUNNING;
    else if (strcmp(state, "ended") == 0)
        line->state = SV_BEAT_ENDED;
    else
        return -1;
    snprintf(line->job, sizeof line->job, "%s", job);
    snprintf(line->host, sizeof line->host, "%s", host);
    line->restart = restart;
    line->pid = pid;
    line->seq = seq;
    return 0;
}
