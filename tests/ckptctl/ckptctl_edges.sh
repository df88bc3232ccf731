#!/bin/sh
# ckptctl_edges.sh - TAP tests of ckptctl at the edges a review found:
# import and flush refuse a checkpoint as their root; verify and list
# --verify leave out a step pruned while they run; a refused import leaves
# no directory behind; --json carries paths exactly; verify --json of an
# empty root says why; a prune that fails partway says what it removed;
# prune refuses a checkpoint as its root; list --verify and verify agree;
# export takes any valid file name; the messages name the command and the
# path once, usage errors exit 2.
#
# Reads $BUILD (default build) for build/ckptctl and the fixture makers in
# build/tests/tools.
. "$(dirname "$0")/../lib.sh"

C=$BUILD/ckptctl
MK=$BUILD/tests/tools/ckpt_mkfixture
MKL=$BUILD/tests/tools/ckpt_mklocal
ME=$BUILD/tests/tools/manifest_edit
[ -x "$C" ] && [ -x "$MK" ] && [ -x "$MKL" ] && [ -x "$ME" ] ||
    skip_all "$C or the fixture makers not built"
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
command -v "$PY" >/dev/null 2>&1 || skip_all "python3 not found (needed to parse --json output)"

# lib.sh's run keeps every run's stderr in $T/all-err too, for the
# sanitizer check at the end.
RUN_ERR_LOG=$T/all-err
# py EXPR [ARG]: evaluate a python expression over the JSON document in
# $T/out (d); ARG is sys.argv[3].
py() {
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
        "$T/out" "$@" 2>&1
}
# listing DIR: what DIR holds (names and sizes), to compare before and after.
listing() { (cd "$1" 2>/dev/null && find . -printf '%p %s\n' | sort); }
# shown: what the last run printed, for a failure's details.
shown() { why "rc: $rc" "stdout: $(cat "$T/out")" "stderr: $(cat "$T/err")"; }

R=$T/root
for s in 20 100; do "$MK" "$R" "$s" --mb 0.02 >/dev/null || break; done &&
    "$MK" "$T/other" 500 --mb 0.02 >/dev/null &&
    "$C" export "$T/other" 500 "$T/s500.tar" >/dev/null &&
    "$C" export "$R" 100 "$T/s100.tar" >/dev/null
ok $? "fixtures: a root with steps 20 and 100, archives of steps 500 and 100"

# ---- import and flush into a checkpoint (item 2) -----------------------------------
before=$(listing "$R")
run "$C" import "$T/s500.tar" "$R/step-00000020"
ok "$([ "$rc" -eq 3 ] &&
    grep -q "^ckptctl: import: '$R/step-00000020': is a checkpoint, not a root (its root is '$R')$" "$T/err"
    echo $?)" "import into a checkpoint is refused (exit 3) and says it is one" || shown
run "$C" import "$T/s500.tar" "$R/step-00000020/sub"
ok "$([ "$rc" -eq 3 ] && grep -q "is inside the checkpoint '$R/step-00000020'" "$T/err"; echo $?)" \
    "import into a new directory inside a checkpoint is refused (exit 3)" || shown
run "$C" import "$T/s500.tar" "$R/step-00000777"
ok "$([ "$rc" -eq 3 ] && grep -q "is named like a checkpoint" "$T/err"; echo $?)" \
    "import into a new directory named like a checkpoint is refused (exit 3)" || shown
N0=$T/n0 N1=$T/n1 N2=$T/n2 N3=$T/n3
"$MKL" 10 "$N0" "$N1" "$N2" "$N3" --seed 3 >/dev/null
run "$C" flush "$N0" "$N2" --to "$R/step-00000100"
ok "$([ "$rc" -eq 3 ] && grep -q "^ckptctl: flush: '$R/step-00000100': is a checkpoint, not a root" "$T/err"
    echo $?)" "flush --to a checkpoint is refused (exit 3)" || shown
is "$(listing "$R")" "$before" "  the checkpoints are untouched: nothing nested, no LATEST inside"
: >"$T/afile"
run "$C" flush "$N0" "$N2" --to "$T/afile"
ok "$([ "$rc" -eq 3 ] && grep -q "^ckptctl: flush: '$T/afile': not a directory$" "$T/err"; echo $?)" \
    "flush --to a file: 'not a directory', the path said once (exit 3)" || shown
