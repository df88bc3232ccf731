#!/usr/bin/env bash
# chaos.sh - randomized failure-and-recovery trials of ftrain (`make chaos`).
#
# Each trial is one small --deterministic training run on this machine
# under mpirun (1 to 4 ranks) that is hit by one to three faults - a stop
# signal, a killed rank, a stopped rank (a hang), a second signal during a
# save, a rank killed during a save, a full disk, a corrupted newest
# checkpoint - and then resumed on random world sizes until it finishes.
# A trial passes when the finished run's param_hash equals the one of an
# uninterrupted run of the same configuration, every launch ended the way
# its fault says it must, nothing outlived its time bound, and every
# committed checkpoint verified after every launch (except the ones the
# trial corrupted on purpose, which the resume must not have used).
# docs/chaos.md describes the faults, the checks and the table.
#
# Usage:
#   chaos/chaos.sh [--trials N] [--seed S] [--replay S] [--plan] [--keep]
#
# Environment: BUILD (the build directory, default build), CHAOS_TRIALS
# (default 100), CHAOS_SEED (the first trial's seed; trial i has seed
# CHAOS_SEED + i; default random), CHAOS_DIR (where trials run, default a
# new mktemp directory under ${TMPDIR:-/tmp}), CHAOS_LAUNCH_TIMEOUT
# (seconds one launch may take before it counts as a hang, default 120),
# CHAOS_HANG_TIMEOUT (ftrain's --hang-timeout, default 4), CHAOS_KEEP=1
# (keep passing trials' directories too).
#
# Every trial's seed is printed; `CHAOS_SEED=S CHAOS_TRIALS=1` or
# `--replay S` draws exactly that trial's plan again (configuration,
# faults, victims, moments, world sizes, options).  What a plan does not
# fix is timing: the step a signal lands on depends on the machine's load.
#
# Exit status: 0 when every must-be-zero count of the final table is 0,
# 1 otherwise, 2 on a usage error or when the set-up fails.

# Functions called through await and traps look unreachable to shellcheck.
# shellcheck disable=SC2317
set -u

BUILD=${BUILD:-build}
FTRAIN="$BUILD/ftrain"
CKPTCTL="$BUILD/ckptctl"
TRIALS=${CHAOS_TRIALS:-100}
SEED=${CHAOS_SEED:-}
LAUNCH_TIMEOUT=${CHAOS_LAUNCH_TIMEOUT:-120}
HANG_TIMEOUT=${CHAOS_HANG_TIMEOUT:-4}
KEEP=${CHAOS_KEEP:-0}
PLAN_ONLY=0
DISK_MB=256          # the trial's tmpfs between full-disk faults
MAX_RELAUNCH=8       # relaunches after the first launch
POLL=0.02            # seconds between two looks at a running launch

usage() {
    cat <<'EOF'
usage: chaos/chaos.sh [--trials N] [--seed S] [--replay S] [--plan] [--keep]

Randomized failure-and-recovery trials of ftrain (docs/chaos.md).
  --trials N    number of trials (CHAOS_TRIALS, default 100)
  --seed S      seed of the first trial; trial i has S + i (CHAOS_SEED)
  --replay S    run the one trial of seed S again (--seed S --trials 1)
  --plan        print each trial's plan (configuration, faults, world sizes)
                and run nothing
  --keep        keep the directories of passing trials too (CHAOS_KEEP=1)
environment: BUILD, CHAOS_DIR, CHAOS_LAUNCH_TIMEOUT, CHAOS_HANG_TIMEOUT
EOF
}

while [ $# -gt 0 ]; do
    case $1 in
    --trials) TRIALS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
    --seed) SEED=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
    --replay) SEED=${2:-}; TRIALS=1; shift 2 || { usage >&2; exit 2; } ;;
    --keep) KEEP=1; shift ;;
    --plan) PLAN_ONLY=1; shift ;;
    --help | -h) usage; exit 0 ;;
    *) echo "chaos: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
case $TRIALS in '' | *[!0-9]*) echo "chaos: trials must be a number: '$TRIALS'" >&2; exit 2 ;; esac
if [ -z "$SEED" ]; then
    SEED=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
fi
case $SEED in '' | *[!0-9]*) echo "chaos: the seed must be a number: '$SEED'" >&2; exit 2 ;; esac

for tool in mpirun timeout python3 df du mount; do
    command -v "$tool" >/dev/null 2>&1 || { echo "chaos: $tool not found" >&2; exit 2; }
done
if [ ! -x "$FTRAIN" ] || [ ! -x "$CKPTCTL" ]; then
    echo "chaos: $FTRAIN or $CKPTCTL not built (make BUILD=$BUILD all)" >&2
    exit 2
fi
# The full-disk fault mounts a tmpfs: without root it is left out.
IS_ROOT=0
[ "$(id -u)" = 0 ] && IS_ROOT=1

# Open MPI on one machine, as tests/lib.sh runs it: as root, shared memory
# only, oversubscription allowed, no core binding.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none


