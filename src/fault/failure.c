/*
 * failure.c - structured failure records (failure.h): the writer, the
 * strict reader and the scan of a run directory's records.  The format is
 * docs/failure-records.md.
 *
 * Invariants of the write (the one commit point is the rename):
 *   - a record is complete before its name exists: it is written to
 *     ".<name>.tmp" in the same folder, fsynced, then renamed to <name>;
 *   - readers never open a name that starts with '.', so a crash at any
 *     step leaves either the old state or the whole new record;
 *   - the folder is fsynced after the rename (and the run directory after
 *     the folder is made), so the record survives a crash of the node;
 *   - on any failure the temporary file is removed and errno is kept for
 *     the message.
 *
 * The reader treats a file as untrusted: its size is bounded before it is
 * read, every field is checked for its type and range, strings for their
 * length and characters (a host name goes into node lists), and a record
 * of another launch is refused as such, never taken for this one's.
 */
#include "fault/failure.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Room for a path in the run directory. */
#define FAILURE_PATH_MAX (UTIL_PATH_MAX + 256)
/* The largest counter a record holds (restart, launch). */
#define COUNTER_MAX 1000000000LL
/* The largest rank a record may name. */
#define RANK_MAX 16777216LL

static const util_name_t kinds[] = {
    {"hang", FAILURE_HANG},
    {"peer_lost", FAILURE_PEER_LOST},
    {"nan", FAILURE_NAN},
    {"bad_data", FAILURE_BAD_DATA},
    {"resume_refused", FAILURE_RESUME_REFUSED},
    {"device", FAILURE_DEVICE},
    {"io", FAILURE_IO},
    {"run_lock", FAILURE_RUN_LOCK},
    {"other", FAILURE_OTHER},
};

static const util_name_t phases[] = {
    {"start", WATCHDOG_START},     {"load", WATCHDOG_LOAD},
    {"load_sync", WATCHDOG_LOAD_SYNC}, {"compute", WATCHDOG_COMPUTE},
    {"control", WATCHDOG_CONTROL}, {"reduce", WATCHDOG_REDUCE},
    {"update", WATCHDOG_UPDATE},   {"eval", WATCHDOG_EVAL},
    {"save", WATCHDOG_SAVE},       {"save_sync", WATCHDOG_SAVE_SYNC},
    {"finish", WATCHDOG_FINISH},
};

const char *failure_kind_name(failure_kind_t kind)
{
    return util_name_of(kinds, UTIL_COUNT(kinds), (int)kind, "unknown");
}

int failure_kind_parse(const char *name)
{
    return util_name_parse(kinds, UTIL_COUNT(kinds), name);
}

const char *failure_phase_name(watchdog_phase_t phase)
{
    return util_name_of(phases, UTIL_COUNT(phases), (int)phase, "unknown");
}

int failure_phase_parse(const char *name)
{
    return util_name_parse(phases, UTIL_COUNT(phases), name);
}

const char *failure_strerror(int code)
{
    switch (code) {
    case FAILURE_OK: return "ok";
    case FAILURE_EIO: return "cannot read or write the record";
    case FAILURE_ETOOBIG: return "the record is too big";
    case FAILURE_ESYNTAX: return "the record is truncated or not JSON";
    case FAILURE_EFORMAT: return "not a failure record";
    case FAILURE_EVERSION: return "a failure record of an unknown version";
    case FAILURE_EFIELD: return "a field is missing or out of range";
    case FAILURE_ESTALE: return "a record of another launch";
    case FAILURE_EINVAL: return "a bad argument";
    default: return "unknown error";
    }
}

/* ---- the launch's identity ------------------------------------------------- */

/* 1 when s is 1 to FAILURE_JOB_MAX - 1 characters of [A-Za-z0-9_]; "" is
 * accepted when empty_ok. */
static int job_ok(const char *s, int empty_ok)
{
    size_t n = strlen(s);
    if (n == 0)
        return empty_ok;
    if (n >= FAILURE_JOB_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return 0;
    }
    return 1;
}

/* 1 when s is a host name a node list can hold: printable ASCII, no blank,
 * no comma, shorter than FAILURE_HOST_MAX ("" is accepted when empty_ok). */
