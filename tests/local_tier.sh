#!/bin/sh
# local_tier.sh - the node-local checkpoint tier under mpirun, with fake
# nodes: each rank's node is its SLURMD_NODENAME (set per rank with
# mpirun's "-x NAME=VALUE ... : ..." contexts), and --ckpt-local DIR/%n gives
# each fake node a directory of its own.
#
# 1. 4 ranks on nodes a and b, a local checkpoint every 4 steps, the shared
#    tier only at step 50: the run is killed after step 30 (SIGKILL to
#    rank 3: --fault kill@30:3), and node b's directory is deleted (the
#    node is lost).
#    Resumed on the 2 ranks of node a: from the local tier (every shard is
#    on a: a's own and b's partner copies), newer than the shared tier, the
#    steps redone at most the local interval, and the final param_hash is
#    the uninterrupted run's.
# 2. Resumed on 3 ranks, 2 on node a and 1 on a new node c whose directory
#    is empty: c's rank gets the manifest from a, and the run still ends
#    with the uninterrupted param_hash.
# 3. A partner copy damaged where it is the only one: the local checkpoint
#    cannot be read, the resume says so and uses the shared tier, and still
#    ends bit-exactly.
# 4. One node: the run says there is no partner copy.
# 5. A planned stop (USR1) leaves the newest state on the shared tier
#    before exit 75; with the local directories gone (a new allocation),
#    the resume uses the shared tier and ends bit-exactly.
# 6. Local checkpoints are committed only whole: each node's directory
#    holds its own ranks' shards and its partner copies, and no step
#    directory is left half-written; --ckpt-local-keep 2 keeps two.
. "$(dirname "$0")/lib.sh"
: "${FTRAIN_TIMEOUT:=90}"
need_mpi
CKPTCTL="$BUILD/ckptctl"
RUN="--device cpu --data line --layers 16 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic --steps 60"
L="$T/local"

# nodes CONTEXT... -- OPTIONS: run ftrain on fake nodes; each CONTEXT is
# "N:NODE" (N ranks on NODE); OPTIONS go to every rank.
nodes() {
    _cmd="timeout -k 5 $FTRAIN_TIMEOUT mpirun --oversubscribe"
    _sep=""
    while [ "$1" != -- ]; do
        _cmd="$_cmd$_sep -n ${1%%:*} -x SLURMD_NODENAME=${1#*:} $FTRAIN --device cpu @ARGS@"
        _sep=" :"
        shift
    done
    shift
    eval "$(printf '%s' "$_cmd" | sed "s|@ARGS@|$*|g")"
}
# resumed_step FILE: the step of FILE's resume line.
resumed_step() { sed -n 's/^resume: .* step \([0-9]*\) (epoch.*/\1/p' "$1" | head -n 1; }

mpi 1 $RUN >"$T/ref.out" 2>&1
REF=$(hash_of "$T/ref.out")
[ -n "$REF" ] || { echo "Bail out! the uninterrupted run failed: $(tail -n 3 "$T/ref.out")"; exit 1; }

LOCAL="--run-dir $T/run --ckpt-every 50 --ckpt-local $L/%n --ckpt-local-every 4 --log-every 1"

# ---- 1. node b lost: resume on node a from the local tier ---------------------
nodes 2:a 2:b -- $RUN $LOCAL --fault kill@30:3 >"$T/one.out" 2>&1
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q '^local tier: .* on 2 nodes' "$T/one.out" &&
    [ "$(grep -c '^local checkpoint: step' "$T/one.out")" = 7 ]; echo $?)" \
    "4 ranks on nodes a and b: local checkpoints at steps 4-28, then rank 3 killed after step 30 (exit $rc)" ||
    why "$(grep -E '^local|error' "$T/one.out" | tail -n 5)"
