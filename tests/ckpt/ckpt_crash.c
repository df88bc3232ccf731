/*
 * ckpt_crash.c - SIGKILL a process that saves checkpoints in a loop (one
 * rank, real fsyncs, a few MiB of state) at many random points.  After each
 * kill, ckpt_latest_good must find a checkpoint that fully verifies and holds
 * exactly what the child meant to write for that step (the data is a function
 * of the step), and no step-* directory may be anything but committed: a
 * partially written save is only ever a .tmp-step-* directory.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftrain/ckpt.h"
#include "ckpt_test.h"
#include "tap.h"

enum { NW = 3 << 18, NMETA = 4, KILLS = 30 };  /* 3 MiB of floats */

static float value(uint64_t step, size_t i)
{
    uint64_t x = (step + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
    x ^= x >> 29;
    return (float)(x % 100000) / 1000.0f + (float)step;
}

static void fill(float *w, int64_t *meta, uint64_t step)
{
    for (size_t i = 0; i < NW; i++)
        w[i] = value(step, i);
    meta[0] = (int64_t)step;
    meta[1] = NW;
    meta[2] = 640;
    meta[3] = -1;
}

/* The child: save step, step+1, ... until killed. */
static void child(const char *root, uint64_t step)
{
    static float w[NW];
    int64_t meta[NMETA];
    ckpt_tensor_t t[2];
    ckpt_opts_t o;
    ckpt_coll_t coll = SOLO_COLL;
    char rec[64];

    ckpt_opts_default(&o);
    o.frame_bytes = 256 << 10;
    memset(t, 0, sizeof t);
    snprintf(t[0].name, CKPT_NAME_MAX, "w");
    t[0].dtype = CKPT_F32, t[0].ndim = 1, t[0].shape[0] = NW, t[0].data = w;
    snprintf(t[1].name, CKPT_NAME_MAX, "meta");
    t[1].dtype = CKPT_I64, t[1].ndim = 1, t[1].shape[0] = NMETA,
    t[1].data = meta;
    for (;; step++) {
        int rc;
        fill(w, meta, step);
        snprintf(rec, sizeof rec, "{\"step\":%llu}", (unsigned long long)step);
        rc = ckpt_save(root, step, t, 2, rec, &o, &coll);
        if (rc != CKPT_OK) {
            fprintf(stderr, "child: save %llu: %s\n", (unsigned long long)step,
                    ckpt_last_error());
            _exit(1);
        }
        if (step % 4 == 0 && ckpt_prune(root, 3, NULL, NULL) != CKPT_OK) {
            fprintf(stderr, "child: prune: %s\n", ckpt_last_error());
            _exit(1);
        }
    }
}

/* Check the checkpoint at dir holds what the child wrote for its step. */
static int check_content(const char *dir, uint64_t *step_out)
{
    static float w[NW];
    int64_t meta[NMETA];
    ckpt_t *c = NULL;
    int good;
    uint64_t step;
    char want[64];

    if (ckpt_open(dir, &c) != CKPT_OK)
        return 0;
    step = ckpt_step(c);
    snprintf(want, sizeof want, "{\"step\":%llu}", (unsigned long long)step);
    good = ckpt_verify(c) == CKPT_OK &&
           ckpt_read_tensor(c, "w", w, sizeof w) == CKPT_OK &&
           ckpt_read_tensor(c, "meta", meta, sizeof meta) == CKPT_OK &&
           meta[0] == (int64_t)step && meta[1] == NW &&
           strcmp(ckpt_record_json(c), want) == 0;
    for (size_t i = 0; good && i < NW; i++)
        good = w[i] == value(step, i);
    ckpt_close(c);
    *step_out = step;
    return good;
}

int main(void)
{
    char root[256], path[1024];
    uint64_t next = 1, last_good = 0;
    int commits_seen = 0, bad_dirs = 0, content_ok = 1, monotone = 1,
        child_died = 0;

    /* The kill delays come from rand(): the seed is printed, and
     * CKPT_CRASH_SEED=N replays a run's sequence of delays (the points the
     * kills land at still vary with the machine's speed). */
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    const char *env_seed = getenv("CKPT_CRASH_SEED");
    if (env_seed && *env_seed) {
        char *end;
        unsigned long v = strtoul(env_seed, &end, 10);
        if (*end || env_seed[0] == '-' || v > 0xffffffffUL) {
            printf("Bail out! CKPT_CRASH_SEED must be a number from 0 to 4294967295, got '%s'\n",
                   env_seed);
            return 1;
        }
        seed = (unsigned)v;
    }
    tap_tmpdir(root, sizeof root, "ckpt_crash");
    srand(seed);
    plan(7);
    diag("CKPT_CRASH_SEED=%u%s", seed, env_seed && *env_seed ? " (from the environment)" : "");

    for (int k = 0; k < KILLS; k++) {
        pid_t pid = fork();
        int status, rc;
        ckpt_entry_t *v = NULL;
        size_t n = 0;
        if (pid < 0)
            break;
        if (pid == 0)
            child(root, next);
        /* Vary the delay: early kills land in the first save, later ones
         * anywhere in the protocol of some save. */
        useconds_t delay = (useconds_t)(rand() % (k < 5 ? 20000 : 250000));
        usleep(delay);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (!WIFSIGNALED(status)) {
            child_died++;
            diag("child exited by itself (status %d)", status);
        }
        diag("kill %d after %u us", k, (unsigned)delay);

        rc = ckpt_latest_good(root, path, sizeof path, NULL, NULL);
        if (rc == CKPT_OK) {
            uint64_t step = 0;
            if (!check_content(path, &step)) {
                content_ok = 0;
                diag("kill %d: %s does not hold step %llu's data", k, path,
                     (unsigned long long)step);
            }
            if (step < last_good)
                monotone = 0;
            if (step > last_good)
                commits_seen++;
            last_good = step;
            next = step + 1;
        } else if (rc != CKPT_ENOTFOUND || last_good != 0) {
            content_ok = 0;
            diag("kill %d: latest_good: %s: %s", k, ckpt_strerror(rc),
                 ckpt_last_error());
        }
        if (ckpt_list(root, 1, &v, &n) == CKPT_OK) {
            for (size_t i = 0; i < n; i++)
                if (v[i].name[0] != '.' && v[i].status != CKPT_ST_COMMITTED) {
                    bad_dirs++;
                    diag("kill %d: %s is %d: %s", k, v[i].name, v[i].status,
                         v[i].why);
                }
            free(v);
        }
    }
    diag("%d kills, newest good step %llu, %d new commits seen", KILLS,
         (unsigned long long)last_good, commits_seen);
    is_int(child_died, 0, "the child only ever died by SIGKILL");
    ok(last_good > 0, "some checkpoints were committed");
    ok(commits_seen >= 3, "kills landed after many different commits (%d)",
       commits_seen);
    ok(content_ok, "every latest_good verifies and holds its step's data");
    ok(monotone, "latest_good never went back to an older step");
    is_int(bad_dirs, 0, "no step-* directory was ever partial or corrupt");
    {
        int removed = 0;
        ckpt_entry_t *v = NULL;
        size_t n = 0, ntmp = 0;
        ckpt_prune(root, 3, NULL, &removed);
        if (ckpt_list(root, 0, &v, &n) == CKPT_OK)
            for (size_t i = 0; i < n; i++)
                ntmp += v[i].name[0] == '.' && v[i].step < last_good;
        free(v);
        is_int(ntmp, 0, "prune cleared crashed saves' temp dirs");
    }
    tap_rmtree(root);
    return done_testing();
}
