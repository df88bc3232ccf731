/*
 * state_check.c - what a resume checks of a checkpoint's record before it
 * reads a byte (R4 of state.h): the record's format and version, the
 * architecture, every option but --epochs/--steps, the training data and,
 * in deterministic mode, the BLAS threads; a refusal names every
 * difference.  And what it takes from the record: the init, and a warning
 * when another run length reshapes the cosine schedule.
 */
#include "state/state.h"
#include "state/state_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* A string from a checkpoint's record, for a message: at most cap - 1
 * bytes, control characters shown as '?', so a record cannot drive the
 * terminal. */
static const char *printable(const char *str, char *buf, size_t cap)
{
    size_t i = 0;
    for (; str && str[i] && i + 1 < cap; i++)
        buf[i] = (unsigned char)str[i] < 0x20 || str[i] == 0x7f ? '?' : str[i];
    buf[i] = '\0';
    return buf;
}

/* The training data must be the data the checkpoint was trained on: the
 * cursor and the sampler's permutation index into it.  Records written
 * before the fingerprint existed have no "data" object and are not checked. */
static int state_check_data(const state_t *st, json_t *data, char *err, size_t cap)
{
    if (!data)
        return STATE_OK;
    json_int_t samples = -1;
    const char *fp = NULL;
    char mine[STATE_HEX64_SIZE], theirs[STATE_HEX64_SIZE];
    state_hex64(st->data_fp, mine);
    if (json_unpack(data, "{s:I, s:s}", "train_samples", &samples, "fingerprint", &fp) != 0)
        return util_fail(err, cap, STATE_EMISMATCH,
                         "checkpoint record's \"data\" object lacks train_samples "
                         "(integer) or fingerprint (string)");
    if (samples != st->n_train || strcmp(fp, mine) != 0)
        return util_fail(err, cap, STATE_EMISMATCH,
                         "training data differs: the checkpoint was trained on %lld samples "
                         "(fingerprint %s), this run loaded %lld (fingerprint %s); resume "
                         "with the same data (--data-dir), or use a new --run-dir",
                         (long long)samples, printable(fp, theirs, sizeof theirs),
                         (long long)st->n_train, mine);
    return STATE_OK;
}

/* The record's format and version, and the architecture (R4). */
static int state_check_format_arch(const state_t *st, json_t *rec, char *err, size_t cap)
{
    const char *format = json_string_value(json_object_get(rec, "format"));
    json_t *version = json_object_get(rec, "version");
    char quoted[STATE_QUOTE_MAX + 1], their_str[MODEL_ARCH_STRING_MAX];
    if (!format || strcmp(format, STATE_RECORD_FORMAT) != 0 || !json_is_integer(version))
        return util_fail(err, cap, STATE_EMISMATCH,
                         "not an ftrain training checkpoint: its record's format is %s%s%s "
                         "(expected \"%s\" with an integer version)",
                         format ? "\"" : "",
                         format ? printable(format, quoted, sizeof quoted) : "missing",
                         format ? "\"" : "", STATE_RECORD_FORMAT);
    if (json_integer_value(version) < 1 || json_integer_value(version) > STATE_RECORD_VERSION)
        return util_fail(err, cap, STATE_EMISMATCH, "record version %lld: this ftrain reads "
                         "version %d%s", (long long)json_integer_value(version),
                         STATE_RECORD_VERSION,
                         json_integer_value(version) > STATE_RECORD_VERSION
                             ? " (the checkpoint was written by a newer ftrain)" : "");
    json_t *arch = json_object_get(rec, "arch");
    const char *fp = json_string_value(json_object_get(arch, "fingerprint"));
    const char *theirs = json_string_value(json_object_get(arch, "string"));
    const model_arch_t *mine = model_arch(st->model);
    char mine_fp[STATE_HEX64_SIZE], mine_str[MODEL_ARCH_STRING_MAX];
    state_hex64(model_arch_fingerprint(mine), mine_fp);
    model_arch_string(mine, mine_str, sizeof mine_str);
    if (!fp || strcmp(fp, mine_fp) != 0)
        return util_fail(err, cap, STATE_EMISMATCH,
                         "architecture differs: the checkpoint has %s, this run asks for %s "
                         "(resume with the checkpoint's --layers and --activation, or use a "
                         "new --run-dir to train this architecture from the start)",
                         theirs ? printable(theirs, their_str, sizeof their_str) : "(unknown)",
                         mine_str);
    return STATE_OK;
}

/* Room for the list of options that differ, in a refusal. */
#define STATE_DIFFS_MAX 1536

/* Every option but --epochs/--steps must be the run's (R4).  A refusal
 * names every option that differs, each with both values, so that one
 * retry can fix them all. */
