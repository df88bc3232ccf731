#!/bin/sh
# local_tier.sh - the node-local checkpoint tier under mpirun, with fake
# nodes: each rank's node is its SLURMD_NODENAME (set per rank with
# mpirun's "-x NAME=VALUE ... : ..." contexts), and --ckpt-local DIR/%n gives
# each fake node a directory of its own.
#
# Local saves run in the background: started at a step boundary, sealed at
# a later one (two at least: the shard written, then the partner copies).
# The runs that count on a save being sealed by some step slow their steps
# to 40 ms (--step-delay-ms) and leave it three boundaries.
#
# One script, three variants (three files, run side by side): the save's
# path (write() on a disk, or in place on a memory file system) times who
# moves the partner exchange (the helper thread, or the training thread at
# step boundaries).
#   disk    this file: the test's temporary directory (a disk), the default
#           exchange (auto: the training thread on fewer than 8 cores).
#   thread  local_tier_shm.sh: /dev/shm, --ckpt-local-exchange thread.
#   steps   local_tier_steps.sh: /dev/shm, --ckpt-local-exchange steps.
# A scenario whose code path depends on neither (the restore's choice of a
# tier, the clock, the stray spare files) runs in one variant; one that
# depends on one of the two runs where each value of it is met.  The
# [variants] after each number below say where it runs; FTRAIN_TEST_LOCAL_ALL=1
# runs every scenario in any variant.
#
# 1. [all] 4 ranks on nodes a and b, a local checkpoint every 4 steps, the
#    shared tier only at step 50: the run is killed after step 32 (SIGKILL
#    to rank 3: --fault kill@32:3), and node b's directory is deleted (the
#    node is lost).
#    Resumed on the 2 ranks of node a: from the local tier (every shard is
#    on a: a's own and b's partner copies), newer than the shared tier, the
#    steps redone at most the local interval, and the final param_hash is
#    the uninterrupted run's.
# 2. [all] A new node c whose directory is empty: checked on 10's resume.
# 3. [disk, steps] A partner copy damaged where it is the only one: the
#    local checkpoint cannot be read, the resume says so and uses the shared
#    tier, and still ends bit-exactly.
# 4. [all] One node (1's resume, on node a alone): the run says there is no
#    partner copy, and its saves hold only its own shards.
# 5. [disk] A planned stop (USR1; 8's) leaves the newest state on the shared
#    tier before exit 75; with the local directories gone (a new
#    allocation), the resume uses the shared tier and ends bit-exactly.
# 6. [all] Local checkpoints are committed only whole: after 8's resume,
#    each node's directory holds --ckpt-local-keep's 2 (the default), and no
#    step directory is left half-written.
# 7. [disk] By the clock (--ckpt-local-interval), and flushed to the shared
#    tier.
# 8. [all] A stop while a local save is in flight (--ckpt-local-every 1
#    keeps one in flight from the first on): the stop completes and seals it
#    before the shared save and exit 75; every node holds it whole, nothing
#    half-written is left, and the resume takes the shared tier's newer
#    checkpoint and ends bit-exactly.
# 9. [all] The end of the run with a local save in flight (started at the
#    step before the last): sealed on every node before the run ends.
# 10. [all] A kill while a local save is in flight (started at step 28, rank
#    3 killed after step 29): step 28 is sealed on no node.  Node b lost,
#    the resume on node a and a new node c, whose directory is empty (2):
#    c's rank gets the manifest from a, the resume uses step 24, the
#    manifest copy c used is removed, step 28 is saved again, and the run
#    ends bit-exactly.
# 11. [all] A background save that fails (node b's directory replaced by a
#    file while the run goes on): reported (failed, or not started where the
#    save in place could not map its file), sealed on no node, training
#    goes on, later saves are sealed, and the result is bit-exact.
# 12. [all] The background save snapshots only each rank's slice of the
#    state: with stored frames, every local shard file (own and partner
#    copy) equals the shared tier's shard of the same step, byte for byte.
# 13. On a memory file system (the tier saves in place there: the slice is
#    copied straight into a mapped file, the copies received into mapped
#    files), the files are reused (src/tier/local_inplace.c, whoever moves
#    the exchange): [thread] over 15 saves with --ckpt-local-keep 2 (then
#    1), each shard of node a lives in at most 3 (2) files (inodes), and the
#    spare files are removed at the end; [steps] a run resumed after a kill
#    reuses the killed run's files (one new file per shard, for its first
#    save).  On a disk (FTRAIN_TEST_LOCAL_ALL=1 there): skipped.
# 14. [all] A stray .spare (the tier's own name for its spare files, cleared
#    when the tier opens on any file system) in a node's directory, on 9's
#    run: a link to a directory holding a file on node a, a regular file on
#    node b.  Each is removed, the link never followed (the file it pointed
#    at is untouched), and the local saves go on.
# 15. [thread, steps] A full memory file system (a tmpfs of 8 KiB mounted
#    for the test, whatever the variant's directory: the node-local
#    directories hold no more than two pages): each local save fails with a
#    message that names the full file system, training goes on, and the run
#    ends bit-exactly.  Skipped where no tmpfs can be mounted (not root, or
#    not permitted).
# 16. [thread, steps] A rank stopped (SIGSTOP) while local saves are in
#    flight all the time (--ckpt-local-every 1, a state of 12 MiB):
#    whichever phase the save was in (its partner exchange may be waiting on
#    the stopped rank, on the helper thread with --ckpt-local-exchange
#    thread, or on the training thread's step boundaries with steps), the
#    watchdog ends the job with exit 76 within --hang-timeout and a few
#    seconds, and names the stopped rank.  What waits on the stopped rank
#    is the exchange (by either thread) and the collectives, whatever the
#    file system: the disk variant (the exchange at step boundaries there,
#    as in steps) does not run it.
# 17. [all] A partner copy damaged in transfer (the dmgsend LD_PRELOAD shim
#    flips a byte of one piece that rank 1 sends; skipped in a sanitized
#    build): the receiver's checksum refuses it, that save is sealed on no
#    node, training goes on, later saves are sealed whole, and the run ends
#    bit-exactly.
# 18. [all] The update waits for the local save's copy of the state: where
#    the helper thread moves the exchange, it also copies each rank's slice
#    while the next step computes, and --ckpt-local-copy-delay-ms 300
#    holds that copy back for several steps' time.  Each save's stall then
#    counts a wait of about 300 ms (the next update waited for the copy),
#    and a resume on node a from the local tier ends bit-exactly, which it
#    would not if a snapshot held a later step's parameters under its
#    step's record.  Where the training thread moves the exchange, it
#    copies its slice at the save's step itself: no wait for the helper;
#    there 1's run is given the delay and checked for it, and its resume is
#    18's.
#
# FTRAIN_TEST_LOCAL_BASE: where the fake nodes' directories are made
# (local_tier_shm.sh and local_tier_steps.sh set /dev/shm, so that the
# whole file runs in place); default: the test's temporary directory.
# Test 1 checks that the run says "saved in place" exactly when that is a
# memory file system.  FTRAIN_TEST_LOCAL_EXCHANGE: auto (the default, as
# ftrain's), thread (local_tier_shm.sh) or steps (local_tier_steps.sh),
# given to every run with a local tier as --ckpt-local-exchange; test 1
# checks that the run says who moves the partner copies (auto: the helper
# thread only where every rank has a core to spare), and, on the helper
# thread, that the training thread's share of the exchange is 0.  Another
# pair (a disk with thread or steps, /dev/shm with auto) runs every
# scenario, as FTRAIN_TEST_LOCAL_ALL=1 does.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=90}"
need_mpi
CKPTCTL="$BUILD/ckptctl"
RUN="--device cpu --data line --layers 16 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic --steps 60"
if [ -n "${FTRAIN_TEST_LOCAL_BASE:-}" ]; then
    L=$(mktemp -d "$FTRAIN_TEST_LOCAL_BASE/ftrain-local.XXXXXX") ||
        { echo "Bail out! cannot make a directory under $FTRAIN_TEST_LOCAL_BASE"; exit 1; }
    trap 'rm -rf "$L"; _tap_cleanup' EXIT
