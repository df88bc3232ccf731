"""watchdog_worker.py - one rank of tests/python/python_watchdog.sh: a small
gloo training loop under ftrain_ckpt.Watchdog (rank and world from RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT: torchrun's, or the test's own
launcher).

Usage: watchdog_worker.py WORKDIR RUN_DIR STEPS STEP_S TIMEOUT SYNC [SAVE_EVERY]

Writes WORKDIR/ready-<rank> (its pid) before it imports torch and
WORKDIR/stepping-<rank> once step 3 is done; each step marks "compute",
sleeps STEP_S, marks "reduce" and reduces the gradient; every SAVE_EVERY
steps a "save" of 0.2 s and its "save_sync" barrier.  WORKDIR/done-<rank>
after a clean end (wd.close()).

SYNC gloo: the reduction is dist.all_reduce.  SYNC store: it is a barrier
on the TCPStore the process group was made on (rank 0 serves it), which
waits for a dead peer for ever as NCCL's collectives do, where gloo's would
fail at once on the closed connection.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ftrain_ckpt as fc  # noqa: E402

WORK, RUN = sys.argv[1], sys.argv[2]
STEPS, STEP_S, TIMEOUT, SYNC = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
SAVE_EVERY = int(sys.argv[7]) if len(sys.argv) > 7 else 0
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def mark(name, text=""):
    tmp = os.path.join(WORK, f".{name}-{RANK}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(WORK, f"{name}-{RANK}"))


mark("ready", str(os.getpid()))

import datetime  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

store = None
if SYNC == "store":
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), WORLD,
                          RANK == 0, datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=RANK, world_size=WORLD)
else:
    dist.init_process_group("gloo")


def barrier(tag):
    if store is None:
        dist.barrier()
        return
    store.set(f"{tag}/{RANK}", "1")
    store.wait([f"{tag}/{r}" for r in range(WORLD)])


wd = fc.Watchdog(RUN, timeout=TIMEOUT)
w = torch.zeros(256)
for step in range(1, STEPS + 1):
    with wd.step(step):
        g = torch.randn(256) * 0.01
        time.sleep(STEP_S)
        wd.phase(step, "reduce")
        if store is None:
            dist.all_reduce(g)
        else:
            barrier(f"step{step}")
    w -= g
    if step == 3:
        mark("stepping")
    if SAVE_EVERY and step % SAVE_EVERY == 0:
        wd.phase(step, "save")
        time.sleep(0.2)
        wd.phase(step, "save_sync")
        barrier(f"save{step}")
wd.close()
dist.destroy_process_group()
mark("done")
