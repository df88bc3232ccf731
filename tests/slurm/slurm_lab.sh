#!/bin/sh
# slurm_lab.sh - tests/slurm/lab/lab-up.sh fails within a bounded time, with the
# reason, when its cluster cannot come up, instead of waiting for ever:
#
# 1. a host name that does not resolve: refused before anything starts;
# 2. a controller that never answers (each sinfo hangs): the wait ends at
#    its deadline (FTRAIN_SLURM_WAIT), saying sinfo did not answer;
# 3. sinfo fails: the deadline's message quotes sinfo's error;
# 4. the nodes never become idle: the message gives their state;
# 5. slurmctld exits after it started: at once, with the end of its log.
#
# 1 runs the script as it is.  2 to 5 put stubs of the SLURM and munge
# commands first on PATH (and of `id`, `dpkg-query` and the installers, so
# that nothing is installed and no root is needed): no daemon starts, no
# port is bound, so this test can run beside a real test cluster.
. "$(dirname "$0")/../lib.sh"
LAB_UP="$(cd "$(dirname "$0")" && pwd)/lab/lab-up.sh"
command -v bash >/dev/null 2>&1 || skip_all "bash not installed"
command -v timeout >/dev/null 2>&1 || skip_all "timeout not installed"
command -v getent >/dev/null 2>&1 || skip_all "getent not installed"

# lab_up NAME ENV...: run lab-up.sh with the environment ENV (NAME=VALUE
# words) and a lab directory of its own, bounded by 120 s; sets RC, SECS
# and ERR (its stderr).
lab_up() {
    _lab="$T/lab-$1"
    shift
    _start=$(date +%s)
    env FTRAIN_SLURM_LAB="$_lab" FTRAIN_SLURM_NODES=2 FTRAIN_SLURM_PORT="$PORT" \
        FTRAIN_SLURM_NODE_PORT="$NODE_PORT" "$@" timeout -k 5 120 bash "$LAB_UP" \
        >"$_lab.out" 2>"$_lab.err"
    RC=$?
    SECS=$(($(date +%s) - _start))
    ERR=$(cat "$_lab.err")
}

# listening PORT: some socket listens on TCP PORT.
listening() {
    _hex=$(printf '%04X' "$1")
    awk -v p=":$_hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# Ports no one listens on, so that the script's own port check passes.
PORT="" NODE_PORT=""
for base in 46817 47817 48817 49817; do
    if ! listening "$base" && ! listening $((base + 100)) && ! listening $((base + 101)); then
        PORT=$base NODE_PORT=$((base + 100))
        break
    fi
done
[ -n "$PORT" ] || skip_all "no free TCP ports for a stub cluster"

# ---- 1. a host name that does not resolve ----------------------------------
bad_host=ftrain-no-such-host.invalid
lab_up badhost FTRAIN_SLURM_HOST=$bad_host
ok "$([ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$SECS" -le 20 ]; echo $?)" \
    "an unresolvable host name: lab-up.sh fails (exit $RC) within 20 s ($SECS s)" || why "$ERR"
like "$ERR" "host name '$bad_host' does not resolve" "  and says the host name does not resolve"
ok "$([ ! -e "$T/lab-badhost" ]; echo $?)" "  before it created or started anything"

# ---- stubs for 2 to 5 --------------------------------------------------------
if ! getent hosts localhost >/dev/null 2>&1; then
    skip_n 11 "stub cluster check" "localhost does not resolve on this host"
    done_testing