# ---- configurations -----------------------------------------------------------
# name|steps|options.  All run --deterministic with a global batch of 32 in
# micro-batches of 8, so the uninterrupted param_hash is the same on every
# world size; it is computed once per configuration, on one rank.  The wide
# one has checkpoints of megabytes, so that a save at level 19 lasts long
# enough for a signal or a kill to land in it.
CONFIGS=(
    "line8|80|--data line --layers 8 --lr 0.01"
    "line16x2|100|--data line --layers 16,16 --optimizer adamw --weight-decay 0.01 --lr 0.01 --schedule cosine --warmup 10"
    "sine32x2|90|--data sine --layers 32,32 --activation tanh --optimizer sgd --lr 0.05 --seed 7"
    "wide512x2|60|--data line --layers 512,512 --lr 0.001"
)
WIDE=3
COMMON=(--global-batch 32 --micro-batch 8 --deterministic)
KINDS=(usr1 kill sigstop savesig killsave diskfull corrupt)
declare -A REF=()
declare -A CORR=()   # checkpoints this trial corrupted -> their set-aside count then

# ---- random numbers -----------------------------------------------------------
# splitmix64 in bash arithmetic (64-bit, wrapping; the masks make the
# shifts logical): the same sequence on every bash, unlike $RANDOM, and
# trials of neighbouring seeds draw unrelated plans.  rnd N sets R to
# [0, N) from the top 31 bits of the next output.
RNG=0
rng_seed() { RNG=$1; }
rnd() {
    local z
    RNG=$((RNG + 0x9E3779B97F4A7C15))
    z=$(((RNG ^ ((RNG >> 30) & 0x3FFFFFFFF)) * 0xBF58476D1CE4E5B9))
    z=$(((z ^ ((z >> 27) & 0x1FFFFFFFFF)) * 0x94D049BB133111EB))
    z=$((z ^ ((z >> 31) & 0x1FFFFFFFF)))
    R=$((((z >> 33) & 0x7fffffff) % $1))
}

# ---- small helpers ---------------------------------------------------------------
# A sleep without a fork: read from a pipe nobody writes to.
exec {NAPFD}<> <(:)
nap() { read -r -t "$1" -u "$NAPFD" _ 2>/dev/null || :; }
# now_us: NOW gets the microseconds since the epoch.
now_us() { NOW=${EPOCHREALTIME/./}; NOW=$((10#$NOW)); }
secs_since() { now_us; awk -v a="$1" -v b="$NOW" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'; }

# log TEXT...: a line in the trial's log.
log() { printf '%s\n' "$*" >>"$TD/log.txt"; }
# fail CLASS TEXT: a failed check of this trial, CLASS one of hang,
# mismatch, verify, other.
fail() {
    case $1 in
    hang) N_HANG=$((N_HANG + 1)) ;;
    mismatch) N_MISMATCH=$((N_MISMATCH + 1)) ;;
    verify) N_VERIFY=$((N_VERIFY + 1)) ;;
    *) N_OTHER=$((N_OTHER + 1)) ;;
    esac
    TRIAL_FAIL="$TRIAL_FAIL${TRIAL_FAIL:+; }$2"
    log "FAIL ($1): $2"
}

hash_of() { sed -n 's/^done: .*param_hash=\([0-9a-f]\{16\}\).*/\1/p' "$1" | tail -n 1; }

# ---- the run in progress --------------------------------------------------------
LPID=""            # the timeout(1) process of the running launch
PIDS=()            # its ranks' pids
STOPPED=""         # a rank we sent SIGSTOP
MNT=""             # the trial's tmpfs, while mounted

# rank_alive PID: the process runs (a zombie waiting for its reaper does not).
rank_alive() {
    local st
    if [ -r "/proc/$1/status" ]; then
        st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)
        [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
    else
        kill -0 "$1" 2>/dev/null
    fi
}

# launch_alive: the launch has not ended.
launch_alive() { [ -n "$LPID" ] && kill -0 "$LPID" 2>/dev/null; }

# last_step: the step of the newest progress line of the launch (0: none).
last_step() {
    awk '/^epoch [0-9]+\/[0-9]+ step [0-9]+\//{ split($4, a, "/"); s = a[1] } END { print s + 0 }' "$OUT"
}

# await SECONDS CMD...: poll CMD until it succeeds (0), the launch ends
# (1, after one more look) or SECONDS pass (1).
await() {
    local end
    now_us
    end=$((NOW + $1 * 1000000))
    shift
    while :; do
        "$@" && return 0
        if ! launch_alive; then
            "$@"
            return
        fi
        now_us
        [ "$NOW" -ge "$end" ] && return 1
        nap "$POLL"
    done
}

have_world() { [ "$(grep -c '^world: rank ' "$OUT" 2>/dev/null)" -ge "$WORLD" ] 2>/dev/null; }
step_at_least() { [ "$(last_step)" -ge "$1" ]; }

# read_world: PIDS from the "world: rank R local L host H pid P" lines.
read_world() {
    local r p
    PIDS=()
    while read -r r p; do
        PIDS[r]=$p
    done < <(sed -n 's/^world: rank \([0-9]*\) local [0-9]* host [^ ]* pid \([0-9]*\).*/\1 \2/p' "$OUT")
    [ "${#PIDS[@]}" -ge "$WORLD" ]
}

