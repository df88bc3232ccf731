#!/bin/sh
# ckptctl_rundir.sh - ckptctl given a run directory (what ftrain --run-dir
# makes: DIR/ckpt beside metrics.jsonl and heartbeat/, and no checkpoint of
# its own) works on DIR/ckpt wherever it takes a root - list, verify (all,
# and ROOT STEP), inspect/diff/export by root, ROOT/STEP, prune, import,
# flush --to - and says so once on stderr; a directory with checkpoints of
# its own, one without ckpt/, and --local roots are taken as they are.
. "$(dirname "$0")/../lib.sh"
C=$(cd "$(dirname "$BUILD/ckptctl")" 2>/dev/null && pwd)/ckptctl
MK=$(cd "$(dirname "$BUILD/tests/tools/ckpt_mkfixture")" 2>/dev/null && pwd)/ckpt_mkfixture
MKL=$(dirname "$MK")/ckpt_mklocal
[ -x "$C" ] && [ -x "$MK" ] && [ -x "$MKL" ] || skip_all "$BUILD/ckptctl or the fixture tools not built"

# Relative paths, as a user types them: everything runs in $T.
cd "$T" || exit 1
mkdir -p runs/x/heartbeat runs/y/ckpt
echo '{"step":1}' >runs/x/metrics.jsonl
"$MK" runs/x/ckpt 10 --world 2 --mb 0.1 >/dev/null &&
    "$MK" runs/x/ckpt 20 --world 3 --mb 0.1 >/dev/null &&
    "$MK" runs/x/ckpt 30 --world 2 --mb 0.1 >/dev/null ||
    { echo "Bail out! fixtures not written"; exit 1; }
NOTE="ckptctl: using the checkpoint root 'runs/x/ckpt'"

# ctl ARGS...: ckptctl ARGS through lib.sh's run: stdout in out, stderr in
# err (here, $T), status in rc.
ctl() { run "$C" "$@"; }
# noted [N]: stderr holds the note exactly N times (default 1).
noted() { [ "$(grep -c -F -x "$NOTE" err)" -eq "${1:-1}" ]; }

ctl list runs/x
ok "$([ "$rc" -eq 0 ] && [ "$(grep -c ' committed' out)" -eq 3 ] && noted; echo $?)" \
    "list RUN_DIR: the three checkpoints of RUN_DIR/ckpt, the root said once (exit $rc)" ||
    why "$(cat out err)"
ctl list --json runs/x
like "$(cat out)" '"root": "runs/x/ckpt"' "list --json RUN_DIR: the root is RUN_DIR/ckpt"
ctl list runs/x/
ok "$([ "$rc" -eq 0 ] && noted; echo $?)" "list RUN_DIR/ (trailing slash): the same root" ||
    why "$(cat err)"
(cd runs/x && "$C" list >../../out 2>../../err)
ok "$(grep -q 'step-00000030 .*committed LATEST' out &&
    grep -q -F -x "ckptctl: using the checkpoint root './ckpt'" err; echo $?)" \
    "list in a run directory (DIR defaults to .): ./ckpt" || why "$(cat out err)"

ctl verify runs/x
ok "$([ "$rc" -eq 0 ] && [ "$(grep -c ': ok' out)" -eq 3 ] && noted; echo $?)" \
    "verify RUN_DIR: every checkpoint of RUN_DIR/ckpt ok (exit $rc)" || why "$(cat out err)"
ctl verify runs/x 20
ok "$([ "$rc" -eq 0 ] && grep -q '^step-00000020: ok (3 shards' out && noted; echo $?)" \
    "verify RUN_DIR 20: step 20 of RUN_DIR/ckpt (exit $rc)" || why "$(cat out err)"

ctl inspect runs/x
ok "$([ "$rc" -eq 0 ] && grep -q '^step  *30$' out && noted &&
    grep -q "using 'runs/x/ckpt/step-00000030', the latest checkpoint in 'runs/x/ckpt'" err; echo $?)" \
    "inspect RUN_DIR: the latest checkpoint of RUN_DIR/ckpt (exit $rc)" || why "$(cat out err)"
