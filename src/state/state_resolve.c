/*
 * state_resolve.c - which checkpoint a run resumes from (state.h's
 * state_resolve): --resume auto, none or one step directory, checked
 * against what the run directory holds, decided on rank 0 and broadcast.
 */
#include "state/state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "util/util.h"

/* A message and a path or step name; a step directory's name. */
#define STATE_MSG_MAX 512
#define STATE_STEP_NAME_MAX 64

/* ---- the root's identity ----------------------------------------------- */

#define ROOT_ID_NAME ".root-id"
#define ROOT_ID_DIGITS 16

/* Read path's id into id.  @return 1 when read, 0 when there is no such
 * file (errno ENOENT), -1 on any other failure (err set). */
static int read_root_id(const char *path, char id[STATE_ROOT_ID_SIZE], char *err, size_t cap)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -util_fail(err, cap, 1, "cannot open '%s': %s", path,
                                                strerror(errno));
    char buf[ROOT_ID_DIGITS + 2];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    int good = n == ROOT_ID_DIGITS + 1 && buf[ROOT_ID_DIGITS] == '\n';
    for (int i = 0; good && i < ROOT_ID_DIGITS; i++)
        good = (buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f');
    if (!good)
        return -util_fail(err, cap, 1, "'%s' is damaged (not %d hex digits and a newline); "
                          "remove it to give the checkpoint root a new identity (node-local "
                          "checkpoints made before are then not resumed from)", path,
                          ROOT_ID_DIGITS);
    memcpy(id, buf, ROOT_ID_DIGITS);
    id[ROOT_ID_DIGITS] = '\0';
    return 1;
}

/* Make path holding a new random id: written whole into a temp file, then
 * linked into place, so that no reader sees half of one and two runs
 * starting at once agree on the first.  @return 1 when made, 0 when
 * another process made it first, -1 on failure (err set). */
static int make_root_id(const char *root, const char *path, char *err, size_t cap)
{
    uint64_t bits = 0;
    if (getrandom(&bits, sizeof bits, 0) != (ssize_t)sizeof bits) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        bits = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 20);
    }
    char tmp[STATE_PATH_MAX + 64], text[ROOT_ID_DIGITS + 2];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp.%ld", root, ROOT_ID_NAME, (long)getpid());
    snprintf(text, sizeof text, "%016llx\n", (unsigned long long)bits);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    int rc = fd >= 0 && write(fd, text, ROOT_ID_DIGITS + 1) == ROOT_ID_DIGITS + 1 &&
             fsync(fd) == 0 ? 1 : -1;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    if (rc == 1 && link(tmp, path) != 0)
        rc = errno == EEXIST ? 0 : -1, saved = errno;
    unlink(tmp);
    if (rc < 0)
        return -util_fail(err, cap, 1, "cannot make '%s': %s", path, strerror(saved));
    if (rc == 1 && util_fsync_dir(root) != 0)
        return -util_fail(err, cap, 1, "cannot make '%s' durable: %s", path, strerror(errno));
    return rc;
}

int state_root_id(const char *root, char id[STATE_ROOT_ID_SIZE], char *err, size_t cap)
{
    char path[STATE_PATH_MAX + sizeof "/" ROOT_ID_NAME];
    snprintf(path, sizeof path, "%s/%s", root, ROOT_ID_NAME);
    for (int attempt = 0; attempt < 2; attempt++) {
        int got = read_root_id(path, id, err, cap);
        if (got != 0)
            return got > 0 ? STATE_OK : STATE_EFAIL;
        if (make_root_id(root, path, err, cap) < 0)
            return STATE_EFAIL;
        /* Made, or another process made it first: read what is there. */
    }
    return util_fail(err, cap, STATE_EFAIL, "'%s' keeps disappearing", path);
}

/* ---- resolve: which checkpoint to resume from ------------------------- */

static void state_report_skip(void *ctx, const char *name, const char *why)
{
    (void)ctx;
    fprintf(stderr, "ftrain: resume: skipping checkpoint '%s': %s\n", name, why);
}

static void state_report_aside(void *ctx, const char *from, const char *to)
{
    (void)ctx;
    fprintf(stderr, "ftrain: resume: moved the bad checkpoint '%s' aside to '%s' (kept for "
                    "inspection; this run saves that step anew)\n", from, to);
}

/* The run resumes from `found` because every newer checkpoint failed to
 * verify: move those out of the way, or this run's own save of their
 * steps would find the names taken and fail (and a requeued job would
 * fail the same way each time). */
static void state_set_aside_newer(const char *root, const char *found)
{
    ckpt_t *ck = NULL;
    if (ckpt_open(found, &ck) != CKPT_OK)
        return; /* it verified a moment ago; the load will say what is wrong */
    if (ckpt_set_aside_after(root, ckpt_step(ck), state_report_aside, NULL) != CKPT_OK)
        fprintf(stderr, "ftrain: resume: could not move bad checkpoints aside: %s\n",
                ckpt_last_error());
    ckpt_close(ck);
}

