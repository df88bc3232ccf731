/*
 * ckpt_stop.c - the library's stop path (include/ftrain/ckpt_stop.h).
 *
 * The agreement runs on NRANKS forked processes (each with its own signal
 * record, as ranks have) over an allgather in shared memory: when no rank
 * was signalled every rank gets -1; when one was, every rank gets the same
 * stop step, the largest any rank passed, and its signal; of two signalled
 * ranks the earlier signal wins, not the lower rank; a rank with bad
 * arguments gets CKPT_EINVAL and the others CKPT_EPEER, none is left
 * waiting.  In this process: nothing is recorded before a signal, a
 * raise()d signal is recorded with its time and the first one stays;
 * SIGTERM, SIGKILL or 0 as the stop signal is CKPT_EINVAL; handlers are
 * installed without SA_RESTART, and a second install moves the stop signal;
 * bad arguments and a failing collective are refused; a world above the
 * library's stack buffer (64 ranks) agrees too.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftrain/ckpt_stop.h"
#include "tap.h"

#define NRANKS 4
#define SLOT 64          /* bytes per rank in the shared buffer: room for a vote */
#define WAIT_SECONDS 30  /* a scenario whose ranks hang fails after this */

/* What each forked rank reports. */
typedef struct {
    int rc;
    int signo;
    int64_t stop_step;
} result_t;

typedef struct {
    pthread_barrier_t bar;
    unsigned char buf[NRANKS * SLOT];
    result_t out[NRANKS];
} shared_t;

typedef struct {
    shared_t *sh;
    int rank;
} rank_ctx_t;

static int shm_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    rank_ctx_t *r = ctx;
    if (bytes > SLOT)
        return -1; /* every rank passes the same size: all fail together */
    memcpy(r->sh->buf + (size_t)r->rank * bytes, send, bytes);
    pthread_barrier_wait(&r->sh->bar);
    memcpy(recv, r->sh->buf, bytes * NRANKS);
    pthread_barrier_wait(&r->sh->bar);
    return 0;
}

/* One scenario: each rank's step, the signal it raises (0: none) and
 * whether it raises it after the others have (a later time); bad_step
 * ranks pass -1, null_signo ranks a NULL signo. */
typedef struct {
    int64_t step[NRANKS];
    int raise_sig[NRANKS];
    int late[NRANKS];
    int null_signo[NRANKS];
} scenario_t;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void rank_main(shared_t *sh, int rank, const scenario_t *sc)
{
    rank_ctx_t ctx = {sh, rank};
    ckpt_coll_t coll = {&ctx, rank, NRANKS, shm_allgather, NULL};
    result_t *out = &sh->out[rank];
    out->rc = ckpt_stop_install(SIGUSR1);
    if (out->rc != CKPT_OK)
        _exit(1); /* the others then hang: the parent's deadline reports it */
    pthread_barrier_wait(&sh->bar);
    if (sc->raise_sig[rank] && !sc->late[rank])
        raise(sc->raise_sig[rank]);
    pthread_barrier_wait(&sh->bar);
    if (sc->raise_sig[rank] && sc->late[rank]) {
        sleep_ms(20); /* surely after the others' signals */
        raise(sc->raise_sig[rank]);
    }
    out->rc = ckpt_stop_agree(&coll, sc->step[rank], &out->stop_step,
                              sc->null_signo[rank] ? NULL : &out->signo);
    _exit(0);
}

/* Run a scenario on NRANKS processes; results in sh->out.  @return 1 when
 * every rank ended in time. */
static int run_ranks(shared_t *sh, const scenario_t *sc)
{
    pid_t pids[NRANKS];
    memset(sh->out, 0, sizeof sh->out);
    for (int r = 0; r < NRANKS; r++) {
        sh->out[r].stop_step = -99;
        sh->out[r].signo = -99;
    }
    fflush(stdout);
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            printf("Bail out! fork: %s\n", strerror(errno));
            exit(1);
        }
        if (pids[r] == 0)
            rank_main(sh, r, sc);
    }
    int ended = 0, all_ok = 1;
    time_t deadline = time(NULL) + WAIT_SECONDS;
    while (ended < NRANKS && time(NULL) < deadline) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p > 0) {
            ended++;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                all_ok = 0;
        } else {
            sleep_ms(10);
        }
    }
    if (ended < NRANKS) {
        for (int r = 0; r < NRANKS; r++)
            kill(pids[r], SIGKILL);
        while (waitpid(-1, NULL, 0) > 0) {
        }
        diag("%d of %d ranks still waiting after %d s", NRANKS - ended, NRANKS,
             WAIT_SECONDS);
        return 0;
    }
    return all_ok;
}

