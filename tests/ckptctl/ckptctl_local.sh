#!/bin/sh
# ckptctl_local.sh - TAP tests of ckptctl on node-local roots (the
# node-local checkpoint tier, include/ftrain/ckpt_local.h): list --local and
# verify --local (text and --json, the JSON parsed and checked for real
# values), flush of the union of node roots into a shared root (compared
# with a reference holding every shard), and the bad inputs: a missing
# root, a step incomplete across the roots given, a destination that
# already has the step, damaged copies, usage errors.
#
# Fixtures: build/tests/tools/ckpt_mklocal writes 4 ranks over 4 node roots
# N0..N3, one rank each, the partner copy of rank r on node r+1: node i
# holds shards i and i-1 (mod 4), so N0 and N2 together hold every shard
# and N0 and N1 lack shard 2.  Reads $BUILD (default build).
. "$(dirname "$0")/../lib.sh"

C=$BUILD/ckptctl
MK=$BUILD/tests/tools/ckpt_mklocal
DOCS=$(dirname "$0")/../../docs/ckptctl.md
[ -x "$C" ] && [ -x "$MK" ] || skip_all "$C or $MK not built"
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
command -v "$PY" >/dev/null 2>&1 || skip_all "python3 not found (needed to parse --json output)"

# lib.sh's run keeps every run's stderr in $T/all-err too, for the
# sanitizer check at the end.
RUN_ERR_LOG=$T/all-err
# py EXPR: evaluate a python expression over the JSON document in $T/out (d).
py() {
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
        "$T/out" "$1" 2>&1
}
# listing DIR: what DIR holds (names and sizes), to compare before and after.
listing() { (cd "$1" 2>/dev/null && find . -printf '%p %s\n' | sort); }

N0=$T/n0 N1=$T/n1 N2=$T/n2 N3=$T/n3 R=$T/ref
for s in 10 20; do
    "$MK" "$s" "$N0" "$N1" "$N2" "$N3" --reference "$R" --seed 3 || break
done
ok $? "fixtures: steps 10 and 20 on 4 node roots, and a reference with every shard"

# ---- list --local --------------------------------------------------------------
run "$C" list --local "$N0"
is "$rc" 0 "list --local exits 0"
like "$(cat "$T/out")" "^NAME +STEP +EPOCH +WORLD +PRESENT +RAW +HELD +CREATED +STATUS" \
    "  its header has PRESENT and HELD columns"
like "$(grep '^step-00000020 ' "$T/out")" "^step-00000020 +20 +1 +4 +2 of 4 .* committed$" \
    "  step 20: world 4, shards present 2 of 4, committed"
is "$(grep -c ' committed$' "$T/out")" 2 "  both steps are committed"
run "$C" list --local --json "$N0"
is "$rc" 0 "list --local --json exits 0"
is "$(py '[d["local"], [(c["step"], c["shards_present"], c["present"], c["missing"]) for c in d["checkpoints"]]]')" \
    "[True, [(10, 2, [0, 3], [1, 2]), (20, 2, [0, 3], [1, 2])]]" \
    "  steps, shards present, present and missing indices"
is "$(py 'all(0 < c["held_bytes"] < c["file_bytes"] for c in d["checkpoints"])')" True \
    "  held_bytes is part of file_bytes"
is "$(py '[c["status"] for c in d["checkpoints"]]')" "['committed', 'committed']" \
    "  statuses"
run "$C" list --json "$N0"
is "$(py 'sorted(d.keys()), "present" in d["checkpoints"][0]')" \
    "(['checkpoints', 'paths_exact', 'root', 'verified'], False)" \
    "list --json without --local keeps its keys"
mkdir -p "$T/torn/.tmp-step-00000030"
run "$C" list --local --json "$T/torn"
is "$(py '[(c["name"], c["status"], c["shards_present"], c["missing"]) for c in d["checkpoints"]]')" \
    "[('.tmp-step-00000030', 'incomplete', None, None)]" \
    "list --local: a temp dir is incomplete, with null shard counts"
run "$C" list --local "$T/does-not-exist"
ok "$([ "$rc" -eq 3 ] && grep -q "'$T/does-not-exist'" "$T/err"; echo $?)" \
    "list --local of a missing dir exits 3 and names it" || why "$(cat "$T/err")"

# ---- verify --local ------------------------------------------------------------
run "$C" verify --local "$N0"
is "$rc" 0 "verify --local of a node root exits 0"
like "$(cat "$T/out")" "^step-00000020: ok \(2 of 4 shards present; missing: 1, 2; 256\.0 KiB\)$" \
    "  and reports the missing shards without calling the step bad"
