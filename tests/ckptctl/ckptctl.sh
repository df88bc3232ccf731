#!/bin/sh
# ckptctl.sh - TAP tests of the ckptctl command-line tool: list, inspect,
# verify (text and --json, with the JSON parsed and checked for real values),
# corruption detection by exit code, diff, export/import round trips, import
# never overwriting, prune, usage errors, and a golden check that the help,
# the command table and docs/ckptctl.md name the same subcommands.
#
# Reads $BUILD (default build) for build/ckptctl and the fixture maker
# build/tests/tools/ckpt_mkfixture.

. "$(dirname "$0")/../lib.sh"
C=$BUILD/ckptctl
MK=$BUILD/tests/tools/ckpt_mkfixture
DOCS=$(dirname "$0")/../../docs/ckptctl.md
COMMANDS="list inspect verify diff export import prune flush help"

[ -x "$C" ] && [ -x "$MK" ] || skip_all "$C or $MK not built"
# The system interpreter starts faster than a version-manager shim.
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
command -v "$PY" >/dev/null 2>&1 || skip_all "python3 not found (needed to parse --json output)"

# Every run's stderr is kept in $T/all-err too, for the sanitizer check at
# the end.
RUN_ERR_LOG=$T/all-err
# show_err: the last run's stderr, for a failure's details.
show_err() { sed 's/^/#   stderr: /' "$T/err" >&2; }
# py EXPR: evaluate a python expression over the JSON document in $T/out (d).
py() {
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
        "$T/out" "$1" 2>&1
}
flip_byte() { # flip_byte FILE OFFSET
    "$PY" -c 'import sys
p, o = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(o); b = f.read(1); f.seek(o); f.write(bytes([b[0] ^ 0x20]))' "$1" "$2"
}

R=$T/root
"$MK" "$R" 10 --world 3 --mb 0.25 --seed 1 &&
    "$MK" "$R" 20 --world 2 --mb 0.25 --seed 1 &&
    "$MK" "$R" 30 --world 4 --mb 0.25 --seed 1
ok $? "fixtures written (steps 10, 20, 30)"

# ---- list --------------------------------------------------------------------
run "$C" list "$R"
is "$rc" 0 "list exits 0"
is "$(grep -c ' committed' "$T/out")" 3 "list shows three committed checkpoints"
grep -q '^step-00000030 .* committed LATEST' "$T/out"
ok $? "list marks step 30 LATEST"
is "$(grep -c LATEST "$T/out")" 1 "exactly one LATEST mark"
awk '$1 == "step-00000020" { exit !($2 == 20 && $3 == 1 && $4 == 2) }' "$T/out"
ok $? "list line of step 20 shows step 20, epoch 1, world 2"

run "$C" list --json "$R"
is "$rc" 0 "list --json exits 0"
is "$(py '[c["step"] for c in d["checkpoints"]]')" "[10, 20, 30]" "list --json steps"
is "$(py '[c["world_size"] for c in d["checkpoints"]]')" "[3, 2, 4]" "list --json world sizes"
is "$(py '[c["epoch"] for c in d["checkpoints"]]')" "[1, 1, 1]" "list --json epochs from the record"
is "$(py '[c["name"] for c in d["checkpoints"] if c["latest"]]')" "['step-00000030']" \
    "list --json: only step 30 is latest"
is "$(py 'set(c["status"] for c in d["checkpoints"])')" "{'committed'}" "list --json statuses"
is "$(py 'all(c["raw_bytes"] == 256*256*4 + 256*4 + 8 + 32 for c in d["checkpoints"])')" \
    True "list --json raw_bytes equals the tensors' bytes"
is "$(py 'all(0 < c["file_bytes"] and c["created"] > 0 for c in d["checkpoints"])')" True \
    "list --json file_bytes and created are set"
R0=$T/root-unfinished
cp -r "$R" "$R0" && mkdir "$R0/.tmp-step-00000040" "$R0/step-00000050"
run "$C" list --json "$R0"
is "$(py '[(c["name"], c["status"], c["world_size"], c["raw_bytes"], c["file_bytes"], c["created"], c["created_utc"]) for c in d["checkpoints"] if c["status"] != "committed"]')" \
    "[('.tmp-step-00000040', 'incomplete', None, None, None, None, None), ('step-00000050', 'incomplete', None, None, None, None, None)]" \
    "list --json: a temp dir and a step without manifest have null sizes, world and times"
