#!/bin/sh
# pytorch_example.sh - examples/pytorch_ddp.py, a PyTorch DDP program made
# requeue-safe with the Python binding, stopped and resumed under torchrun
# and under ftrain_ckpt.run, the torchrun that keeps 75 (TAP).
#
# On this machine (gloo on the CPU; every launch a static rendezvous on
# 127.0.0.1, --nnodes 1 --node_rank 0 --master_addr 127.0.0.1, after a
# check that a TCPStore can meet there):
#   1. U: 2 processes under `python3 -m torch.distributed.run`, not
#      stopped: exit 0; its done line (samples_hash, lr, test_loss,
#      param_hash) is what the others are held to;
#   2. 3 processes under `python3 -m ftrain_ckpt.run`; SIGUSR1 to rank 1
#      only: the launcher exits 75 (every rank exited 75), rank 0 reports
#      the stop it was not signalled for, one committed checkpoint that
#      `ckptctl verify` accepts and `ckptctl inspect` reads (data position,
#      LR schedule, samples chain and RNG state in it);
#   3. resumed on 2 under torch.distributed.run (world 3 -> 2), to the end:
#      the same samples_hash and lr as U, test_loss within 1e-4 relative
#      (across world sizes the sums differ in their last bits);
#   4. 2 processes under ftrain_ckpt.run; SIGUSR1 to the launcher: it sends
#      it on, the ranks commit a checkpoint, the launcher exits 75; resumed on
#      2 under ftrain_ckpt.run (2 -> 2): exit 0, and U's samples_hash, lr and
#      param_hash: a stop and resume on one world size changes no bit.
# The example under SLURM: tests/slurm/pytorch_sbatch.sh (a planned stop,
# the requeue, the resume) and tests/slurm/pytorch_slurm.sh (its node-local
# tier and watchdog, a node lost and the job finished on the nodes left).
#
# Skips when the python ($PYTHON, default /usr/bin/python3) lacks numpy or
# torch with gloo, or the library is not built ($BUILD/libftrain-ckpt.so.2
# or FTRAIN_CKPT_LIB).  About a minute on a busy 2-core machine (each
# process imports torch).
. "$(dirname "$0")/../lib.sh"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PROG=$root/examples/pytorch_ddp.py
need_torch_gloo
case $BUILD in /*) bdir=$BUILD ;; *) bdir=$root/$BUILD ;; esac
need_ckpt_lib
[ -x "$bdir/ckptctl" ] || skip_all "$BUILD/ckptctl not built (make)"
# ftrain_ckpt.run: this tree's package.
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export GLOO_SOCKET_IFNAME=lo PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
STEPS=300
ARGS="--steps $STEPS --log-every 25 --step-delay 0.01"

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# launch TAG N RUN_DIR torchrun|ftrain: the example on N processes under
# python3 -m torch.distributed.run or python3 -m ftrain_ckpt.run, in the
# background, bounded by timeout; output (the launcher's and the ranks')
# in $T/TAG.out, the launcher's own pid in $T/TAG.pid, timeout's in $bg.
# --redirects 2 --tee 2 for torchrun: Debian 12's torch 1.13 under Python
# 3.11 fails to parse their default "0" (docs/python.md); ftrain_ckpt.run
# parses it.  A static rendezvous on 127.0.0.1, not --standalone: torch
# 1.13's c10d rendezvous gives the workers this host's fully qualified name
# as MASTER_ADDR, and on a machine whose host name does not resolve (no
# "127.0.1.1 <hostname>" line in /etc/hosts) they wait for it until the
# timeout and never say why.
launch() {
    _tag=$1 _n=$2 _dir=$3
    case $4 in
    torchrun) set -- torch.distributed.run --redirects 2 --tee 2 ;;
    *) set -- ftrain_ckpt.run ;;
    esac
    rm -f "$T/$_tag.pid"
    # shellcheck disable=SC2086,SC2016
    env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT timeout -k 5 150 \
        sh -c 'echo $$ >"$0"; exec "$@"' "$T/$_tag.pid" \
        "$PY" -m "$@" --nnodes 1 --node_rank 0 --master_addr 127.0.0.1 \
        --master_port "$(free_port)" --monitor_interval 1 --nproc_per_node "$_n" \
        "$PROG" --run-dir "$_dir" $ARGS >"$T/$_tag.out" 2>&1 &
    bg=$!
    track_bg "$bg"
}

pid_of() { # TAG RANK: the pid the rank printed in its "world:" line
    sed -n "s/^world: rank $2 of .* pid \([0-9]*\).*/\1/p" "$T/$1.out" | head -n 1
}