static int state_check_options(const state_t *st, json_t *rec, char *err, size_t cap)
{
    char cfgbuf[STATE_CONFIG_JSON_MAX];
    json_t *theirs = json_object_get(rec, "config");
    if (config_to_json(st->cfg, cfgbuf, sizeof cfgbuf) < 0 || !json_is_object(theirs))
        return util_fail(err, cap, STATE_EMISMATCH, "checkpoint record has no config object");
    json_t *ours = json_loads(cfgbuf, 0, NULL);
    const char *key;
    json_t *val;
    char diffs[STATE_DIFFS_MAX] = "";
    size_t used = 0;
    int ndiff = 0;
    json_object_foreach(ours, key, val) {
        if (!strcmp(key, "epochs") || !strcmp(key, "steps"))
            continue;
        json_t *their_val = json_object_get(theirs, key);
        if (their_val && json_equal(their_val, val))
            continue;
        char *their_text = their_val ? json_dumps(their_val, JSON_ENCODE_ANY) : NULL;
        char *our_text = json_dumps(val, JSON_ENCODE_ANY);
        char name[STATE_QUOTE_MAX + 1];
        printable(key, name, sizeof name);
        for (char *c = name; *c; c++) /* the record's key, as the option is written */
            if (*c == '_')
                *c = '-';
        if (used < sizeof diffs) {
            int n = snprintf(diffs + used, sizeof diffs - used,
                             "%s--%s (the checkpoint has %s, this run %s)", ndiff ? "; " : "",
                             name, their_text ? their_text : "nothing", our_text ? our_text : "?");
            used += n > 0 ? (size_t)n : 0;
        }
        ndiff++;
        free(their_text);
        free(our_text);
    }
    json_decref(ours);
    if (!ndiff)
        return STATE_OK;
    return util_fail(err, cap, STATE_EMISMATCH,
                     "%d option%s differ%s from the checkpoint's: %s%s; resume with the "
                     "checkpoint's options (ckptctl inspect shows them under config:), or use "
                     "a new --run-dir", ndiff, ndiff == 1 ? "" : "s", ndiff == 1 ? "s" : "",
                     diffs, used >= sizeof diffs ? "..." : "");
}

/* Compare the checkpoint's record with this run; R4. */
int state_check_record(const state_t *st, json_t *rec, char *err, size_t cap)
{
    int rc = state_check_format_arch(st, rec, err, cap);
    if (rc == STATE_OK)
        rc = state_check_options(st, rec, err, cap);
    if (rc == STATE_OK)
        rc = state_check_data(st, json_object_get(rec, "data"), err, cap);
    /* Deterministic mode promises bit-identical weights, and OpenBLAS gives
     * other bits with another thread count (docs/determinism.md). */
    json_t *threads = json_object_get(rec, "threads");
    if (rc == STATE_OK && st->cfg->deterministic && json_is_integer(threads) &&
        json_integer_value(threads) != st->threads)
        rc = util_fail(err, cap, STATE_EMISMATCH,
                       "BLAS threads differ: the checkpoint was written with %lld per rank, "
                       "this run has %d; --deterministic results depend on it (pass "
                       "--threads %lld, or use a new --run-dir)",
                       (long long)json_integer_value(threads), st->threads,
                       (long long)json_integer_value(threads));
    return rc;
}

/* R4 lets --steps/--epochs change, but the cosine schedule is spread over
 * the run's total steps: another total reshapes it from the resumed step on
 * (the rate there jumps).  Allowed, as extending a run is legitimate, but
 * said, naming both totals and the rate before and after. */
void state_warn_schedule(const state_t *st, json_t *rec, int64_t step)
{
    const optim_cfg_t *oc = optim_config(st->optim);
    json_t *cfg = json_object_get(rec, "config");
    json_int_t steps = json_integer_value(json_object_get(cfg, "steps"));
    json_int_t epochs = json_integer_value(json_object_get(cfg, "epochs"));
    json_int_t spe = json_integer_value(json_object_get(rec, "steps_per_epoch"));
    json_t *lr = json_object_get(json_object_get(rec, "schedule"), "lr");
    int64_t theirs = steps > 0 ? steps : epochs * spe;
    if (oc->schedule != SCHED_COSINE || theirs <= 0 || theirs == oc->total_steps)
        return;
    fprintf(stderr,
            "ftrain: warning: resume: this run has %lld steps in all, the checkpoint's run had "
            "%lld; the cosine learning-rate schedule spans the total, so from step %lld on it "
            "follows the new one (%.3g there",
            (long long)oc->total_steps, (long long)theirs, (long long)step, optim_lr(oc, step));
    if (json_is_number(lr))
        fprintf(stderr, ", the old one gave %.3g", json_number_value(lr));
    fprintf(stderr, ")\n");
}

/* Adopt the checkpoint's init, so that later saves record where the
 * weights came from.  Records of older writers have none: those had one
 * rule, kaiming for ReLU nets and xavier for tanh (the architecture is
 * checked equal), and resume without a note, as they did.  Another --init
 * is noted by rank 0, never refused: the weights are the checkpoint's.  A
 * name from a newer ftrain (-1) leaves ours. */
void state_adopt_init(state_t *st, json_t *rec, int rank)
{
    json_t *init = json_object_get(rec, "init");
    int saved = init ? model_init_parse(json_string_value(init))
                : model_arch(st->model)->act == ACT_TANH ? INIT_XAVIER : INIT_KAIMING;
    if (rank == 0 && init && saved >= 0 && saved != (int)st->init)
        fprintf(stderr,
                "ftrain: note: resume: the checkpoint's weights started from --init %s; "
                "this run's --init %s changes nothing, the weights come from the checkpoint\n",
                model_init_name((model_init_t)saved), model_init_name(st->init));
    if (saved >= 0)
        st->init = (model_init_t)saved;
}
