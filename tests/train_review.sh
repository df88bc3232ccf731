#!/bin/sh
# train_review.sh - the trainer at the edges of its run directory, resume,
# epoch evaluations and schedule, and docs that must say what the code does.
# Each section's comment says what it checks.
. "$(dirname "$0")/lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
command -v python3 >/dev/null 2>&1 || skip_all "python3 not installed"
SRC=$(cd "$(dirname "$0")/.." && pwd)
EDIT="$BUILD/tests/tools/manifest_edit"
# An absolute path to the binary, for runs from another directory.
FTRAIN_ABS=$(cd "$(dirname "$FTRAIN")" && pwd)/$(basename "$FTRAIN")
LINE="--data line --layers 8"

_ge() { [ "$(grep -c '^epoch ' "$1")" -ge "$2" ]; }

# ---- 1. a stop without --run-dir after --resume /abs/path -------------------
# Resumed at its last step, the run only evaluates; a signal sent as soon as
# the rank has installed its handler (SigCgt in /proc shows USR1, before
# MPI_Init) cuts that evaluation short: a stop at the resumed step.  With no
# run directory nothing is saved, whatever path --resume named.
handler_in() {
    _mp=$(pgrep -P "$MPI_PID" 2>/dev/null | head -n 1)
    [ -n "$_mp" ] || return 1
    for _p in $(pgrep -P "$_mp" -x ftrain 2>/dev/null); do
        _m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$_p/status" 2>/dev/null)
        # SIGUSR1 is signal 10: bit 9 of the caught-signal mask.
        [ -n "$_m" ] && [ $((0x$_m & 0x200)) -ne 0 ] && SIG_PID=$_p && return 0
    done
    return 1
}
d="$T/abs"
mpi 1 $LINE --steps 2 --run-dir "$d" >"$d.out" 2>&1
if [ -d /proc/self ] && command -v pgrep >/dev/null 2>&1; then
    : >"$T/norun.out"
    mpi_bg 1 $LINE --steps 2 --resume "$d/ckpt/step-00000002" >>"$T/norun.out" 2>"$T/norun.err"
    SIG_PID=
    wait_for 20 handler_in && kill -USR1 "$SIG_PID"
    wait "$MPI_PID"
    rc=$?
    MPI_PID=
    is "$rc" 138 "stop without --run-dir after --resume of an absolute path: exit 128+USR1, not 75" ||
        why "$(grep -E '^(resume|stop|eval)' "$T/norun.out")" "$(tail -n 3 "$T/norun.err")"
    like "$(grep '^stop:' "$T/norun.out")" "at step 2: .*no run directory: nothing saved" \
        "  and the stop line (at the resumed step) says nothing was saved"
else
    skip "stop without --run-dir after --resume of an absolute path" "no /proc or pgrep"
    skip "  and the stop line says nothing was saved" "no /proc or pgrep"
fi

# ---- 2. --resume of this run's own checkpoint, nothing left to train -------
# The run's last checkpoint is its own however the paths are spelled: the
# end does not try to save that step again (which failed, "already exists").
d="$T/own"
mpi 2 $LINE --steps 10 --run-dir "$d" >"$d.out" 2>&1
ln -s own "$T/ownlink"
# Run from $T: each spelling of the checkpoint beside another of the run
# directory.
for how in relative absolute link; do
    case $how in
    relative) rd=$d from=own/ckpt/step-00000010 ;;
    absolute) rd=own from=$d/ckpt/step-00000010 ;;
    link) rd=own from=$T/ownlink/ckpt/step-00000010 ;;
    esac
    (cd "$T" && FTRAIN=$FTRAIN_ABS && mpi 2 $LINE --steps 10 --run-dir "$rd" --resume "$from" \
        >"$T/own-$how.out" 2>"$T/own-$how.err")
    rc=$?
    ok "$([ "$rc" -eq 0 ] && ! grep -q 'not saved' "$T/own-$how.err"; echo $?)" \
        "--resume of the run's own last checkpoint ($how path), --steps 10: exit 0 (exit $rc)" ||
        why "$(tail -n 3 "$T/own-$how.err")"
done
is "$(ls "$d/ckpt" | grep -c '^step-')" 1 "  the run directory still holds its one checkpoint"

