#!/bin/sh
# deep_model.sh - the deepest model (15 hidden layers) with Adam: it trains
# and saves, its checkpoint holds every tensor of the state (weights,
# biases and both moments of each of the 16 layers), and it resumes on
# another world size to the end.
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
command -v python3 >/dev/null 2>&1 || skip_all "python3 not installed"
CKPTCTL="$BUILD/ckptctl"
LINE="--data line --global-batch 32 --micro-batch 8 --lr 0.01"

d="$T/deep"
layers=4,4,4,4,4,4,4,4,4,4,4,4,4,4,4
mpi 2 $LINE --layers $layers --steps 4 --ckpt-every 2 --run-dir "$d" >"$d.out" 2>"$d.err"
rc=$?
is "$rc" 0 "15 hidden layers with Adam: trains and saves (exit $rc)" || why "$(tail -n 3 "$d.err")"
"$CKPTCTL" inspect --json "$d/ckpt" >"$T/deep.json" 2>/dev/null
is "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["tensors"]))' "$T/deep.json" 2>&1)" 96 \
    "  its checkpoint holds 96 tensors (16 layers x weight, bias x parameters, 2 moments)"
mpi 3 $LINE --layers $layers --steps 6 --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
ok "$([ "$rc" -eq 0 ] && grep -q '^resume: ' "$d.res"; echo $?)" "  and resumes on 3 ranks to the end (exit $rc)" ||
    why "$(tail -n 3 "$d.reserr")"

done_testing