/* Does every rank report rc, step and signal? */
static int all_report(const shared_t *sh, int rc, int64_t step, int signo)
{
    int same = 1;
    for (int r = 0; r < NRANKS; r++) {
        const result_t *o = &sh->out[r];
        if (o->rc != rc || o->stop_step != step || o->signo != signo) {
            diag("rank %d: rc %d (%s), stop step %lld, signal %d", r, o->rc,
                 ckpt_strerror(o->rc), (long long)o->stop_step, o->signo);
            same = 0;
        }
    }
    return same;
}

static void test_ranks(void)
{
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    pthread_barrierattr_t attr;
    if (sh == MAP_FAILED || pthread_barrierattr_init(&attr) != 0 ||
        pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) != 0 ||
        pthread_barrier_init(&sh->bar, &attr, NRANKS) != 0) {
        printf("Bail out! cannot set up a process-shared barrier\n");
        exit(1);
    }

    scenario_t none = {.step = {10, 10, 10, 10}};
    ok(run_ranks(sh, &none) && all_report(sh, CKPT_OK, -1, 0),
       "%d ranks, none signalled: every rank gets stop step -1 and signal 0", NRANKS);

    scenario_t one = {.step = {10, 12, 10, 11}, .raise_sig = {0, 0, SIGUSR1, 0}};
    ok(run_ranks(sh, &one) && all_report(sh, CKPT_OK, 12, SIGUSR1),
       "only rank 2 signalled (USR1): every rank gets stop step 12 (the largest passed) "
       "and USR1");

    scenario_t lagging = {.step = {7, 7, 7, 5}, .raise_sig = {0, 0, 0, SIGTERM}};
    ok(run_ranks(sh, &lagging) && all_report(sh, CKPT_OK, 7, SIGTERM),
       "the signalled rank is behind (step 5 of 7): every rank stops at 7, signal TERM");

    scenario_t two = {.step = {20, 20, 20, 20},
                      .raise_sig = {0, SIGTERM, 0, SIGUSR1},
                      .late = {0, 1, 0, 0}};
    ok(run_ranks(sh, &two) && all_report(sh, CKPT_OK, 20, SIGUSR1),
       "rank 3 signalled (USR1) before rank 1 (TERM): every rank gets the earlier, USR1");

    scenario_t bad = {.step = {3, -1, 3, 3}, .raise_sig = {SIGUSR1, 0, 0, 0}};
    int ended = run_ranks(sh, &bad);
    ok(ended && sh->out[1].rc == CKPT_EINVAL && sh->out[0].rc == CKPT_EPEER &&
           sh->out[2].rc == CKPT_EPEER && sh->out[3].rc == CKPT_EPEER,
       "rank 1 passes step -1: it gets CKPT_EINVAL, the others CKPT_EPEER, none hangs");
    ok(ended && sh->out[0].stop_step == -1 && sh->out[0].signo == 0 &&
           sh->out[1].stop_step == -1,
       "  and no rank is told to stop (-1, signal 0)");

    scenario_t null_out = {.step = {4, 4, 4, 4}, .null_signo = {1, 0, 0, 0}};
    ended = run_ranks(sh, &null_out);
    ok(ended && sh->out[0].rc == CKPT_EINVAL && sh->out[1].rc == CKPT_EPEER &&
           sh->out[3].rc == CKPT_EPEER,
       "rank 0 passes a NULL signo: CKPT_EINVAL there, CKPT_EPEER elsewhere, none hangs");

    pthread_barrier_destroy(&sh->bar);
    munmap(sh, sizeof *sh);
}

/* ---- in this process -------------------------------------------------- */

static int failing_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    (void)ctx, (void)send, (void)recv, (void)bytes;
    return -1;
}

/* A world of ctx's size in one process: every rank's vote is this one's. */
static int copy_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    int size = *(const int *)ctx;
    for (int r = 0; r < size; r++)
        memcpy((unsigned char *)recv + (size_t)r * bytes, send, bytes);
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int has_our_handler(int sig)
{
    struct sigaction sa;
    return sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL &&
           sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART) &&
           !(sa.sa_flags & SA_SIGINFO);
}

static int default_action(int sig)
{
    struct sigaction sa;
    return sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL;
}

