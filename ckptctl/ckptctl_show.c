/*
 * ckptctl_show.c - the ckptctl commands that show what checkpoints hold,
 * changing nothing: list (with --local, of a node-local root, ckpt_local.h,
 * whose steps hold only some shards) and inspect.  verify is
 * ckptctl_verify.c.  Their output, text and --json, is specified in
 * docs/ckptctl.md.
 */
#include "ckptctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ftrain/ckpt_local.h"

/* A shard's byte range, "[<u64>, <u64>)". */
#define RANGE_TEXT_MAX (sizeof "[, )" + 2 * sizeof "18446744073709551615")

/* ---- list ---------------------------------------------------------------------- */

/* Find an integer member named key in obj or one level of nested objects
 * (a record keeps its epoch at the top or in a group of its own). */
static bool record_int(json_t *obj, const char *key, long long *out)
{
    json_t *value = json_object_get(obj, key);
    if (json_is_integer(value)) {
        *out = json_integer_value(value);
        return true;
    }
    const char *name;
    json_t *member;
    json_object_foreach (obj, name, member) {
        value = json_is_object(member) ? json_object_get(member, key) : NULL;
        if (json_is_integer(value)) {
            *out = json_integer_value(value);
            return true;
        }
    }
    return false;
}

/* The epoch a committed checkpoint's record gives (read before --verify
 * re-reads the shards, so that a checkpoint found corrupt then still shows
 * it, as it shows its sizes).  @return false when it gives none or cannot
 * be read (list shows "-"). */
static bool entry_epoch(const char *root, const ckpt_entry_t *entry, long long *epoch)
{
    char path[CKPT_PATH_MAX];
    ckpt_t *ckpt = NULL;
    bool found = false;
    if (entry->status != CKPT_ST_COMMITTED)
        return false;
    snprintf(path, sizeof path, "%s/%s", root, entry->name);
    if (ckpt_open(path, &ckpt) == CKPT_OK) {
        json_t *record = json_loads(ckpt_record_json(ckpt), 0, NULL);
        found = record && record_int(record, "epoch", epoch);
        json_decref(record);
    }
    ckpt_close(ckpt);
    return found;
}

static const char *status_name(ckpt_status_t status)
{
    switch (status) {
    case CKPT_ST_COMMITTED:
        return "committed";
    case CKPT_ST_INCOMPLETE:
        return "incomplete";
    case CKPT_ST_SET_ASIDE:
        return "set-aside";
    default:
        return "corrupt";
    }
}

/* An array of the shard indices whose flag is want (present, or not). */
static json_t *shard_indices_json(const ckpt_local_step_t *held, int want)
{
    json_t *list = json_array();
    for (int i = 0; i < held->nshards; i++)
        if (!!held->present[i] == want)
            json_array_append_new(list, json_integer(i));
    return list;
}

/* held: with --local, what the node holds of a committed step (NULL when
 * not --local, or the step is not a sealed one). */