run "$C" import "$T/s500.tar" "$R"
ok "$([ "$rc" -eq 0 ] && [ -f "$R/step-00000500/manifest.json" ]; echo $?)" \
    "import into the root itself still works" || shown

# ---- a step pruned while verify or list --verify runs (item 3) ---------------------
# The stallio shim holds ckptctl's first read of step 1's shard-0.ftsh (the
# root is listed, step 1's file is open) for 2 s; the prune runs then.
RACE=$T/race
"$MK" "$RACE" 1 --mb 0.02 >/dev/null && "$MK" "$RACE" 2 --mb 0.02 >/dev/null &&
    "$MK" "$RACE" 3 --mb 0.02 >/dev/null
ok $? "fixture: steps 1, 2 and 3"
# race_case NAME ARGS...: run ckptctl ARGS... on a fresh copy of the root
# ($RC), pruning it to one checkpoint while step 1 is read; caught says
# whether the prune ran during that read.
race_case() {
    rm -rf "$T/rc" "$T/mark" && cp -r "$RACE" "$T/rc"
    RC=$T/rc
    LD_PRELOAD="$SHIM" OMPI_COMM_WORLD_RANK=0 STALLIO_RANK=0 STALLIO_OP=read \
        STALLIO_MATCH=step-00000001/shard-0.ftsh STALLIO_SECONDS=2 STALLIO_MARK="$T/mark" \
        "$C" "$@" "$RC" >"$T/out" 2>"$T/err" &
    _pid=$!
    track_bg "$_pid"
    caught=missed
    if wait_for 20 test -s "$T/mark"; then
        "$C" prune --keep 1 "$RC" >/dev/null 2>&1 && caught=caught
    fi
    wait "$_pid"
    rc=$?
    cat "$T/err" >>"$RUN_ERR_LOG"
}
if ! have_shim stallio; then
    for what in "verify ROOT" "verify --json ROOT" "list --verify"; do
        skip "$what with a prune meanwhile" "$SHIM_WHY"
    done
else
race_case verify
ok "$([ "$caught" = caught ] && [ "$rc" -eq 0 ] &&
    grep -q '^step-00000002: removed: gone since the root was listed' "$T/out" &&
    grep -q '^step-00000003: ok' "$T/out" && [ ! -s "$T/err" ]; echo $?)" \
    "verify ROOT: a step pruned meanwhile ($caught) is reported removed, not bad (exit $rc)" || shown
race_case verify --json
ok "$([ "$caught" = caught ] && [ "$rc" -eq 0 ] &&
    [ "$(py '[d["ok"], d["bad"], d["removed"], [(c["step"], c["status"], c["ok"]) for c in d["checkpoints"]][1]]')" = \
        "[True, 0, 1, (2, 'removed', None)]" ]; echo $?)" \
    "verify --json ROOT: status removed, counted in removed, not bad ($caught, exit $rc)" || shown
race_case list --verify --json
ok "$([ "$caught" = caught ] && [ "$rc" -eq 0 ] &&
    [ "$(py '[c["step"] for c in d["checkpoints"]]')" = "[1, 3]" ]; echo $?)" \
    "list --verify: a step pruned meanwhile ($caught) is left out, not corrupt (exit $rc)" || shown
fi

# ---- a refused import leaves nothing behind (item 4) --------------------------------
"$PY" - "$T/s100.tar" "$T/bad_extra.tar" <<'EOF'
import io, sys, tarfile
src = tarfile.open(sys.argv[1])
with tarfile.open(sys.argv[2], "w") as t:
    for m in src.getmembers():
        t.addfile(m, src.extractfile(m))
    ti = tarfile.TarInfo("step-00000100/evil.sh")
    ti.size = 3
    t.addfile(ti, io.BytesIO(b"abc"))
EOF
run "$C" import "$T/bad_extra.tar" "$T/new/a/b/c"
ok "$([ "$rc" -eq 1 ] && [ ! -e "$T/new" ]; echo $?)" \
    "a refused import removes every directory it created (exit $rc)" || why "$(find "$T/new")"
mkdir "$T/keep"
run "$C" import "$T/bad_extra.tar" "$T/keep/x/y"
is "$rc $(ls -A "$T/keep")" "1 " "  and only those: the existing parent stays, empty"
# A manifest naming 4 shards of 1 TiB: "not enough space", before any shard.
SP=$T/space
"$MK" "$SP" 7 --world 4 --mb 0.02 >/dev/null
"$PY" -c 'import json, sys
m = json.load(open(sys.argv[1]))
for s in m["shards"]:
    s["file_bytes"] = 2**40
