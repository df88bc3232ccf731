#!/bin/sh
# stop_resume.sh - stop on a signal, checkpoint, exit 75, resume on another
# world size, for the local mpirun launcher.
#
# Every trainer here runs --deterministic, so a run that is stopped and
# resumed (on any world sizes, any number of times) must end with the very
# param_hash of the uninterrupted run; that one comparison checks the saved
# parameters, optimizer moments, schedule position and data cursor at once.
#
# Covered: USR1 to rank 0 / the last rank / all ranks, SIGTERM to one rank,
# SIGINT, --stop-signal USR2, a signal during start-up, near an epoch-end
# evaluation and during the final evaluation, a second signal during the
# stop's save; resume 4->3, 2->5, 3->1, 1->2 and 4->3->2->finish with a
# sample trace (no sample repeated or skipped within an epoch); a corrupt
# newest checkpoint (fallback to the previous one; a bad newer one moved
# aside so its step can be saved again), all corrupt (refusal), a
# different --layers (refusal); no run directory (exit 128+10).
#
# Rank pids come from the "world: rank R ... pid P" lines rank 0 prints; a
# signal is sent only once progress lines show training has started, except
# for the start-up case.  Every wait polls with a deadline, and every run is
# bounded by timeout(1), so a hang fails instead of blocking.
: "${FTRAIN_TIMEOUT:=60}"
. "$(dirname "$0")/../lib.sh"
need_mpi
command -v python3 >/dev/null 2>&1 || skip_all "python3 not installed"
CKPTCTL="$BUILD/ckptctl"

LINE="--data line --layers 16 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic"
# 2 epochs of 32 steps (the last one short); slowed so signals land mid-run.
RUN="$LINE --epochs 2 --log-every 1 --step-delay-ms 20"

# ---- helpers ----------------------------------------------------------------

# launch N DIR ARGS...: start "$RUN --run-dir DIR ARGS" on N ranks in the
# background; output in DIR.out and DIR.err (DIR.out is truncated first).
launch() {
    _ln=$1 _ld=$2
    shift 2
    : >"$_ld.out"
    mpi_bg "$_ln" $RUN --run-dir "$_ld" "$@" >>"$_ld.out" 2>>"$_ld.err"
}

# progress_lines FILE: the number of progress lines in FILE.
progress_lines() {
    _pl=$(grep -c '^epoch [0-9.]*/[0-9.]* step ' "$1" 2>/dev/null)
    echo "${_pl:-0}"
}
_ge() { [ "$(progress_lines "$1")" -ge "$2" ]; }

# started DIR K: wait (20 s at most) until this run printed K progress lines.
started() { wait_for 20 _ge "$1.out" "$2"; }

# finish: wait for the background run; RC gets its exit code.
finish() {
    wait "$MPI_PID"
    RC=$?
    MPI_PID=
}

# sig SIG DIR R: send SIG to rank R of the run whose output is DIR.out.
sig() {
    _p=$(rank_pid "$2.out" "$3")
    if [ -z "$_p" ]; then
        why "no pid for rank $3 in $2.out"
        return 1
    fi
    kill -"$1" "$_p"
}

# verified ROOT: the newest committed checkpoint under ROOT verifies.
verified() {
    if [ -x "$CKPTCTL" ]; then
        "$CKPTCTL" verify "$1" >"$T/verify.out" 2>&1
    else
        _l=$(ls -d "$1"/step-* 2>/dev/null | tail -n 1)
        [ -n "$_l" ] && [ -s "$_l/manifest.json" ]
    fi
}

