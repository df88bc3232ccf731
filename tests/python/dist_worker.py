"""dist_worker.py - one rank of tests/python/python_binding.sh's torch.distributed
checks (gloo; rank and world from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

Usage: dist_worker.py save|load WORKDIR

Each rank first holds the stop signals and writes WORKDIR/ready-<rank>
(holding its pid) before it imports torch, so the script can signal it
while torch still loads; it reports in WORKDIR/<mode>-<rank>.json.

save (3 ranks): every rank saves the same state of every dtype (tensor
   boundaries fall inside the shards) as step 10 of WORKDIR/ckpt, one
   commit; then calls StopGuard.check(step) every step until the ranks
   agree to stop (the script signals one rank only).
load (2 ranks): every rank reads the 3-writer checkpoint whole and its
   half of each tensor with read_slice, and compares with the state
   regenerated here; then a save where one rank passes a dtype the format
   refuses (the other must get PeerError, nothing committed); then the stop
   loop again (the script sends TERM to one rank, after WORKDIR/loop-<rank>
   appears).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ftrain_ckpt as fc  # noqa: E402

fc.hold_stop_signals()
MODE, WORK = sys.argv[1], sys.argv[2]
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def mark(name, text=""):
    tmp = os.path.join(WORK, f".{name}-{RANK}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(WORK, f"{name}-{RANK}"))


mark("ready", str(os.getpid()))

import datetime  # noqa: E402
import hashlib  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def state():
    """The same state on every rank, every dtype, sizes that cut tensors."""
    rng = np.random.default_rng(7)
    return {
        "a.f32": torch.from_numpy(rng.standard_normal((301, 7)).astype(np.float32)),
        "b.f64": rng.standard_normal(999),
        "c.i64": torch.from_numpy(rng.integers(-2**40, 2**40, size=(5, 5, 5), dtype=np.int64)),
        "d.u8": rng.integers(0, 256, size=4097, dtype=np.uint8),
        "e.i32": torch.from_numpy(rng.integers(-2**31, 2**31, size=(3, 3, 3, 37), dtype=np.int32)),
        "f.scalar": np.array(1.25, dtype=np.float32),
    }


def npy(v):
    return v.numpy() if isinstance(v, torch.Tensor) else v


def stop_loop(guard, limit=3000):
    """check() every step until the ranks agree; the agreed step or None."""
    mark("loop")
    for step in range(1, limit + 1):
        time.sleep(0.01)
        stop = guard.check(step)
        if stop is not None:
            return step, stop
    return limit, None


def main():
    guard = fc.StopGuard("USR1")  # the held signal, if any, is taken now
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    root = os.path.join(WORK, "ckpt")
    out = {"rank": RANK, "world": WORLD}
    st = state()
    if MODE == "save":
        path = fc.save(root, 10, st, record={"writers": WORLD})  # default comm: torch.distributed
        out["path"] = path
        out["shard_exists"] = os.path.exists(os.path.join(path, f"shard-{RANK}.ftsh"))
        with fc.Checkpoint(path) as ck:
            out["manifest_world"] = ck.world_size
    elif MODE == "load":
        path = fc.latest_good(root)  # collective: rank 0 searches
        out["path"] = path
        h = hashlib.sha256()
        with fc.Checkpoint(path) as ck:
            out["saved_by"] = ck.world_size
            whole, part = True, True
            for name, v in st.items():
                want = npy(v)
                got = ck.read(name)
                h.update(got.tobytes())
                whole &= got.dtype == want.dtype and got.shape == want.shape and \
                    got.tobytes() == want.tobytes()
                n = want.size
                lo, hi = RANK * n // WORLD, (RANK + 1) * n // WORLD
                part &= ck.read_slice(name, lo, hi).tobytes() == want.reshape(-1)[lo:hi].tobytes()
        out["whole_equal"], out["slices_equal"] = bool(whole), bool(part)
        out["bytes_sha256"] = h.hexdigest()
        # One rank passes what the format refuses: it raises TypeError, the
        # other PeerError, nobody waits for ever, nothing is committed.
        bad = {"x": torch.zeros(8, dtype=torch.float16 if RANK == 1 else torch.float32)}
        try:
            fc.save(os.path.join(WORK, "peer"), 1, bad)
            out["peer_failure"] = "none"
        except fc.PeerError as e:
            out["peer_failure"] = "PeerError: " + str(e)
        except TypeError as e:
            out["peer_failure"] = "TypeError: " + str(e)
        out["peer_committed"] = os.path.exists(os.path.join(WORK, "peer", "step-00000001"))
    step, stop = stop_loop(guard)
    out.update(at_step=step, stop_step=stop,
               stop_signal=guard.stop_signal.name if guard.stop_signal else None,
               requested=guard.requested.name if guard.requested else None)
    with open(os.path.join(WORK, f"{MODE}-{RANK}.json"), "w") as f:
        json.dump(out, f)
    # Leave together, without interpreter teardown: torch 1.13 can hang at
    # exit in ProcessGroupGloo's destructor (docs/python.md).
    dist.barrier()
    fc.exit_now(0)


if __name__ == "__main__":
    sys.exit(main())
