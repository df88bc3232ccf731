#!/bin/sh
# python_local_tier.sh - the node-local tier from PyTorch
# (ftrain_ckpt.LocalTier; docs/python.md, "The node-local tier"), on two
# emulated nodes: two `python3 -m torch.distributed.run` launches on this
# machine, SLURMD_NODENAME a and b, each with its own local root under $T
# (tests/python/local_tier_worker.py is the training program; TAP).
#
#   0. bad input, one process: keep < 1, every < 1, a root that cannot be
#      made, a '%' other than %n, a root inside the shared tier; one node is
#      said once (no partner copies).
#   1. 4 ranks on a and b, steps 1..6, a local save every 2 steps (keep 2),
#      every 2nd one flushed: both nodes seal steps 4 and 6, each holding its
#      own shards and the partner copies of the other's (the files are
#      listed), `ckptctl verify --local` accepts both roots; the flushed step
#      4 is a shared checkpoint `ckptctl verify` accepts and load_state
#      reads bit for bit (checked by every rank in the run).
#   2. node b lost (its root deleted), a copy of a's root with one partner
#      copy of step 6 damaged (a flipped byte): node a alone (2 ranks, one
#      node) finds the damage, never loads it, and resumes from the shared
#      tier's step 4, saying why; its damaged local step 6 is dropped.
#   3. copies of a's and b's roots, a's copy of shard 2 damaged: nodes a and b
#      (1 rank each) restore step 6, a reading shard 2 from b, saying why.
#   4. node a (1 rank) and a new node c (1 rank, empty root): step 6 from
#      a's own shards and b's partner copies, c getting every shard from a;
#      every tensor equals step 6 as saved on 4 ranks, bit for bit; then
#      training goes on to step 8, saved and flushed on the new world.
#   5. saves in the background (local_tier_worker.py async, nodes a and b,
#      1 rank each, FTRAIN_LOCAL_FAULT=slow@1:2,write@1:4): the optimizer
#      step after a save waits for its slow copy, and the guard goes after
#      it; the step restored equals the state at its save() call (a hash)
#      though training went on; a background save that fails (rank 1's
#      disk full) raises at the next save() on both ranks, nothing of it
#      is left, the step before is what resume uses; a synchronous save
#      (async_save=False) is sealed when save() returns.
#
# Skips, with the reason, when the python ($PYTHON, default /usr/bin/python3)
# lacks torch or numpy, or the library or ckptctl is not built.
. "$(dirname "$0")/../lib.sh"