# stopped NAME DIR SIGNAME: checks of a stopped run: exit 75, a stop line
# naming the signal, a committed checkpoint that verifies.  One test.
stopped() {
    _why=""
    [ "$RC" -eq 75 ] || _why="exit $RC, expected 75"
    grep -q "^stop: signal $3 " "$2.out" || _why="$_why; no 'stop: signal $3' line"
    grep -q "^done: step=" "$2.out" || _why="$_why; no done line"
    verified "$2/ckpt" || _why="$_why; the checkpoint does not verify"
    if [ -z "$_why" ]; then
        ok 0 "$1: exit 75 after '$(sed -n 's/^\(stop: signal [A-Z0-9]* ([^)]*) at step [0-9]*\).*/\1/p' "$2.out")', checkpoint verifies"
    else
        ok 1 "$1: exit 75, stop line, checkpoint verifies"
        why "$_why" "$(tail -n 5 "$2.out")" "$(tail -n 5 "$2.err")"
    fi
}

# resumed NAME DIR M: resume DIR on M ranks to the end (no delay); exit 0,
# a 'resume: ... world N -> M' line and the reference param_hash.  One test.
resumed() {
    mpi "$3" $RUN --step-delay-ms 0 --run-dir "$2" >"$2.res" 2>"$2.reserr"
    _rc=$?
    _h=$(hash_of "$2.res")
    _from=$(sed -n 's/^resume: .* world \([0-9]*\) -> \([0-9]*\).*/\1->\2/p' "$2.res")
    if [ "$_rc" -eq 0 ] && [ -n "$_from" ] && [ "$_h" = "$REF" ]; then
        ok 0 "$1: resumed $_from to the end with the uninterrupted param_hash"
    else
        ok 1 "$1: resumed on $3 ranks to the end with the uninterrupted param_hash"
        why "exit $_rc, resume '$_from', hash '$_h', expected '$REF'" \
            "$(grep -E '^(resume|done|stop)' "$2.res")" "$(tail -n 5 "$2.reserr")"
    fi
}


# ---- runs that mostly wait, in the background from the start ------------------
# The two final-evaluation cases (3-s steps, fashion-mnist loaded twice
# each) and the big model's reference run go on beside the signal matrix;
# their checks come in their place below.  (Their runs share no directory
# with any other.)
FMNIST=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz

# last_eval_run DIR SECONDS RANKS ARGS...: start a 2-rank run of ARGS (its
# last step is 2) under DIR, send USR1 to each rank in RANKS ("1", "0 1")
# once step 2's metrics row is written (within SECONDS), wait for the end.
# SENT is 1 when the signals went out.
last_eval_run() {
    _d=$1 _w=$2 _rs=$3
    shift 3
    mkdir -p "$_d"
    : >"$_d.out"
    SENT=0
    mpi_bg 2 "$@" --run-dir "$_d" >>"$_d.out" 2>"$_d.err"
    if wait_for "$_w" grep -q '"step":2,' "$_d/metrics.jsonl"; then
        SENT=1
        for _k in $_rs; do sig USR1 "$_d" "$_k" || SENT=0; done
    fi
    finish
}
# test_acc FILE: the test accuracy of FILE's last "done:" line.
test_acc() { sed -n 's/^done: .*test_acc=\([^ ]*\).*/\1/p' "$1" | tail -n 1; }
# ends_with_acc RC ACC: 0 when RC is 0 and ACC is a number.
ends_with_acc() { [ "$1" -eq 0 ] && printf '%s' "$2" | grep -Eq '^[0-9]+\.[0-9]+$'; }
# cut_stop DIR: DIR.out shows the final evaluation cut short and the stop.
cut_stop() {
    grep -q '^eval: final evaluation cut short by a stop signal' "$1.out" &&
        grep -q '^stop: signal USR1 ' "$1.out"
}

