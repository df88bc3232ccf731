#!/bin/bash
# lab-up.sh: start a one-machine SLURM test cluster for the ftrain tests.
#
# One munged, one slurmctld and N slurmd daemons that play the nodes n1..nN,
# all on this host (Debian's slurmd accepts -N <nodename>, so several can
# share one hostname, told apart by port).  Everything but munge lives under
# one directory, $FTRAIN_SLURM_LAB (default /tmp/ftrain-slurm-lab):
#
#   etc/slurm.conf etc/taskprolog.sh   configuration (clients: SLURM_CONF)
#   state/                              slurmctld state
#   spool/<node>/ tmp/<node>/           per-node spool and TmpFS
#   run/*.pid log/*.log                 pid files and daemon logs
#   env                                 `. env` sets SLURM_CONF and friends
#
# Run as root.  Idempotent: packages are installed only when missing, the
# config is rewritten only when it changed, and only daemons that are not
# running are started.  It refuses to start when the host name it needs does
# not resolve, or when the ports it needs are taken by something that is not
# ours.  It returns once every node is idle, or fails with the reason: when a
# daemon it started exits, or when the nodes are not all idle by a deadline
# (FTRAIN_SLURM_WAIT seconds; each probe of the cluster is bounded by it, so
# a controller that does not answer cannot hold the caller longer).
#
# Environment:
#   FTRAIN_SLURM_LAB        state directory (absolute; keep it short, the
#                           slurmd sockets live under it)
#   FTRAIN_SLURM_NODES      number of fake nodes (4)
#   FTRAIN_SLURM_CPUS       CPUs per fake node (2)
#   FTRAIN_SLURM_PORT       slurmctld port (6817); slurmd ports are
#                           FTRAIN_SLURM_NODE_PORT (17001) and up
#   FTRAIN_SLURM_CLEAN=1    start slurmctld with -c (forget old jobs); only
#                           takes effect when slurmctld is not running
#   FTRAIN_SLURM_HOST       the host name of the controller and the nodes
#                           (localhost); it must resolve (getent hosts)
#   FTRAIN_SLURM_WAIT       seconds to wait for every node to be idle (30)
#
# Settings the cluster needs, and why:
#   TmpFS=<lab>/tmp/%n      mpi/pmix creates spmix_appdir_* in TmpFS; fake
#                           nodes sharing one /tmp collide and every step fails.
#   TaskProlog              gives each fake node its own TMPDIR and Open MPI
#                           shared-memory (vader) directory; with a shared one,
#                           2+ ranks per fake node crash in the vader BTL.
#   AuthInfo=cred_expire=5  a requeued job may start cred_expire+1 s after the
#                           requeue (default 120 s); 5 is the minimum.  Only a
#                           slurmctld restart applies a change to it.
#   SchedulerParameters     bf_interval=1,sched_interval=2: jobs start in ~1 s.
#   MailProg=/bin/true      without it slurmctld logs an invalid MailProg.
#   KillWait=5              SIGKILL 5 s after the TERM at the time limit.
set -euo pipefail

LAB=${FTRAIN_SLURM_LAB:-/tmp/ftrain-slurm-lab}
NODES=${FTRAIN_SLURM_NODES:-4}
CPUS=${FTRAIN_SLURM_CPUS:-2}
PORT=${FTRAIN_SLURM_PORT:-6817}
NODE_PORT=${FTRAIN_SLURM_NODE_PORT:-17001}
HOST=${FTRAIN_SLURM_HOST:-localhost}
WAIT=${FTRAIN_SLURM_WAIT:-30}
# The longest one probe of the cluster (sinfo) may take; a healthy
# controller answers in milliseconds.
PROBE=5
PKGS="slurmd slurmctld slurm-client munge openmpi-bin libopenmpi-dev"

say() { printf 'lab-up: %s\n' "$*"; }
die() { printf 'lab-up: error: %s\n' "$*" >&2; exit 1; }

