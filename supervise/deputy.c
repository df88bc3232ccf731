/*
 * deputy.c - ftrain-supervise --deputy: watch the supervisor's heartbeat,
 * and requeue the job when the batch host is lost (deputy.h).
 *
 * Invariants:
 *   - every decision is supervise_deputy_decide's, on facts only: the
 *     heartbeat file's fields, SLURM's fixed-format records (JobState,
 *     Restarts, BatchHost, the batch host's State), exit statuses;
 *   - SLURM is asked only once the heartbeat is silent past the bound, at
 *     most every DEPUTY_ASK_S, each call bounded by --slurm-timeout;
 *   - it acts (requeue, cancel) only when SLURM says the job still runs this
 *     restart on this batch host and that host is DOWN or not responding;
 *   - it never touches the node-local tier: the nodes left hold the partner
 *     copies the next launch resumes from.
 */
#include "supervise/deputy.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervise/beat.h"
#include "supervise/log.h"
#include "supervise/policy.h"
#include "supervise/proc.h"
#include "supervise/slurm_real.h"
#include "util/util.h"

const char deputy_usage[] =
    "usage: ftrain-supervise --deputy --heartbeat FILE --watch NODE --job REF --restart N\n"
    "           [--max-restarts N] [--stale SECONDS] [--slurm-timeout SECONDS]\n"
    "           [--requeue-exclude 0|1] [--log-name NAME] [--log-job REF]\n"
    "           [--job-output FILE]\n"
    "(started by ftrain-supervise itself as a step on another node; see\n"
    "ftrain-supervise(1) and docs/supervisor.md)\n";

static volatile sig_atomic_t got_term;

static void on_term(int sig)
{
    (void)sig;
    got_term = 1;
}

typedef struct {
    const char *heartbeat, *watch, *job, *log_job, *log_name, *job_output;
    long long restart, max_restarts;
    int stale, slurm_timeout, requeue_exclude;
} deputy_args_t;

/* Parse a whole number from lo to hi.  @return 0 or -1. */
static int number(const char *s, long long lo, long long hi, long long *out)
{
    if (!s || !*s || strlen(s) > 10 || strspn(s, "0123456789") != strlen(s))
        return -1;
    long long v = strtoll(s, NULL, 10);
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, deputy_args_t *a, char *err, size_t cap)
{
    memset(a, 0, sizeof *a);
    a->max_restarts = 20;
    a->stale = 60;
    a->slurm_timeout = 20;
    a->log_name = "ftrain-supervise";
    a->restart = -1;
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n = 0;
        if (!v)
            return util_fail(err, cap, -1, "deputy: option %s needs a value", o);
        i++;
        if (strcmp(o, "--heartbeat") == 0)
            a->heartbeat = v;
        else if (strcmp(o, "--watch") == 0)
            a->watch = v;
        else if (strcmp(o, "--job") == 0)
            a->job = v;
        else if (strcmp(o, "--log-job") == 0)
            a->log_job = v;
        else if (strcmp(o, "--job-output") == 0)
            a->job_output = v;
        else if (strcmp(o, "--log-name") == 0)
            a->log_name = v;
        else if (strcmp(o, "--restart") == 0 && number(v, 0, 999999999, &n) == 0)
            a->restart = n;
        else if (strcmp(o, "--max-restarts") == 0 && number(v, 0, 999999999, &n) == 0)
            a->max_restarts = n;
        else if (strcmp(o, "--stale") == 0 && number(v, 1, 99999, &n) == 0)
            a->stale = (int)n;
        else if (strcmp(o, "--slurm-timeout") == 0 && number(v, 1, 99999, &n) == 0)
            a->slurm_timeout = (int)n;
        else if (strcmp(o, "--requeue-exclude") == 0 && number(v, 0, 1, &n) == 0)
            a->requeue_exclude = (int)n;
        else
            return util_fail(err, cap, -1, "deputy: bad option or value: %s %s", o, v);
    }
    if (!a->heartbeat || !a->watch || !a->job || a->restart < 0 || !*a->watch ||
        strlen(a->watch) >= SV_NAME_MAX || !*a->job || strlen(a->job) >= 2 * SV_NAME_MAX)
        return util_fail(err, cap, -1,
                         "deputy: --heartbeat, --watch, --job and --restart are needed");
    return 0;
}

