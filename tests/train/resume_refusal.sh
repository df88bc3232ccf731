#!/bin/sh
# resume_refusal.sh - which checkpoints a resume refuses, what the refusal
# says, and that it leaves the run directory untouched:
#
# 1. --resume of the run's own last checkpoint, with nothing left to train,
#    however the path is spelled (relative, absolute, through a link): not
#    a refusal, and the end does not save that step again.
# 2. No good checkpoint: the refusal does not advise --resume none (which is
#    refused too), and that refusal does not call them another run's.
# 3. --deterministic resumed with another BLAS thread count: refused.
# 4. --resume none, and --resume of an older checkpoint, into a run
#    directory that holds (newer) checkpoints: refused before any training,
#    the checkpoints untouched; the same --resume into a new run directory
#    runs.
# 5. The newest checkpoint cannot be read for a moment (rank 0's first open
#    of a shard-1.ftsh, the newest's verification, fails with EIO, as on a
#    network file system that lost its server): the
#    run stops with exit 1 naming the I/O error, and neither resumes from
#    an older checkpoint nor sets the newest aside as bad; once it can be
#    read, the run resumes from it.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
command -v python3 >/dev/null 2>&1 || skip_all "python3 not installed"
# An absolute path to the binary, for runs from another directory.
FTRAIN_ABS=$(cd "$(dirname "$FTRAIN")" && pwd)/$(basename "$FTRAIN")
TINY="--data line --layers 8"
LINE="--data line --global-batch 32 --micro-batch 8 --lr 0.01"

# ---- 1. --resume of this run's own checkpoint, nothing left to train -------
# The run's last checkpoint is its own however the paths are spelled: the
# end does not try to save that step again (which failed, "already exists").
d="$T/own"
mpi 2 $TINY --steps 10 --run-dir "$d" >"$d.out" 2>&1
ln -s own "$T/ownlink"
# Run from $T: each spelling of the checkpoint beside another of the run
# directory.
for how in relative absolute link; do
    case $how in
    relative) run_dir=$d from=own/ckpt/step-00000010 ;;
    absolute) run_dir=own from=$d/ckpt/step-00000010 ;;
    link) run_dir=own from=$T/ownlink/ckpt/step-00000010 ;;
    esac
    (cd "$T" && FTRAIN=$FTRAIN_ABS && mpi 2 $TINY --steps 10 --run-dir "$run_dir" --resume "$from" \
        >"$T/own-$how.out" 2>"$T/own-$how.err")
    rc=$?
    ok "$([ "$rc" -eq 0 ] && ! grep -q 'not saved' "$T/own-$how.err"; echo $?)" \
        "--resume of the run's own last checkpoint ($how path), --steps 10: exit 0 (exit $rc)" ||
        why "$(tail -n 3 "$T/own-$how.err")"
done
is "$(ls "$d/ckpt" | grep -c '^step-')" 1 "  the run directory still holds its one checkpoint"

# ---- 2. no good checkpoint: the advice works ---------------------------------
# Its only checkpoint corrupt: the refusal offers no --resume none (which is
# refused too, checkpoints being there), and that refusal does not say they
# are another run's.
d="$T/bad"
mpi 1 $TINY --steps 2 --run-dir "$d" >"$d.out" 2>&1
flip "$d/ckpt/step-00000002/shard-0.ftsh"
mpi 1 $TINY --steps 4 --run-dir "$d" >"$T/bad1.out" 2>"$T/bad1.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q 'none is good' "$T/bad1.err" &&
    ! grep -q -- '--resume none' "$T/bad1.err"; echo $?)" \
    "no good checkpoint: refused (exit $rc), without advising --resume none" || why "$(cat "$T/bad1.err")"
mpi 1 $TINY --steps 4 --run-dir "$d" --resume none >"$T/bad2.out" 2>"$T/bad2.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q 'already holds checkpoints' "$T/bad2.err" &&
    ! grep -q 'another run' "$T/bad2.err"; echo $?)" \
    "  --resume none is refused (exit $rc) without calling them another run's" ||
    why "$(cat "$T/bad2.err")"

