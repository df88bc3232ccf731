/*
 * local_tier.c - the node-local checkpoint tier (local_tier.h): partner
 * placement, opening and closing the tier, its error names, and the choice
 * of what to restore.  The local save itself, in the background, is
 * local_save.c's (local_save.h).
 */
#include "tier/local_tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ftrain/ckpt_local.h"
#include "util/util.h"
#include "tier/local_save_internal.h"
#include "tier/local_inplace_internal.h"

/* ---- errors --------------------------------------------------------------------- */

const char *tier_strerror(int err)
{
    switch (err) {
    case TIER_OK: return "no error";
    case TIER_EFAIL: return "local tier failure";
    case TIER_ENOMEM: return "out of memory";
    case TIER_EPEER: return "another rank failed";
    case TIER_EPATH: return "unusable --ckpt-local directory";
    case TIER_EINVAL: return "called out of turn";
    }
    return "unknown local tier error";
}

/* ---- placement ---------------------------------------------------------------- */

void tier_place(const int *node_of, int size, int nnodes, int *partner)
{
    for (int r = 0; r < size; r++) {
        partner[r] = -1;
        if (nnodes < 2)
            continue;
        int k = node_of[r], next = (k + 1) % nnodes, j = 0, n = 0;
        for (int q = 0; q < r; q++)
            j += node_of[q] == k;
        for (int q = 0; q < size; q++)
            n += node_of[q] == next;
        if (n == 0)
            continue; /* cannot happen with nodes numbered from their ranks */
        int want = j % n;
        for (int q = 0; q < size; q++)
            if (node_of[q] == next && want-- == 0) {
                partner[r] = q;
                break;
            }
    }
}

int tier_expand(const char *pattern, const char *host, char *out, size_t cap)
{
    size_t len = 0;
    for (const char *p = pattern; *p; p++) {
        const char *piece = p;
        size_t n = 1;
        if (*p == '%') {
            if (p[1] == 'n') {
                piece = host;
                n = strlen(host);
            } else if (p[1] != '%') {
                return TIER_EFAIL;
            }
            p++;
        }
        if (len + n >= cap)
            return TIER_EFAIL;
        memcpy(out + len, piece, n);
        len += n;
    }
    out[len] = '\0';
    return TIER_OK;
}

/* ---- opening ------------------------------------------------------------------- */

/* Room for a real path and the names appended to it. */
#define REAL_PATH_MAX (PATH_MAX + CONFIG_PATH_MAX)

/* path as an absolute path with its links resolved, though its last
 * components need not exist yet: realpath(3) of the longest part that
 * exists, then the rest as written ("." dropped, ".." the parent: a name
 * that does not exist is no link).  @return TIER_OK, or TIER_EFAIL with
 * errno set. */
static int real_path_of(const char *path, char *out, size_t cap)
{
    char head[REAL_PATH_MAX], real[PATH_MAX];
    size_t end = strlen(path); /* path[0..end) is tried; path + end is missing */
    if (end >= sizeof head) {
        errno = ENAMETOOLONG;
        return TIER_EFAIL;
    }
    for (;;) {
        memcpy(head, path, end);
        head[end] = '\0';
        if (realpath(end ? head : ".", real))
            break;
        if (errno != ENOENT || end == 0)
            return TIER_EFAIL;
        while (end > 0 && path[end - 1] == '/')
            end--;
        while (end > 0 && path[end - 1] != '/')
            end--;
    }
    if (snprintf(out, cap, "%s", real) >= (int)cap) {
        errno = ENAMETOOLONG;
        return TIER_EFAIL;
    }
    for (const char *p = path + end; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/"), len = strlen(out);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            char *up = strrchr(out, '/');
            up[up == out] = '\0'; /* "/a/b" -> "/a", "/a" -> "/" */
        } else if (n && !(n == 1 && p[0] == '.')) {
            int slash = out[len - 1] != '/';
            if (len + slash + n >= cap) {
                errno = ENAMETOOLONG;
                return TIER_EFAIL;
            }
            snprintf(out + len, cap - len, "%s%.*s", slash ? "/" : "", (int)n, p);
        }
        p += n;
    }
    return TIER_OK;
}

