/*
 * failure_record.c - structured failure records (src/fault/failure.h): a
 * record written and read back is the same record; the write is atomic (the
 * temporary file is not the record's name, a failed rename leaves nothing a
 * reader takes); and every bad input (truncated, garbage, wrong format or
 * version, a missing or out-of-range field, another launch, a huge file) is
 * refused with its own code and a message naming the problem.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fault/failure.h"
#include "tap.h"

static char dir[512];

/* A record of launch (job 4242, restart 1, id 3) with every field set. */
static void sample(failure_t *rec, int rank, double time)
{
    failure_init(rec, FAILURE_HANG, rank);
    snprintf(rec->launch.job, sizeof rec->launch.job, "4242");
    rec->launch.restart = 1;
    rec->launch.launch = 3;
    snprintf(rec->host, sizeof rec->host, "n%d", rank + 1);
    rec->pid = 4000 + rank;
    rec->step = 12;
    rec->phase = WATCHDOG_REDUCE;
    rec->time = time;
    rec->culprit_rank = 2;
    snprintf(rec->culprit_host, sizeof rec->culprit_host, "n3");
    failure_set_message(rec, "ftrain: hang: rank 2 (host n3, pid 4002) stopped making "
                        "progress\n\"quoted\" and \xc3\xa9");
}

/* The text of the file at path into buf (cap bytes, NUL-terminated). */
static size_t slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return n;
}

static void spit(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "w");
    if (!f || fwrite(text, 1, len, f) != len) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* Replace the first occurrence of from in text by to (in place; cap bytes). */
static int replace(char *text, size_t cap, const char *from, const char *to)
{
    char *at = strstr(text, from);
    if (!at || strlen(text) - strlen(from) + strlen(to) >= cap)
        return 0;
    memmove(at + strlen(to), at + strlen(from), strlen(at + strlen(from)) + 1);
    memcpy(at, to, strlen(to));
    return 1;
}

static void test_round_trip(const char *path, char *good, size_t cap)
{
    failure_t rec, back;
    char err[512] = "", name[128];
    sample(&rec, 1, 1700000000.25);
    is_int(failure_write(dir, &rec, err, sizeof err), FAILURE_OK, "a record is written (%s)", err);
    failure_file_name(&rec, name, sizeof name);
    is_str(name, "j4242-r1-l3-rank1.json", "its name holds the launch and the rank");
    failure_launch_t me = rec.launch;
    int rc = failure_read(path, &me, &back, err, sizeof err);
    is_int(rc, FAILURE_OK, "and read back as this launch's (%s)", err);
    ok(back.kind == FAILURE_HANG && back.rank == 1 && strcmp(back.host, "n2") == 0 &&
       back.pid == 4001 && back.step == 12 && back.phase == WATCHDOG_REDUCE &&
       back.time == rec.time && back.culprit_rank == 2 && strcmp(back.culprit_host, "n3") == 0 &&
       strcmp(back.launch.job, "4242") == 0 && back.launch.restart == 1 &&
       back.launch.launch == 3,
       "  every field is the one written (kind, rank, host, pid, step, phase, time, culprit, "
       "launch)");
    is_str(back.message, rec.message, "  the message too: newlines, quotes and UTF-8");
    slurp(path, good, cap);
    ok(strstr(good, "\"format\":\"ftrain-failure\",\"version\":1") &&
       strstr(good, "\"kind\":\"hang\"") && strstr(good, "\"phase\":\"reduce\""),
       "  the text names its format, version, kind and phase");
    is_int(failure_read(path, NULL, &back, err, sizeof err), FAILURE_OK,
           "  with no launch expected any launch's record is read");
}

static void test_atomic(const char *path)
{
    char err[512] = "", tmp[1024];
    failure_t rec;
    struct stat st;
    sample(&rec, 1, 1700000001);
    snprintf(tmp, sizeof tmp, "%s/failures/.j4242-r1-l3-rank1.json.tmp", dir);
    ok(stat(tmp, &st) != 0 && errno == ENOENT, "no temporary file is left after a write");
    /* A rename that fails (a folder where the record goes): the write
     * fails, its temporary file is gone, and no reader takes anything. */
    char other[1024];
    failure_t r7;
    sample(&r7, 7, 1700000002);
    snprintf(other, sizeof other, "%s/failures/j4242-r1-l3-rank7.json", dir);
    mkdir(other, 0755);
    int rc = failure_write(dir, &r7, err, sizeof err);
    ok(rc == FAILURE_EIO && strstr(err, "cannot rename"),
       "a failed rename fails the write, saying so (%s)", err);
    snprintf(tmp, sizeof tmp, "%s/failures/.j4242-r1-l3-rank7.json.tmp", dir);
    ok(stat(tmp, &st) != 0, "  and removes its temporary file");
    rmdir(other);
    /* A crash before the rename leaves a partial temporary file: never read. */
    spit(tmp, "{\"format\":\"ftrain-fail", 22);
    failure_t got[4];
    failure_scan_t scan;
    failure_collect(dir, &rec.launch, got, 4, &scan, err, sizeof err);
    is_int(scan.found * 10 + scan.kept, 11,
           "a partial temporary file (a crash before the rename) is not a record: 1 found, 1 kept");
    unlink(tmp);
    (void)path;
}

