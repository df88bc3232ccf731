/*
 * tap.h - a tiny Test Anything Protocol helper for ftrain's C tests.
 *
 * HowTo: plan(n) (n > 0; or no plan and done_testing() at the end), then
 * ok(), is_int(), is_double(), is_str(); diag() writes a "# " comment on
 * stdout; a failure's details (where it failed, got and expected) go to
 * stderr, which prove shows without -v.  skip(reason) passes over one test,
 * skip_all() ends the test with a reason: the only way a test may run no
 * check ("1..0" reads as "skip all", so done_testing() after no test at all
 * fails).  tap_tmpdir() makes a fresh scratch directory (or bails out: a
 * test that cannot run is not a skip), tap_rmtree() removes it at the end.
 * The process exit code is non-zero when a test failed, so prove sees it
 * twice.
 */
#ifndef FTRAIN_TAP_H
#define FTRAIN_TAP_H

#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int tap_n_ = 0, tap_failed_ = 0, tap_planned_ = 0;

static inline void plan(int n)
{
    if (n <= 0) {
        /* "1..0" would read as "skip all": a test skips only through skip_all(). */
        printf("Bail out! plan(%d): a plan needs a number of tests above 0 "
               "(skip_all() skips a test)\n", n);
        fflush(stdout);
        exit(1);
    }
    tap_planned_ = n;
    printf("1..%d\n", n);
    fflush(stdout);
}

static inline void diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("# ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
}

/* A failure's details: "# " lines on stderr, after the "not ok" line (stdout
 * is flushed first, so that the two come out in order on a terminal). */
static inline void tap_why(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("# ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
}

static inline int ok_(int cond, const char *file, int line, const char *fmt, va_list ap)
{
    tap_n_++;
    printf("%sok %d - ", cond ? "" : "not ", tap_n_);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    if (!cond) {
        tap_failed_++;
        tap_why("  failed at %s:%d", file, line);
    }
    return cond;
}

static inline int ok_at(int cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = ok_(cond, file, line, fmt, ap);
    va_end(ap);
    return r;
}
#define ok(cond, ...) ok_at(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

#define is_int(got, want, ...)                                                \
    do {                                                                      \
        long long g_ = (long long)(got), w_ = (long long)(want);              \
        if (!ok(g_ == w_, __VA_ARGS__))                                       \
            tap_why("     got: %lld\n#   expected: %lld", g_, w_);           \
    } while (0)

#define is_double(got, want, tol, ...)                                        \
    do {                                                                      \
        double g_ = (double)(got), w_ = (double)(want);                       \
        if (!ok(fabs(g_ - w_) <= (tol), __VA_ARGS__))                         \
            tap_why("     got: %.9g\n#   expected: %.9g (tol %g)", g_, w_,    \
                    (double)(tol));                                           \
    } while (0)

#define is_str(got, want, ...)                                                \
    do {                                                                      \
        const char *g_ = (got), *w_ = (want);                                 \
        if (!ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__))                \
            tap_why("     got: '%s'\n#   expected: '%s'", g_ ? g_ : "(null)", \
                    w_ ? w_ : "(null)");                                      \
    } while (0)

static inline void skip_all(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    exit(0);
}

static inline void skip(const char *why)
{
    tap_n_++;
    printf("ok %d # skip %s\n", tap_n_, why);
}

/* Make a fresh directory $TMPDIR/NAME.XXXXXX (TMPDIR default /tmp) into buf,
 * or bail out: without it the test cannot run, and that must not pass. */
static inline void tap_tmpdir(char *buf, size_t cap, const char *name)
{
    const char *t = getenv("TMPDIR");
    if (!t || !t[0])
        t = "/tmp";
    int n = snprintf(buf, cap, "%s/%s.XXXXXX", t, name);
    if (n < 0 || (size_t)n >= cap || !mkdtemp(buf)) {
        printf("Bail out! cannot create a temporary directory %s/%s.XXXXXX\n", t, name);
        fflush(stdout);
        exit(1);
    }
}

static inline int tap_rm_one_(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)f;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Remove path and everything under it (no links followed; a missing path is
 * fine); a diag line when something is left. */
static inline void tap_rmtree(const char *path)
{
    if (nftw(path, tap_rm_one_, 16, FTW_DEPTH | FTW_PHYS) != 0 && access(path, F_OK) == 0)
        diag("could not remove %s", path);
}

static inline int done_testing(void)
{
    if (tap_n_ == 0) {
        /* Every branch fell through: "1..0" would pass as "skip all". */
        printf("not ok 1 - no test ran (a test with nothing to run here says why with "
               "skip_all())\n1..1\n");
        fflush(stdout);
        return 1;
    }
    if (!tap_planned_)
        printf("1..%d\n", tap_n_);
    else if (tap_planned_ != tap_n_)
        tap_why("planned %d tests but ran %d", tap_planned_, tap_n_);
    fflush(stdout);
    return tap_failed_ || (tap_planned_ && tap_planned_ != tap_n_) ? 1 : 0;
}

#endif
