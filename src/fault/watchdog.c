/*
 * watchdog.c - hang detection (watchdog.h): the phase marks, the limit,
 * the heartbeat files and the diagnosis of a hang.
 *
 * The training thread only takes a mutex to record its phase; the watchdog
 * thread wakes every TICK_S, writes this rank's heartbeat when one is due,
 * and compares the time in the current phase with its allowance.  A hang's
 * diagnosis reads every rank's heartbeat twice, WATCHDOG_LOOKS periods apart: a
 * heartbeat that did not change belongs to a rank that is stopped, dead or
 * cut off; among the live ones, the rank(s) furthest behind in (step,
 * phase) are the ones the others wait for.  The first rank named is the
 * culprit of the failure record (fault/failure.h) written before fire.
 * Each tick also asks the liveness ring (parallel/liveness.h) whether a
 * neighbour's process ended without a word: that rank is lost, named in a
 * failure record of kind peer_lost, and fire ends the job at once.
 */
#include "fault/watchdog.h"
#include "fault/failure.h"
#include "parallel/liveness.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How often the thread looks; a hang is seen at most this late. */
#define TICK_S 0.1
/* A look this much later than due means the whole process was not running
 * (SIGSTOP, `scontrol suspend`): that time is no rank's fault. */
#define STALL_S 2.0
/* The most watchdog_beat_now waits for the thread's write. */
#define BEAT_NOW_WAIT_S 1.0
#define HB_LINE_MAX 512
#define HB_PATH_MAX 4200
#define HB_MAGIC "ftrain-heartbeat 2"

/* One heartbeat as read back. */
typedef struct {
    int valid;
    int pid, phase;
    unsigned long long seq;
    long long step;
    double idle;             /* seconds in its phase when written */
    char host[64];
} beat_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    int running, stopping;
    watchdog_opts_t opts;
    watchdog_peer_t *peers;
    char dir[HB_PATH_MAX];
    double beat_s, look_s;   /* heartbeat period; the diagnosis' watch */
    /* What the training thread last recorded (under lock). */
    watchdog_phase_t phase;
    int64_t step;
    double since;
    double group_since;      /* when the load or save (or other phase) began */
    watchdog_seen_t seen;
    unsigned long long beats;
    atomic_uint beat_asked, beat_done; /* watchdog_beat_now's requests, met */
    char run_dir[HB_PATH_MAX]; /* "" : no failure record */
    failure_launch_t launch;   /* read from the environment at the start */
} wd = {.lock = PTHREAD_MUTEX_INITIALIZER};

static double max2(double a, double b) { return a > b ? a : b; }

double watchdog_allowance(watchdog_phase_t phase, double timeout_s, const watchdog_seen_t *seen)
{
    double longest = max2(seen->step_s, max2(seen->eval_s, seen->save_s));
    double limit = timeout_s > 0 ? timeout_s
                                 : max2(WATCHDOG_FLOOR_S, WATCHDOG_MULTIPLE * longest);
    switch (phase) {
    case WATCHDOG_START:
        return max2(limit, WATCHDOG_START_S);
    case WATCHDOG_LOAD:
    case WATCHDOG_LOAD_SYNC: /* a given limit holds; the derived one knows no load */
        return timeout_s > 0 ? limit : max2(limit, WATCHDOG_START_S);
    case WATCHDOG_EVAL:
        return max2(limit, seen->eval_s < 0 ? WATCHDOG_FIRST_S
                                            : WATCHDOG_MULTIPLE * seen->eval_s);
    case WATCHDOG_SAVE:
    case WATCHDOG_SAVE_SYNC:
        return max2(limit, seen->save_s < 0 ? WATCHDOG_FIRST_S
                                            : WATCHDOG_MULTIPLE * seen->save_s);
    case WATCHDOG_FINISH:
        return max2(limit, WATCHDOG_FINISH_S);
    default:
        return limit;
    }
}

