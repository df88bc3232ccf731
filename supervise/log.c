/*
 * log.c - ftrain-supervise's timestamped log lines (log.h).
 */
#include "supervise/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static char log_name[64] = "ftrain-supervise";
static char log_job[160] = "nojob";
static int log_fd = -1;

void sv_log_to(int fd)
{
    log_fd = fd;
}

void sv_log_init(const char *name, const char *job_ref)
{
    snprintf(log_name, sizeof log_name, "%s", name && *name ? name : "ftrain-supervise");
    snprintf(log_job, sizeof log_job, "%s", job_ref && *job_ref ? job_ref : "nojob");
}

void sv_log(const char *fmt, ...)
{
    char line[8192], stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    int n = snprintf(line, sizeof line, "%s %s[%s]: ", stamp, log_name, log_job);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    fflush(stdout);
    int fd = log_fd >= 0 ? log_fd : STDOUT_FILENO;
    /* One write: the line is not split among other processes' output. */
    for (ssize_t off = 0, w; off < n; off += w)
        if ((w = write(fd, line + off, (size_t)(n - off))) <= 0)
            break;
}
