#!/bin/sh
# launch_munge.sh - the tests' launches hold while munged stops and starts,
# as it does when the SLURM tests bring their cluster up and down beside
# the other tests (tests/slurm/lab).
#
# With munged running, Open MPI's PMIx checks each rank with a munge
# credential; a rank that made its credential just before munged went away
# was refused ("OPAL ERROR: Unreachable in file ext3x_client.c") and mpirun
# failed or hung: a launch in about half the full runs.  tests/lib.sh sets
# PMIX_MCA_psec=native for the tests' launches (docs/testing.md, "A launch
# that Open MPI fails at start").  Here munged is stopped and started
# every 0.15 s while 12 runs of 3 ranks launch through lib.sh's mpi: every
# run ends well, and none needed a second launch (tests/launch.sh).  (With
# PMIX_MCA_psec=munge,native put back, launches here hang or fail: seen.)
#
# munged is the machine's: the test holds the SLURM test cluster's lock
# while it plays with it (tiers.txt: serial, beside the SLURM tests), and
# leaves it running if it found it running, stopped otherwise.
. "$(dirname "$0")/../lib.sh"
need_mpi
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] ||
    skip_all "munged not installed (scripts/deps.sh installs it with SLURM's packages)"
[ "$(id -u)" = 0 ] || skip_all "not root: cannot start and stop the machine's munged"
LAB=${FTRAIN_SLURM_LAB:-/tmp/ftrain-slurm-lab}
exec 9>"$LAB.lock"
flock -w 900 9 || { echo "Bail out! another SLURM test holds $LAB.lock"; exit 1; }

answers() { timeout -k 1 5 munge -n </dev/null >/dev/null 2>&1; }
# munge_start: the machine's munged, as tests/slurm/lab/lab-up.sh starts it;
# without the lock's descriptor, which munged would hold as long as it runs.
MUNGE_UP=$(cd "$(dirname "$0")/.." && pwd)/slurm/lab/munge-up.sh
munge_start() { "$MUNGE_UP" >/dev/null 2>&1 9>&-; }
was_up=0
answers && was_up=1
[ "$was_up" = 1 ] || munge_start
ok "$(answers; echo $?)" "munged answers (it was $([ "$was_up" = 1 ] && echo running || echo stopped))" ||
    { why "see /var/log/munge/munged.log"; done_testing; exit; }
restore() {
    [ -z "${toggler:-}" ] || kill "$toggler" 2>/dev/null
    rm -f "$T/toggle"
    sleep 0.4
    pkill -x munged 2>/dev/null
    if [ "$was_up" = 1 ]; then
        wait_for 5 sh -c '! pgrep -x munged >/dev/null'
        munge_start
    fi
}
at_exit restore

# The toggler: stop, 0.15 s, start, 0.15 s; a line per restart.
: >"$T/toggle"
(
    while [ -e "$T/toggle" ]; do
        pkill -x munged
        sleep 0.15
        munge_start && echo restart >>"$T/restarts"
        sleep 0.15
    done
) &
toggler=$!
track_bg "$toggler"

# A run takes a second or two; a refused one may hang: 30 s each, and two
# failures end the loop (the case is lost by then).
FTRAIN_TIMEOUT=30
fails=0
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
    mpi 3 --data line --layers 8 --steps 2 >"$T/o$i" 2>"$T/e$i" || {
        fails=$((fails + 1))
        why "run $i: $(tail -n 5 "$T/e$i")"
        [ "$fails" -lt 2 ] || break
    }
done
rm -f "$T/toggle"
n=$(wc -l <"$T/restarts" 2>/dev/null || echo 0)
ok "$([ "$n" -ge 10 ]; echo $?)" "munged was restarted $n times meanwhile (at least 10)"
is "$fails" 0 "12 launches of 3 ranks beside it: every run ended well"
is "$(cat "$T"/e* | grep -c -E 'launch.sh: launch|Unreachable|An error occurred in MPI_Init')" 0 \
    "  none was refused by PMIx or launched again"
done_testing
