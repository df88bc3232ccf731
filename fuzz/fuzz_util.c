/*
 * fuzz_util.c - the helpers fuzz_util.h declares: property failures,
 * the per-process scratch directory, file writing, tree removal and the
 * check that a message is clean text.
 */
#include "fuzz_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[4096];

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fuzz: %s:%d: property failed: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

static void remove_tmpdir(void)
{
    if (tmpdir[0])
        fuzz_rmtree(tmpdir);
    tmpdir[0] = '\0';
}

const char *fuzz_tmpdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    int len;
    if (tmpdir[0])
        return tmpdir;
    if (!base || !*base)
        base = "/tmp";
    len = snprintf(tmpdir, sizeof tmpdir, "%s/ftrain-fuzz-%s.XXXXXX", base, tag);
    if (len < 0 || (size_t)len >= sizeof tmpdir || !mkdtemp(tmpdir)) {
        fprintf(stderr, "fuzz: cannot make a scratch directory in '%s': %s\n",
                base, strerror(errno));
        abort();
    }
    atexit(remove_tmpdir);
    return tmpdir;
}

void fuzz_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const char *next = data;
    while (fd >= 0 && len > 0) {
        ssize_t done = write(fd, next, len);
        if (done < 0 && errno == EINTR)
            continue;
        if (done <= 0)
            break;
        next += done;
        len -= (size_t)done;
    }
    if (fd < 0 || len > 0 || close(fd) != 0) {
        fprintf(stderr, "fuzz: cannot write '%s': %s\n", path, strerror(errno));
        abort();
    }
}

static int remove_one(const char *path, const struct stat *st, int type,
                      struct FTW *ftw)
{
    (void)st, (void)ftw;
    /* Keep going after a failure: remove what can be removed. */
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT)
        fprintf(stderr, "fuzz: cannot remove '%s': %s\n", path, strerror(errno));
    return 0;
}

int fuzz_rmtree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    /* FTW_PHYS: a link is removed, never followed; FTW_DEPTH: children
     * first. */
    nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return lstat(path, &st) == 0 ? -1 : 0;
}

int fuzz_count_entries(const char *dir, char *first, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (first && cap)
        first[0] = '\0';
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (n++ == 0 && first && cap)
            snprintf(first, cap, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

int fuzz_text_is_clean(const char *text)
{
    const unsigned char *p = (const unsigned char *)text;
    while (*p) {
        uint32_t code;
        size_t len;
        if (*p < 0x80) {
            if (*p < 0x20 || *p == 0x7f)
                return 0;
            p++;
            continue;
        }
        /* The lead byte says the length; every continuation is 10xxxxxx. */
        if ((*p & 0xe0) == 0xc0)
            len = 2, code = *p & 0x1fu;
        else if ((*p & 0xf0) == 0xe0)
            len = 3, code = *p & 0x0fu;
        else if ((*p & 0xf8) == 0xf0)
            len = 4, code = *p & 0x07u;
        else
            return 0;
        for (size_t i = 1; i < len; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0; /* also stops at the NUL */
            code = code << 6 | (p[i] & 0x3fu);
        }
        /* Overlong forms, surrogates, past U+10FFFF, C1 controls. */
        if ((len == 2 && code < 0x80) || (len == 3 && code < 0x800) ||
            (len == 4 && code < 0x10000) || code > 0x10ffff ||
            (code >= 0xd800 && code <= 0xdfff) || (code >= 0x80 && code <= 0x9f))
            return 0;
        p += len;
    }
    return 1;
}

uint64_t fuzz_rand(uint64_t *state)
{
    /* splitmix64 */
    uint64_t x = (*state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