/* The node's directory must be neither the shared checkpoint root, nor
 * inside it, nor hold it: each tier prunes and drops step-<N> directories,
 * and would delete the other's, committed shared checkpoints among them.
 * config_check() refuses what the option text shows; only here are %n,
 * links and ".." resolved.  Checked before the directory is made, so a
 * refusal leaves nothing behind.  @return TIER_OK, or TIER_EPATH (err
 * set). */
static int check_apart(const tier_t *t, const config_t *cfg, const char *host, char *err,
                       size_t cap)
{
    char shared[CONFIG_PATH_MAX + sizeof "/ckpt"];
    char real_local[REAL_PATH_MAX], real_shared[REAL_PATH_MAX];
    snprintf(shared, sizeof shared, "%s/ckpt", cfg->run_dir);
    if (real_path_of(t->root, real_local, sizeof real_local) != TIER_OK)
        return util_fail(err, cap, TIER_EPATH, "--ckpt-local: cannot resolve '%s' on %s: %s",
                         t->root, host, strerror(errno));
    if (real_path_of(shared, real_shared, sizeof real_shared) != TIER_OK)
        return util_fail(err, cap, TIER_EPATH, "--ckpt-local: cannot resolve the shared checkpoint "
                         "root '%s' on %s: %s", shared, host, strerror(errno));
    int inside = config_path_within(real_local, real_shared);
    int contains = config_path_within(real_shared, real_local);
    if (!inside && !contains)
        return TIER_OK;
    return util_fail(err, cap, TIER_EPATH,
                     "--ckpt-local: the node-local directory '%s' (%s on %s) %s the shared "
                     "checkpoint root '%s' (%s): each tier would delete the other's "
                     "checkpoints; give a node-local directory outside it",
                     t->root, real_local, host,
                     inside && contains ? "is" : inside ? "lies inside" : "contains", shared,
                     real_shared);
}

void tier_close(tier_t *t)
{
    tier_async_close(t);
    free(t->node_of);
    free(t->hosts);
    free(t->srcs);
    t->node_of = NULL;
    t->hosts = NULL;
    t->srcs = NULL;
}

/* Number the nodes by first appearance of their names in all (size names). */
static int number_nodes(tier_t *t, const char (*all)[TIER_HOST_MAX])
{
    t->nnodes = 0;
    for (int r = 0; r < t->size; r++) {
        int k = 0;
        while (k < t->nnodes && strcmp(t->hosts[k], all[r]) != 0)
            k++;
        if (k == t->nnodes)
            memcpy(t->hosts[t->nnodes++], all[r], TIER_HOST_MAX);
        t->node_of[r] = k;
    }
    return t->nnodes;
}

/* 1 when path is a directory (a link to one counts). */
static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The marker a node's leader leaves in its directory: ".node-<host>",
 * holding this launch's id. */
#define NODE_MARK_PREFIX ".node-"

/* Collective: every node has a directory of its own.  Two nodes given one
 * (a --ckpt-local on a file system they share, without %n) would seal,
 * prune and rename in each other's steps: every save fails, with errors
 * that name none of this.  Each leader leaves a marker with this launch's
 * id in its directory; a leader that then finds another node's marker of
 * the same launch shares it.  (Markers of earlier launches carry other
 * ids.)  @return TIER_OK, or on every rank a TIER_E... code (err set):
 * TIER_EPATH when this node shares its directory, TIER_EPEER when other
 * nodes do. */