static int host_ok(const char *s, int empty_ok)
{
    size_t n = strlen(s);
    if (n == 0)
        return empty_ok;
    if (n >= FAILURE_HOST_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == ',')
            return 0;
    return 1;
}

/* A decimal counter from the environment, 0 when unset or not one. */
static int64_t env_counter(const char *name)
{
    const char *v = getenv(name);
    if (!v || !v[0] || strlen(v) > 10)
        return 0;
    int64_t n = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        n = n * 10 + (*p - '0');
    }
    return n <= COUNTER_MAX ? n : 0;
}

void failure_launch_from_env(failure_launch_t *id)
{
    memset(id, 0, sizeof *id);
    const char *job = getenv("SLURM_JOB_ID");
    if (job && job_ok(job, 0))
        snprintf(id->job, sizeof id->job, "%s", job);
    id->restart = env_counter("SLURM_RESTART_COUNT");
    id->launch = env_counter("FTRAIN_LAUNCH_ID");
}

void failure_init(failure_t *rec, failure_kind_t kind, int rank)
{
    memset(rec, 0, sizeof *rec);
    failure_launch_from_env(&rec->launch);
    rec->kind = kind;
    rec->rank = rank;
    int named = gethostname(rec->host, sizeof rec->host) == 0;
    rec->host[sizeof rec->host - 1] = '\0';
    if (!named || !host_ok(rec->host, 0))
        snprintf(rec->host, sizeof rec->host, "unknown");
    rec->pid = (int64_t)getpid();
    rec->step = FAILURE_NO_STEP;
    rec->phase = WATCHDOG_START;
    rec->time = util_wall_s();
    rec->culprit_rank = FAILURE_NO_RANK;
}

void failure_set_message(failure_t *rec, const char *msg)
{
    size_t n = strlen(msg);
    if (n >= sizeof rec->message) {
        n = sizeof rec->message - 1;
        /* Back off to the start of a UTF-8 sequence. */
        while (n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(rec->message, msg, n);
    rec->message[n] = '\0';
}

int failure_file_name(const failure_t *rec, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "j%s-r%lld-l%lld-rank%d.json", rec->launch.job,
                     (long long)rec->launch.restart, (long long)rec->launch.launch, rec->rank);
    return n < 0 || (size_t)n >= cap ? FAILURE_EINVAL : FAILURE_OK;
}

/* ---- the writer -------------------------------------------------------------- */

/* A JSON string of s; where s is not valid UTF-8, of s with every byte
 * above 0x7f replaced by '?' (a message must not be lost for a byte). */
static json_t *text_value(const char *s)
{
    json_t *v = json_string(s);
    if (v)
        return v;
    char ascii[FAILURE_MESSAGE_MAX];
    snprintf(ascii, sizeof ascii, "%s", s);
    for (char *p = ascii; *p; p++)
        if ((unsigned char)*p > 0x7f)
            *p = '?';
    return json_string(ascii);
}

/* Check what a reader would refuse before writing.  @return FAILURE_OK or
 * FAILURE_EINVAL with err. */
static int check_record(const failure_t *rec, char *err, size_t cap)
{
    const char *bad = !job_ok(rec->launch.job, 1) ? "launch.job"
                      : rec->launch.restart < 0 || rec->launch.restart > COUNTER_MAX
                          ? "launch.restart"
                      : rec->launch.launch < 0 || rec->launch.launch > COUNTER_MAX ? "launch.id"
                      : rec->kind < 0 || rec->kind >= FAILURE_KINDS ? "kind"
                      : rec->rank < 0 || rec->rank > RANK_MAX ? "rank"
                      : !host_ok(rec->host, 0) ? "host"
                      : rec->pid < 0 ? "pid"
                      : rec->step < FAILURE_NO_STEP ? "step"
                      : rec->phase < 0 || rec->phase >= WATCHDOG_PHASES ? "phase"
                      : !isfinite(rec->time) || rec->time < 0 ? "time"
                      : rec->culprit_rank < FAILURE_NO_RANK || rec->culprit_rank > RANK_MAX
                          ? "culprit.rank"
                      : !host_ok(rec->culprit_host, 1) ? "culprit.host"
                                                       : NULL;
    if (bad)
        return util_fail(err, cap, FAILURE_EINVAL, "failure record: field \"%s\" is out of range",
                         bad);
    return FAILURE_OK;
}

/* The record as compact JSON text (free() it), or NULL. */
static char *record_text(const failure_t *rec)
{
    json_t *root = json_pack(
        "{s:s, s:i, s:{s:s, s:I, s:I}, s:s, s:i, s:s, s:I, s:I, s:s, s:f, s:{s:i, s:s}, s:o}",
        "format", FAILURE_FORMAT, "version", FAILURE_VERSION,
        "launch", "job", rec->launch.job, "restart", (json_int_t)rec->launch.restart,
        "id", (json_int_t)rec->launch.launch,
        "kind", failure_kind_name(rec->kind), "rank", rec->rank, "host", rec->host,
        "pid", (json_int_t)rec->pid, "step", (json_int_t)rec->step,
        "phase", failure_phase_name(rec->phase), "time", rec->time,
        "culprit", "rank", rec->culprit_rank, "host", rec->culprit_host,
        "message", text_value(rec->message));
    if (!root)
        return NULL;
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}

/* Write len bytes of text to path, fsynced.  @return 0 or -1 with errno
 * (the file may be left: the caller removes it). */
static int write_synced(const char *path, const char *text, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    size_t done = 0;
    int rc = 0;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = -1;
            break;
        }
        done += (size_t)n;
    }
    if (rc == 0)
        rc = fsync(fd);
    int saved = errno;
    if (close(fd) != 0 && rc == 0)
        rc = -1, saved = errno;
    errno = saved;
    return rc;
}

