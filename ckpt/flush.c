/*
 * flush.c - the flush of the node-local tier (include/ftrain/ckpt_local.h,
 * docs/checkpoint-format.md "The node-local tier"): one step copied from
 * the step directories of several node-local roots into the shared tier,
 * as a complete checkpoint that any reader opens.  The node store the
 * copies come from is local.c's; the two share local.h.
 *
 * INVARIANTS (beside I1-I10 of commit.c, read.c and root.c, which hold for
 * the destination, and L1-L3 of local.c, which hold for the sources)
 *   L4. A flush writes nothing in the destination before every shard is
 *       known to be held by some root; it copies into a temp dir of its
 *       own, hashing each copy against the manifest (a bad copy is dropped
 *       for the next root's), verifies the whole, and commits with a rename
 *       that never replaces an existing step-<N> (I3).
 *
 * STATE DIAGRAM (node roots -> shared root, step N)
 *
 *   check every shard held --> mkdtemp .flush-step-N-XXXXXX --> copy+hash
 *   each shard, fsync --> manifest --> ckpt_open+ckpt_verify --> rename
 *   to step-N (NOREPLACE; the commit point) --> fsync root --> LATEST
 *   Any failure before the rename removes the staging dir: nothing is left.
 */
#include "ftrain/ckpt_local.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "commit.h"
#include "local.h"
#include "manifest.h"
#include "util.h"

/* A flush's staging directory under the destination root. */
#define FLUSH_TMP_PREFIX ".flush-"
#define FLUSH_TMP_TEMPLATE "-XXXXXX"
/* How many shards a flush's incompleteness message names. */
#define NAMED_SHARDS_MAX 8

/* One flush: the node roots' step directories and the destination. */
typedef struct {
    const char *const *roots;
    size_t nroots;
    uint64_t step;
    const char *root;             /* the destination (shared) root */
    char name[CKPT_FILE_NAME_MAX];
    ckpt_local_dir_t *dirs;       /* per node root; dirfd < 0: holds nothing */
    const ckpt_local_dir_t *ref;  /* the first root holding the step */
    unsigned char *buf;           /* CKPT_COPY_CHUNK bytes */
    char tmp[CKPT_PATH_MAX];      /* the staging dir, once made */
    int have_tmp;
} flush_t;

static int check_flush(const char *const *roots, size_t nroots, uint64_t step,
                       const char *root, const char *out, size_t cap)
{
    if (!roots || nroots == 0 || !root || !*root || (out && cap == 0))
        return ckpt_seterr(CKPT_EINVAL, "local_flush: no local roots, no "
                           "destination, or no room for the path");
    for (size_t r = 0; r < nroots; r++)
        if (!roots[r] || !*roots[r])
            return ckpt_seterr(CKPT_EINVAL, "local_flush: local root %zu is empty", r);
    if (step > INT64_MAX)
        return ckpt_seterr(CKPT_EINVAL, "step %llu is too large",
                           (unsigned long long)step);
    /* Room for "<root>/.flush-step-<N>-XXXXXX/<shard name>". */
    if (strlen(root) + 3 * CKPT_FILE_NAME_MAX >= CKPT_PATH_MAX)
        return ckpt_seterr(CKPT_EINVAL, "%.*s: path too long", CKPT_MSG_PATH_MAX,
                           root);
    return CKPT_OK;
}

/* Do two manifests describe the same checkpoint?  All but `created` and
 * the informational options must agree (each node sealed its own copy). */
static int same_checkpoint(const ckpt_manifest_t *one, const ckpt_manifest_t *other,
                           int *same)
{
    ckpt_manifest_t probe = *other;
    char *one_text = NULL, *other_text = NULL;
    int rc;
    probe.created = one->created;
    probe.opts = one->opts;
    probe.checksummed = one->checksummed;
    rc = ckpt_manifest_dump(one, &one_text);
    if (rc == CKPT_OK)
        rc = ckpt_manifest_dump(&probe, &other_text);
    *same = rc == CKPT_OK && strcmp(one_text, other_text) == 0;
    free(one_text);
    free(other_text);
    return rc;
}

