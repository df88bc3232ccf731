"""state_checks.py - a training run's whole state, the resumable sampler and
run directories, for tests/python/python_state.sh.

Usage: state_checks.py WORKDIR
Prints "plan N" first (PLAN below), then "PASS <name>" or "FAIL <name>:
<why>" per check; exits 0 when it ran to its end, 1 when it could not run.

1. save_state/load_state with state=: a StepLR run stopped at step 29 and
   resumed ends with the uninterrupted run's lr and bit-identical weights;
   stateful objects of any kind (a second optimizer, the caller's own
   object with tensors) and plain values (tuples, NaN, dicts with integer
   keys) round-trip; strict lists every mismatch in one error and changes
   nothing; an object whose load_state_dict raises is put back, with the
   ones loaded before it; what the record cannot hold is refused before
   anything is written; strict=False; load_state(None) and an empty root.
2. ResumableSampler: ftrain's permutation (src/nn/sampler.c) for seed 1;
   a run stopped on N simulated ranks after k global batches and resumed
   on M consumes the uninterrupted run's global sequence, batch by batch;
   through save_state; DataLoader workers; a changed dataset length,
   global batch or seed refused by name, leaving the sampler as it was;
   bad arguments.
3. Run directories: resume_point on a missing, empty or fresh run
   directory is None; every function takes the run directory for its
   ckpt/; a root with checkpoints of its own is not a run directory; all
   checkpoints damaged raises; docs/python.md's HowTo on a fresh run.
"""
import copy
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ftrain_ckpt as fc  # noqa: E402

PLAN = 56
from checks import check, raises, results  # noqa: E402,F401  (tests/python/checks.py)


def params_bytes(model):
    return b"".join(p.detach().numpy().tobytes() for p in model.state_dict().values())


# ---- 1. the whole state ------------------------------------------------------
def make_run(seed=3):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    return model, opt, sched


def train(model, opt, sched, first, last):
    for step in range(first, last):
        g = torch.Generator().manual_seed(1000 + step)  # the data: a function of the step
        x = torch.randn(16, 4, generator=g)
        y = x.sum(dim=1, keepdim=True).sin()
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        sched.step()


class Counter:
    """The caller's own stateful object: tensors and plain values."""

    def __init__(self):
        self.seen = torch.zeros(3, dtype=torch.int64)
        self.best = float("inf")
        self.history = {}

    def state_dict(self):
        return {"seen": self.seen.clone(), "best": self.best, "history": dict(self.history),
                "pair": (1, "a")}

    def load_state_dict(self, sd):
        if not isinstance(sd.get("pair"), tuple):
            raise ValueError(f"pair came back as {type(sd.get('pair')).__name__}")
        self.seen, self.best, self.history = sd["seen"].clone(), sd["best"], dict(sd["history"])


class Fussy:
    """An object that refuses every state it is given."""

    def __init__(self):
        self.v = 1

    def state_dict(self):
        return {"v": self.v}

    def load_state_dict(self, sd):
        raise RuntimeError("Fussy refuses")