else
    L="$T/local"
fi
mkdir -p "$L"
EXCHANGE=${FTRAIN_TEST_LOCAL_EXCHANGE:-auto}
case "$EXCHANGE" in
auto | thread | steps) ;;
*) echo "Bail out! FTRAIN_TEST_LOCAL_EXCHANGE must be auto, thread or steps, not '$EXCHANGE'"; exit 1 ;;
esac
case "$(stat -f -c %T "$L")" in
tmpfs | ramfs) INPLACE=1 ;;
*) INPLACE=0 ;;
esac
# The variant (the header's list), and the scenarios it runs.
case "$INPLACE:$EXCHANGE" in
0:auto) VARIANT=disk ;;
1:thread) VARIANT=thread ;;
1:steps) VARIANT=steps ;;
*) VARIANT=all ;;
esac
[ "${FTRAIN_TEST_LOCAL_ALL:-0}" = 1 ] && VARIANT=all
# runs_in VARIANT...: this file's variant is among them (or it runs all).
runs_in() {
    [ "$VARIANT" = all ] && return 0
    case " $* " in *" $VARIANT "*) return 0 ;; esac
    return 1
}
diag "variant $VARIANT: $(stat -f -c %T "$L"), --ckpt-local-exchange $EXCHANGE"

# nodes CONTEXT... -- OPTIONS: run ftrain on fake nodes; each CONTEXT is
# "N:NODE" (N ranks on NODE); OPTIONS go to every rank, and with a local
# tier --ckpt-local-exchange $EXCHANGE.
nodes() {
    case " $* " in
    *" --ckpt-local "*) set -- "$@" --ckpt-local-exchange "$EXCHANGE" ;;
    esac
    _cmd="timeout -k 5 $FTRAIN_TIMEOUT sh \"\$LAUNCH\" mpirun --oversubscribe"
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
# sealed NODE: the step numbers of NODE's sealed local checkpoints.
sealed() { ls "$L/$1" 2>/dev/null | sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' | sort -n | tr '\n' ' '; }
# whole NODE STEP: NODE's step-STEP holds 4 shards and verifies.
whole() {
    _d="$L/$1/step-$(printf %08d "$2")"
    [ "$(find "$_d" -maxdepth 1 -name 'shard-*.ftsh' 2>/dev/null | wc -l)" -eq 4 ] &&
        "$CKPTCTL" verify --local "$_d" >/dev/null 2>&1
}
# copy_waits FILE: the waits (ms) of FILE's local checkpoint lines, one a line.
copy_waits() { sed -n 's/^local checkpoint: step [0-9]* in .*, waits \([0-9.]*\)); helper CPU .*/\1/p' "$1"; }

mpi 1 $RUN >"$T/ref.out" 2>&1
REF=$(hash_of "$T/ref.out")
[ -n "$REF" ] || { echo "Bail out! the uninterrupted run failed: $(tail -n 3 "$T/ref.out")"; exit 1; }

LOCAL="--run-dir $T/run --ckpt-every 50 --ckpt-local $L/%n --ckpt-local-every 4 --log-every 1"
SLOW="--step-delay-ms 40"

# Who moves the partner copies.  auto: 4 ranks on 2 fake nodes, each with 1
# BLAS thread (--deterministic); the helper thread where every rank has a
# core beyond that one.
cores=$(nproc)
case "$EXCHANGE" in
thread) who='by the helper thread' ;;
steps) who='at step boundaries' ;;
*) if [ "$cores" -ge 8 ]; then who='by the helper thread'; else
       who='at step boundaries (a rank has no core to spare for the helper thread: --ckpt-local-exchange thread moves them there anyway)'
   fi ;;
