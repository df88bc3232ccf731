#!/bin/sh
# recovery.sh - what a failure cost, as ftrain tells it: the recovery line
# and event after an unplanned end, none after a planned one; the
# Young/Daly interval line; the --fault kinds.
#
# 1. --fault kill@12:1 on 2 ranks (a save every 5 steps): the job dies and
#    leaves heartbeats in RUN_DIR/heartbeat/; a resume on 3 ranks prints one
#    recovery line whose figures agree with each other, with the leftover
#    heartbeats (the step, who went silent first and when, when the job
#    ended), with the resume line and with the clock of this test, logs
#    the same figures as a "recovery" event, removes every leftover and
#    ends with the uninterrupted run's param_hash.
# 2. No failure, no recovery: a planned stop (SIGUSR1, exit 75) and a run
#    refused at its resume (exit 1) each remove their heartbeats, so the
#    resume after them prints no recovery line and logs no event.
# 3. Young/Daly: one line per launch after its first save, whose interval is
#    sqrt(2 C M) of the printed cost C and --mtbf M; the "young_daly" event
#    has the same figures; --quiet prints no line; a run shorter than the
#    interval prints none either (the advice does not apply), and its event
#    says so ("told":false, run_s < interval_s).
# 4. --fault kinds: segv and abort end the job with that signal's status,
#    stop (a hang) with 76 under --hang-timeout 3; a bad value exits 2
#    naming --fault (tests/config/config_parse.c covers the parser).
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=60}"
need_mpi
RUN="--data line --layers 8 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic --steps 30"

# near A B TOL: 0 when |A - B| <= TOL (numbers; "" fails).
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { exit !(a != "" && b != "" && (a - b <= t + 0 && b - a <= t + 0)) }'; }
# within X LO HI: 0 when LO <= X <= HI.
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x != "" && x + 0 >= lo + 0 && x + 0 <= hi + 0) }'; }
# grab TEXT SED: the first capture of the sed expression in TEXT ("" when none).
grab() { printf '%s\n' "$1" | sed -n -E "s/.*$2.*/\\1/p" | head -n 1; }
# json EVENT_LINE KEY: the number (or string) KEY of one metrics.jsonl line.
json() { printf '%s\n' "$1" | sed -n -E "s/.*\"$2\":\"?([^\",}]*).*/\\1/p"; }
# mtime FILE: its modification time in seconds, to the nanosecond.
mtime() { date -r "$1" +%s.%N; }
# beats DIR: the heartbeat files in DIR (none: nothing printed); left DIR:
# whatever DIR holds (heartbeats, half-written ones, anything).
beats() { find "$1" -maxdepth 1 -name 'rank-*' ! -name '*.new' 2>/dev/null | sort; }
left() { ls -A "$1" 2>/dev/null; }
_beating() { [ -n "$(beats "$1")" ]; }
# yd_figures FILE: the Young/Daly line's "COST HOURS INTERVAL" in FILE.
yd_figures() {
    sed -n -E 's/^checkpoint: Young\/Daly: a save costs ([0-9.]+) s of training; for a mean time between failures of ([0-9.e+]+) h \(--mtbf\) the interval that loses least is ([0-9.]+) s.*/\1 \2 \3/p' "$1"
}
# yd_agrees COST HOURS INTERVAL [COST_ROUND INTERVAL_ROUND]: INTERVAL is
# sqrt(2 C M) for the cost C and --mtbf M, as far as their rounding tells:
# the cost to the nearest COST_ROUND (0.0005: three decimals), the interval
# to the nearest INTERVAL_ROUND (0.5: whole seconds; 0.0005 for an
# interval under 10 s, which the line gives to 3 decimals).  The event's
# interval_s has 4 significant digits: beside the line's 3 decimals the two
# roundings differ by up to 0.00055 (0.0006 below).
yd_agrees() {
    awk -v c="$1" -v h="$2" -v i="$3" -v cr="${4:-0.0005}" -v ir="${5:-0.5}" 'BEGIN {
        m = 3600 * h; lo = c - cr; if (lo < 0) lo = 0
        exit !(c > 0 && i + 0 >= sqrt(2 * lo * m) - ir && i + 0 <= sqrt(2 * (c + cr) * m) + ir) }'
}

mpi 2 $RUN >"$T/ref.out" 2>&1
REF=$(hash_of "$T/ref.out")
[ -n "$REF" ] || { echo "Bail out! the uninterrupted run failed: $(tail -n 3 "$T/ref.out")"; exit 1; }

