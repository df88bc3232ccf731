#!/bin/sh
# torchrun_launcher.sh - python3 -m ftrain_ckpt.run (ftrain-torchrun), the
# torchrun that keeps the workers' exit 75 and sends the stop signal on to
# them (python/ftrain_ckpt/run.py, docs/python.md) (TAP).
#
# The workers are small Python scripts without torch (each exits as told,
# or waits for a signal), so every case costs one launcher's torch import:
#   1. bad input: no script, an unknown option, a script that is not there:
#      exit 2 with a message saying which, nothing started;
#   2. the exit status: 0 when all exit 0 (with --redirects and --tee at
#      their default 0, which torch 1.13's own parsing cannot take under
#      Python 3.11); 75 when all exit 75, and no restart for it even with
#      --max_restarts 2; 3 for a worker's 3 beside another's 75; 137 for a
#      worker killed by SIGKILL; the rule itself (exit_status) on failures
#      with times, and first_node on SLURM node lists, without torch;
#   3. signals: USR1 to the launcher at once, while it imports torch and
#      before the workers exist, reaches both workers once they handle it
#      (they install their handlers 1.5 s after they start, so an early
#      send would kill them): exit 75; TERM to the launcher once the workers
#      run: sent on, exit 75;
#   4. under srun (SLURM_STEP_ID, SLURM_PROCID, SLURM_NTASKS faked): two
#      launchers with no rendezvous option meet as 2 nodes, ranks 0 and 1
#      of world 2.
#
# Skips when the python ($PYTHON, default /usr/bin/python3) has no torch
# with torch.distributed.  About 50 s on a busy 2-core machine.
. "$(dirname "$0")/../lib.sh"

PY=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ -x "$PY" ] || skip_all "$PY not found (set PYTHON)"
"$PY" -c 'import torch.distributed.run' 2>/dev/null ||
    skip_all "$PY has no torch with torch.distributed (apt-get install python3-torch)"
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT SLURM_STEP_ID SLURM_PROCID SLURM_NTASKS

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