/* Open every node root's step directory; a root without the step (or
 * without a valid manifest for it) holds nothing.  The manifests of those
 * that hold it must agree (L3). */
static int open_sources(flush_t *fl)
{
    char path[CKPT_PATH_MAX], why[CKPT_ERRMSG_MAX] = "";
    int rc, same;
    for (size_t r = 0; r < fl->nroots; r++) {
        ckpt_local_dir_t *dir = &fl->dirs[r];
        if ((rc = ckpt_path_join(path, sizeof path, fl->roots[r], fl->name)))
            return rc;
        rc = ckpt_local_dir_open(dir, path);
        if (rc == CKPT_ENOMEM || rc == CKPT_EINVAL)
            return rc;
        if (rc != CKPT_OK) {
            if (rc != CKPT_ENOTFOUND)
                snprintf(why, sizeof why, " (%s)", ckpt_last_error());
            ckpt_local_dir_close(dir);
            continue;
        }
        if (!fl->ref) {
            fl->ref = dir;
            continue;
        }
        if ((rc = same_checkpoint(&fl->ref->manifest, &dir->manifest, &same)))
            return rc;
        if (!same)
            return ckpt_seterr(CKPT_ECORRUPT, "%s and %s are not the same "
                               "checkpoint of step %llu (their manifests differ)",
                               fl->ref->path, dir->path,
                               (unsigned long long)fl->step);
        if (dir->manifest.created < fl->ref->manifest.created)
            fl->ref = dir; /* the earliest creation time is kept */
    }
    if (!fl->ref)
        return ckpt_seterr(CKPT_EINCOMPLETE, "none of the %zu local roots holds a "
                           "sealed %s%s", fl->nroots, fl->name, why);
    return CKPT_OK;
}

/* L4: before anything is written, every shard must be held by some root. */
static int check_held(const flush_t *fl)
{
    const ckpt_manifest_t *manifest = &fl->ref->manifest;
    char named[CKPT_ERRMSG_MAX / 2] = "";
    size_t len = 0;
    int nmissing = 0;
    for (int i = 0; i < manifest->nshards; i++) {
        int held = 0;
        for (size_t r = 0; r < fl->nroots && !held; r++)
            held = fl->dirs[r].dirfd >= 0 &&
                   ckpt_local_shard_held(fl->dirs[r].dirfd, i, &manifest->shards[i]);
        if (held)
            continue;
        if (nmissing++ < NAMED_SHARDS_MAX && len < sizeof named)
            len += (size_t)snprintf(named + len, sizeof named - len, "%s" CKPT_SHARD_PREFIX
                                    "%d" CKPT_SHARD_SUFFIX, len ? ", " : "", i);
    }
    if (nmissing == 0)
        return CKPT_OK;
    return ckpt_seterr(CKPT_EINCOMPLETE, "%s is incomplete across the %zu local "
                       "roots: %d of its %d shards held by none (a regular file of "
                       "the manifest's size): %s%s", fl->name, fl->nroots, nmissing,
                       manifest->nshards, named,
                       nmissing > NAMED_SHARDS_MAX ? ", ..." : "");
}

/* Copy shard index from the step directory src into the staging dir,
 * hashing the bytes read.  *bad_source says a failure was the source's
 * (unreadable, changed, checksum): the copy is removed and the next root
 * may be tried; any other failure is the destination's. */