print(json.dumps(m["shards"]))' "$SP/step-00000007/manifest.json" >"$T/shards.json" &&
    "$ME" "$SP/step-00000007/manifest.json" shards "$(cat "$T/shards.json")" &&
    (cd "$SP" && tar cf "$T/huge.tar" step-00000007/manifest.json step-00000007/shard-*.ftsh)
run "$C" import "$T/huge.tar" "$T/spacenew/root"
ok "$([ "$rc" -eq 3 ] && grep -q 'not enough space' "$T/err" && [ ! -e "$T/spacenew" ]; echo $?)" \
    "an import refused for want of space leaves no directory either (exit $rc)" || shown

# ---- --json carries paths exactly (item 5) ------------------------------------------
TAB=$T/$(printf 'tab\there')
LIT=$T/'tab\x09here'
mkdir "$TAB" "$LIT" && cp -r "$R/step-00000020" "$TAB/" && cp -r "$R/step-00000020" "$LIT/"
run "$C" list --json "$TAB"
is "$(py 'd["root"] == sys.argv[3] and d["paths_exact"]' "$TAB")" True \
    "list --json: a root with a tab in its name comes back as the same bytes"
run "$C" verify --json "$TAB"
is "$(py 'd["checkpoints"][0]["path"] == sys.argv[3] + "/step-00000020" and d["paths_exact"]' "$TAB")" \
    True "verify --json: the path of its checkpoint is that checkpoint's"
run "$C" verify --json "$LIT"
is "$(py 'd["checkpoints"][0]["path"] == sys.argv[3] + "/step-00000020"' "$LIT")" True \
    "  and a root named with a literal \\x09 is a different path"
NU=$T/$(printf 'bad\377\303\251')
mkdir "$NU" && cp -r "$R/step-00000020" "$NU/"
run "$C" verify --json "$NU"
is "$(py '[d["paths_exact"], d["path"].endswith("bad\\xff\u00e9")]')" "[False, True]" \
    "a root that is not UTF-8: the bad byte as \\xff, the rest exact, paths_exact false"

# ---- verify --json of a root with no checkpoints (item 6) --------------------------
mkdir -p "$T/empty" "$T/onlytmp/.tmp-step-00000005"
run "$C" verify --json "$T/empty"
ok "$([ "$rc" -eq 3 ] && grep -q "^ckptctl: verify: '$T/empty': no checkpoints in this directory$" "$T/err" &&
    [ "$(py 'd["checkpoints"]')" = "[]" ]; echo $?)" \
    "verify --json of an empty root: exit 3, the reason on stderr, an empty document" || shown
run "$C" verify --json "$T/onlytmp"
ok "$([ "$rc" -eq 3 ] && grep -q "no checkpoints in this directory (only temp dirs" "$T/err"; echo $?)" \
    "verify --json of a root with only a temp dir says so too (exit $rc)" || shown

# ---- a prune that fails partway (item 7) ---------------------------------------------
IM=$T/immutable
for s in 1 2 3 4; do "$MK" "$IM" "$s" --world 2 --mb 0.02 >/dev/null || break; done
if chattr +i "$IM/step-00000002/shard-1.ftsh" 2>/dev/null; then
    run "$C" prune --keep 1 "$IM"
    chattr -i "$IM/step-00000002/shard-1.ftsh" "$IM/.tmp-step-00000002/shard-1.ftsh" 2>/dev/null
    ok "$([ "$rc" -eq 3 ] && grep -q '^removed step-00000003$' "$T/out" &&
        grep -q '^partly removed step-00000002: what is left is in .tmp-step-00000002$' "$T/out" &&
        grep -q "^ckptctl: prune: '$IM': " "$T/err"; echo $?)" \
        "prune failing partway says what it removed and what is half gone (exit $rc)" || shown
else
    skip "prune failing partway" "chattr +i is not possible here (not root, or no such attribute)"
fi

# ---- prune of a checkpoint, not a root (item 8) --------------------------------------
before=$(listing "$R")
run "$C" prune "$R/step-00000100"
ok "$([ "$rc" -eq 3 ] && [ ! -s "$T/out" ] &&
    grep -q "^ckptctl: prune: '$R/step-00000100': is a checkpoint, not a root (its root is '$R')$" "$T/err"
    echo $?)" "prune of a checkpoint: exit 3, says it is a checkpoint" || shown
