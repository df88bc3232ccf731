#!/bin/bash
# lab-down.sh: stop the one-machine SLURM cluster that lab-up.sh started.
#
# Cancels every job of that cluster, waits briefly for them to go, then stops
# the slurmd and slurmctld daemons found in the lab's pid files, each only
# after checking that the pid still is that daemon.  munged is stopped only
# when lab-up.sh started it.  The lab directory is kept (logs); remove it by
# hand, or set FTRAIN_SLURM_WIPE=1.
#
# Environment: FTRAIN_SLURM_LAB (default /tmp/ftrain-slurm-lab),
# FTRAIN_SLURM_KEEP_MUNGE=1 to leave munged running, FTRAIN_SLURM_WIPE=1.
set -u

LAB=${FTRAIN_SLURM_LAB:-/tmp/ftrain-slurm-lab}
export SLURM_CONF="$LAB/etc/slurm.conf"

alive() { # PID NAME: a live, non-zombie process with that name
	[ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] &&
		! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

stopped=""
stop() { # PIDFILE NAME: SIGTERM that pid if it still is that daemon
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 0
	case $pid in '' | *[!0-9]*) rm -f "$1"; return 0 ;; esac
	if alive "$pid" "$2" && kill "$pid" 2>/dev/null; then stopped="$stopped $2:$pid"; fi
	rm -f "$1"
}

# Jobs first, while slurmctld still runs.  Each client call is bounded (a
# controller that does not answer would hold it for its message timeout),
# and so is the whole wait: 10 s.
if [ -f "$SLURM_CONF" ] && [ -f "$LAB/run/slurmctld.pid" ] && alive "$(cat "$LAB/run/slurmctld.pid")" slurmctld; then
	ids=$(timeout -k 1 5 squeue -h -o %i 2>/dev/null || :)
	if [ -n "$ids" ]; then
		# shellcheck disable=SC2086
		timeout -k 1 5 scancel $ids 2>/dev/null || :
		deadline=$((SECONDS + 10))
		while [ "$SECONDS" -lt "$deadline" ]; do
			[ -z "$(timeout -k 1 5 squeue -h -o %i 2>/dev/null)" ] && break
			sleep 0.1
		done
	fi
fi

for f in "$LAB"/run/slurmd-*.pid; do [ -e "$f" ] && stop "$f" slurmd; done
stop "$LAB/run/slurmctld.pid" slurmctld
if [ -e "$LAB/run/munged.ours" ] && [ "${FTRAIN_SLURM_KEEP_MUNGE:-0}" != 1 ]; then
	stop "$LAB/run/munged.ours" munged
fi

# Wait (up to 10 s) until they are gone.
for _ in $(seq 1 100); do
	left=""
	for e in $stopped; do alive "${e#*:}" "${e%%:*}" && left="$left $e"; done
	[ -z "$left" ] && break
	sleep 0.1
done
[ -z "${left:-}" ] || printf 'lab-down: still running:%s\n' "$left" >&2
[ "${FTRAIN_SLURM_WIPE:-0}" = 1 ] && [ -z "${left:-}" ] && rm -rf "$LAB"
printf 'lab-down: stopped%s\n' "${stopped:- nothing}"