static int copy_shard(flush_t *fl, const ckpt_local_dir_t *src, int index,
                      int *bad_source)
{
    const ckpt_shard_info_t *info = &fl->ref->manifest.shards[index];
    char name[CKPT_FILE_NAME_MAX], from[CKPT_PATH_MAX], to[CKPT_PATH_MAX];
    XXH64_state_t hash;
    struct stat st;
    int in, out = -1, rc;

    *bad_source = 1;
    ckpt_shard_name(index, name, sizeof name);
    if ((rc = ckpt_path_join(from, sizeof from, src->path, name)) != CKPT_OK ||
        (rc = ckpt_path_join(to, sizeof to, fl->tmp, name)) != CKPT_OK)
        return rc;
    in = openat(src->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (in < 0)
        return ckpt_seterr(CKPT_EIO, "%s: cannot open: %s", from, strerror(errno));
    if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != info->file_bytes) {
        close(in);
        return ckpt_seterr(CKPT_ECORRUPT, "%s: not a regular file of %llu bytes",
                           from, (unsigned long long)info->file_bytes);
    }
    *bad_source = 0;
    rc = ckpt_create_fresh(to, 0, &out);
    XXH64_reset(&hash, 0);
    for (uint64_t done = 0; rc == CKPT_OK && done < info->file_bytes;) {
        size_t piece = info->file_bytes - done < CKPT_COPY_CHUNK
                           ? (size_t)(info->file_bytes - done) : CKPT_COPY_CHUNK;
        if (ckpt_pread_all(in, fl->buf, piece, done, from) != CKPT_OK) {
            *bad_source = 1; /* unreadable, or it shrank since its size was read */
            rc = CKPT_EIO;
            break;
        }
        XXH64_update(&hash, fl->buf, piece);
        rc = ckpt_write_all(out, fl->buf, piece, to);
        done += piece;
    }
    if (rc == CKPT_OK && XXH64_digest(&hash) != info->xxh64) {
        *bad_source = 1;
        rc = ckpt_seterr(CKPT_ECORRUPT, "%s: file checksum mismatch", from);
    }
    if (rc == CKPT_OK)
        rc = ckpt_fsync_fd(out, to);
    if (out >= 0 && close(out) != 0 && rc == CKPT_OK)
        rc = ckpt_seterr(CKPT_EIO, "%s: close: %s", to, strerror(errno));
    close(in);
    if (rc != CKPT_OK && out >= 0)
        unlink(to);
    return rc;
}

/* Copy every shard from the first root that holds a good copy of it. */
static int copy_all(flush_t *fl)
{
    const ckpt_manifest_t *manifest = &fl->ref->manifest;
    char why[CKPT_ERRMSG_MAX];
    for (int i = 0; i < manifest->nshards; i++) {
        int rc = CKPT_ECORRUPT, bad_source = 1, tried = 0;
        why[0] = '\0';
        for (size_t r = 0; r < fl->nroots && rc != CKPT_OK; r++) {
            const ckpt_local_dir_t *src = &fl->dirs[r];
            if (src->dirfd < 0 ||
                !ckpt_local_shard_held(src->dirfd, i, &manifest->shards[i]))
                continue;
            tried++;
            rc = copy_shard(fl, src, i, &bad_source);
            if (rc != CKPT_OK && !bad_source)
                return rc; /* the destination failed */
            if (rc != CKPT_OK)
                snprintf(why, sizeof why, "%s", ckpt_last_error());
        }
        if (rc != CKPT_OK)
            return ckpt_seterr(CKPT_ECORRUPT, "%s: no good copy of " CKPT_SHARD_PREFIX
                               "%d" CKPT_SHARD_SUFFIX " in the %d local root%s that "
                               "hold one; the last: %s", fl->name, i, tried,
                               tried == 1 ? "" : "s",
                               why[0] ? why : "not held");
    }
    return CKPT_OK;
}

/* Make the staging dir <root>/.flush-step-<N>-XXXXXX (mode 0755, as a step
 * directory). */
static int make_staging(flush_t *fl)
{
    int rc = ckpt_make_root(fl->root, 1);
    if (rc != CKPT_OK)
        return rc;
    snprintf(fl->tmp, sizeof fl->tmp, "%s/" FLUSH_TMP_PREFIX "%s" FLUSH_TMP_TEMPLATE,
             fl->root, fl->name);
    if (!mkdtemp(fl->tmp))
        return ckpt_seterr(CKPT_EIO, "%s: cannot create a temp dir: %s", fl->root,
                           strerror(errno));
    fl->have_tmp = 1;
    if (chmod(fl->tmp, 0755) != 0)
        return ckpt_seterr(CKPT_EIO, "%s: chmod: %s", fl->tmp, strerror(errno));
    return CKPT_OK;
}