here=$(cd "$(dirname "$0")" && pwd)
need_python numpy torch
need_ckpt_lib
case $BUILD in /*) bdir=$BUILD ;; *) bdir=$(pwd)/$BUILD ;; esac
[ -x "$bdir/ckptctl" ] || skip_all "$BUILD/ckptctl not built (make $BUILD/ckptctl)"
export GLOO_SOCKET_IFNAME=lo
W=$T/w
mkdir -p "$W"
worker=$here/local_tier_worker.py

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# node TAG NODE NODE_RANK NNODES NPROC PORT ARGS...: one emulated node, a
# torch.distributed.run launch in the background (static rendezvous on
# 127.0.0.1; --redirects 2 --tee 2 for torch 1.13 under Python 3.11, see
# docs/python.md); its wrapper's pid goes to $pids.
node() {
    _tag=$1 _node=$2 _nrank=$3 _nnodes=$4 _nproc=$5 _port=$6
    shift 6
    env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT SLURMD_NODENAME=$_node \
        timeout -k 5 150 "$PY" -m torch.distributed.run --nnodes "$_nnodes" \
        --node_rank "$_nrank" --master_addr 127.0.0.1 --master_port "$_port" \
        --nproc_per_node "$_nproc" --monitor_interval 1 --redirects 2 --tee 2 \
        --log_dir "$T/logs-$_tag" "$worker" "$@" >"$T/$_tag.out" 2>&1 &
    track_bg $!
    pids="$pids $!"
}

wait_all() {
    rcs=""
    for _p in $pids; do
        wait "$_p"
        rcs="$rcs $?"
    done
    rcs=${rcs# }
    pids=""
}

# results FILE WHAT: the worker's checks (plan N, PASS/FAIL lines) as tests.
results() { tap_from "$1" "$2" "$2: "; }

files() { (cd "$1" 2>/dev/null && ls -A | tr '\n' ' ' | sed 's/ $//'); }

# ---- 0. bad input ----------------------------------------------------------
: >"$W/file"
PYTHONPATH=$here/../../python timeout -k 5 60 "$PY" - "$W" >"$T/bad.out" 2>&1 <<'EOF'
import os, sys
import ftrain_ckpt as fc
w = sys.argv[1]
def refused(what, kind, text, **kw):
    try:
        fc.LocalTier(kw.pop("root", os.path.join(w, "bad", "%n")), node="a", **kw)
    except kind as e:
        print(("PASS " if text in str(e) else "FAIL ") + what + ": " + str(e))
        return
    print("FAIL " + what + ": accepted")
refused("keep 0 is refused", ValueError, "at least 1", keep=0)
refused("every 0 is refused", ValueError, "every 0", every=0)
refused("a root that cannot be made is refused, naming it", OSError,
        "cannot create '" + os.path.join(w, "file", "a") + "'", root=os.path.join(w, "file", "%n"))
refused("a '%' other than %n or %% is refused", ValueError, "'%q' is not %n",
        root=os.path.join(w, "x", "%q"))
refused("a local root inside the shared tier is refused", ValueError, "lies inside the shared",
        root=os.path.join(w, "run", "ckpt", "%n"), shared=os.path.join(w, "run", "ckpt"))
said = []
fc.LocalTier(os.path.join(w, "one", "%n"), node="a", log=said.append)
print(("PASS " if len(said) == 1 and "no partner copies" in said[0] else "FAIL ") +
      "one node: said once that there are no partner copies: " + repr(said))
EOF
rc=$?
while IFS= read -r line; do
    case $line in
    "PASS "*) ok 0 "bad input: ${line#PASS }" ;;
    "FAIL "*) ok 1 "bad input: ${line#FAIL }" ;;
    esac
done <"$T/bad.out"
ok $rc "bad input: the checks ran to their end" || why "$(tail -n 20 "$T/bad.out")"

# ---- 1. 4 ranks on nodes a and b ---------------------------------------------
pids=""
port=$(free_port)
node L1a a 0 2 2 "$port" train "$W" "$W/local/%n"
node L1b b 1 2 2 "$port" train "$W" "$W/local/%n"
wait_all
is "$rcs" "0 0" "train: 4 ranks on nodes a and b, 6 steps, exit 0" ||
    why "$(tail -n 30 "$T/L1a.out")" "$(tail -n 30 "$T/L1b.out")"
results "$W/res-train.txt" train
for n in a b; do
    is "$(files "$W/local/$n/step-00000006")" \
        "manifest.json shard-0.ftsh shard-1.ftsh shard-2.ftsh shard-3.ftsh" \
        "node $n's step 6: its 2 ranks' shards and the partner copies of the other node's 2"
    is "$(cd "$W/local/$n" && ls -d step-* .tmp-* .restore .flush 2>/dev/null | tr '\n' ' ')" \
        "step-00000004 step-00000006 " "node $n keeps its newest 2 local steps (keep 2), nothing else"
    "$bdir/ckptctl" verify --local "$W/local/$n" >"$T/verify-$n" 2>&1
    ok $? "ckptctl verify --local: node $n's root verifies" || why "$(cat "$T/verify-$n")"
    like "$(cat "$T/verify-$n")" "step-00000006: ok \\(4 of 4 shards present" \
        "ckptctl verify --local: node $n holds all 4 shards of step 6"
done
"$bdir/ckptctl" verify "$W/run" >"$T/verify-run" 2>&1
ok $? "flush: ckptctl verify accepts the shared tier" || why "$(cat "$T/verify-run")"
is "$(cd "$W/run/ckpt" && ls -d step-* | tr '\n' ' ')" "step-00000004 " \
    "flush: every 2nd local save (step 4) is in the shared tier, one commit, no other"

# Copies of both roots for part 3, one partner copy on a damaged.
mkdir -p "$W/two"
cp -a "$W/local/a" "$W/local/b" "$W/two/"
flip "$W/two/a/step-00000006/shard-2.ftsh"

# ---- 2. node b lost; a damaged partner copy: back to the shared tier ---------
rm -rf "$W/local/b"
mkdir -p "$W/dmg"
cp -a "$W/local/a" "$W/dmg/a"
flip "$W/dmg/a/step-00000006/shard-2.ftsh"
port=$(free_port)
node L2 a 0 1 2 "$port" restore "$W" "$W/dmg/%n" shared 4
wait_all
is "$rcs" 0 "damaged copy: node a alone (2 ranks) ran, exit 0" || why "$(tail -n 30 "$T/L2.out")"
[ -f "$W/res-restore.txt" ] && mv "$W/res-restore.txt" "$W/res-damaged.txt"
results "$W/res-damaged.txt" "damaged copy"
like "$(cat "$T/L2.out")" "local step 6 cannot be restored: shard 2 of step 6 has no good copy on the nodes now running \\(damaged: a: .*dmg/a/step-00000006/shard-2.ftsh does not hash to the manifest" \
    "damaged copy: detected, named, and never loaded"
like "$(cat "$T/L2.out")" "resuming from the shared tier: .*run/ckpt/step-00000004" \
    "damaged copy: the restore falls back to the shared tier's step 4, saying so"
is "$(grep -c 'no partner copies' "$T/L2.out")" 1 "one node: no partner copies, said once"
is "$(cd "$W/dmg/a" && ls -d step-* .restore 2>/dev/null | tr '\n' ' ')" "step-00000004 " \
    "damaged copy: after the resume from step 4 the node dropped its local step 6"

# ---- 3. a damaged copy on a, a good one on b: b's is used --------------------
port=$(free_port)
node L4a a 0 2 1 "$port" restore "$W" "$W/two/%n" local 6
node L4b b 1 2 1 "$port" restore "$W" "$W/two/%n" local 6
wait_all
is "$rcs" "0 0" "good copy elsewhere: nodes a and b, 1 rank each, exit 0" ||
    why "$(tail -n 30 "$T/L4a.out")" "$(tail -n 30 "$T/L4b.out")"
[ -f "$W/res-restore.txt" ] && mv "$W/res-restore.txt" "$W/res-elsewhere.txt"
results "$W/res-elsewhere.txt" "good copy elsewhere"
like "$(cat "$T/L4a.out")" "step 6: the copy of shard 2 on a is damaged, never used: .*two/a/step-00000006/shard-2.ftsh does not hash" \
    "good copy elsewhere: a's damaged copy is named and not used"
like "$(cat "$T/L4a.out")" "resuming from local step 6 \\(a: shards 0-1,3 its own, shards 2 from b; b: shards 0-3 its own\\)" \
    "good copy elsewhere: a reads shard 2 from b, the rest from its own copies"

# ---- 4. node a and a new node c restore step 6 on 2 ranks, then train on ------
port=$(free_port)
node L3a a 0 2 1 "$port" restore "$W" "$W/local/%n" local 6 8
node L3c c 1 2 1 "$port" restore "$W" "$W/local/%n" local 6 8
wait_all
is "$rcs" "0 0" "restore: nodes a and c, 1 rank each, exit 0" ||
    why "$(tail -n 30 "$T/L3a.out")" "$(tail -n 30 "$T/L3c.out")"
[ -f "$W/res-restore.txt" ] && mv "$W/res-restore.txt" "$W/res-fewer.txt"
results "$W/res-fewer.txt" "restore on 2"
like "$(cat "$T/L3a.out")" "resuming from local step 6 \\(a: shards 0-3 its own; c: shards 0-3 from a\\), newer than the shared tier's step 4" \
    "restore: local step 6 from a's shards and b's partner copies, c getting them all from a"
"$bdir/ckptctl" verify "$W/run/ckpt/step-00000008" >"$T/verify-8" 2>&1
ok $? "flush on the new world: ckptctl verify accepts the shared step 8" || why "$(cat "$T/verify-8")"
for n in a c; do
    is "$(files "$W/local/$n/step-00000008")" "manifest.json shard-0.ftsh shard-1.ftsh" \
        "node $n's step 8 (2 writers): its own shard and the other node's partner copy"
done
is "$(cd "$W/local/c" && ls -d step-* .restore .flush 2>/dev/null | tr '\n' ' ')" "step-00000008 " \
    "node c keeps step 8 and nothing of the restore"

# ---- 5. saves in the background: the guard, a failure, sync mode --------------
port=$(free_port)
export FTRAIN_LOCAL_FAULT=slow@1:2,write@1:4
node L5a a 0 2 1 "$port" async "$W" "$W/async/%n"
node L5b b 1 2 1 "$port" async "$W" "$W/async/%n"
unset FTRAIN_LOCAL_FAULT
wait_all
is "$rcs" "0 0" "async: nodes a and b, 1 rank each, exit 0" ||
    why "$(tail -n 30 "$T/L5a.out")" "$(tail -n 30 "$T/L5b.out")"
results "$W/res-async.txt" async

done_testing