# A step-<N> that is a link to a good checkpoint elsewhere: corrupt, never
# opened through the link, by list, verify and prune alike.
RL=$T/root-link
mkdir "$RL" && cp -r "$R/step-00000010" "$RL/" && ln -s "$R/step-00000020" "$RL/step-00000020"
run "$C" list "$RL"
ok "$([ "$rc" -eq 1 ] && grep -q '^step-00000020 .*corrupt: a symbolic link' "$T/out"; echo $?)" \
    "list: a linked step-<N> is corrupt, a symbolic link (exit $rc)" || why "$(cat "$T/out")"
run "$C" verify "$RL"
ok "$([ "$rc" -eq 1 ] && grep -q '^step-00000020: corrupt: a symbolic link' "$T/out" &&
    grep -q '^step-00000010: ok' "$T/out"; echo $?)" \
    "verify of the root: the linked step is corrupt, not ok through the link (exit $rc)" || why "$(cat "$T/out")"
run "$C" prune --keep 1 "$RL"
ok "$([ "$rc" -eq 0 ] && [ -L "$RL/step-00000020" ] && [ -f "$R/step-00000020/manifest.json" ]; echo $?)" \
    "prune leaves the link (listed corrupt) and what it points to"
run "$C" verify --json "$R0"
is "$rc" 1 "verify --json of a root with an unfinished step: exit 1"
is "$(py 'sorted(set(tuple(c) for c in d["checkpoints"]))')" \
    "[('name', 'path', 'step', 'status', 'ok', 'error', 'why', 'world_size', 'total_bytes')]" \
    "verify --json: every entry has the same keys, whatever its status"
is "$(py '[(c["step"], c["status"], c["world_size"]) for c in d["checkpoints"][3:]]')" \
    "[(40, 'skipped', None), (50, 'incomplete', None)]" \
    "  the step of an entry without manifest comes from its name; unknown sizes are null"

run "$C" list "$T/does-not-exist"
is "$rc" 3 "list of a missing dir exits 3"
grep -q "^ckptctl: .*'$T/does-not-exist': " "$T/err"
ok $? "  and says which path"

# ---- inspect -----------------------------------------------------------------
run "$C" inspect "$R/step-00000010"
is "$rc" 0 "inspect a step dir exits 0"
grep -q '^  model.fc1.weight  *f32  *\[256, 256\]  *0  *262144$' "$T/out"
ok $? "inspect lists model.fc1.weight f32 [256, 256] at 0, 262144 bytes"
grep -q '^  shard-2.ftsh ' "$T/out"
ok $? "inspect lists the third shard"
grep -q '^  cursor  *640$' "$T/out"
ok $? "inspect shows the data cursor from the record"
grep -q '^manifest  *checksum verified$' "$T/out"
ok $? "inspect says the manifest's own checksum was verified"

run "$C" inspect --json "$R/step-00000010"
is "$rc" 0 "inspect --json exits 0"
is "$(py '[t["name"] for t in d["tensors"]]')" \
    "['model.fc1.weight', 'model.fc1.bias', 'optim.step', 'sampler.state']" "inspect --json tensor names"
is "$(py '[(t["dtype"], t["shape"], t["nbytes"]) for t in d["tensors"]][0]')" \
    "('f32', [256, 256], 262144)" "inspect --json dtype, shape, nbytes"
is "$(py 'd["step"], d["world_size"], len(d["shards"])')" "(10, 3, 3)" "inspect --json step and shards"
is "$(py 'all(d["shards"][i]["raw_offset"] + d["shards"][i]["raw_bytes"] == d["shards"][i+1]["raw_offset"] for i in range(2)) and d["shards"][0]["raw_offset"] == 0 and d["shards"][-1]["raw_offset"] + d["shards"][-1]["raw_bytes"] == d["total_bytes"]')" \
    True "inspect --json shard ranges tile the flat space"
is "$(py 'all(len(s["xxh64"]) == 16 and int(s["xxh64"], 16) >= 0 and s["nframes"] >= 1 for s in d["shards"])')" \
    True "inspect --json shard checksums and frames"