double watchdog_stop_allowance(watchdog_phase_t phase, double timeout_s,
                               const watchdog_seen_t *seen)
{
    double limit = watchdog_allowance(phase, timeout_s, seen);
    /* Before a step is measured (a slow first step, a warm-up) nothing
     * says how long the others may legitimately take. */
    if ((phase != WATCHDOG_CONTROL && phase != WATCHDOG_REDUCE) || seen->step_s < 0)
        return limit;
    double stop = max2(WATCHDOG_STOP_FLOOR_S, WATCHDOG_MULTIPLE * seen->step_s);
    return stop < limit ? stop : limit;
}

double watchdog_beat_period(double timeout_s)
{
    double limit = timeout_s > 0 ? timeout_s : WATCHDOG_FLOOR_S;
    double beat = limit / WATCHDOG_BEATS_PER_LIMIT;
    return beat < WATCHDOG_BEAT_MIN_S ? WATCHDOG_BEAT_MIN_S
           : beat > WATCHDOG_BEAT_MAX_S ? WATCHDOG_BEAT_MAX_S
                                        : beat;
}

const char *watchdog_phase_text(watchdog_phase_t phase, int64_t step, char *buf, size_t cap)
{
    static const char *const what[WATCHDOG_PHASES] = {
        "start-up", "checkpoint load", "wait for the other ranks' checkpoint load",
        "computation", "control reduction", "gradient allreduce", "update",
        "evaluation after", "checkpoint save", "checkpoint commit", "end",
    };
    long long s = (long long)step;
    if (phase < 0 || phase >= WATCHDOG_PHASES)
        snprintf(buf, cap, "an unknown phase %d of step %lld", (int)phase, s);
    else if (phase <= WATCHDOG_LOAD_SYNC || phase == WATCHDOG_FINISH)
        snprintf(buf, cap, "the %s", what[phase]);
    else if (phase == WATCHDOG_EVAL)
        snprintf(buf, cap, "the %s step %lld", what[phase], s);
    else
        snprintf(buf, cap, "the %s of step %lld", what[phase], s);
    return buf;
}

/* ---- marks (the training thread) ---------------------------------------- */

void watchdog_phase(watchdog_phase_t phase, int64_t step)
{
    pthread_mutex_lock(&wd.lock);
    if (wd.running) {
        double now = util_mono_s();
        /* A load or save is measured whole: its wait for the others
         * continues it (and is progress: the idle time starts anew). */
        int continues = (phase == WATCHDOG_SAVE_SYNC && wd.phase == WATCHDOG_SAVE) ||
                        (phase == WATCHDOG_LOAD_SYNC && wd.phase == WATCHDOG_LOAD);
        if (!continues) {
            /* What the phase that ends took feeds the derived limit. */
            double took = now - wd.group_since;
            double *longest = wd.phase == WATCHDOG_EVAL ? &wd.seen.eval_s
                              : wd.phase == WATCHDOG_SAVE || wd.phase == WATCHDOG_SAVE_SYNC
                                  ? &wd.seen.save_s
                              : wd.phase >= WATCHDOG_COMPUTE && wd.phase <= WATCHDOG_UPDATE
                                  ? &wd.seen.step_s
                                  : NULL;
            if (longest && took > *longest)
                *longest = took;
            wd.group_since = now;
        }
        wd.phase = phase;
        wd.step = step;
        wd.since = now;
    }
    pthread_mutex_unlock(&wd.lock);
}

void watchdog_where(watchdog_phase_t *phase, int64_t *step)
{
    pthread_mutex_lock(&wd.lock);
    *phase = wd.running ? wd.phase : WATCHDOG_START;
    *step = wd.running ? wd.step : 0;
    pthread_mutex_unlock(&wd.lock);
}

/* ---- heartbeats ------------------------------------------------------------ */

static void beat_path(char *path, size_t cap, int rank, const char *suffix)
{
    snprintf(path, cap, "%s/rank-%d%s", wd.dir, rank, suffix);
}

/* Heartbeats that fail this many times in a row are said to be off: the
 * first ones may come before rank 0 has made the run directory. */
#define BEAT_FAILS_TO_WARN 5

/* Count a heartbeat written (ok) or not (errno err), and say once when
 * they keep failing: without them the next launch cannot tell which rank
 * went silent first (README, "Hangs and dead ranks"). */