esac
# 18 on 1's runs where the training thread moves the exchange: the copy
# delay, which holds back only the helper's copy, must change nothing.
DELAY=""
[ "$who" = 'by the helper thread' ] || DELAY="--ckpt-local-copy-delay-ms 300"

# ---- 1. node b lost: resume on node a from the local tier ---------------------
nodes 2:a 2:b -- $RUN $LOCAL $SLOW $DELAY --fault kill@32:3 >"$T/one.out" 2>&1
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q '^local tier: .* on 2 nodes' "$T/one.out" &&
    [ "$(grep -c '^local checkpoint: step [0-9]* in ' "$T/one.out")" = 7 ]; echo $?)" \
    "4 ranks on nodes a and b: local checkpoints at steps 4-28 sealed, then rank 3 killed after step 32 (exit $rc)" ||
    why "$(grep -E '^local|error' "$T/one.out" | tail -n 5)"
said=$(grep -c '^local tier: .*; saved in place (memory file system)$' "$T/one.out")
is "$said" "$INPLACE" "  the run says it saves in place exactly when the directory is a memory file system ($(stat -f -c %T "$L"))"
ok "$(grep -Fq "(a -> b -> ...) $who; keeps" "$T/one.out"; echo $?)" \
    "  the run says the partner copies are moved $who (--ckpt-local-exchange $EXCHANGE, $cores cores for 4 ranks)" ||
    why "$(grep '^local tier' "$T/one.out")"
busy=0
if [ "$who" = 'by the helper thread' ]; then
    # The training thread's share of the exchange: none.
    busy=$(grep '^local checkpoint: step' "$T/one.out" | grep -vc 'exchange 0\.0,')
fi
is "$busy" 0 "  local checkpoints whose training thread spent time in the exchange ($EXCHANGE)"
# The helper's CPU: on every line, and in every local_checkpoint event
# (microseconds there): never 0, as every save's jobs hash and rename.
cpu_lines=$(grep -c '^local checkpoint: step [0-9]* in .*; helper CPU [0-9.]* ms$' "$T/one.out")
cpu_events=$(grep '"event":"local_checkpoint"' "$T/run/metrics.jsonl" 2>/dev/null |
    sed -n 's/.*"helper_cpu_ms":\([0-9.]*\).*/\1/p' | awk '$1 > 0' | wc -l)
is "$cpu_lines $cpu_events" "7 7" "  each local checkpoint's line and event give the helper thread's CPU, above 0" ||
    why "$(grep '^local checkpoint' "$T/one.out" | tail -n 2)"
last_local=$(sed -n 's/^local checkpoint: step \([0-9]*\) in .*/\1/p' "$T/one.out" | tail -n 1)
ls "$L/a" "$L/b" >"$T/one.ls" 2>&1
ok "$([ -d "$L/a/step-$(printf %08d "$last_local")" ] && [ -d "$L/b/step-$(printf %08d "$last_local")" ] &&
    [ "$(ls "$L/a/step-$(printf %08d "$last_local")" | grep -c '^shard-')" = 4 ] &&
    ! ls -d "$T/run/ckpt/step-"* >/dev/null 2>&1; echo $?)" \
    "  each node holds step $last_local whole (own 2 + partner copies 2); the shared tier has none yet" ||
    why "$(cat "$T/one.ls")" "$(ls -R "$L" | head -n 30)"
"$CKPTCTL" verify --local "$L/a/step-$(printf %08d "$last_local")" >"$T/one.verify" 2>&1
ok $? "  ckptctl verify --local accepts node a's copy" || why "$(cat "$T/one.verify")"
if [ -n "$DELAY" ]; then
    # 18, where the training thread moves the exchange (its resume is the
    # one below).
    waits=$(copy_waits "$T/one.out")
    saves=$(printf '%s\n' "$waits" | grep -c .)
    long=$(printf '%s\n' "$waits" | awk '$1 >= 200' | wc -l)
    ok "$([ "$saves" -ge 6 ] && [ "$long" = 0 ]; echo $?)" \
        "  $DELAY: the training thread copies its slice itself (the exchange moves $who): no update waited for the helper ($long of $saves saves with waits of 200 ms or more)" ||
        why "$(grep -E '^local|error' "$T/one.out" | tail -n 4)"
fi
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

# ---- 4. one node ----------------------------------------------------------------------------
# The resume above ran on node a alone: its own saves (steps 32 to 56, the
# newest kept) hold its 2 shards, no partner copy.
newest=$(sealed a | awk '{ print $NF }')
ok "$(grep -q '^local tier: .* on one node (a): no partner copies' "$T/two.out"; echo $?)" \
    "one node: the run says there are no partner copies" || why "$(grep '^local' "$T/two.out")"
ok "$([ "${newest:-0}" -gt 28 ] && [ "$(ls "$L/a/step-$(printf %08d "$newest")" | grep -c '^shard-')" = 2 ]; echo $?)" \
    "  and keeps only its own shards (step ${newest:-?})" || why "a: $(sealed a)" "$(ls "$L/a/step-$(printf %08d "${newest:-0}")")"