is "$(py 'd["record"]["epoch"], d["record"]["cursor"], d["record"]["world_size"]')" "(1, 640, 3)" \
    "inspect --json record"
is "$(py 'd["manifest_checksum"]')" verified "inspect --json manifest_checksum"

# A record string with an escape sequence is printed escaped.
"$MK" "$T/esc" 5 --mb 0 --note 'red \e[31m here'
run "$C" inspect "$T/esc/step-00000005"
is "$rc" 0 "inspect of a record with an escape character exits 0"
ok "$(! grep -q "$(printf '\033')" "$T/out"; echo $?)" "  no escape character reaches the terminal"
grep -q 'note  *red \\x1b\[31m here$' "$T/out"
ok $? "  it is shown as \\x1b"

# Record values as a person reads them: a real in its shortest round-trip
# form (0.9, not 0.90000000000000002), in a leaf and inside an array; a long
# string (a binary value in base64) as its head and its length, whole in
# --json.
"$MK" "$T/vals" 5 --mb 0 &&
    "$BUILD/tests/tools/manifest_edit" "$T/vals/step-00000005/manifest.json" record.note \
        "\"$(head -c 6000 /dev/zero | tr '\0' A)\"" &&
    "$BUILD/tests/tools/manifest_edit" "$T/vals/step-00000005/manifest.json" record.momentum 0.9 &&
    "$BUILD/tests/tools/manifest_edit" "$T/vals/step-00000005/manifest.json" record.betas '[0.9,0.999,1e-08,3.0]'
ok $? "a record with reals and a 6000-byte string (fixture)"
run "$C" inspect "$T/vals/step-00000005"
ok "$([ "$rc" -eq 0 ] && grep -q '^  momentum  *0\.9$' "$T/out"; echo $?)" \
    "inspect shows a record real 0.9 as 0.9 (exit $rc)" || cat "$T/out" >&2
ok "$(grep -q '^  betas  *\[0\.9,0\.999,1e-08,3\.0\]$' "$T/out"; echo $?)" \
    "  and reals inside an array in their shortest form too"
ok "$(grep -q '^  note  *A\{120\}\.\.\. (6000 bytes; inspect --json shows it whole)$' "$T/out" &&
    [ "$(wc -c <"$T/out")" -lt 4000 ]; echo $?)" \
    "  a 6000-byte string shows its first 120 bytes and its length, not all of it"
run "$C" inspect --json "$T/vals/step-00000005"
is "$(py 'len(d["record"]["note"]), d["record"]["momentum"]')" "(6000, 0.9)" \
    "  inspect --json has the whole string and the exact real"

run "$C" inspect --json "$R" 20
is "$(py 'd["step"]')" 20 "inspect ROOT STEP"
run "$C" inspect --json "$R/20"
is "$(py 'd["step"]')" 20 "inspect ROOT/STEP"
run "$C" inspect --json "$R"
is "$(py 'd["step"]')" 30 "inspect ROOT picks the latest"
grep -q "note: using '$R/step-00000030'" "$T/err"
ok $? "  and says which one on stderr"
run "$C" inspect "$R" 99
is "$rc" 3 "inspect of a missing step exits 3"
run "$C" inspect "$R" notanumber
is "$rc" 2 "inspect ROOT with a bad step number is a usage error"

# ---- verify ------------------------------------------------------------------
run "$C" verify "$R"
is "$rc" 0 "verify ROOT exits 0 when all are good"
is "$(grep -c ': ok ' "$T/out")" 3 "verify ROOT reports three good checkpoints"
run "$C" verify --json "$R"
is "$(py 'd["ok"], d["good"], d["bad"], [c["status"] for c in d["checkpoints"]]')" \
    "(True, 3, 0, ['ok', 'ok', 'ok'])" "verify --json ROOT"
run "$C" verify "$R/step-00000020"
is "$rc" 0 "verify one checkpoint exits 0"