fi
mkdir -p "$T/bin"
stub() { # NAME BODY: a command NAME on the stub PATH running sh BODY
    printf '#!/bin/sh\n%s\n' "$2" >"$T/bin/$1"
    chmod 755 "$T/bin/$1"
}
stub id 'echo 0'
stub dpkg-query 'printf "install ok installed"'
stub munge 'exit 0'
stub apt-get 'echo "stub apt-get: the test must not install anything" >&2; exit 1'
stub runuser 'echo "stub runuser: the test must not start munged" >&2; exit 1'
stub slurmd 'exit 0'
# slurmctld: STUB_CTLD=exits writes a pid file for a process that is gone
# and a fatal line to its log, as a controller that exits after it forked.
stub slurmctld 'if [ "${STUB_CTLD:-}" = exits ]; then
    sh -c "echo \$\$" >"$FTRAIN_SLURM_LAB/run/slurmctld.pid"
    echo "slurmctld: fatal: stub controller gave up" >>"$FTRAIN_SLURM_LAB/log/slurmctld.log"
fi
exit 0'
# sinfo: STUB_SINFO=hang never answers, error fails as with no controller,
# down reports the nodes down.
stub sinfo 'case ${STUB_SINFO:-hang} in
hang) exec sleep 300 ;;
error) echo "slurm_load_partitions: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
down) echo "2 down*" ;;
esac'
STUBS="PATH=$T/bin:$PATH"

# ---- 2. a controller that never answers --------------------------------------
lab_up hang "$STUBS" STUB_SINFO=hang FTRAIN_SLURM_WAIT=3
ok "$([ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$SECS" -le 15 ]; echo $?)" \
    "sinfo never answers, FTRAIN_SLURM_WAIT=3: lab-up.sh fails (exit $RC) within 15 s ($SECS s)" || why "$ERR"
like "$ERR" "nodes are not all idle after 3 s: sinfo did not answer within [0-9]+ s" \
    "  and says sinfo did not answer" || why "$ERR"
ok "$(! grep -q 'stub \(apt-get\|runuser\)' "$T/lab-hang.err"; echo $?)" \
    "  nothing was installed and munged was not started" || why "$ERR"

# A deadline longer than one probe (5 s): several probes, the whole still
# bounded by the deadline.
lab_up hang7 "$STUBS" STUB_SINFO=hang FTRAIN_SLURM_WAIT=7
ok "$([ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$SECS" -ge 6 ] && [ "$SECS" -le 15 ]; echo $?)" \
    "sinfo never answers, FTRAIN_SLURM_WAIT=7: fails at the deadline (exit $RC after $SECS s)" || why "$ERR"

# ---- 3. sinfo fails -------------------------------------------------------------
lab_up error "$STUBS" STUB_SINFO=error FTRAIN_SLURM_WAIT=2
ok "$([ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$SECS" -le 10 ]; echo $?)" \
    "sinfo fails, FTRAIN_SLURM_WAIT=2: lab-up.sh fails (exit $RC) within 10 s ($SECS s)" || why "$ERR"
like "$ERR" "sinfo failed \(exit 1\): .*Unable to contact slurm controller" "  and quotes sinfo's error"

# ---- 4. nodes that never become idle --------------------------------------------
lab_up down "$STUBS" STUB_SINFO=down FTRAIN_SLURM_WAIT=2
ok "$([ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$SECS" -le 10 ]; echo $?)" \
    "nodes down, FTRAIN_SLURM_WAIT=2: lab-up.sh fails (exit $RC) within 10 s ($SECS s)" || why "$ERR"
like "$ERR" "sinfo says '2 down\*', want '2 idle'" "  and gives the nodes' state"

# ---- 5. slurmctld exits after it started ----------------------------------------
lab_up exits "$STUBS" STUB_SINFO=hang STUB_CTLD=exits FTRAIN_SLURM_WAIT=60
ok "$([ "$RC" -ne 0 ] && [ "$RC" -ne 124 ] && [ "$SECS" -le 10 ]; echo $?)" \
    "slurmctld exits after it started: lab-up.sh fails (exit $RC) at once, not after 60 s ($SECS s)" || why "$ERR"
like "$ERR" "slurmctld exited after it started" "  and says slurmctld exited" || why "$ERR"
like "$ERR" "fatal: stub controller gave up" "  and shows the end of its log"

done_testing