static void test_process(void)
{
    int64_t stop_step = 0;
    int signo = 0;
    is_int(ckpt_stop_requested(), 0, "before any signal: nothing requested");
    is_double(ckpt_stop_time(), 0, 0, "  and the time is 0");

    is_int(ckpt_stop_install(SIGTERM), CKPT_EINVAL, "install with SIGTERM as the stop signal: "
                                                    "CKPT_EINVAL");
    ok(strstr(ckpt_last_error(), "SIGUSR1 or SIGUSR2") != NULL, "  saying which are allowed (%s)",
       ckpt_last_error());
    is_int(ckpt_stop_install(SIGKILL), CKPT_EINVAL, "install with SIGKILL: CKPT_EINVAL");
    is_int(ckpt_stop_install(0), CKPT_EINVAL, "install with signal 0: CKPT_EINVAL");
    ok(default_action(SIGTERM) && default_action(SIGUSR1), "  nothing installed by them");

    is_int(ckpt_stop_install(SIGUSR1), CKPT_OK, "install with SIGUSR1");
    ok(has_our_handler(SIGUSR1) && has_our_handler(SIGTERM) && has_our_handler(SIGINT),
       "  USR1, TERM and INT have a handler, without SA_RESTART");
    ok(default_action(SIGUSR2), "  USR2 keeps its default action");

    is_int(ckpt_stop_agree(NULL, 5, &stop_step, &signo), CKPT_OK,
           "agree of a single process (coll NULL), no signal: CKPT_OK");
    ok(stop_step == -1 && signo == 0, "  stop step -1, signal 0 (got %lld, %d)",
       (long long)stop_step, signo);

    /* Bad arguments; the outputs say "no stop" afterwards. */
    is_int(ckpt_stop_agree(NULL, 5, NULL, &signo), CKPT_EINVAL, "agree with stop_step NULL: "
                                                               "CKPT_EINVAL");
    stop_step = 77;
    is_int(ckpt_stop_agree(NULL, 5, &stop_step, NULL), CKPT_EINVAL,
           "agree with signo NULL: CKPT_EINVAL");
    is_int(stop_step, -1, "  *stop_step is -1 after the failure");
    is_int(ckpt_stop_agree(NULL, -2, &stop_step, &signo), CKPT_EINVAL,
           "agree with step -2: CKPT_EINVAL");
    ckpt_coll_t no_gather = {NULL, 0, 2, NULL, NULL};
    is_int(ckpt_stop_agree(&no_gather, 5, &stop_step, &signo), CKPT_EINVAL,
           "agree with a collective without allgather: CKPT_EINVAL");
    ckpt_coll_t bad_rank = {NULL, 2, 2, failing_allgather, NULL};
    is_int(ckpt_stop_agree(&bad_rank, 5, &stop_step, &signo), CKPT_EINVAL,
           "agree as rank 2 of 2: CKPT_EINVAL");
    ckpt_coll_t no_world = {NULL, 0, 0, failing_allgather, NULL};
    is_int(ckpt_stop_agree(&no_world, 5, &stop_step, &signo), CKPT_EINVAL,
           "agree in a world of 0: CKPT_EINVAL");
    ckpt_coll_t failing = {NULL, 0, 2, failing_allgather, NULL};
    is_int(ckpt_stop_agree(&failing, 5, &stop_step, &signo), CKPT_EPEER,
           "agree whose allgather fails: CKPT_EPEER");
    ok(stop_step == -1 && signo == 0, "  stop step -1, signal 0");

    double before = now();
    raise(SIGUSR1);
    double after = now();
    is_int(ckpt_stop_requested(), SIGUSR1, "raise(SIGUSR1): requested is SIGUSR1");
    double when = ckpt_stop_time();
    ok(when >= before - 1e-3 && when <= after + 1e-3,
       "  its time is when it was raised (%.6f in [%.6f, %.6f])", when, before, after);

    raise(SIGTERM);
    is_int(ckpt_stop_requested(), SIGUSR1, "a later SIGTERM: the process lives on, the "
                                           "first signal (USR1) stays");
    is_double(ckpt_stop_time(), when, 0, "  and so does its time");

    is_int(ckpt_stop_agree(NULL, 9, &stop_step, &signo), CKPT_OK, "agree, single process, "
                                                                 "signalled");
    ok(stop_step == 9 && signo == SIGUSR1, "  stop step 9, signal USR1 (got %lld, %d)",
       (long long)stop_step, signo);

    int big = 100;
    ckpt_coll_t wide = {&big, 37, big, copy_allgather, NULL};
    is_int(ckpt_stop_agree(&wide, 11, &stop_step, &signo), CKPT_OK,
           "agree in a world of %d (votes on the heap)", big);
    ok(stop_step == 11 && signo == SIGUSR1, "  stop step 11, signal USR1");

    is_int(ckpt_stop_install(SIGUSR2), CKPT_OK, "install again with SIGUSR2");
    ok(has_our_handler(SIGUSR2) && default_action(SIGUSR1),
       "  USR2 has the handler, USR1 is back to its default action");
    is_int(ckpt_stop_requested(), SIGUSR1, "  the recorded signal stays");
}

int main(void)
{
    plan(39);
    test_ranks();
    test_process();
    return done_testing();
}