B=$T/bad
cp -r "$R" "$B"
flip_byte "$B/step-00000020/shard-1.ftsh" 100
run "$C" verify "$B/step-00000020"
is "$rc" 1 "verify detects a flipped byte (exit 1)"
grep -q 'step-00000020: corrupt' "$T/out"
ok $? "  and reports it corrupt"
grep -q "^ckptctl: verify: " "$T/err"
ok $? "  with a message on stderr"
truncate -s -64 "$B/step-00000030/shard-0.ftsh"
run "$C" verify "$B" 30
is "$rc" 1 "verify detects a truncated shard (exit 1)"
run "$C" verify --json "$B"
is "$rc" 1 "verify --json of a root with bad checkpoints exits 1"
is "$(py 'd["ok"], d["good"], d["bad"], [c["step"] for c in d["checkpoints"] if not c["ok"]]')" \
    "(False, 1, 2, [20, 30])" "verify --json names the bad ones"
run "$C" list --verify --json "$B"
is "$rc" 1 "list --verify exits 1 with corrupt checkpoints"
is "$(py '[c["status"] for c in d["checkpoints"]]')" "['committed', 'corrupt', 'corrupt']" \
    "list --verify marks them corrupt"
run "$C" verify "$T/does-not-exist"
is "$rc" 3 "verify of a missing path exits 3"

# A hand-edited data cursor: valid JSON, valid fields, wrong manifest_xxh64.
M=$T/edited
cp -r "$R" "$M"
sed -i 's/"cursor": *640/"cursor": 641/' "$M/step-00000010/manifest.json"
grep -q '"cursor": *641' "$M/step-00000010/manifest.json"
ok $? "manifest's cursor edited by hand (fixture)"
run "$C" verify "$M/step-00000010"
is "$rc" 1 "verify of an edited manifest exits 1"
grep -q "step-00000010: corrupt: .*manifest_xxh64 is [0-9a-f]* but the content hashes to" "$T/out"
ok $? "  and says the manifest checksum does not match"
run "$C" inspect "$M/step-00000010"
is "$rc" 1 "inspect refuses it too (exit 1)"
run "$C" list --json "$M"
is "$(py '[c["status"] for c in d["checkpoints"]]')" "['corrupt', 'committed', 'committed']" \
    "list marks it corrupt without --verify"

# ---- diff --------------------------------------------------------------------
"$MK" "$T/same" 20 --world 2 --mb 0.25 --seed 1 &&
    "$MK" "$T/reshard" 20 --world 4 --mb 0.25 --seed 1 &&
    "$MK" "$T/other" 20 --world 2 --mb 0.25 --seed 2
ok $? "diff fixtures written"
run "$C" diff "$R/step-00000020" "$T/same/step-00000020"
is "$rc" 0 "diff of identical checkpoints exits 0"
is "$(grep -c '^identical ' "$T/out")" 4 "diff: four tensors identical"
run "$C" diff "$R/step-00000020" "$T/other/step-00000020"
is "$rc" 1 "diff of different checkpoints exits 1"
grep -q '^different  model.fc1.weight ' "$T/out"
ok $? "diff names the different tensor"
run "$C" diff --json "$R/step-00000020" "$T/reshard/step-00000020"
is "$rc" 1 "diff --json of a resharded save exits 1"
is "$(py '[(t["name"], t["status"]) for t in d["tensors"]]')" \
    "[('model.fc1.weight', 'identical'), ('model.fc1.bias', 'identical'), ('optim.step', 'identical'), ('sampler.state', 'different')]" \
    "diff --json: only sampler.state (which holds the world size) differs"
is "$(py '[(t["max_abs"], t["ndiff"]) for t in d["tensors"] if t["status"] == "different"]')" \
    "[(2.0, 1)]" "diff --json: max abs difference 2 in one element"

# ---- export / import ---------------------------------------------------------
for ext in tar tar.zst; do
    run "$C" export "$R/step-00000020" "$T/e.$ext"
    is "$rc" 0 "export .$ext exits 0"
    [ -s "$T/e.$ext" ] && [ ! -e "$T/e.$ext.tmp" ]
    ok $? "  archive written, no temp file left"
    if [ "$ext" = tar ] && command -v tar >/dev/null 2>&1; then
        is "$(tar tf "$T/e.tar" | tr '\n' ' ')" \
            "step-00000020/manifest.json step-00000020/shard-0.ftsh step-00000020/shard-1.ftsh " \
            "  tar lists exactly the manifest and the shards"
    fi
    run "$C" import "$T/e.$ext" "$T/imp-$ext"
    is "$rc" 0 "import .$ext exits 0"
    grep -q "'$T/imp-$ext/step-00000020'" "$T/out"
    ok $? "  and prints the new checkpoint's path"
    run "$C" verify "$T/imp-$ext/step-00000020"
    is "$rc" 0 "  the imported checkpoint verifies"
    run "$C" diff "$R/step-00000020" "$T/imp-$ext/step-00000020"
    is "$rc" 0 "  and is identical to the original"