int failure_write(const char *run_dir, const failure_t *rec, char *err, size_t cap)
{
    char dir[FAILURE_PATH_MAX], name[128], tmp[FAILURE_PATH_MAX + 160],
        path[FAILURE_PATH_MAX + 160];
    char *text = NULL;
    int made_tmp = 0, saved = 0;
    int rc = FAILURE_OK;
    if (!run_dir || !run_dir[0]) {
        rc = util_fail(err, cap, FAILURE_EINVAL, "failure record: no run directory");
        goto fail;
    }
    if ((rc = check_record(rec, err, cap)) != FAILURE_OK)
        goto fail;
    if (failure_file_name(rec, name, sizeof name) != FAILURE_OK ||
        snprintf(dir, sizeof dir, "%s/%s", run_dir, FAILURE_DIR) >= (int)sizeof dir) {
        rc = util_fail(err, cap, FAILURE_EINVAL, "failure record: the path under '%s' is too long",
                       run_dir);
        goto fail;
    }
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    text = record_text(rec);
    if (!text) {
        rc = util_fail(err, cap, FAILURE_EINVAL, "failure record: cannot encode it as JSON");
        goto fail;
    }
    struct stat st;
    int fresh = stat(dir, &st) != 0;
    if (util_mkdir_p(dir) != 0 || (fresh && util_fsync_dir(run_dir) != 0)) {
        saved = errno;
        rc = util_fail(err, cap, FAILURE_EIO, "failure record: cannot make '%s': %s", dir,
                       strerror(saved));
        goto fail;
    }
    made_tmp = 1;
    if (write_synced(tmp, text, strlen(text)) != 0) {
        saved = errno;
        rc = util_fail(err, cap, FAILURE_EIO, "failure record: cannot write '%s': %s", tmp,
                       strerror(saved));
        goto fail;
    }
    if (rename(tmp, path) != 0) { /* the commit point */
        saved = errno;
        rc = util_fail(err, cap, FAILURE_EIO, "failure record: cannot rename '%s' to '%s': %s",
                       tmp, path, strerror(saved));
        goto fail;
    }
    made_tmp = 0;
    if (util_fsync_dir(dir) != 0) {
        saved = errno;
        rc = util_fail(err, cap, FAILURE_EIO, "failure record: cannot sync '%s': %s", dir,
                       strerror(saved));
        goto fail;
    }
fail:
    if (made_tmp)
        unlink(tmp);
    free(text);
    if (saved)
        errno = saved;
    return rc;
}

/* ---- the reader -------------------------------------------------------------- */