/* One bad input: text (len bytes) refused with code, the message holding
 * word. */
static void refused(const char *what, const char *text, size_t len, int code, const char *word)
{
    failure_launch_t me = {.job = "4242", .restart = 1, .launch = 3};
    failure_t back;
    char err[512] = "";
    int rc = failure_parse(text, len, &me, &back, err, sizeof err);
    if (!ok(rc == code && strstr(err, word), "%s: refused, %s (%s)", what,
            failure_strerror(code), err))
        tap_why("  got %d (%s), expected %d with '%s'", rc, failure_strerror(rc), code, word);
}

static void test_bad_inputs(const char *good)
{
    char bad[FAILURE_FILE_MAX];
    size_t n = strlen(good);
    refused("truncated (the first half of a good record)", good, n / 2, FAILURE_ESYNTAX,
            "truncated");
    refused("empty", "", 0, FAILURE_ESYNTAX, "truncated");
    refused("garbage", "\x01\x7fhang at step 12", 17, FAILURE_ESYNTAX, "not JSON");
    refused("a JSON array", "[1,2]", 5, FAILURE_EFORMAT, "not a JSON object");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "ftrain-failure", "ftrain-heartbeat");
    refused("another format", bad, strlen(bad), FAILURE_EFORMAT, "\"format\"");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"version\":1", "\"version\":2");
    refused("version 2", bad, strlen(bad), FAILURE_EVERSION, "version 2");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"step\":12,", "");
    refused("no step", bad, strlen(bad), FAILURE_EFIELD, "\"step\" is missing");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"rank\":1,", "\"rank\":\"1\",");
    refused("a rank that is a string", bad, strlen(bad), FAILURE_EFIELD, "\"rank\" is not an integer");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"step\":12", "\"step\":-5");
    refused("a step below -1", bad, strlen(bad), FAILURE_EFIELD, "\"step\" is -5");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"kind\":\"hang\"", "\"kind\":\"meteor\"");
    refused("an unknown kind", bad, strlen(bad), FAILURE_EFIELD, "'meteor'");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"host\":\"n3\"", "\"host\":\"n3,n4\"");
    refused("a culprit host with a comma (it goes into node lists)", bad, strlen(bad),
            FAILURE_EFIELD, "culprit.host");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"time\":", "\"time\":\"x\",\"was\":");
    refused("a time that is not a number", bad, strlen(bad), FAILURE_EFIELD, "\"time\"");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"kind\":", "\"kind\":\"nan\",\"kind\":");
    refused("a duplicated member", bad, strlen(bad), FAILURE_ESYNTAX, "duplicate");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"id\":3", "\"id\":2");
    refused("a record of the launch before (id 2)", bad, strlen(bad), FAILURE_ESTALE,
            "not of this one");
    snprintf(bad, sizeof bad, "%s", good);
    replace(bad, sizeof bad, "\"job\":\"4242\"", "\"job\":\"4243\"");
    refused("a record of another job", bad, strlen(bad), FAILURE_ESTALE, "job '4243'");
    /* A message longer than a record may hold (the file still small). */
    char *huge = malloc(FAILURE_FILE_MAX + 64);
    snprintf(bad, sizeof bad, "%s", good);
    char *m = strstr(bad, "\"message\":\"");
    size_t at = (size_t)(m - bad) + 11, len = FAILURE_MESSAGE_MAX + 10;
    memcpy(huge, bad, at);
    memset(huge + at, 'x', len);
    memcpy(huge + at + len, "\"}", 3);
    refused("a message over FAILURE_MESSAGE_MAX", huge, strlen(huge), FAILURE_EFIELD,
            "\"message\" is 2058 bytes long");
    /* A file over FAILURE_FILE_MAX: refused by its size, unread. */
    memset(huge, ' ', FAILURE_FILE_MAX + 1);
    memcpy(huge, good, strlen(good));
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/huge.json", dir);
    spit(path, huge, FAILURE_FILE_MAX + 1);
    failure_t back;
    int rc = failure_read(path, NULL, &back, err, sizeof err);
    ok(rc == FAILURE_ETOOBIG && strstr(err, "8193 bytes"),
       "a file of FAILURE_FILE_MAX + 1 bytes: refused by its size (%s)", err);
    rc = failure_read(dir, NULL, &back, err, sizeof err);
    ok(rc == FAILURE_EIO && strstr(err, "not a regular file"), "a folder: refused (%s)", err);
    unlink(path);
    free(huge);
}