# ---- 3. the only copy of a shard damaged: the shared tier instead ----------------------
if runs_in disk steps; then
    # The case needs node a's step 28 whole (its own shards and node b's
    # partner copies): the copy of step 28 may still be on its way when
    # the kill at step 32 comes on a loaded machine, and then the case is
    # run again (at most 3 times; the check below says what was there).
    tries=0
    while :; do
        rm -rf "$T/run" "$L"
        nodes 2:a 2:b -- $RUN --run-dir "$T/run" --ckpt-every 8 --ckpt-local "$L/%n" --ckpt-local-every 4 $SLOW --fault kill@32:0 >"$T/five.out" 2>&1
        tries=$((tries + 1))
        whole a 28 || [ "$tries" -ge 3 ] && break
        diag "node a's local step 28 is not whole after the kill at step 32 (its partner copy was still on its way): run $((tries + 1))"
    done
    whole a 28 || why "node a's local step 28 is not whole: $(ls "$L/a/step-00000028" 2>&1 | tr '\n' ' ')"
    rm -rf "$L/b"
    flip "$L/a/step-00000028/shard-3.ftsh"
    nodes 2:a -- $RUN $LOCAL >"$T/six.out" 2>&1
    rc=$?
    ok "$([ "$rc" = 0 ] && grep -q 'resume: the node-local checkpoint of step 28 cannot be used (.*could not read' "$T/six.out" &&
        grep -Eq '^resume: from .*/run/ckpt/step-0*24 step 24 ' "$T/six.out"; echo $?)" \
        "a damaged partner copy: the resume says so and uses the shared tier's step 24 (exit $rc)" ||
        why "$(grep -E 'resume' "$T/six.out")"
    is "$(hash_of "$T/six.out")" "$REF" "  and ends with the uninterrupted run's param_hash"
    ok "$(! grep -q 'local checkpoint of step .* failed' "$T/six.out" &&
        grep -q '^local checkpoint: step 28 ' "$T/six.out"; echo $?)" \
        "  node a's stale step 28 was dropped at the resume: the local save of step 28 succeeds again" ||
        why "$(grep -E 'local' "$T/six.out" | head -n 5)"
fi

# ---- 7. by the clock, and flushed to the shared tier ------------------------------------------
if runs_in disk; then
    rm -rf "$T/run" "$L"
    nodes 2:a 1:b -- $RUN --run-dir "$T/run" --ckpt-local "$L/%n" --ckpt-local-interval 0.3 \
        --ckpt-flush-every 2 --step-delay-ms 50 --steps 40 >"$T/ten.out" 2>&1
    rc=$?
    locals=$(sed -n 's/^local checkpoint: step \([0-9]*\) in .*/\1/p' "$T/ten.out" | tr '\n' ' ')
    shared=$(sed -n 's|^checkpoint: .*/step-0*\([0-9]*\) committed.*|\1|p' "$T/ten.out" | tr '\n' ' ')
    want=$(printf '%s\n' $locals | awk 'NR % 2 == 0' | tr '\n' ' ')
    ok "$([ "$rc" = 0 ] && [ "$(printf '%s\n' $locals | wc -l)" -ge 4 ] && [ "$shared" = "${want}40 " ]; echo $?)" \
        "--ckpt-local-interval 0.3: local checkpoints at steps $locals; --ckpt-flush-every 2: shared at $shared" ||
        why "want shared at ${want}40" "$(grep -E 'checkpoint' "$T/ten.out" | head)"
fi

# ---- 8. a stop while a local save is in flight (and 5, 6) -----------------------------------
rm -rf "$T/run" "$L"
nodes 2:a 2:b -- $RUN $LOCAL --ckpt-local-every 1 --step-delay-ms 20 >"$T/stop.out" 2>"$T/stop.err" &
job=$!
wait_for 60 sh -c "[ \$(grep -c '^local checkpoint: step [0-9]* in ' '$T/stop.out') -ge 3 ]"
kill -USR1 "$(rank_pid "$T/stop.out" 0)"
wait "$job"
rc=$?
stop=$(sed -n 's/^stop: signal .* at step \([0-9]*\):.*/\1/p' "$T/stop.out" | head -n 1)
fin=$(sed -n 's/^local checkpoint: step \([0-9]*\) in .*, finished at the stop$/\1/p' "$T/stop.out")
ok "$([ "$rc" = 75 ] && [ -n "$stop" ] && [ -n "$fin" ] && [ "$fin" -lt "$stop" ] &&
    [ -d "$T/run/ckpt/step-$(printf %08d "$stop")" ]; echo $?)" \
    "USR1 with a local save in flight: it is sealed at the stop (step ${fin:-?}), then the shared save of step ${stop:-?} and exit $rc" ||
    why "$(grep -E '^stop|checkpoint' "$T/stop.out" | tail -n 5)" "$(tail -n 3 "$T/stop.err")"
ok "$(whole a "$fin" && whole b "$fin" &&
    [ "$(sealed a | awk '{ print $NF }')" = "$fin" ] && [ "$(sealed b | awk '{ print $NF }')" = "$fin" ] &&
    [ -z "$(find "$L" -name '.tmp-*')" ]; echo $?)" \
    "  each node holds step ${fin:-?} whole, as its newest, and nothing half-written" ||
    why "a: $(sealed a)" "b: $(sealed b)" "$(find "$L" -name '.tmp-*')"
# 5's resume starts from the stop's run directory as it is now.
runs_in disk && cp -a "$T/run" "$T/run5"
nodes 2:a 2:b -- $RUN $LOCAL >"$T/stop2.out" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -Eq "^resume: from .*/run/ckpt/step-0*$stop step $stop " "$T/stop2.out"; echo $?)" \
    "  the resume takes the shared tier's newer stop checkpoint (exit $rc)" ||
    why "$(grep -E 'resume' "$T/stop2.out")"
is "$(hash_of "$T/stop2.out")" "$REF" "  and ends with the uninterrupted run's param_hash"

