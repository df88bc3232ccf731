#!/bin/sh
# rank_failure.sh - a rank that dies or hangs ends the whole job, soon, and
# says which rank it was; the newest checkpoint stays good.
#
# 1. SIGKILL to one of 3 ranks mid-run: mpirun ends the job within seconds,
#    non-zero, naming the rank, its host and the signal.
# 2. SIGSTOP to one of 3 ranks (a hang: alive, but no progress): the
#    watchdog ends the job after --hang-timeout with exit 76 and names the
#    stopped rank and where the others waited, in its output and in a
#    failure record (RUN/failures, docs/failure-records.md).
#    After 1 and 2: `ckptctl verify` accepts the newest checkpoint, and a
#    deterministic resume on 2 ranks ends with the uninterrupted run's
#    param_hash.
# 3. No false alarm: steps slower than half the timeout, with saves, an
#    evaluation and a resume's load, finish normally.
# 4. The default, derived limit catches a hang in a run of short steps
#    within one minute.  Its floor is 45 s: that run starts first, on 2
#    ranks, is stopped once it is going, and ends while 1, 2, 3 and 5 run
#    (their runs sleep most of the time, and its waiting rank yields the
#    core); a watcher notes when it ends, and its check is the last.
# 5. A stop signal while a peer is stopped (what srun --kill-on-bad-exit
#    and mpirun do to the survivors of a dead rank: TERM): the survivors
#    stop waiting after the stop limit (5 s here), not the 45 s default
#    nor SLURM's KillWait, and say why.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=90}"
need_mpi
CKPTCTL="$BUILD/ckptctl"
RUN="--data line --layers 8 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic --steps 60"

# start_run NAME ARGS...: $RANKS ranks (default 3) in the background with a
# short step delay and frequent saves; returns once 12 steps are done (two
# checkpoints).
start_run() {
    d="$T/$1"
    shift
    : >"$d.out"
    mpi_bg "${RANKS:-3}" $RUN --log-every 1 --step-delay-ms 150 --ckpt-every 5 --run-dir "$d" "$@" \
        >>"$d.out" 2>"$d.err"
    wait_for 60 progress_ge "$d.out" 12
}

# after_failure NAME: the newest checkpoint verifies, and a resume on 2
# ranks ends with the uninterrupted run's param_hash.
after_failure() {
    "$CKPTCTL" verify "$d/ckpt" >"$d.verify" 2>&1
    ok $? "  $1: ckptctl verify accepts the checkpoints left behind" || why "$(cat "$d.verify")"
    mpi 2 $RUN --run-dir "$d" >"$d.res" 2>"$d.reserr"
    rc=$?
    is "$rc:$(hash_of "$d.res")" "0:$REF" \
        "  $1: resumed on 2 ranks ($(sed -n 's/^resume: from .*\(step-[0-9]*\).*/\1/p' "$d.res")), the uninterrupted param_hash" ||
        why "$(tail -n 3 "$d.reserr")"
}

# signal_rank SIG RANK: send SIG to RANK of the background run, wait for the
# job's end; sets rc (its exit status), took (seconds) and victim (the pid).
signal_rank() {
    victim=$(rank_pid "$d.out" "$2")
    t0=$(now)
    kill "-$1" "$victim"
    wait "$MPI_PID"
    rc=$?
    t1=$(now)
    MPI_PID=
    [ "$1" = STOP ] && kill -CONT "$victim" 2>/dev/null # only if it outlived the job
    took=$(secs "$t0" "$t1")
}