# final_eval_start RANKS SECONDS LAYERS: in the background, a run whose
# USR1 (to RANKS) lands just before its final evaluation, then its resume;
# their outcomes in $T/fe-RANKS.* for final_eval_case.
final_eval_start() {
    [ -r "$FMNIST" ] || return 0
    (
        d="$T/fe-$(echo "$1" | tr -d ' ')"
        FE="--data fashion-mnist --layers $3 --steps 2 --deterministic --log-every 1"
        last_eval_run "$d" "$2" "$1" $FE --step-delay-ms 3000
        echo "$SENT $RC" >"$d.first"
        mpi 2 $FE --run-dir "$d" >"$d.res" 2>&1
        echo "$?" >"$d.rc"
    ) &
    track_bg "$!"
    FE_PIDS="$FE_PIDS $!"
}
# final_eval_case NAME RANKS: the run of final_eval_start RANKS must stop
# there (cut short, exit 75, its stop line, no "evaluation failed"), and
# its resume must evaluate and end.
final_eval_case() {
    _name=$1
    d="$T/fe-$(echo "$2" | tr -d ' ')"
    if [ ! -r "$FMNIST" ]; then
        skip "$_name" "fashion-mnist is not installed"
        skip "$_name: the resume evaluates" "fashion-mnist is not installed"
        return
    fi
    for _p in $FE_PIDS; do wait "$_p"; done
    read -r SENT RC <"$d.first" || { SENT=0 RC=255; }
    ok "$([ "$SENT" -eq 1 ] && [ "$RC" -eq 75 ] && cut_stop "$d" &&
        ! grep -q 'evaluation failed' "$d.err"; echo $?)" \
        "$_name: cut short, a stop (exit 75) with its stop line, not a failure" ||
        why "signal sent: $SENT; exit $RC" "$(grep -E '^(eval|stop|done|checkpoint)' "$d.out")" "$(tail -n 5 "$d.err")"
    RC=$(cat "$d.rc" 2>/dev/null || echo 255)
    acc=$(test_acc "$d.res")
    ends_with_acc "$RC" "$acc"
    ok $? "$_name: the resume evaluates and ends (exit 0, test_acc $acc)" ||
        why "exit $RC, test_acc '$acc'" "$(grep -E '^(resume|eval|stop|done)' "$d.res")"
}
FE_PIDS=""
final_eval_start 1 40 256,256
final_eval_start "0 1" 60 1024,1024
BIG="--data line --layers 1024,1024 --global-batch 32 --micro-batch 8 --lr 0.0001 --deterministic --steps 6"
mpi 1 $BIG --quiet >"$T/bigref.out" 2>&1 &
BIGREF_PID=$!
track_bg "$BIGREF_PID"

# ---- the uninterrupted reference ---------------------------------------------
# On 1 rank: a --deterministic run's param_hash is the same on any world
# size (the resumes below, on 1 to 5 ranks, compare against it).
mpi 1 $RUN --step-delay-ms 0 --quiet >"$T/ref.out" 2>"$T/ref.err"
REF=$(hash_of "$T/ref.out")
[ -n "$REF" ] || { echo "Bail out! the reference run failed: $(cat "$T/ref.err")"; exit 1; }
diag "uninterrupted param_hash $REF"

# ---- the signal matrix, with the N -> M pairs ---------------------------------

# case NAME N M SIG SIGNAME RANKS [ARGS...]: start on N ranks, wait for
# training, send SIG to each rank in RANKS, expect a 75 stop, resume on M.
case_() {
    _c=$1 _n=$2 _m=$3 _s=$4 _sn=$5 _ranks=$6
    shift 6
    _d="$T/$(echo "$_c" | tr -c 'a-zA-Z0-9\n' _)"
    launch "$_n" "$_d" "$@"
    if started "$_d" 3; then
        for _r in $_ranks; do
            sig "$_s" "$_d" "$_r"
        done
    else
        why "$_c: training did not start in time"
    fi
    finish
    stopped "$_c" "$_d" "$_sn"
    if [ "$RC" -eq 75 ]; then
        resumed "$_c" "$_d" "$_m"
    else
        ok 1 "$_c: resume skipped, the stop failed"
    fi
    LASTDIR=$_d
}