done
before=$(cksum <"$T/imp-tar/step-00000020/manifest.json")
run "$C" import "$T/e.tar.zst" "$T/imp-tar"
is "$rc" 3 "import refuses to overwrite an existing checkpoint (exit 3)"
grep -q "already exists" "$T/err"
ok $? "  and says it already exists"
is "$(cksum <"$T/imp-tar/step-00000020/manifest.json")" "$before" "  the existing checkpoint is unchanged"
is "$(ls -A "$T/imp-tar")" "step-00000020" "  no temp dir left in the root"
run "$C" export "$R/step-00000010" "$T/e.tar"
is "$rc" 3 "export refuses to replace an existing file"
run "$C" export --force "$R" 10 "$T/e.tar"
is "$rc" 0 "export --force ROOT STEP FILE replaces it"
is "$(tar tf "$T/e.tar" | head -1)" "step-00000010/manifest.json" "  with the step asked for"
run "$C" export "$B/step-00000020" "$T/bad.tar"
is "$rc" 1 "export of a corrupt checkpoint exits 1"
[ ! -e "$T/bad.tar" ] && [ ! -e "$T/bad.tar.tmp" ]
ok $? "  and writes nothing"
printf 'this is not a tar file\n' >"$T/junk.tar"
run "$C" import "$T/junk.tar" "$T/imp-junk"
is "$rc" 1 "import of a non-tar file exits 1"
is "$(ls -A "$T/imp-junk" 2>/dev/null)" "" "  and leaves nothing behind"
# A filter an export never writes (bzip2 here) is refused: libarchive would
# otherwise run an external decompressor on untrusted input.
if command -v bzip2 >/dev/null 2>&1; then
    bzip2 -c "$T/e.tar" >"$T/e.tar.bz2"
    run "$C" import "$T/e.tar.bz2" "$T/imp-bz2"
    ok "$([ "$rc" = 1 ] && [ -z "$(ls -A "$T/imp-bz2" 2>/dev/null)" ]; echo $?)" \
        "import of a bzip2-compressed tar is refused (exit $rc) and leaves nothing" || show_err
    like "$(cat "$T/err")" "not a readable tar archive: .*; it is bzip2-compressed, which import does not read: recompress it as \.tar\.zst" \
        "  the message says it is bzip2 and what to do"
else
    skip "import of a bzip2-compressed tar is refused" "bzip2 not installed"
    skip "  the message says it is bzip2 and what to do" "bzip2 not installed"
fi
if command -v xz >/dev/null 2>&1; then
    xz -c "$T/e.tar" >"$T/e.tar.xz"
    run "$C" import "$T/e.tar.xz" "$T/imp-xz"
    ok "$([ "$rc" = 1 ] && [ -z "$(ls -A "$T/imp-xz" 2>/dev/null)" ] &&
          grep -q "; it is xz-compressed, which import does not read: recompress it as \.tar\.zst" "$T/err"; echo $?)" \
        "import of an xz-compressed tar is refused (exit $rc), leaves nothing, and says it is xz" || show_err
else
    skip "import of an xz-compressed tar is refused" "xz not installed"
fi

# ---- prune -------------------------------------------------------------------
P=$T/prune
for s in 1 2 3 4 5; do "$MK" "$P" $s --mb 0 || break; done
run "$C" prune "$P" --keep 2
is "$rc" 0 "prune --keep 2 exits 0"
is "$(grep -c '^removed step-' "$T/out")" 3 "prune reports three removed"
run "$C" list --json "$P"
is "$(py '[c["step"] for c in d["checkpoints"]]')" "[4, 5]" "prune kept the newest two"
P2=$T/prune2
for s in 1 2 3 4 5; do "$MK" "$P2" $s --mb 0 || break; done
run "$C" prune "$P2"
run "$C" list --json "$P2"
is "$(py '[c["step"] for c in d["checkpoints"]]')" "[3, 4, 5]" "prune keeps three by default"

