/*
 * run_facts.c - what ftrain's own readers make of a run directory's
 * heartbeats and failure records, for tests of the files other writers
 * leave there (the Python watchdog, python/ftrain_ckpt/watchdog.py).
 *
 * Usage: run_facts RUN_DIR
 *
 * Prints, one fact a line (tests grep them):
 *   beat FILE ok|bad token T phase P step S      each heartbeat file, read by
 *                                                 the supervisor's rule
 *                                                 (facts_parse_heartbeat)
 *   tokens N                                     the distinct tokens (facts_tokens)
 *   step_done S                                  facts_step_done (-1: none)
 *   record KIND rank R host H pid P step S phase PH culprit CR CH
 *                                                 each record failure_collect keeps
 *                                                 (any launch), sorted by time
 *   records found F kept K stale S refused N [first refusal]
 *   leftovers ranks N step_done S first_rank R first_pid P first_host H
 *                                                 watchdog_leftovers: the
 *                                                 watchdog's own strict parse
 *                                                 (it removes the heartbeats:
 *                                                 last)
 * Exit status 0, or 2 on a usage error.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault/failure.h"
#include "fault/watchdog.h"
#include "supervise/facts.h"

#define MAX_RECORDS 64

static void beats(const char *run_dir)
{
    char dir[4200], path[4500], line[512];
    snprintf(dir, sizeof dir, "%s/heartbeat", run_dir);
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char tok[24] = "";
        int phase = -1;
        int64_t step = -1;
        int ok = fgets(line, sizeof line, f) && facts_parse_heartbeat(line, tok, &phase, &step);
        fclose(f);
        printf("beat %s %s token %s phase %d step %lld\n", e->d_name, ok ? "ok" : "bad",
               tok[0] ? tok : "-", phase, (long long)step);
    }
    closedir(d);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: run_facts RUN_DIR\n");
        return 2;
    }
    const char *run = argv[1];
    beats(run);
    facts_tokens_t *toks = calloc(1, sizeof *toks);
    if (!toks)
        return 1;
    facts_tokens(run, toks);
    printf("tokens %d\n", toks->n);
    free(toks);
    printf("step_done %lld\n", (long long)facts_step_done(run, NULL));

    static failure_t recs[MAX_RECORDS];
    failure_scan_t scan;
    char err[512] = "";
    if (failure_collect(run, NULL, recs, MAX_RECORDS, &scan, err, sizeof err) != FAILURE_OK)
        printf("records error %s\n", err);
    for (int i = 0; i < scan.kept; i++) {
        const failure_t *r = &recs[i];
        printf("record %s rank %d host %s pid %lld step %lld phase %s culprit %d %s\n",
               failure_kind_name(r->kind), r->rank, r->host, (long long)r->pid,
               (long long)r->step, failure_phase_name(r->phase), r->culprit_rank,
               r->culprit_host[0] ? r->culprit_host : "-");
    }
    printf("records found %d kept %d stale %d refused %d%s%s\n", scan.found, scan.kept,
           scan.stale, scan.refused, scan.refused ? " " : "", scan.first_refusal);

    char dir[4200];
    snprintf(dir, sizeof dir, "%s/heartbeat", run);
    watchdog_leftover_t left;
    watchdog_leftovers(dir, &left);
    printf("leftovers ranks %d step_done %lld first_rank %d first_pid %d first_host %s\n",
           left.ranks, (long long)left.step_done, left.ranks ? left.first_rank : -1,
           left.ranks ? left.first_pid : 0, left.ranks ? left.first_host : "-");
    return 0;
}