static json_t *list_entry_json(const ckpt_entry_t *entry, bool have_epoch,
                               long long epoch, bool local,
                               const ckpt_local_step_t *held)
{
    char utc[CTL_FIELD_MAX];
    bool dated = ctl_fmt_time_utc(entry->created, utc, sizeof utc);
    /* Known only when a manifest was read; null otherwise. */
    bool known = entry->world_size > 0;
    json_t *obj = json_object();
    json_object_set_new(obj, "name", ctl_json_str(entry->name));
    json_object_set_new(obj, "step", ctl_json_uint(entry->step));
    json_object_set_new(obj, "status", ctl_json_str(status_name(entry->status)));
    json_object_set_new(obj, "latest", json_boolean(entry->is_latest));
    json_object_set_new(obj, "epoch", have_epoch ? json_integer(epoch) : json_null());
    json_object_set_new(obj, "world_size",
                        known ? json_integer(entry->world_size) : json_null());
    if (local) {
        json_object_set_new(obj, "shards_present",
                            held ? json_integer(held->npresent) : json_null());
        json_object_set_new(obj, "present",
                            held ? shard_indices_json(held, 1) : json_null());
        json_object_set_new(obj, "missing",
                            held ? shard_indices_json(held, 0) : json_null());
    }
    json_object_set_new(obj, "raw_bytes",
                        known ? ctl_json_uint(entry->raw_bytes) : json_null());
    json_object_set_new(obj, "file_bytes",
                        known ? ctl_json_uint(entry->file_bytes) : json_null());
    if (local)
        json_object_set_new(obj, "held_bytes",
                            held ? ctl_json_uint(held->present_bytes) : json_null());
    json_object_set_new(obj, "created",
                        known ? json_integer(entry->created) : json_null());
    json_object_set_new(obj, "created_utc",
                        known && dated ? ctl_json_str(utc) : json_null());
    json_object_set_new(obj, "why",
                        entry->status == CKPT_ST_COMMITTED ? json_null()
                                                           : ctl_json_str(entry->why));
    return obj;
}

/* One line of list; with --local (local), the shards present and the
 * bytes held replace the stored size (held as list_entry_json's). */
static void list_entry_print(const ckpt_entry_t *entry, int name_width, bool have_epoch,
                             long long epoch, bool local, const ckpt_local_step_t *held)
{
    char raw[CTL_FIELD_MAX], stored[CTL_FIELD_MAX], when[CTL_FIELD_MAX];
    char epoch_text[CTL_FIELD_MAX], world[CTL_FIELD_MAX], shards[CTL_FIELD_MAX] = "";
    bool committed = entry->status == CKPT_ST_COMMITTED;
    /* As list_entry_json: the sizes and time are shown whenever the
     * manifest was read, also for a checkpoint --verify found bad. */
    bool known = entry->world_size > 0;
    ctl_fmt_bytes(entry->raw_bytes, raw, sizeof raw);
    ctl_fmt_bytes(local && held ? held->present_bytes : entry->file_bytes, stored,
                  sizeof stored);
    ctl_fmt_time_local(entry->created, when, sizeof when);
    snprintf(epoch_text, sizeof epoch_text, have_epoch ? "%lld" : "-", epoch);
    snprintf(world, sizeof world, entry->world_size > 0 ? "%d" : "-", entry->world_size);
    if (local && held)
        snprintf(shards, sizeof shards, " %4d of %-3d", held->npresent, held->nshards);
    else if (local)
        snprintf(shards, sizeof shards, " %11s", "-");
    printf("%-*s %10" PRIu64 " %6s %5s%s %10s %10s  %-19s  %s%s%s%s\n", name_width, entry->name,
           entry->step, epoch_text, world, shards, known ? raw : "-",
           known && (!local || held) ? stored : "-", known ? when : "-",
           status_name(entry->status), entry->is_latest ? " LATEST" : "",
           committed || !entry->why[0] ? "" : ": ", committed ? "" : entry->why);
}

/* What a node-local root holds of the step of entry (NULL: nothing known). */
static const ckpt_local_step_t *find_held(const ckpt_local_step_t *steps, size_t count,
                                          const ckpt_entry_t *entry)
{
    if (entry->status != CKPT_ST_COMMITTED || entry->name[0] == '.')
        return NULL;
    for (size_t i = 0; i < count; i++)
        if (steps[i].step == entry->step)
            return &steps[i];
    return NULL;
}

/* dir_gone for the entry name of root. */
static bool entry_gone(const char *root, const char *name)
{
    char dir[CKPT_PATH_MAX];
    return snprintf(dir, sizeof dir, "%s/%s", root, name) < (int)sizeof dir &&
           ctl_dir_gone(dir);
}

/* The status verify gives a checkpoint that failed with rc: a shard file
 * missing (or no manifest) is incomplete, anything else corrupt. */