/* The newest step-<N> under root (any status), into *step and name; 0 when
 * there is none (or no root). */
static int state_newest_step(const char *root, uint64_t *step, char *name, size_t cap)
{
    ckpt_entry_t *entries = NULL;
    size_t count = 0;
    int found = 0;
    if (!root || !root[0] || ckpt_list(root, 0, &entries, &count) != CKPT_OK)
        return 0;
    for (size_t i = 0; i < count; i++)
        if (entries[i].name[0] != '.') {
            *step = entries[i].step;
            snprintf(name, cap, "%s", entries[i].name);
            found = 1;
        }
    free(entries);
    return found;
}

/* What rank 0 learned of root before deciding: the newest step there. */
typedef struct {
    int have;            /* 1: root holds a step-<N> */
    uint64_t step;
    char name[STATE_STEP_NAME_MAX];
} newest_t;

/* --resume auto: the newest checkpoint that verifies, newer bad ones set
 * aside.  found gets the path or the refusal. */
static int decide_auto(const char *root, char *found, size_t cap)
{
    int rc = ckpt_latest_good(root, found, cap, state_report_skip, NULL);
    if (rc == CKPT_OK) {
        state_set_aside_newer(root, found);
        return STATE_OK;
    }
    if (rc == CKPT_ENOTFOUND)
        return STATE_FRESH;
    if (rc == CKPT_EIO || rc == CKPT_ENOMEM) {
        snprintf(found, cap, "%.700s; not resuming from an older checkpoint, which would "
                 "redo the work since and set this one aside: run again once it can be "
                 "read", ckpt_last_error());
        return STATE_EFAIL;
    }
    snprintf(found, cap,
             "checkpoints exist under '%s' but none is good (%s); refusing to start over: "
             "move them away, or use a new --run-dir, to start fresh", root,
             ckpt_strerror(rc));
    return STATE_EFAIL;
}

/* --resume DIR: that checkpoint, if it verifies and root holds nothing
 * newer.  found gets the path or the refusal. */
static int decide_named(const char *dir, const char *root, const newest_t *newest,
                        char *found, size_t cap)
{
    ckpt_t *ck = NULL;
    int verdict = STATE_OK;
    int rc = ckpt_open(dir, &ck);
    if (rc == CKPT_OK)
        rc = ckpt_verify(ck);
    if (rc == CKPT_OK && newest->have && newest->step > ckpt_step(ck)) {
        /* This run would save steps that exist (and fail), or have its own
         * checkpoints pruned beside the newer ones. */
        verdict = STATE_EFAIL;
        snprintf(found, cap,
                 "--resume '%.300s' is step %llu, but '%.300s' already holds newer "
                 "checkpoints (newest %s); move them away, use another --run-dir, or "
                 "--resume auto to continue from the newest", dir,
                 (unsigned long long)ckpt_step(ck), root, newest->name);
    } else if (rc == CKPT_OK) {
        snprintf(found, cap, "%s", dir);
    } else {
        verdict = STATE_EFAIL;
        snprintf(found, cap, "--resume '%.500s': %s: %.400s", dir, ckpt_strerror(rc),
                 ckpt_last_error());
    }
    ckpt_close(ck);
    return verdict;
}

/* 1 when path is a directory. */
static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The checkpoint root a directory stands for: dir/ckpt for a run
 * directory (it holds one), else dir itself, into out. */
static void root_of(const char *dir, char *out, size_t cap)
{
    char sub[STATE_PATH_MAX + 32];
    snprintf(sub, sizeof sub, "%s/ckpt", dir);
    snprintf(out, cap, "%s", is_dir(sub) ? sub : dir);
}

/* "42" or "step-42" (any number of digits, at most INT64_MAX) into *step.
 * @return 1 when text is one. */
static int parse_step_arg(const char *text, uint64_t *step)
{
    if (strncmp(text, "step-", 5) == 0)
        text += 5;
    if (!*text || strlen(text) > 19 || strspn(text, "0123456789") != strlen(text))
        return 0;
    errno = 0;
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno || v > (unsigned long long)INT64_MAX)
        return 0;
    *step = v;
    return 1;
}

/* --resume ARG in the forms ckptctl takes (docs/ckptctl.md, "Naming a
 * checkpoint"): a step directory as it is; a checkpoint root, or a run
 * directory (for its ckpt/), for the newest checkpoint there that
 * verifies; ROOT/N or ROOT/step-N, ROOT a root or a run directory, for
 * step N.  dir gets the step directory to load.  @return STATE_OK, or
 * STATE_EFAIL with the refusal in dir. */