# ---- 1. a rank killed, then the resume's account of it ----------------------------
# --hang-timeout 15 gives heartbeats every 0.5 s: rank 0 writes some while
# it waits (about 2 s) for mpirun to end it.  Steps of 100 ms put the
# fault more than two periods after the start, when every rank has
# written its heartbeat.
d="$T/kill"
mpi 2 $RUN --log-every 1 --step-delay-ms 100 --ckpt-every 5 --hang-timeout 15 --run-dir "$d" \
    --mtbf 0.001 --fault kill@12:1 >"$d.out" 2>"$d.err"
rc=$?
ok "$([ "$rc" -ne 0 ] && grep -q 'rank 1: --fault: raising signal 9 after step 12' "$d.err"; echo $?)" \
    "--fault kill@12:1: rank 1 killed itself after step 12, the job ended non-zero (exit $rc)" ||
    why "$(tail -n 4 "$d.err")"
leftover=$(beats "$d/heartbeat")
# What the leftovers say, read as ftrain reads them: the furthest step
# finished (a rank in a step's computation or reductions, phases 3-5, has
# not finished it), the earliest and the latest last heartbeat.
hb_step=$(cat $leftover /dev/null | awk '$1 == "ftrain-heartbeat" {
        for (i = 3; i < NF; i++) { if ($i == "phase") p = $(i + 1); if ($i == "step") s = $(i + 1) }
        dn = (p >= 3 && p <= 5) ? s - 1 : s; if (!n++ || dn > best) best = dn } END { if (n) print best }')
first_t="" last_t=""
for f in $leftover; do
    t=$(mtime "$f")
    [ -z "$first_t" ] || awk -v a="$t" -v b="$first_t" 'BEGIN { exit !(a < b) }' && first_t=$t
    [ -z "$last_t" ] || awk -v a="$t" -v b="$last_t" 'BEGIN { exit !(a > b) }' && last_t=$t
done
[ -n "$hb_step" ] && [ -f "$d/heartbeat/rank-0" ] && [ -f "$d/heartbeat/rank-1" ]
ok $? "  both ranks left a heartbeat in RUN_DIR/heartbeat (the furthest step finished: ${hb_step:-none})" ||
    why "left: ${leftover:-nothing}"
victim=$(rank_pid "$d.out" 1)
# A larger world would leave heartbeats this launch does not overwrite: a
# copy of rank 1's (its time too) stands for one; it changes no figure.
[ -f "$d/heartbeat/rank-1" ] && cp -p "$d/heartbeat/rank-1" "$d/heartbeat/rank-5"

t0=$(now)
mpi_bg 3 $RUN --log-every 1 --step-delay-ms 100 --ckpt-every 5 --hang-timeout 15 --run-dir "$d" \
    --mtbf 0.001 >"$d.res" 2>"$d.reserr"
# While it trains, no heartbeat of the failed launch is there (its pids).
old_list="$(rank_pid "$d.out" 0) $victim"
old_pids=" $old_list "
if wait_for 30 progress_ge "$d.res" 3 && wait_for 5 _beating "$d/heartbeat"; then
    # shellcheck disable=SC2046 # one word per file
    during=$(cat $(beats "$d/heartbeat") /dev/null | sed -n 's/.* pid \([0-9]*\) .*/\1/p' | sort -n | tr '\n' ' ')
else
    during=""
fi
wait "$MPI_PID"
rc=$?
MPI_PID=
t1=$(now)
res_step=$(sed -n 's/^resume: from .* step \([0-9]*\) (epoch.*/\1/p' "$d.res")
is "$rc:$(hash_of "$d.res")" "0:$REF" \
    "  resumed on 3 ranks from step ${res_step:-?}: the uninterrupted param_hash" || why "$(tail -n 3 "$d.reserr")"
stale=""
for p in $during; do
    case $old_pids in *" $p "*) stale="$stale $p" ;; esac
done
ok "$([ -n "$during" ] && [ -z "$stale" ]; echo $?)" \
    "  while it trains, RUN_DIR/heartbeat holds none of the failed launch's (pids $old_list): the resume removed them" ||
    why "heartbeats of pids: ${during:-none}; of the failed launch:${stale:- none}"
is "$(left "$d/heartbeat")" "" "  after its clean end RUN_DIR/heartbeat holds nothing"

