#!/bin/bash
# pytorch_sbatch.sh: examples/pytorch_ddp.py, a PyTorch DDP script made
# requeue-safe with ftrain_ckpt, stopped and requeued by SLURM, on the real
# one-machine test cluster (TAP).
#
# slurm/train.sbatch with FTRAIN_PROGRAM running the example on 2 nodes (one
# rank a node, --signal=B:USR1@30); `scancel --batch --signal=USR1`:
#
#   1. the batch shell forwards it, the ranks commit a checkpoint and exit
#      75;
#   2. the stop step's checkpoint verifies (ckptctl verify);
#   3. the job requeues itself and the requeued run resumes (world 2 -> 2);
#   4. it finishes: JobState COMPLETED, the script's "done" line.
#
# The same example on one machine (under torch.distributed.run and
# ftrain_ckpt.run, stopped and resumed bit-exactly):
# tests/python/pytorch_example.sh; a node lost under SLURM:
# tests/slurm/pytorch_slurm.sh.
#
# Skips without root, the SLURM packages, numpy or torch with gloo
# ($PYTHON, default /usr/bin/python3), or a built library; takes the lock of
# the SLURM tests (one test cluster per machine).  About a minute on the
# busy 2-core test machine, most of it 4 Python processes importing torch.
. "$(dirname "$0")/lab/common.sh" pytorch-sbatch

PROG=$root/examples/pytorch_ddp.py
need_torch_gloo
need_ckpt_lib

plan 8
lab_up
ok "$(grep -q 'FTRAIN_PROGRAM' "$root/slurm/train.sbatch"; echo $?)" "slurm/train.sbatch runs FTRAIN_PROGRAM"
# The ranks: this tree's package; sbatch passes the environment to the job.
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export GLOO_SOCKET_IFNAME=lo PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
STEPS=300
ARGS="--steps $STEPS --log-every 25 --step-delay 0.01"

logged_past() { # FILE STEP: a progress line at or past STEP
	awk -v s="$2" '$1 == "step" { split($2, a, "/"); if (a[1] + 0 >= s) f = 1 } END { exit !f }' "$1"
}

run_dir=$W/run
out=$W/job.out
# The fake nodes' names do not resolve: the ranks meet on this host.
# shellcheck disable=SC2086 # ARGS, word by word
job=$(FTRAIN_ARGS= FTRAIN_PROGRAM="$PY $PROG" RUN_DIR=$run_dir FTRAIN_TASKS_PER_NODE=1 FTRAIN_MAX_RESTARTS=1 \
	MASTER_ADDR=127.0.0.1 sbatch --parsable -N 2 --time=5 --signal=B:USR1@30 -o "$out" -J pyddp \
	"$root/slurm/train.sbatch" $ARGS 2>"$W/sbatch.err")
ok $? "sbatch -N 2 slurm/train.sbatch with FTRAIN_PROGRAM=python3 examples/pytorch_ddp.py (job ${job:-none})" ||
	why "$(cat "$W/sbatch.err")"
[ -z "$job" ] && { echo "Bail out! no job"; exit 1; }
jobs_started=$job
if wait_for 120 logged_past "$out" 50; then
	scancel --batch --signal=USR1 "$job"
	ok $? "the ranks train; scancel --batch --signal=USR1 $job"
else
	ok 1 "the ranks train (step 50 logged)" || why "$(tail -n 20 "$out" 2>&1)"
fi
wait_for 60 grep -Eq "train\\.sbatch.* exited with status" "$out"
like "$(grep -E 'train\.sbatch.* exited with status' "$out" | head -n 1)" "exited with status 75 \\(after USR1\\)" \
	"the batch shell forwarded USR1; the program exited 75"
s=$(sed -n 's/^stop: signal USR1 .*at step \([0-9]*\).*/\1/p' "$out" | head -n 1)
"$bdir/ckptctl" verify "$run_dir/ckpt/$(printf 'step-%08d' "${s:-0}")" >"$W/verify" 2>&1
ok $? "the stop step ${s:-?} is committed and good" || why "$(cat "$W/verify")"
wait_for 90 grep -Eq "^resume: .*world 2 -> 2" "$out"
ok $? "the job requeued itself and the new run resumed (world 2 -> 2)" || why "$(tail -n 20 "$out")"
wait_end "$job" 120
state=$(field "$job" JobState)
grep -q "^done: step=$STEPS " "$out" && [ "$state" = COMPLETED ] &&
	grep -q 'train\.sbatch.*done: training finished' "$out"
ok $? "the requeued job finished (JobState=${state:-gone})" || why "$(tail -n 30 "$out")"
done_testing