static int check_own_dir(tier_t *t, comm_t *comm, const char *host, char *err, size_t cap)
{
    uint64_t id = 0;
    if (t->rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 42);
    }
    if (comm_bcast(comm, &id, sizeof id, 0) != COMM_OK)
        return util_fail(err, cap, TIER_EFAIL, "local tier: %s", comm_last_error());
    char path[sizeof t->root + 256 + 16], text[32]; /* 256: any d_name */
    snprintf(text, sizeof text, "%016llx\n", (unsigned long long)id);
    int rc = TIER_OK;
    if (t->leader) {
        snprintf(path, sizeof path, "%s/" NODE_MARK_PREFIX "%s", t->root, host);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
            rc = util_fail(err, cap, TIER_EFAIL, "--ckpt-local: cannot write '%s': %s", path,
                           strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    if (comm_any_failed(comm, rc != TIER_OK)) /* every marker is written: now look */
        return rc != TIER_OK ? rc : util_fail(err, cap, TIER_EPEER, "local tier: another node "
                                              "could not mark its directory");
    DIR *dir = t->leader ? opendir(t->root) : NULL;
    for (struct dirent *e; dir && rc == TIER_OK && (e = readdir(dir)) != NULL;) {
        const char *other = e->d_name + strlen(NODE_MARK_PREFIX);
        if (strncmp(e->d_name, NODE_MARK_PREFIX, strlen(NODE_MARK_PREFIX)) != 0 ||
            strcmp(other, host) == 0)
            continue;
        char theirs[32] = "";
        snprintf(path, sizeof path, "%s/%s", t->root, e->d_name);
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, theirs, sizeof theirs - 1) : -1;
        if (fd >= 0)
            close(fd);
        theirs[n > 0 ? n : 0] = '\0';
        if (strcmp(theirs, text) == 0)
            rc = util_fail(err, cap, TIER_EPATH, "--ckpt-local: nodes %s and %s were given the "
                           "same directory '%s' (a file system both see): each node needs its own, "
                           "so put %%n, the node's name, in the path (for example '%s/%%n')",
                           host, other, t->root, t->root);
        else if (t->leader)
            unlink(path); /* a marker of an earlier launch */
    }
    if (dir)
        closedir(dir);
    if (comm_any_failed(comm, rc != TIER_OK))
        return rc != TIER_OK ? rc : util_fail(err, cap, TIER_EPEER, "local tier: two other "
                                              "nodes share one --ckpt-local directory (their "
                                              "ranks' messages say which)");
    return TIER_OK;
}

/* The leader's part of tier_remove_at_end: TIER_OK, or TIER_EFAIL with
 * err naming what is kept. */
static int remove_node_dir(const char *root, const char *pattern, char *err, size_t cap)
{
    if (ckpt_local_drop_after(root, 0, NULL) != CKPT_OK)
        return util_fail(err, cap, TIER_EFAIL, "cannot remove the local checkpoints in '%s': %s",
                         root, ckpt_last_error());
    if (tier_files_clear(root) != 0)
        return util_fail(err, cap, TIER_EFAIL, "cannot remove '%s/" TIER_SPARE_DIR "': %s", root,
                         strerror(errno));
    DIR *dir = opendir(root);
    if (!dir)
        return errno == ENOENT ? TIER_OK : util_fail(err, cap, TIER_EFAIL, "cannot read '%s': "
                                                     "%s", root, strerror(errno));
    char kept[256] = "";
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        /* The steps (none is 0: a local save follows a trained step) are
         * gone; the lock file and the node markers are ftrain's too. */
        int ours = !strcmp(n, ".locks") || !strncmp(n, NODE_MARK_PREFIX, strlen(NODE_MARK_PREFIX));
        if (ours && unlinkat(dirfd(dir), n, 0) == 0)
            continue;
        if (!kept[0])
            snprintf(kept, sizeof kept, "%s", n);
    }
    closedir(dir);
    if (kept[0])
        return util_fail(err, cap, TIER_EFAIL, "kept '%s': it holds '%s', which ftrain did not "
                         "make or will not delete (a checkpoint set aside as corrupt is evidence)",
                         root, kept);
    if (rmdir(root) != 0 && errno != ENOENT)
        return util_fail(err, cap, TIER_EFAIL, "cannot remove '%s': %s", root, strerror(errno));
    /* The batch script's ftrain-job-<id>/%n: the per-job directory goes when
     * its last node's directory has. */
    const char *last = strrchr(pattern, '/');
    if (last && strstr(last, "%n")) {
        char parent[CONFIG_PATH_MAX];
        snprintf(parent, sizeof parent, "%s", root);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = '\0';
            (void)rmdir(parent); /* not empty: another node's is there (one file system) */
        }
    }
    return TIER_OK;
}

int tier_remove_at_end(const char *root, int leader, const char *pattern, comm_t *comm,
                       char *err, size_t cap)
{
    /* Every rank has closed its tier: no helper writes into the files. */
    if (comm_barrier(comm) != COMM_OK)
        return util_fail(err, cap, TIER_EFAIL, "local tier: %s", comm_last_error());
    int rc = leader ? remove_node_dir(root, pattern, err, cap) : TIER_OK;
    if (comm_any_failed(comm, rc != TIER_OK))
        return rc != TIER_OK ? rc : util_fail(err, cap, TIER_EPEER, "another node kept its "
                                              "local tier (its message says why)");
    return TIER_OK;
}