case_ "USR1 to rank 0 only, 4 -> 3" 4 3 USR1 USR1 "0"
D_43=$LASTDIR
case_ "USR1 to the last rank only, 2 -> 5" 2 5 USR1 USR1 "1"
grep -q "first seen by rank 1)" "$LASTDIR.out"
ok $? "USR1 to the last rank: the stop line says rank 1 saw it first"
case_ "USR1 to all ranks, 3 -> 1" 3 1 USR1 USR1 "0 1 2"
case_ "SIGINT, 1 -> 2" 1 2 INT INT "0"
case_ "SIGTERM to one rank (1 of 3), 3 -> 2" 3 2 TERM TERM "1"
case_ "--stop-signal USR2, 2 -> 2" 2 2 USR2 USR2 "1" --stop-signal USR2
D_USR2=$LASTDIR

# ---- a signal during start-up ------------------------------------------------
# The rank pids are taken from the process tree (children of mpirun) as soon
# as a rank has installed its handler (SigCgt in /proc shows USR1), before
# MPI_Init, data loading and resume are done: the world lines come too late.
# The run must stop after its first step (the first control reduction) with
# exit 75; it must not hang or lose the signal.
#
# That the signal came before training is made sure of, not hoped for: the
# rank is frozen (SIGSTOP), and the signal is sent only while the run
# directory does not exist yet.  Rank 0 creates it (taking the run lock)
# right after MPI_Init and before the ranks' first collective agreement,
# which the frozen rank has then not reached: its pending USR1 is taken
# when it goes on (SIGCONT), before its first control reduction.  A start
# that was past that point already is a lost race: the run goes on, and
# another is started (3 tries; none in 3 is a failure, not a skip).
handlers_in() {
    _mp=$(mpirun_of "$MPI_PID")
    [ -n "$_mp" ] || return 1
    STARTUP_PID=""
    for _p in $(pgrep -P "$_mp" -x ftrain 2>/dev/null); do
        _m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$_p/status" 2>/dev/null)
        # SIGUSR1 is signal 10: bit 9 of the caught-signal mask.
        [ -n "$_m" ] && [ $((0x$_m & 0x200)) -ne 0 ] && STARTUP_PID=$_p && return 0
    done
    return 1
}
if [ -d /proc/self ] && command -v pgrep >/dev/null 2>&1; then
    early=1 try=0 found=0
    while [ "$early" -ne 0 ] && [ "$try" -lt 3 ]; do
        try=$((try + 1))
        d="$T/startup.$try"
        launch 3 "$d"
        if wait_for 20 handlers_in; then
            found=1
            kill -STOP "$STARTUP_PID"
            if [ ! -e "$d" ]; then
                early=0
                kill -USR1 "$STARTUP_PID"
            fi
            kill -CONT "$STARTUP_PID"
        fi
        [ "$early" -eq 0 ] || diag "signal during start-up, try $try: the ranks were past MPI_Init before the signal; again"
        finish
    done
    if [ "$early" -eq 0 ]; then
        stopped "signal during start-up (try $try)" "$d" USR1
        step=$(sed -n 's/^stop: .* at step \([0-9]*\):.*/\1/p' "$d.out")
        is "$step" 1 "signal during start-up: the stop comes after the first step"
        if [ "$RC" -eq 75 ]; then
            resumed "signal during start-up, 3 -> 4" "$d" 4
        else
            ok 1 "signal during start-up: resume skipped, the stop failed"
        fi
    else
        ok 1 "signal during start-up: sent before MPI_Init in one of $try tries" ||
            why "$([ "$found" -eq 1 ] && echo "each time the run directory existed when the rank was frozen" ||
                echo "no rank with a USR1 handler found in /proc")"
        skip "signal during start-up: the stop comes after the first step" "the signal was never sent before training"
        skip "signal during start-up: resume" "the signal was never sent before training"
    fi
else
    skip "signal during start-up" "no /proc or no pgrep: cannot find the ranks"
    skip "signal during start-up: stop step" "no /proc or no pgrep"
    skip "signal during start-up: resume" "no /proc or no pgrep"