P3=$T/prune3
for s in 1 2 3 4; do "$MK" "$P3" $s --mb 0 || break; done
echo step-00000002 >"$P3/LATEST"
run "$C" prune --keep 1 "$P3"
run "$C" list --json "$P3"
is "$(py '[c["step"] for c in d["checkpoints"]]')" "[2, 4]" \
    "prune never removes the checkpoint LATEST names"

# The newest two have damaged shards (their manifests are fine): prune --keep
# 1 must not remove step 2, the newest one that verifies.
P4=$T/prune4
for s in 1 2 3 4; do "$MK" "$P4" $s --mb 0.1 || break; done
flip_byte "$P4/step-00000003/shard-0.ftsh" 100
flip_byte "$P4/step-00000004/shard-0.ftsh" 100
run "$C" prune --keep 1 "$P4"
is "$rc" 0 "prune with damaged newer checkpoints exits 0"
like "$(cat "$T/out")" "^kept $P4/step-00000002: the newest checkpoint that verifies" "  and says it kept step 2"
P5=$T/prune5
for s in 1 2 3; do "$MK" "$P5" $s --mb 0.1 || break; done
mkdir "$P5/step-00000009"
run "$C" prune --keep 1 "$P5"
ok "$([ "$rc" -eq 0 ] && ! grep -q '^kept' "$T/out"; echo $?)" \
    "prune says nothing of the newest committed checkpoint when it verifies (an unfinished step 9 beside it)" ||
    why "$(cat "$T/out")"
run "$C" list --json "$P4"
is "$(py '[c["step"] for c in d["checkpoints"]]')" "[2, 4]" \
    "prune keeps the newest checkpoint that verifies (step 2) beside the newest (4)"
run "$C" verify "$P4/step-00000002"
is "$rc" 0 "  and step 2 still verifies"

# ---- usage errors ------------------------------------------------------------
usage_case() { # usage_case DESCRIPTION ARGS...
    d=$1
    shift
    run "$C" "$@"
    is "$rc" 2 "usage error exits 2: $d"
    [ ! -s "$T/out" ] && grep -q '^ckptctl: ' "$T/err"
    ok $? "  nothing on stdout, message on stderr"
}
usage_case "no arguments"
usage_case "unknown subcommand" frobnicate
grep -q "unknown command 'frobnicate'" "$T/err"
ok $? "  names the unknown subcommand"
usage_case "unknown option" list --bogus "$R"
usage_case "option of another command" diff --verify "$R" "$R"
usage_case "missing argument" inspect
usage_case "too many arguments" diff a b c
usage_case "--keep 0" prune "$P" --keep 0
usage_case "--keep without a value" prune "$P" --keep
usage_case "--keep not a number" prune "$P" --keep=x
usage_case "export to a .zip" export "$R/step-00000010" "$T/x.zip"
grep -q "must end in .tar, .tar.zst or .tzst" "$T/err"
ok $? "  names every accepted ending, .tzst too" || show_err
usage_case "help for an unknown command" help nosuch

# ---- help --------------------------------------------------------------------
run "$C" --help
is "$rc" 0 "--help exits 0"
[ ! -s "$T/err" ] && grep -q '^usage: ckptctl ' "$T/out"
ok $? "--help prints usage on stdout only"
listed=$(awk '/^commands:/ { on = 1; next } on && /^$/ { exit } on { print $1 }' "$T/out" | tr '\n' ' ')
is "$listed" "$COMMANDS " "help lists every subcommand, in table order"
grep -q '^exit codes:' "$T/out"
ok $? "help documents the exit codes"
run "$C" help
is "$rc" 0 "help exits 0"
for c in $COMMANDS; do
    run "$C" help "$c"
    h=$(cat "$T/out")
    [ "$rc" -eq 0 ] && head -1 "$T/out" | grep -q "^usage: ckptctl $c"
    ok $? "help $c prints its usage"
    if [ "$c" != help ]; then
        run "$C" "$c" --help
        [ "$rc" -eq 0 ] && [ "$(cat "$T/out")" = "$h" ]
        ok $? "$c --help equals help $c"
    fi
    if [ -f "$DOCS" ]; then
        grep -q "^## ckptctl $c\b" "$DOCS"
        ok $? "docs/ckptctl.md documents $c"
    else
        skip "docs/ckptctl.md documents $c" "docs/ckptctl.md not found"
    fi