line=$(grep '^recovery: ' "$d.res")
is "$(printf '%s\n' "$line" | grep -c '^recovery: ')" 1 "  the resume printed one recovery line" ||
    why "$(grep -v '^epoch ' "$d.res")"
frank=$(grab "$line" ': rank ([0-9]+) \(host [^,]+, pid [0-9]+\) went silent first')
fpid=$(grab "$line" ' \(host [^,]+, pid ([0-9]+)\) went silent first')
C=$(grab "$line" 'resumed from step ([0-9]+): ')
N=$(grab "$line" ': ([0-9]+) steps? redone; ')
total=$(grab "$line" 'redone; ([0-9.]+) s from the failure to training again')
until_end=$(grab "$line" '\(until the job ended ([0-9.]+) s,')
relaunch=$(grab "$line" ', relaunch ([0-9.]+) s,')
load=$(grab "$line" ', load ([0-9.]+) s,')
first=$(grab "$line" ', start-up and first step ([0-9.]+) s\)$')
S=$(grab "$line" ' after step ([0-9]+): ')
is "$S" 12 "  'after step $S': step 12, the last that rank 0 could finish without rank 1" ||
    why "$line"
is "$S" "$hb_step" "  and what the leftover heartbeats say"
is "$frank:$fpid" "1:$victim" "  'rank $frank (pid $fpid) went silent first': the killed rank 1 (pid $victim)"
is "$C" "$res_step" "  'resumed from step $C': the resume line's step"
ok "$([ -n "$N" ] && [ -n "$C" ] && [ "$N" -eq $((S - C)) ] && [ "$N" -le 5 ]; echo $?)" \
    "  '$N steps redone' = $S - $C, at most --ckpt-every 5" || why "$line"
# Rounding: four figures to 0.1 s and one to 0.001 s.
ok "$(near "$total" "$(awk -v a="$until_end" -v b="$relaunch" -v c="$load" -v e="$first" 'BEGIN { print a + b + c + e }')" 0.21; echo $?)" \
    "  the split adds up: $until_end + $relaunch + $load + $first ~ $total s" || why "$line"
near "$until_end" "$(awk -v a="$first_t" -v b="$last_t" 'BEGIN { printf "%.3f", b - a }')" 0.06
ok $? "  'until the job ended $until_end s': the leftovers' first and last heartbeat times" ||
    why "heartbeats from $first_t to $last_t"
within "$relaunch" "$(awk -v a="$t0" -v b="$last_t" 'BEGIN { print a - b - 0.06 }')" \
    "$(awk -v a="$t1" -v b="$last_t" 'BEGIN { print a - b + 0.06 }')"
ok $? "  'relaunch $relaunch s': from the last heartbeat to a start between this test's launch and its end" ||
    why "last heartbeat $last_t, launched $t0, ended $t1"

ev=$(grep '"event":"recovery"' "$d/metrics.jsonl")
is "$(printf '%s\n' "$ev" | grep -c recovery)" 1 "  metrics.jsonl has one recovery event"
is "$(json "$ev" failed_after_step):$(json "$ev" first_silent_rank):$(json "$ev" resumed_step):$(json "$ev" steps_redone)" \
    "$S:$frank:$C:$N" "  its steps and rank are the line's"
near "$(json "$ev" seconds)" "$total" 0.051 && near "$(json "$ev" until_end_s)" "$until_end" 0.051 &&
    near "$(json "$ev" relaunch_s)" "$relaunch" 0.051 && near "$(json "$ev" load_s)" "$load" 0.00051 &&
    near "$(json "$ev" first_step_s)" "$first" 0.051
ok $? "  its seconds are the line's" || why "$ev" "$line"

# Young/Daly, one line per launch: the failed one saved at steps 5 and 10,
# the resume at 15 to 30.  --mtbf 0.001 (3.6 s) puts the interval (about
# 0.2 s) well inside these 3 s runs, so the advice applies.
is "$(grep -c '^checkpoint: Young/Daly:' "$d.out"):$(grep -c '^checkpoint: Young/Daly:' "$d.res")" "1:1" \
    "  one Young/Daly line in each launch"
# shellcheck disable=SC2046 # the three figures
set -- $(yd_figures "$d.res")
yd_agrees "${1:-0}" "${2:-0}" "${3:-0}" 0.0005 0.0005 && [ "${2:-}" = 0.001 ]
ok $? "  the resume's: sqrt(2 x ${1:-?} s x ${2:-?} h) ~ ${3:-?} s (--mtbf 0.001)" ||
    why "$(grep 'Young/Daly' "$d.res")"
