/*
 * ckpt_test.h - what several checkpoint tests share: the collective of a
 * single process (a save by one rank without MPI), and re-sealing a
 * manifest after an edit, as docs/checkpoint-format.md section 3 defines
 * manifest_xxh64 (an independent implementation of the rule, so a test
 * that forges a manifest also checks the library's reading of it); and
 * reading a whole file, or comparing one with bytes in memory.
 */
#ifndef FTRAIN_CKPT_TEST_H
#define FTRAIN_CKPT_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <xxhash.h>

#include "ftrain/ckpt.h"

static inline int solo_allgather(void *ctx, const void *send, void *recv,
                                 size_t bytes)
{
    (void)ctx;
    memcpy(recv, send, bytes);
    return 0;
}

static inline int solo_bcast(void *ctx, void *buf, size_t bytes, int root)
{
    (void)ctx, (void)buf, (void)bytes, (void)root;
    return 0;
}

/* The collective of one process: rank 0 of 1. */
#define SOLO_COLL {NULL, 0, 1, solo_allgather, solo_bcast}

/* Recompute j's manifest_xxh64: XXH64 of the compact, key-sorted dump of
 * the document without it. */
static inline void manifest_reseal(json_t *j)
{
    char *text, hex[17];
    json_object_del(j, "manifest_xxh64");
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        return;
    snprintf(hex, sizeof hex, "%016llx",
             (unsigned long long)XXH64(text, strlen(text), 0));
    free(text);
    json_object_set_new(j, "manifest_xxh64", json_string(hex));
}

/* Read the whole file at path into a new buffer (*len bytes; free it).
 * @return 0, or -1 (*buf NULL). */
static inline int read_file(const char *path, unsigned char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    long size;
    *buf = NULL;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || !(*buf = malloc((size_t)size + 1)) ||
        fread(*buf, 1, (size_t)size, f) != (size_t)size) {
        if (f)
            fclose(f);
        free(*buf);
        *buf = NULL;
        return -1;
    }
    fclose(f);
    *len = (size_t)size;
    return 0;
}

/* Does the file at path hold exactly these len bytes? */
static inline int same_bytes(const char *path, const unsigned char *bytes, size_t len)
{
    unsigned char *got;
    size_t got_len;
    if (read_file(path, &got, &got_len) != 0)
        return 0;
    int same = got_len == len && memcmp(got, bytes, len) == 0;
    free(got);
    return same;
}

#endif