fi

# ---- a signal while a rank loads its libraries ---------------------------------
# Before main, the libraries' constructors run (cuBLAS's and NCCL's take most
# of a second): a rank must not die of a stop signal that comes then.  The
# slowstart shim stands for such a library: its constructor marks a file and
# sleeps 1.5 s; the signal goes to the rank once the mark is there.  The rank
# blocked the stop signals before any constructor ran, so it takes the
# signal when its handlers are in place and stops after its first step.
d="$T/loading"
if ! have_shim slowstart; then
    skip "signal while loading libraries" "$SHIM_WHY"
else
    rm -f "$d.mark"
    : >"$d.out"
    SLOWSTART_MARK=$d.mark timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --oversubscribe -n 2 \
        -x LD_PRELOAD="$SHIM" -x SLOWSTART_MARK \
        "$FTRAIN" $RUN --run-dir "$d" >>"$d.out" 2>>"$d.err" &
    MPI_PID=$!
    if wait_for 20 test -s "$d.mark"; then
        kill -USR1 "$(head -n 1 "$d.mark")"
    else
        why "no rank reached the slow constructor"
    fi
    finish
    stopped "signal while a rank loads its libraries" "$d" USR1
fi

# ---- a signal near an epoch-end evaluation -----------------------------------
# Rank 0 writes the metrics row of step 32 (the end of epoch 1) before it
# evaluates; the signal is sent as soon as that row shows.  The line data's
# test set is 100 samples, so the evaluation takes far less than our polling
# latency: what this really covers is a signal that arrives after the
# epoch's last control reduction, around the evaluation and the step delay
# (100 ms here), so the stop comes after step 33 (34 or 35 on a loaded
# machine that polls late) and must resume exactly.  The signal during a
# long evaluation is the fashion-mnist case below.
d="$T/evalend"
launch 2 "$d" --step-delay-ms 100
if wait_for 30 grep -q '"step":32,' "$d/metrics.jsonl"; then
    sig USR1 "$d" 0
fi
finish
stopped "signal at the end of epoch 1" "$d" USR1
at=$(sed -n 's/^stop: .* at step \([0-9]*\):.*/\1/p' "$d.out")
ok "$([ "${at:-0}" -ge 33 ] && [ "${at:-0}" -le 35 ]; echo $?)" \
    "signal after step 32's agreement: the stop follows the next step ($at)"
[ "$at" = 33 ] || diag "(the signal arrived late: stop after step $at)"
grep -q "cut short" "$d.out" && diag "(the evaluation was cut short by the signal)"
if [ "$RC" -eq 75 ]; then
    resumed "signal at the end of epoch 1, 2 -> 3" "$d" 3
else
    ok 1 "signal at the end of epoch 1: resume skipped, the stop failed"
fi

# A signal during the final evaluation of a short fashion-mnist run (10000
# test samples; steps are 128 samples): that evaluation is cut short and the
# run stops (exit 75) like any stop; the requeued run resumes at the last
# step and only evaluates, ending with a test accuracy (never nan).
# The signal is sent as soon as the last step's metrics row is written.
# Rank 0 writes it before the step's --step-delay-ms sleep, so the signal
# lands in that sleep (3 s: far longer than the polling latency of a loaded
# machine), or in the final save or evaluation that follow it; the
# evaluation checks for a signal before each of its chunks and is cut short
# by one that came before it.  Without the delay the evaluation could be
# over before the signal, and a run that never saw it would pass.
final_eval_case "signal during the final evaluation" 1
# The same, with the signal sent to every rank at once (as srun and mpirun
# forward it) and a larger model: every rank's evaluation is cut short.
# Each rank's "cut short" vote is summed with the others; two of them once
# read as a device failure (exit 1, "gpu evaluation failed") instead of a
# stop.
final_eval_case "signal to every rank during the final evaluation" "0 1"