W=$T/worker.py
cat >"$W" <<'EOF'
import os, signal, sys, time
rank = int(os.environ["RANK"])
print(f"start rank {rank} of {os.environ['WORLD_SIZE']} restart "
      f"{os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
mode = os.environ.get("MODE", "exit:0")
if mode.startswith("exit:"):  # exit:C0,C1,...: rank r exits Cr (-N: killed by N); exit:C: all
    codes = mode[5:].split(",")  # C@S: after S seconds
    code, _, after = codes[rank % len(codes)].partition("@")
    code = int(code)
    time.sleep(float(after or 0))
    if code < 0:
        os.kill(os.getpid(), -code)
    sys.exit(code)
time.sleep(float(os.environ.get("LATE", "0")))  # no handler yet: a slow start
got = []
for s in (signal.SIGUSR1, signal.SIGTERM):
    signal.signal(s, lambda n, f: got.append(n))
print(f"ready rank {rank}", flush=True)
end = time.time() + 60
while not got and time.time() < end:
    time.sleep(0.02)
print(f"rank {rank} got {signal.Signals(got[0]).name if got else 'nothing'}", flush=True)
sys.exit(75 if got else 1)
EOF

# ftr TAG ARGS...: the launcher in the background (output in $T/TAG.out, its
# pid in $T/TAG.pid, timeout's in $bg); ftr_wait: its exit status in $rc.
ftr() {
    _tag=$1
    shift
    rm -f "$T/$_tag.pid"
    # shellcheck disable=SC2016
    timeout -k 5 90 sh -c 'echo $$ >"$0"; exec "$@"' "$T/$_tag.pid" \
        "$PY" -m ftrain_ckpt.run "$@" >"$T/$_tag.out" 2>&1 &
    bg=$!
    track_bg "$bg"
}
ftr_wait() {
    wait "$bg"
    rc=$?
}
local_args() { # a static rendezvous on 127.0.0.1
    echo "--nnodes 1 --node_rank 0 --master_addr 127.0.0.1 --master_port $(free_port) --monitor_interval 0.5"
}
says() { # TAG: the launcher's own lines
    grep '^ftrain-torchrun: ' "$T/$1.out"
}

# ---- 1. bad input ------------------------------------------------------------
ftr none
ftr_wait
is "$rc" 2 "no script: exit 2"
like "$(cat "$T/none.out")" "ftrain-torchrun: error: the following arguments are required: training_script" \
    "no script: the message names what is missing"
ftr bogus --bogus "$W"
ftr_wait
is "$rc" 2 "an unknown option before the script: exit 2"
like "$(cat "$T/bogus.out")" "ftrain-torchrun: error: unrecognized arguments: --bogus" \
    "an unknown option: the message names it"
# shellcheck disable=SC2046
ftr missing $(local_args) --nproc_per_node 2 "$T/no-such-script.py"
ftr_wait
is "$rc" 2 "a script that is not there: exit 2"
like "$(cat "$T/missing.out")" "ftrain-torchrun: error: no such script: $T/no-such-script.py" \
    "a script that is not there: the message names it"
ok "$(grep -q '^start rank' "$T/missing.out"; [ $? = 1 ]; echo $?)" "a script that is not there: no worker started"

# ---- 2. the exit status -----------------------------------------------------------
# shellcheck disable=SC2046
MODE=exit:0,0 ftr e0 $(local_args) --nproc_per_node 2 "$W"
ftr_wait
is "$rc" 0 "every worker exits 0 (--redirects and --tee at their default 0): exit 0" ||
    why "$(tail -n 20 "$T/e0.out")"
is "$(grep -c '^start rank' "$T/e0.out")" 2 "both workers ran, their stdout on the launcher's"
# shellcheck disable=SC2046
MODE=exit:75,75 ftr e75 $(local_args) --max_restarts 2 --nproc_per_node 2 "$W"
ftr_wait
is "$rc" 75 "every worker exits 75: exit 75" || why "$(tail -n 20 "$T/e75.out")"
is "$(grep -c '^start rank .* restart 0$' "$T/e75.out") $(grep -c '^start rank' "$T/e75.out")" "2 2" \
    "--max_restarts 2: a stop (75) is not restarted"
like "$(says e75)" "every worker that did not exit 0 exited 75 \\(stopped" "the launcher says why 75"
# shellcheck disable=SC2046
# The 75 a second after the 3: torchrun ends the other workers when one
# has exited, so with both at once the 75 could come first and the 3
# never (seen once on a loaded machine).
MODE=exit:75@1,3 ftr e3 $(local_args) --nproc_per_node 2 "$W"
ftr_wait
is "$rc" 3 "one worker exits 75, the other 3: exit 3 (a failure is no stop)" || why "$(tail -n 20 "$T/e3.out")"
like "$(says e3)" "worker rank 1 \\(local rank 1, pid [0-9]+\\) exited 3" "the launcher names the failed worker"
# shellcheck disable=SC2046
MODE=exit:0,-9 ftr e9 $(local_args) --nproc_per_node 2 "$W"
ftr_wait
is "$rc" 137 "a worker killed by SIGKILL: exit 128 + 9" || why "$(tail -n 20 "$T/e9.out")"
like "$(says e9)" "worker rank 1 .* was killed by SIGKILL" "the launcher says which signal"
# ...and dies of that signal itself: srun and ftrain-supervise then see a
# task killed by a signal (a relaunch), not a program that exited 137.
# shellcheck disable=SC2046
MODE=exit:0,-9 timeout -k 5 90 "$PY" -c 'import subprocess, sys
print(subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode)' \
    "$PY" -m ftrain_ckpt.run $(local_args) --nproc_per_node 2 "$W" >"$T/e9sig" 2>&1
is "$(cat "$T/e9sig")" -9 "  the launcher itself ends by SIGKILL (a parent's wait sees the signal, not exit 137)"
out=$("$PY" - 2>&1 <<'EOF'
from types import SimpleNamespace as F
from ftrain_ckpt.run import exit_status, first_node
import sys
print("torch loaded" if "torch" in sys.modules else "no torch",
      exit_status({}),
      exit_status({0: F(exitcode=75, timestamp=5), 1: F(exitcode=75, timestamp=5)}),
      exit_status({0: F(exitcode=75, timestamp=4), 1: F(exitcode=3, timestamp=6)}),
      exit_status({0: F(exitcode=1, timestamp=6), 1: F(exitcode=3, timestamp=5)}),
      exit_status({1: F(exitcode=2, timestamp=5), 0: F(exitcode=4, timestamp=5)}),
      exit_status({0: F(exitcode=-15, timestamp=5)}),
      first_node("n[1-3],m2"), first_node("a1,b2"), first_node("gpu[07,09]"), first_node("x"))
EOF
)
is "$out" "no torch 0 75 3 3 4 143 n1 a1 gpu07 x" \
    "exit_status: none 0; all 75; a failure beats 75; the earliest; a tie to the lowest rank; -15 is 143; first_node"

# ---- 3. signals ------------------------------------------------------------------
# USR1 at once: the launcher is importing torch; the workers, once started,
# take 1.5 s to install their handlers (an early USR1 would kill them).
# shellcheck disable=SC2046
# catches_usr1 PIDFILE: the process has a handler for SIGUSR1 (SigCgt bit
# 9): the launcher took the signal, and sending it now tests the hold, not
# how fast Python starts on a loaded machine.
catches_usr1() {
    _cu=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$(cat "$1" 2>/dev/null)/status" 2>/dev/null)
    [ -n "$_cu" ] && [ $((0x$_cu & 0x200)) -ne 0 ]
}
MODE=wait LATE=1.5 ftr u1 $(local_args) --nproc_per_node 2 "$W"
if wait_for 20 catches_usr1 "$T/u1.pid"; then
    kill -USR1 "$(cat "$T/u1.pid")"
fi
ftr_wait
is "$rc" 75 "USR1 before the workers started: sent on once they handle it, both stop, exit 75" ||
    why "$(tail -n 20 "$T/u1.out")"
is "$(grep -c '^rank [01] got SIGUSR1$' "$T/u1.out")" 2 "both workers got SIGUSR1 (none was killed by it)"
like "$(says u1)" "SIGUSR1 before the workers started" "the launcher says it held the signal for them"
# shellcheck disable=SC2046
MODE=wait ftr t1 $(local_args) --nproc_per_node 2 "$W"
both_ready() { [ "$(grep -c '^ready rank' "$T/t1.out")" = 2 ]; }
if wait_for 40 both_ready; then
    kill -TERM "$(cat "$T/t1.pid")"
fi
ftr_wait
is "$rc" 75 "TERM to the launcher once the workers run: sent on, they stop, exit 75" ||
    why "$(tail -n 20 "$T/t1.out")"
is "$(grep -c '^rank [01] got SIGTERM$' "$T/t1.out")" 2 "both workers got SIGTERM"

# ---- 4. under srun -----------------------------------------------------------------
port=$(free_port)
for r in 0 1; do
    SLURM_STEP_ID=0 SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=localhost \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port MODE=exit:0 ftr s$r --monitor_interval 0.5 \
        --nproc_per_node 1 "$W"
    eval "bg$r=\$bg"
done
wait "$bg0"
rc0=$?
wait "$bg1"
rc1=$?
is "$rc0 $rc1" "0 0" "under srun: two launchers, no rendezvous option: both exit 0" ||
    why "$(tail -n 20 "$T/s0.out")" "$(tail -n 20 "$T/s1.out")"
is "$(grep -h '^start rank' "$T/s0.out" "$T/s1.out" | sort | cut -d' ' -f1-5 | tr '\n' ';')" \
    "start rank 0 of 2;start rank 1 of 2;" "under srun: they met as 2 nodes: ranks 0 and 1 of world 2"
like "$(says s1)" "under srun: --nnodes 2 --node_rank 1 --master_addr 127.0.0.1 --master_port $port" \
    "under srun: the launcher says what it took from SLURM's variables"
done_testing
