/*
 * manifest_edit - change or remove one member of a committed manifest and
 * re-seal it, as a writer that wrote it so would have produced it.
 *
 *   manifest_edit MANIFEST KEY[.SUBKEY] [JSON]
 *
 * With JSON, sets MANIFEST's top-level KEY (or KEY's member SUBKEY) to the
 * JSON value; without, removes it (for example "record.data": a record from
 * before the data fingerprint).  Then recomputes manifest_xxh64
 * (docs/checkpoint-format.md) and replaces the file through a temporary
 * file and rename.  Tests use it to make checkpoints of other writers.
 * Exit status: 0 done, 1 error (message on stderr), 2 usage.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ckpt_test.h"

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: manifest_edit MANIFEST KEY[.SUBKEY] [JSON]\n");
        return 2;
    }
    json_error_t e;
    json_t *j = json_load_file(argv[1], 0, &e), *val = NULL;
    if (!j) {
        fprintf(stderr, "manifest_edit: %s: %s\n", argv[1], e.text);
        return 1;
    }
    if (argc == 4 && !(val = json_loads(argv[3], JSON_DECODE_ANY, &e))) {
        fprintf(stderr, "manifest_edit: value '%s': %s\n", argv[3], e.text);
        json_decref(j);
        return 1;
    }
    char path[512];
    snprintf(path, sizeof path, "%s", argv[2]);
    char *dot = strchr(path, '.'), *key = path;
    json_t *parent = j;
    if (dot) {
        *dot = '\0';
        parent = json_object_get(j, path);
        key = dot + 1;
    }
    int bad = 1;
    if (!json_is_object(parent))
        json_decref(val);
    else if (val)
        bad = json_object_set_new(parent, key, val) != 0; /* takes val */
    else
        bad = json_object_del(parent, key) != 0;
    if (bad) {
        fprintf(stderr, "manifest_edit: %s: cannot %s '%s'\n", argv[1], val ? "set" : "remove",
                argv[2]);
        json_decref(j);
        return 1;
    }
    manifest_reseal(j);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.edit", argv[1]);
    int rc = json_dump_file(j, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) != 0 ||
             rename(tmp, argv[1]) != 0;
    if (rc)
        fprintf(stderr, "manifest_edit: cannot write %s\n", argv[1]);
    json_decref(j);
    return rc;
}