/* Read the heartbeat file into line.  @return 0 when it holds a valid line. */
static int read_beat(const char *path, sv_beat_line_t *line)
{
    char buf[BEAT_LINE_LEN * 2];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return beat_parse(buf, line);
}

/* Ask SLURM about the job and the watched host into in. */
static void ask(sv_slurm_real_t *r, const deputy_args_t *a, sv_deputy_input_t *in,
                char *err, size_t cap)
{
    sv_job_facts_t f;
    unsigned flags = 0;
    in->asked = 1;
    in->answered = 0;
    if (slurm_job_facts(r, a->job, &f, err, cap) != SV_SLURM_OK)
        return;
    in->job_running = strcmp(f.state, "RUNNING") == 0;
    in->job_restarts = f.restarts < 0 ? 0 : f.restarts; /* the first run says 0 */
    snprintf(in->batch_host, sizeof in->batch_host, "%s", f.batch_host);
    if (in->job_running && slurm_node_flags(r, a->watch, &flags, err, cap) != SV_SLURM_OK)
        return;
    in->host_state = flags;
    in->answered = 1;
}

/* The batch host is lost, and with it the srun that carried this step's
 * output: from now on the lines go straight into the job's output file
 * (appended; no other writer is left on it). */
static void direct(const deputy_args_t *a)
{
    static int done;
    if (done || !a->job_output || !*a->job_output)
        return;
    done = 1;
    int fd = open(a->job_output, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0)
        sv_log_to(fd);
}

/* The deputy's state between its looks. */
typedef struct {
    const deputy_args_t *a;
    const char *me;             /* this node's name, for the log */
    sv_slurm_real_t real;
    sv_slurm_t slurm;
    sv_deputy_input_t in;
    double last_change, next_ask;
    uint64_t seq;               /* the heartbeat's counter last seen */
    int have_seq, rounds;       /* rounds: requeues tried */
    sv_deputy_rule_t said;      /* the last rule logged in this silence */
    char err[1024];
} deputy_t;

/* Read the supervisor's heartbeat into w->in: its state, its restart, and
 * how long its counter has not moved. */
static void observe(deputy_t *w, double now)
{
    sv_beat_line_t line;
    w->in.beat = SV_BEAT_NONE;
    w->in.beat_restart = -1;
    if (read_beat(w->a->heartbeat, &line) == 0 && strcmp(line.job, w->a->job) == 0) {
        w->in.beat = line.state;
        w->in.beat_restart = line.restart;
        if (line.restart == w->a->restart && (!w->have_seq || line.seq != w->seq)) {
            w->have_seq = 1;
            w->seq = line.seq;
            w->last_change = now;
        }
    }
    w->in.silent_s = now - w->last_change;
    w->in.asked = 0;
}

/* The heartbeat is silent: ask SLURM (at most every DEPUTY_ASK_S) and
 * decide again with its answer, each answer logged once per silence.
 * @return 0 when it asked (d holds the new decision), 1 when not yet due. */
static int ask_slurm(deputy_t *w, double now, sv_deputy_decision_t *d)
{
    if (now < w->next_ask)
        return 1;
    if (w->said != SV_DRULE_ASK)
        sv_log("deputy on %s: %s", w->me, d->reason);
    w->said = SV_DRULE_ASK;
    ask(&w->real, w->a, &w->in, w->err, sizeof w->err);
    w->next_ask = util_mono_s() + DEPUTY_ASK_S;
    supervise_deputy_decide(&w->in, d);
    if ((d->rule == SV_DRULE_NO_ANSWER || d->rule == SV_DRULE_HOST_ALIVE) && w->said != d->rule) {
        if (d->rule == SV_DRULE_NO_ANSWER)
            sv_log("deputy on %s: SLURM did not answer (%s): asking again every %.0f s", w->me,
                   w->err, DEPUTY_ASK_S);
        else
            sv_log("deputy on %s: %s", w->me, d->reason);
        w->said = d->rule;
    }
    return 0;
}

/* Requeue the job (the batch host is lost).  @return the deputy's exit
 * status, or -1 to try again later. */