run "$C" verify "$N0"
ok "$([ "$rc" -eq 1 ] && grep -q '^step-00000020: incomplete: .*shard-1.ftsh' "$T/out"; echo $?)" \
    "verify without --local calls a node's step incomplete (exit $rc)" || why "$(cat "$T/out")"
run "$C" verify --local --json "$N0"
is "$(py '[d["ok"], d["good"], d["bad"], d["local"], [(c["status"], c["shards_present"], c["missing"]) for c in d["checkpoints"]]]')" \
    "[True, 2, 0, True, [('ok', 2, [1, 2]), ('ok', 2, [1, 2])]]" "verify --local --json"
run "$C" verify --local "$N0/step-00000010"
is "$rc" 0 "verify --local of one step directory exits 0"
run "$C" verify --local "$N0" 20
is "$rc" 0 "verify --local ROOT STEP exits 0"
run "$C" verify --local --json "$T/torn"
is "$(py '[(c["status"], c["shards_present"], c["missing"]) for c in d["checkpoints"]]')" \
    "[('skipped', None, None)]" "verify --local --json: a temp dir is skipped, null counts"

# Damaged copies, on copies of the node roots.
for i in 0 1 2; do cp -r "$T/n$i" "$T/c$i"; done
flip "$T/c0/step-00000020/shard-0.ftsh"
run "$C" verify --local "$T/c0"
ok "$([ "$rc" -eq 1 ] && grep -q '^step-00000020: corrupt: .*shard-0.ftsh.* (2 of 4 shards present; missing: 1, 2)$' "$T/out" &&
    grep -q '^step-00000010: ok' "$T/out"; echo $?)" \
    "verify --local: a damaged shard is corrupt (exit $rc), the other step ok" || why "$(cat "$T/out")"
run "$C" list --local --verify --json "$T/c0"
ok "$([ "$rc" -eq 1 ] && [ "$(py '[c["status"] for c in d["checkpoints"]]')" = "['committed', 'corrupt']" ] &&
    py 'd["checkpoints"][1]["why"]' | grep -q 'shard-0.ftsh'; echo $?)" \
    "list --local --verify marks it corrupt and says why (exit $rc)" || why "$(cat "$T/out")"
truncate -s -10 "$T/c2/step-00000020/shard-2.ftsh"
run "$C" list --local --json "$T/c2"
is "$(py '[(c["step"], c["present"]) for c in d["checkpoints"]]')" "[(10, [1, 2]), (20, [1])]" \
    "list --local: a truncated shard is not present"

# ---- flush ---------------------------------------------------------------------
S=$T/shared
run "$C" flush "$N0" "$N2" --to "$S"
is "$rc" 0 "flush of N0 and N2 exits 0"
is "$(cat "$T/out")" "flushed step 20 to '$S/step-00000020'" \
    "  it takes the newest step they hold completely and prints its path"
run "$C" verify "$S"
is "$rc" 0 "  the flushed checkpoint verifies (as a whole checkpoint)"
same=0
for i in 0 1 2 3; do
    cmp -s "$S/step-00000020/shard-$i.ftsh" "$R/step-00000020/shard-$i.ftsh" || same=1
done
ok $same "  every shard file equals the reference's"
run "$C" diff "$S/step-00000020" "$R/step-00000020"
is "$rc" 0 "  ckptctl diff: identical to the reference"
is "$(cat "$S/LATEST")" "step-00000020" "  LATEST names it"
run "$C" flush --json "$N0" "$N2" --to "$S" --step 10
is "$(py '(d["step"], d["path"].endswith("/step-00000010"), len(d["local_roots"]))')" \
    "(10, True, 2)" "flush --json --step 10"
is "$(cat "$S/LATEST")" "step-00000020" "  LATEST still names the newer step 20"
before=$(listing "$S")
run "$C" flush "$N0" "$N2" --to "$S"
ok "$([ "$rc" -eq 3 ] && grep -q "^ckptctl: flush: '$S': step 20 is already there" "$T/err"; echo $?)" \
    "flush into a root that has the step exits 3 and says so" || why "$(cat "$T/err")"
is "$(listing "$S")" "$before" "  and changes nothing"

run "$C" flush "$N0" "$N1" --to "$T/s2"
ok "$([ "$rc" -eq 1 ] && grep -q 'no step is held completely by the 2 local roots.*step 20, lacks 1 of its 4 shards: 2$' "$T/err"; echo $?)" \
    "flush of N0 and N1 (no shard 2) exits 1 naming the missing shard" || why "$(cat "$T/err")"
