"""local_tier_worker.py - one rank of tests/python/python_local_tier.sh:
a small deterministic DDP run (gloo, one thread, fixed seeds) with the
node-local tier (ftrain_ckpt.LocalTier).  Started by torch.distributed.run
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), SLURMD_NODENAME naming the
emulated node.

Usage: local_tier_worker.py MODE WORK LOCAL_PATTERN [EXPECT_TIER EXPECT_STEP [UNTIL]]

train    steps 1..6, a local save every 2 steps (keep 2) with partner
         copies, every 2nd local save (step 4) flushed into WORK/run's
         shared tier; rank 0 keeps the state of steps 4 and 6
         (WORK/ref-<step>.pt) for the restores to compare with, and every
         rank loads the flushed step 4 into fresh objects and compares.
restore  fc.resume_point(WORK/run, local=tier), load_state, and every
         tensor compared with WORK/ref-<EXPECT_STEP>.pt bit for bit; the
         tier chosen must be EXPECT_TIER (local or shared).  With UNTIL,
         training goes on to step UNTIL, saving as in train (step 8: local
         save and flush on the new world).
async    2 ranks (nodes a and b), every 2 steps, run with
         FTRAIN_LOCAL_FAULT=slow@1:2,write@1:4: the save of step 2 copies
         1 s late while training goes on (its optimizer.step() must wait,
         a BatchNorm's running stats change in the forward meanwhile); the
         save of step 4 fails on rank 1 (a full disk) in the background,
         and the next save() raises on both ranks, nothing of step 4 left;
         resume_point then takes step 2, equal to the state at its save()
         call (a hash taken then); last, a synchronous save of step 8 is
         sealed when save() returns and restores equal.

Rank 0 writes the checks' results to WORK/res-<MODE>.txt: a line "plan N",
then "PASS name" or "FAIL name: why" per check; each check holds on every
rank (the ranks' verdicts are gathered).
"""
import datetime
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ftrain_ckpt as fc  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MODE, WORK, PATTERN = sys.argv[1], sys.argv[2], sys.argv[3]
RUN = os.path.join(WORK, "run")

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
results = []  # (name, this rank's failure or None)


def check(name, cond, why=""):
    results.append((name, None if cond else (why or "no")))