def state_checks(work):
    steps, stop = 40, 29
    # The uninterrupted run.
    m0, o0, s0 = make_run()
    train(m0, o0, s0, 0, steps)
    # Stopped at 29, saved, resumed in fresh objects.
    root = os.path.join(work, "steplr", "ckpt")
    m1, o1, s1 = make_run()
    train(m1, o1, s1, 0, stop)
    fc.save_state(root, stop, m1, o1, state={"scheduler": s1, "step": stop}, comm=fc.SINGLE)
    m2, o2, s2 = make_run(seed=99)  # other initial weights: all must come from the checkpoint
    st = {"scheduler": s2, "step": 0}
    fc.load_state(fc.resume_point(os.path.dirname(root), comm=fc.SINGLE), m2, o2, state=st)
    check("the plain value 'step' comes back into the state dict", st["step"] == stop, st)
    train(m2, o2, s2, st["step"], steps)
    lr0, lr2 = o0.param_groups[0]["lr"], o2.param_groups[0]["lr"]
    check("StepLR stopped at 29 and resumed: the uninterrupted run's lr", lr0 == lr2,
          f"{lr2!r} vs {lr0!r}")
    check("StepLR stopped at 29 and resumed: bit-identical weights",
          params_bytes(m0) == params_bytes(m2))
    check("the scheduler's whole state is the uninterrupted run's",
          s0.state_dict() == s2.state_dict(), f"{s2.state_dict()} vs {s0.state_dict()}")

    # Objects of every kind and plain values.
    root = os.path.join(work, "objects")
    model, opt, sched = make_run()
    train(model, opt, sched, 0, 3)
    adam2 = torch.optim.Adam(model.parameters(), lr=0.5)
    model(torch.ones(2, 4)).sum().backward()
    adam2.step()
    cnt = Counter()
    cnt.seen += torch.tensor([1, 2, 3])
    cnt.best, cnt.history = 0.25, {"a": [1, 2]}
    values = {"tup": (1, (2.5, "x")), "nan": float("nan"), "ints": {1: "one", 2: [3]},
              "none": None, "nested": {"k": [True, -1]}}
    p = fc.save_state(root, 3, model, opt, comm=fc.SINGLE,
                      state={"adam2": adam2, "counter": cnt, **values})
    m2, o2, _ = make_run(seed=5)
    a2 = torch.optim.Adam(m2.parameters(), lr=0.5)
    c2 = Counter()
    got = {"adam2": a2, "counter": c2, **{k: None for k in values}}
    fc.load_state(p, m2, o2, state=got)
    sa, sb = adam2.state_dict(), a2.state_dict()
    check("a second optimizer round-trips through state=",
          all(torch.equal(sa["state"][i][k], sb["state"][i][k]) for i in sa["state"]
              for k in sa["state"][i] if isinstance(sa["state"][i][k], torch.Tensor))
          and sa["param_groups"] == sb["param_groups"])
    check("the caller's own object round-trips (tensor, float, dict, tuple)",
          torch.equal(c2.seen, cnt.seen) and c2.best == 0.25 and c2.history == {"a": [1, 2]},
          f"{c2.seen} {c2.best} {c2.history}")
    check("plain values round-trip: tuples, NaN, integer keys, None, nested",
          got["tup"] == (1, (2.5, "x")) and got["nan"] != got["nan"] and
          got["ints"] == {1: "one", 2: [3]} and got["none"] is None and
          got["nested"] == {"k": [True, -1]}, got)

    # Strict: every mismatch in one error, nothing changed.
    m3, o3, s3 = make_run(seed=7)
    before = params_bytes(m3)
    c3 = Counter()
    c3.seen = torch.zeros(5, dtype=torch.int64)
    raises("strict: one error names a missing state, an unexpected one and a shape",
           lambda: fc.load_state(p, m3, o3, state={"counter": c3, "sched": s3, "tup": 0}),
           ValueError, "state missing in the checkpoint: sched",
           "not asked for: adam2, nan, ints, none, nested",
           "state['counter']['seen'] is [5] int64 now, [3] int64 in the checkpoint")
    check("a refused load changes nothing", params_bytes(m3) == before and
          c3.seen.shape == (5,) and s3.last_epoch == 0)
    raises("an object saved as an object, given as a value, is named",
           lambda: fc.load_state(p, m3, o3, strict=False, state={"counter": 3}),
           ValueError, "state['counter'] is a plain int value now, a Counter object")
    raises("an object of another class is named",
           lambda: fc.load_state(p, m3, o3, strict=False, state={"counter": Fussy()}),
           ValueError, "state['counter'] is a Fussy now, a Counter in the checkpoint")

    # An object that refuses: every object loaded before it is put back.
    root = os.path.join(work, "fussy")
    model, opt, sched = make_run()
    train(model, opt, sched, 0, 7)
    p2 = fc.save_state(root, 7, model, opt, state={"sched": sched, "fussy": Fussy()},
                       comm=fc.SINGLE)
    m4, o4, s4 = make_run(seed=8)
    before = (params_bytes(m4), copy.deepcopy(s4.state_dict()), o4.param_groups[0]["lr"])
    raises("an object's load_state_dict failing is named",
           lambda: fc.load_state(p2, m4, o4, state={"sched": s4, "fussy": Fussy()}),
           ValueError, "state['fussy'] (Fussy) refused its saved state", "Fussy refuses")
    check("...and the objects loaded before it, the optimizer and the model are untouched",
          (params_bytes(m4), s4.state_dict(), o4.param_groups[0]["lr"]) == before,
          f"{s4.state_dict()} vs {before[1]}")

    # What the record cannot hold: refused before anything is written.
    root = os.path.join(work, "refused")
    raises("a value that is not JSON data is refused, named",
           lambda: fc.save_state(root, 1, model, state={"when": object()}, comm=fc.SINGLE),
           TypeError, "state['when']", "object")
    raises("an object's state that is not JSON data is refused, named",
           lambda: fc.save_state(root, 1, model, state={"odd": OddState()}, comm=fc.SINGLE),
           TypeError, "state['odd'].state_dict()['f']", "function")
    raises("a tensor of a dtype the format lacks is refused, named",
           lambda: fc.save_state(root, 1, state={"half": torch.zeros(2, dtype=torch.float16)},
                                 comm=fc.SINGLE),
           TypeError, "state['half']", "float16")
    raises("a state name with '/' is refused", lambda: fc.save_state(
        root, 1, state={"a/b": 1}, comm=fc.SINGLE), ValueError, "'a/b'")
    check("nothing was written for any refused save",
          not os.path.exists(root) or not any(n.startswith("step-") for n in os.listdir(root)),
          os.listdir(root) if os.path.exists(root) else "")

    # strict=False: what is there is loaded, the rest left alone.
    m5, o5, s5 = make_run(seed=9)
    c5 = Counter()
    st5 = {"counter": c5, "missing": 17}
    fc.load_state(p, m5, o5, state=st5, strict=False)
    check("strict=False loads what is there and leaves the rest",
          torch.equal(c5.seen, cnt.seen) and st5["missing"] == 17, st5)

    # No checkpoint: a clear error, not a TypeError.
    raises("load_state(None) says it is a fresh run", lambda: fc.load_state(None, m5),
           ValueError, "no checkpoint to load", "resume_point")
    empty = os.path.join(work, "empty-root")
    os.makedirs(empty)
    raises("load_state of a root without checkpoints names it",
           lambda: fc.load_state(empty, m5), ValueError, empty, "holds no checkpoint")