static void beat_failed(int ok, int err)
{
    static int fails, warned;
    fails = ok ? 0 : fails + 1;
    if (fails < BEAT_FAILS_TO_WARN || warned)
        return;
    warned = 1;
    fprintf(stderr, "ftrain: warning: rank %d: cannot write heartbeats in '%s' (%s): a "
            "relaunch after a failure cannot name the rank that went silent first\n",
            wd.opts.rank, wd.dir, strerror(err));
}

/* Write this rank's heartbeat (a new file renamed over the old one, so a
 * reader never sees half of one).  Until the run directory exists the
 * directory cannot be made: try again next time. */
static void write_beat(watchdog_phase_t phase, int64_t step, double idle)
{
    char line[HB_LINE_MAX], tmp[HB_PATH_MAX + 16], path[HB_PATH_MAX + 16];
    int rank = wd.opts.rank;
    int n = snprintf(line, sizeof line,
                     HB_MAGIC " token %016llx rank %d pid %d seq %llu phase %d step %lld "
                     "idle %.3f host %s\n",
                     (unsigned long long)wd.opts.token, rank, (int)getpid(), ++wd.beats,
                     (int)phase, (long long)step, idle,
                     wd.peers ? wd.peers[rank].host : "?");
    beat_path(tmp, sizeof tmp, rank, ".new");
    beat_path(path, sizeof path, rank, "");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    /* Another rank may make the directory first: that is as good. */
    if (fd < 0 && errno == ENOENT && (mkdir(wd.dir, 0755) == 0 || errno == EEXIST))
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = fd >= 0 && write(fd, line, (size_t)n) == n;
    int saved = errno;
    if (fd >= 0 && (close(fd) != 0 || !ok || rename(tmp, path) != 0))
        ok = 0, saved = errno;
    beat_failed(ok, saved);
}

/* Parse one heartbeat line into b (b->valid: it parsed); its token into
 * *token. */
static void parse_beat(const char *line, beat_t *b, unsigned long long *token, int *rank)
{
    b->valid = sscanf(line, HB_MAGIC " token %llx rank %d pid %d seq %llu phase %d step %lld "
                      "idle %lf host %63s", token, rank, &b->pid, &b->seq, &b->phase, &b->step,
                      &b->idle, b->host) == 8;
}

/* Read a heartbeat file's one line; 0 when it cannot be read. */
static int read_line(const char *path, char *line, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int got = fgets(line, (int)cap, f) != NULL;
    fclose(f);
    return got;
}

static void read_beat(int rank, beat_t *b)
{
    char path[HB_PATH_MAX + 16], line[HB_LINE_MAX];
    memset(b, 0, sizeof *b);
    beat_path(path, sizeof path, rank, "");
    unsigned long long token = 0;
    int r = -1;
    if (read_line(path, line, sizeof line)) {
        parse_beat(line, b, &token, &r);
        b->valid = b->valid && token == wd.opts.token && r == rank; /* not an earlier job's */
    }
}

/* ---- an earlier run's heartbeats ------------------------------------------------ */

/* The last step a rank in phase at step had finished: a step's computation
 * and reductions are still part of it; its update onwards is past it. */
static int64_t step_done(int phase, int64_t step)
{
    return phase >= WATCHDOG_COMPUTE && phase <= WATCHDOG_REDUCE ? step - 1 : step;
}

/* One leftover file: fold it into out. */
static void fold_leftover(const char *path, watchdog_leftover_t *out)
{
    char line[HB_LINE_MAX];
    struct stat st;
    beat_t b = {0};
    unsigned long long token;
    int rank = -1;
    if (!read_line(path, line, sizeof line) || stat(path, &st) != 0)
        return;
    parse_beat(line, &b, &token, &rank);
    if (!b.valid || rank < 0)
        return;
    double when = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
    int64_t done = step_done(b.phase, b.step);
    if (out->ranks == 0 || done > out->step_done)
        out->step_done = done;
    if (out->ranks == 0 || when < out->first_silent) {
        out->first_silent = when;
        out->first_rank = rank;
        out->first_pid = b.pid;
        snprintf(out->first_host, sizeof out->first_host, "%s", b.host);
    }
    if (out->ranks == 0 || when > out->last_silent)
        out->last_silent = when;
    out->ranks++;
}

