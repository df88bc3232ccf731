#!/bin/sh
# python_binding.sh - the Python binding of libftrain-ckpt (python/ftrain_ckpt,
# docs/python.md), under Debian's python3 with numpy and torch (TAP).
#
#   1. one process (tests/python/binding_checks.py): save/load round trips
#      of every dtype (numpy and torch), slices and byte ranges, zero-copy,
#      refusals, errors carrying the library's code, name and message, a
#      flipped byte in a shard raising CorruptError (and latest_good
#      falling back past it), list/prune, a model and Adam through
#      save_state/load_state, RNG state; integers that do not fit their C
#      type refused naming them (never wrapped: a prune with keep=2**32
#      keeps all), record integers outside int64 refused before anything is
#      written, a refused load_state (optimizer, extra) leaving the model
#      untouched, out= refused saying what it is;
#   2. 3 processes on torch.distributed (gloo, tests/python/dist_worker.py)
#      save one sharded checkpoint, one commit; one of them gets SIGUSR1
#      while it still imports torch (held, not fatal) and all three agree
#      on one stop step;
#   3. 2 processes load the 3-writer checkpoint (whole and resharded halves:
#      the same bytes), see a peer's refused save as PeerError with nothing
#      committed, and agree on one stop step when one gets SIGTERM.
#
# Skips, with the reason, when the python ($PYTHON, default /usr/bin/python3)
# lacks numpy or torch with gloo, or when the library is not built
# ($BUILD/libftrain-ckpt.so.2, or FTRAIN_CKPT_LIB).  Takes 30-60 s on a
# busy 2-core machine (each process imports torch).
. "$(dirname "$0")/../lib.sh"

PY=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$PY" ] || skip_all "$PY not found (set PYTHON)"
"$PY" -c 'import numpy' 2>/dev/null || skip_all "$PY has no numpy (apt-get install python3-numpy)"
"$PY" -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' 2>/dev/null ||
    skip_all "$PY has no torch with torch.distributed on gloo (apt-get install python3-torch)"
need_ckpt_lib
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the source tree

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# launch MODE N: start N ranks of dist_worker.py MODE in the background
# (each bounded by timeout); their wrappers' pids go to $pids.
launch() {
    _port=$(free_port)
    pids=""
    _r=0
    while [ "$_r" -lt "$2" ]; do
        RANK=$_r LOCAL_RANK=$_r WORLD_SIZE=$2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$_port \
            GLOO_SOCKET_IFNAME=lo timeout -k 5 80 "$PY" "$here/dist_worker.py" "$1" "$W" \
            >"$T/$1-$_r.out" 2>&1 &
        pids="$pids $!"
        _r=$((_r + 1))
    done
}

