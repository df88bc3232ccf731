#!/bin/bash
# lab-kill-node.sh NODE [DIR...]: "power off" one fake node of the
# one-machine SLURM cluster that lab-up.sh started: every process of that
# node dies at once, as in a power loss, and its node-local space is wiped.
#
# A fake node is its slurmd (lab-up.sh runs one per node: slurmd -N NODE,
# pid in run/slurmd-NODE.pid), the slurmstepd daemons it spawned (they
# reparent to init, so they are found by what they hold open: each logs to
# its node's own log/slurmd-NODE.log, SlurmdLogFile=%n), and their children
# and grandchildren (the batch script, the ranks, their sruns).  All of
# them get one SIGKILL, sent in one go and nothing else first: a process
# that was only stopped (SIGSTOP) would still be seen ending by its parent
# and could cancel the job's other steps, which a power loss does not.
# Then the node's local space goes: the lab's per-node TmpFS
# (tmp/NODE) is emptied, and each DIR given (a node-local tier's directory
# of that node) is removed.
#
# slurmctld notices nothing at once: the node turns NOT_RESPONDING and then
# DOWN after SlurmdTimeout (30 s in the lab).  To bring the node back, run
# lab-up.sh again (it starts every slurmd that is not running and waits
# until every node is idle; ReturnToService=2 returns the node to service
# when its slurmd registers).
#
# Prints the pids it killed ("killed: PID NAME ...").  Exit 1 when the
# node's slurmd is not running (nothing is killed then), 2 on bad usage.
# Run as root.  Environment: FTRAIN_SLURM_LAB (default /tmp/ftrain-slurm-lab).
set -u

LAB=${FTRAIN_SLURM_LAB:-/tmp/ftrain-slurm-lab}
node=${1:-}
case $node in '' | *[!A-Za-z0-9_-]*) echo "usage: lab-kill-node.sh NODE [DIR...]" >&2; exit 2 ;; esac
shift

pid=$(cat "$LAB/run/slurmd-$node.pid" 2>/dev/null) || pid=""
case $pid in '' | *[!0-9]*) echo "lab-kill-node: no pid file for slurmd $node" >&2; exit 1 ;; esac
[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmd ] ||
	{ echo "lab-kill-node: slurmd $node (pid $pid) is not running" >&2; exit 1; }

log="$LAB/log/slurmd-$node.log"
# children PID...: the children of each PID, and theirs.
children() {
	local p c
	for p in "$@"; do
		for c in $(pgrep -P "$p"); do
			echo "$c"
			children "$c"
		done
	done
}
stepds="" others=0
for p in $(pgrep -x slurmstepd); do
	mine=0
	for fd in /proc/"$p"/fd/*; do
		[ "$(readlink "$fd" 2>/dev/null)" = "$log" ] && mine=1 && break
	done
	if [ "$mine" = 1 ]; then stepds="$stepds $p"; else others=$((others + 1)); fi
done
# shellcheck disable=SC2086
all="$pid $stepds $(children $pid $stepds)"
# One kill(1) for all: SIGKILL alone, no process left to react.
# shellcheck disable=SC2086
kill -KILL $all 2>/dev/null
out="killed:"
for p in $all; do out="$out $p"; done
echo "$out (slurmd, $(echo $stepds | wc -w) slurmstepd of $node and their children; $others slurmstepd of other nodes left)"

# The node's local space.
if [ -d "$LAB/tmp/$node" ]; then
	find "$LAB/tmp/$node" -mindepth 1 -delete 2>/dev/null || :
fi
for d in "$@"; do
	case $d in /*) rm -rf -- "$d" ;; *) echo "lab-kill-node: not an absolute path, left: $d" >&2 ;; esac
done
exit 0