/* This node's root: expanded, checked apart from the shared tier, made,
 * and cleared of an earlier run's spare files.  Not collective.
 * @return TIER_OK, or a TIER_E... code (err set). */
static int make_root(tier_t *t, const config_t *cfg, const char *host, char *err, size_t cap)
{
    if (tier_expand(cfg->ckpt_local, host, t->root, sizeof t->root) != TIER_OK)
        return util_fail(err, cap, TIER_EPATH, "--ckpt-local '%s': too long, or a '%%' other "
                         "than %%n or %%%%", cfg->ckpt_local);
    int rc = check_apart(t, cfg, host, err, cap);
    if (rc != TIER_OK)
        return rc;
    if (util_mkdir_p(t->root) != 0)
        return util_fail(err, cap, TIER_EFAIL, "--ckpt-local: cannot create '%s' on %s: %s",
                         t->root, host, strerror(errno));
    if (!is_dir(t->root)) /* mkdir -p takes any existing name */
        return util_fail(err, cap, TIER_EPATH, "--ckpt-local: '%s' on %s is not a directory",
                         t->root, host);
    /* Spare files of an earlier run (other ranks, other sizes) go, before
     * the collective after this lets any rank of this node make its own. */
    if (t->leader && tier_files_clear(t->root) != TIER_OK)
        return util_fail(err, cap, TIER_EFAIL, "--ckpt-local: cannot clear '%s/" TIER_SPARE_DIR
                         "' on %s: %s", t->root, host, strerror(errno));
    return TIER_OK;
}

int tier_open(tier_t *t, const config_t *cfg, comm_t *comm, const char *host, int spare_core,
              char *err, size_t cap)
{
    memset(t, 0, sizeof *t);
    t->rank = comm_rank(comm);
    t->size = comm_size(comm);
    t->keep = cfg->ckpt_local_keep;
    t->level = cfg->ckpt_local_level;
    t->copy_delay_ms = cfg->ckpt_local_copy_delay_ms;
    t->exchange = cfg->ckpt_local_exchange;
    t->spare_core = spare_core != 0;
    t->exchange_thread = cfg->ckpt_local_exchange == CONFIG_EXCHANGE_THREAD ||
                         (cfg->ckpt_local_exchange == CONFIG_EXCHANGE_AUTO && spare_core);
    char mine[TIER_HOST_MAX] = "";
    snprintf(mine, sizeof mine, "%s", host);
    char (*all)[TIER_HOST_MAX] = calloc((size_t)t->size, sizeof *all);
    int *partner = calloc((size_t)t->size, sizeof *partner);
    t->node_of = calloc((size_t)t->size, sizeof *t->node_of);
    t->hosts = calloc((size_t)t->size, sizeof *t->hosts);
    t->srcs = calloc((size_t)t->size, sizeof *t->srcs);
    int rc = !all || !partner || !t->node_of || !t->hosts || !t->srcs ? TIER_ENOMEM : TIER_OK;
    if (comm_any_failed(comm, rc != TIER_OK) ||
        comm_allgather(comm, mine, all, sizeof mine) != COMM_OK) {
        rc = util_fail(err, cap, rc != TIER_OK ? rc : TIER_EFAIL, "local tier: %s",
                       rc != TIER_OK ? "out of memory" : comm_last_error());
        goto fail;
    }
    number_nodes(t, (const char(*)[TIER_HOST_MAX])all);
    tier_place(t->node_of, t->size, t->nnodes, partner);
    t->partner = partner[t->rank];
    for (int r = 0; r < t->size; r++)
        if (partner[r] == t->rank)
            t->srcs[t->nsrc++] = r;
    /* The node's first rank seals its directory. */
    t->leader = 1;
    for (int r = 0; r < t->rank; r++)
        if (t->node_of[r] == t->node_of[t->rank])
            t->leader = 0;
    rc = make_root(t, cfg, mine, err, cap);
    if (comm_any_failed(comm, rc != TIER_OK)) {
        if (rc == TIER_OK)
            rc = util_fail(err, cap, TIER_EPEER, "local tier: another rank could not create "
                           "its directory");
        goto fail;
    }
    if ((rc = check_own_dir(t, comm, mine, err, cap)) != TIER_OK ||
        (rc = tier_async_open(t, comm, err, cap)) != TIER_OK)
        goto fail;
    free(all);
    free(partner);
    return TIER_OK;
fail:
    free(all);
    free(partner);
    tier_close(t);
    return rc;
}