/* Verify the staged copy whole, then the commit point: rename it to
 * <root>/step-<N>, never over one (I3), fsync the root, point LATEST. */
static int verify_and_commit(flush_t *fl, char *out, size_t cap)
{
    char final[CKPT_PATH_MAX];
    ckpt_t *ckpt = NULL;
    int rc = ckpt_fsync_dir(fl->tmp);
    if (rc == CKPT_OK)
        rc = ckpt_open(fl->tmp, &ckpt);
    if (rc == CKPT_OK)
        rc = ckpt_verify(ckpt);
    ckpt_close(ckpt);
    if (rc != CKPT_OK)
        return ckpt_seterr(rc, "%s: the assembled copy does not verify: %s", fl->name,
                           ckpt_last_error());
    if ((rc = ckpt_path_join(final, sizeof final, fl->root, fl->name)) != CKPT_OK)
        return rc;
    if ((rc = ckpt_rename_noreplace_at(AT_FDCWD, fl->tmp, AT_FDCWD, final)) != CKPT_OK)
        return rc;
    fl->have_tmp = 0;
    if (out) /* fits: ckpt_local_flush checked cap */
        snprintf(out, cap, "%s", final);
    rc = ckpt_fsync_dir(fl->root);
    if (rc != CKPT_OK)
        return ckpt_seterr(rc, "%s committed, but the fsync of %s failed: %s", final,
                           fl->root, ckpt_last_error());
    ckpt_update_latest(fl->root, fl->name, fl->step, 1);
    return CKPT_OK;
}

int ckpt_local_flush(const char *const *local_roots, size_t nroots, uint64_t step,
                     const char *root, char *out, size_t cap)
{
    flush_t fl;
    char final[CKPT_PATH_MAX];
    int rc;

    if (out && cap)
        out[0] = '\0';
    if ((rc = check_flush(local_roots, nroots, step, root, out, cap)) != CKPT_OK)
        return rc;
    memset(&fl, 0, sizeof fl);
    fl.roots = local_roots;
    fl.nroots = nroots;
    fl.step = step;
    fl.root = root;
    ckpt_step_dirname(step, fl.name, sizeof fl.name);
    if ((rc = ckpt_path_join(final, sizeof final, root, fl.name)) != CKPT_OK)
        return rc;
    /* A path cut to fit would name another directory: refused before
     * anything is written, as ckpt_latest_good and ckpt_import do. */
    if (out && strlen(final) >= cap)
        return ckpt_seterr(CKPT_EINVAL, "local_flush: output buffer of %zu bytes too "
                           "small for %s", cap, final);
    if (ckpt_step_exists(root, step)) /* I3, before anything is read */
        return ckpt_seterr(CKPT_EEXIST, "%s already exists", final);
    fl.dirs = calloc(nroots, sizeof *fl.dirs);
    fl.buf = malloc(CKPT_COPY_CHUNK);
    if (!fl.dirs || !fl.buf) {
        rc = ckpt_seterr(CKPT_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t r = 0; r < nroots; r++)
        fl.dirs[r].dirfd = -1;
    if ((rc = open_sources(&fl)) == CKPT_OK && (rc = check_held(&fl)) == CKPT_OK &&
        (rc = make_staging(&fl)) == CKPT_OK && (rc = copy_all(&fl)) == CKPT_OK &&
        (rc = ckpt_manifest_store(fl.tmp, &fl.ref->manifest, 1)) == CKPT_OK)
        rc = verify_and_commit(&fl, out, cap);
out:
    if (fl.have_tmp) { /* not committed: nothing is left */
        char msg[CKPT_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", ckpt_last_error());
        (void)ckpt_remove_tree(AT_FDCWD, fl.tmp, fl.tmp);
        (void)ckpt_seterr(rc, "%s", msg);
    }
    for (size_t r = 0; fl.dirs && r < nroots; r++)
        ckpt_local_dir_close(&fl.dirs[r]);
    free(fl.dirs);
    free(fl.buf);
    return rc;
}