# new_tmp: a .tmp-step-* directory that was not there before (TMP_BEFORE).
new_tmp() {
    local d
    for d in "$ROOT"/.tmp-step-*; do
        [ -d "$d" ] || continue
        case " $TMP_BEFORE " in *" ${d##*/} "*) continue ;; esac
        TMP_SEEN=${d##*/}
        return 0
    done
    return 1
}
list_tmp() {
    local d
    TMP_BEFORE=""
    for d in "$ROOT"/.tmp-step-*; do
        [ -d "$d" ] && TMP_BEFORE="$TMP_BEFORE ${d##*/}"
    done
}

# committed: the committed step-<N> names under ROOT, oldest first.
committed() {
    local d
    for d in "$ROOT"/step-*; do
        case ${d##*/} in step-*.corrupt*) continue ;; esac
        [ -f "$d/manifest.json" ] && echo "${d##*/}"
    done
}

# ---- the trial's plan ----------------------------------------------------------
# Drawn from the trial's seed before anything runs, in a fixed order, so a
# replay draws the same plan whatever happens while the trial runs.
draw_plan() {
    local i n
    rng_seed "$1"
    rnd 100
    if [ "$R" -lt 50 ]; then NF=1; elif [ "$R" -lt 85 ]; then NF=2; else NF=3; fi
    HAS_SLOW=0
    HAS_DISK=0
    for ((i = 0; i < 3; i++)); do
        rnd ${#KINDS[@]}; FK[i]=${KINDS[R]}
        [ "$IS_ROOT" = 1 ] || [ "${FK[i]}" != diskfull ] || FK[i]=usr1
        rnd 1000; FT[i]=$R        # the moment: a fraction of the steps left
        rnd 1000; FV[i]=$R        # the victim rank: a fraction of the world
        rnd 1000; FX[i]=$R        # kind-specific choices
        rnd 1000; FY[i]=$R
        rnd 1000000; FO1[i]=$R    # offsets of flipped bytes
        rnd 1000000; FO2[i]=$R
        rnd 1000000; FO3[i]=$R
        if [ "$i" -lt "$NF" ]; then
            case ${FK[i]} in
            savesig | killsave) HAS_SLOW=1 ;;
            diskfull) HAS_DISK=1 ;;
            esac
        fi
    done
    rnd ${#CONFIGS[@]}; CFG=$R
    rnd 2
    [ "$HAS_SLOW" = 1 ] && [ "$R" = 0 ] && CFG=$WIDE
    for ((i = 0; i <= MAX_RELAUNCH; i++)); do
        rnd 4; LW[i]=$((1 + R))
        rnd 8; LE[i]=$((3 + R))              # --ckpt-every 3..10
        rnd 2; LA[i]=$R                      # --ckpt-async
        rnd 6; n=(0 1 1 1 3 9); LV[i]=${n[R]} # --ckpt-level
        rnd 4; LB[i]=$((R == 0))             # --ckpt-buffered
        rnd 3; LK[i]=$((2 + R))              # --ckpt-keep 2..4
        rnd 26; LD[i]=$((25 + R))            # --step-delay-ms 25..50
    done
    # What each of the first NF launches gets.  A corruption happens
    # between launches, so it rides on a launch that a stop, a kill or a
    # hang ends first (the carrier, counted as a fault of its own).
    for ((i = 0; i < NF; i++)); do
        LF[i]=${FK[i]}
        LC[i]=0
        if [ "${LF[i]}" = corrupt ]; then
            n=(usr1 usr1 kill sigstop killsave)
            LF[i]=${n[FO1[i] % 5]}
            LC[i]=1
        fi
        # A lone rank cannot report its own SIGSTOP: its watchdog stops too.
        if [ "${LF[i]}" = sigstop ] && [ "${LW[i]}" = 1 ]; then
            LW[i]=$((2 + FY[i] % 3))
        fi
    done
    IFS='|' read -r CNAME CSTEPS CARGS <<<"${CONFIGS[CFG]}"
}

plan_text() {
    local i s="" w=""
    for ((i = 0; i < NF; i++)); do
        s="$s${s:+, }${LF[i]}"
        [ "${LC[i]}" = 1 ] && s="$s+corrupt"
    done
    for ((i = 0; i <= MAX_RELAUNCH; i++)); do w="$w${w:+ }${LW[i]}"; done
    echo "$CNAME, faults: $s; world sizes: $w"
}

# ---- the reference ----------------------------------------------------------------
# ref_hash: REF[$CNAME] from one uninterrupted run on one rank.
ref_hash() {
    [ -n "${REF[$CNAME]:-}" ] && return 0
    local f="$CHAOS_DIR/ref/$CNAME"
    mkdir -p "$CHAOS_DIR/ref"
    # shellcheck disable=SC2086
    timeout -k 5 "$LAUNCH_TIMEOUT" mpirun --oversubscribe -n 1 "$FTRAIN" --device cpu $CARGS \
        --steps "$CSTEPS" "${COMMON[@]}" --quiet >"$f.out" 2>"$f.err"
    REF[$CNAME]=$(hash_of "$f.out")
    if [ -z "${REF[$CNAME]}" ]; then
        echo "chaos: the uninterrupted run of $CNAME failed: $(tail -n 3 "$f.err")" >&2
        return 1
    fi
    echo "reference $CNAME: param_hash ${REF[$CNAME]} (uninterrupted, 1 rank)"
}

# ---- faults ---------------------------------------------------------------------------
# Each inject_* runs while the launch does, and sets INJ (what it did, for
# the log), EXPECT (the exit codes that are right: a list, or "nonzero")
# and LANDED (1 when the fault reached the run).

# pick_target: wait for training to start and choose the step to strike
# after (TARGET), within [first step + 1, last step - 8]; sets S0 (the first
# step this launch logged), SPE (steps per epoch).  1 when there is no room.
pick_target() {
    local room
    if ! await 60 have_world || ! read_world; then
        INJ="no world lines"
        return 1
    fi
    await 60 step_at_least 1 || { INJ="training did not start"; return 1; }
    S0=$(last_step)
    SPE=$(sed -n 's/^train: .*(\([0-9]*\) per epoch).*/\1/p' "$OUT" | head -n 1)
    SPE=${SPE:-1}
    room=$((CSTEPS - 8 - S0))
    if [ "$room" -lt 1 ]; then
        INJ="no room: the launch began at step $S0 of $CSTEPS"
        return 1
    fi
    TARGET=$((S0 + 1 + FT[F] * room / 1000))
    await 60 step_at_least "$TARGET" || { INJ="step $TARGET not reached"; return 1; }
}

victim() { echo $(($1 * WORLD / 1000)); }

inject_usr1() {
    local r p at
    EXPECT="75"
    pick_target || return
    if [ $((FX[F] % 5)) = 0 ]; then
        r="all"
        for p in "${PIDS[@]}"; do kill -USR1 "$p" 2>/dev/null; done
    else
        r=$(victim "${FV[F]}")
        kill -USR1 "${PIDS[r]}" 2>/dev/null || { INJ="usr1: rank $r was gone"; return; }
    fi
    at=$(last_step)
    LANDED=1
    SIG_AT=$at
    INJ="SIGUSR1 to rank $r at step $at"
}

inject_kill() {
    local r at
    EXPECT="nonzero"
    pick_target || return
    r=$(victim "${FV[F]}")
    at=$(last_step)
    kill -KILL "${PIDS[r]}" 2>/dev/null || { INJ="kill: rank $r was gone"; return; }
    LANDED=1
    INJ="SIGKILL to rank $r at step $at"
}

# A stopped rank makes the others wait in their next collective; the
# watchdog ends the job after --hang-timeout, except in a launch's first
# save or evaluation (300 s by design, README "Hangs and dead ranks").
# So the SIGSTOP goes out only when no save is being written and the
# step just logged (its save and evaluation follow its progress line) and
# the next two hold neither, or this launch has already saved and evaluated.
sigstop_safe() {
    local k j saved evald
    k=$(last_step)
    [ "$k" -le $((CSTEPS - 5)) ] || return 2
    list_tmp
    [ -z "$TMP_BEFORE" ] || return 1
    saved=0
    evald=0
    grep -q '^checkpoint: ' "$OUT" && saved=1
    grep -q '^eval: ' "$OUT" && evald=1
    for j in $k $((k + 1)) $((k + 2)); do
        [ $((j % SPE)) = 0 ] && [ "$evald" = 0 ] && return 1
        [ $((j % LE[L])) = 0 ] && [ "$saved" = 0 ] && return 1
    done
    return 0
}
inject_sigstop() {
    local r i rc at
    EXPECT="76"
    pick_target || return
    for ((i = 0; i < 200; i++)); do
        sigstop_safe
        rc=$?
        [ "$rc" = 0 ] && break
        [ "$rc" = 2 ] && { INJ="sigstop: no safe step before the end"; return; }
        await 30 step_at_least $(($(last_step) + 1)) || { INJ="sigstop: the launch ended"; return; }
    done
    [ "$rc" = 0 ] || { INJ="sigstop: no safe step"; return; }
    r=$(victim "${FV[F]}")
    at=$(last_step)
    kill -STOP "${PIDS[r]}" 2>/dev/null || { INJ="sigstop: rank $r was gone"; return; }
    STOPPED=${PIDS[r]}
    LANDED=1
    INJ="SIGSTOP to rank $r at step $at"
}

inject_savesig() {
    local r r2 s2 at where sigs=(USR1 TERM INT)
    EXPECT="75"
    pick_target || return
    r=$(victim "${FV[F]}")
    list_tmp
    kill -USR1 "${PIDS[r]}" 2>/dev/null || { INJ="savesig: rank $r was gone"; return; }
    at=$(last_step)
    LANDED=1
    SIG_AT=$at
    TMP_SEEN=""
    if await 15 new_tmp; then
        where="during the save ($TMP_SEEN)"
        SAVE_HITS=$((SAVE_HITS + 1))
    else
        where="(no save seen)"
    fi
    s2=${sigs[FY[F] % 3]}
    r2=$(victim $((FO3[F] % 1000)))
    if launch_alive && kill "-$s2" "${PIDS[r2]}" 2>/dev/null; then
        INJ="SIGUSR1 to rank $r at step $at, then SIG$s2 to rank $r2 $where"
    else
        INJ="SIGUSR1 to rank $r at step $at; the run ended before a second signal"
    fi
}

inject_killsave() {
    local r at where
    EXPECT="nonzero"
    pick_target || return
    r=$(victim "${FV[F]}")
    list_tmp
    TMP_SEEN=""
    if await 30 new_tmp; then
        where="during the save ($TMP_SEEN)"
    else
        where="(no save seen)"
    fi
    launch_alive || { INJ="killsave: the run ended before a save was seen"; return; }
    at=$(last_step)
    kill -KILL "${PIDS[r]}" 2>/dev/null || { INJ="killsave: rank $r was gone"; return; }
    [ -n "$TMP_SEEN" ] && SAVE_HITS=$((SAVE_HITS + 1))
    LANDED=1
    INJ="SIGKILL to rank $r at step $at $where"
}

have_ckpt() { [ -n "$(committed)" ]; }

# The run directory is on the trial's tmpfs; shrink it to what is used
# plus 10-59 % of the newest checkpoint, so the next save runs out of room.
inject_diskfull() {
    local newest ck used budget shrunk
    EXPECT="1"
    pick_target || return
    await 60 have_ckpt || { INJ="diskfull: no checkpoint to size the disk by"; return; }
    newest=$(committed | tail -n 1)
    ck=$(du -sk "$ROOT/$newest" | cut -f1)
    shrunk=0
    for _ in 1 2 3; do
        used=$(df -k --output=used "$MNT" | tail -n 1 | tr -d ' ')
        budget=$((ck * (10 + FX[F] % 50) / 100))
        [ "$budget" -ge 4 ] || budget=4
        mount -o remount,size=$((used + budget))k "$MNT" 2>/dev/null && { shrunk=1; break; }
    done
    [ "$shrunk" = 1 ] || { INJ="diskfull: could not shrink the tmpfs"; return; }
    LANDED=1
    INJ="disk shrunk at step $(last_step) to ${used} KiB used + ${budget} KiB free (checkpoint $ck KiB)"
}

# corrupt_newest F: flip 1-3 bytes of one shard of the newest committed
# checkpoint between launches.  The next resume must skip it (or refuse,
# when it is the only one).
corrupt_newest() {
    local newest shards shard n offs
    newest=$(committed | tail -n 1)
    if [ -z "$newest" ]; then
        log "corrupt: no committed checkpoint to corrupt"
        N_MISSED=$((N_MISSED + 1))
        return
    fi
    shards=("$ROOT/$newest"/shard-*.ftsh)
    shard=${shards[FY[F] % ${#shards[@]}]}
    n=$((1 + FX[F] % 3))
    offs=$(python3 - "$shard" "$n" "${FO1[F]}" "${FO2[F]}" "${FO3[F]}" <<'EOF'
import os, sys
path, n = sys.argv[1], int(sys.argv[2])
size = os.path.getsize(path)
done = []
with open(path, "r+b") as f:
    for u in sys.argv[3:3 + n]:
        off = int(u) * size // 1000000
        while off in done:
            off = (off + 1) % size
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ (1 + int(u) % 255)]))
        done.append(off)
print(" ".join(str(o) for o in done))
EOF
    )
    CORR[$newest]=$(aside_count "$newest")
    N_KIND[corrupt]=$((N_KIND[corrupt] + 1))
    log "corrupt: flipped byte(s) at offset(s) $offs of $newest/${shard##*/}"
    CORR_TEXT="corrupted $newest/${shard##*/}"
}
aside_count() {
    local d c=0
    for d in "$ROOT/$1".corrupt*; do [ -e "$d" ] && c=$((c + 1)); done
    echo "$c"
}

# ---- one launch -----------------------------------------------------------------------
# launch L KIND: run launch L (0 first) with the fault KIND (or none), then
# check how it ended.  Sets RC.
launch() {
    L=$1
    local kind=$2 args good line resumed_from name t0 p i level keep
    OUT="$TD/launch-$L.out"
    ERR="$TD/launch-$L.err"
    WORLD=${LW[L]}
    F=$L
    level=${LV[L]}
    keep=${LK[L]}
    # No pruning while the disk is sized: a prune right after the disk was
    # measured would make room for the next save.
    [ "$kind" = diskfull ] && keep=100
    args=(--steps "$CSTEPS" "${COMMON[@]}" --run-dir "$RUN" --resume auto --log-every 1
        --ckpt-every "${LE[L]}" --ckpt-keep "$keep" --step-delay-ms "${LD[L]}"
        --hang-timeout "$HANG_TIMEOUT")
    [ "${LA[L]}" = 1 ] && args+=(--ckpt-async)
    [ "${LB[L]}" = 1 ] && args+=(--ckpt-buffered)
    # Slow saves for a fault that must land in one.
    case $kind in
    savesig | killsave)
        level=19
        args+=(--ckpt-no-adapt)
        ;;
    esac
    args+=(--ckpt-level "$level")
    # Before the launch: which checkpoints are corrupt, is any good one left.
    good=0
    for name in $(committed); do
        [ -n "${CORR[$name]+x}" ] || good=$((good + 1))
    done
    EXPECT_REFUSAL=0
    [ "$good" = 0 ] && [ "${#CORR[@]}" -gt 0 ] && EXPECT_REFUSAL=1

    INJ="" EXPECT="0" LANDED=0 SIG_AT="" STOPPED="" PIDS=()
    : >"$OUT"
    : >"$ERR"
    now_us
    t0=$NOW
    # shellcheck disable=SC2086
    timeout --verbose -k 5 "$LAUNCH_TIMEOUT" mpirun --oversubscribe -n "$WORLD" "$FTRAIN" \
        --device cpu $CARGS "${args[@]}" >"$OUT" 2>"$ERR" &
    LPID=$!
    log "launch $L: $WORLD rank(s), fault ${kind}: mpirun -n $WORLD $FTRAIN --device cpu $CARGS ${args[*]}"
    [ "$kind" != none ] && "inject_$kind"
    wait "$LPID"
    RC=$?
    LPID=""
    [ -n "$STOPPED" ] && kill -CONT "$STOPPED" 2>/dev/null
    [ "${#PIDS[@]}" -gt 0 ] || read_world
    # Nothing of the launch may outlive it (for long: a rank whose peers
    # are gone is ended by its watchdog).
    for ((i = 0; i < 200; i++)); do
        line=""
        for p in "${PIDS[@]}"; do rank_alive "$p" && line="$line $p"; done
        [ -z "$line" ] && break
        nap 0.05
    done
    if [ -n "$line" ]; then
        for p in $line; do
            log "launch $L: rank pid $p outlived mpirun by 10 s: $(grep -h '^State' "/proc/$p/status" 2>/dev/null) wchan $(cat "/proc/$p/wchan" 2>/dev/null)"
            kill -CONT "$p" 2>/dev/null
            kill -KILL "$p" 2>/dev/null
        done
        fail other "launch $L: rank process(es)$line outlived mpirun by 10 s"
    fi
    LAUNCH_LOG="$LAUNCH_LOG${LAUNCH_LOG:+ | }w$WORLD"
    [ "$kind" != none ] && LAUNCH_LOG="$LAUNCH_LOG $kind"
    LAUNCH_LOG="$LAUNCH_LOG -> $RC"
    log "launch $L: exit $RC after $(secs_since "$t0") s; ${INJ:-no fault}"
    if [ "$kind" != none ]; then
        if [ "$LANDED" = 1 ]; then
            N_KIND[$kind]=$((N_KIND[$kind] + 1))
        else
            N_MISSED=$((N_MISSED + 1))
            log "launch $L: the $kind fault was not injected: $INJ"
        fi
    fi

    # A launch that ran into our bound is a hang, whatever else it did.
    if grep -q '^timeout: sending signal' "$ERR"; then
        fail hang "launch $L ($kind) ran past $LAUNCH_TIMEOUT s"
        check_verify
        return
    fi
    if grep -Eq 'exited on signal (4|6|7|8|11)[^0-9]|Segmentation fault|core dumped|AddressSanitizer' "$ERR"; then
        fail other "launch $L: a rank crashed: $(grep -Em 1 'exited on signal|Segmentation|core dumped|Sanitizer' "$ERR")"
    fi

    # The resume: never from a checkpoint this trial corrupted.
    resumed_from=$(sed -n 's/^resume: from \(.*\) step [0-9]* (.*/\1/p' "$OUT" | head -n 1)
    resumed_from=${resumed_from##*/}
    if [ -n "$resumed_from" ] && [ -n "${CORR[$resumed_from]+x}" ]; then
        fail other "launch $L resumed from $resumed_from, which this trial corrupted"
    fi
    while read -r name; do
        [ -n "${CORR[$name]+x}" ] ||
            fail other "launch $L skipped $name as bad, and this trial did not corrupt it: $(grep -m 1 "skipping checkpoint '$name'" "$ERR")"
    done < <(sed -n "s/^ftrain: resume: skipping checkpoint '\([^']*\)'.*/\1/p" "$ERR")

    # How it ended.
    if [ "$EXPECT_REFUSAL" = 1 ] && [ "$RC" != 0 ] && grep -q 'none is good' "$ERR"; then
        # Every checkpoint left was one we corrupted: the refusal is right.
        # Move them away (what an operator does) and start over.
        N_REFUSED=$((N_REFUSED + 1))
        log "launch $L: refused to resume (every checkpoint corrupt), as it must; starting over"
        mv "$ROOT" "$ROOT.refused-$L"
        CORR=()
        LAUNCH_LOG="$LAUNCH_LOG (refused)"
        return
    fi
    [ "$EXPECT_REFUSAL" = 1 ] &&
        fail other "launch $L: every checkpoint was corrupt, yet it did not refuse (exit $RC)"
    if [ "$LANDED" = 0 ]; then
        [ "$RC" = 0 ] ||
            fail other "launch $L (${kind}, not injected) ended with exit $RC: $(tail -n 2 "$ERR" | tr '\n' ' ')"
    else
        check_exit "$kind"
    fi
    check_verify
}

# check_exit KIND: the exit code of a launch that got its fault.
check_exit() {
    case $EXPECT in
    nonzero)
        [ "$RC" != 0 ] && [ "$RC" != 75 ] && return
        ;;
    0) [ "$RC" = 0 ] && return ;;
    *)
        [ "$RC" = "$EXPECT" ] && {
            [ "$RC" != 75 ] || grep -q '^stop: signal ' "$OUT" ||
                fail other "launch $L: exit 75 without a 'stop: signal' line"
            return
        }
        ;;
    esac
    # A stop signal sent within the last two steps may come after the last
    # agreement: the run then simply finishes.
    if [ "$RC" = 0 ] && [ -n "$SIG_AT" ] && [ "$SIG_AT" -ge $((CSTEPS - 2)) ]; then
        log "launch $L: the signal came too late to stop the run (step $SIG_AT)"
        return
    fi
    if [ "$1" = diskfull ] && [ "$RC" = 0 ]; then
        log "launch $L: the disk did not fill (the next save fitted)"
        N_MISSED=$((N_MISSED + 1))
        N_KIND[diskfull]=$((N_KIND[diskfull] - 1))
        return
    fi
    fail other "launch $L ($1: $INJ): exit $RC, expected $EXPECT: $(grep -E '^ftrain|^stop|hang' "$ERR" "$OUT" | tail -n 3 | tr '\n' ' ')"
}