int tier_in_place(const tier_t *t)
{
    return t->async && t->async->inplace;
}

int tier_exchange_on_thread(const tier_t *t)
{
    return t->async && t->async->xfer_thread;
}

/* ---- small files ------------------------------------------------------------------ */

/* Read a whole file of len bytes into a new buffer.  @return it, or NULL. */
static void *read_whole(const char *path, uint64_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = fd >= 0 ? malloc(len ? len : 1) : NULL;
    uint64_t got = 0;
    while (buf && got < len) {
        ssize_t n = read(fd, buf + got, len - got > (1u << 30) ? (1u << 30) : len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(buf);
            buf = NULL;
            break;
        }
        got += (uint64_t)n;
    }
    if (fd >= 0)
        close(fd);
    return buf;
}

/* ---- restore: what the nodes hold -------------------------------------------------- */

/* This rank's report: [n, then per step: step, nshards, total, npresent,
 * and npresent shard indices].  @return the number of words, or 0 (no
 * memory: reported as nothing). */
static size_t scan_report(const tier_t *t, uint64_t **out)
{
    ckpt_local_step_t *steps = NULL;
    size_t count = 0, words = 1;
    *out = NULL;
    if (ckpt_local_scan(t->root, &steps, &count) != CKPT_OK)
        count = 0;
    if (count > TIER_SCAN_MAX)
        count = TIER_SCAN_MAX;
    for (size_t i = 0; i < count; i++)
        words += 4 + (size_t)steps[i].npresent;
    uint64_t *w = calloc(words, sizeof *w);
    if (w) {
        size_t k = 0;
        w[k++] = count;
        for (size_t i = 0; i < count; i++) {
            w[k++] = steps[i].step;
            w[k++] = (uint64_t)steps[i].nshards;
            w[k++] = steps[i].total_bytes;
            w[k++] = (uint64_t)steps[i].npresent;
            for (int s = 0; s < steps[i].nshards; s++)
                if (steps[i].present[s])
                    w[k++] = (uint64_t)s;
        }
    }
    ckpt_local_scan_free(steps, count);
    *out = w;
    return w ? words : 0;
}

/* Gather every rank's scan_report: words[r] words of rank r at all+at[r].
 * @return TIER_OK, or TIER_EFAIL (comm_last_error may say why). */
static int gather_reports(tier_t *t, comm_t *comm, uint64_t **all, uint64_t **at)
{
    uint64_t *mine = NULL;
    uint64_t n = scan_report(t, &mine);
    uint64_t *counts = calloc((size_t)t->size, sizeof *counts);
    uint64_t *displs = calloc((size_t)t->size, sizeof *displs);
    int rc = !counts || !displs || comm_allgather(comm, &n, counts, sizeof n) != COMM_OK;
    uint64_t total = 0;
    for (int r = 0; !rc && r < t->size; r++) {
        displs[r] = total * sizeof(uint64_t);
        total += counts[r];
        counts[r] *= sizeof(uint64_t);
    }
    uint64_t *buf = rc ? NULL : calloc(total + 1, sizeof *buf);
    if (buf && n)
        memcpy((char *)buf + displs[t->rank], mine, n * sizeof *mine);
    if (comm_any_failed(comm, !buf) ||
        comm_allgatherv_inplace(comm, buf, counts, displs) != COMM_OK)
        rc = 1;
    for (int r = 0; !rc && r < t->size; r++)
        displs[r] /= sizeof(uint64_t);
    free(mine);
    free(counts);
    if (rc) {
        free(buf);
        free(displs);
        return TIER_EFAIL;
    }
    *all = buf;
    *at = displs;
    return TIER_OK;
}