# ---- 6. what a node keeps ------------------------------------------------------------------
ok "$([ "$(ls -d "$L"/a/step-* | wc -l)" = 2 ] && [ "$(ls -d "$L"/b/step-* | wc -l)" = 2 ] &&
    [ -z "$(find "$L" -name '.tmp-*')" ]; echo $?)" \
    "each node keeps 2 local checkpoints, and no half-written one" || why "$(ls -a "$L"/*)"

# ---- 5. a planned stop reaches the shared tier -------------------------------------------
# 8's stop, resumed on a new allocation (empty local directories).
if runs_in disk; then
    nodes 2:a 1:b -- $RUN --run-dir "$T/run5" --ckpt-every 50 --ckpt-local "$L/new/%n" \
        --ckpt-local-every 4 --log-every 1 >"$T/nine.out" 2>&1
    rc=$?
    ok "$([ "$rc" = 0 ] && grep -Eq "^resume: from .*/run5/ckpt/step-0*$stop step $stop " "$T/nine.out"; echo $?)" \
        "a new allocation (empty local directories) resumes from the shared tier's stop step ${stop:-?} (exit $rc)" ||
        why "$(grep -E 'resume' "$T/nine.out")"
    is "$(hash_of "$T/nine.out")" "$REF" "  and ends with the uninterrupted run's param_hash"
fi

# ---- 9. the end of the run with a local save in flight (and 14) ------------------------------
# 14: a stray .spare in each node's directory, which the tier clears when
# it opens: a link to a directory on a, a regular file on b.
rm -rf "$T/run" "$L" "$T/elsewhere"
mkdir -p "$L/a" "$L/b" "$T/elsewhere"
echo keep >"$T/elsewhere/rank-0-0"
ln -s "$T/elsewhere" "$L/a/.spare"
echo stray >"$L/b/.spare"
mpi 1 $RUN --steps 12 >"$T/ref12.out" 2>&1
nodes 2:a 2:b -- $RUN --run-dir "$T/run" --ckpt-local "$L/%n" --ckpt-local-every 11 --steps 12 >"$T/end.out" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -Eq '^local checkpoint: step 11 in .*, finished at the end$' "$T/end.out" &&
    whole a 11 && whole b 11 && [ -z "$(find "$L" -name '.tmp-*')" ]; echo $?)" \
    "the end with the local save of step 11 in flight: sealed whole on both nodes before the run ends (exit $rc)" ||
    why "$(grep -E 'checkpoint' "$T/end.out")" "a: $(sealed a)" "b: $(sealed b)"
is "$(hash_of "$T/end.out")" "$(hash_of "$T/ref12.out")" "  and the result is the uninterrupted 12-step run's"
like "$(grep '^local checkpoints:' "$T/end.out")" "^local checkpoints: 1 sealed, failed 0, skipped 0; " \
    "  the run's summary line counts the one local save, sealed"
ok "$([ "$(cat "$T/elsewhere/rank-0-0")" = keep ] && [ ! -L "$L/a/.spare" ] && [ ! -f "$L/b/.spare" ]; echo $?)" \
    "a stray .spare (a link to a directory on a, a file on b): removed, the link not followed, the local save goes on" ||
    why "$(ls -la "$L/a" "$L/b" "$T/elsewhere")"

# ---- 10. a kill while a local save is in flight (and 2) ----------------------------------------
rm -rf "$T/run" "$L"
nodes 2:a 2:b -- $RUN $LOCAL $SLOW --fault kill@29:3 >"$T/kill.out" 2>&1
rc=$?
ok "$([ "$rc" -ne 0 ] && [ "$(sealed a)" = "20 24 " ] && [ "$(sealed b)" = "20 24 " ]; echo $?)" \
    "killed after step 29 with the local save of step 28 in flight: no node sealed it (exit $rc)" ||
    why "a: $(sealed a)" "b: $(sealed b)" "$(grep '^local' "$T/kill.out" | tail -n 3)"
rm -rf "$L/b"
nodes 2:a 1:c -- $RUN $LOCAL >"$T/kill2.out" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -Eq '^resume: from the node-local tier \(shards 0-3 read on a\) step-0*24 step 24 .*world 4 -> 3' "$T/kill2.out" &&
    grep -q '^local checkpoint: step 28 in ' "$T/kill2.out"; echo $?)" \
    "  node b lost: resumed 4 -> 3 from a's step 24 beside a new node c (empty directory), and step 28 is saved again (exit $rc)" ||
    why "$(grep -E 'resume|local checkpoint' "$T/kill2.out" | head -n 4)"
is "$(hash_of "$T/kill2.out")" "$REF" "  and ends with the uninterrupted run's param_hash"
ok "$([ -z "$(find "$L" -name '.restore-*')" ]; echo $?)" "  the manifest copy node c used is removed"

# ---- 11. a background save that fails ----------------------------------------------------------
rm -rf "$T/run" "$L"
nodes 2:a 2:b -- $RUN $LOCAL $SLOW >"$T/fail.out" 2>"$T/fail.err" &
job=$!
wait_for 60 grep -q '^local checkpoint: step 8 in ' "$T/fail.out"
# The tier makes a node's directory again when it is missing: should it do
# so between the two, the new directory goes too (a failed redirection of
# ':' would end this shell: hence the subshell).
mv "$L/b" "$L/b.away"
for _i in 1 2 3 4 5; do
    ( : >"$L/b" ) 2>/dev/null && break
    rm -rf "${L:?}/b"