/* Member key of obj as an integer in [lo, hi] into *out.  @return
 * FAILURE_OK or FAILURE_EFIELD with err naming it (as where). */
static int get_int(json_t *obj, const char *key, const char *where, long long lo, long long hi,
                   int64_t *out, char *err, size_t cap)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return util_fail(err, cap, FAILURE_EFIELD, "failure record: field \"%s\" is missing",
                         where);
    if (!json_is_integer(v))
        return util_fail(err, cap, FAILURE_EFIELD,
                         "failure record: field \"%s\" is not an integer", where);
    json_int_t n = json_integer_value(v);
    if (n < lo || n > hi)
        return util_fail(err, cap, FAILURE_EFIELD,
                         "failure record: field \"%s\" is %lld, outside [%lld, %lld]", where,
                         (long long)n, lo, hi);
    *out = (int64_t)n;
    return FAILURE_OK;
}

/* Member key of obj as a string into buf (cap bytes, NUL included), and
 * checked with ok (NULL: any text).  @return FAILURE_OK or FAILURE_EFIELD. */
static int get_str(json_t *obj, const char *key, const char *where, char *buf, size_t bufcap,
                   int (*ok)(const char *, int), int empty_ok, char *err, size_t cap)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return util_fail(err, cap, FAILURE_EFIELD, "failure record: field \"%s\" is missing",
                         where);
    if (!json_is_string(v))
        return util_fail(err, cap, FAILURE_EFIELD, "failure record: field \"%s\" is not a string",
                         where);
    size_t n = json_string_length(v);
    if (n >= bufcap)
        return util_fail(err, cap, FAILURE_EFIELD,
                         "failure record: field \"%s\" is %zu bytes long, more than %zu", where, n,
                         bufcap - 1);
    const char *s = json_string_value(v);
    if (strlen(s) != n || (ok && !ok(s, empty_ok)) || (!ok && !empty_ok && n == 0))
        return util_fail(err, cap, FAILURE_EFIELD,
                         "failure record: field \"%s\" holds a value it may not ('%.64s')", where,
                         s);
    memcpy(buf, s, n + 1);
    return FAILURE_OK;
}

/* Member key of obj, an object.  @return it, or NULL with err. */
static json_t *get_obj(json_t *obj, const char *key, char *err, size_t cap)
{
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_object(v)) {
        util_fail(err, cap, FAILURE_EFIELD, "failure record: field \"%s\" is %s", key,
                  v ? "not an object" : "missing");
        return NULL;
    }
    return v;
}

/* The format and version of root.  @return FAILURE_OK, FAILURE_EFORMAT or
 * FAILURE_EVERSION. */
static int check_header(json_t *root, char *err, size_t cap)
{
    if (!json_is_object(root))
        return util_fail(err, cap, FAILURE_EFORMAT, "failure record: not a JSON object");
    json_t *format = json_object_get(root, "format");
    if (!json_is_string(format) || strcmp(json_string_value(format), FAILURE_FORMAT) != 0)
        return util_fail(err, cap, FAILURE_EFORMAT,
                         "failure record: \"format\" is %s, not \"" FAILURE_FORMAT "\"",
                         format ? "another value" : "missing");
    json_t *version = json_object_get(root, "version");
    if (!json_is_integer(version))
        return util_fail(err, cap, FAILURE_EVERSION,
                         "failure record: \"version\" is %s", version ? "not an integer"
                                                                       : "missing");
    if (json_integer_value(version) != FAILURE_VERSION)
        return util_fail(err, cap, FAILURE_EVERSION,
                         "failure record: version %lld; this reader knows version %d",
                         (long long)json_integer_value(version), FAILURE_VERSION);
    return FAILURE_OK;
}

/* The launch object into id.  @return FAILURE_OK or FAILURE_EFIELD. */
static int parse_launch(json_t *root, failure_launch_t *id, char *err, size_t cap)
{
    json_t *l = get_obj(root, "launch", err, cap);
    if (!l)
        return FAILURE_EFIELD;
    int rc = get_str(l, "job", "launch.job", id->job, sizeof id->job, job_ok, 1, err, cap);
    if (rc == FAILURE_OK)
        rc = get_int(l, "restart", "launch.restart", 0, COUNTER_MAX, &id->restart, err, cap);
    if (rc == FAILURE_OK)
        rc = get_int(l, "id", "launch.id", 0, COUNTER_MAX, &id->launch, err, cap);
    return rc;
}

