/*
 * beat.h - the supervisor's heartbeat file: how the deputy (deputy.h), on
 * another node, knows that the supervisor on the batch host still lives.
 *
 * The file is RUN_DIR/.supervisor-<job ref>.heartbeat (RUN_DIR is on a file
 * system every node sees), one line, version 1 (docs/supervisor.md):
 *
 *   ftrain-supervisor 1 job <ref> restart <n> host <node> pid <pid> seq <n> state <state>
 *
 * padded with blanks to BEAT_LINE_LEN bytes, the last one a newline.  state
 * is "running" (the supervisor supervises: launches, decides, relaunches,
 * requeues) or "ended" (it ends the job itself: the deputy leaves).  seq
 * grows by one each write; the reader measures the silence on its own
 * clock, between two changes of seq, so the nodes' clocks need not agree.
 *
 * The writer rewrites the line in place (open, pwrite at 0, close: the
 * file keeps its inode and length, so a reader on another node never sees
 * it shorter, and NFS's close-to-open rule makes each write visible to the
 * next open), at most every BEAT_PERIOD_S seconds, from beat_tick(), which
 * every wait of the supervisor calls (proc.h's tick hook, the launch's
 * loop): the file stays fresh through launches, decisions, relaunches and
 * SLURM calls, and goes stale only when the process is gone or stuck.
 *
 * HowTo: beat_open(run_dir, job_ref, restart, host, err, cap) once; then
 * beat_tick() as often as convenient; beat_end() before the supervisor
 * ends the job.  beat_parse() reads a line (the deputy, the tests).
 */
#ifndef FTRAIN_SUPERVISE_BEAT_H
#define FTRAIN_SUPERVISE_BEAT_H

#include <stddef.h>
#include <stdint.h>

#include "supervise/policy.h"

#define BEAT_MAGIC "ftrain-supervisor"
#define BEAT_VERSION 1
#define BEAT_LINE_LEN 256
/* Seconds between two writes. */
#define BEAT_PERIOD_S 2.0

/* One heartbeat line, read. */
typedef struct {
    char job[2 * SV_NAME_MAX];
    int64_t restart;
    char host[SV_NAME_MAX];
    long pid;
    uint64_t seq;
    sv_beat_state_t state;
} sv_beat_line_t;

/** The heartbeat's path for run_dir and job_ref into out.  @return 0, or
 *  -1 when it does not fit. */
int beat_path(const char *run_dir, const char *job_ref, char *out, size_t cap);

/** Start the heartbeat: write the first line (state running).  @return 0,
 *  or -1 with err (the file cannot be written). */
int beat_open(const char *run_dir, const char *job_ref, int64_t restart, const char *host,
              char *err, size_t cap);

/** Write the next line when BEAT_PERIOD_S passed since the last one (no-op
 *  before beat_open).  Async-signal-unsafe; cheap when nothing is due. */
void beat_tick(void);

/** Write state "ended" now; later ticks keep it.  No-op before beat_open. */
void beat_end(void);

/** The path beat_open wrote ("" before). */
const char *beat_file(void);

/** Read text (a heartbeat file's contents) into line.  @return 0 when it is
 *  a version-1 line with every field, else -1 (a torn or foreign file). */
int beat_parse(const char *text, sv_beat_line_t *line);

#endif