# ---- 3. a checkpoint root that is not a directory ---------------------------
# Found at start-up on every rank, not at the first save after the training.
d="$T/rootfile"
mkdir -p "$d"
echo x >"$d/ckpt"
mpi 2 $LINE --steps 3 --log-every 1 --run-dir "$d" >"$d.out" 2>"$d.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && ! grep -q '^epoch ' "$d.out"; echo $?)" \
    "RUN_DIR/ckpt is a file: refused before training (exit $rc)" ||
    why "$(grep -c '^epoch ' "$d.out") progress lines" "$(cat "$d.err")"
like "$(cat "$d.err")" "rank 0: cannot use the checkpoint directory '$d/ckpt': not a directory" \
    "  rank 0 names the path and what is wrong"
like "$(cat "$d.err")" "rank 1: rank 0 could not set up run directory" "  and rank 1 agrees"

# A checkpoint root no one may write to (immutable: even root cannot).
d="$T/rootro"
mkdir -p "$d/ckpt"
if chattr +i "$d/ckpt" 2>/dev/null; then
    mpi 2 $LINE --steps 3 --log-every 1 --run-dir "$d" >"$d.out" 2>"$d.err"
    rc=$?
    chattr -i "$d/ckpt"
    ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && ! grep -q '^epoch ' "$d.out"; echo $?)" \
        "RUN_DIR/ckpt cannot be written: refused before training (exit $rc)" || why "$(cat "$d.err")"
    like "$(cat "$d.err")" "cannot use the checkpoint directory '$d/ckpt': " "  naming it"
else
    skip "an unwritable checkpoint root" "chattr +i is not supported on this file system"
fi

# ---- 4. a metrics file that cannot be opened ---------------------------------
d="$T/metricsdir"
mkdir -p "$d/metrics.jsonl"
mpi 1 $LINE --steps 2 --run-dir "$d" >"$d.out" 2>"$d.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && ! grep -q '^epoch ' "$d.out"; echo $?)" \
    "metrics.jsonl is a directory: refused before training (exit $rc)"
like "$(cat "$d.err")" "cannot open the metrics file '$d/metrics.jsonl': Is a directory" \
    "  the message names the metrics file, not the run directory" || why "$(cat "$d.err")"

# ---- 5. no good checkpoint: the advice works ---------------------------------
# Its only checkpoint corrupt: the refusal offers no --resume none (which is
# refused too, checkpoints being there), and that refusal does not say they
# are another run's.
d="$T/bad"
mpi 1 $LINE --steps 2 --run-dir "$d" >"$d.out" 2>&1
flip "$d/ckpt/step-00000002/shard-0.ftsh"
mpi 1 $LINE --steps 4 --run-dir "$d" >"$T/bad1.out" 2>"$T/bad1.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q 'none is good' "$T/bad1.err" &&
    ! grep -q -- '--resume none' "$T/bad1.err"; echo $?)" \
    "no good checkpoint: refused (exit $rc), without advising --resume none" || why "$(cat "$T/bad1.err")"
mpi 1 $LINE --steps 4 --run-dir "$d" --resume none >"$T/bad2.out" 2>"$T/bad2.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q 'already holds checkpoints' "$T/bad2.err" &&
    ! grep -q 'another run' "$T/bad2.err"; echo $?)" \
    "  --resume none is refused (exit $rc) without calling them another run's" ||
    why "$(cat "$T/bad2.err")"

# ---- 6. a stop at an epoch end: the resume evaluates that epoch --------------
# One step per epoch (the line set's 1000 samples in one global batch), so
# every stop is at an epoch end.
EP="--data line --layers 8 --global-batch 1000 --micro-batch 125 --steps 10 --deterministic"
mpi 2 $EP >"$T/ep-ref.out" 2>&1
REF=$(hash_of "$T/ep-ref.out")
d="$T/epoch"
: >"$d.out"
mpi_bg 2 $EP --log-every 1 --step-delay-ms 300 --run-dir "$d" >>"$d.out" 2>"$d.err"
if wait_for 30 _ge "$d.out" 3; then
    kill -USR1 "$(rank_pid "$d.out" 0)"
fi
wait "$MPI_PID"
rc=$?
MPI_PID=
at=$(sed -n 's/^stop: .* at step \([0-9]*\):.*/\1/p' "$d.out")
ok "$([ "$rc" -eq 75 ] && [ "${at:-10}" -lt 10 ]; echo $?)" \
    "one step per epoch, USR1: stopped at step $at before the end (exit $rc)" || why "$(tail -n 3 "$d.err")"