# ---- 4. the default limit (started here, checked at the end) -------------------
RANKS=2
if start_run auto; then
    auto_d=$d
    auto_pid=$MPI_PID
    auto_victim=$(rank_pid "$d.out" 1)
    auto_t0=$(now)
    kill -STOP "$auto_victim"
    # The job's end, to 0.1 s: its process gone, or a zombie not yet waited for.
    (
        while [ -d "/proc/$auto_pid" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$auto_pid/status" 2>/dev/null; do
            sleep 0.1
        done
        now >"$auto_d.end"
    ) &
    track_bg $!
else
    auto_d=$d
    auto_pid=""
fi
MPI_PID=
RANKS=3

# The uninterrupted reference on 1 rank: --deterministic gives the same
# param_hash on any world size (train_det.sh), for less CPU.
mpi 1 $RUN >"$T/ref.out" 2>&1
REF=$(hash_of "$T/ref.out")
[ -n "$REF" ] || { echo "Bail out! the uninterrupted run failed: $(tail -n 3 "$T/ref.out")"; exit 1; }

# ---- 1. a rank killed ----------------------------------------------------------
if start_run kill; then
    signal_rank KILL 1
    ok "$([ "$rc" -ne 0 ] && below "$took" 10; echo $?)" \
        "SIGKILL to rank 1: the job ended in $took s (< 10 s), exit $rc (non-zero)" ||
        why "$(tail -n 5 "$d.err")"
    like "$(cat "$d.err")" "rank 1 .*on node [^ ]+ exited on signal 9" \
        "  the job's output names rank 1, its host and the signal"
    after_failure "killed"
else
    ok 1 "SIGKILL to rank 1: the run did not get going" || why "$(tail -n 5 "$d.err")"
fi

# ---- 2. a rank stopped (a hang) ------------------------------------------------------
if start_run stop --hang-timeout 3; then
    signal_rank STOP 1
    ok "$([ "$rc" -eq 76 ] && below "$took" 15; echo $?)" \
        "SIGSTOP to rank 1, --hang-timeout 3: the watchdog ended the job in $took s (< 15 s), exit $rc (76)" ||
        why "$(tail -n 8 "$d.err")"
    like "$(cat "$d.err")" "hang: rank [02] \(host [^,]+, pid [0-9]+\) made no progress for [0-9.]+ s \(limit 3.0 s\) in the (control reduction|gradient allreduce|computation|update) of step [0-9]+" \
        "  a waiting rank says where it waited"
    like "$(cat "$d.err")" "hang: rank 1 \(host [^,]+, pid $victim\) stopped making progress" \
        "  and names the stopped rank, its host and pid"
    like "$(cat "$d"/failures/*.json 2>/dev/null)" '"kind":"hang",.*"culprit":\{"rank":1,"host":"[^"]+"\}' \
        "  a waiting rank's failure record (RUN/failures) says hang, with rank 1 as the culprit"
    after_failure "stopped"
else
    ok 1 "SIGSTOP to rank 1: the run did not get going" || why "$(tail -n 5 "$d.err")"
fi

# ---- 3. no false alarm in a slow run --------------------------------------------------
# 4 steps per epoch (250 of the line set's 1000 samples a step): an
# evaluation after step 4, saves every 2 steps, steps of 1.2 s against a
# 2 s limit; then a resume (a load) on another world size.
SLOW="--data line --layers 8 --global-batch 250 --micro-batch 25 --hang-timeout 2"
d="$T/slow"
mpi 2 $SLOW --steps 4 --step-delay-ms 1200 --ckpt-every 2 --run-dir "$d" >"$d.out" 2>"$d.err"
rc=$?
mpi 3 $SLOW --steps 6 --step-delay-ms 1200 --ckpt-every 2 --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc2=$?
ok "$([ "$rc$rc2" = 00 ] && ! grep -q 'hang:' "$d.err" "$d.reserr"; echo $?)" \
    "steps of 1.2 s, saves, an evaluation and a resume under --hang-timeout 2: no false alarm (exit $rc, $rc2)" ||
    why "$(tail -n 4 "$d.err")" "$(tail -n 4 "$d.reserr")"

# ---- 5. a stop while a peer is gone ------------------------------------------------
if start_run stopwait; then
    peer=$(rank_pid "$d.out" 1)
    kill -STOP "$peer"
    signal_rank TERM 0
    kill -CONT "$peer" 2>/dev/null
    ok "$([ "$rc" -eq 76 ] && below "$took" 20; echo $?)" \
        "TERM to rank 0 while rank 1 is stopped, default limit: ended in $took s (< 20 s, not 45), exit $rc (76)" ||
        why "$(tail -n 6 "$d.err")"
    like "$(cat "$d.err")" "a stop signal came while this rank waited: .* the limit was 5\.0 s" \
        "  it says the stop shortened the wait"
    like "$(cat "$d.err")" "hang: rank 1 \(host [^,]+, pid $peer\) stopped making progress" \
        "  and names the stopped rank"
else
    ok 1 "a stop while a peer is gone: the run did not get going" || why "$(tail -n 5 "$d.err")"
fi

# ---- 4. the default limit: its end ------------------------------------------------
if [ -n "$auto_pid" ]; then
    wait "$auto_pid"
    rc=$?
    kill -CONT "$auto_victim" 2>/dev/null # only if it outlived the job
    wait_for 5 test -s "$auto_d.end"
    took=$(secs "$auto_t0" "$(cat "$auto_d.end" 2>/dev/null)")
    ok "$([ "$rc" -eq 76 ] && below "$took" 60; echo $?)" \
        "the default limit: a hang in a run of short steps ended in $took s (< 60 s), exit $rc" ||
        why "$(tail -n 6 "$auto_d.err")"
else
    ok 1 "the default limit: the run did not get going" || why "$(tail -n 5 "$auto_d.err")"
fi

done_testing
