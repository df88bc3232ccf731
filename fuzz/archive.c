/*
 * archive.c - libFuzzer target: the archive importer (ckpt_import,
 * ckpt/archive_import.c) on an untrusted archive (.tar, or compressed by any
 * filter libarchive reads, .tar.zst among them).
 *
 * Each input is the bytes of an archive file.  The target writes it to
 * <scratch>/in.tar, imports it into the fresh empty root <scratch>/root and
 * checks:
 *
 *   1. nothing crashes, leaks or reaches undefined behaviour (ASan, LSan,
 *      UBSan in `make fuzz`);
 *   2. a failed import has a documented code (EARCHIVE, EFORMAT, EVERSION,
 *      ECORRUPT, EINCOMPLETE, EIO, ENOMEM) and a message that is clean text,
 *      and leaves the root empty (no step directory, no temp directory);
 *   3. a successful import leaves exactly one entry in the root, the
 *      step-<N> directory it reports, holding only manifest.json and the
 *      shard-<i>.ftsh files its manifest names, all regular files, and the
 *      checkpoint opens, verifies and reads whole; importing the same
 *      archive again fails with EEXIST and leaves the root as it was;
 *   4. either way nothing appears outside the root: the scratch directory
 *      holds only the archive and the root.
 *
 * One scratch directory per process (fuzz_util.h), emptied after every
 * input.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "ftrain/ckpt.h"

/* The most raw bytes read back from an imported checkpoint. */
#define READ_MAX ((uint64_t)64 << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char scratch[1024], archive_path[1100], root[1100];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = fuzz_tmpdir("archive");
    (void)argc, (void)argv;
    FUZZ_CHECK(strlen(tmp) < sizeof scratch, "TMPDIR too long: %s", tmp);
    snprintf(scratch, sizeof scratch, "%s", tmp);
    snprintf(archive_path, sizeof archive_path, "%s/in.tar", scratch);
    snprintf(root, sizeof root, "%s/root", scratch);
    return 0;
}

/* Property 4: the scratch directory holds the archive and the root only. */
static void check_scratch(void)
{
    DIR *d = opendir(scratch);
    struct dirent *e;
    FUZZ_CHECK(d != NULL, "cannot read the scratch directory");
    while ((e = readdir(d)) != NULL)
        FUZZ_CHECK(!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                   !strcmp(e->d_name, "in.tar") || !strcmp(e->d_name, "root"),
                   "the import wrote '%s' beside its root", e->d_name);
    closedir(d);
}

/* Property 3. */
static void check_imported(const char *out)
{
    char first[256], step_dir[1400], path[1700];
    ckpt_t *ck = NULL;
    struct stat st;
    DIR *d;
    struct dirent *e;
    int rc, files = 0;

    FUZZ_CHECK(fuzz_count_entries(root, first, sizeof first) == 1,
               "the root holds %d entries after an import",
               fuzz_count_entries(root, NULL, 0));
    snprintf(step_dir, sizeof step_dir, "%s/%s", root, first);
    FUZZ_CHECK(strcmp(out, step_dir) == 0, "import reported '%s', the root "
               "holds '%s'", out, first);
    FUZZ_CHECK(lstat(step_dir, &st) == 0 && S_ISDIR(st.st_mode),
               "'%s' is not a directory", first);

    rc = ckpt_open(out, &ck);
    FUZZ_CHECK(rc == CKPT_OK, "an imported checkpoint does not open: %s",
               ckpt_last_error());
    {
        char want[CKPT_FILE_NAME_MAX];
        ckpt_step_dirname(ckpt_step(ck), want, sizeof want);
        FUZZ_CHECK(strcmp(first, want) == 0, "'%s' holds step %llu", first,
                   (unsigned long long)ckpt_step(ck));
    }
    d = opendir(step_dir);
    FUZZ_CHECK(d != NULL, "cannot read '%s'", step_dir);
    while ((e = readdir(d)) != NULL) {
        char name[CKPT_FILE_NAME_MAX];
        int known = !strcmp(e->d_name, CKPT_MANIFEST_NAME);
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        for (int i = 0; !known && i < ckpt_world_size(ck); i++) {
            ckpt_shard_name(i, name, sizeof name);
            known = !strcmp(e->d_name, name);
        }
        FUZZ_CHECK(known, "an imported checkpoint holds '%s'", e->d_name);
        snprintf(path, sizeof path, "%s/%s", step_dir, e->d_name);
        FUZZ_CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode),
                   "'%s' is not a regular file", e->d_name);
        files++;
    }
    closedir(d);
    FUZZ_CHECK(files == 1 + ckpt_world_size(ck), "%d files for %d shards",
               files, ckpt_world_size(ck));

    rc = ckpt_verify(ck);
    FUZZ_CHECK(rc == CKPT_OK, "an imported checkpoint does not verify: %s",
               ckpt_last_error());
    if (ckpt_total_bytes(ck) <= READ_MAX) {
        unsigned char *buf = malloc(ckpt_total_bytes(ck) + 1);
        FUZZ_CHECK(buf != NULL, "out of memory");
        rc = ckpt_read_range(ck, 0, ckpt_total_bytes(ck), buf);
        FUZZ_CHECK(rc == CKPT_OK, "an imported checkpoint does not read: %s",
                   ckpt_last_error());
        free(buf);
    }
    ckpt_close(ck);

    /* Never over an existing checkpoint. */
    rc = ckpt_import(archive_path, root, path, sizeof path);
    FUZZ_CHECK(rc == CKPT_EEXIST, "a second import of the same archive: code "
               "%d (%s)", rc, rc == CKPT_OK ? "imported" : ckpt_last_error());
    FUZZ_CHECK(fuzz_count_entries(root, NULL, 0) == 1 &&
               lstat(step_dir, &st) == 0 && S_ISDIR(st.st_mode),
               "a refused second import changed the root");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[1400], first[256];
    int rc;

    if (!scratch[0])
        LLVMFuzzerInitialize(NULL, NULL);
    fuzz_write_file(archive_path, data, size);
    FUZZ_CHECK(mkdir(root, 0755) == 0, "cannot make the root (left over?)");
    out[0] = '\0';
    rc = ckpt_import(archive_path, root, out, sizeof out);
    if (rc == CKPT_OK) {
        check_imported(out);
    } else {
        const char *msg = ckpt_last_error();
        FUZZ_CHECK(rc == CKPT_EARCHIVE || rc == CKPT_EFORMAT ||
                   rc == CKPT_EVERSION || rc == CKPT_ECORRUPT ||
                   rc == CKPT_EINCOMPLETE || rc == CKPT_EIO || rc == CKPT_ENOMEM,
                   "undocumented code %d (%s)", rc, msg);
        FUZZ_CHECK(msg[0] != '\0', "code %d without a message", rc);
        FUZZ_CHECK(fuzz_text_is_clean(msg), "message is not clean text: %s", msg);
        FUZZ_CHECK(fuzz_count_entries(root, first, sizeof first) == 0,
                   "a failed import (%s) left '%s' in the root", msg, first);
    }
    check_scratch();
    FUZZ_CHECK(fuzz_rmtree(root) == 0, "cannot empty the root");
    unlink(archive_path);
    return 0;
}
