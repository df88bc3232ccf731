#!/bin/sh
# python_watchdog.sh - ftrain_ckpt.Watchdog (python/ftrain_ckpt/watchdog.py):
# hang detection from Python with ftrain's heartbeats, diagnosis, failure
# records and exit status 76, read back with ftrain's own readers
# ($BUILD/tests/tools/run_facts: the supervisor's facts_parse_heartbeat,
# the strict failure_collect, the watchdog's own parse) (TAP).
#
#   1. watchdog_checks.py, one process, no torch: the C rules, the
#      heartbeat line, the diagnosis on faked peers, the records, bad input
#      (its header lists them);
#   2. one process that stops making progress: exit 76 within a bound, the
#      report on stderr, a record ftrain reads;
#   3. torchrun, 3 gloo ranks (watchdog_worker.py, timeout 3 s), SIGSTOP to
#      rank 1: ranks 0 and 2 end with 76 within a bound, each with a "hang"
#      record naming rank 1 and its host; the heartbeats left read as
#      ftrain's (one token, the step reached, rank 1 silent first);
#   4. torchrun, a healthy run with steps of 1.2 s and saves under a 3 s
#      timeout: exit 0, no record, no hang said, the heartbeats removed;
#   5. 3 plain processes (the test's own launcher, so that nothing kills the
#      others; their reduction a TCPStore barrier, which waits for a dead
#      peer as NCCL's collectives do), SIGKILL to rank 1: ranks 0 and 2 end
#      with 76, "peer_lost" records naming rank 1.
#
# Parts 3-5 skip, saying why, when the python ($PYTHON, default
# /usr/bin/python3) has no torch.distributed with gloo; the checks that read
# with ftrain's readers skip when run_facts is not built.
. "$(dirname "$0")/../lib.sh"

PY=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$PY" ] || skip_all "$PY not found (set PYTHON)"
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the source tree
FACTS=$BUILD/tests/tools/run_facts
have_torch=1
"$PY" -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' \
    2>/dev/null || have_torch=0
host=$("$PY" -c "import sys; sys.path.insert(0, '$here/../../python')
from ftrain_ckpt import watchdog; print(watchdog.host_name())")

# ---- 1. one process, the rules and the diagnosis ---------------------------------
mkdir -p "$T/c"
timeout -k 5 120 "$PY" "$here/watchdog_checks.py" "$T/c" >"$T/c.out" 2>&1
rc=$?
n=$(sed -n 's/^plan \([0-9][0-9]*\)$/\1/p' "$T/c.out" | head -n 1)
plan $((${n:-0} + 2 + 3 + 9 + 3 + 4))
tap_from "$T/c.out" watchdog_checks.py
ok $rc "watchdog_checks.py ran to its end (exit $rc)" || why "$(tail -n 20 "$T/c.out")"

# facts RUN_DIR: run_facts' lines in $T/facts (1 when it is not built).
facts() {
    [ -x "$FACTS" ] || return 1
    "$FACTS" "$1" >"$T/facts" 2>&1
}
no_facts="$FACTS not built (make $FACTS)"

# ---- 2. one process, the default verdict ---------------------------------------------
R=$T/one
t0=$(now)
timeout -k 5 60 "$PY" -c "import sys, time
sys.path.insert(0, '$here/../../python')
import ftrain_ckpt as fc
wd = fc.Watchdog(sys.argv[1], timeout=1)
wd.phase(4, 'compute')
time.sleep(30)" "$R" >"$T/one.out" 2>"$T/one.err"
rc=$?
t1=$(now)
ok "$([ "$rc" = 76 ] && below "$(secs "$t0" "$t1")" 15; echo $?)" \
    "one process stuck in the computation of step 4 (timeout 1 s): exit 76 within 15 s (exit $rc, $(secs "$t0" "$t1") s)" ||
    why "$(cat "$T/one.err")"
# (grep -E takes each line of a pattern as a pattern of its own: one line each.)
ok "$(grep -Eq "^ftrain: hang: rank 0 \(host $host, pid [0-9]+\) made no progress for 1\.[0-9] s \(limit 1\.0 s\) in the computation of step 4$" "$T/one.err" &&
    grep -q '^ftrain: hang: ending the job with exit code 76; the newest committed checkpoint is kept$' "$T/one.err"; echo $?)" \
    "its report on stderr, as ftrain's" || why "$(cat "$T/one.err")"