yd=$(grep '"event":"young_daly"' "$d/metrics.jsonl")
last_yd=$(printf '%s\n' "$yd" | tail -n 1)
[ "$(printf '%s\n' "$yd" | grep -c young_daly)" = 2 ] &&
    near "$(json "$last_yd" save_cost_s)" "${1:-x}" 0.00051 && near "$(json "$last_yd" mtbf_h)" "${2:-x}" 0 &&
    near "$(json "$last_yd" interval_s)" "${3:-x}" 0.0006 &&
    yd_agrees "$(json "$last_yd" save_cost_s)" "$(json "$last_yd" mtbf_h)" "$(json "$last_yd" interval_s)" 0.00005 0.0005
ok $? "  metrics.jsonl: one young_daly event per launch, the last with the resume's figures" || why "$yd"

# ---- 2. no failure, no recovery --------------------------------------------------------
d="$T/planned"
mpi_bg 2 $RUN --log-every 1 --step-delay-ms 100 --ckpt-every 5 --run-dir "$d" >"$d.out" 2>"$d.err"
if wait_for 30 progress_ge "$d.out" 8 && [ -n "$(beats "$d/heartbeat")" ]; then
    kill -USR1 "$(rank_pid "$d.out" 0)"
    wait "$MPI_PID"
    rc=$?
    MPI_PID=
    is "$rc:$(left "$d/heartbeat")" "75:" \
        "SIGUSR1 to rank 0 mid-run: a planned stop (exit $rc, 75) that leaves no heartbeat" ||
        why "$(tail -n 3 "$d.err")"
else
    ok 1 "SIGUSR1: the run did not get going (or wrote no heartbeat)" || why "$(tail -n 5 "$d.err")"
fi
# A run refused at its resume (another data set, so another architecture)
# writes heartbeats while Fashion-MNIST loads, and removes them as it exits.
seen=0
timeout -k 5 "$FTRAIN_TIMEOUT" "$FTRAIN" --device cpu --global-batch 32 --micro-batch 8 --lr 0.01 \
    --deterministic --steps 30 --layers 8 --run-dir "$d" >"$d.bad" 2>&1 &
bad=$!
track_bg "$bad"
while kill -0 "$bad" 2>/dev/null; do
    [ -n "$(beats "$d/heartbeat")" ] && seen=1
    sleep 0.02
done
wait "$bad"
rc=$?
if grep -q 'ubyte.gz: cannot open' "$d.bad"; then
    skip "a resume refused: no heartbeat left" "Fashion-MNIST not installed: $(grep ftrain: "$d.bad" | head -n 1)"
else
    is "$rc:$seen:$(left "$d/heartbeat")" "1:1:" \
        "a resume refused (exit $rc, 1; heartbeats while it ran: $seen): it leaves no heartbeat" ||
        why "$(grep 'ftrain:' "$d.bad" | head -n 3)"
fi
mpi 2 $RUN --log-every 1 --ckpt-every 5 --run-dir "$d" >"$d.res" 2>"$d.reserr"
rc=$?
is "$rc:$(hash_of "$d.res")" "0:$REF" "  the resume after both: the uninterrupted param_hash" ||
    why "$(tail -n 3 "$d.reserr")"
grep -q '^recovery: ' "$d.res" || grep -q '"event":"recovery"' "$d/metrics.jsonl"
ok "$((! $?))" "  and no recovery line or event: neither was a failure" ||
    why "$(grep '^recovery' "$d.res")"

# ---- 3. Young/Daly with another MTBF; --quiet; a run too short for it ------------------------
# --mtbf 0.0005 (1.8 s): an interval of about 0.1 s against a run of 30
# steps of 100 ms (3 s): the advice applies while a save costs under 2.5 s.
# (With 30-ms steps a loaded clean-clone run measured a 0.23-s save, an
# interval of 0.90 s against a run of 0.8 s: no line, rightly, and the
# check failed.)
d="$T/yd"
"$FTRAIN" --device cpu $RUN --step-delay-ms 100 --ckpt-every 5 --mtbf 0.0005 --run-dir "$d" >"$d.out" 2>&1
# shellcheck disable=SC2046 # the three figures
set -- $(yd_figures "$d.out")
yd_agrees "${1:-0}" "${2:-0}" "${3:-0}" 0.0005 0.0005 && [ "$(grep -c 'Young/Daly' "$d.out")" = 1 ] &&
    [ "${2:-}" = 0.0005 ]
