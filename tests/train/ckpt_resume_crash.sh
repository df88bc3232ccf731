#!/bin/sh
# ckpt_resume_crash.sh - kill -9 during periodic saves, then resume.
#
# A deterministic run saves after every step (--ckpt-every 1).  Ten times, a
# run is started on the same run directory (so it resumes), and once a save
# is in progress (a .tmp-step-* directory shows) we wait a random 0..400 ms
# and kill -9 either ONE rank or the whole job (every rank, then mpirun).
# After each crash the newest committed checkpoint must verify (ckptctl
# verify, or, without ckptctl, the next resume must load it), and the next
# run must resume from exactly that newest committed checkpoint.  More than
# half of the rounds must have killed a run mid-way (a round whose waits time
# out lets its run finish, which checks nothing of a crash).  At the end
# a run finishes (exit 0) with the param_hash of an uninterrupted run.
#
# The random delays are printed; FTRAIN_CRASH_SEED=N replays a sequence.
# Each run is bounded: 120 s, because the final run (a save at every step on
# 3 ranks sharing 2 cores) took 49 s from scratch in an ASan build here, and
# once ran past a 60 s bound in the sanitized suite.
: "${FTRAIN_TIMEOUT:=120}"
. "$(dirname "$0")/../lib.sh"
need_mpi
CKPTCTL="$BUILD/ckptctl"
ROUNDS=10
plan $((2 * ROUNDS + 3))

# 263k parameters (3 MB of state with Adam's moments) on the line data.
ARGS="--data line --layers 512,512 --global-batch 32 --micro-batch 8 --lr 0.001 --deterministic --steps 200"

mpi 2 $ARGS --quiet >"$T/ref.out" 2>"$T/ref.err"
REF=$(hash_of "$T/ref.out")
[ -n "$REF" ] || { echo "Bail out! the reference run failed: $(cat "$T/ref.err")"; exit 1; }
diag "uninterrupted param_hash $REF"