static void test_collect(void)
{
    char err[512] = "", path[1024];
    failure_t rec, got[8];
    failure_scan_t scan;
    /* rank 1 of the round trip is there; rank 0 later, rank 5 earlier, one
     * of the launch before, one garbage file. */
    sample(&rec, 0, 1700000009);
    failure_write(dir, &rec, err, sizeof err);
    sample(&rec, 5, 1699999999);
    failure_write(dir, &rec, err, sizeof err);
    sample(&rec, 2, 1700000000);
    rec.launch.launch = 2;
    failure_write(dir, &rec, err, sizeof err);
    snprintf(path, sizeof path, "%s/failures/zz.json", dir);
    spit(path, "{\"format\":", 10);
    failure_launch_t me = {.job = "4242", .restart = 1, .launch = 3};
    int rc = failure_collect(dir, &me, got, 8, &scan, err, sizeof err);
    ok(rc == FAILURE_OK && scan.found == 5 && scan.kept == 3 && scan.stale == 1 &&
       scan.refused == 1, "collect: 5 files, 3 of this launch, 1 of the launch before, 1 refused");
    ok(scan.kept == 3 && got[0].rank == 5 && got[1].rank == 1 && got[2].rank == 0,
       "  this launch's records in the order of their time (ranks 5, 1, 0)");
    ok(strstr(scan.first_refusal, "zz.json") && strstr(scan.first_refusal, "truncated"),
       "  the refused one is named, with why (%s)", scan.first_refusal);
    rc = failure_collect(dir, &me, got, 1, &scan, err, sizeof err);
    is_int(scan.kept, 1, "  no more than max are stored");
    char none[600];
    snprintf(none, sizeof none, "%s/nothing", dir);
    rc = failure_collect(none, &me, got, 8, &scan, err, sizeof err);
    ok(rc == FAILURE_OK && scan.found == 0, "a run directory without records: none, no error");
}

static void test_env_and_limits(void)
{
    failure_launch_t id;
    setenv("SLURM_JOB_ID", "777", 1);
    setenv("SLURM_RESTART_COUNT", "4", 1);
    setenv("FTRAIN_LAUNCH_ID", "2", 1);
    failure_launch_from_env(&id);
    ok(strcmp(id.job, "777") == 0 && id.restart == 4 && id.launch == 2,
       "the launch is SLURM_JOB_ID, SLURM_RESTART_COUNT and FTRAIN_LAUNCH_ID");
    setenv("SLURM_JOB_ID", "../etc", 1);
    setenv("SLURM_RESTART_COUNT", "4x", 1);
    setenv("FTRAIN_LAUNCH_ID", "99999999999", 1);
    failure_launch_from_env(&id);
    ok(id.job[0] == '\0' && id.restart == 0 && id.launch == 0,
       "  values that are not a job id or a counter count as unset (no path in a file name)");
    failure_t rec;
    failure_init(&rec, FAILURE_OTHER, 0);
    char msg[FAILURE_MESSAGE_MAX + 8];
    memset(msg, 'a', sizeof msg);
    memcpy(msg + FAILURE_MESSAGE_MAX - 2, "\xc3\xa9", 2); /* a 2-byte character across the cut */
    msg[sizeof msg - 1] = '\0';
    failure_set_message(&rec, msg);
    is_int(strlen(rec.message), FAILURE_MESSAGE_MAX - 2,
           "a long message is cut before a character that does not fit whole");
    char err[256] = "";
    snprintf(rec.culprit_host, sizeof rec.culprit_host, "a b");
    ok(failure_write(dir, &rec, err, sizeof err) == FAILURE_EINVAL && strstr(err, "culprit.host"),
       "the writer refuses what a reader would refuse (%s)", err);
}

int main(void)
{
    char path[1024], good[FAILURE_FILE_MAX];
    tap_tmpdir(dir, sizeof dir, "failure_record");
    snprintf(path, sizeof path, "%s/failures/j4242-r1-l3-rank1.json", dir);
    test_round_trip(path, good, sizeof good);
    test_atomic(path);
    test_bad_inputs(good);
    test_collect();
    test_env_and_limits();
    tap_rmtree(dir);
    return done_testing();
}