logged_past() { # FILE STEP: a progress line at or past STEP
    awk -v s="$2" '$1 == "step" { split($2, a, "/"); if (a[1] + 0 >= s) f = 1 } END { exit !f }' "$1"
}

field() { # NAME LINE: NAME's value in a "done:" line
    printf '%s\n' "$2" | sed -n "s/.* $1=\([^ ]*\).*/\1/p"
}

stop_step() { # TAG: the step of rank 0's "stop:" line
    sed -n 's/^stop: signal USR1 .*at step \([0-9]*\).*/\1/p' "$T/$1.out" | head -n 1
}

# The rendezvous's own means first (a TCPStore server and a client meeting
# on 127.0.0.1, as torch.distributed.run starts them; on another free port,
# so no socket of the probe's can stand in the way of the runs), so that a
# machine where it cannot work fails here, saying why, not 150 s later.
probe=$(free_port)
timeout -k 5 60 "$PY" - "$probe" >"$T/store.out" 2>&1 <<'PYEOF'
import sys
from datetime import timedelta
import torch.distributed as dist
port = int(sys.argv[1])
server = dist.TCPStore("127.0.0.1", port, 2, True, timedelta(seconds=20))
client = dist.TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=20))
client.set("probe", "ok")
print(server.get("probe").decode())
PYEOF
src=$?
[ "$src" = 0 ] && [ "$(tail -n 1 "$T/store.out")" = ok ]
ok $? "the rendezvous can work here: a TCPStore on 127.0.0.1:$probe answers" ||
    why "exit $src: a TCPStore server and client on 127.0.0.1 could not meet, so the" \
        "static rendezvous of torch.distributed.run below cannot either:" "$(tail -n 5 "$T/store.out")"

# ---- 1. U: 2 processes under torch.distributed.run, not stopped -------------
launch u 2 "$T/u" torchrun
wait "$bg"
is "$?" 0 "U: torch.distributed.run, 2 processes, not stopped: exit 0" || why "$(tail -n 30 "$T/u.out")"
U=$(grep "^done: step=$STEPS " "$T/u.out")
like "$U" "^done: step=$STEPS .*samples_hash=[0-9a-f]{16} lr=[0-9.e-]+ test_loss=[0-9.e-]+ param_hash=[0-9a-f]{16}" \
    "U: trained to step $STEPS: samples_hash, lr, test_loss, param_hash"

# ---- 2. 3 processes under ftrain_ckpt.run, USR1 to rank 1 ------------------
run=$T/run
launch l1 3 "$run" ftrain
if wait_for 100 logged_past "$T/l1.out" 50 && pid=$(pid_of l1 1) && [ -n "$pid" ]; then
    kill -USR1 "$pid"
    ok $? "3 ranks training under ftrain_ckpt.run; SIGUSR1 sent to rank 1 only (pid $pid)"
else
    ok 1 "3 ranks training (step 50 logged)"
fi
wait "$bg"
is "$?" 75 "ftrain_ckpt.run exited 75: every rank exited 75" || why "$(tail -n 30 "$T/l1.out")"
stop1=$(stop_step l1)
like "$(grep '^stop:' "$T/l1.out")" "^stop: signal USR1 \\(another rank's\\) at step [0-9]+: checkpoint committed" \
    "rank 0 reports the stop it was not signalled for"
step_dir=$run/ckpt/$(printf 'step-%08d' "${stop1:-0}")
"$bdir/ckptctl" verify "$step_dir" >"$T/verify1" 2>&1
ok $? "ckptctl verify: the stop step ${stop1:-?} is committed and good" || why "$(cat "$T/verify1")"
"$bdir/ckptctl" inspect --json "$step_dir" >"$T/inspect1" 2>&1
"$PY" - "$T/inspect1" "${stop1:-0}" >"$T/judge1" 2>&1 <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["record"]
objs = r.get("torch_state", {}).get("objects", {})
bad = [what for what, good in (
    (f"world_size {d['world_size']}", d["world_size"] == 3),
    (f"step {r.get('step')}", r.get("step") == int(sys.argv[2])),
    ("no epoch or cursor", "epoch" in r and "cursor" in r),
    ("no torch RNG state", "torch" in r.get("rng", {})),
    ("no optim/0/exp_avg", any(t["name"] == "optim/0/exp_avg" for t in d["tensors"])),
    (f"state objects {sorted(objs)}", {"scheduler", "sampler", "samples_hash"} <= set(objs)))
    if not good]