ctl inspect runs/x/20
ok "$([ "$rc" -eq 0 ] && grep -q '^step  *20$' out && noted; echo $?)" \
    "inspect RUN_DIR/20: step 20 of RUN_DIR/ckpt (exit $rc)" || why "$(cat out err)"
ctl diff runs/x runs/x/ckpt/step-00000030
ok "$([ "$rc" -eq 0 ] && grep -q '^identical:' out && noted; echo $?)" \
    "diff RUN_DIR STEPDIR: RUN_DIR's latest against itself, identical (exit $rc)" ||
    why "$(cat out err)"
ctl export runs/x 20 x20.tar
ok "$([ "$rc" -eq 0 ] && [ -s x20.tar ] && noted; echo $?)" "export RUN_DIR 20 (exit $rc)" ||
    why "$(cat out err)"

ctl import x20.tar runs/y
ok "$([ "$rc" -eq 0 ] && [ -f runs/y/ckpt/step-00000020/manifest.json ] && [ ! -e runs/y/step-00000020 ] &&
    grep -q -F -x "ckptctl: using the checkpoint root 'runs/y/ckpt'" err; echo $?)" \
    "import FILE RUN_DIR: into RUN_DIR/ckpt (exit $rc)" || why "$(cat out err)"

ctl prune --keep 1 runs/x
ok "$([ "$rc" -eq 0 ] && [ -d runs/x/ckpt/step-00000030 ] && [ ! -e runs/x/ckpt/step-00000010 ] &&
    [ -f runs/x/metrics.jsonl ] && [ -d runs/x/heartbeat ] && noted; echo $?)" \
    "prune --keep 1 RUN_DIR: RUN_DIR/ckpt pruned, the run directory's own files kept (exit $rc)" ||
    why "$(cat out err)"

# flush --to RUN_DIR: into RUN_DIR/ckpt.
"$MKL" 40 n0 n1 --world 2 --mb 0.1 >/dev/null 2>&1 || { echo "Bail out! local fixtures not written"; exit 1; }
ctl flush n0 n1 --to runs/y
ok "$([ "$rc" -eq 0 ] && [ -f runs/y/ckpt/step-00000040/manifest.json ] &&
    grep -q -F -x "ckptctl: using the checkpoint root 'runs/y/ckpt'" err; echo $?)" \
    "flush LOCAL_ROOT... --to RUN_DIR: into RUN_DIR/ckpt (exit $rc)" || why "$(cat out err)"

# A damaged checkpoint in a run directory: reported against RUN_DIR/ckpt.
shard=runs/x/ckpt/step-00000030/shard-0.ftsh
printf 'x' | dd of="$shard" bs=1 seek=100 conv=notrunc 2>/dev/null
ctl verify runs/x
ok "$([ "$rc" -eq 1 ] && grep -q "^ckptctl: verify: 'runs/x/ckpt': 1 of 1 checkpoints bad" err; echo $?)" \
    "verify RUN_DIR with a damaged shard: exit 1, the summary names RUN_DIR/ckpt (exit $rc)" ||
    why "$(cat out err)"

# Not run directories.
mkdir -p both/ckpt
"$MK" both 5 --world 1 --mb 0.1 >/dev/null
ctl list both
ok "$([ "$rc" -eq 0 ] && grep -q '^step-00000005 ' out && [ ! -s err ]; echo $?)" \
    "a directory with ckpt/ and a checkpoint of its own is a root itself, no note" ||
    why "$(cat out err)"
mkdir -p plain
ctl list plain
ok "$([ "$rc" -eq 0 ] && [ ! -s err ]; echo $?)" "a directory without ckpt/: listed as it is, no note" ||
    why "$(cat out err)"
ctl list --local runs/x
ok "$(! grep -q 'using the checkpoint root' err; echo $?)" \
    "list --local RUN_DIR: a node-local root is never taken for a run directory"
ctl verify runs/nonexistent
ok "$([ "$rc" -eq 3 ] && ! grep -q 'using the checkpoint root' err; echo $?)" \
    "verify of a missing path: exit 3 as before, no note (exit $rc)"

done_testing