class OddState:
    def state_dict(self):
        return {"f": len}

    def load_state_dict(self, sd):
        pass


# ---- 2. the sampler ----------------------------------------------------------
def run_ranks(samplers, batches):
    """Each simulated rank takes its share of the next ``batches`` global
    batches; returns the global batches (the ranks' shares joined in rank
    order), and advances every sampler."""
    out = []
    for _ in range(batches):
        shares = [next(s.iter_batches()) for s in samplers]
        out.append([i for sh in shares for i in sh])
        for s in samplers:
            s.advance()
    return out


def sampler_checks(work):
    RS = fc.ResumableSampler
    # ftrain's own order (src/nn/sampler.c, seed 1, epochs 0 and 1, 20 samples).
    check("epoch 0's permutation is ftrain's (seed 1)",
          fc.sampler.permutation(20, 1, 0) ==
          [1, 4, 8, 17, 12, 5, 6, 16, 14, 11, 19, 13, 15, 0, 2, 10, 7, 3, 18, 9])
    check("epoch 1's permutation is ftrain's (seed 1)",
          fc.sampler.permutation(20, 1, 1) ==
          [6, 10, 15, 14, 3, 4, 13, 7, 0, 18, 16, 11, 9, 12, 17, 2, 5, 8, 1, 19])
    fast = fc.sampler.permutation(1000, 5, 3)
    saved_partners = fc.sampler._partners
    fc.sampler._partners = lambda key, length: None  # as without numpy, or after a rejection
    try:
        slow = fc.sampler.permutation(1000, 5, 3)
    finally:
        fc.sampler._partners = saved_partners
    check("the vectorised permutation and the one-draw-at-a-time one agree",
          fast == slow and sorted(fast) == list(range(1000)))
    length, gb, seed = 103, 10, 42  # 11 batches per epoch, the last one of 3
    total = 3 * 11 + 4
    one = RS(length, gb, seed=seed, rank=0, world_size=1)
    ref = run_ranks([one], total)
    check("one sampler: every epoch is a permutation, the last batch short",
          sorted(i for b in ref[:11] for i in b) == list(range(length)) and
          len(ref[10]) == 3 and sorted(i for b in ref[11:22] for i in b) == list(range(length)))
    check("epochs differ", ref[0] != ref[11])
    bad = []
    for n, m, k in ((3, 2, 7), (2, 3, 11), (4, 1, 13), (1, 5, 5), (3, 7, 20), (8, 3, 1)):
        ranks = [RS(length, gb, seed=seed, rank=r, world_size=n) for r in range(n)]
        seq = run_ranks(ranks, k)
        saved = ranks[0].state_dict()
        if any(r.state_dict() != saved for r in ranks):
            bad.append(f"{n}->{m}: ranks disagree on the state")
        resumed = [RS(length, gb, seed=seed, rank=r, world_size=m) for r in range(m)]
        for r in resumed:
            r.load_state_dict(saved)
        seq += run_ranks(resumed, total - k)
        if seq != ref:
            first = next(i for i, (a, b) in enumerate(zip(seq, ref)) if a != b)
            bad.append(f"{n}->{m} after {k}: global batch {first} is {seq[first]}, "
                       f"uninterrupted {ref[first]}")
    check("stopped on N ranks, resumed on M: the uninterrupted global sequence "
          "(3->2, 2->3, 4->1, 1->5, 3->7, 8->3)", not bad, "; ".join(bad))
    s = RS(length, gb, seed=seed, rank=1, world_size=3)
    check("rank r takes the r-th contiguous share", next(s.iter_batches()) == ref[0][3:6],
          next(s.iter_batches()))
    check("iterating yields the batches' indices; len() counts them",
          list(s) == [i for b in s.iter_batches() for i in b] and len(s) == len(list(s)))

    # Through save_state, and a DataLoader with workers.
    root = os.path.join(work, "sampler", "ckpt")
    s = RS(list(range(length)), gb, seed=seed, rank=0, world_size=2)
    s.advance(14)
    fc.save_state(root, 14, state={"sampler": s}, comm=fc.SINGLE)
    t = RS(length, gb, seed=seed, rank=1, world_size=3)
    fc.load_state(fc.resume_point(root, comm=fc.SINGLE), state={"sampler": t})
    check("the sampler's state goes through save_state/load_state",
          (t.epoch, t.cursor) == (1, 30) and t.steps_done == 14, repr(t))
    ds = torch.utils.data.TensorDataset(torch.arange(length))
    loader = torch.utils.data.DataLoader(ds, batch_sampler=t.batch_sampler(), num_workers=2)
    got = [b[0].tolist() for b in loader]
    check("a DataLoader with 2 workers yields the sampler's batches",
          got == list(t.iter_batches()) and len(got) == 11 - 3, got[:2])

    # Refusals: another dataset length, global batch, seed; the sampler untouched.
    u = RS(length + 1, gb, seed=seed)
    raises("a changed dataset length is refused, with both values",
           lambda: u.load_state_dict(s.state_dict()), ValueError,
           "the dataset length is 104 now, 103 in the saved state")
    u = RS(length, 12, seed=seed)
    u.advance(2)
    raises("a changed global batch is refused, with both values",
           lambda: u.load_state_dict(s.state_dict()), ValueError,
           "global_batch is 12 now, 10 in the saved state")
    check("a refused state leaves the sampler where it was", (u.epoch, u.cursor) == (0, 24))
    u = RS(length + 1, 12, seed=7)
    raises("every difference is named in one error", lambda: u.load_state_dict(s.state_dict()),
           ValueError, "dataset length is 104", "global_batch is 12", "seed is 7")
    u = RS(length, 12, seed=seed)
    raises("through load_state too", lambda: fc.load_state(
        fc.resume_point(root, comm=fc.SINGLE), state={"sampler": u}), ValueError,
        "global_batch is 12 now, 10 in the saved state")
    raises("a global batch of 0 is refused", lambda: RS(10, 0), ValueError, "global_batch 0")
    raises("a global batch larger than the dataset is refused", lambda: RS(10, 11),
           ValueError, "global_batch 11 is larger than the dataset (10 samples)")
    raises("rank not below world_size is refused", lambda: RS(10, 2, rank=3, world_size=3),
           ValueError, "rank 3 is not below world_size 3")
    raises("a float global batch is refused", lambda: RS(10, 2.5), TypeError, "global_batch")
    raises("a damaged state is refused", lambda: RS(103, 10, seed=seed).load_state_dict(
        dict(s.state_dict(), cursor=35)), ValueError, "cursor 35")


