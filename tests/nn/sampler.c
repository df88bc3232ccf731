/*
 * sampler.c - TAP tests of the global, world-size-invariant data order
 * (src/nn/sampler.h).
 *
 * What is checked, for several data set sizes, global batches and
 * micro-batches (including a short last step, n not a multiple of B, and a
 * micro-batch that does not divide B, which the sampler allows although the
 * CLI does not), and every world size 1..8:
 *   - each sample is trained exactly once per epoch (the union over ranks and
 *     steps of the dealt micro-batches is 0..n-1 with no duplicate);
 *   - the samples of step k, read in rank order, are the same sequence for
 *     every world size, and every micro-batch goes to exactly one rank;
 *   - the dealing is balanced (counts differ by at most one) and ranks beyond
 *     the micro-batch count are idle;
 *   - the permutation depends only on (seed, epoch);
 *   - bad sizes are refused.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn/sampler.h"
#include "tap.h"

typedef struct {
    int64_t n, b, m;
} shape_t;

static const shape_t shapes[] = {
    {1000, 32, 8},  /* the line data set: 31 full steps and one of 8 */
    {100, 32, 8},   /* short last step of 4: one micro-batch only */
    {97, 10, 3},    /* micro does not divide B: micro-batches 3,3,3,1 */
    {50, 50, 7},    /* one step per epoch, last micro-batch of 1 */
    {16, 16, 16},   /* n = B: a single step (a larger B is refused) */
    {1, 1, 1},      /* the smallest data set */
    {64, 8, 8},     /* one micro-batch a step: most ranks idle */
    {33, 32, 5},    /* a last step of one sample */
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* Check one epoch of one shape for world size w.  Returns the number of
 * problems found and explains the first on stdout as a diagnostic. */
static int check_epoch(sampler_t *s, int w, const int64_t *ref_order)
{
    int64_t n = s->samples;
    int *seen = calloc((size_t)n, sizeof *seen);
    int64_t *order = malloc((size_t)n * sizeof *order);
    int bad = 0;
    if (!seen || !order) {
        diag("out of memory");
        free(seen);
        free(order);
        return 1;
    }
    int64_t pos = 0, spe = sampler_steps_per_epoch(s);
    for (int64_t j = 0; j < spe; j++) {
        int64_t nm = sampler_micro_count(s, j), dealt = 0, step_samples = 0;
        int64_t next_micro = 0, cmin = INT64_MAX, cmax = 0, idle = 0;
        for (int r = 0; r < w; r++) {
            int64_t first = -1, count = -1;
            sampler_rank_micros(s, j, r, w, &first, &count);
            if (count < 0 || first != next_micro) {
                if (!bad++)
                    diag("w=%d step %lld rank %d: micro-batches [%lld, +%lld) do not follow %lld",
                         w, (long long)j, r, (long long)first, (long long)count,
                         (long long)next_micro);
                count = count < 0 ? 0 : count;
            }
            next_micro = first + count;
            dealt += count;
            cmin = count < cmin ? count : cmin;
            cmax = count > cmax ? count : cmax;
            idle += count == 0;
            for (int64_t i = first; i < first + count; i++) {
                int64_t len = 0;
                const int64_t *idx = sampler_micro(s, j, i, &len);
                if (len < 1 || len > s->micro_batch) {
                    if (!bad++)
                        diag("w=%d step %lld micro %lld: length %lld", w, (long long)j,
                             (long long)i, (long long)len);
                    continue;
                }
                for (int64_t q = 0; q < len; q++) {
                    int64_t x = idx[q];
                    if (x < 0 || x >= n || pos >= n) {
                        if (!bad++)
                            diag("w=%d step %lld: index %lld out of range or too many samples",
                                 w, (long long)j, (long long)x);
                        continue;
                    }
                    if (seen[x]++ && !bad++)
                        diag("w=%d step %lld: sample %lld trained twice", w, (long long)j,
                             (long long)x);
                    order[pos++] = x;
                    step_samples++;
                }
            }
        }
        if (dealt != nm && !bad++)
            diag("w=%d step %lld: %lld of %lld micro-batches dealt", w, (long long)j,
                 (long long)dealt, (long long)nm);
        if (step_samples != sampler_step_size(s, j) && !bad++)
            diag("w=%d step %lld: %lld samples, step size %lld", w, (long long)j,
                 (long long)step_samples, (long long)sampler_step_size(s, j));
        if (cmax - cmin > 1 && !bad++)
            diag("w=%d step %lld: unbalanced, %lld..%lld micro-batches a rank", w,
                 (long long)j, (long long)cmin, (long long)cmax);
        int64_t want_idle = w > nm ? w - nm : 0;
        if (idle != want_idle && !bad++)
            diag("w=%d step %lld: %lld idle ranks, expected %lld (%lld micro-batches)", w,
                 (long long)j, (long long)idle, (long long)want_idle, (long long)nm);
    }
    for (int64_t x = 0; x < n; x++)
        if (seen[x] != 1 && !bad++)
            diag("w=%d: sample %lld trained %d times in the epoch", w, (long long)x, seen[x]);
    if (pos != n && !bad++)
        diag("w=%d: %lld samples in the epoch, expected %lld", w, (long long)pos, (long long)n);
    if (ref_order && pos == n && memcmp(order, ref_order, (size_t)n * sizeof *order) != 0 &&
        !bad++)
        diag("w=%d: the epoch's sample order differs from the order with one rank", w);
    free(seen);
    free(order);
    return bad;
}