case $LAB in /*) ;; *) die "FTRAIN_SLURM_LAB must be an absolute path, got '$LAB'" ;; esac
case $NODES in [1-9]|[1-9][0-9]) ;; *) die "FTRAIN_SLURM_NODES must be 1..99, got '$NODES'" ;; esac
case $WAIT in [1-9]|[1-9][0-9]|[1-9][0-9][0-9]) ;; *) die "FTRAIN_SLURM_WAIT must be 1..999 seconds, got '$WAIT'" ;; esac
for port_value in "$PORT" "$NODE_PORT"; do
	case $port_value in '' | *[!0-9]*) die "FTRAIN_SLURM_PORT and FTRAIN_SLURM_NODE_PORT must be numbers, got '$port_value'" ;; esac
done

# The host name the controller and the nodes go by must resolve: SLURM's
# clients and daemons look it up for every message, and where it does not
# resolve each of them waits for its message timeout before it fails.
if ! timeout -k 1 10 getent hosts "$HOST" >/dev/null 2>&1; then
	die "host name '$HOST' does not resolve (getent hosts $HOST): SLURM's clients could not reach the controller; make it resolve (/etc/hosts) or set FTRAIN_SLURM_HOST to a name of this host"
fi
[ "$(id -u)" = 0 ] || die "must run as root (slurmd and slurmctld run as root here)"

# Packages: install only what is missing.
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	say "installing:$missing"
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing ||
		die "apt-get install failed for:$missing"
fi

# alive PIDFILE NAME: true if the pid in PIDFILE is a live (not zombie)
# process called NAME.  Killed daemons may stay zombies for a while when the
# init process reaps late, so kill -0 alone is not enough.
alive() {
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 1
	case $pid in '' | *[!0-9]*) return 1 ;; esac
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
	! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# listening PORT: true if some socket listens on TCP PORT (IPv4 or IPv6).
listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

mkdir -p "$LAB"/etc "$LAB"/state "$LAB"/run "$LAB"/log "$LAB"/spool "$LAB"/tmp
chmod 755 "$LAB" "$LAB"/tmp

# Ports: free, or held by our own running daemons.
if listening "$PORT" && ! alive "$LAB/run/slurmctld.pid" slurmctld; then
	die "port $PORT is in use by a process that is not this lab's slurmctld (set FTRAIN_SLURM_PORT)"
fi
for i in $(seq 1 "$NODES"); do
	p=$((NODE_PORT + i - 1))
	if listening "$p" && ! alive "$LAB/run/slurmd-n$i.pid" slurmd; then
		die "port $p is in use by a process that is not this lab's slurmd n$i (set FTRAIN_SLURM_NODE_PORT)"
	fi
done

# munge: use a running munged if there is one, else start the system one and
# remember that we did, so lab-down.sh stops only what we started.
if ! timeout -k 1 5 munge -n </dev/null >/dev/null 2>&1; then
	"$(dirname "$0")/munge-up.sh"
	_rc=$?
	[ -s /run/munge/munged.pid ] && cp /run/munge/munged.pid "$LAB/run/munged.ours" 2>/dev/null || : >"$LAB/run/munged.ours"
	[ "$_rc" -eq 0 ] || die "munged did not start or is not answering (see /var/log/munge/munged.log)"
fi

# Configuration: rewritten only when its text changes.
last=$((NODE_PORT + NODES - 1))
if [ "$NODES" = 1 ]; then nodelist=n1; ports=$NODE_PORT; else nodelist="n[1-$NODES]"; ports="$NODE_PORT-$last"; fi
conf=$(cat <<EOF
# Generated by tests/slurm/lab/lab-up.sh: a one-machine test cluster.
ClusterName=ftrainlab
SlurmctldHost=$HOST
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=5
MailProg=/bin/true
StateSaveLocation=$LAB/state
SlurmdSpoolDir=$LAB/spool/%n
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd-%n.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd-%n.log
TmpFS=$LAB/tmp/%n
TaskProlog=$LAB/etc/taskprolog.sh
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
MinJobAge=60
KillWait=5
OverTimeLimit=0
InactiveLimit=0
SlurmctldTimeout=10
SlurmdTimeout=30
MessageTimeout=10
NodeName=$nodelist NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$ports CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)
if [ "$(cat "$LAB/etc/slurm.conf" 2>/dev/null)" != "$conf" ]; then
	# Running daemons would keep the old settings (some, like cred_expire,
	# need a restart), so stop ours first.
	if alive "$LAB/run/slurmctld.pid" slurmctld || ls "$LAB"/run/slurmd-*.pid >/dev/null 2>&1; then
		say "configuration changed: restarting this lab's daemons"
		FTRAIN_SLURM_LAB=$LAB FTRAIN_SLURM_KEEP_MUNGE=1 "$(dirname "$0")/lab-down.sh" >/dev/null
	fi
	printf '%s\n' "$conf" >"$LAB/etc/slurm.conf"
fi

# The TaskProlog's "export" lines go into each task's environment.  Loopback
# only for Open MPI, so no rank tries an interface the host cannot route; and
# idle ranks yield the CPU, because the fake nodes' CPUs are more than the
# host has, and busy-polling ranks would starve each other.
cat >"$LAB/etc/taskprolog.sh.new" <<EOF
#!/bin/sh
echo "export TMPDIR=$LAB/tmp/\$SLURMD_NODENAME"
echo "export OMPI_MCA_btl_vader_backing_directory=$LAB/tmp/\$SLURMD_NODENAME"
echo "export OMPI_MCA_btl_tcp_if_include=lo"
echo "export OMPI_MCA_oob_tcp_if_include=lo"
echo "export OMPI_MCA_mpi_yield_when_idle=1"
EOF
chmod 755 "$LAB/etc/taskprolog.sh.new"
mv "$LAB/etc/taskprolog.sh.new" "$LAB/etc/taskprolog.sh"

cat >"$LAB/env" <<EOF
# Source this file to use the ftrain SLURM lab: . $LAB/env
export SLURM_CONF=$LAB/etc/slurm.conf
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_mpi_yield_when_idle=1
EOF
export SLURM_CONF="$LAB/etc/slurm.conf"

# Daemons: start only those not running.  A pid file left by one that is
# gone is removed first, so that a pid file found later is the new daemon's.
# Each start is bounded (a daemon forks and its first process returns).
if ! alive "$LAB/run/slurmctld.pid" slurmctld; then
	rm -f "$LAB/run/slurmctld.pid"
	if [ "${FTRAIN_SLURM_CLEAN:-0}" = 1 ]; then clean=-c; else clean=; fi
	# shellcheck disable=SC2086
	timeout -k 1 30 slurmctld -f "$SLURM_CONF" $clean ||
		die "slurmctld did not start (see $LAB/log/slurmctld.log)"
fi
for i in $(seq 1 "$NODES"); do
	mkdir -p "$LAB/spool/n$i" "$LAB/tmp/n$i"
	chmod 1777 "$LAB/tmp/n$i"
	if ! alive "$LAB/run/slurmd-n$i.pid" slurmd; then
		rm -f "$LAB/run/slurmd-n$i.pid"
		timeout -k 1 30 slurmd -f "$SLURM_CONF" -N "n$i" ||
			die "slurmd n$i did not start (see $LAB/log/slurmd-n$i.log)"
	fi
done

# Wait until every node is idle (about 0.3 s from cold; longer after a
# slurmctld restart while the slurmds re-register), until the deadline at
# the latest.  Each probe is bounded by what is left of the wait.
want="$NODES idle"
state=""
reason="no answer yet"

# probe SECONDS: one sinfo, at most SECONDS long; sets state (its answer)
# and reason (why that is not yet the wanted one).
probe() {
	local rc=0
	state=$(timeout -k 1 "$1" sinfo -h -o '%D %T' 2>"$LAB/run/sinfo.err") || rc=$?
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		reason="sinfo did not answer within $1 s (controller $HOST port $PORT)"
	elif [ "$rc" != 0 ]; then
		reason="sinfo failed (exit $rc): $(head -n 1 "$LAB/run/sinfo.err")"
	else
		reason="sinfo says '$(printf '%s' "$state" | tr '\n' ',' | sed 's/,/, /g')', want '$want'"
	fi
}

# exited PIDFILE NAME LOG: die when the daemon that wrote PIDFILE is gone.
exited() {
	[ -s "$1" ] && ! alive "$1" "$2" || return 0
	tail -n 5 "$3" >&2 2>/dev/null || :
	die "$2 exited after it started (the end of $3 is above)"
}

deadline=$((SECONDS + WAIT))
while :; do
	left=$((deadline - SECONDS))
	if [ "$left" -le 0 ]; then
		case $reason in "sinfo did not answer"*) ;; *) timeout -k 1 3 sinfo >&2 || : ;; esac
		die "nodes are not all idle after $WAIT s: $reason (logs in $LAB/log)"
	fi
	exited "$LAB/run/slurmctld.pid" slurmctld "$LAB/log/slurmctld.log"
	for i in $(seq 1 "$NODES"); do
		exited "$LAB/run/slurmd-n$i.pid" slurmd "$LAB/log/slurmd-n$i.log"
	done
	probe $((left < PROBE ? left : PROBE))
	[ "$state" = "$want" ] && break
	sleep 0.1
done
say "ready: $NODES nodes idle; use: . $LAB/env"