static ckpt_status_t failed_status(int rc)
{
    return rc == CKPT_EINCOMPLETE || rc == CKPT_ENOTFOUND ? CKPT_ST_INCOMPLETE
                                                          : CKPT_ST_CORRUPT;
}

/* list --verify: re-read a committed step of root as verify does (with
 * --local (local), the shards present); a failure gives the entry verify's
 * status, with the library's reason.  @return false when it failed. */
static bool verify_entry(const char *root, ckpt_entry_t *entry, bool local)
{
    char dir[CKPT_PATH_MAX];
    ckpt_t *ckpt = NULL;
    if (entry->status != CKPT_ST_COMMITTED ||
        snprintf(dir, sizeof dir, "%s/%s", root, entry->name) >= (int)sizeof dir)
        return true;
    int rc = local ? ckpt_local_verify(dir, NULL) : ckpt_open(dir, &ckpt);
    if (rc == CKPT_OK && !local)
        rc = ckpt_verify(ckpt);
    ckpt_close(ckpt);
    if (rc == CKPT_OK)
        return true;
    entry->status = failed_status(rc);
    snprintf(entry->why, sizeof entry->why, "%s: %s", ckpt_strerror(rc),
             ctl_lib_why(rc, "verify", dir));
    return false;
}

int cmd_list(const args_t *args)
{
    const char *root = args->noperands ? args->operands[0] : ".";
    bool json = args->set & OPT_JSON, local = args->set & OPT_LOCAL,
         verify = args->set & OPT_VERIFY;
    char run_root[CKPT_PATH_MAX];
    if (!local) /* a node-local root is never taken for a run directory */
        root = ctl_root_arg(root, run_root, sizeof run_root);
    ckpt_entry_t *entries = NULL;
    ckpt_local_step_t *steps = NULL;
    size_t count = 0, nsteps = 0;
    /* --verify re-reads each committed step here, as verify does, so that
     * both call a checkpoint the same (and with --local only the shards
     * present are read). */
    int rc = ckpt_list(root, CKPT_LIST_SET_ASIDE, &entries, &count);
    if (rc != CKPT_OK)
        return ctl_lib_fail("list", root, rc);
    if (local && (rc = ckpt_local_scan(root, &steps, &nsteps)) != CKPT_OK) {
        free(entries);
        return ctl_lib_fail("list", root, rc);
    }

    json_t *list = json ? json_array() : NULL;
    bool bad = false;
    /* The name column fits the longest name (step-<N>.corrupt-<k>). */
    int w = 20;
    for (size_t i = 0; i < count; i++)
        if ((int)strlen(entries[i].name) > w)
            w = (int)strlen(entries[i].name);
    if (!json && count > 0 && local)
        printf("%-*s %10s %6s %5s %11s %10s %10s  %-19s  %s\n", w, "NAME", "STEP", "EPOCH",
               "WORLD", "PRESENT", "RAW", "HELD", "CREATED", "STATUS");
    else if (!json && count > 0)
        printf("%-*s %10s %6s %5s %10s %10s  %-19s  %s\n", w, "NAME", "STEP", "EPOCH",
               "WORLD", "RAW", "STORED", "CREATED", "STATUS");
    for (size_t i = 0; i < count; i++) {
        long long epoch = -1;
        bool have_epoch = entry_epoch(root, &entries[i], &epoch);
        const ckpt_local_step_t *held = local ? find_held(steps, nsteps, &entries[i]) : NULL;
        /* A committed checkpoint that does not verify is bad, incomplete
         * or corrupt; an unfinished save is not. */
        bool failed = verify && !verify_entry(root, &entries[i], local);
        if (entries[i].status != CKPT_ST_COMMITTED && entry_gone(root, entries[i].name))
            continue; /* removed since it was listed */
        if (failed || entries[i].status == CKPT_ST_CORRUPT)
            bad = true;
        if (json)
            json_array_append_new(list, list_entry_json(&entries[i], have_epoch, epoch,
                                                        local, held));
        else
            list_entry_print(&entries[i], w, have_epoch, epoch, local, held);
    }
    ckpt_local_scan_free(steps, nsteps);
    int result = bad ? EXIT_BAD : EXIT_GOOD;
    if (json) {
        json_t *doc = json_object();
        json_object_set_new(doc, "root", ctl_json_str(root));
        json_object_set_new(doc, "verified", json_boolean(args->set & OPT_VERIFY));
        if (local)
            json_object_set_new(doc, "local", json_true());
        json_object_set_new(doc, "checkpoints", list);
        int print_rc = ctl_json_print(doc);
        if (print_rc != EXIT_GOOD)
            result = print_rc;
    } else if (count == 0) {
        printf("no checkpoints in '%s'\n", root);
    }
    free(entries);
    return result;
}

