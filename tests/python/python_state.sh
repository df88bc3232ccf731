#!/bin/sh
# python_state.sh - a training run's whole state through the Python binding
# (save_state/load_state with state=), the resumable, world-size-invariant
# sampler (ftrain_ckpt.ResumableSampler) and run directories (resume_point;
# every root argument takes a run directory for its ckpt/), in one process
# (tests/python/state_checks.py says what each part checks; TAP).
#
# The sampler's N -> M resume is checked without torch.distributed: N
# sampler objects stand for N ranks, are stopped after k global batches,
# their state is restored into M new ones, and the union of the ranks'
# shares of each global batch is compared with one uninterrupted sampler.
#
# Skips, with the reason, when the python ($PYTHON, default /usr/bin/python3)
# lacks numpy or torch, or when the library is not built
# ($BUILD/libftrain-ckpt.so.2, or FTRAIN_CKPT_LIB).
. "$(dirname "$0")/../lib.sh"

here=$(cd "$(dirname "$0")" && pwd)
need_python numpy torch
need_ckpt_lib

mkdir -p "$T/w"
timeout -k 5 300 "$PY" "$here/state_checks.py" "$T/w" >"$T/out" 2>&1
rc=$?
# The checker says first how many checks it makes; the plan is those, one
# for the count and one for its run to the end.
n=$(sed -n 's/^plan \([0-9][0-9]*\)$/\1/p' "$T/out" | head -n 1)
plan $((${n:-0} + 2))
tap_from "$T/out" state_checks.py
ok $rc "state_checks.py ran to its end (exit $rc)" || why "$(tail -n 20 "$T/out")"
