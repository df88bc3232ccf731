/*
 * failure.h - structured failure records: a rank that detects a failure
 * writes a small JSON file into the run directory that says what failed,
 * where and at which step, and which rank or host it points at; the
 * supervisor (supervise/) reads them instead of the text a process
 * printed.  The format is versioned and documented in
 * docs/failure-records.md.
 *
 * HowTo (writer): failure_init(&rec, FAILURE_HANG, rank) fills the kind,
 * the rank, this process's pid and host, the wall clock and the launch's
 * identity (failure_launch_from_env: SLURM_JOB_ID, SLURM_RESTART_COUNT,
 * FTRAIN_LAUNCH_ID); the caller sets step, phase, culprit and message, then
 * failure_write(run_dir, &rec, err, cap) writes RUN/failures/<name>.json
 * atomically (a temporary file, fsync, rename, fsync of the directory).
 *
 * HowTo (reader): failure_read(path, &expect, &rec, err, cap) reads one
 * record as untrusted input: a file that is too big, truncated, not JSON,
 * of another version, with a field missing or out of range, or of another
 * launch is refused with its code and a message naming the problem.
 * failure_collect(run_dir, &expect, ...) reads every record of one launch.
 *
 * Nothing here exits or prints; every function that can fail returns a
 * failure_err_t and fills (err, cap) where a code alone cannot say why.
 */
#ifndef FTRAIN_FAILURE_H
#define FTRAIN_FAILURE_H

#include <stddef.h>
#include <stdint.h>

#include "fault/watchdog.h"

/* The format's name (its "format" field) and version (its "version"). */
#define FAILURE_FORMAT "ftrain-failure"
#define FAILURE_VERSION 1
/* The folder of the run directory the records go to. */
#define FAILURE_DIR "failures"
/* The largest record file a reader accepts, in bytes. */
#define FAILURE_FILE_MAX 8192
/* Room for the strings, their NUL included: longer ones are refused by the
 * reader and cut by failure_init's callers (failure_set_message). */
#define FAILURE_HOST_MAX 64
#define FAILURE_JOB_MAX 64
#define FAILURE_MESSAGE_MAX 2048
/* The step of a record written before any step ran (start-up). */
#define FAILURE_NO_STEP (-1)
/* The culprit's rank when only its host is known, or when none is known. */
#define FAILURE_NO_RANK (-1)

/* What failed.  The names (failure_kind_name) are the "kind" field. */
typedef enum {
    FAILURE_HANG = 0,       /* "hang": the watchdog saw no progress; culprit: the
                               rank the others waited for */
    FAILURE_PEER_LOST,      /* "peer_lost": a peer is gone (a collective failed
                               because of it); culprit: the peer */
    FAILURE_NAN,            /* "nan": the loss or the weights are not finite */
    FAILURE_BAD_DATA,       /* "bad_data": the data cannot be read or is invalid */
    FAILURE_RESUME_REFUSED, /* "resume_refused": the checkpoint cannot be resumed
                               (another architecture, none good) */
    FAILURE_DEVICE,         /* "device": the GPU or the communicator's set-up
                               failed on this rank */
    FAILURE_IO,             /* "io": a checkpoint or the run directory could not
                               be written */
    FAILURE_RUN_LOCK,       /* "run_lock": another launch holds the run directory */
    FAILURE_OTHER,          /* "other": a failure its writer cannot classify */
    FAILURE_KINDS
} failure_kind_t;

/* Which launch wrote a record: a record of another launch (an earlier one
 * in the same run directory) is recognised by these. */
typedef struct {
    char job[FAILURE_JOB_MAX]; /* SLURM_JOB_ID, "" outside SLURM */
    int64_t restart;           /* SLURM_RESTART_COUNT, 0 when unset */
    int64_t launch;            /* FTRAIN_LAUNCH_ID (set by the supervisor for
                                  each launch in an allocation), 0 when unset */
} failure_launch_t;

/* One record. */
typedef struct {
    failure_launch_t launch;
    failure_kind_t kind;
    int rank;                 /* the rank that wrote it */
    char host[FAILURE_HOST_MAX];
    int64_t pid;
    int64_t step;             /* the step it was at, FAILURE_NO_STEP before any */
    watchdog_phase_t phase;   /* where in the step (written by name) */
    double time;              /* wall clock, seconds since the epoch */
    int culprit_rank;         /* FAILURE_NO_RANK when not known */
    char culprit_host[FAILURE_HOST_MAX]; /* "" when not known */
    char message[FAILURE_MESSAGE_MAX];
} failure_t;