/* ---- inspect: the record ---------------------------------------------------------- */

/* A flattened (dotted) record key; longer ones are cut. */
#define RECORD_KEY_MAX 256
/* Room for a record key and for a record string as shown, after escaping
 * (ckpt_text_clean), and the NUL; what is longer is cut. */
#define RECORD_KEY_SHOWN 1100
#define RECORD_STRING_SHOWN 4100
/* Bytes of a record value that is not a string shown, as compact JSON,
 * before "..." (one record field must not fill the screen). */
#define RECORD_JSON_SHOWN 200
/* A record string longer than this shows its head and its length. */
#define RECORD_STRING_HEAD 120
/* Objects nested deeper than this are printed as compact JSON, not
 * flattened: a record is anyone's JSON, and jansson accepts 2048 levels. */
#define RECORD_FLATTEN_DEPTH 8

/* text with control characters written as \xNN, into buf: a record is
 * anyone's JSON, and it must not drive the terminal. */
static const char *clean(const char *text, char *buf, size_t cap)
{
    ckpt_text_clean(text, buf, cap);
    return buf;
}

/* A real in the shortest form that reads back as the same double (0.9,
 * not jansson's 0.90000000000000002), with ".0" when it would read as an
 * integer. */
static void format_real(double v, char *buf, size_t cap)
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".eEni") && strlen(buf) + 3 <= cap)
        strcat(buf, ".0");
}

/* Compact JSON of a record value, reals in their shortest form, cut after
 * cap - 1 bytes (*cut set): what a leaf shows. */
typedef struct {
    char *buf;
    size_t len, cap;
    bool cut;
} shown_t;

static void shown_put(shown_t *out, const char *text)
{
    size_t n = strlen(text);
    size_t room = out->cap - 1 - out->len;
    if (n > room) {
        n = room;
        out->cut = true;
    }
    memcpy(out->buf + out->len, text, n);
    out->len += n;
    out->buf[out->len] = '\0';
}

static void shown_json(shown_t *out, json_t *value, int depth)
{
    if (out->cut)
        return;
    if (json_is_real(value)) {
        char real[32];
        format_real(json_real_value(value), real, sizeof real);
        shown_put(out, real);
    } else if (json_is_array(value) && depth < RECORD_FLATTEN_DEPTH) {
        size_t i;
        json_t *item;
        shown_put(out, "[");
        json_array_foreach (value, i, item) {
            if (i > 0)
                shown_put(out, ",");
            shown_json(out, item, depth + 1);
        }
        shown_put(out, "]");
    } else if (json_is_object(value) && depth < RECORD_FLATTEN_DEPTH) {
        const char *name;
        json_t *member;
        bool first = true;
        shown_put(out, "{");
        json_object_foreach (value, name, member) {
            json_t *key = json_string(name);
            char *text = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL;
            shown_put(out, first ? "" : ",");
            shown_put(out, text ? text : "?");
            shown_put(out, ":");
            free(text);
            json_decref(key);
            shown_json(out, member, depth + 1);
            first = false;
        }
        shown_put(out, "}");
    } else {
        char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        shown_put(out, text ? text : "?");
        free(text);
    }
}