seed=${FTRAIN_CRASH_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
diag "FTRAIN_CRASH_SEED=$seed"
# rnd I MOD: a reproducible pseudo-random number in [0, MOD) for round I.
rnd() { awk -v s="$seed" -v i="$1" -v m="$2" 'BEGIN { srand(s * 1000 + i); print int(rand() * m) }'; }

R="$T/run"
# saving BASE: a save of a step after BASE is in progress (a crashed save or
# a prune leaves .tmp-step-N of older steps behind: those do not count).
saving() {
    for _s in "$R"/ckpt/.tmp-step-*; do
        _k=${_s##*.tmp-step-}
        case "$_k" in *[!0-9]*|"") continue ;; esac
        [ "$(expr "$_k" + 0)" -gt "$1" ] && return 0
    done
    return 1
}
stepnum() { _b=$(basename "${1:-step-0}"); expr "${_b#step-}" + 0; }
newest() { ls -d "$R"/ckpt/step-* 2>/dev/null | tail -n 1; }
# running PID: the process exists and is not a zombie.
running() { [ -r "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
none_running() {
    for _p in "$@"; do running "$_p" && return 1; done
    return 0
}
# resumed_from LINE0: the "from" of the resume event metrics.jsonl got after
# its line LINE0 (rank 0 writes it straight to the file, whereas stdout that
# mpirun was still forwarding is lost when the whole job is killed).
resumed_from() {
    tail -n +"$(($1 + 1))" "$R/metrics.jsonl" 2>/dev/null |
        sed -n 's/.*"event":"resume".*"from":"\([^"]*\)".*/\1/p' | tail -n 1
}
done_since() { tail -n +"$(($1 + 1))" "$R/metrics.jsonl" 2>/dev/null | grep -q '"event":"done"'; }
started_since() { tail -n +"$(($1 + 1))" "$R/metrics.jsonl" 2>/dev/null | grep -q '"event":"start"'; }
mlines() { cat "$R/metrics.jsonl" 2>/dev/null | wc -l; }
rank_pids() { sed -n 's/^world: rank [0-9]* local [0-9]* host [^ ]* pid \([0-9]*\).*/\1/p' "$1"; }
# The world lines reach the output once rank 0 prints its "train:" line.
have_pids() { [ "$(rank_pids "$1" | wc -l)" -ge "$2" ]; }

expect_from=""
crashes=0   # rounds whose kill ended the run mid-way
i=1
while [ "$i" -le "$ROUNDS" ]; do
    n=$((2 + i % 3))                 # 3, 4, 2, 3, 4, ... ranks
    whole=$((i % 2))                 # odd rounds: the whole job
    delay=$(rnd "$i" 400)
    victim=$(rnd "$((i + 100))" "$n")
    out="$T/round.$i"
    m0=$(mlines)
    mpi_bg "$n" $ARGS --ckpt-every 1 --run-dir "$R" >"$out" 2>"$out.err"
    what="nothing (the run ended first)"
    killed=0
    during=""
    base=$(stepnum "$(newest)")
    # Training has started (the start event follows the resume), and a save
    # after the resumed step is under way; a crashed save's leftover
    # .tmp-step-N can make that true at once, so the random delay (about a
    # step and a save long at most) picks the point of the kill.
    if wait_for 30 have_pids "$out" "$n" && wait_for 30 started_since "$m0" &&
        wait_for 30 saving "$base"; then
        sleep "$(awk -v d="$delay" 'BEGIN { printf "%.3f", d / 1000 }')"
        saving "$base" && during="during a save" || during="between saves"
        killed=1
        if [ "$whole" -eq 1 ]; then
            what="the whole job"
            kill -9 $(rank_pids "$out") 2>/dev/null
            kill -9 "$(mpirun_of "$MPI_PID")" 2>/dev/null
        else
            what="rank $victim"
            kill -9 "$(rank_pids "$out" | sed -n "$((victim + 1))p")" 2>/dev/null
        fi
    fi
    wait "$MPI_PID" 2>/dev/null # dash reports a killed job as "Killed"
    rc=$?
    MPI_PID=
    # Ranks of a half-killed job must be gone before the next round starts
    # (mpirun takes them down; we only make sure of it).
    if ! wait_for 20 none_running $(rank_pids "$out"); then
        diag "round $i: ranks still running 20 s after mpirun ended; killing them"
        kill -9 $(rank_pids "$out") 2>/dev/null
    fi
    diag "round $i: $n ranks, killed $what after $delay ms ($during); exit $rc; newest $(basename "$(newest)")"
    # A kill that ended the run mid-way: a non-zero exit, and no "done"
    # event in metrics.jsonl since this round started (rank 0 writes it
    # straight to the file before it exits).
    if [ "$killed" -eq 1 ] && [ "$rc" -ne 0 ] && ! done_since "$m0"; then
        crashes=$((crashes + 1))
    fi

    # The previous round's newest committed checkpoint was the one resumed.
    got=$(resumed_from "$m0")
    if [ -z "$expect_from" ]; then
        is "$got" "" "round $i: no checkpoint yet, so no resume"
    else
        is "$(basename "$got")" "$(basename "$expect_from")" "round $i: resumed from the newest committed checkpoint"
    fi
    # The newest committed checkpoint verifies.
    last=$(newest)
    if [ -z "$last" ]; then
        # With a save after every step, only a kill before the first commit
        # leaves none: this round's kill ended the run, and the run
        # directory names no committed step (no step-*, no LATEST), so the
        # next run starts fresh (the next round, or the final run, checks
        # that it resumes from nothing).
        ok "$([ "$killed" -eq 1 ] && [ "$rc" -ne 0 ] && ! done_since "$m0" &&
            [ ! -e "$R/ckpt/LATEST" ] && started_since "$m0"; echo $?)" \
            "round $i: killed before the first save committed: no committed step, nothing to resume" ||
            why "killed=$killed exit $rc" "$(ls -la "$R/ckpt" 2>&1)" "$(tail -n 3 "$R/metrics.jsonl" 2>&1)"
    elif [ -x "$CKPTCTL" ]; then
        "$CKPTCTL" verify "$last" >"$T/verify" 2>&1
        ok $? "round $i: $(basename "$last") verifies" || why "$(cat "$T/verify")"
    else
        ok "$([ -s "$last/manifest.json" ]; echo $?)" "round $i: $(basename "$last") has a manifest (no ckptctl: the next resume loads it)"
    fi
    expect_from=$last
    i=$((i + 1))
done

# The point of the file: most rounds must crash a run mid-way.  A round
# whose waits time out lets its run finish (a diag above), and rounds that
# all ended that way would leave every check here green without one crash.
ok "$([ "$crashes" -gt $((ROUNDS / 2)) ]; echo $?)" \
    "$crashes of $ROUNDS rounds killed a run mid-way (more than half must)"

# Finish: resume from the newest and run to the end on 3 ranks.
mpi 3 $ARGS --ckpt-every 1 --run-dir "$R" >"$T/final" 2>"$T/final.err"
rc=$?
got=$(sed -n 's/^resume: from \([^ ]*\) step .*/\1/p' "$T/final")  # stdout is complete here
is "$(basename "$got")" "$(basename "$expect_from")" "final run: resumed from the newest committed checkpoint"
is "$rc:$(hash_of "$T/final")" "0:$REF" "final run: exit 0 with the uninterrupted param_hash" ||
    why "$(tail -n 5 "$T/final.err")"

done_testing