typedef enum {
    FAILURE_OK = 0,
    FAILURE_EIO = -1,      /* cannot create, write, open or read a file */
    FAILURE_ETOOBIG = -2,  /* a file over FAILURE_FILE_MAX bytes */
    FAILURE_ESYNTAX = -3,  /* not JSON: truncated or garbage */
    FAILURE_EFORMAT = -4,  /* JSON, but not a failure record ("format") */
    FAILURE_EVERSION = -5, /* a version this reader does not know */
    FAILURE_EFIELD = -6,   /* a field missing, of the wrong type or out of range */
    FAILURE_ESTALE = -7,   /* a record of another launch */
    FAILURE_EINVAL = -8    /* a bad argument (a record that cannot be written) */
} failure_err_t;

/** @return a short text for a failure_err_t ("truncated or not JSON" ...). */
const char *failure_strerror(int code);

/** @return the name of a kind ("hang", "peer_lost" ...), "unknown" for
 *  any other value; failure_kind_parse the kind named name, or -1. */
const char *failure_kind_name(failure_kind_t kind);
int failure_kind_parse(const char *name);

/** @return the name of a watchdog phase as records write it ("start",
 *  "compute", "save_sync" ...), "unknown" for any other value;
 *  failure_phase_parse the phase named name, or -1. */
const char *failure_phase_name(watchdog_phase_t phase);
int failure_phase_parse(const char *name);

/** Fill id from the environment: SLURM_JOB_ID (kept only when it is 1 to
 *  63 characters of [A-Za-z0-9_]), SLURM_RESTART_COUNT and FTRAIN_LAUNCH_ID
 *  (decimal numbers from 0 to 10^9; anything else counts as unset: 0).
 *  Reads the environment: call it where nothing changes it (start-up). */
void failure_launch_from_env(failure_launch_t *id);

/** Start a record: kind, rank, this process's pid and host, the wall
 *  clock, the launch from failure_launch_from_env; no step
 *  (FAILURE_NO_STEP), phase WATCHDOG_START, no culprit, an empty message. */
void failure_init(failure_t *rec, failure_kind_t kind, int rank);

/** Copy msg into rec->message, cut to FAILURE_MESSAGE_MAX - 1 bytes (at a
 *  character boundary: a UTF-8 sequence is never split). */
void failure_set_message(failure_t *rec, const char *msg);

/** The record's file name in RUN/failures: "j<job>-r<restart>-l<launch>-
 *  rank<rank>.json" ("j-" when there is no job).  @return FAILURE_OK, or
 *  FAILURE_EINVAL when it does not fit in cap. */
int failure_file_name(const failure_t *rec, char *buf, size_t cap);

/** Write rec into run_dir/failures (made when missing) under its
 *  failure_file_name, atomically and durably: a reader sees the whole
 *  record or none (the temporary file is ".<name>.tmp", which readers
 *  skip).  A record of the same name is replaced.  @return FAILURE_OK,
 *  FAILURE_EINVAL (a field out of range, no run_dir) or FAILURE_EIO, with
 *  err naming the file and the cause. */
int failure_write(const char *run_dir, const failure_t *rec, char *err, size_t cap);

/** Parse a record from text (len bytes, untrusted).  expect NULL accepts
 *  any launch.  @return FAILURE_OK, or FAILURE_ETOOBIG, FAILURE_ESYNTAX,
 *  FAILURE_EFORMAT, FAILURE_EVERSION, FAILURE_EFIELD or FAILURE_ESTALE with
 *  err naming the problem (the field, the position of the syntax error,
 *  both launches). */
int failure_parse(const char *text, size_t len, const failure_launch_t *expect,
                  failure_t *out, char *err, size_t cap);

/** Read and parse the record at path (a regular file of at most
 *  FAILURE_FILE_MAX bytes).  @return as failure_parse, or FAILURE_EIO. */
int failure_read(const char *path, const failure_launch_t *expect, failure_t *out,
                 char *err, size_t cap);

/** What failure_collect found. */
typedef struct {
    int found;   /* record files (temporary ones not counted) */
    int kept;    /* records of the launch expected, stored (at most max) */
    int stale;   /* records of another launch */
    int refused; /* records that could not be read or parsed */
    char first_refusal[256]; /* why the first refused one was refused */
} failure_scan_t;

/** Read every record in run_dir/failures; store those of launch expect
 *  (NULL: any) into out, up to max, sorted by time.  A missing folder
 *  holds no record.  @return FAILURE_OK, or FAILURE_EIO when the folder
 *  exists but cannot be listed. */
int failure_collect(const char *run_dir, const failure_launch_t *expect, failure_t *out,
                    int max, failure_scan_t *scan, char *err, size_t cap);

#endif