static int is_permutation(const int64_t *p, int64_t n)
{
    char *seen = calloc((size_t)n, 1);
    int good = seen != NULL;
    for (int64_t i = 0; good && i < n; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]])
            good = 0;
        else
            seen[p[i]] = 1;
    }
    free(seen);
    return good;
}

int main(void)
{
    /* Coverage: exact-once and world-size invariance for each shape. */
    for (int k = 0; k < NSHAPES; k++) {
        const shape_t *sh = &shapes[k];
        sampler_t s;
        is_int(sampler_init(&s, sh->n, sh->b, sh->m, 7, NULL, 0), SAMPLER_OK, "init n=%lld B=%lld micro=%lld",
               (long long)sh->n, (long long)sh->b, (long long)sh->m);
        is_int(sampler_steps_per_epoch(&s), (sh->n + sh->b - 1) / sh->b,
               "n=%lld B=%lld: ceil(n/B) steps per epoch", (long long)sh->n, (long long)sh->b);
        int64_t spe = sampler_steps_per_epoch(&s), last = sh->n - (spe - 1) * sh->b;
        is_int(sampler_step_size(&s, spe - 1), last, "n=%lld B=%lld: last step has %lld samples",
               (long long)sh->n, (long long)sh->b, (long long)last);
        is_int(sampler_micro_count(&s, spe - 1), (last + sh->m - 1) / sh->m,
               "n=%lld B=%lld micro=%lld: last step has ceil(%lld/micro) micro-batches",
               (long long)sh->n, (long long)sh->b, (long long)sh->m, (long long)last);
        for (int64_t e = 0; e < 2; e++) {
            sampler_set_epoch(&s, e);
            int64_t *ref = malloc((size_t)sh->n * sizeof *ref);
            memcpy(ref, s.perm, (size_t)sh->n * sizeof *ref);
            int bad = 0;
            for (int w = 1; w <= 8; w++)
                bad += check_epoch(&s, w, ref);
            ok(bad == 0,
               "n=%lld B=%lld micro=%lld epoch %lld: every sample once, same order, balanced, "
               "idle ranks, for world sizes 1..8",
               (long long)sh->n, (long long)sh->b, (long long)sh->m, (long long)e);
            free(ref);
        }
        sampler_free(&s);
    }

    /* The contents of step k do not depend on the world size: the same
     * samples in the same positions whatever W (spelled out for one step). */
    {
        sampler_t s;
        sampler_init(&s, 97, 10, 3, 11, NULL, 0);
        sampler_set_epoch(&s, 3);
        int same = 1;
        for (int64_t j = 0; j < sampler_steps_per_epoch(&s); j++) {
            int64_t want[16], nw = 0;
            for (int64_t i = 0; i < sampler_micro_count(&s, j); i++) {
                int64_t len = 0;
                const int64_t *idx = sampler_micro(&s, j, i, &len);
                for (int64_t q = 0; q < len; q++)
                    want[nw++] = idx[q];
            }
            for (int w = 2; w <= 8; w++) {
                int64_t got[16], ng = 0;
                for (int r = 0; r < w; r++) {
                    int64_t first = 0, count = 0;
                    sampler_rank_micros(&s, j, r, w, &first, &count);
                    for (int64_t i = first; i < first + count; i++) {
                        int64_t len = 0;
                        const int64_t *idx = sampler_micro(&s, j, i, &len);
                        for (int64_t q = 0; q < len && ng < 16; q++)
                            got[ng++] = idx[q];
                    }
                }
                if (ng != nw || memcmp(got, want, (size_t)nw * sizeof *got) != 0) {
                    if (same)
                        diag("step %lld differs between 1 and %d ranks", (long long)j, w);
                    same = 0;
                }
            }
        }
        ok(same, "every step's samples, read in rank order, are the same for 1..8 ranks");
        sampler_free(&s);
    }

    /* The permutation depends only on (seed, epoch). */
    {
        sampler_t a, b, c;
        sampler_init(&a, 500, 32, 8, 42, NULL, 0);
        sampler_init(&b, 500, 100, 7, 42, NULL, 0); /* other batch shapes, same seed */
        sampler_init(&c, 500, 32, 8, 43, NULL, 0);
        sampler_set_epoch(&a, 0);
        int64_t *e0 = malloc(500 * sizeof *e0);
        memcpy(e0, a.perm, 500 * sizeof *e0);
        ok(is_permutation(a.perm, 500), "epoch 0 is a permutation of 0..n-1");
        int identity = 1;
        for (int64_t i = 0; i < 500; i++)
            identity &= a.perm[i] == i;
        ok(!identity, "epoch 0 is shuffled, not the identity");
        sampler_set_epoch(&a, 1);
        ok(is_permutation(a.perm, 500), "epoch 1 is a permutation of 0..n-1");
        ok(memcmp(a.perm, e0, 500 * sizeof *e0) != 0, "epochs 0 and 1 differ");
        sampler_set_epoch(&a, 0);
        ok(memcmp(a.perm, e0, 500 * sizeof *e0) == 0,
           "going back to epoch 0 rebuilds the same permutation");
        sampler_set_epoch(&b, 0);
        ok(memcmp(b.perm, e0, 500 * sizeof *e0) == 0,
           "the permutation does not depend on the global batch or micro-batch");
        sampler_set_epoch(&c, 0);
        ok(memcmp(c.perm, e0, 500 * sizeof *e0) != 0, "another seed gives another permutation");
        sampler_set_epoch(&b, 5);
        sampler_set_epoch(&a, 5);
        ok(memcmp(a.perm, b.perm, 500 * sizeof *e0) == 0,
           "an epoch reached by jumping (0 -> 5) equals one reached another way");
        free(e0);
        sampler_free(&a);
        sampler_free(&b);
        sampler_free(&c);
    }

    /* Idle ranks when W exceeds the micro-batch count, spelled out. */
    {
        sampler_t s;
        sampler_init(&s, 64, 16, 8, 1, NULL, 0); /* 2 micro-batches a step */
        int64_t f[5], cnt[5];
        for (int r = 0; r < 5; r++)
            sampler_rank_micros(&s, 0, r, 5, &f[r], &cnt[r]);
        int busy = 0, total = 0;
        for (int r = 0; r < 5; r++) {
            busy += cnt[r] > 0;
            total += (int)cnt[r];
        }
        is_int(busy, 2, "5 ranks, 2 micro-batches: 2 ranks busy");
        is_int(total, 2, "5 ranks, 2 micro-batches: both dealt once");
        sampler_free(&s);
    }

    /* Bad sizes. */
    {
        static const char *const small = "must be at least 1";
        struct {
            int64_t n, b, m;
            const char *what, *says;
        } bad[] = {
            {0, 32, 8, "n = 0", small},           {-5, 32, 8, "n < 0", small},
            {100, 0, 1, "B = 0", small},          {100, -32, 8, "B < 0", small},
            {100, 32, 0, "micro = 0", small},     {100, 32, -8, "micro < 0", small},
            {100, 32, 33, "micro > B", "larger than the global batch"},
            /* Each step would train the n samples, not B, under B's name. */
            {7, 16, 16, "micro = B > n",
             "--micro-batch 16 is larger than the training set, which has 7 samples: give "
             "--micro-batch 7 or less"},
            {1000, 4096, 16, "B = 4096 > n = 1000",
             "--global-batch 4096 is larger than the training set, which has 1000 samples: "
             "give --global-batch 992 or less, a multiple of --micro-batch 16"},
            /* sine's 100 samples and the defaults: the advice is a value the
             * option check takes (a multiple of the micro-batch), not 100. */
            {100, 128, 16, "B = 128 > n = 100",
             "give --global-batch 96 or less, a multiple of --micro-batch 16"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            sampler_t s;
            char err[320] = "";
            is_int(sampler_init(&s, bad[i].n, bad[i].b, bad[i].m, 1, err, sizeof err),
                   SAMPLER_EINVAL, "refuses %s", bad[i].what);
            ok(strstr(err, bad[i].says) != NULL, "%s: the message says why: %s", bad[i].what,
               err);
            sampler_free(&s); /* must be safe after a refusal */
        }
        sampler_t s;
        is_int(sampler_init(&s, 100, 96, 16, 1, NULL, 0), SAMPLER_OK,
               "accepts the advice for n = 100: B = 96 of micro 16");
        sampler_free(&s);
        is_int(sampler_init(&s, 100, 32, 32, 1, NULL, 0), SAMPLER_OK, "accepts micro = B");
        sampler_free(&s);
        is_int(sampler_init(&s, 100, 100, 20, 1, NULL, 0), SAMPLER_OK, "accepts B = n");
        sampler_free(&s);
        ok(s.perm == NULL, "sampler_free clears the permutation it frees");
        /* A second sampler_free of the same sampler and sampler_free(NULL)
         * must do nothing.  They run in a child, so that a crash or a double
         * free (which the allocator or ASan aborts) fails this check instead
         * of ending the test. */
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            sampler_free(&s);
            sampler_free(NULL);
            _exit(0);
        }
        int status = -1;
        int clean = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                    WEXITSTATUS(status) == 0;
        ok(clean, "sampler_free twice, and sampler_free(NULL), are no-ops (child status %#x)",
           status);
    }
    return done_testing();
}