static int resume_arg_dir(const char *arg, char *dir, size_t cap)
{
    /* Room for ARG's root and a step name in it, and for "/ckpt". */
    char path[STATE_PATH_MAX + 32], root[STATE_PATH_MAX + 32];
    if (strlen(arg) >= STATE_PATH_MAX) {
        snprintf(dir, cap, "--resume: the path is too long (%zu bytes, at most %d)",
                 strlen(arg), STATE_PATH_MAX - 1);
        return STATE_EFAIL;
    }
    snprintf(path, sizeof path, "%s/manifest.json", arg);
    const char *base = strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg;
    uint64_t step;
    if (!is_dir(arg) && parse_step_arg(base, &step)) {
        char parent[STATE_PATH_MAX + 32], name[CKPT_FILE_NAME_MAX];
        snprintf(parent, sizeof parent, "%.*s", base > arg ? (int)(base - arg - 1) : 1,
                 base > arg ? arg : ".");
        if (!parent[0])
            snprintf(parent, sizeof parent, "/");
        root_of(parent, root, sizeof root);
        ckpt_step_dirname(step, name, sizeof name);
        snprintf(dir, cap, "%s/%s", root, name);
        if (is_dir(dir))
            return STATE_OK;
        snprintf(dir, cap, "--resume '%.400s': '%.400s' holds no step %llu (ckptctl list "
                 "'%.400s' shows what it holds)", arg, root, (unsigned long long)step, root);
        return STATE_EFAIL;
    }
    uint64_t ignored;
    if (!is_dir(arg) || access(path, F_OK) == 0 || ckpt_parse_dirname(base, 0, &ignored)) {
        snprintf(dir, cap, "%s", arg); /* a checkpoint, or what ckpt_open will name */
        return STATE_OK;
    }
    root_of(arg, root, sizeof root);
    int rc = ckpt_latest_good(root, dir, cap, state_report_skip, NULL);
    if (rc == CKPT_OK) {
        printf("resume: --resume '%s': the newest checkpoint that verifies in '%s' is %s\n",
               arg, root, dir);
        return STATE_OK;
    }
    if (rc == CKPT_ENOTFOUND)
        snprintf(dir, cap, "--resume '%.500s': no checkpoint in '%.500s' (give a step "
                 "directory, a checkpoint root, a run directory or ROOT/STEP)", arg, root);
    else
        snprintf(dir, cap, "--resume '%.500s': no checkpoint in '%.500s' verifies: %.400s",
                 arg, root, ckpt_last_error());
    return STATE_EFAIL;
}

/* Rank 0's decision for cfg->resume: STATE_OK with the path in found,
 * STATE_FRESH, or STATE_EFAIL with the refusal in found. */
static int state_decide(const config_t *cfg, const char *root, char *found, size_t cap)
{
    newest_t newest = {0};
    newest.have = state_newest_step(root, &newest.step, newest.name, sizeof newest.name);
    if (strcmp(cfg->resume, "auto") == 0)
        return decide_auto(root, found, cap);
    if (strcmp(cfg->resume, "none") != 0) {
        char dir[STATE_PATH_MAX + STATE_MSG_MAX];
        if (resume_arg_dir(cfg->resume, dir, sizeof dir) != STATE_OK) {
            snprintf(found, cap, "%s", dir);
            return STATE_EFAIL;
        }
        return decide_named(dir, root, &newest, found, cap);
    }
    if (!newest.have)
        return STATE_FRESH;
    /* A fresh run would save steps that exist, or be pruned away beside
     * newer ones: never mix two runs in one directory. */
    snprintf(found, cap,
             "--resume none: '%.600s' already holds checkpoints (newest %s); a fresh "
             "run would save beside them: use a new --run-dir, or move them away to "
             "start over", root, newest.name);
    return STATE_EFAIL;
}

int state_resolve(const config_t *cfg, comm_t *comm, const char *root, char *path,
                  size_t cap, char *err, size_t errcap)
{
    /* msg[0] carries the verdict so one broadcast tells every rank. */
    char msg[1 + STATE_PATH_MAX + STATE_MSG_MAX];
    memset(msg, 0, sizeof msg);
    if (comm_rank(comm) == 0) {
        char found[STATE_PATH_MAX + STATE_MSG_MAX] = "";
        int verdict = state_decide(cfg, root, found, sizeof found);
        msg[0] = (char)(verdict == STATE_OK ? 'o' : verdict == STATE_FRESH ? 'n' : 'f');
        snprintf(msg + 1, sizeof msg - 1, "%s", found);
    }
    if (comm_bcast(comm, msg, sizeof msg, 0) != COMM_OK)
        return util_fail(err, errcap, STATE_EFAIL, "resume: broadcast failed: %s",
                         comm_last_error());
    msg[sizeof msg - 1] = '\0';
    if (msg[0] == 'o') {
        snprintf(path, cap, "%s", msg + 1);
        return STATE_OK;
    }
    if (msg[0] == 'n')
        return STATE_FRESH;
    return util_fail(err, errcap, STATE_EFAIL, "%s", msg + 1);
}