if facts "$R"; then
    ok "$(grep -Eq "^record hang rank 0 host $host pid [0-9]+ step 4 phase compute culprit -1 -$" "$T/facts" &&
        grep -q '^records found 1 kept 1 stale 0 refused 0$' "$T/facts"; echo $?)" \
        "its failure record, read by ftrain's failure_collect" || why "$(cat "$T/facts")"
else
    skip "its failure record, read by ftrain's failure_collect" "$no_facts"
fi

if [ "$have_torch" = 0 ]; then
    skip_n 16 "torch.distributed runs" "$PY has no torch.distributed with gloo (apt-get install python3-torch)"
    done_testing
    exit
fi

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
all_files() { # PREFIX N: PREFIX-0 .. PREFIX-(N-1) exist
    _i=0
    while [ "$_i" -lt "$2" ]; do
        [ -e "$1-$_i" ] || return 1
        _i=$((_i + 1))
    done
}
records() { # RUN N: RUN/failures holds at least N records
    _n=0
    for _f in "$1"/failures/*.json; do
        [ -f "$_f" ] && _n=$((_n + 1))
    done
    [ "$_n" -ge "$2" ]
}
both_ended() { # W: rc-0 and rc-2 written
    [ -s "$1/rc-0" ] && [ -s "$1/rc-2" ]
}
# torchrun_bg RUN W ARGS...: 3 ranks of watchdog_worker.py on this host, in the
# background (TR_PID).  Each rank runs under sh, which writes its exit
# status into W/rc-RANK and outlives torchrun's TERM (so that the status of
# a rank that ends after another is still written).  --redirects 2 --tee 2:
# docs/python.md, "Known issues" (torch 1.13 under Python 3.11).
torchrun_bg() {
    _run=$1 _w=$2
    shift 2
    mkdir -p "$_w"
    # shellcheck disable=SC2016 # the sh -c script expands its own
    WD_W=$_w GLOO_SOCKET_IFNAME=lo timeout -k 5 150 "$PY" -m torch.distributed.run --nnodes 1 \
        --nproc_per_node 3 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$(free_port)" \
        --monitor_interval 1 --redirects 2 --tee 2 --log_dir "$_w/logs" --no_python sh -c \
        '"$0" "$@" & p=$!; trap "" TERM; wait "$p"; s=$?; echo $s >"$WD_W/rc-$RANK"; exit $s' \
        "$PY" "$here/watchdog_worker.py" "$_w" "$_run" "$@" >"$_w/out" 2>&1 &
    TR_PID=$!
    track_bg "$TR_PID"
}

# ---- 3. torchrun, rank 1 stopped -------------------------------------------------------
W=$T/stop R=$T/stop-run
torchrun_bg "$R" "$W" 100000 0.05 3 gloo
if wait_for 90 all_files "$W/stepping" 3; then
    p1=$(cat "$W/ready-1")
    kill -STOP "$p1"
    ok $? "3 ranks under torchrun past step 3; SIGSTOP to rank 1 (pid $p1)"
else
    ok 1 "3 ranks under torchrun past step 3" || why "$(tail -n 30 "$W/out")"
    p1=
fi
t0=$(now)
wait_for 40 both_ended "$W" && wait_for 5 records "$R" 2
t1=$(now)
ok "$(records "$R" 2 && below "$(secs "$t0" "$t1")" 25; echo $?)" \
    "ranks 0 and 2 wrote their records and ended within 25 s of the stop ($(secs "$t0" "$t1") s)" ||
    why "$(ls -la "$R/failures" "$W" 2>&1)" "$(tail -n 30 "$W/out")"
[ -n "$p1" ] && kill -KILL "$p1" 2>/dev/null
wait "$TR_PID"
TR_PID=
is "$(cat "$W/rc-0" 2>/dev/null) $(cat "$W/rc-2" 2>/dev/null)" "76 76" "ranks 0 and 2 exit 76 (FTRAIN_EXIT_HANG)" ||
    why "$(tail -n 30 "$W/out")"
like "$(cat "$W/out")" "ftrain: hang: rank 1 \(host $host, pid $p1\) stopped making progress: its heartbeat has not changed for 1\.5 s \(the process is stopped, dead or cut off\)" \
    "the report on stderr names rank 1, its host and pid, as ftrain's"
if facts "$R"; then
    f=$(cat "$T/facts")
    like "$f" "records found 2 kept 2 stale 0 refused 0" "two records, both read by ftrain's strict reader" || why "$f"
    is "$(grep -c "^record hang rank [02] host $host pid [0-9]* step [0-9]* phase [a-z_]* culprit 1 $host\$" "$T/facts")" 2 \
        "both of kind hang, from ranks 0 and 2, naming rank 1 on $host" || why "$f"
    ok "$([ "$(grep -c '^beat rank-[012] ok ' "$T/facts")" = 3 ] && echo "$f" | grep -q '^tokens 1$'; echo $?)" \
        "the 3 heartbeats left read by the supervisor's rule (facts_parse_heartbeat), one token" || why "$f"
    sd=$(sed -n 's/^step_done \(-*[0-9]*\)$/\1/p' "$T/facts")
    ok "$([ "${sd:--1}" -ge 3 ]; echo $?)" "the supervisor reads the step reached from them (step_done $sd >= 3)" || why "$f"
    like "$f" "leftovers ranks 3 step_done [0-9]+ first_rank 1 first_pid $p1 first_host $host" \
        "ftrain's own parse of the leftovers: rank 1 (pid $p1) went silent first" || why "$f"
else
    skip_n 5 "ftrain's readers on torchrun's run" "$no_facts"
fi

# ---- 4. torchrun, a healthy run of slow steps ----------------------------------------------
W=$T/ok R=$T/ok-run
torchrun_bg "$R" "$W" 5 1.2 3 gloo 2
wait "$TR_PID"
rc=$?
TR_PID=
ok "$([ "$rc" = 0 ] && all_files "$W/done" 3 && [ "$(cat "$W/rc-0" "$W/rc-1" "$W/rc-2" | tr '\n' ' ')" = "0 0 0 " ]; echo $?)" \
    "5 steps of 1.2 s and 2 saves under a 3 s timeout: every rank ends 0 (torchrun $rc)" ||
    why "$(tail -n 30 "$W/out")"
ok "$([ ! -e "$R/failures" ] && ! grep -q 'hang' "$W/out"; echo $?)" "no false alarm: no record, no hang said" ||
    why "$(ls "$R/failures" 2>&1)" "$(grep hang "$W/out")"
ok "$([ ! -e "$R/heartbeat" ]; echo $?)" "a clean end removes the heartbeats" || why "$(ls -la "$R/heartbeat" 2>&1)"

# ---- 5. plain processes, rank 1 killed ---------------------------------------------------------
W=$T/kill R=$T/kill-run
mkdir -p "$W"
port=$(free_port)
pids=""
for r in 0 1 2; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=lo \
        timeout -k 5 120 "$PY" "$here/watchdog_worker.py" "$W" "$R" 100000 0.05 3 store \
        >"$W/out-$r" 2>&1 &
    pids="$pids $!"
    track_bg $!
done
if wait_for 90 all_files "$W/stepping" 3; then
    p1=$(cat "$W/ready-1")
    kill -KILL "$p1"
    ok $? "3 plain ranks past step 3; SIGKILL to rank 1 (pid $p1)"
else
    ok 1 "3 plain ranks past step 3" || why "$(tail -n 20 "$W/out-0")"
fi
t0=$(now)
rcs=""
for p in $pids; do
    wait "$p"
    rcs="$rcs $?"
done
t1=$(now)
ok "$([ "$rcs" = " 76 137 76" ] && below "$(secs "$t0" "$t1")" 25; echo $?)" \
    "ranks 0 and 2 exit 76 within 25 s of the kill (exit statuses$rcs, $(secs "$t0" "$t1") s)" ||
    why "$(tail -n 20 "$W/out-0")" "$(tail -n 20 "$W/out-2")"
like "$(cat "$W/out-0" "$W/out-2")" "ftrain: hang: rank 1 \(host $host, pid $p1\) stopped making progress: its heartbeat has not changed for 1\.5 s \(its process is gone: no such pid on this host\)" \
    "the report says rank 1's process is gone"
if facts "$R"; then
    f=$(cat "$T/facts")
    ok "$(echo "$f" | grep -q 'records found 2 kept 2 stale 0 refused 0' &&
        [ "$(grep -c "^record peer_lost rank [02] host $host .* culprit 1 $host\$" "$T/facts")" = 2 ]; echo $?)" \
        "both records of kind peer_lost naming rank 1 on $host, read by ftrain's strict reader" || why "$f"
else
    skip "peer_lost records read by ftrain's reader" "$no_facts"
fi
done_testing