done

# ---- hostile manifests and names (review findings) ---------------------------
# unsealed_edit MANIFEST PYTHON: run PYTHON on the manifest as m and write it
# back without its checksum (as an older writer would have left it).
unsealed_edit() {
    "$PY" -c 'import json, sys
p = sys.argv[1]
m = json.load(open(p))
m.pop("manifest_xxh64", None)
exec(sys.argv[2])
json.dump(m, open(p, "w"))' "$1" "$2"
}
ME=$BUILD/tests/tools/manifest_edit
H=$T/hostile
"$MK" "$H" 20 --mb 0.05 --seed 3 >/dev/null
# A record nested 2040 deep: jansson reads it; inspect must not recurse that deep.
deep=$("$PY" -c 'print("{\"a\":" * 2040 + "1" + "}" * 2040)')
"$ME" "$H/step-00000020/manifest.json" record.deep "$deep"
ok $? "a record nested 2040 levels deep"
run "$C" inspect "$H/step-00000020"
ok "$([ "$rc" -eq 0 ] && grep -q '^  deep\(\.a\)\{8\} *{"a":{"a":' "$T/out"; echo $?)" \
    "inspect prints it flattened 8 levels deep, then as JSON (exit $rc)" || show_err
# Manifest strings with terminal control codes never reach the terminal raw.
H2=$T/hostile2
"$MK" "$H2" 20 --mb 0.05 --seed 3 >/dev/null
unsealed_edit "$H2/step-00000020/manifest.json" \
    'm["tensors"][0]["dtype"] = "\u001b]0;pwned\u0007\u001b[2J\u009b31m"'
run "$C" list "$H2"
ok "$([ "$rc" -eq 1 ] && ! grep -q "$(printf '\033')" "$T/out" "$T/err" &&
    ! grep -q "$(printf '\302\233')" "$T/out" "$T/err" && grep -q 'x1b]0;pwned' "$T/out"; echo $?)" \
    "a dtype with control codes is shown escaped (exit $rc)" || why "$(cat -v "$T/out")"
# A root whose name is not UTF-8, and a why cut in the middle of a character:
# every key is still in the JSON.
BAD=$T/$(printf 'bad\377dir')
mkdir -p "$BAD" && cp -r "$R/step-00000010" "$BAD/" && mkdir "$BAD/step-00000011"
run "$C" list --json "$BAD"
is "$(py '[sorted(d.keys()), [sorted(c.keys()) == sorted(d["checkpoints"][0].keys()) for c in d["checkpoints"]], "xff" in d["root"], d["paths_exact"]]')" \
    "[['checkpoints', 'paths_exact', 'root', 'verified'], [True, True], True, False]" \
    "list --json: a root that is not UTF-8 keeps its key, escaped, and says the path is not exact"
run "$C" verify --json "$BAD"
is "$(py '[("path" in c and "why" in c) for c in d["checkpoints"]] + ["xff" in d["path"]]')" \
    "[True, True, True]" "verify --json: the same"
LONG=$T/$("$PY" -c 'print("a" + "\u00e9" * 120)')
mkdir -p "$LONG/step-00000010"
run "$C" list --json "$LONG"
is "$(py 'd["checkpoints"][0]["why"] is not None')" "True" \
    "list --json: a why cut inside a character is still there"
# A step-<N> that is a file or a FIFO: list and verify say the same.
H3=$T/hostile3
"$MK" "$H3" 4 --mb 0.05 >/dev/null
: >"$H3/step-00000005"
mkfifo "$H3/step-00000006"
run "$C" list "$H3"
ok "$([ "$rc" -eq 1 ] && grep -q '^step-00000005 .*corrupt: .*not a directory' "$T/out" &&
    grep -q '^step-00000006 .*corrupt: .*not a directory' "$T/out"; echo $?)" \
    "list: a step-<N> that is a file or a FIFO is corrupt, not a directory" || why "$(cat "$T/out")"