is "$(listing "$R")" "$before" "  and nothing changes"
NV=$T/noverify
"$MK" "$NV" 1 --mb 0.02 >/dev/null && truncate -s 100 "$NV/step-00000001/shard-0.ftsh"
run "$C" prune "$NV"
ok "$([ "$rc" -eq 0 ] && ! grep -q note "$T/out" &&
    grep -q "^ckptctl: prune: note: no checkpoint in '$NV' verifies$" "$T/err"; echo $?)" \
    "prune: the note that no checkpoint verifies goes to stderr, prefixed" || shown

# ---- list --verify and verify agree (item 9) -------------------------------------------
DM=$T/dmg
for s in 1 2 5; do "$MK" "$DM" "$s" --world 2 --mb 0.05 >/dev/null || break; done
truncate -s 300 "$DM/step-00000001/shard-0.ftsh"
flip "$DM/step-00000002/shard-0.ftsh"
rm "$DM/step-00000005/shard-0.ftsh"
run "$C" verify --json "$DM"
verify_says=$(py '[(c["step"], c["status"]) for c in d["checkpoints"]]')
run "$C" list --verify --json "$DM"
list_says=$(py '[(c["step"], c["status"].replace("committed", "ok")) for c in d["checkpoints"]]')
ok "$([ "$rc" -eq 1 ] && [ "$list_says" = "$verify_says" ]; echo $?)" \
    "list --verify gives each checkpoint the status verify gives it (exit $rc)" ||
    why "list:   $list_says" "verify: $verify_says"
is "$(py '[(c["epoch"], c["world_size"], c["raw_bytes"] > 0) for c in d["checkpoints"]]')" \
    "[(1, 2, True), (1, 2, True), (1, 2, True)]" \
    "  --json: the epoch is there as the sizes are, for bad ones too"
run "$C" list --verify "$DM"
ok "$([ "$rc" -eq 1 ] && [ "$(grep -c '^step-0000000[125]  *[125]  *1  *2  *[0-9.]* KiB  *[0-9.]* KiB  *20' "$T/out")" -eq 3 ] &&
    grep -q '^step-00000005 .* incomplete LATEST: ' "$T/out"; echo $?)" \
    "  text: the same epoch, sizes and time as --json; a missing shard is incomplete" || shown

# ---- export to a long file name (item 10) ---------------------------------------------
LONGNAME=$("$PY" -c 'print("a" * 247)').tar
mkdir "$T/ex"
run "$C" export "$R" 100 "$T/ex/$LONGNAME"
ok "$([ "$rc" -eq 0 ] && [ -s "$T/ex/$LONGNAME" ] && [ "$(ls "$T/ex" | wc -l)" -eq 1 ]; echo $?)" \
    "export to a file name of 251 bytes works, no temp file left (exit $rc)" || shown

# ---- messages and usage errors (item 11) ------------------------------------------------
for cmd in list prune verify; do
    run "$C" "$cmd" "$T/nonexist"
    ok "$([ "$rc" -eq 3 ] && grep -q "^ckptctl: $cmd: '$T/nonexist': " "$T/err" &&
        [ "$(grep -o nonexist "$T/err" | wc -l)" -eq 1 ]; echo $?)" \
        "$cmd of a missing directory: the command and the path, once (exit $rc)" || shown
done
run "$C" flush "$N0" "$N2" --to "$T/sh" --step 18446744073709551615
ok "$([ "$rc" -eq 2 ] && grep -q -- '--step needs a step number from 0 to 9223372036854775807' "$T/err" &&
    [ ! -e "$T/sh" ]; echo $?)" "flush --step past the largest step is a usage error (exit $rc)" || shown
run "$C" prune --keep 99999999999 "$R"
ok "$([ "$rc" -eq 2 ] && grep -q -- '--keep needs a whole number from 1 to 2147483647' "$T/err"; echo $?)" \
    "--keep too big: exit 2, the limit stated" || shown
for bad in ' 2' '+2' '2 '; do
    run "$C" prune --keep "$bad" "$R"
    is "$rc" 2 "--keep '$bad' is a usage error"