static int requeue_job(deputy_t *w, const sv_deputy_decision_t *d)
{
    direct(w->a);
    sv_log("deputy on %s: %s; the next run resumes from the newest checkpoint (the "
           "node-local tier's copies on the nodes left, else RUN_DIR/ckpt)",
           w->me, d->reason);
    int rc = w->slurm.ops->requeue(w->slurm.ctx, w->a->job, d->exclude, d->n_exclude, w->err,
                                   sizeof w->err);
    if (rc >= 0) {
        if (rc > 0)
            sv_log("deputy on %s: warning: %s", w->me, w->err);
        sv_log("deputy on %s: requeued job %s", w->me, w->a->job);
        proc_sleep(30, &got_term);
        return 0;
    }
    sv_log("deputy on %s: error: scontrol requeue %s failed (%s)%s", w->me, w->a->job, w->err,
           ++w->rounds < DEPUTY_REQUEUE_ROUNDS ? ": trying again in 30 s"
                                               : ": giving up; cancel the job by hand");
    if (w->rounds >= DEPUTY_REQUEUE_ROUNDS)
        return 1;
    w->next_ask = util_mono_s() + 30;
    return -1;
}

/* Carry out d.  @return the deputy's exit status, or -1 to look again. */
static int act(deputy_t *w, const sv_deputy_decision_t *d)
{
    switch (d->action) {
    case SV_DEPUTY_WATCH:
    case SV_DEPUTY_ASK:
        return -1;
    case SV_DEPUTY_EXIT:
        if (d->rule != SV_DRULE_SUPERVISOR_ENDED)
            sv_log("deputy on %s: %s: leaving", w->me, d->reason);
        return 0;
    case SV_DEPUTY_REQUEUE:
        return requeue_job(w, d);
    case SV_DEPUTY_END:
        direct(w->a);
        sv_log("deputy on %s: %s", w->me, d->reason);
        if (slurm_cancel(&w->real, w->a->job, w->err, sizeof w->err) != SV_SLURM_OK) {
            sv_log("deputy on %s: error: scancel %s failed (%s); cancel it by hand", w->me,
                   w->a->job, w->err);
            return 1;
        }
        proc_sleep(30, &got_term);
        return 0;
    }
    return -1;
}

/* The signals: TERM and INT end the deputy (a flag), the stop warnings and
 * SIGPIPE are ignored. */
static void deputy_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
}

int deputy_main(int argc, char **argv)
{
    static deputy_t w;
    deputy_args_t a;
    const char *me = getenv("SLURMD_NODENAME");
    me = me && *me ? me : "this node";
    if (parse_args(argc, argv, &a, w.err, sizeof w.err) != 0) {
        fprintf(stderr, "ftrain-supervise: %s\n%s", w.err, deputy_usage);
        return 2;
    }
    sv_log_init(a.log_name, a.log_job ? a.log_job : a.job);
    deputy_signals();
    w.a = &a;
    w.me = me;
    w.real = (sv_slurm_real_t){.timeout_s = a.slurm_timeout, .requeue_pause_s = 5};
    w.slurm = sv_slurm_real(&w.real);
    sv_log("deputy on %s: watching the supervisor on %s (its heartbeat %s; silent for %d s "
           "and SLURM saying %s is down or not responding: the batch host is lost, the job "
           "is requeued)",
           me, a.watch, a.heartbeat, a.stale, a.watch);
    w.in.stale_s = a.stale;
    snprintf(w.in.host, sizeof w.in.host, "%s", a.watch);
    snprintf(w.in.job_ref, sizeof w.in.job_ref, "%s", a.job);
    w.in.restart_count = a.restart;
    w.in.max_restarts = a.max_restarts;
    w.in.requeue_exclude = a.requeue_exclude;
    w.last_change = util_mono_s();
    for (;;) {
        if (got_term) {
            sv_log("deputy on %s: got TERM: leaving", me);
            return 0;
        }
        double now = util_mono_s();
        observe(&w, now);
        sv_deputy_decision_t d;
        if (supervise_deputy_decide(&w.in, &d) != SV_OK) {
            sv_log("deputy on %s: error: %s", me, d.reason);
            return 2;
        }
        if (d.action == SV_DEPUTY_ASK) {
            if (ask_slurm(&w, now, &d) != 0) {
                proc_sleep(DEPUTY_POLL_S, NULL);
                continue;
            }
        } else if (d.rule == SV_DRULE_FRESH && w.said) {
            sv_log("deputy on %s: the supervisor's heartbeat is fresh again", me);
            w.said = 0;
        }
        int rc = act(&w, &d);
        if (rc >= 0)
            return rc;
        proc_sleep(DEPUTY_POLL_S, NULL);
    }
}
