#!/bin/bash
# slurm_rank_failure.sh: a rank that dies or hangs under slurm/train.sbatch
# (srun --mpi=pmix on the one-machine test cluster, 2 nodes) ends the job
# within seconds and the job's output names it (TAP).
#
#   1. SIGKILL to rank 1: rank 0 reads the end of rank 1's connection in
#      the liveness ring and ends the step within about a second (status
#      76), naming rank 1, its node and pid; srun names the task; the
#      newest checkpoint verifies.  With --no-liveness, srun
#      --kill-on-bad-exit=1 (the script's) ends the step, after KillWait (the
#      lab's 5 s); SLURM's defaults would leave rank 0 waiting in a
#      collective.
#   2. SIGSTOP to rank 1 with --hang-timeout 3: ftrain's watchdog on rank 0
#      names rank 1 and its node and ends the job; the step exits 76.
#
# Needs root and the SLURM packages, like slurm_e2e.sh (it skips without
# them), and takes the same lock: one test cluster per machine.
. "$(dirname "$0")/lab/common.sh" rankfail

plan 9
lab_up
export FTRAIN=$bdir/ftrain FTRAIN_TASKS_PER_NODE=1 FTRAIN_MAX_RELAUNCHES=0 # detection only: slurm_relaunch.sh relaunches
export FTRAIN_ARGS="--device cpu --data line --layers 8 --global-batch 32 --micro-batch 8 --steps 100000 --log-every 1 --step-delay-ms 150 --ckpt-every 5"

# submit NAME SIGNAL [ftrain options]: a 2-node job; once it has trained 12
# steps, SIGNAL to rank 1; sets out, took (seconds from the signal to the
# end of the step), fast (0 when that took under 15 s), victim.
submit() {
	local name=$1 sig=$2
	shift 2
	out=$W/$name.out
	export RUN_DIR=$W/$name
	local job
	job=$(sbatch --parsable -N 2 --time=5 -o "$out" -J "rf-$name" "$root/slurm/train.sbatch" "$@" 2>"$W/$name.sbatch.err")
	jobs_started="$jobs_started $job"
	took=none
	victim=$(wait_line "$out" '^epoch [0-9.]+/[0-9.]+ step 12/' 60 &&
		sed -n 's/^world: rank 1 .* pid \([0-9]*\).*/\1/p' "$out" | head -n1)
	[ -n "$victim" ] || { why "job $job did not train: $(tail -n 5 "$out" 2>/dev/null)"; return 1; }
	local t0 t1
	t0=$(now)
	kill -"$sig" "$victim"
	wait_line "$out" 'train\.sbatch.*ftrain exited with status' 60
	t1=$(now)
	kill -CONT "$victim" 2>/dev/null # only if it outlived its job
	took=$(secs "$t0" "$t1")
	below "$took" 15
	fast=$?
	return 0
}

# ---- 1. a rank killed -------------------------------------------------------------
if submit kill KILL; then
	below "$took" 3 && grep -q 'train\.sbatch.*ftrain exited with status 76' "$out"
	ok $? "SIGKILL to rank 1: the step ended in $took s (< 3 s), status 76" || why "$(tail -n 8 "$out")"
	grep -Eq "^ftrain: peer lost: rank 1 \(host n[0-9], pid $victim\) is gone: its connection closed without a goodbye" "$out" &&
		grep -Eq 'srun: error: [^ ]+: task 1: Killed' "$out"
	ok $? "  rank 0 names rank 1, its node and pid; srun names task 1 and the signal" ||
		why "$(grep -E 'srun|exited|peer lost' "$out")"
	"$bdir/ckptctl" verify "$RUN_DIR/ckpt" >"$W/kill.verify" 2>&1
	ok $? "  the checkpoints left behind verify" || why "$(cat "$W/kill.verify")"
else
	ok 1 "SIGKILL to rank 1: the job did not get going"
	ok 1 "  rank 0 names rank 1"
	ok 1 "  the checkpoints verify"
fi
if submit kill-nolive KILL --no-liveness; then
	ok "$fast" "--no-liveness: SIGKILL to rank 1, srun --kill-on-bad-exit ended the step in $took s (< 15 s)" ||
		why "$(tail -n 8 "$out")"
	grep -Eq 'srun: error: [^ ]+: task 1: Killed' "$out" && ! grep -q 'peer lost' "$out"
	ok $? "  srun names task 1, its node and the signal" || why "$(grep -E 'srun|exited' "$out")"
else
	ok 1 "--no-liveness: SIGKILL to rank 1: the job did not get going"
	ok 1 "  srun names task 1"
fi

# ---- 2. a rank stopped: the watchdog -------------------------------------------------
if submit stop STOP --hang-timeout 3; then
	ok "$fast" "SIGSTOP to rank 1, --hang-timeout 3: the step ended in $took s (< 15 s)" ||
		why "$(tail -n 8 "$out")"
	grep -q 'train\.sbatch.*ftrain exited with status 76' "$out"
	ok $? "  with ftrain's hang status 76" || why "$(grep exited "$out")"
	grep -Eq "hang: rank 1 \(host n[0-9], pid $victim\) stopped making progress" "$out"
	ok $? "  the watchdog names rank 1, its node and pid" || why "$(grep 'hang:' "$out")"
else
	ok 1 "SIGSTOP to rank 1: the job did not get going"
	ok 1 "  status 76"
	ok 1 "  the watchdog names rank 1"
fi
done_testing
