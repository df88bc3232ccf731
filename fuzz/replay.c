/*
 * replay.c - run a fuzz target's LLVMFuzzerTestOneInput over files, without
 * libFuzzer: the seed corpus as a regression test of any compiler's build
 * (mk/fuzz.mk links it with each target into $(BUILD)/fuzz/replay-<target>),
 * and a crash artifact replayed under a debugger.
 *
 *   replay-<target> PATH...
 *
 * Each PATH is a file (run as one input) or a directory (each regular file
 * in it, in name order, not recursing).  The target's LLVMFuzzerInitialize
 * runs first when it has one.  A property that fails stops the process
 * (abort), as under libFuzzer.  Prints "replay: N inputs (B bytes)" and
 * exits 0 when every input ran; 1 when a path could not be read or there
 * was no input at all; 2 on a usage error.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a target: weak, so a target without it links. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static size_t inputs, input_bytes;

/* Read path whole and run it.  @return 0 or -1 (message printed). */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char *data = NULL;
    size_t size = 0, cap = 0;
    int rc = 0;

    if (!f) {
        fprintf(stderr, "replay: cannot open '%s': %s\n", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (size == cap) {
            unsigned char *more = realloc(data, cap ? 2 * cap : 65536);
            if (!more) {
                fprintf(stderr, "replay: '%s': out of memory\n", path);
                rc = -1;
                break;
            }
            data = more;
            cap = cap ? 2 * cap : 65536;
        }
        size_t got = fread(data + size, 1, cap - size, f);
        size += got;
        if (got == 0) {
            if (ferror(f)) {
                fprintf(stderr, "replay: cannot read '%s'\n", path);
                rc = -1;
            }
            break;
        }
    }
    fclose(f);
    if (rc == 0) {
        /* The input in a buffer of exactly its size, as libFuzzer passes
         * it, so that ASan sees a read past its end. */
        unsigned char *exact = malloc(size ? size : 1);
        if (!exact) {
            fprintf(stderr, "replay: '%s': out of memory\n", path);
            rc = -1;
        } else {
            memcpy(exact, data, size);
            LLVMFuzzerTestOneInput(exact, size);
            free(exact);
            inputs++;
            input_bytes += size;
        }
    }
    free(data);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every regular file of dir in name order.  @return 0 or -1. */
static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL, path[4096];
    size_t n = 0, cap = 0;
    int rc = 0;

    if (!d) {
        fprintf(stderr, "replay: cannot open '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **more = realloc(names, (cap ? 2 * cap : 64) * sizeof *names);
            if (!more) {
                rc = -1;
                break;
            }
            names = more;
            cap = cap ? 2 * cap : 64;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc != 0)
        fprintf(stderr, "replay: '%s': out of memory\n", dir);
    if (n > 0)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (rc == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            run_file(path) != 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 0;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: %s PATH...\nrun the fuzz target over each file, and "
                "each file in each directory\n", argv[0]);
        return argc < 2 ? 2 : 0;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: cannot open '%s': %s\n", argv[i],
                    strerror(errno));
            rc = 1;
        } else if (S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i])) {
            rc = 1;
        }
    }
    printf("replay: %zu inputs (%zu bytes)\n", inputs, input_bytes);
    if (inputs == 0 && rc == 0) {
        fprintf(stderr, "replay: no input found\n");
        rc = 1;
    }
    return rc;
}