print("; ".join(bad) or "ok")
PYEOF
is "$(cat "$T/judge1")" ok \
    "ckptctl inspect: 3 shards; step, epoch, cursor, RNG; Adam's moments; scheduler, sampler, samples_hash"

# ---- 3. resumed on 2 under torch.distributed.run, to the end ----------------
launch l2 2 "$run" torchrun
wait "$bg"
is "$?" 0 "resumed on 2 under torch.distributed.run: finished, exit 0" || why "$(tail -n 30 "$T/l2.out")"
like "$(grep '^resume:' "$T/l2.out")" "^resume: from .*step-0*${stop1:-x} step ${stop1:-x} .*world 3 -> 2" \
    "it resumed from the stop step, world 3 -> 2"
D=$(grep "^done: step=$STEPS " "$T/l2.out")
is "$(field samples_hash "$D")" "$(field samples_hash "$U")" \
    "stopped on 3, resumed on 2: the samples of the uninterrupted run on 2, in its order (samples_hash)"
is "$(field lr "$D")" "$(field lr "$U")" "stopped on 3, resumed on 2: the same learning rate at the end"
awk -v a="$(field test_loss "$D")" -v b="$(field test_loss "$U")" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d / b <= 1e-4) }'
ok $? "stopped on 3, resumed on 2: test_loss $(field test_loss "$D") within 1e-4 relative of $(field test_loss "$U")"

# ---- 4. 2 processes under ftrain_ckpt.run, USR1 to the launcher; 2 -> 2 ------
run2=$T/run2
launch b1 2 "$run2" ftrain
if wait_for 100 logged_past "$T/b1.out" 50 && lpid=$(cat "$T/b1.pid") && [ -n "$lpid" ]; then
    kill -USR1 "$lpid"
    ok $? "2 ranks training under ftrain_ckpt.run; SIGUSR1 sent to the launcher (pid $lpid)"
else
    ok 1 "2 ranks training under ftrain_ckpt.run (step 50 logged)"
fi
wait "$bg"
is "$?" 75 "ftrain_ckpt.run sent SIGUSR1 on, the ranks stopped: exit 75" || why "$(tail -n 30 "$T/b1.out")"
like "$(grep '^ftrain-torchrun: SIGUSR1 sent on' "$T/b1.out")" "SIGUSR1 sent on to worker pid\\(s\\) [0-9]+, [0-9]+" \
    "the launcher says it sent SIGUSR1 on to both workers"
stop2=$(stop_step b1)
like "$(grep '^stop:' "$T/b1.out")" "^stop: signal USR1 at step [0-9]+: checkpoint committed" \
    "rank 0 got the signal itself, from the launcher"
"$bdir/ckptctl" verify "$run2/ckpt/$(printf 'step-%08d' "${stop2:-0}")" >"$T/verify2" 2>&1
ok $? "ckptctl verify: the stop step ${stop2:-?} is committed and good" || why "$(cat "$T/verify2")"
launch b2 2 "$run2" ftrain
wait "$bg"
is "$?" 0 "resumed on 2 under ftrain_ckpt.run: finished, exit 0" || why "$(tail -n 30 "$T/b2.out")"
like "$(grep '^resume:' "$T/b2.out")" "^resume: from .*step ${stop2:-x} .*world 2 -> 2" \
    "it resumed from the stop step, world 2 -> 2"
D=$(grep "^done: step=$STEPS " "$T/b2.out")
is "$(field param_hash "$D")" "$(field param_hash "$U")" \
    "stopped and resumed on 2 = uninterrupted on 2, bit for bit (param_hash)"
is "$(field samples_hash "$D") $(field lr "$D")" "$(field samples_hash "$U") $(field lr "$U")" \
    "stopped and resumed on 2: the same samples_hash and lr"

done_testing