/* The named kind or phase of root's member key.  @return FAILURE_OK or
 * FAILURE_EFIELD. */
static int get_name(json_t *root, const char *key, int (*parse)(const char *), int *out,
                    char *err, size_t cap)
{
    char name[32];
    int rc = get_str(root, key, key, name, sizeof name, NULL, 0, err, cap);
    if (rc != FAILURE_OK)
        return rc;
    if ((*out = parse(name)) < 0)
        return util_fail(err, cap, FAILURE_EFIELD,
                         "failure record: \"%s\" is '%s', which this reader does not know", key,
                         name);
    return FAILURE_OK;
}

/* Every field but the header, into out.  @return FAILURE_OK or
 * FAILURE_EFIELD with err. */
static int parse_fields(json_t *root, failure_t *out, char *err, size_t cap)
{
    int64_t rank = 0, crank = 0;
    int kind = 0, phase = 0;
    int rc = parse_launch(root, &out->launch, err, cap);
    if (rc == FAILURE_OK)
        rc = get_name(root, "kind", failure_kind_parse, &kind, err, cap);
    if (rc == FAILURE_OK)
        rc = get_int(root, "rank", "rank", 0, RANK_MAX, &rank, err, cap);
    if (rc == FAILURE_OK)
        rc = get_str(root, "host", "host", out->host, sizeof out->host, host_ok, 0, err, cap);
    if (rc == FAILURE_OK)
        rc = get_int(root, "pid", "pid", 0, INT64_MAX, &out->pid, err, cap);
    if (rc == FAILURE_OK)
        rc = get_int(root, "step", "step", FAILURE_NO_STEP, INT64_MAX, &out->step, err, cap);
    if (rc == FAILURE_OK)
        rc = get_name(root, "phase", failure_phase_parse, &phase, err, cap);
    if (rc != FAILURE_OK)
        return rc;
    json_t *t = json_object_get(root, "time");
    if (!json_is_number(t) || !isfinite(json_number_value(t)) || json_number_value(t) < 0)
        return util_fail(err, cap, FAILURE_EFIELD, "failure record: field \"time\" is %s",
                         t ? "not a time (seconds since the epoch)" : "missing");
    out->time = json_number_value(t);
    json_t *c = get_obj(root, "culprit", err, cap);
    if (!c)
        return FAILURE_EFIELD;
    rc = get_int(c, "rank", "culprit.rank", FAILURE_NO_RANK, RANK_MAX, &crank, err, cap);
    if (rc == FAILURE_OK)
        rc = get_str(c, "host", "culprit.host", out->culprit_host, sizeof out->culprit_host,
                     host_ok, 1, err, cap);
    if (rc == FAILURE_OK)
        rc = get_str(root, "message", "message", out->message, sizeof out->message, NULL, 1,
                     err, cap);
    out->kind = (failure_kind_t)kind;
    out->phase = (watchdog_phase_t)phase;
    out->rank = (int)rank;
    out->culprit_rank = (int)crank;
    return rc;
}

/* 1 when a and b name the same launch. */
static int same_launch(const failure_launch_t *a, const failure_launch_t *b)
{
    return strcmp(a->job, b->job) == 0 && a->restart == b->restart && a->launch == b->launch;
}

