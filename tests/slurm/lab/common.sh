#!/bin/bash
# common.sh - what the TAP tests that run slurm/train.sbatch on the
# one-machine test cluster share; sourced by tests/slurm_*.sh (bash).
#
#   . "$(dirname "$0")/lab/common.sh" NAME
#
# It sources tests/lib.sh (plan, ok, is, like, skip, skip_all, why, diag,
# wait_line, done_testing, ...; the OMPI_* environment is left as it is:
# the jobs' ranks span fake nodes), skips the whole test without root, the
# SLURM commands or a built ftrain and ckptctl; takes the cluster's lock
# (one SLURM test at a time, at most 900 s of waiting); makes the work
# directory W (/tmp/ftrain-NAME.XXXXXX, kept when a check failed or the
# test bailed out); and defines field, wait_end, lab_up, kill_node and
# node_back.  Jobs listed in jobs_started are cancelled and nodes in downed
# resumed at exit, nodes powered off by kill_node are brought back (their
# slurmd started again), and the cluster is stopped then if lab_up started
# it.
set -u
name=${1:-slurm}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck disable=SC2034 # read by lib.sh
LIB_KEEP_MPI_ENV=1
# shellcheck disable=SC1091
. "$here/../lib.sh"
case $BUILD in /*) bdir=$BUILD ;; *) bdir=$root/$BUILD ;; esac
# slurm/train.sbatch execs ftrain-supervise: this tree's.
export FTRAIN_SUPERVISE=$bdir/ftrain-supervise
export FTRAIN_SLURM_LAB=${FTRAIN_SLURM_LAB:-/tmp/ftrain-slurm-lab}
LAB=$FTRAIN_SLURM_LAB

[ "$(id -u)" = 0 ] || skip_all "needs root to run slurmctld and slurmd"
for c in slurmctld slurmd sbatch srun scontrol scancel squeue munge flock; do
	command -v "$c" >/dev/null 2>&1 || skip_all "'$c' not found"
done
[ -x "$bdir/ftrain" ] && [ -x "$bdir/ckptctl" ] && [ -x "$FTRAIN_SUPERVISE" ] ||
	skip_all "$bdir/ftrain, ckptctl or ftrain-supervise not built"

exec 9>"$LAB.lock"
flock -w 900 9 || { echo "Bail out! another SLURM test holds $LAB.lock"; exit 1; }

# field JOB NAME: one field of `scontrol show job`.
field() { timeout 20 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# wait_end JOB SECONDS: until the job is no longer pending or running (or
# requeued and pending again: only COMPLETED, FAILED and the like count).
wait_end() {
	local end=$(($(date +%s) + $2)) st
	while [ "$(date +%s)" -le "$end" ]; do
		st=$(field "$1" JobState)
		case $st in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED) return 0 ;; esac
		sleep 0.5
	done
	return 1
}

was_up=0
pid_file=$LAB/run/slurmctld.pid
[ -n "$(cat "$pid_file" 2>/dev/null)" ] &&
	[ "$(cat "/proc/$(cat "$pid_file")/comm" 2>/dev/null)" = slurmctld ] && was_up=1
W=$(mktemp -d "/tmp/ftrain-$name.XXXXXX")
chmod 755 "$W"
jobs_started=""
downed=""
killed=""
slurm_cleanup() {
	for j in $jobs_started; do SLURM_CONF=$LAB/etc/slurm.conf scancel "$j" 2>/dev/null; done
	for d in $downed; do SLURM_CONF=$LAB/etc/slurm.conf scontrol update nodename="$d" state=resume 2>/dev/null; done
	# A node powered off comes back with its slurmd (ReturnToService=2).
	[ -z "$killed" ] || [ "$was_up" != 1 ] || "$here/lab/lab-up.sh" >/dev/null 2>&1 9>&-
	[ "$was_up" = 1 ] || "$here/lab/lab-down.sh" >/dev/null 2>&1
	if all_passed; then rm -rf "$W"; else echo "# kept $W"; fi
}
# After lib.sh's own cleanup has stopped the test's background processes.
at_exit slurm_cleanup

# lab_up: start the cluster (the test's first check) and take its
# environment; bails out without it.
lab_up() {
	"$here/lab/lab-up.sh" >"$W/lab-up.log" 2>&1 9>&-
	ok $? "test cluster is up" || { why "$(tail -n 5 "$W/lab-up.log")"; echo "Bail out! no cluster"; exit 1; }
	# shellcheck disable=SC1091
	. "$LAB/env"
}

# kill_node NODE [DIR...]: power NODE off (lab/lab-kill-node.sh: its slurmd,
# slurmstepds and their children killed at once, its local space and each
# DIR wiped); noted, so that the node comes back at exit.
kill_node() {
	killed="$killed $1"
	"$here/lab/lab-kill-node.sh" "$@"
}
# node_back: start the slurmd of every node powered off again and wait (at
# most FTRAIN_SLURM_WAIT, 30 s) until every node is idle.  @return lab-up's.
node_back() {
	"$here/lab/lab-up.sh" >"$W/lab-back.log" 2>&1 9>&- && killed=""
}