# wait_all MODE: wait for every rank; "rc rc rc" goes to $rcs.
wait_all() {
    rcs=""
    for _p in $pids; do
        wait "$_p"
        rcs="$rcs $?"
    done
    rcs=${rcs# }
}

all_files() { # PREFIX N: true when PREFIX-0 .. PREFIX-(N-1) exist
    _i=0
    while [ "$_i" -lt "$2" ]; do
        [ -e "$1-$_i" ] || return 1
        _i=$((_i + 1))
    done
}

show_out() { # MODE N: the ranks' output, for a failure
    _i=0
    while [ "$_i" -lt "$2" ]; do
        why "--- $1 rank $_i ---" "$(tail -n 20 "$T/$1-$_i.out")"
        _i=$((_i + 1))
    done
}

# ---- 1. one process ------------------------------------------------------
W=$T/one
mkdir -p "$W"
timeout -k 5 80 "$PY" "$here/binding_checks.py" "$W" >"$T/one.out" 2>&1
rc=$?
tap_from "$T/one.out" binding_checks.py
ok $rc "binding_checks.py ran to its end" || why "$(tail -n 20 "$T/one.out")"

if [ "$from_tree" = 1 ]; then
    got=$(env -u FTRAIN_CKPT_LIB BUILD="$BUILD" PYTHONPATH=python "$PY" -c \
        'import ftrain_ckpt; print(ftrain_ckpt.library_path())' 2>&1)
    is "$got" "$FTRAIN_CKPT_LIB" "without FTRAIN_CKPT_LIB the package finds \$BUILD's library in its tree"
fi
got=$(FTRAIN_CKPT_LIB=$T/nowhere.so PYTHONPATH=python "$PY" -c '
import ftrain_ckpt as fc
try:
    fc.library_path()
except fc.LibraryNotFoundError as e:
    print("refused:", e)' 2>&1)
like "$got" "^refused: cannot load libftrain-ckpt.so.2; tried: .*nowhere.so \\(FTRAIN_CKPT_LIB\\): no such file" \
    "a wrong FTRAIN_CKPT_LIB is an error naming it, not a silent fallback"
# Found nowhere: the message names every step tried, ldconfig's cache
# (find_library) too, also when it had no entry.
got=$(env -u FTRAIN_CKPT_LIB BUILD="$T/nobuild" LD_LIBRARY_PATH= PYTHONPATH=python "$PY" -c '
import ftrain_ckpt as fc
try:
    print(fc.library_path())
except fc.LibraryNotFoundError as e:
    print("refused:", e)' 2>&1)
like "$got" "^refused: cannot load libftrain-ckpt.so.2; tried: .*nobuild/libftrain-ckpt.so.2 \(the source tree's \\\$BUILD\): no such file; .*ctypes.util.find_library.*; libftrain-ckpt.so.2 \(the dynamic loader\)" \
    "a library found nowhere: the message names \$BUILD, ldconfig's cache and the loader" || why "$got"

# ---- 2. three writers, one signalled while it starts -------------------------
W=$T/dist
mkdir -p "$W"
launch save 3
if wait_for 60 all_files "$W/ready" 3; then
    kill -USR1 "$(cat "$W/ready-1")"
    ok $? "SIGUSR1 sent to rank 1 of 3 while it imports torch"
else
    ok 1 "the 3 ranks started"
fi
wait_all
is "$rcs" "0 0 0" "3 ranks: save and stop loop exited 0 (none killed by the early USR1)" || show_out save 3
"$PY" - "$W" >"$T/judge2" 2>&1 <<'EOF'
import json, sys
W = sys.argv[1]
print("plan 6")
def check(name, cond, why=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else f": {why}"))
try:
    s = [json.load(open(f"{W}/save-{r}.json")) for r in range(3)]
except (OSError, ValueError) as e:
    check("every rank reported", False, e); sys.exit(0)
check("one commit: every rank got the same step directory", len({x["path"] for x in s}) == 1, s)
check("each rank wrote its own shard; the manifest has 3", all(x["shard_exists"] and x["manifest_world"] == 3 for x in s))
steps = [x["stop_step"] for x in s]
check(f"one stop step agreed by all 3 ranks ({steps})", steps[0] is not None and len(set(steps)) == 1, s)
check("every rank stopped at the agreed step", all(x["at_step"] == x["stop_step"] for x in s), s)
check("the agreed signal is USR1 on every rank", all(x["stop_signal"] == "SIGUSR1" for x in s), s)
req = [x["requested"] for x in s]
check("only rank 1 was signalled (held until its handler was in place)", req == [None, "SIGUSR1", None], req)
EOF
tap_from "$T/judge2" "the 3 writers' reports"
if [ -x "$BUILD/ckptctl" ]; then
    "$BUILD/ckptctl" verify "$W/ckpt/step-00000010" >"$T/verify.out" 2>&1
    ok $? "ckptctl verify accepts the 3-writer checkpoint" || why "$(cat "$T/verify.out")"
else
    skip "ckptctl verify of the 3-writer checkpoint" "$BUILD/ckptctl not built"
fi

# ---- 3. two readers: resharded load, a peer's failure, TERM to one ---------
rm -f "$W"/ready-* "$W"/loop-*
launch load 2
if wait_for 60 all_files "$W/loop" 2; then
    kill -TERM "$(cat "$W/ready-1")"
    ok $? "SIGTERM sent to rank 1 of 2 in its stop loop"
else
    ok 1 "the 2 ranks reached their stop loop"
fi
wait_all
is "$rcs" "0 0" "2 ranks: load and stop loop exited 0" || show_out load 2
"$PY" - "$W" >"$T/judge3" 2>&1 <<'EOF'
import json, sys
W = sys.argv[1]
print("plan 9")
def check(name, cond, why=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else f": {why}"))
try:
    l = [json.load(open(f"{W}/load-{r}.json")) for r in range(2)]
except (OSError, ValueError) as e:
    check("every reader reported", False, e); sys.exit(0)
check("latest_good (rank 0 searched) gave both ranks step 10 of 3 writers",
      all(x["path"].endswith("step-00000010") and x["saved_by"] == 3 for x in l), l)
check("2 readers of 3 writers: every tensor whole, same bytes", all(x["whole_equal"] for x in l), l)
check("2 readers of 3 writers: each rank's half via read_slice, same bytes", all(x["slices_equal"] for x in l), l)
check("both readers read identical bytes", l[0]["bytes_sha256"] == l[1]["bytes_sha256"], l)
check("a refused tensor on rank 1: TypeError there", l[1]["peer_failure"].startswith("TypeError: ") and "float16" in l[1]["peer_failure"], l[1]["peer_failure"])
check("... and PeerError on rank 0, with the library's message", l[0]["peer_failure"].startswith("PeerError: ckpt_commit: ") and "rank 1 failed" in l[0]["peer_failure"], l[0]["peer_failure"])
check("... and nothing committed", not any(x["peer_committed"] for x in l), l)
steps = [x["stop_step"] for x in l]
check(f"one stop step agreed after TERM to rank 1 ({steps})", steps[0] is not None and len(set(steps)) == 1 and all(x["at_step"] == x["stop_step"] for x in l), l)
check("the agreed signal is TERM; only rank 1 got it", [x["stop_signal"] for x in l] == ["SIGTERM"] * 2 and [x["requested"] for x in l] == [None, "SIGTERM"], l)
EOF
tap_from "$T/judge3" "the 2 readers' reports"
done_testing