/* In rank r's report, the entry of step: its words, or NULL. */
static const uint64_t *entry_of(const uint64_t *all, const uint64_t *at, int r, uint64_t step)
{
    const uint64_t *w = all + at[r];
    uint64_t n = *w++;
    for (uint64_t i = 0; i < n; i++) {
        if (w[0] == step)
            return w;
        w += 4 + w[3];
    }
    return NULL;
}

/* Try step: every shard held by some rank's node, the nodes agreeing on its
 * shape.  Fills holder (least loaded holder first, then the lowest rank).
 * @return 1 when complete. */
static int plan_step(const tier_t *t, const uint64_t *all, const uint64_t *at, uint64_t step,
                     int *nshards_out, int **holder_out)
{
    int nshards = -1;
    uint64_t total = 0;
    for (int r = 0; r < t->size; r++) {
        const uint64_t *e = entry_of(all, at, r, step);
        if (!e)
            continue;
        if (nshards < 0) {
            nshards = (int)e[1];
            total = e[2];
        } else if ((int)e[1] != nshards || e[2] != total) {
            return 0; /* two writers' checkpoints of one step: trust neither */
        }
    }
    if (nshards <= 0)
        return 0;
    int *holder = malloc((size_t)nshards * sizeof *holder);
    int *load = calloc((size_t)t->size, sizeof *load);
    if (!holder || !load) {
        free(holder);
        free(load);
        return 0;
    }
    for (int s = 0; s < nshards; s++)
        holder[s] = -1;
    for (int s = 0; s < nshards; s++)
        for (int r = 0; r < t->size; r++) {
            const uint64_t *e = entry_of(all, at, r, step);
            for (uint64_t i = 0; e && i < e[3]; i++)
                if (e[4 + i] == (uint64_t)s && (holder[s] < 0 || load[r] < load[holder[s]]))
                    holder[s] = r;
            if (holder[s] == r)
                load[r]++;
        }
    free(load);
    for (int s = 0; s < nshards; s++)
        if (holder[s] < 0) {
            free(holder);
            return 0;
        }
    *nshards_out = nshards;
    *holder_out = holder;
    return 1;
}

/* Append to pick->where, never past its end. */
__attribute__((format(printf, 2, 3)))
static void add_where(tier_pick_t *pick, const char *fmt, ...)
{
    size_t len = strlen(pick->where);
    if (len + 1 >= sizeof pick->where)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pick->where + len, sizeof pick->where - len, fmt, ap);
    va_end(ap);
}

/* "shards 0-1,4 read on n1; 2-3 read on n3" into pick->where. */
static void describe(const tier_t *t, tier_pick_t *pick)
{
    pick->where[0] = '\0';
    for (int k = 0; k < t->nnodes; k++) {
        int any = 0;
        for (int s = 0; s < pick->nshards; s++) {
            if (t->node_of[pick->holder[s]] != k ||
                (s > 0 && t->node_of[pick->holder[s - 1]] == k))
                continue; /* not here, or inside a run */
            int e = s;
            while (e + 1 < pick->nshards && t->node_of[pick->holder[e + 1]] == k)
                e++;
            if (!any)
                add_where(pick, "%sshards %d", pick->where[0] ? "; " : "", s);
            else
                add_where(pick, ",%d", s);
            if (e > s)
                add_where(pick, "-%d", e);
            any = 1;
        }
        if (any)
            add_where(pick, " read on %s", t->hosts[k]);
    }
}

/* The manifest of the picked step, for a rank whose node holds none of it:
 * holder[0] sends its node's manifest; the rank writes it into
 * <root>/.restore-<rank>/step-<N>/ and points pick->dir there.  @return
 * TIER_OK, or a TIER_E... code (err set; a failure on every rank). */