done
wait_for 60 grep -Eq '^ftrain: local checkpoint of step [0-9]+ (failed|not started): .*training goes on' "$T/fail.err"
rm -f "$L/b"
wait "$job"
rc=$?
bad=$(sed -En 's/^ftrain: local checkpoint of step ([0-9]+) (failed|not started): .*training goes on.*/\1/p' "$T/fail.err" | head -n 1)
later=$(sed -n 's/^local checkpoint: step \([0-9]*\) in .*/\1/p' "$T/fail.out" | tail -n 1)
ok "$([ "$rc" = 0 ] && [ -n "$bad" ] && [ -n "$later" ] && [ "$later" -gt "$bad" ] &&
    [ ! -d "$L/a/step-$(printf %08d "$bad")" ] && [ ! -d "$L/b.away/step-$(printf %08d "$bad")" ]; echo $?)" \
    "node b's directory made a file: the local save of step ${bad:-?} fails, is sealed on no node, and training goes on to step ${later:-?} (exit $rc)" ||
    why "$(cat "$T/fail.err")" "$(grep '^local' "$T/fail.out")" "a: $(sealed a)"
ok "$(whole a "$later" && whole b "$later"; echo $?)" "  the later saves are sealed whole on both nodes" ||
    why "a: $(sealed a)" "b: $(sealed b)"
is "$(hash_of "$T/fail.out")" "$REF" "  and the run ends with the uninterrupted param_hash"
sealed_n=$(grep -c '^local checkpoint: step [0-9]* in ' "$T/fail.out")
failed_n=$(grep -Ec '^ftrain: local checkpoint of step [0-9]+ (failed|not started): ' "$T/fail.err")
like "$(grep '^local checkpoints:' "$T/fail.out")" \
    "^local checkpoints: $sealed_n sealed, failed $failed_n, skipped [0-9]+( \\(the one before still in flight\\))?; per sealed save, mean training stall [0-9.]+ ms, mean helper CPU [0-9.]+ ms\$" \
    "  the run's summary line counts the $sealed_n sealed and the $failed_n failed local saves"

# ---- 12. a local shard holds the state's bytes ----------------------------------------------
# The background save copies only the rank's slice of the state; with
# stored frames on both tiers (--ckpt-level 0 --ckpt-local-level 0) and
# every local save also flushed to the shared tier at its step, each local
# shard file, own or partner copy, is byte for byte the shared tier's.
rm -rf "$T/run" "$L"
nodes 2:a 2:b -- $RUN --run-dir "$T/run" --ckpt-level 0 --ckpt-local "$L/%n" --ckpt-local-every 8 \
    --ckpt-flush-every 1 --steps 20 $SLOW >"$T/same.out" 2>&1
rc=$?
differ=""
for step in 8 16; do
    for r in 0 1 2 3; do
        name="step-$(printf %08d "$step")/shard-$r.ftsh"
        cmp -s "$L/a/$name" "$T/run/ckpt/$name" || differ="$differ a:$name"
        [ "$r" -ge 2 ] && { cmp -s "$L/b/$name" "$T/run/ckpt/$name" || differ="$differ b:$name"; }
    done
done
ok "$([ "$rc" = 0 ] && [ -z "$differ" ]; echo $?)" \
    "stored shards: every local shard of steps 8 and 16 equals the shared tier's (exit $rc)" ||
    why "differ:$differ" "$(grep -E 'checkpoint' "$T/same.out")"

# ---- 13. in place: the files are reused ---------------------------------------------------------
# poll_inodes JOB OUT: while JOB runs, append to OUT the "inode path" of
# node a's own shard (shard-0) and partner copy (shard-2) in each step
# directory seen; then wait for JOB and set rc to its exit status.
poll_inodes() {
    while kill -0 "$1" 2>/dev/null; do
        ls -i "$L"/a/step-*/shard-0.ftsh "$L"/a/step-*/shard-2.ftsh 2>/dev/null >>"$2"
        sleep 0.05
    done
    wait "$1"
    rc=$?
}
# reuse KEEP: a run keeping KEEP local checkpoints, node a's step
# directories polled for the inodes of its own shard (shard-0) and of a
# partner copy (shard-2): each lives in at most KEEP + 1 files.
reuse() {
    rm -rf "$T/run" "$L" "$T/reuse.ls"
    nodes 2:a 2:b -- $RUN $LOCAL $SLOW --ckpt-local-keep "$1" >"$T/reuse.out" 2>&1 &
    poll_inodes $! "$T/reuse.ls"
    steps=$(sed -n 's|.*/step-0*\([0-9][0-9]*\)/shard-0.ftsh$|\1|p' "$T/reuse.ls" | sort -u | wc -l)
    own=$(grep '/shard-0.ftsh$' "$T/reuse.ls" | awk '{print $1}' | sort -u | wc -l)
    copy=$(grep '/shard-2.ftsh$' "$T/reuse.ls" | awk '{print $1}' | sort -u | wc -l)
    ok "$([ "$rc" = 0 ] && [ "$steps" -ge 6 ] && [ "$own" -le $(($1 + 1)) ] && [ "$copy" -le $(($1 + 1)) ]; echo $?)" \
        "in place, --ckpt-local-keep $1: node a's shard 0 of $steps steps lived in $own files, its copy of shard 2 in $copy (at most $(($1 + 1)) each; exit $rc)" ||
        why "$(sort -u "$T/reuse.ls" | head -n 20)"
    ok "$([ -d "$L/a/.spare" ] && [ -z "$(find "$L/a/.spare" "$L/b/.spare" ! -type d)" ]; echo $?)" \
        "  the spare files are removed at the end of the run" || why "$(ls -la "$L/a/.spare" "$L/b/.spare")"
    is "$(hash_of "$T/reuse.out")" "$REF" "  and the run ends with the uninterrupted param_hash"
}
# reuse_relaunch: a run killed after its local saves, then resumed on the
# same nodes: the resumed run takes the files of the steps the killed one
# sealed as they fall out of --ckpt-local-keep 2, so its shard 0 and its
# copy of shard 2 on node a each get one new file (its first save's), not
# three.
reuse_relaunch() {
    rm -rf "$T/run" "$L" "$T/relaunch.ls"
    nodes 2:a 2:b -- $RUN $LOCAL $SLOW --fault kill@22:3 >"$T/killed.out" 2>&1
    ls -i "$L"/a/step-*/shard-0.ftsh "$L"/a/step-*/shard-2.ftsh 2>/dev/null | awk '{print $1}' |
        sort -u >"$T/killed.inodes"
    nodes 2:a 2:b -- $RUN $LOCAL $SLOW >"$T/relaunch.out" 2>&1 &
    poll_inodes $! "$T/relaunch.ls"
    own=$(grep '/shard-0.ftsh$' "$T/relaunch.ls" | awk '{print $1}' | sort -u | comm -23 - "$T/killed.inodes" | wc -l)
    copy=$(grep '/shard-2.ftsh$' "$T/relaunch.ls" | awk '{print $1}' | sort -u | comm -23 - "$T/killed.inodes" | wc -l)
    saves=$(grep -c '^local checkpoint: step [0-9]* in ' "$T/relaunch.out")
    ok "$([ "$rc" = 0 ] && [ "$(wc -l <"$T/killed.inodes")" -ge 4 ] && [ "$saves" -ge 6 ] &&
        [ "$own" = 1 ] && [ "$copy" = 1 ]; echo $?)" \
        "in place, relaunched after a kill: $saves local saves, node a's shard 0 in $own new file and its copy of shard 2 in $copy (the rest are the killed run's files; exit $rc)" ||
        why "killed run's inodes: $(tr '\n' ' ' <"$T/killed.inodes")" "$(sort -u "$T/relaunch.ls" | head -n 20)" \
            "$(grep -E '^(resume|local)' "$T/relaunch.out" | head -n 5)"
    is "$(hash_of "$T/relaunch.out")" "$REF" "  and the resumed run ends with the uninterrupted param_hash"
}
if [ "$INPLACE" = 1 ]; then
    if runs_in thread; then
        reuse 2
        reuse 1
    fi
    runs_in steps && reuse_relaunch