# ---- 3. run directories ------------------------------------------------------
def rundir_checks(work):
    run = os.path.join(work, "run")
    check("resume_point of a run directory that does not exist is None",
          fc.resume_point(run, comm=fc.SINGLE) is None)
    os.makedirs(run)
    check("resume_point of an empty directory is None", fc.resume_point(run, comm=fc.SINGLE)
          is None)
    os.makedirs(os.path.join(run, "ckpt"))
    check("resume_point of a fresh run directory (empty ckpt/) is None",
          fc.resume_point(run, comm=fc.SINGLE) is None and fc.is_run_dir(run))

    # docs/python.md's HowTo, on a fresh run and then on a resumed one.
    def howto():
        model, opt, sched = make_run()
        state = {"scheduler": sched, "epoch": 0}
        path = fc.resume_point(run, comm=fc.SINGLE)
        if path is not None:
            fc.load_state(path, model, opt, state=state)
        return path, model, opt, sched, state
    path, model, opt, sched, state = howto()
    check("the HowTo on a fresh run starts from scratch", path is None)
    train(model, opt, sched, 0, 6)
    state["epoch"] = 1
    saved = fc.save_state(run, 6, model, opt, state=state, comm=fc.SINGLE)
    check("save_state into a run directory writes to its ckpt/",
          saved == os.path.join(run, "ckpt", "step-00000006"), saved)
    path, m2, o2, s2, st2 = howto()
    check("the HowTo then resumes from it", path == saved and st2["epoch"] == 1 and
          s2.last_epoch == 6 and params_bytes(m2) == params_bytes(model), path)
    check("latest_good(run_dir) finds it", fc.latest_good(run, comm=fc.SINGLE) == saved)
    got = {"w": None}
    fc.save_state(run, 7, state={"w": np.zeros(3, np.float32)}, comm=fc.SINGLE)
    check("list_checkpoints(run_dir) lists its ckpt/",
          [e.step for e in fc.list_checkpoints(run)] == [6, 7])
    check("prune(run_dir) prunes its ckpt/", fc.prune(run, 1) == 1 and
          [e.step for e in fc.list_checkpoints(run)] == [7])
    check("step_path(run_dir, n) is in its ckpt/",
          fc.step_path(run, 3) == os.path.join(run, "ckpt", "step-00000003"))
    check("load_state(run_dir) loads its newest good checkpoint",
          fc.load_state(run, strict=False, state=got) == {} and got["w"].shape == (3,))
    # A root with checkpoints of its own is a root, even with a ckpt/ in it.
    root = os.path.join(work, "root")
    fc.save(root, 2, {"w": np.zeros(3, np.float32)}, comm=fc.SINGLE)
    os.makedirs(os.path.join(root, "ckpt"))
    check("a directory with step-* of its own is a root, not a run directory",
          not fc.is_run_dir(root) and fc.resume_point(root, comm=fc.SINGLE) ==
          os.path.join(root, "step-00000002"))
    # Every checkpoint damaged: not a fresh run.
    shard = os.path.join(root, "step-00000002", "shard-0.ftsh")
    with open(shard, "r+b") as f:
        f.seek(os.path.getsize(shard) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    raises("resume_point raises when every checkpoint is damaged",
           lambda: fc.resume_point(root, comm=fc.SINGLE), fc.CorruptError)
    afile = os.path.join(work, "a-file")
    open(afile, "w").close()
    raises("resume_point of a regular file names it", lambda: fc.resume_point(afile),
           NotADirectoryError, afile)
    raises("resume_point(None) is a TypeError saying so", lambda: fc.resume_point(None),
           TypeError, "None")


def main():
    if len(sys.argv) != 2:
        print("usage: state_checks.py WORKDIR", file=sys.stderr)
        return 1
    work = sys.argv[1]
    print(f"plan {PLAN}", flush=True)
    torch.set_num_threads(1)
    state_checks(work)
    sampler_checks(work)
    rundir_checks(work)
    print(f"{len(results)} checks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
