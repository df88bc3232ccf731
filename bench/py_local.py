#!/usr/bin/python3
"""py_local.py - the training stall of a node-local save from PyTorch
(ftrain_ckpt.LocalTier), in the background (the default) beside the
synchronous save of the same state.

Two processes on this machine emulate two nodes (a and b, node= given to
LocalTier, each with its own directory under --dir, /dev/shm by default),
torch.distributed over gloo on 127.0.0.1, one torch thread each.  Each rank
holds a model of --mb MiB of float32 parameters (Linear layers of 8192 x
8192, no bias, N(0, 0.02^2)) and an SGD optimizer with weight decay (so
that every step rewrites every parameter; its gradients are a zero that
takes no memory, and it has no state of its own: the state saved is the
parameters).  A step is --work-ms of work, then optimizer.step(): the work
is a 512 x 512 matmul loop on the rank's one thread (the two ranks fill
the two cores, as a CPU run does), or with --idle a sleep (as a run whose
step computes on a GPU leaves the CPU to the helper).  A save every
--every steps (each rank: its own shard, a partner copy to the other node,
the seal), --saves of them timed per mode after one untimed.

Timed per save, the slower rank's:
  stall    the training thread's time blocked in save() plus its wait at
           the optimizer-step guard (optimizer.step() waiting for the copy),
           plus, in the background, any wait at the next save for this one
           to end (late: saves closer together than a save's total time)
  total    save() called to the step sealed on both nodes (the helper's
           end, in the background; save()'s return when synchronous)

Usage: py_local.py [--mb 1024] [--every 4] [--saves 3] [--work-ms 1000]
                   [--idle] [--dir /dev/shm]
Prints key-value lines:
  py_local: state_bytes B ranks 2 nodes 2 work_ms W work busy|idle every E saves N torch V
  py_local_sync: stall_s BEST median M total_s BEST stall_s_per_gib X
  py_local_async: stall_s BEST median M (in_save_s S guard_s G late_s L) total_s BEST median M
                  stall_s_per_gib X
  py_local_ratio: sync_stall / async_stall R
(best and median over the timed saves; per GiB: of the rank's own state.)
Exit status: 0, or 1 with a message on stderr.
"""
import argparse
import datetime
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(1, os.path.join(HERE, "..", "python"))
GIB = 1 << 30


def args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--saves", type=int, default=3)
    ap.add_argument("--work-ms", type=int, default=1000)
    ap.add_argument("--idle", action="store_true")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--root", default="", help=argparse.SUPPRESS)
    return ap.parse_args()


def rank_main_timed(a):
    """As rank_main, with each save's timings from LocalTier.last_save
    after the wait for it (the next save() waits for the one before)."""
    import torch
    import torch.distributed as dist
    import ftrain_ckpt as fc
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                            world_size=2, timeout=datetime.timedelta(seconds=600))
    layers = max(1, a.mb // 256)
    model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, bias=False)
                                  for _ in range(layers)])
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
            p.grad = torch.zeros(1).expand_as(p)
    state_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, weight_decay=1e-4)
    tier = fc.LocalTier(os.path.join(a.root, "%n"), every=a.every, keep=1,
                        node="ab"[a.rank], log=lambda m: None)
    x = torch.randn(512, 512)

    def work():
        if a.idle:
            time.sleep(a.work_ms / 1000.0)
            return
        end = time.perf_counter() + a.work_ms / 1000.0
        while time.perf_counter() < end:
            torch.mm(x, x)

    res = {}
    step = 0
    for mode in ("sync", "async"):
        rows = []
        for _ in range((a.saves + 1) * a.every):
            step += 1
            work()
            opt.step()  # waits at the guard while a background copy runs
            if not tier.due(step):
                continue
            # The save before must have ended (save() waits for it too):
            # waited for here, a wait is that save's stall.
            t = time.perf_counter()
            tier.wait()
            late = time.perf_counter() - t
            if mode == "async" and rows and rows[-1] is None:
                rows[-1] = dict(tier.last_save, late_s=late)
                rows[-1]["stall_s"] += late
            tier.save(step, model, opt, record={"step": step}, async_save=(mode == "async"))
            rows.append(dict(tier.last_save, late_s=0.0) if mode == "sync" else None)
        work()
        opt.step()  # the last save's guard, as the next step would see it
        tier.wait()
        if rows and rows[-1] is None:
            rows[-1] = dict(tier.last_save, late_s=0.0)
        res[mode] = rows[1:]  # the first save of each mode is not timed
        dist.barrier()
    tier.close()
    got = [None, None]
    dist.all_gather_object(got, (state_bytes, res))
    if a.rank == 0:
        report(a, got)
    dist.barrier()
    fc.exit_now(0)  # no gloo teardown (docs/python.md, "Known issues")


def report(a, got):
    import torch
    state_bytes = got[0][0]
    gib = state_bytes / GIB
    per = {}
    for mode in ("sync", "async"):
        n = min(len(g[1][mode]) for g in got)
        rows = []
        for i in range(n):
            r = [g[1][mode][i] for g in got]
            rows.append({k: max(x[k] for x in r) for k in r[0]})
        per[mode] = rows
    print(f"py_local: state_bytes {state_bytes} ranks 2 nodes 2 work_ms {a.work_ms} work "
          f"{'idle' if a.idle else 'busy'} every {a.every} saves {len(per['async'])} "
          f"torch {torch.__version__}")
    s = per["sync"]
    ss = [r["stall_s"] for r in s]
    print(f"py_local_sync: stall_s {min(ss):.3f} median {statistics.median(ss):.3f} "
          f"total_s {min(r['total_s'] for r in s):.3f} stall_s_per_gib {min(ss) / gib:.3f}")
    s = per["async"]
    st = [r["stall_s"] for r in s]
    best = min(s, key=lambda r: r["stall_s"])
    tt = [r["total_s"] for r in s]
    print(f"py_local_async: stall_s {min(st):.3f} median {statistics.median(st):.3f} "
          f"(in_save_s {best['call_s']:.3f} guard_s {best['guard_wait_s']:.3f} "
          f"late_s {best['late_s']:.3f}) "
          f"total_s {min(tt):.3f} median {statistics.median(tt):.3f} "
          f"stall_s_per_gib {min(st) / gib:.3f} (median {statistics.median(st) / gib:.3f})")
    print(f"py_local_ratio: sync_stall / async_stall {min(ss) / max(min(st), 1e-9):.1f}")
    sys.stdout.flush()


def main():
    a = args()
    if a.rank >= 0:
        rank_main_timed(a)
        return 0
    if a.dir is None or not os.path.isdir(a.dir):
        print(f"py_local.py: no directory for the local tier ({a.dir})", file=sys.stderr)
        return 1
    root = tempfile.mkdtemp(prefix="ftrain-py-local.", dir=a.dir)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONDONTWRITEBYTECODE="1")
    env.pop("FTRAIN_LOCAL_FAULT", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--mb", str(a.mb), "--every",
           str(a.every), "--saves", str(a.saves), "--work-ms", str(a.work_ms), "--port",
           str(port), "--root", root] + (["--idle"] if a.idle else [])
    try:
        procs = [subprocess.Popen(cmd + ["--rank", str(r)], env=env) for r in (0, 1)]
        rcs = []
        for p in procs:
            try:
                rcs.append(p.wait(timeout=1800))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                rcs.append(124)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if any(rcs):
        print(f"py_local.py: the ranks exited {rcs}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