int failure_parse(const char *text, size_t len, const failure_launch_t *expect,
                  failure_t *out, char *err, size_t cap)
{
    json_error_t jerr;
    json_t *root = NULL;
    int rc = FAILURE_OK;
    memset(out, 0, sizeof *out);
    if (len > FAILURE_FILE_MAX) {
        rc = util_fail(err, cap, FAILURE_ETOOBIG,
                       "failure record: %zu bytes, more than the %d a record may have", len,
                       FAILURE_FILE_MAX);
        goto fail;
    }
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_premature_end_of_input)
            rc = util_fail(err, cap, FAILURE_ESYNTAX,
                           "failure record: truncated: the JSON ends after %zu bytes, before "
                           "the record does", len);
        else
            rc = util_fail(err, cap, FAILURE_ESYNTAX,
                           "failure record: not JSON: %s (line %d, column %d)", jerr.text,
                           jerr.line, jerr.column);
        goto fail;
    }
    if ((rc = check_header(root, err, cap)) != FAILURE_OK ||
        (rc = parse_fields(root, out, err, cap)) != FAILURE_OK)
        goto fail;
    if (expect && !same_launch(expect, &out->launch))
        rc = util_fail(err, cap, FAILURE_ESTALE,
                       "failure record: of launch job '%s' restart %lld id %lld, not of this "
                       "one (job '%s' restart %lld id %lld)", out->launch.job,
                       (long long)out->launch.restart, (long long)out->launch.launch, expect->job,
                       (long long)expect->restart, (long long)expect->launch);
fail:
    json_decref(root);
    return rc;
}

int failure_read(const char *path, const failure_launch_t *expect, failure_t *out, char *err,
                 size_t cap)
{
    char *text = NULL;
    int rc = FAILURE_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    memset(out, 0, sizeof *out);
    if (fd < 0 || fstat(fd, &st) != 0) {
        rc = util_fail(err, cap, FAILURE_EIO, "failure record: cannot open '%s': %s", path,
                       strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = util_fail(err, cap, FAILURE_EIO, "failure record: '%s' is not a regular file", path);
        goto fail;
    }
    if (st.st_size > FAILURE_FILE_MAX) {
        rc = util_fail(err, cap, FAILURE_ETOOBIG,
                       "failure record: '%s' has %lld bytes, more than the %d a record may have",
                       path, (long long)st.st_size, FAILURE_FILE_MAX);
        goto fail;
    }
    /* One byte more than allowed: a file that grew since fstat is caught. */
    text = malloc(FAILURE_FILE_MAX + 1);
    size_t len = 0;
    while (text && len <= FAILURE_FILE_MAX) {
        ssize_t n = read(fd, text + len, FAILURE_FILE_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = util_fail(err, cap, FAILURE_EIO, "failure record: cannot read '%s': %s", path,
                           strerror(errno));
            goto fail;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (!text) {
        rc = util_fail(err, cap, FAILURE_EIO, "failure record: out of memory reading '%s'", path);
        goto fail;
    }
    rc = failure_parse(text, len, expect, out, err, cap);
fail:
    free(text);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* ---- the scan --------------------------------------------------------------- */

static int by_time(const void *a, const void *b)
{
    double ta = ((const failure_t *)a)->time, tb = ((const failure_t *)b)->time;
    return ta < tb ? -1 : ta > tb ? 1 : 0;
}

/* 1 when name is a record's file name: not hidden, ends in ".json". */
static int record_name(const char *name)
{
    size_t n = strlen(name);
    return name[0] != '.' && n > 5 && strcmp(name + n - 5, ".json") == 0;
}

int failure_collect(const char *run_dir, const failure_launch_t *expect, failure_t *out,
                    int max, failure_scan_t *scan, char *err, size_t cap)
{
    char dir[FAILURE_PATH_MAX], path[FAILURE_PATH_MAX + 300], why[256];
    int rc = FAILURE_OK;
    memset(scan, 0, sizeof *scan);
    snprintf(dir, sizeof dir, "%s/%s", run_dir, FAILURE_DIR);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno != ENOENT)
            rc = util_fail(err, cap, FAILURE_EIO, "failure records: cannot list '%s': %s", dir,
                           strerror(errno));
        return rc;
    }
    failure_t rec;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!record_name(e->d_name))
            continue;
        scan->found++;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int r = failure_read(path, expect, &rec, why, sizeof why);
        if (r == FAILURE_ESTALE) {
            scan->stale++;
        } else if (r != FAILURE_OK) {
            if (!scan->refused++)
                snprintf(scan->first_refusal, sizeof scan->first_refusal, "%.80s: %.160s",
                         e->d_name, why);
        } else if (scan->kept < max) {
            out[scan->kept++] = rec;
        }
    }
    closedir(d);
    qsort(out, (size_t)scan->kept, sizeof *out, by_time);
    return rc;
}
