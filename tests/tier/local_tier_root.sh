#!/bin/sh
# local_tier_root.sh - a node-local checkpoint is resumed from only by a run
# of the same checkpoint root (its .root-id, docs/checkpoint-format.md):
#
# 1. A run killed after its local saves, relaunched on the same run
#    directory: resumed from the node-local tier, and it ends bit-exactly.
# 2. A new run directory given the same local directory, which holds that
#    run's newer local checkpoints: they are another run's, said so; the
#    run starts fresh and ends with a fresh run's param_hash.
# 3. The same after the checkpoint root was moved away to start afresh (as
#    the refusals advise): a fresh start, not the local checkpoints.
# 4. A damaged .root-id: exit 1 naming it, before any training, nothing
#    in the root changed.
. "$(dirname "$0")/../lib.sh"
need_mpi
L="$T/local"
RUN="--data line --layers 8 --deterministic --threads 1 --steps 16 --ckpt-every 100"
LOCAL="--ckpt-local $L --ckpt-local-every 2 --step-delay-ms 40"

mpi 1 $RUN --run-dir "$T/whole" >"$T/whole.out" 2>&1
want=$(hash_of "$T/whole.out")
ok "$([ -n "$want" ]; echo $?)" "the uninterrupted run ends ($want)" || why "$(cat "$T/whole.out")"

# ---- 1. the same run directory: its own local checkpoints ------------------
mpi 1 $RUN $LOCAL --run-dir "$T/ra" --fault kill@11:0 >"$T/ra1.out" 2>&1
ok "$(ls "$L" | grep -q '^step-0000001[0-9]$\|^step-0000000[6-9]$'; echo $?)" \
    "a run killed at step 11 left local checkpoints" || why "$(ls -A "$L"; tail -n 3 "$T/ra1.out")"
mpi 1 $RUN $LOCAL --run-dir "$T/ra" >"$T/ra2.out" 2>"$T/ra2.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q '^resume: from the node-local tier' "$T/ra2.out"; echo $?)" \
    "relaunched on the same run directory: resumed from the node-local tier (exit $rc)" ||
    why "$(cat "$T/ra2.err"; grep -v '^epoch' "$T/ra2.out")"
is "$(hash_of "$T/ra2.out")" "$want" "  and ends bit-exactly"

# ---- 2. a new run directory, the same local directory ----------------------
mpi 1 $RUN $LOCAL --run-dir "$T/ra3" --fault kill@11:0 >"$T/ra3.out" 2>&1
mpi 1 $RUN $LOCAL --run-dir "$T/rb" >"$T/rb.out" 2>"$T/rb.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q "node-local checkpoint of step [0-9]* cannot be used (.* is another run's: it was saved under the checkpoint root [0-9a-f]*, this run's is [0-9a-f]*" "$T/rb.err" &&
    ! grep -q '^resume:' "$T/rb.out"; echo $?)" \
    "a new run directory does not continue the local checkpoints of another run (exit $rc)" ||
    why "$(cat "$T/rb.err"; grep '^resume' "$T/rb.out")"
is "$(hash_of "$T/rb.out")" "$want" "  it starts fresh and ends as a fresh run"

# ---- 3. the root moved away to start afresh --------------------------------
mpi 1 $RUN $LOCAL --run-dir "$T/rc" --fault kill@11:0 >"$T/rc1.out" 2>&1
mv "$T/rc/ckpt" "$T/rc-old"
mpi 1 $RUN $LOCAL --run-dir "$T/rc" >"$T/rc2.out" 2>"$T/rc2.err"
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q "is another run's" "$T/rc2.err" && ! grep -q '^resume:' "$T/rc2.out"; echo $?)" \
    "the checkpoint root moved away: a fresh start, not the local checkpoints (exit $rc)" ||
    why "$(cat "$T/rc2.err"; grep '^resume' "$T/rc2.out")"
is "$(hash_of "$T/rc2.out")" "$want" "  and it ends as a fresh run"

# ---- 4. a damaged .root-id --------------------------------------------------
printf 'not an id\n' >"$T/rc/ckpt/.root-id"
before=$(ls -A "$T/rc/ckpt" | tr '\n' ' ')
mpi 1 $RUN --run-dir "$T/rc" --steps 20 >"$T/bad.out" 2>"$T/bad.err"
rc=$?
ok "$([ "$rc" -eq 1 ] && grep -q "ckpt/.root-id' is damaged (not 16 hex digits and a newline)" "$T/bad.err" &&
    ! grep -q '^epoch' "$T/bad.out"; echo $?)" \
    "a damaged .root-id: exit 1 naming it, before any training (exit $rc)" || why "$(cat "$T/bad.err")"
is "$(ls -A "$T/rc/ckpt" | tr '\n' ' ')" "$before" "  the checkpoint root is untouched"

done_testing