elif runs_in disk; then
    : # a disk: the in-place scenarios run in local_tier_shm.sh and local_tier_steps.sh
else
    _why="the local directory is not a memory file system"
    for keep in 2 1; do
        skip "in place, --ckpt-local-keep $keep: the files are reused" "$_why"
        skip "  the spare files are removed at the end of the run" "$_why"
        skip "  and the run ends with the uninterrupted param_hash" "$_why"
    done
    skip "in place, relaunched after a kill: the killed run's files are reused" "$_why"
    skip "  and the resumed run ends with the uninterrupted param_hash" "$_why"
fi

# ---- 15. a full memory file system ------------------------------------------------------------
if runs_in thread steps; then
    rm -rf "$T/run"
    mkdir -p "$T/full"
    if mount -t tmpfs -o size=8k ftrain-test "$T/full" 2>/dev/null; then
        nodes 2:a 2:b -- $RUN --run-dir "$T/run" --ckpt-every 50 --ckpt-local "$T/full/%n" \
            --ckpt-local-every 4 --steps 12 >"$T/full.out" 2>"$T/full.err"
        rc=$?
        umount "$T/full"
        n=$(grep -Ec "ftrain: (rank [0-9]+: )?local checkpoint of step [0-9]+ (failed|not started): .*No space left on device \(the node's memory file system is full\)" "$T/full.err")
        ok "$([ "$rc" = 0 ] && [ "$n" -ge 1 ] && grep -q '; saved in place' "$T/full.out"; echo $?)" \
            "a full tmpfs: $n local saves fail, each saying the file system is full, and training goes on (exit $rc)" ||
            why "$(head -n 5 "$T/full.err")" "$(grep '^local' "$T/full.out")"
        is "$(hash_of "$T/full.out")" "$(hash_of "$T/ref12.out")" "  and the run ends with the uninterrupted 12-step run's param_hash"
    else
        skip "a full tmpfs: local saves fail, and training goes on" "cannot mount a tmpfs here (not root, or not permitted)"
        skip "  and the run ends with the uninterrupted 12-step run's param_hash" "cannot mount a tmpfs here"
    fi
fi

# ---- 16. a rank stopped while local saves are in flight ------------------------------------
if runs_in thread steps; then
    # _epochs_ge FILE N: FILE holds at least N progress lines.
    _epochs_ge() { [ "$(grep -c '^epoch ' "$1")" -ge "$2" ]; }
    d="$T/hang"
    nodes 2:a 2:b -- $RUN --layers 1024,1024 --steps 2000 --step-delay-ms 40 --log-every 1 \
        --run-dir "$d" --ckpt-every 1000 --ckpt-local "$L/hang/%n" --ckpt-local-every 1 \
        --hang-timeout 3 >"$d.out" 2>"$d.err" &
    hang_pid=$!
    if wait_for 60 _epochs_ge "$d.out" 12 && victim=$(rank_pid "$d.out" 3) && [ -n "$victim" ]; then
        t0=$(date +%s.%N)
        kill -STOP "$victim"
        wait "$hang_pid"
        rc=$?
        took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        kill -CONT "$victim" 2>/dev/null
        saves=$(grep -c '^local checkpoint: step [0-9]* in ' "$d.out")
        # The bound: --hang-timeout 3, then the diagnosis watches the heartbeats
        # for 3 periods of 0.5 s (the shortest period), then the abort takes the
        # job down: about 5 s (4.8 to 5.8 s measured with the 2 cores loaded 4
        # times over).  10 s, twice that, leaves room for a loaded machine and
        # still fails a watchdog that ignores --hang-timeout (45 s at least) or
        # watches much longer than the heartbeats imply.
        ok "$([ "$rc" = 76 ] && [ "$saves" -ge 2 ] && awk -v t="$took" 'BEGIN { exit !(t < 10) }'; echo $?)" \
            "SIGSTOP to rank 3 with local saves always in flight ($EXCHANGE, $saves sealed before): the watchdog ended the job in $took s (< 10 s), exit $rc (76)" ||
            why "$(tail -n 6 "$d.err")" "$(grep '^local' "$d.out" | tail -n 3)"
        like "$(cat "$d.err")" "hang: rank 3 \(host [^,]+, pid $victim\) stopped making progress" \
            "  and names the stopped rank"
    else
        kill "$hang_pid" 2>/dev/null
        wait "$hang_pid"
        ok 1 "SIGSTOP to rank 3 with local saves in flight: the run did not get going" || why "$(tail -n 5 "$d.err")"
        skip "  and names the stopped rank" "the run did not get going"
    fi
    rm -rf "${L:?}/hang"