# ---- a second signal while the stop's checkpoint is being written -----------
# A 1M-parameter model (12 MB of state) saved at zstd level 19 makes the
# save last a second or so; the second and third signals are sent once the
# save's .tmp-step-* directory shows.  They must not interrupt the save: exit 75, a checkpoint that
# verifies, and an exact resume.
# (BIG and its reference run, on 1 rank, started at the top.)
wait "$BIGREF_PID"
BIGREF=$(hash_of "$T/bigref.out")
d="$T/save"
: >"$d.out"
mpi_bg 2 $BIG --log-every 1 --step-delay-ms 100 --ckpt-level 19 --run-dir "$d" >>"$d.out" 2>"$d.err"
saw_tmp=1
if started "$d" 2; then
    sig USR1 "$d" 0
    if wait_for 20 sh -c "ls -d '$d'/ckpt/.tmp-step-* >/dev/null 2>&1"; then
        saw_tmp=0
        sig USR1 "$d" 1
        sig TERM "$d" 0
    fi
fi
finish
ok "$saw_tmp" "second signal: sent while .tmp-step-* (the save) existed"
stopped "second signal during the save" "$d" USR1
mpi 3 $BIG --run-dir "$d" >"$d.res" 2>&1
is "$(hash_of "$d.res")" "$BIGREF" "second signal during the save: resume 2 -> 3 ends with the uninterrupted param_hash"

# ---- several stops in one run, with a sample trace ----------------------------
d="$T/multi"
for n in 4 3; do
    launch "$n" "$d" --trace-samples "$T/trace"
    # Stop at a different point each time (and let the first stop land in
    # epoch 1, the second in epoch 2).
    [ "$n" -eq 4 ] && k=5 || k=30
    started "$d" "$k" && sig USR1 "$d" $((n - 1))
    finish
    stopped "4 -> 3 -> 2: stop on $n ranks" "$d" USR1
done
mpi 2 $RUN --step-delay-ms 0 --run-dir "$d" --trace-samples "$T/trace" >"$d.res" 2>&1
rc=$?
is "$rc:$(hash_of "$d.res")" "0:$REF" "4 -> 3 -> 2 -> finish: exit 0 with the uninterrupted param_hash"
cat "$T"/trace.* >"$T/trace.all" 2>/dev/null
python3 - "$T/trace.all" 1000 2 >"$T/trace.py" 2>&1 <<'EOF'
import sys
from collections import Counter
path, n, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = {}
for line in open(path):
    f = line.split()
    if len(f) < 3:
        print("bad line: %r" % line); sys.exit()
    per.setdefault(int(f[0]), Counter()).update(int(x) for x in f[2:])
errs = []
for e in range(epochs):
    c = per.get(e, Counter())
    dup = [i for i, k in c.items() if k > 1]
    miss = [i for i in range(n) if i not in c]
    out = [i for i in c if not 0 <= i < n]
    if dup or miss or out:
        errs.append("epoch %d: %d repeated (%s), %d skipped (%s), %d out of range"
                    % (e, len(dup), dup[:5], len(miss), miss[:5], len(out)))
if sorted(per) != list(range(epochs)):
    errs.append("epochs traced: %s" % sorted(per))
print("good" if not errs else "bad")
for x in errs: print("# " + x)
EOF
is "$(head -n 1 "$T/trace.py")" good \
    "4 -> 3 -> 2 -> finish: every sample trained exactly once in each epoch" ||
    diag "$(tail -n +2 "$T/trace.py")"

# ---- corrupt checkpoints and refusals -----------------------------------------

# A different architecture: refused, naming both.
mpi 2 $RUN --layers 32 --step-delay-ms 0 --run-dir "$D_43" >"$T/arch.out" 2>"$T/arch.err"
rc=$?
err=$(cat "$T/arch.err")
ok "$([ "$rc" -ne 0 ] && ! grep -q '^done:' "$T/arch.out" &&
    printf '%s' "$err" | grep -q '1-16-1' && printf '%s' "$err" | grep -q '1-32-1'; echo $?)" \
    "resume with another --layers: refused (exit $rc), naming 1-16-1 and 1-32-1" || why "$err"

