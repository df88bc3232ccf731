#!/bin/bash
# lab-kill-node.sh NODE [DIR...]: "power off" one fake node of the
# one-machine SLURM cluster that lab-up.sh started: every process of that
# node dies at once, as in a power loss, and its node-local space is wiped.
#
# A fake node is its slurmd (lab-up.sh runs one per node: slurmd -N NODE,
# pid in run/slurmd-NODE.pid), the slurmstepd daemons it spawned (they
# reparent to init, so they are found by what they hold open: each logs to
# its node's own log/slurmd-NODE.log, SlurmdLogFile=%n), and their children
# and grandchildren (the batch script, the ranks, their sruns).  They are
# found with one find and one ps, in milliseconds, so that the power-off
# lands at the step the caller chose.  All of
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
# Few processes, no loop of forks: the whole look-up takes milliseconds, so
# that the kill lands where the caller wanted it.  The node's daemons: the
# slurmd and slurmstepd processes holding its log open.
holders=$(find /proc/[0-9]*/fd -lname "$log" 2>/dev/null | cut -d/ -f3 | sort -u)
# Them and every descendant (one ps, the tree walked in awk).
all=$(ps -e -o pid=,ppid=,comm= | awk -v roots="$holders" -v slurmd="$pid" '
	{ par[$1] = $2; comm[$1] = $3; n++; pids[n] = $1 }
	END {
		k = split(roots, r, " ")
		for (i = 1; i <= k; i++)
			if (r[i] == slurmd || comm[r[i]] == "slurmstepd") { keep[r[i]] = 1; if (r[i] != slurmd) stepds++ }
		keep[slurmd] = 1
		for (changed = 1; changed;) {
			changed = 0
			for (i = 1; i <= n; i++)
				if (!(pids[i] in keep) && (par[pids[i]] in keep)) { keep[pids[i]] = 1; changed = 1 }
		}
		printf "%d", stepds + 0
		for (p in keep) printf " %s", p
		printf "\n"
	}')
nstepd=${all%% *}
all=${all#* }
others=$(($(pgrep -c -x slurmstepd) - nstepd))
# One kill(1) for all: SIGKILL alone, no process left to react.
# shellcheck disable=SC2086
kill -KILL $all 2>/dev/null
echo "killed: $all (slurmd, $nstepd slurmstepd of $node and their children; $others slurmstepd of other nodes left)"

# The node's local space.
if [ -d "$LAB/tmp/$node" ]; then
	find "$LAB/tmp/$node" -mindepth 1 -delete 2>/dev/null || :
fi
for d in "$@"; do
	case $d in /*) rm -rf -- "$d" ;; *) echo "lab-kill-node: not an absolute path, left: $d" >&2 ;; esac
done
exit 0