ok $? "--mtbf 0.0005: one line, sqrt(2 x ${1:-?} s x ${2:-?} h) ~ ${3:-?} s" || why "$(grep 'Young/Daly' "$d.out")"
yd=$(grep '"event":"young_daly"' "$d/metrics.jsonl")
near "$(json "$yd" save_cost_s)" "${1:-x}" 0.00051 && near "$(json "$yd" mtbf_h)" 0.0005 0 &&
    near "$(json "$yd" interval_s)" "${3:-x}" 0.0006 && [ "$(json "$yd" told)" = true ] &&
    yd_agrees "$(json "$yd" save_cost_s)" 0.0005 "$(json "$yd" interval_s)" 0.00005 0.0005
ok $? "  the young_daly event has the same figures, and told:true" || why "$yd"
"$FTRAIN" --device cpu $RUN --step-delay-ms 30 --ckpt-every 5 --mtbf 0.0005 --quiet --run-dir "$T/yq" >"$T/yq.out" 2>&1
rc=$?
ok "$([ "$rc" = 0 ] && grep -q '"event":"checkpoint"' "$T/yq/metrics.jsonl" && ! grep -q 'Young/Daly' "$T/yq.out"; echo $?)" \
    "  --quiet: saved, no Young/Daly line" || why "$(cat "$T/yq.out")"
# The default --mtbf 24 h: an interval of tens of seconds, longer than this
# whole run of under a second: no advice, and the event says why.
"$FTRAIN" --device cpu $RUN --step-delay-ms 10 --ckpt-every 5 --run-dir "$T/ys" >"$T/ys.out" 2>&1
rc=$?
yd=$(grep '"event":"young_daly"' "$T/ys/metrics.jsonl")
ok "$([ "$rc" = 0 ] && ! grep -q 'Young/Daly' "$T/ys.out" && [ "$(json "$yd" told)" = false ] &&
    awk -v r="$(json "$yd" run_s)" -v i="$(json "$yd" interval_s)" 'BEGIN { exit !(r != "" && i != "" && r + 0 < i + 0) }'; echo $?)" \
    "a run shorter than its Young/Daly interval prints no advice; its event has told:false, run_s < interval_s" ||
    why "rc $rc" "$yd" "$(grep Young "$T/ys.out")"

# ---- 4. the --fault kinds ---------------------------------------------------------------
# fault KIND@STEP:RANK: a 2-rank run with it; sets rc and err (its stderr).
fault() {
    mpi 2 $RUN --hang-timeout 3 --run-dir "$T/fault-$1" --fault "$1" >"$T/fault.out" 2>"$T/fault.err"
    rc=$?
    err=$(cat "$T/fault.err")
}
fault segv@3:1
is "$rc" 139 "--fault segv@3:1: the job ends with status 139 (SIGSEGV)" || why "$(tail -n 3 "$T/fault.err")"
like "$err" "process rank 1 .* exited on signal 11" "  mpirun names rank 1 and signal 11"
fault abort@3:1
is "$rc" 134 "--fault abort@3:1: the job ends with status 134 (SIGABRT)" || why "$(tail -n 3 "$T/fault.err")"
like "$err" "process rank 1 .* exited on signal 6" "  mpirun names rank 1 and signal 6"
fault stop@3:1
# The stopped rank, should it outlive the job.
stopped=$(rank_pid "$T/fault.out" 1)
[ -n "$stopped" ] && [ "$(cat "/proc/$stopped/comm" 2>/dev/null)" = ftrain ] && kill -KILL "$stopped"
is "$rc" 76 "--fault stop@3:1, --hang-timeout 3: a hang, exit 76" || why "$(tail -n 3 "$T/fault.err")"
like "$err" "hang: rank 1 \(host [^,]+, pid [0-9]+\) (stopped making progress|left no heartbeat)" \
    "  the watchdog names the stopped rank 1"
for bad in explode@3 kill@0; do
    "$FTRAIN" --data line --fault "$bad" >"$T/badf.out" 2>&1
    rc=$?
    ok "$([ "$rc" = 2 ] && grep -q -- "--fault: .*'$bad'" "$T/badf.out"; echo $?)" \
        "--fault $bad: exit $rc (2), a message naming --fault" || why "$(cat "$T/badf.out")"
done

done_testing