int watchdog_leftovers(const char *dir, watchdog_leftover_t *out)
{
    memset(out, 0, sizeof *out);
    DIR *d = dir && dir[0] ? opendir(dir) : NULL;
    if (!d)
        return WATCHDOG_OK;
    struct dirent *e;
    char path[HB_PATH_MAX + 300];
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "rank-", 5) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!strstr(e->d_name, ".new"))
            fold_leftover(path, out);
        unlink(path);
    }
    closedir(d);
    return WATCHDOG_OK;
}

/* ---- the diagnosis --------------------------------------------------------- */

/* Append a formatted line to the report. */
__attribute__((format(printf, 3, 4)))
static void add(char *report, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(report);
    if (len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(report + len, cap - len, fmt, ap);
    va_end(ap);
}

static const char *host_of(int rank, const beat_t *b)
{
    if (b && b->valid)
        return b->host;
    return wd.peers ? wd.peers[rank].host : "?";
}

static int pid_of(int rank, const beat_t *b)
{
    if (b && b->valid)
        return b->pid;
    return wd.peers ? wd.peers[rank].pid : 0;
}

/* (step, phase) as one number: who is furthest behind. */
static long long position(long long step, int phase)
{
    return step * WATCHDOG_PHASES + phase;
}

/* The rank a hang points at (the first one its report names), for the
 * failure record; gone when its process is known to have ended. */
typedef struct {
    int rank; /* FAILURE_NO_RANK: none named */
    char host[64];
    int gone;
} culprit_t;

static void name_culprit(culprit_t *c, int rank, const char *host, int gone)
{
    if (c->rank != FAILURE_NO_RANK)
        return;
    c->rank = rank;
    snprintf(c->host, sizeof c->host, "%s", host);
    c->gone = gone;
}

/* 1 when a silent peer's process is known to be gone: it ran on this
 * rank's host (its pids are ours to ask) and no process has its pid any
 * more.  0 when it is alive, on another host, or unknown: only a fact
 * this host can check turns a hang into a lost peer. */
static int peer_gone(const char *host, int pid)
{
    const char *mine = wd.peers ? wd.peers[wd.opts.rank].host : NULL;
    if (pid <= 0 || !mine || strcmp(host, mine) != 0)
        return 0;
    return kill((pid_t)pid, 0) == -1 && errno == ESRCH;
}

/* Name the ranks whose heartbeat stopped (first[] and then[] were read
 * wd.look_s apart) and, among the others, those furthest behind; the
 * first one named into *culprit.  @return how many ranks were named. */
static int name_ranks(const beat_t *first, const beat_t *then, long long mine, char *report,
                      size_t cap, culprit_t *culprit)
{
    int named = 0, size = wd.opts.size;
    long long low = mine, high = mine;
    char where[128];
    for (int r = 0; r < size; r++) {
        if (r == wd.opts.rank)
            continue;
        const beat_t *b = &then[r];
        if (!b->valid) {
            int gone = peer_gone(host_of(r, NULL), pid_of(r, NULL));
            add(report, cap, "ftrain: hang: rank %d (host %s, pid %d) left no heartbeat: %s\n",
                r, host_of(r, NULL), pid_of(r, NULL),
                gone ? "its process is gone (no such pid on this host)"
                     : "it never got this far, or it is gone");
            name_culprit(culprit, r, host_of(r, NULL), gone);
            named++;
        } else if (!first[r].valid || first[r].seq == b->seq) {
            int gone = peer_gone(b->host, b->pid);
            add(report, cap, "ftrain: hang: rank %d (host %s, pid %d) stopped making "
                "progress: its heartbeat has not changed for %.1f s (%s); its last heartbeat "
                "had it in %s\n", r, b->host, b->pid, wd.look_s,
                gone ? "its process is gone: no such pid on this host"
                     : "the process is stopped, dead or cut off",
                watchdog_phase_text((watchdog_phase_t)b->phase, b->step, where, sizeof where));
            name_culprit(culprit, r, b->host, gone);
            named++;
        } else {
            long long p = position(b->step, b->phase);
            low = p < low ? p : low;
            high = p > high ? p : high;
        }
    }
    if (named || low == high)
        return named;
    for (int r = 0; r < size; r++) {
        const beat_t *b = &then[r];
        long long p = r == wd.opts.rank ? mine : b->valid ? position(b->step, b->phase) : high;
        if (p != low || (r != wd.opts.rank && first[r].seq == b->seq))
            continue;
        int phase = (int)(p % WATCHDOG_PHASES);
        add(report, cap, "ftrain: hang: rank %d (host %s, pid %d) is behind the others, "
            "stuck in %s\n", r, host_of(r, r == wd.opts.rank ? NULL : b),
            pid_of(r, r == wd.opts.rank ? NULL : b),
            watchdog_phase_text((watchdog_phase_t)phase, p / WATCHDOG_PHASES, where,
                                sizeof where));
        name_culprit(culprit, r, host_of(r, r == wd.opts.rank ? NULL : b), 0);
        named++;
    }
    return named;
}

/* The report of a hang in phase/step after idle seconds (limit allowed),
 * and the rank it points at into *culprit. */
static void diagnose(watchdog_phase_t phase, int64_t step, double idle, double limit,
                     char *report, size_t cap, culprit_t *culprit)
{
    char where[128];
    int me = wd.opts.rank;
    report[0] = '\0';
    add(report, cap, "ftrain: hang: rank %d (host %s, pid %d) made no progress for %.1f s "
        "(limit %.1f s) in %s\n", me, host_of(me, NULL), (int)getpid(), idle, limit,
        watchdog_phase_text(phase, step, where, sizeof where));
    if (!wd.dir[0] || wd.opts.size <= 1) {
        if (wd.opts.size > 1)
            add(report, cap, "ftrain: hang: which rank stopped is unknown: heartbeats need "
                "--run-dir\n");
        return;
    }
    beat_t *first = calloc((size_t)wd.opts.size, sizeof *first);
    beat_t *then = calloc((size_t)wd.opts.size, sizeof *then);
    if (!first || !then) {
        free(first);
        free(then);
        return;
    }
    for (int r = 0; r < wd.opts.size; r++)
        read_beat(r, &first[r]);
    /* Keep beating while watching the others, so that they see us alive. */
    for (double end = util_mono_s() + wd.look_s; util_mono_s() < end;) {
        write_beat(phase, step, idle);
        struct timespec pause = {(time_t)wd.beat_s,
                                 (long)((wd.beat_s - (double)(time_t)wd.beat_s) * 1e9)};
        nanosleep(&pause, NULL);
    }
    for (int r = 0; r < wd.opts.size; r++)
        read_beat(r, &then[r]);
    if (!name_ranks(first, then, position(step, phase), report, cap, culprit))
        add(report, cap, "ftrain: hang: every rank is alive and at the same point: that phase "
            "is slower than the limit on every rank, or the communication itself is stuck "
            "(network, MPI or NCCL)\n");
    free(first);
    free(then);
}

/* The most the hang's verdict waits for its failure record: a hang may be
 * the shared file system's, and the job must end all the same. */
#define RECORD_WAIT_S 5.0

/* The hang's failure record, handed to the thread that writes it. */
static struct {
    failure_t rec;
    char err[512];
    atomic_int done;
} hang_rec;

static void *record_writer(void *unused)
{
    (void)unused;
    if (failure_write(wd.run_dir, &hang_rec.rec, hang_rec.err, sizeof hang_rec.err) !=
        FAILURE_OK)
        fprintf(stderr, "ftrain: warning: rank %d: %s\n", wd.opts.rank, hang_rec.err);
    atomic_store(&hang_rec.done, 1);
    return NULL;
}

/* Write the hang's failure record (kind "hang", or "peer_lost" when the
 * culprit the report named is known to be gone) into the run directory,
 * on a thread of its own, waiting at most
 * RECORD_WAIT_S for it; a record that cannot be written is said on stderr,
 * and the hang is ended all the same. */
static void write_hang_record(watchdog_phase_t phase, int64_t step, const culprit_t *culprit,
                              const char *report)
{
    if (!wd.run_dir[0])
        return;
    failure_t *rec = &hang_rec.rec;
    failure_init(rec, culprit->gone ? FAILURE_PEER_LOST : FAILURE_HANG, wd.opts.rank);
    rec->launch = wd.launch;
    if (wd.peers)
        snprintf(rec->host, sizeof rec->host, "%s", wd.peers[wd.opts.rank].host);
    rec->step = step;
    rec->phase = phase;
    rec->culprit_rank = culprit->rank;
    snprintf(rec->culprit_host, sizeof rec->culprit_host, "%s", culprit->host);
    failure_set_message(rec, report);
    pthread_t writer;
    if (pthread_create(&writer, NULL, record_writer, NULL) != 0) {
        record_writer(NULL);
        return;
    }
    pthread_detach(writer);
    struct timespec tick = {0, (long)(TICK_S * 1e9)};
    for (double end = util_mono_s() + RECORD_WAIT_S;
         !atomic_load(&hang_rec.done) && util_mono_s() < end;)
        nanosleep(&tick, NULL);
}

/* A neighbour in the liveness ring ended without a goodbye: report it,
 * write its peer_lost record and fire. */
static void peer_lost(int lost, watchdog_phase_t phase, int64_t step)
{
    static char report[WATCHDOG_REPORT_MAX];
    char where[128];
    culprit_t culprit = {.rank = FAILURE_NO_RANK};
    int pid = wd.peers ? wd.peers[lost].pid : 0;
    report[0] = '\0';
    add(report, sizeof report, "ftrain: peer lost: rank %d (host %s, pid %d) is gone: %s "
        "(killed, crashed, or its node lost); rank %d (host %s) was in %s\n", lost,
        host_of(lost, NULL), pid, liveness_how(), wd.opts.rank, host_of(wd.opts.rank, NULL),
        watchdog_phase_text(phase, step, where, sizeof where));
    name_culprit(&culprit, lost, host_of(lost, NULL), 1);
    if (wd.dir[0]) /* alive until now: the next launch sees who went silent first */
        write_beat(phase, step, 0);
    write_hang_record(phase, step, &culprit, report);
    wd.opts.fire(report, wd.opts.arg);
}

/* ---- the thread -------------------------------------------------------------- */

static void *watch(void *unused)
{
    (void)unused;
    double last_beat = 0, last_look = util_mono_s();
    pthread_mutex_lock(&wd.lock);
    while (!wd.stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)(TICK_S * 1e9);
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&wd.wake, &wd.lock, &until);
        if (wd.stopping)
            break;
        double now = util_mono_s();
        if (now - last_look > TICK_S + STALL_S) { /* suspended: a fresh allowance */
            wd.since += now - last_look - TICK_S;
            wd.group_since += now - last_look - TICK_S;
        }
        last_look = now;
        watchdog_phase_t phase = wd.phase;
        int64_t step = wd.step;
        double idle = now - wd.since;
        int stopping = wd.opts.stop_requested && wd.opts.stop_requested();
        /* wd.seen is the training thread's (watchdog_phase): read it only
         * here, under the lock, for the report too. */
        double full = watchdog_allowance(phase, wd.opts.timeout_s, &wd.seen);
        double limit = stopping ? watchdog_stop_allowance(phase, wd.opts.timeout_s, &wd.seen)
                                : full;
        pthread_mutex_unlock(&wd.lock);
        unsigned asked = atomic_load(&wd.beat_asked);
        if (wd.dir[0] && (now - last_beat >= wd.beat_s || asked != atomic_load(&wd.beat_done))) {
            write_beat(phase, step, idle);
            last_beat = now;
            atomic_store(&wd.beat_done, asked);
        }
        int lost = liveness_lost();
        if (lost >= 0 && lost < wd.opts.size) {
            peer_lost(lost, phase, step); /* ends the job; if not, we are done */
            return NULL;
        }
        if (wd.opts.timeout_s != 0 && idle > limit) {
            static char report[WATCHDOG_REPORT_MAX];
            culprit_t culprit = {.rank = FAILURE_NO_RANK};
            diagnose(phase, step, idle, limit, report, sizeof report, &culprit);
            if (stopping && limit < full)
                add(report, sizeof report, "ftrain: hang: a stop signal came while this rank "
                    "waited: a rank that is dead or stopped cannot take part in the stop, so "
                    "the limit was %.1f s\n", limit);
            write_hang_record(phase, step, &culprit, report);
            wd.opts.fire(report, wd.opts.arg); /* ends the job; if not, we are done */
            return NULL;
        }
        pthread_mutex_lock(&wd.lock);
    }
    pthread_mutex_unlock(&wd.lock);
    return NULL;
}