# check_verify: every committed checkpoint verifies, except the ones this
# trial corrupted and no resume has moved aside yet.
check_verify() {
    local name rest st vrc
    for name in "${!CORR[@]}"; do
        # Moved aside by a resume (step-N.corrupt[-k]): a step-N now is new.
        [ "$(aside_count "$name")" -gt "${CORR[$name]}" ] && unset "CORR[$name]"
    done
    [ -n "$(committed)" ] || return 0
    "$CKPTCTL" verify --json "$ROOT" >"$TD/verify-$L.json" 2>"$TD/verify-$L.err"
    vrc=$?
    N_VERIFIED=$((N_VERIFIED + 1))
    while read -r name st rest; do
        [ "$st" = bad ] || continue
        if [ -n "${CORR[$name]+x}" ]; then
            log "verify after launch $L: $name is bad, as corrupted: $rest"
        else
            fail verify "after launch $L: committed $name fails verify: $rest"
        fi
    done < <(python3 - "$TD/verify-$L.json" <<'EOF'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except Exception as e:
    print("? bad cannot parse ckptctl verify --json: %s" % e)
    sys.exit()
for c in doc.get("checkpoints", []):
    if c.get("status") == "skipped":
        continue
    why = (c.get("why") or c.get("error") or "").replace("\n", " ")
    print(c["name"], "ok" if c.get("ok") else "bad", why)
EOF
    )
    case $vrc in 0 | 1) ;; *) fail verify "after launch $L: ckptctl verify exit $vrc: $(head -n 2 "$TD/verify-$L.err")" ;; esac
}