# ---- 3. a deterministic resume with another BLAS thread count ------------
d="$T/thr"
mpi 1 --data line --deterministic --steps 4 --run-dir "$d" >"$d.out" 2>&1
mpi 1 --data line --deterministic --steps 6 --threads 2 --run-dir "$d" >"$d.res" 2>"$d.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q 'BLAS threads differ: the checkpoint was written with 1 per rank, this run has 2' "$d.err"; echo $?)" \
    "--deterministic resume with --threads 2 after 1: refused (exit $rc), bits would differ" || why "$(cat "$d.err")"
mpi 1 --data line --deterministic --steps 6 --run-dir "$d" >"$d.res2" 2>&1
is "$?" 0 "  the same resume with the same thread count runs"

# ---- 4. --resume none / an older --resume into a directory with checkpoints ----
d="$T/two"
mpi 2 $LINE --steps 8 --ckpt-every 2 --run-dir "$d" >"$d.out" 2>&1
before=$(ls "$d/ckpt" | tr '\n' ' ')
mpi 2 $LINE --steps 3 --ckpt-every 1 --run-dir "$d" --resume none >"$T/none.out" 2>"$T/none.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && grep -q "already holds checkpoints (newest step-00000008)" "$T/none.err"; echo $?)" \
    "--resume none into a run directory with checkpoints: refused (exit $rc), naming the newest" ||
    why "$(cat "$T/none.err")"
ok "$(! grep -q '^epoch ' "$T/none.out"; echo $?)" "  before any training"
is "$(ls "$d/ckpt" | tr '\n' ' ')" "$before" "  the checkpoints are untouched"
mpi 2 $LINE --steps 8 --ckpt-every 2 --run-dir "$d" --resume "$d/ckpt/step-00000004" >"$T/old.out" 2>"$T/old.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q "is step 4, but .* already holds newer checkpoints (newest step-00000008)" "$T/old.err"; echo $?)" \
    "--resume of an older checkpoint beside newer ones: refused (exit $rc)" || why "$(cat "$T/old.err")"
is "$(ls "$d/ckpt" | tr '\n' ' ')" "$before" "  the checkpoints are untouched"
mpi 2 $LINE --steps 8 --ckpt-every 2 --run-dir "$T/branch" --resume "$d/ckpt/step-00000004" >"$T/br.out" 2>"$T/br.err"
is "$?" 0 "  the same --resume into a new --run-dir runs"

# ---- 5. the newest checkpoint cannot be read: an error, not a verdict --------
if have_shim stallio; then
    d="$T/eio"
    mpi 2 $LINE --steps 8 --ckpt-every 4 --run-dir "$d" >"$d.out" 2>&1
    timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --oversubscribe -n 2 -x LD_PRELOAD="$SHIM" \
        -x STALLIO_RANK=0 -x STALLIO_OP=open -x STALLIO_SECONDS=0 -x STALLIO_FAIL=5 \
        -x STALLIO_MATCH=shard-1.ftsh \
        "$FTRAIN" --device cpu $LINE --steps 12 --ckpt-every 4 --run-dir "$d" >"$T/eio.out" 2>"$T/eio.err"
    rc=$?
    ok "$([ "$rc" -eq 1 ] && grep -q "step-00000008 could not be read, so whether it is good is not known: .*Input/output error; not resuming from an older checkpoint" "$T/eio.err"; echo $?)" \
        "an I/O error opening the newest checkpoint: exit 1 (exit $rc), naming it" || why "$(cat "$T/eio.err")"
    ok "$([ -d "$d/ckpt/step-00000008" ] && ! ls "$d/ckpt" | grep -q corrupt && ! grep -q '^resume:' "$T/eio.out"; echo $?)" \
        "  not resumed from step 4, and step 8 not set aside" || why "$(ls "$d/ckpt"; cat "$T/eio.out")"
    mpi 2 $LINE --steps 12 --ckpt-every 4 --run-dir "$d" >"$T/eio2.out" 2>&1
    ok "$([ "$?" -eq 0 ] && grep -q '^resume: from .*step-00000008 step 8' "$T/eio2.out"; echo $?)" \
        "  once it can be read, the run resumes from it" || why "$(cat "$T/eio2.out")"
else
    for i in 1 2 3; do skip "case 5" "$SHIM_WHY"; done
fi

done_testing
