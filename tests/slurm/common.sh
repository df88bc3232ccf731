#!/bin/bash
# common.sh - what the TAP tests that run slurm/train.sbatch on the
# one-machine test cluster share; sourced by tests/slurm_*.sh (bash).
#
#   . "$(dirname "$0")/slurm/common.sh" NAME
#
# It skips the whole test (exit 0, "1..0 # SKIP why") without root, the
# SLURM commands or a built ftrain and ckptctl; takes the cluster's lock
# (one SLURM test at a time, at most 900 s of waiting); makes the work
# directory W (/tmp/ftrain-NAME.XXXXXX, kept when a check failed); and
# defines ok, why, wait_for, field, wait_end and lab_up.  Jobs listed in
# jobs_started are cancelled and nodes in downed resumed at exit, and the
# cluster is stopped then if lab_up started it.
set -u

BUILD=${BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
case $BUILD in /*) bdir=$BUILD ;; *) bdir=$root/$BUILD ;; esac
export FTRAIN_SLURM_LAB=${FTRAIN_SLURM_LAB:-/tmp/ftrain-slurm-lab}
LAB=$FTRAIN_SLURM_LAB

skip_all() { echo "1..0 # SKIP $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip_all "needs root to run slurmctld and slurmd"
for c in slurmctld slurmd sbatch srun scontrol scancel squeue munge flock; do
	command -v "$c" >/dev/null 2>&1 || skip_all "'$c' not found"
done
[ -x "$bdir/ftrain" ] && [ -x "$bdir/ckptctl" ] || skip_all "$bdir/ftrain or ckptctl not built"

exec 9>"$LAB.lock"
flock -w 900 9 || { echo "Bail out! another SLURM test holds $LAB.lock"; exit 1; }

n=0
failed=0
ok() {
	n=$((n + 1))
	if [ "$1" = 0 ]; then echo "ok $n - $2"; return 0; fi
	echo "not ok $n - $2"
	failed=$((failed + 1))
	return 1
}
why() { printf '%s\n' "$@" | sed 's/^/# /' >&2; }
# wait_for FILE REGEX SECONDS
wait_for() {
	local end=$(($(date +%s) + $3))
	while [ "$(date +%s)" -le "$end" ]; do
		grep -Eq -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.2
	done
	return 1
}
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
W=$(mktemp -d "/tmp/ftrain-${1:-slurm}.XXXXXX")
chmod 755 "$W"
jobs_started=""
downed=""
slurm_cleanup() {
	for j in $jobs_started; do SLURM_CONF=$LAB/etc/slurm.conf scancel "$j" 2>/dev/null; done
	for d in $downed; do SLURM_CONF=$LAB/etc/slurm.conf scontrol update nodename="$d" state=resume 2>/dev/null; done
	[ "$was_up" = 1 ] || "$here/slurm/lab-down.sh" >/dev/null 2>&1
	if [ "$failed" = 0 ]; then rm -rf "$W"; else echo "# kept $W"; fi
}
trap slurm_cleanup EXIT
trap 'exit 1' INT TERM HUP

# lab_up: start the cluster (the test's first check) and take its
# environment; bails out without it.
lab_up() {
	"$here/slurm/lab-up.sh" >"$W/lab-up.log" 2>&1 9>&-
	ok $? "test cluster is up" || { why "$(tail -n 5 "$W/lab-up.log")"; echo "Bail out! no cluster"; exit 1; }
	# shellcheck disable=SC1091
	. "$LAB/env"
}