int watchdog_start(const watchdog_opts_t *opts, char *err, size_t cap)
{
    if (wd.running) {
        snprintf(err, cap, "watchdog: already started");
        return WATCHDOG_EFAIL;
    }
    wd.opts = *opts;
    wd.peers = NULL;
    if (opts->peers && (wd.peers = malloc((size_t)opts->size * sizeof *wd.peers)))
        memcpy(wd.peers, opts->peers, (size_t)opts->size * sizeof *wd.peers);
    wd.opts.peers = wd.peers;
    wd.dir[0] = '\0';
    if (opts->heartbeat_dir && opts->heartbeat_dir[0])
        snprintf(wd.dir, sizeof wd.dir, "%s", opts->heartbeat_dir);
    wd.beat_s = watchdog_beat_period(opts->timeout_s);
    wd.look_s = WATCHDOG_LOOKS * wd.beat_s;
    wd.run_dir[0] = '\0';
    if (opts->run_dir && opts->run_dir[0])
        snprintf(wd.run_dir, sizeof wd.run_dir, "%s", opts->run_dir);
    failure_launch_from_env(&wd.launch);
    wd.phase = WATCHDOG_START;
    wd.step = 0;
    wd.since = util_mono_s();
    wd.group_since = wd.since;
    wd.seen = (watchdog_seen_t){-1, -1, -1};
    wd.stopping = 0;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&wd.wake, &attr);
    pthread_condattr_destroy(&attr);
    int rc = pthread_create(&wd.thread, NULL, watch, NULL);
    if (rc != 0) {
        snprintf(err, cap, "watchdog: cannot start its thread: %s", strerror(rc));
        free(wd.peers);
        wd.peers = NULL;
        return WATCHDOG_EFAIL;
    }
    wd.running = 1;
    return WATCHDOG_OK;
}