# ---- one trial --------------------------------------------------------------------------
cleanup_mount() {
    if [ -n "$MNT" ]; then
        umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
        MNT=""
    fi
}

trial() {
    local seed=$1 idx=$2 i kind t0 h secs
    TD="$CHAOS_DIR/trial-$seed"
    rm -rf "$TD"
    mkdir -p "$TD" || return 1
    TRIAL_FAIL="" LAUNCH_LOG="" CORR_TEXT=""
    CORR=()
    draw_plan "$seed"
    now_us
    t0=$NOW
    log "trial $idx seed $seed: $(plan_text)"
    ref_hash || { fail other "no reference for $CNAME"; return; }
    if [ "$HAS_DISK" = 1 ]; then
        mkdir -p "$TD/disk"
        if mount -t tmpfs -o "size=${DISK_MB}m" tmpfs "$TD/disk"; then
            MNT="$TD/disk"
            RUN="$MNT/run"
        else
            fail other "could not mount a tmpfs on $TD/disk"
            return
        fi
    else
        RUN="$TD/run"
    fi
    ROOT="$RUN/ckpt"
    RC=1
    for ((i = 0; i <= MAX_RELAUNCH; i++)); do
        kind=none
        [ "$i" -lt "$NF" ] && kind=${LF[i]}
        [ "$i" -gt 0 ] && N_RELAUNCH=$((N_RELAUNCH + 1))
        N_LAUNCH=$((N_LAUNCH + 1))
        launch "$i" "$kind"
        [ -n "$MNT" ] && mount -o remount,size=${DISK_MB}m "$MNT"
        [ "$RC" = 0 ] && break
        if [ "$i" -lt "$NF" ] && [ "${LC[i]}" = 1 ]; then
            F=$i
            corrupt_newest
            LAUNCH_LOG="$LAUNCH_LOG${CORR_TEXT:+ [$CORR_TEXT]}"
            CORR_TEXT=""
        fi
    done
    # Faults of launches that never ran (the run finished first), and a
    # corruption planned after the launch that finished.
    [ "$i" -lt "$NF" ] && [ "${LC[i]}" = 1 ] && N_MISSED=$((N_MISSED + 1))
    for ((i = i + 1; i < NF; i++)); do N_MISSED=$((N_MISSED + 1 + LC[i])); done
    if [ "$RC" != 0 ]; then
        fail other "not finished after $MAX_RELAUNCH relaunches (last exit $RC)"
    else
        h=$(hash_of "$OUT")
        if [ "$h" = "${REF[$CNAME]}" ]; then
            log "param_hash $h: the uninterrupted one"
        else
            fail mismatch "param_hash '$h', uninterrupted ${REF[$CNAME]}"
        fi
    fi
    secs=$(secs_since "$t0")
    if [ -n "$TRIAL_FAIL" ]; then
        N_FAILED=$((N_FAILED + 1))
        if [ -n "$MNT" ]; then
            cp -a "$RUN" "$TD/run-from-tmpfs" 2>/dev/null
            cleanup_mount
        fi
        FAILED_SEEDS="$FAILED_SEEDS $seed"
        printf 'trial %d/%d seed %s %s: %s: FAIL (%s s): %s\n    kept %s\n' "$idx" "$TRIALS" "$seed" \
            "$CNAME" "$LAUNCH_LOG" "$secs" "$TRIAL_FAIL" "$TD"
    else
        cleanup_mount
        [ "$KEEP" = 1 ] || rm -rf "$TD"
        printf 'trial %d/%d seed %s %s: %s: ok (%s s)\n' "$idx" "$TRIALS" "$seed" "$CNAME" \
            "$LAUNCH_LOG" "$secs"
    fi
}