done
# A write error says the system's reason (a file size limit stands in for a
# full disk), names FILE, and leaves nothing.
"$MK" "$T/bigsrc" 3 --mb 1 >/dev/null
mkdir "$T/fz"
run sh -c 'trap "" XFSZ; ulimit -f 200; exec "$@"' sh "$C" export "$T/bigsrc" 3 "$T/fz/big.tar"
ok "$([ "$rc" -eq 3 ] && grep -q "cannot write '$T/fz/big.tar' (.*): File too large" "$T/err" &&
    [ -z "$(ls -A "$T/fz")" ]; echo $?)" \
    "export failing to write says why (File too large) and leaves nothing (exit $rc)" || shown
"$MK" "$T/dm2" 4 --mb 0.02 >/dev/null && cp -r "$T/dm2" "$T/dm3" &&
    echo '{' >"$T/dm3/step-00000004/manifest.json"
run "$C" diff "$T/dm2/step-00000004" "$T/dm3/step-00000004"
ok "$([ "$rc" -eq 1 ] && grep -q "^ckptctl: diff: '$T/dm3/step-00000004': " "$T/err"; echo $?)" \
    "diff of a bad checkpoint: 'ckptctl: diff: '<path>': ...' (exit $rc)" || shown
run "$C" inspect "$T/dm3/step-00000004"
ok "$([ "$rc" -eq 1 ] && grep -q "^ckptctl: inspect: '$T/dm3/step-00000004': " "$T/err"; echo $?)" \
    "inspect of a bad checkpoint: the same form (exit $rc)" || shown

# Checkpoints set aside as damaged (step-<N>.corrupt, .corrupt-2: what a
# resume from an older one leaves, ckpt_set_aside_after's names) are
# shown by list and verify, never counted as bad, and removed by prune
# only with --set-aside.
SA=$T/aside
for st in 10 20 30; do "$MK" "$SA" $st --mb 0 >/dev/null; done
mv "$SA/step-00000030" "$SA/step-00000030.corrupt"
"$MK" "$SA" 30 --mb 0 >/dev/null && mv "$SA/step-00000030" "$SA/step-00000030.corrupt-2"
run "$C" list "$SA"
ok "$([ "$rc" -eq 0 ] && grep -q '^step-00000030\.corrupt  *30  *-  *-  *-  *-  *-  *set-aside: set aside as damaged' "$T/out" &&
    grep -q '^step-00000030\.corrupt-2  *30 .* set-aside: ' "$T/out"; echo $?)" \
    "list shows both set aside, status set-aside, exit $rc (not a corrupt checkpoint)" || shown
run "$C" list --json "$SA"
is "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print([(c["name"], c["status"]) for c in d["checkpoints"] if c["step"] == 30])' "$T/out")" \
    "[('step-00000030.corrupt', 'set-aside'), ('step-00000030.corrupt-2', 'set-aside')]" \
    "list --json: the same entries" || shown
run "$C" verify "$SA"
ok "$([ "$rc" -eq 0 ] && grep -q '^step-00000030\.corrupt: set-aside: ' "$T/out" &&
    grep -q '^step-00000020: ok' "$T/out"; echo $?)" \
    "verify of the root shows them, not verified, and exits $rc on the good ones" || shown
run "$C" prune --keep 1 "$SA"
ok "$([ "$rc" -eq 0 ] && [ -d "$SA/step-00000030.corrupt" ] && [ -d "$SA/step-00000030.corrupt-2" ] &&
    grep -q '^2 set aside as damaged left for inspection (prune --set-aside removes them)$' "$T/out"; echo $?)" \
    "prune keeps them without --set-aside, and says how to remove them" || shown
run "$C" prune --keep 1 --set-aside "$SA"
ok "$([ "$rc" -eq 0 ] && [ ! -e "$SA/step-00000030.corrupt" ] && [ ! -e "$SA/step-00000030.corrupt-2" ] &&
    [ -d "$SA/step-00000020" ] && grep -q '^removed step-00000030.corrupt-2$' "$T/out"; echo $?)" \
    "prune --set-aside removes them, and only them (step 20 kept)" || shown
run "$C" verify --set-aside "$SA"
is "$rc $(head -n 1 "$T/err")" "2 ckptctl: verify: option '--set-aside' does not apply to 'verify'" \
    "--set-aside is prune's only" || shown

! grep -q -e 'Sanitizer' -e 'runtime error:' "$T/all-err" 2>/dev/null
ok $? "no sanitizer report in any run"
done_testing
