/*
 * facts.c - the facts a launch leaves behind: heartbeats, the first
 * checkpoint's time, and the launcher's words as a hint (facts.h).
 */
#include "supervise/facts.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The magic word of ftrain's heartbeat lines (src/fault/watchdog.c); the
 * fields after it are read by the word before each, not by position. */
#define HB_WORD "ftrain-heartbeat"

int facts_parse_heartbeat(const char *line, char tok[24], int *phase, int64_t *step)
{
    char buf[512], *save = NULL;
    int have = 0;
    snprintf(buf, sizeof buf, "%s", line);
    char *w = strtok_r(buf, " \t\n", &save);
    if (!w || strcmp(w, HB_WORD) != 0)
        return 0;
    for (char *prev = NULL; (w = strtok_r(NULL, " \t\n", &save)); prev = w) {
        if (!prev)
            continue;
        char *end;
        if (strcmp(prev, "token") == 0 && strlen(w) < 24 && *w) {
            snprintf(tok, 24, "%s", w);
            have |= 1;
        } else if (strcmp(prev, "phase") == 0) {
            long v = strtol(w, &end, 10);
            if (*end == '\0' && end != w)
                *phase = (int)v, have |= 2;
        } else if (strcmp(prev, "step") == 0) {
            long long v = strtoll(w, &end, 10);
            if (*end == '\0' && end != w)
                *step = v, have |= 4;
        }
    }
    return have == 7;
}

/* Call fn on each heartbeat line of run_dir/heartbeat (rank-N files, not
 * their .new temporaries). */
static void each_beat(const char *run_dir, void (*fn)(const char *line, void *arg), void *arg)
{
    char dir[4200], path[4500], line[512];
    snprintf(dir, sizeof dir, "%s/heartbeat", run_dir);
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "rank-", 5) != 0 || len < 6 ||
            strspn(e->d_name + 5, "0123456789") != len - 5)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f))
            fn(line, arg);
        fclose(f);
    }
    closedir(d);
}

static void add_token(const char *line, void *arg)
{
    facts_tokens_t *t = arg;
    char tok[24];
    int phase;
    int64_t step;
    if (!facts_parse_heartbeat(line, tok, &phase, &step) || t->n >= FACTS_TOKENS_MAX)
        return;
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->tok[i], tok) == 0)
            return;
    snprintf(t->tok[t->n++], 24, "%s", tok);
}

void facts_tokens(const char *run_dir, facts_tokens_t *t)
{
    t->n = 0;
    each_beat(run_dir, add_token, t);
}

typedef struct {
    const facts_tokens_t *old;
    int seen;
    int64_t best;
} step_scan_t;

static void scan_step(const char *line, void *arg)
{
    step_scan_t *s = arg;
    char tok[24];
    int phase;
    int64_t step;
    if (!facts_parse_heartbeat(line, tok, &phase, &step))
        return;
    for (int i = 0; s->old && i < s->old->n; i++)
        if (strcmp(s->old->tok[i], tok) == 0)
            return;
    /* Phases 3-5 (compute, control, reduce) are inside the step. */
    int64_t done = phase >= 3 && phase <= 5 ? step - 1 : step;
    if (!s->seen || done > s->best)
        s->best = done;
    s->seen = 1;
}

int64_t facts_step_done(const char *run_dir, const facts_tokens_t *old)
{
    step_scan_t s = {.old = old};
    each_beat(run_dir, scan_step, &s);
    return s.seen ? s.best : SV_STEP_STARTUP;
}

double facts_to_ckpt(const char *run_dir, double wall_start)
{
    char path[4200], line[4096];
    double found = -1;
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
        const char *ev = json_string_value(json_object_get(j, "event"));
        json_t *t = json_object_get(j, "time");
        if (ev && strcmp(ev, "checkpoint") == 0 && json_is_number(t) &&
            json_number_value(t) >= floor(wall_start))
            found = floor(json_number_value(t) - floor(wall_start)) + 1;
        json_decref(j);
    }
    fclose(f);
    return found;
}

/* ---- the launcher's words (a hint) ---------------------------------------- */

/* Copy the word of at most cap - 1 characters that starts at p. */
static void word(char *out, size_t cap, const char *p)
{
    size_t n = strcspn(p, " \t\n,");
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
}