void watchdog_beat_now(void)
{
    pthread_mutex_lock(&wd.lock);
    int on = wd.running && wd.dir[0];
    unsigned want = on ? atomic_fetch_add(&wd.beat_asked, 1) + 1 : 0;
    pthread_cond_signal(&wd.wake);
    pthread_mutex_unlock(&wd.lock);
    struct timespec ms = {0, 1000000};
    for (double end = util_mono_s() + BEAT_NOW_WAIT_S;
         on && (int)(atomic_load(&wd.beat_done) - want) < 0 && util_mono_s() < end;)
        nanosleep(&ms, NULL);
}

void watchdog_stop(void)
{
    pthread_mutex_lock(&wd.lock);
    int running = wd.running;
    wd.stopping = 1;
    wd.running = 0;
    pthread_cond_signal(&wd.wake);
    pthread_mutex_unlock(&wd.lock);
    if (!running)
        return;
    pthread_join(wd.thread, NULL);
    pthread_cond_destroy(&wd.wake);
    if (wd.dir[0]) {
        char path[HB_PATH_MAX + 16];
        beat_path(path, sizeof path, wd.opts.rank, "");
        unlink(path);
        rmdir(wd.dir); /* the last rank out removes it; the others fail, harmlessly */
    }
    free(wd.peers);
    wd.peers = NULL;
}