last_local=$(sed -n 's/^local checkpoint: step \([0-9]*\) .*/\1/p' "$T/one.out" | tail -n 1)
ls "$L/a" "$L/b" >"$T/one.ls" 2>&1
ok "$([ -d "$L/a/step-$(printf %08d "$last_local")" ] && [ -d "$L/b/step-$(printf %08d "$last_local")" ] &&
    [ "$(ls "$L/a/step-$(printf %08d "$last_local")" | grep -c '^shard-')" = 4 ] &&
    ! ls -d "$T/run/ckpt/step-"* >/dev/null 2>&1; echo $?)" \
    "  each node holds step $last_local whole (own 2 + partner copies 2); the shared tier has none yet" ||
    why "$(cat "$T/one.ls")" "$(ls -R "$L" | head -n 30)"
"$CKPTCTL" verify --local "$L/a/step-$(printf %08d "$last_local")" >"$T/one.verify" 2>&1
ok $? "  ckptctl verify --local accepts node a's copy" || why "$(cat "$T/one.verify")"
rm -rf "$L/b"
nodes 2:a -- $RUN $LOCAL >"$T/two.out" 2>&1
rc=$?
line=$(grep '^resume:' "$T/two.out")
redone=$(sed -n 's/^recovery: .* \([0-9]*\) steps\{0,1\} redone.*/\1/p' "$T/two.out")
ok "$([ "$rc" = 0 ] && [ "$last_local" = 28 ] && printf '%s' "$line" | grep -Eq "^resume: from the node-local tier \(shards 0-3 read on a\) step-0*28 step 28 .*world 4 -> 2"; echo $?)" \
    "node b lost: resumed on node a from the local tier's step $last_local (exit $rc)" ||
    why "$line" "$(tail -n 5 "$T/two.out")"
ok "$([ -n "$redone" ] && [ "$redone" -le 4 ]; echo $?)" "  steps redone: ${redone:-?} (at most the local interval, 4)" ||
    why "$(grep '^recovery' "$T/two.out")"
is "$(hash_of "$T/two.out")" "$REF" "  and ends with the uninterrupted run's param_hash"

# ---- 2. a new node with an empty directory -------------------------------------------
rm -rf "$T/run" "$L"
nodes 2:a 2:b -- $RUN $LOCAL --fault kill@26:0 >"$T/three.out" 2>&1
rm -rf "$L/b"
nodes 2:a 1:c -- $RUN $LOCAL >"$T/four.out" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -Eq '^resume: from the node-local tier \(shards 0-3 read on a\) step-0*24 ' "$T/four.out"; echo $?)" \
    "a new node c (empty directory) beside a: resumed 4 -> 3 from a's local tier (exit $rc)" ||
    why "$(grep -E '^resume|error' "$T/four.out")"
is "$(hash_of "$T/four.out")" "$REF" "  and ends with the uninterrupted run's param_hash"
ok "$([ -z "$(find "$L" -name '.restore-*')" ]; echo $?)" "  the manifest copy node c used is removed"

# ---- 3. the only copy of a shard damaged: the shared tier instead ----------------------
rm -rf "$T/run" "$L"
nodes 2:a 2:b -- $RUN --run-dir "$T/run" --ckpt-every 8 --ckpt-local "$L/%n" --ckpt-local-every 4 --fault kill@30:0 >"$T/five.out" 2>&1
rm -rf "$L/b"
flip "$L/a/step-00000028/shard-3.ftsh"
nodes 2:a -- $RUN $LOCAL >"$T/six.out" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -q 'resume: the node-local checkpoint of step 28 could not be read' "$T/six.out" &&
    grep -Eq '^resume: from .*/run/ckpt/step-0*24 step 24 ' "$T/six.out"; echo $?)" \
    "a damaged partner copy: the resume says so and uses the shared tier's step 24 (exit $rc)" ||
    why "$(grep -E 'resume' "$T/six.out")"