# The newest checkpoint corrupt: fall back to the previous one and say why.
d="$T/fallback"
launch 2 "$d" --ckpt-every 4
started "$d" 14 && sig USR1 "$d" 0
finish
stopped "periodic saves, then a stop" "$d" USR1
newest=$(ls -d "$d"/ckpt/step-* | tail -n 1)
prev=$(ls -d "$d"/ckpt/step-* | tail -n 2 | head -n 1)
flip "$newest/shard-0.ftsh"
mpi 3 $RUN --step-delay-ms 0 --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
like "$(cat "$d.reserr")" "skip.*$(basename "$newest").*: [a-z]" "corrupt newest checkpoint: stderr names it and says why it is skipped"
like "$(grep '^resume:' "$d.res")" "$(basename "$prev")" "corrupt newest checkpoint: resumed from the previous one"
is "$rc:$(hash_of "$d.res")" "0:$REF" "corrupt newest checkpoint: the run still ends with the uninterrupted param_hash"

# The newest checkpoint corrupt and on a step the resumed run saves again
# (--ckpt-every): it is moved aside, so that save succeeds, instead of
# failing with "already exists" (and failing the same way after every
# requeue).
d="$T/aside"
launch 2 "$d" --ckpt-every 4
started "$d" 14 && sig USR1 "$d" 1
finish
stopped "periodic saves, then a stop (for set-aside)" "$d" USR1
stopsave=$(ls -d "$d"/ckpt/step-* | tail -n 1)
rm -rf "$stopsave" "$d/ckpt/LATEST"
bad=$(ls -d "$d"/ckpt/step-* | tail -n 1)
flip "$bad/shard-1.ftsh"
mpi 2 $RUN --step-delay-ms 0 --ckpt-every 4 --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
b=$(basename "$bad")
like "$(cat "$d.reserr")" "moved the bad checkpoint '$b' aside to '$b.corrupt'" \
    "bad periodic checkpoint: moved aside, and stderr says so"
ok "$([ -d "$bad.corrupt" ] && [ -s "$bad.corrupt/manifest.json" ]; echo $?)" \
    "bad periodic checkpoint: its files are kept under $b.corrupt"
like "$(grep '^checkpoint: ' "$d.res")" "$b committed" \
    "bad periodic checkpoint: the resumed run saved $b anew"
is "$rc:$(hash_of "$d.res")" "0:$REF" \
    "bad periodic checkpoint: the run ends with the uninterrupted param_hash"

# All checkpoints corrupt: refuse, do not start over.
d="$D_USR2"
for s in "$d"/ckpt/step-*; do
    flip "$s/shard-0.ftsh"
done
mpi 2 $RUN --step-delay-ms 0 --run-dir "$d" >"$T/allbad.out" 2>"$T/allbad.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && ! grep -q '^epoch ' "$T/allbad.out"; echo $?)" \
    "all checkpoints corrupt: refused with exit $rc, no training" || why "$(tail -n 3 "$T/allbad.out")"
like "$(cat "$T/allbad.err")" "checkpoints exist under '[^']*' but none is good \\(.*\\); refusing to start over" \
    "all checkpoints corrupt: the message says none is good and that it refuses to start over" ||
    why "$(cat "$T/allbad.err")"

# ---- no run directory ---------------------------------------------------------
d="$T/norun"
: >"$d.out"
mpi_bg 2 $RUN >>"$d.out" 2>"$d.err"
started "$d" 3 && sig USR1 "$d" 1
finish
is "$RC" 138 "no run directory: USR1 gives exit 128+10"
like "$(grep '^stop:' "$d.out")" "nothing saved" "no run directory: the stop line says nothing was saved"

done_testing