/* Print "  key value" for one record value that is not flattened further.
 * A string longer than RECORD_STRING_HEAD bytes (a binary value in base64,
 * say) shows its head and its length; --json has it whole. */
static void print_record_leaf(const char *key, json_t *value)
{
    char key_shown[RECORD_KEY_SHOWN];
    clean(key, key_shown, sizeof key_shown);
    if (json_is_string(value)) {
        char string_shown[RECORD_STRING_SHOWN];
        size_t len = json_string_length(value);
        if (len <= RECORD_STRING_HEAD) {
            printf("  %-28s %s\n", key_shown,
                   clean(json_string_value(value), string_shown, sizeof string_shown));
            return;
        }
        char head[RECORD_STRING_HEAD + 1];
        memcpy(head, json_string_value(value), RECORD_STRING_HEAD);
        head[RECORD_STRING_HEAD] = '\0';
        printf("  %-28s %s... (%zu bytes; inspect --json shows it whole)\n", key_shown,
               clean(head, string_shown, sizeof string_shown), len);
        return;
    }
    char text[RECORD_JSON_SHOWN + 1];
    shown_t out = {text, 0, sizeof text, false};
    text[0] = '\0';
    shown_json(&out, value, 0);
    /* Room for the escape or character that straddles the cut, so that the
     * first RECORD_JSON_SHOWN bytes are always there. */
    char json_shown[RECORD_JSON_SHOWN + CTL_CLEAN_GROWTH];
    printf("  %-28s %s%s\n", key_shown, clean(text, json_shown, sizeof json_shown),
           out.cut ? "..." : "");
}

/* Print one record value as "  prefix.key value", flattening objects. */
static void print_record_value(const char *prefix, json_t *value, int depth)
{
    if (json_is_object(value) && json_object_size(value) > 0 &&
        depth < RECORD_FLATTEN_DEPTH) {
        const char *name;
        json_t *member;
        json_object_foreach (value, name, member) {
            char key[RECORD_KEY_MAX];
            snprintf(key, sizeof key, "%s.%s", prefix, name);
            print_record_value(key, member, depth + 1);
        }
        return;
    }
    print_record_leaf(prefix, value);
}

/* Keys of a record section, NULL-terminated. */
#define SECTION_KEYS_MAX 10

/* Sections of the record shown by inspect, by top-level key. */
static const struct {
    const char *title;
    const char *keys[SECTION_KEYS_MAX];
} record_sections[] = {
    {"data cursor",
     {"epoch", "cursor", "steps_per_epoch", "samples_seen", "step", "rng", "schedule",
      "data", NULL}},
    {"lineage",
     {"lineage", "slurm", "saved_at", "run_seconds", "ftrain_version", "world_size",
      NULL}},
    {"config", {"config", NULL}},
};
#define NSECTIONS (sizeof record_sections / sizeof record_sections[0])

static bool in_section(const char *key)
{
    for (size_t s = 0; s < NSECTIONS; s++)
        for (int i = 0; record_sections[s].keys[i]; i++)
            if (strcmp(record_sections[s].keys[i], key) == 0)
                return true;
    return false;
}

static void print_record(json_t *record)
{
    for (size_t section = 0; section < NSECTIONS; section++) {
        bool printed = false;
        for (int i = 0; record_sections[section].keys[i]; i++) {
            const char *key = record_sections[section].keys[i];
            json_t *value = json_object_get(record, key);
            if (!value)
                continue;
            if (!printed)
                printf("\n%s:\n", record_sections[section].title);
            printed = true;
            print_record_value(key, value, 0);
        }
    }
    bool printed = false;
    const char *key;
    json_t *value;
    json_object_foreach (record, key, value) {
        if (in_section(key))
            continue;
        if (!printed)
            printf("\nrecord (other):\n");
        printed = true;
        print_record_value(key, value, 0);
    }
}

