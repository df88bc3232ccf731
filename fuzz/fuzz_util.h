/*
 * fuzz_util.h - what the fuzz targets of fuzz/ share: a property check that
 * names the property and stops the process, one scratch directory per
 * process, and small file helpers.
 *
 * HowTo: in a target's LLVMFuzzerTestOneInput,
 *
 *     const char *dir = fuzz_tmpdir("shard");     made once, removed at exit
 *     fuzz_write_file(path, data, size);
 *     FUZZ_CHECK(rc == CKPT_OK, "ckpt_open: %s", ckpt_last_error());
 *     fuzz_rmtree(path);                           clean up before returning
 *
 * A failed FUZZ_CHECK prints "fuzz: FILE:LINE: property failed: COND: ..."
 * on stderr and calls abort(), which libFuzzer reports as a crash (with the
 * input saved as an artifact) and the replay driver as a signal.  Set-up
 * failures (no scratch directory, a file that cannot be written) stop the
 * process the same way: a harness that cannot run must not pass.
 *
 * The scratch directory is $TMPDIR/ftrain-fuzz-<tag>.XXXXXX (TMPDIR
 * defaults to /tmp), removed by an atexit handler.  A process that libFuzzer
 * ends after a crash or a signal leaves it behind: `make fuzz` runs each
 * target with TMPDIR pointing at a directory of its own that it removes.
 */
#ifndef FTRAIN_FUZZ_UTIL_H
#define FTRAIN_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Check a property; on failure print where, what and why, then abort. */
#define FUZZ_CHECK(cond, ...)                                                 \
    do {                                                                      \
        if (!(cond))                                                          \
            fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                \
    } while (0)

/* Print "fuzz: file:line: property failed: cond: <message>" and abort. */
void fuzz_fail(const char *file, int line, const char *cond, const char *fmt,
               ...) __attribute__((format(printf, 4, 5), noreturn));

/* The process's scratch directory, made on the first call (tag names the
 * target in its name) and removed with everything in it at exit.  Aborts
 * when it cannot be made. */
const char *fuzz_tmpdir(const char *tag);

/* Write len bytes to path (created or truncated).  Aborts on failure. */
void fuzz_write_file(const char *path, const void *data, size_t len);

/* Remove path and everything below it, following no link; a missing path
 * is fine.  @return 0, or -1 when something could not be removed. */
int fuzz_rmtree(const char *path);

/* Entries of the directory dir other than "." and "..": how many (-1 when
 * dir cannot be read); the first one's name goes to first (cap bytes) when
 * first is not NULL. */
int fuzz_count_entries(const char *dir, char *first, size_t cap);

/* 1 when text is valid UTF-8 without C0 or C1 controls or DEL, as every
 * message of ckpt_last_error() must be (include/ftrain/ckpt.h). */
int fuzz_text_is_clean(const char *text);

/* A small deterministic generator for choices derived from an input:
 * seed it with a hash of the input, so a replay makes the same ones. */
uint64_t fuzz_rand(uint64_t *state);

#endif