static int share_manifest(tier_t *t, comm_t *comm, tier_pick_t *pick, char *err, size_t cap)
{
    char name[CKPT_FILE_NAME_MAX], path[sizeof pick->dir + 32];
    ckpt_step_dirname((uint64_t)pick->step, name, sizeof name);
    snprintf(pick->dir, sizeof pick->dir, "%s/%s", t->root, name);
    struct stat st;
    snprintf(path, sizeof path, "%s/manifest.json", pick->dir);
    int lacks = stat(path, &st) != 0;
    int64_t need = lacks;
    if (comm_allreduce(comm, &need, 1, COMM_I64, COMM_MAX) != COMM_OK)
        return util_fail(err, cap, TIER_EFAIL, "local tier: %s", comm_last_error());
    if (!need)
        return TIER_OK;
    int root = pick->holder[0];
    uint64_t len = 0;
    char *text = NULL;
    if (t->rank == root && stat(path, &st) == 0 && (text = read_whole(path, (uint64_t)st.st_size)))
        len = (uint64_t)st.st_size;
    if (comm_bcast(comm, &len, sizeof len, root) != COMM_OK)
        return util_fail(err, cap, TIER_EFAIL, "local tier: %s", comm_last_error());
    if (t->rank != root)
        text = malloc(len ? len : 1);
    int rc = !text || len == 0 ? TIER_EFAIL : TIER_OK;
    if (comm_any_failed(comm, rc != TIER_OK) || comm_bcast(comm, text, len, root) != COMM_OK) {
        free(text);
        return util_fail(err, cap, TIER_EFAIL, "local tier: cannot share the manifest of step "
                         "%lld", (long long)pick->step);
    }
    if (lacks) {
        if ((size_t)snprintf(pick->dir, sizeof pick->dir, "%s/.restore-%d/%s", t->root, t->rank,
                             name) >= sizeof pick->dir)
            pick->dir[0] = '\0';
        snprintf(path, sizeof path, "%s/manifest.json", pick->dir);
        FILE *f = util_mkdir_p(pick->dir) == 0 ? fopen(path, "we") : NULL;
        int bad = !f || fwrite(text, 1, len, f) != len;
        if (f && fclose(f) != 0)
            bad = 1;
        if (bad)
            rc = util_fail(err, cap, TIER_EFAIL, "local tier: cannot write '%s': %s", path,
                           strerror(errno));
    }
    free(text);
    if (comm_any_failed(comm, rc != TIER_OK) && rc == TIER_OK)
        rc = util_fail(err, cap, TIER_EPEER, "local tier: another rank could not write the "
                       "manifest of step %lld", (long long)pick->step);
    return rc;
}

int tier_pick(tier_t *t, comm_t *comm, int64_t newer_than, int64_t older_than,
              tier_pick_t *pick, char *err, size_t cap)
{
    memset(pick, 0, sizeof *pick);
    pick->step = -1;
    uint64_t *all = NULL, *at = NULL;
    if (gather_reports(t, comm, &all, &at) != TIER_OK)
        return util_fail(err, cap, TIER_EFAIL, "local tier: gathering what the nodes hold: %s",
                         comm_last_error());
    /* Candidates: every step any rank reported, newest first. */
    uint64_t best = 0;
    int found = 0;
    for (;;) {
        uint64_t next = 0;
        int any = 0;
        for (int r = 0; r < t->size; r++) {
            const uint64_t *w = all + at[r];
            uint64_t n = *w++;
            for (uint64_t i = 0; i < n; i++, w += 4 + w[3])
                if ((int64_t)w[0] > newer_than && (int64_t)w[0] < older_than &&
                    (!found || w[0] < best) &&
                    (!any || w[0] > next)) {
                    next = w[0];
                    any = 1;
                }
        }
        if (!any)
            break;
        found = 1;
        best = next;
        if (plan_step(t, all, at, next, &pick->nshards, &pick->holder)) {
            pick->step = (int64_t)next;
            break;
        }
    }
    free(all);
    free(at);
    if (pick->step < 0)
        return TIER_OK; /* nothing newer: pick->step says so */
    describe(t, pick);
    int rc = share_manifest(t, comm, pick, err, cap);
    if (rc != TIER_OK) {
        tier_pick_free(t, pick);
        pick->step = -1;
    }
    return rc;
}

void tier_pick_free(tier_t *t, tier_pick_t *pick)
{
    char priv[CONFIG_PATH_MAX + 32];
    snprintf(priv, sizeof priv, "%s/.restore-%d", t->root, t->rank);
    if (strncmp(pick->dir, priv, strlen(priv)) == 0) {
        char file[sizeof pick->dir + 32];
        snprintf(file, sizeof file, "%s/manifest.json", pick->dir);
        unlink(file);
        rmdir(pick->dir);
        rmdir(priv);
    }
    free(pick->holder);
    pick->holder = NULL;
}