on_exit() {
    local p
    if [ -n "$LPID" ]; then
        kill -TERM "$LPID" 2>/dev/null
        for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
        kill -KILL "$LPID" 2>/dev/null
    fi
    cleanup_mount
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- main ---------------------------------------------------------------------------------
if [ "$PLAN_ONLY" = 1 ]; then
    for ((n = 0; n < TRIALS; n++)); do
        draw_plan $((SEED + n))
        echo "seed $((SEED + n)): $(plan_text)"
    done
    exit 0
fi

if [ -n "${CHAOS_DIR:-}" ]; then
    mkdir -p "$CHAOS_DIR" || exit 2
else
    CHAOS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ftrain-chaos.XXXXXX") || exit 2
fi
CHAOS_DIR=$(cd "$CHAOS_DIR" && pwd)
declare -A N_KIND=()
for k in "${KINDS[@]}"; do N_KIND[$k]=0; done
N_HANG=0 N_MISMATCH=0 N_VERIFY=0 N_OTHER=0 N_FAILED=0 N_RELAUNCH=0 N_LAUNCH=0
N_MISSED=0 N_REFUSED=0 N_VERIFIED=0 SAVE_HITS=0 FAILED_SEEDS=""

echo "chaos: $TRIALS trial(s), seeds $SEED..$((SEED + TRIALS - 1)), $FTRAIN, in $CHAOS_DIR"
[ "$IS_ROOT" = 1 ] || echo "chaos: not root: no full-disk faults (they need a tmpfs mount)"
now_us
START=$NOW
for ((n = 0; n < TRIALS; n++)); do
    trial $((SEED + n)) $((n + 1))
done
WALL=$(secs_since "$START")

total=0
for k in "${KINDS[@]}"; do total=$((total + N_KIND[$k])); done
printf '\nchaos summary (seeds %s..%s)\n' "$SEED" "$((SEED + TRIALS - 1))"
printf '  %-50s %s\n' "trials" "$TRIALS"
printf '  %-50s %s\n' "trials failed" "$N_FAILED"
printf '  %-50s %s\n' "faults injected" "$total"
for k in "${KINDS[@]}"; do
    case $k in
    usr1) d="stop signal (SIGUSR1) to a rank" ;;
    kill) d="SIGKILL of a rank" ;;
    sigstop) d="SIGSTOP of a rank (hang)" ;;
    savesig) d="second signal during a save" ;;
    killsave) d="SIGKILL of a rank during a save" ;;
    diskfull) d="full disk during a save" ;;
    corrupt) d="corrupted newest checkpoint" ;;
    esac
    printf '    %-48s %s\n' "$k: $d" "${N_KIND[$k]}"