ok "$([ ! -e "$T/s2" ]; echo $?)" "  and creates nothing"
run "$C" flush "$N0" "$N1" --to "$T/s2" --step 10
ok "$([ "$rc" -eq 1 ] && grep -q 'step-00000010 is incomplete across the 2 local roots.*shard-2.ftsh' "$T/err"; echo $?)" \
    "flush --step 10 of N0 and N1 exits 1 naming shard-2.ftsh" || why "$(cat "$T/err")"
ok "$([ ! -e "$T/s2" ]; echo $?)" "  and creates nothing"
run "$C" flush "$N0" "$N2" --to "$T/s2" --step 99
ok "$([ "$rc" -eq 1 ] && grep -q 'holds a sealed step-00000099' "$T/err" && [ ! -e "$T/s2" ]; echo $?)" \
    "flush --step 99 (no root has it) exits 1, nothing created" || why "$(cat "$T/err")"
run "$C" flush "$N0" "$T/does-not-exist" --to "$T/s2"
ok "$([ "$rc" -eq 3 ] && grep -q "'$T/does-not-exist': no such directory" "$T/err" && [ ! -e "$T/s2" ]; echo $?)" \
    "flush with a missing local root exits 3 and names it" || why "$(cat "$T/err")"
mkdir "$T/empty"
run "$C" flush "$T/empty" --to "$T/s2"
ok "$([ "$rc" -eq 3 ] && grep -q 'no sealed step' "$T/err"; echo $?)" \
    "flush of a root with no step exits 3" || why "$(cat "$T/err")"

# A damaged copy is skipped for another root's good one, or refused.
run "$C" flush "$T/c0" "$N2" "$T/c1" --to "$T/s3"
ok "$([ "$rc" -eq 0 ] && cmp -s "$T/s3/step-00000020/shard-0.ftsh" "$R/step-00000020/shard-0.ftsh"; echo $?)" \
    "flush skips c0's damaged shard 0 for c1's good copy (exit $rc)" || why "$(cat "$T/err")"
flip "$T/c1/step-00000020/shard-0.ftsh"
run "$C" flush "$T/c0" "$T/c1" "$T/n2" --to "$T/s4"
ok "$([ "$rc" -eq 1 ] && grep -q 'no good copy of shard-0.ftsh' "$T/err"; echo $?)" \
    "with every copy of shard 0 damaged the flush exits 1" || why "$(cat "$T/err")"
is "$(ls -A "$T/s4" 2>/dev/null)" "" "  and leaves nothing in the destination"

# ---- usage errors --------------------------------------------------------------
usage_case() { # usage_case DESCRIPTION ARGS...
    d=$1
    shift
    run "$C" "$@"
    ok "$([ "$rc" -eq 2 ] && [ ! -s "$T/out" ] && grep -q '^ckptctl: ' "$T/err"; echo $?)" \
        "usage error exits 2: $d" || why "exit $rc" "$(cat "$T/err")"
}
usage_case "flush without --to" flush "$N0" "$N2"
usage_case "flush without a local root" flush --to "$T/s5"
usage_case "flush --step not a number" flush "$N0" --to "$T/s5" --step x
usage_case "flush --to without a value" flush "$N0" --to
usage_case "--local does not apply to inspect" inspect --local "$N0/step-00000010"
usage_case "--to does not apply to list" list --to "$T/s5" "$N0"
ok "$([ ! -e "$T/s5" ]; echo $?)" "  nothing created by any of them"

# ---- help and docs -------------------------------------------------------------
run "$C" help flush
ok "$([ "$rc" -eq 0 ] && head -1 "$T/out" | grep -q '^usage: ckptctl flush ' &&
    grep -q -- '--to DIR' "$T/out" && grep -q -- '--step N' "$T/out"; echo $?)" \
    "help flush prints its usage and options"
h=$(cat "$T/out")
run "$C" flush --help
is "$(cat "$T/out")" "$h" "flush --help equals help flush"
run "$C" help list
grep -q -- '--local' "$T/out"
ok $? "help list names --local"
run "$C" help verify
grep -q -- '--local' "$T/out"
ok $? "help verify names --local"
grep -q '^## ckptctl flush' "$DOCS" && grep -q -- 'list .*--local' "$DOCS" &&
    grep -q -- 'verify .*--local' "$DOCS"
ok $? "docs/ckptctl.md documents flush, list --local and verify --local"
grep -q '^## .*The node-local tier' "$(dirname "$0")/../../docs/checkpoint-format.md"
ok $? "docs/checkpoint-format.md has a section on the node-local tier"

# Under BUILD=build-san a sanitizer report may hide behind an expected exit
# status; look for one in everything the tool wrote to stderr.
! grep -q -e 'Sanitizer' -e 'runtime error:' "$T/all-err" 2>/dev/null
ok $? "no sanitizer report in any run"

done_testing