run timeout 20 "$C" verify "$H3"
ok "$([ "$rc" -eq 1 ] && grep -q '^step-00000005: corrupt: .*not a directory' "$T/out" &&
    grep -q '^step-00000006: corrupt: .*not a directory' "$T/out"; echo $?)" \
    "verify says the same (exit $rc)" || why "$(cat "$T/out")"
# created 0 is a date (1970), not unknown.
"$ME" "$H3/step-00000004/manifest.json" created 0
run "$C" list --json "$H3"
is "$(py '[c["created_utc"] for c in d["checkpoints"] if c["step"] == 4]')" \
    "['1970-01-01T00:00:00Z']" "list --json: created 0 is 1970-01-01T00:00:00Z"
# Shards whose file sizes add up past 2^53 are refused, not summed into a wrap.
H4=$T/hostile4
"$MK" "$H4" 7 --world 2 --mb 0.05 >/dev/null
unsealed_edit "$H4/step-00000007/manifest.json" \
    'for s in m["shards"]: s["file_bytes"] = 2**53'
run "$C" inspect "$H4/step-00000007"
ok "$([ "$rc" -eq 1 ] && grep -q 'add up to more than' "$T/err"; echo $?)" \
    "inspect: shard sizes adding up past 2^53 are refused (exit $rc)" || show_err

# ---- export and import side by side --------------------------------------------
E=$T/exports
mkdir -p "$E"
for s in 10 20 30; do "$C" export --force "$R" "$s" "$E/same.tar" >"$E/out.$s" 2>&1 & done
wait
ok "$(grep -q 'exported' "$E/out.10" && grep -q 'exported' "$E/out.20" &&
    grep -q 'exported' "$E/out.30"; echo $?)" "three exports at once to one file all succeed" ||
    why "$(cat "$E"/out.*)"
run "$C" import "$E/same.tar" "$E/imp"
ok "$([ "$rc" -eq 0 ] && "$C" verify "$E/imp" >/dev/null; echo $?)" \
    "the file is one whole checkpoint" || show_err
ok "$(ls "$E" | grep -q 'tmp'; [ $? -ne 0 ]; echo $?)" "no temporary file left" || why "$(ls "$E")"
mkfifo "$E/fifo.tar.tmp"
run timeout 20 "$C" export "$R" 20 "$E/fifo.tar"
is "$rc" 0 "export does not wait on a FIFO named like a temporary file"
# An import newer than a run's own checkpoints says where --resume auto goes.
I=$T/importnote
"$MK" "$I" 4 --mb 0.05 >/dev/null
"$C" export "$R" 10 "$E/s10.tar" >/dev/null
run "$C" import "$E/s10.tar" "$I"
ok "$([ "$rc" -eq 0 ] && grep -q 'note: step-00000010 is now the newest checkpoint' "$T/err"; echo $?)" \
    "import of a newer step into a run's directory says it is now the newest" || show_err
run "$C" import "$E/s10.tar" "$T/importfresh"
ok "$([ "$rc" -eq 0 ] && ! grep -q 'note:' "$T/err"; echo $?)" \
    "import into a new directory says nothing more" || show_err
# Two prunes at once (the trainer's and a person's) both succeed.
P6=$T/prune6
for s in 1 2 3 4 5 6 7 8 9 10 11 12; do "$MK" "$P6" $s --mb 0.02 >/dev/null || break; done
"$C" prune --keep 1 "$P6" >"$T/p1" 2>&1 &
pa=$!
track_bg "$pa"
"$C" prune --keep 1 "$P6" >"$T/p2" 2>&1
rb=$?
wait $pa
ra=$?
run "$C" list "$P6"
ok "$([ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] && [ "$(grep -c '^step-' "$T/out")" -eq 1 ]; echo $?)" \
    "two prunes at once both exit 0 and keep one (exit $ra, $rb)" || why "$(cat "$T/p1" "$T/p2" "$T/out")"

# Under BUILD=build-san a sanitizer report may hide behind an expected exit
# status; look for one in everything the tool wrote to stderr.
! grep -q -e 'Sanitizer' -e 'runtime error:' "$T/all-err" 2>/dev/null
ok $? "no sanitizer report in any run" ||
    why "$(grep -m 5 -e 'Sanitizer' -e 'runtime error:' "$T/all-err")"

done_testing