/* ---- inspect ----------------------------------------------------------------------- */

static json_t *tensors_json(const ckpt_t *ckpt)
{
    json_t *list = json_array();
    for (size_t i = 0; i < ckpt_num_tensors(ckpt); i++) {
        const ckpt_tensor_t *tensor = ckpt_tensor_at(ckpt, i);
        json_t *obj = json_object(), *shape = json_array();
        for (int d = 0; d < tensor->ndim; d++)
            json_array_append_new(shape, json_integer(tensor->shape[d]));
        json_object_set_new(obj, "name", ctl_json_str(tensor->name));
        json_object_set_new(obj, "dtype", ctl_json_str(ckpt_dtype_name(tensor->dtype)));
        json_object_set_new(obj, "shape", shape);
        json_object_set_new(obj, "offset", ctl_json_uint(tensor->offset));
        json_object_set_new(obj, "nbytes", ctl_json_uint(tensor->nbytes));
        json_array_append_new(list, obj);
    }
    return list;
}

static json_t *shards_json(const ckpt_t *ckpt)
{
    json_t *list = json_array();
    for (int i = 0; i < ckpt_world_size(ckpt); i++) {
        const ckpt_shard_info_t *shard = ckpt_shard_at(ckpt, i);
        char file[CKPT_FILE_NAME_MAX];
        ckpt_shard_name(i, file, sizeof file);
        json_t *obj = json_object();
        json_object_set_new(obj, "index", json_integer(i));
        json_object_set_new(obj, "file", ctl_json_str(file));
        json_object_set_new(obj, "raw_offset", ctl_json_uint(shard->raw_offset));
        json_object_set_new(obj, "raw_bytes", ctl_json_uint(shard->raw_bytes));
        json_object_set_new(obj, "file_bytes", ctl_json_uint(shard->file_bytes));
        json_object_set_new(obj, "nframes", json_integer(shard->nframes));
        json_object_set_new(obj, "xxh64", ctl_json_hex64(shard->xxh64));
        json_array_append_new(list, obj);
    }
    return list;
}

/* inspect --json of the checkpoint at dir; the document takes record. */
static int inspect_json(const char *dir, const ckpt_t *ckpt, json_t *record,
                        uint64_t stored)
{
    char utc[CTL_FIELD_MAX];
    bool dated = ctl_fmt_time_utc(ckpt_created(ckpt), utc, sizeof utc);
    json_t *doc = json_object();
    json_object_set_new(doc, "path", ctl_json_str(dir));
    json_object_set_new(doc, "step", ctl_json_uint(ckpt_step(ckpt)));
    json_object_set_new(doc, "created", json_integer(ckpt_created(ckpt)));
    json_object_set_new(doc, "created_utc", dated ? ctl_json_str(utc) : json_null());
    json_object_set_new(doc, "world_size", json_integer(ckpt_world_size(ckpt)));
    json_object_set_new(doc, "total_bytes", ctl_json_uint(ckpt_total_bytes(ckpt)));
    json_object_set_new(doc, "file_bytes", ctl_json_uint(stored));
    json_object_set_new(doc, "manifest_checksum",
                        ctl_json_str(ckpt_manifest_checksummed(ckpt) ? "verified" : "none"));
    json_object_set_new(doc, "tensors", tensors_json(ckpt));
    json_object_set_new(doc, "shards", shards_json(ckpt));
    json_object_set_new(doc, "record", record);
    return ctl_json_print(doc);
}