is "$(hash_of "$T/six.out")" "$REF" "  and ends with the uninterrupted run's param_hash"
ok "$(! grep -q 'local checkpoint of step .* failed' "$T/six.out" &&
    grep -q '^local checkpoint: step 28 ' "$T/six.out"; echo $?)" \
    "  node a's stale step 28 was dropped at the resume: the local save of step 28 succeeds again" ||
    why "$(grep -E 'local' "$T/six.out" | head -n 5)"

# ---- 4. one node ----------------------------------------------------------------------------
rm -rf "$T/run" "$L"
nodes 2:a -- $RUN $LOCAL --steps 8 >"$T/seven.out" 2>&1
ok "$(grep -q '^local tier: .* on one node (a): no partner copies' "$T/seven.out"; echo $?)" \
    "one node: the run says there are no partner copies" || why "$(grep '^local' "$T/seven.out")"
ok "$([ "$(ls "$L/a/step-00000004" | grep -c '^shard-')" = 2 ]; echo $?)" \
    "  and keeps only its own shards" || why "$(ls "$L/a/step-00000004")"

# ---- 5. a planned stop reaches the shared tier -------------------------------------------
rm -rf "$T/run" "$L"
nodes 2:a 2:b -- $RUN $LOCAL --step-delay-ms 60 >"$T/eight.out" 2>&1 &
job=$!
wait_for 60 sh -c "[ \$(grep -c '^epoch ' '$T/eight.out') -ge 18 ]"
kill -USR1 "$(rank_pid "$T/eight.out" 0)"
wait "$job"
rc=$?
stop=$(sed -n 's/^stop: signal .* at step \([0-9]*\):.*/\1/p' "$T/eight.out" | head -n 1)
ok "$([ "$rc" = 75 ] && [ -n "$stop" ] && [ -d "$T/run/ckpt/step-$(printf %08d "$stop")" ]; echo $?)" \
    "USR1: exit $rc, and the stop step ${stop:-?} is on the shared tier" ||
    why "$(grep -E '^stop|^checkpoint' "$T/eight.out")"
rm -rf "$L"
nodes 2:a 1:b -- $RUN $LOCAL >"$T/nine.out" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -Eq "^resume: from .*/run/ckpt/step-0*$stop step $stop " "$T/nine.out"; echo $?)" \
    "  a new allocation (empty local directories) resumes from the shared tier (exit $rc)" ||
    why "$(grep -E 'resume' "$T/nine.out")"
is "$(hash_of "$T/nine.out")" "$REF" "  and ends with the uninterrupted run's param_hash"

# ---- 6. what a node keeps ------------------------------------------------------------------
ok "$([ "$(ls -d "$L"/a/step-* | wc -l)" = 2 ] && [ -z "$(find "$L" -name '.tmp-*')" ]; echo $?)" \
    "each node keeps 2 local checkpoints, and no half-written one" || why "$(ls -a "$L"/*)"

# ---- 7. by the clock, and flushed to the shared tier ------------------------------------------
rm -rf "$T/run" "$L"
nodes 2:a 1:b -- $RUN --run-dir "$T/run" --ckpt-local "$L/%n" --ckpt-local-interval 0.3 \
    --ckpt-flush-every 2 --step-delay-ms 50 --steps 40 >"$T/ten.out" 2>&1
rc=$?
locals=$(sed -n 's/^local checkpoint: step \([0-9]*\) .*/\1/p' "$T/ten.out" | tr '\n' ' ')
shared=$(sed -n 's|^checkpoint: .*/step-0*\([0-9]*\) committed.*|\1|p' "$T/ten.out" | tr '\n' ' ')
want=$(printf '%s\n' $locals | awk 'NR % 2 == 0' | tr '\n' ' ')
ok "$([ "$rc" = 0 ] && [ "$(printf '%s\n' $locals | wc -l)" -ge 4 ] && [ "$shared" = "${want}40 " ]; echo $?)" \
    "--ckpt-local-interval 0.3: local checkpoints at steps $locals; --ckpt-flush-every 2: shared at $shared" ||
    why "want shared at ${want}40" "$(grep -E 'checkpoint' "$T/ten.out" | head)"

done_testing