fi

# ---- 17. a partner copy damaged in transfer ---------------------------------------------------
# The dmgsend shim flips a byte of rank 1's second MPI_Isend: a piece of
# the partner copy of its shard in the first local save, on its way to node
# b (its own shard file stays intact).  The receiver's check (hashed as the
# pieces land, on the helper thread in place; whole afterwards otherwise)
# refuses it: that save is sealed on no node, training goes on, the later
# saves are sealed, and the result is bit-exact.  A wide model, so that a
# shard is more than one piece (4 MiB); 12 steps: saves at 4 and 8.
if ldd "$FTRAIN" 2>/dev/null | grep -q 'libasan'; then
    skip "a partner copy damaged in transfer: refused, sealed on no node" "sanitized build: the LD_PRELOAD shim cannot come before ASan's runtime"
    skip "  the later saves are sealed whole on both nodes" "sanitized build"
    skip "  and the run ends with the uninterrupted run's param_hash" "sanitized build"
else
    rm -rf "$T/run" "$L"
    WIDE="--layers 2048,1024 --steps 12"
    mpi 1 $RUN $WIDE >"$T/ref_wide.out" 2>&1
    # Local ranks inherit mpirun's environment: the shim is in every rank,
    # and acts in rank 1 only.
    LD_PRELOAD="$BUILD/tests/preload/dmgsend.so" DMGSEND_RANK=1 DMGSEND_NTH=2 \
        nodes 2:a 2:b -- $RUN $WIDE $LOCAL $SLOW >"$T/dmg.out" 2>"$T/dmg.err"
    rc=$?
    later=$(sed -n 's/^local checkpoint: step \([0-9]*\) in .*/\1/p' "$T/dmg.out" | tail -n 1)
    # Rank 3 (node b) keeps rank 1's copy: it says why; rank 0 names it.
    ok "$([ "$rc" = 0 ] && grep -Eq '^ftrain: rank 3: local checkpoint of step 4 failed: partner copy of rank 1: .*checksum [0-9a-f]+, the writer.s is [0-9a-f]+ \(damaged in transfer\?\); not written' "$T/dmg.err" &&
        grep -Eq '^ftrain: local checkpoint of step 4 failed: rank 3 (failed|could not) .*its reason is on its stderr.*training goes on' "$T/dmg.err" &&
        [ ! -d "$L/a/step-00000004" ] && [ ! -d "$L/b/step-00000004" ] && [ -n "$later" ] && [ "$later" -gt 4 ]; echo $?)" \
        "a partner copy damaged in transfer ($EXCHANGE): refused by its checksum, step 4 sealed on no node, training goes on to step ${later:-?} (exit $rc)" ||
        why "$(grep -v '^epoch' "$T/dmg.err" | head -n 5)" "$(grep '^local' "$T/dmg.out")" "a: $(sealed a)" "b: $(sealed b)"
    ok "$(whole a "$later" && whole b "$later"; echo $?)" "  the later saves are sealed whole on both nodes" ||
        why "a: $(sealed a)" "b: $(sealed b)"
    is "$(hash_of "$T/dmg.out")" "$(hash_of "$T/ref_wide.out")" "  and the run ends with the uninterrupted run's param_hash"
fi

# ---- 18. the update waits for the local save's copy of the state -----------------------------
# Where the training thread moves the exchange, 1's runs have checked this.
if [ -z "$DELAY" ]; then
    rm -rf "$T/run" "$L"
    nodes 2:a 2:b -- $RUN $LOCAL $SLOW --ckpt-local-copy-delay-ms 300 --fault kill@32:3 >"$T/late.out" 2>&1
    rc=$?
    waits=$(copy_waits "$T/late.out")
    saves=$(printf '%s\n' "$waits" | grep -c .)
    # About 300 ms less the step's own time (40 ms of delay and the
    # compute, which a loaded machine stretches); without the wait, 0.
    long=$(printf '%s\n' "$waits" | awk '$1 >= 100' | wc -l)
    ok "$([ "$rc" -ne 0 ] && [ "$saves" -ge 6 ] && [ "$long" = "$saves" ]; echo $?)" \
        "the helper's copy held back 300 ms: each save's next update waited for it ($long of $saves saves with waits of 100 ms or more; exit $rc)" ||
        why "waits (ms): $(printf '%s ' $waits)" "$(grep -E '^local|error' "$T/late.out" | tail -n 4)"
    rm -rf "$L/b"
    nodes 2:a -- $RUN $LOCAL >"$T/late2.out" 2>&1
    rc=$?
    ok "$([ "$rc" = 0 ] && grep -Eq '^resume: from the node-local tier \(shards 0-3 read on a\) step-0*(24|28) ' "$T/late2.out"; echo $?)" \
        "  resumed on node a from the local tier (exit $rc)" || why "$(grep -E '^resume|error' "$T/late2.out")"
    is "$(hash_of "$T/late2.out")" "$REF" "  and ends with the uninterrupted run's param_hash"
fi

done_testing