static void print_tensors(const ckpt_t *ckpt)
{
    printf("\ntensors (%zu):\n", ckpt_num_tensors(ckpt));
    printf("  %-32s %-5s %-20s %14s %14s\n", "NAME", "DTYPE", "SHAPE", "OFFSET",
           "BYTES");
    for (size_t i = 0; i < ckpt_num_tensors(ckpt); i++) {
        const ckpt_tensor_t *tensor = ckpt_tensor_at(ckpt, i);
        char shape[CTL_SHAPE_TEXT_MAX];
        ctl_shape_text(tensor, shape, sizeof shape);
        printf("  %-32s %-5s %-20s %14" PRIu64 " %14" PRIu64 "\n", tensor->name,
               ckpt_dtype_name(tensor->dtype), shape, tensor->offset, tensor->nbytes);
    }
}

static void print_shards(const ckpt_t *ckpt)
{
    printf("\nshards (%d):\n", ckpt_world_size(ckpt));
    printf("  %-16s %-31s %14s %7s  %s\n", "FILE", "RAW RANGE", "FILE BYTES", "FRAMES",
           "XXH64");
    for (int i = 0; i < ckpt_world_size(ckpt); i++) {
        const ckpt_shard_info_t *shard = ckpt_shard_at(ckpt, i);
        char file[CKPT_FILE_NAME_MAX], range[RANGE_TEXT_MAX];
        ckpt_shard_name(i, file, sizeof file);
        snprintf(range, sizeof range, "[%" PRIu64 ", %" PRIu64 ")", shard->raw_offset,
                 shard->raw_offset + shard->raw_bytes);
        printf("  %-16s %-31s %14" PRIu64 " %7u  %016" PRIx64 "\n", file, range,
               shard->file_bytes, shard->nframes, shard->xxh64);
    }
}

static void inspect_print(const char *dir, const ckpt_t *ckpt, json_t *record,
                          uint64_t stored)
{
    char when[CTL_FIELD_MAX], raw[CTL_FIELD_MAX], stored_text[CTL_FIELD_MAX];
    ctl_fmt_time_local(ckpt_created(ckpt), when, sizeof when);
    ctl_fmt_bytes(ckpt_total_bytes(ckpt), raw, sizeof raw);
    ctl_fmt_bytes(stored, stored_text, sizeof stored_text);
    printf("checkpoint   %s\n", dir);
    printf("step         %" PRIu64 "\n", ckpt_step(ckpt));
    printf("created      %s (%" PRId64 ")\n", when, ckpt_created(ckpt));
    printf("world size   %d\n", ckpt_world_size(ckpt));
    printf("flat bytes   %" PRIu64 " (%s), stored %" PRIu64 " (%s)\n",
           ckpt_total_bytes(ckpt), raw, stored, stored_text);
    printf("manifest     %s\n", ckpt_manifest_checksummed(ckpt)
                                    ? "checksum verified"
                                    : "no checksum (written by an older ftrain)");
    print_tensors(ckpt);
    print_shards(ckpt);
    print_record(record);
}

int cmd_inspect(const args_t *args)
{
    char dir[CKPT_PATH_MAX];
    int result = ctl_resolve_ckpt("inspect", args->operands[0],
                                  args->noperands > 1 ? args->operands[1] : NULL, true,
                                  dir, sizeof dir);
    if (result != EXIT_GOOD)
        return result;
    ckpt_t *ckpt = NULL;
    int rc = ckpt_open(dir, &ckpt);
    if (rc != CKPT_OK)
        return ctl_lib_fail("inspect", dir, rc);

    /* The record is the writer's text; one that does not parse shows empty. */
    json_t *record = json_loads(ckpt_record_json(ckpt), 0, NULL);
    if (!record)
        record = json_object();
    uint64_t stored = 0;
    for (int i = 0; i < ckpt_world_size(ckpt); i++)
        stored += ckpt_shard_at(ckpt, i)->file_bytes;

    if (args->set & OPT_JSON) {
        result = inspect_json(dir, ckpt, record, stored);
    } else {
        inspect_print(dir, ckpt, record, stored);
        json_decref(record);
    }
    ckpt_close(ckpt);
    return result;
}