done
printf '  %-50s %s\n' "faults planned but not injected" "$N_MISSED"
printf '  %-50s %s\n' "signals/kills seen to land in a save" "$SAVE_HITS"
printf '  %-50s %s\n' "launches" "$N_LAUNCH"
printf '  %-50s %s\n' "recoveries (relaunches)" "$N_RELAUNCH"
printf '  %-50s %s\n' "resumes refused (all checkpoints corrupt)" "$N_REFUSED"
printf '  %-50s %s\n' "ckptctl verify runs" "$N_VERIFIED"
printf '  %-50s %s\n' "hangs (must be 0)" "$N_HANG"
printf '  %-50s %s\n' "param_hash mismatches (must be 0)" "$N_MISMATCH"
printf '  %-50s %s\n' "committed checkpoints failing verify (must be 0)" "$N_VERIFY"
printf '  %-50s %s\n' "other failures (must be 0)" "$N_OTHER"
printf '  %-50s %s s\n' "wall time" "$WALL"
if [ $((N_HANG + N_MISMATCH + N_VERIFY + N_OTHER)) -ne 0 ]; then
    echo "chaos: FAILED; replay a trial with: CHAOS_SEED=<seed> CHAOS_TRIALS=1 make chaos"
    echo "chaos: failed seeds:$FAILED_SEEDS (kept under $CHAOS_DIR)"
    exit 1
fi
if [ "$KEEP" != 1 ]; then
    rm -rf "$CHAOS_DIR/ref"
    rmdir "$CHAOS_DIR" 2>/dev/null
fi
echo "chaos: passed"
exit 0