def build(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return model, opt, sched


def snapshot(model, opt, state):
    """Every tensor save_state() writes, as bytes, and the plain values."""
    from ftrain_ckpt import torch_state as ts
    tensors, _meta = ts.state_tensors(model, opt)
    objects = ts._encode_state(state, tensors)
    out = {k: (str(v.dtype), tuple(v.shape), v.detach().contiguous().numpy().tobytes())
           for k, v in tensors.items()}
    out["__objects__"] = objects
    return out


def digest(model, opt, state):
    """A hash of everything snapshot() holds."""
    import hashlib
    h = hashlib.sha256()
    for k, v in sorted(snapshot(model, opt, state).items()):
        h.update(repr((k, v)).encode())
    return h.hexdigest()[:16]


def differences(a, b):
    diff = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return ", ".join(diff[:5]) + (f" (+{len(diff) - 5})" if len(diff) > 5 else "")


def train_step(ddp, opt, sched, step):
    g = torch.Generator().manual_seed(1000 * step + RANK)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    sched.step()


def loop(tier, model, opt, sched, state, first, last):
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    for step in range(first, last + 1):
        train_step(ddp, opt, sched, step)
        state["seen"]["steps"] = step
        tier.save(step, model, opt, state=state, record={"step": step})
        yield step


def finish():
    got = [None] * WORLD
    dist.all_gather_object(got, results)
    if RANK == 0:
        names = [n for n, _ in results]
        with open(os.path.join(WORK, f".res-{MODE}.tmp"), "w") as f:
            f.write(f"plan {len(names)}\n")
            for i, name in enumerate(names):
                bad = [f"rank {r}: {g[i][1]}" for r, g in enumerate(got)
                       if i >= len(g) or g[i][1] is not None]
                f.write(f"FAIL {name}: {'; '.join(bad)}\n" if bad else f"PASS {name}\n")
        os.rename(os.path.join(WORK, f".res-{MODE}.tmp"), os.path.join(WORK, f"res-{MODE}.txt"))
    dist.barrier()
    fc.exit_now(0)  # no gloo teardown (docs/python.md, "Known issues")


def build_bn(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return model, opt, sched


def async_mode():
    import time
    tier = fc.LocalTier(PATTERN, every=2, keep=3)
    model, opt, sched = build_bn(3)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = {"sched": sched, "seen": {"steps": 0}}
    plain_step = opt.__dict__.get("step")  # the scheduler's counting wrapper of Adam.step
    at_save, guard_wait, raised = {}, None, []
    for step in range(1, 7):
        # One batch on both ranks: the BatchNorm's running stats (each
        # rank's own in DDP) stay equal, as the saved slices must be.
        g = torch.Generator().manual_seed(1000 * step)
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        t = time.perf_counter()
        opt.step()
        if step == 3:
            guard_wait = time.perf_counter() - t
        sched.step()
        state["seen"]["steps"] = step
        try:
            tier.save(step, model, opt, state=state, record={"step": step})
        except Exception as e:  # noqa: BLE001
            raised.append((step, type(e).__name__, str(e)))
            continue
        if tier.due(step):
            at_save[step] = digest(model, opt, state)
    check("optimizer.step() after a background save waited for its slow copy (1 s)",
          guard_wait is not None and guard_wait > 0.5, f"it took {guard_wait}")
    check("the guard is gone once the copy is done: optimizer.step is what it was",
          plain_step is not None and opt.__dict__.get("step") is plain_step, repr(opt.step))
    want = "OSError" if RANK == 1 else "PeerError"
    check("the failed background save of step 4 raises at the next save() (step 6) on both "
          "ranks: OSError (the full disk) on rank 1, PeerError naming rank 1 on rank 0", [(s, k) for s, k, _ in raised] == [(6, want)] and
          ("injected" in raised[0][2] if RANK == 1 else "rank 1 " in raised[0][2]),
          repr(raised))
    names = sorted(os.listdir(tier.root))
    check("nothing of the failed step 4 is left (sealed or not), step 2 is",
          "step-00000002" in names and not [n for n in names if n.endswith("step-00000004")],
          repr(names))
    m2, o2, s2 = build_bn(99)
    st2 = {"sched": s2, "seen": {"steps": -1}}
    path = tier.resume_point()
    rec = fc.load_state(path, m2, o2, state=st2) if path else None
    tier.release()
    check("resume takes local step 2, equal to the state at its save() call though "
          "training went on (hash)", tier.last_resume is not None and
          tier.last_resume[:2] == ("local", 2) and rec == {"step": 2} and
          digest(m2, o2, st2) == at_save.get(2), f"{tier.last_resume} {rec}")
    sd = tier.save(8, model, opt, state=state, record={"step": 8}, async_save=False)
    h8 = digest(model, opt, state)
    check("a synchronous save (async_save=False) is sealed when save() returns",
          sd is not None and os.path.isfile(os.path.join(sd, "manifest.json")) and
          tier.last_save.get("async") == 0.0 and [s.step for s in tier.scan()][:1] == [8],
          f"{sd} {tier.last_save}")
    m3, o3, s3 = build_bn(98)
    st3 = {"sched": s3, "seen": {"steps": -1}}
    rec = fc.load_state(sd, m3, o3, state=st3)
    check("the synchronous save of step 8 loads equal to the state saved",
          rec == {"step": 8} and digest(m3, o3, st3) == h8, f"{rec}")
    tier.close()
    finish()


def main():
    if MODE == "async":
        return async_mode()
    if MODE == "train":
        os.makedirs(os.path.join(RUN, "ckpt"), exist_ok=True)
        tier = fc.LocalTier(PATTERN, every=2, keep=2, shared=RUN, flush_every=2)
        partners = [None] * WORLD
        dist.all_gather_object(partners, (tier.node, tier.partner, tier.srcs))
        check("the partner ring over nodes: rank j of node a keeps rank j of node b's "
              "copy and the reverse",
              partners == [("a", 2, [2]), ("a", 3, [3]), ("b", 0, [0]), ("b", 1, [1])],
              str(partners))
        model, opt, sched = build(1)
        state = {"sched": sched, "seen": {"steps": 0}}
        for step in loop(tier, model, opt, sched, state, 1, 6):
            if step in (4, 6) and RANK == 0:
                torch.save(snapshot(model, opt, state), os.path.join(WORK, f"ref-{step}.pt"))
            if step == 4:
                tier.wait()  # the save (and flush) of step 4 ran in the background
                m2, o2, s2 = build(99)
                st2 = {"sched": s2, "seen": {"steps": -1}}
                path = fc.latest_good(RUN)
                rec = fc.load_state(path, m2, o2, state=st2)
                d = differences(snapshot(model, opt, state), snapshot(m2, o2, st2))
                check("flush: the shared tier's step 4 (ckpt_local_flush of the local step) "
                      "load_state()s bit for bit into fresh objects on every rank",
                      path.endswith("step-00000004") and rec == {"step": 4} and not d,
                      f"{path} {rec} differs in: {d}")
    else:
        expect_tier, expect_step = sys.argv[4], int(sys.argv[5])
        until = int(sys.argv[6]) if len(sys.argv) > 6 else 0
        if until:
            # Two nodes given one directory (no %n) are refused, clearly.
            try:
                fc.LocalTier(os.path.join(WORK, "one-dir"), every=2)
                check("two nodes given one directory are refused", False, "accepted")
            except ValueError as e:
                check("two nodes given one directory are refused", "same directory" in str(e)
                      and "%n" in str(e), str(e))
        tier = fc.LocalTier(PATTERN, every=2, keep=2, shared=RUN, flush_every=2)
        model, opt, sched = build(7)  # other weights: the load must replace them
        state = {"sched": sched, "seen": {"steps": -1}}
        path = fc.resume_point(RUN, local=tier)
        rec = fc.load_state(path, model, opt, state=state) if path else None
        check(f"resume_point chose the {expect_tier} tier's step {expect_step}",
              tier.last_resume is not None and tier.last_resume[:2] == (expect_tier, expect_step)
              and rec == {"step": expect_step}, f"{tier.last_resume} {path} {rec}")
        ref = torch.load(os.path.join(WORK, f"ref-{expect_step}.pt"))
        d = differences(ref, snapshot(model, opt, state))
        check(f"every tensor and value restored on {WORLD} ranks equals step {expect_step}'s "
              f"as saved on 4, bit for bit", not d, f"differs in: {d}")
        if until:
            for _ in loop(tier, model, opt, sched, state, expect_step + 1, until):
                pass
            check(f"trained on to step {until} and saved it on the new world", True)
    tier.close()  # waits for the last save in the background
    finish()


main()