mpi 3 $EP --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
is "$rc:$(hash_of "$d.res")" "0:$REF" "  resumed on 3 ranks: the uninterrupted param_hash (evaluation changes nothing)"
evals=$(python3 -c '
import json, sys
s = [json.loads(l)["step"] for l in open(sys.argv[1]) if "\"event\":\"eval\"" in l]
print(" ".join(map(str, sorted(s))))' "$d/metrics.jsonl" 2>&1)
is "$evals" "1 2 3 4 5 6 7 8 9 10" "  metrics.jsonl has one eval event per epoch, the stop's ($at) included"
like "$(sed -n '/^resume:/,$p' "$d.res" | sed -n 2,4p)" "^eval: epoch $at test_loss" \
    "  the resume evaluates epoch $at before it trains on"

# A checkpoint of a writer from before the flag (no "eval_pending"): it
# resumes as it did then, without evaluating first.
d="$T/epoch-old"
: >"$d.out"
mpi_bg 1 $EP --log-every 1 --step-delay-ms 300 --run-dir "$d" >>"$d.out" 2>"$d.err"
if wait_for 30 _ge "$d.out" 3; then
    kill -USR1 "$(rank_pid "$d.out" 0)"
fi
wait "$MPI_PID"
MPI_PID=
at=$(sed -n 's/^stop: .* at step \([0-9]*\):.*/\1/p' "$d.out")
m=$(ls -d "$d"/ckpt/step-* | tail -n 1)/manifest.json
pending=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["record"].get("eval_pending"))' "$m" 2>&1)
is "$pending" True "the stop's checkpoint records its epoch evaluation as pending"
"$EDIT" "$m" record.eval_pending
mpi 2 $EP --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
ok "$([ "$rc" -eq 0 ] && [ "$(hash_of "$d.res")" = "$REF" ] &&
    ! sed -n '/^resume:/,/^epoch /p' "$d.res" | grep -q '^eval:'; echo $?)" \
    "  a record without eval_pending resumes (exit $rc), trains on without evaluating first" ||
    why "$(sed -n 1,8p "$d.res")" "$(tail -n 3 "$d.reserr")"

# ---- 7. a cosine schedule resumed with another total --------------------------
d="$T/cos"
COS="--data line --layers 8 --schedule cosine --lr 0.1"
mpi 1 $COS --steps 4 --run-dir "$d" >"$d.out" 2>&1
mpi 1 $COS --steps 4 --run-dir "$d" >"$T/cos-same.out" 2>"$T/cos-same.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && ! grep -q 'warning' "$T/cos-same.err"; echo $?)" \
    "cosine, resumed with the same total: no warning" || why "$(cat "$T/cos-same.err")"
mpi 1 $COS --steps 40 --run-dir "$d" >"$T/cos-long.out" 2>"$T/cos-long.err"
rc=$?
is "$rc" 0 "cosine, resumed with --steps 40 after 4: allowed"
like "$(cat "$T/cos-long.err")" "warning: resume: this run has 40 steps in all, the checkpoint's run had 4; the cosine learning-rate schedule" \
    "  and warned about, naming both totals" || why "$(cat "$T/cos-long.err")"
d="$T/const"
mpi 1 --data line --layers 8 --steps 4 --run-dir "$d" >"$d.out" 2>&1
mpi 1 --data line --layers 8 --steps 8 --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
ok "$([ "$rc" -eq 0 ] && ! grep -q 'warning' "$d.reserr"; echo $?)" \
    "constant schedule, resumed with another total: no warning" || why "$(cat "$d.reserr")"

# ---- 8. docs and comments say what the code does ----------------------------
n=$(sed -n 's/^enum { *\(CTL_[A-Z_, ]*\)CTL_N *};.*/\1/p' "$SRC/src/train.c" | tr -cd ',' | wc -c)
like "$(cat "$SRC/docs/determinism.md")" "MPI_Allreduce\(MAX\)\` of $n doubles" \
    "docs/determinism.md: the control reduction is CTL_N = $n doubles"
like "$(cat "$SRC/docs/benchmarks.md")" "the $n-double MAX allreduce" \
    "docs/benchmarks.md: the same"
stream=$(sed -n 's/^#define MODEL_RNG_STREAM \(0x[0-9a-f]*\)u*$/\1/p' "$SRC/src/model.c")
like "$(sed -n 1,12p "$SRC/include/ftrain/rng.h")" "rng_make\(seed, $stream \+ l\)" \
    "rng.h: the weights' streams are MODEL_RNG_STREAM ($stream) + layer, as model.c uses"

done_testing