static const char *const controller_words[] = {
    "Unable to confirm allocation",         "Socket timed out on send/recv",
    "Unable to contact slurm controller",   "Zero Bytes were transmitted or received",
    "Communication connection failure",     "backup controller in standby",
};

void facts_said_line(facts_said_state_t *st, const char *line)
{
    const char *p;
    if (!st->node_failure && (p = strstr(line, "Node failure on "))) {
        st->node_failure = 1;
        word(st->said.host, sizeof st->said.host, p + 16);
        return;
    }
    if (st->node_failure) /* it wins: nothing after it changes the result */
        return;
    /* "srun: error: HOST: task(s) LIST: WHAT" */
    if ((p = strstr(line, "srun: error: "))) {
        const char *host = p + 13, *colon = strstr(host, ": task");
        if (colon && colon > host && !memchr(host, ' ', (size_t)(colon - host))) {
            const char *what = strstr(colon + 6, ": ");
            if (!what)
                return;
            what += 2;
            char h[SV_NAME_MAX];
            snprintf(h, sizeof h, "%.*s", (int)(colon - host < SV_NAME_MAX - 1 ? colon - host
                                                                            : SV_NAME_MAX - 1),
                     host);
            int exited = strncmp(what, "Exited with exit code ", 22) == 0;
            if (!st->first_task) {
                st->first_task = 1;
                if (exited) {
                    int code = atoi(what + 22);
                    if (code != 75 && code != 76) {
                        st->first_exited_own = 1;
                        st->said.code = code;
                        snprintf(st->said.host, sizeof st->said.host, "%s", h);
                    }
                }
            }
            if (!exited && !st->killed && !st->first_exited_own) {
                st->killed = 1;
                snprintf(st->said.host, sizeof st->said.host, "%s", h);
                snprintf(st->said.what, sizeof st->said.what, "%.*s", SV_WHAT_MAX - 1, what);
                st->said.what[strcspn(st->said.what, "\n")] = '\0';
                snprintf(st->detail, sizeof st->detail, "%.*s", (int)strcspn(host, "\n"), host);
            }
            return;
        }
    }
    /* mpirun: "process rank N with PID P on node H exited on signal S" */
    if (!st->killed && !st->first_exited_own && (p = strstr(line, "process rank ")) &&
        strstr(p, " on node ") && strstr(p, " exited on signal ")) {
        st->killed = 1;
        word(st->said.host, sizeof st->said.host, strstr(p, " on node ") + 9);
        snprintf(st->said.what, sizeof st->said.what, "signal %d",
                 atoi(strstr(p, " exited on signal ") + 18));
        snprintf(st->detail, sizeof st->detail, "%.*s", (int)strcspn(p, "\n"), p);
        return;
    }
    if (!st->controller && strstr(line, "error: "))
        for (size_t i = 0; i < sizeof controller_words / sizeof *controller_words; i++)
            if (strstr(line, controller_words[i]) && !st->controller) {
                const char *e = strstr(line, "error: ") + 7;
                st->controller = 1;
                snprintf(st->ctl_detail, sizeof st->ctl_detail, "%.*s", (int)strcspn(e, "\n"), e);
            }
}

sv_said_t facts_said_result(const facts_said_state_t *st)
{
    sv_said_t s = st->said;
    if (st->node_failure)
        s.kind = SV_SAID_NODE_FAILURE;
    else if (st->first_exited_own)
        s.kind = SV_SAID_TASK_EXITED;
    else if (st->killed)
        s.kind = SV_SAID_TASK_KILLED;
    else if (st->controller)
        s.kind = SV_SAID_CONTROLLER;
    else
        memset(&s, 0, sizeof s);
    if (s.kind != SV_SAID_TASK_KILLED)
        s.what[0] = '\0';
    return s;
}

void facts_said_file(const char *path, sv_said_t *said, char *detail, size_t cap)
{
    facts_said_state_t st;
    char line[4096];
    memset(&st, 0, sizeof st);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        facts_said_line(&st, line);
    if (f)
        fclose(f);
    *said = facts_said_result(&st);
    snprintf(detail, cap, "%s",
             said->kind == SV_SAID_TASK_KILLED ? st.detail
             : said->kind == SV_SAID_CONTROLLER ? st.ctl_detail : "");
}
